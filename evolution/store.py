"""The Zarr layout of extracted representations (zarr format 3, opened by xarray).

::

    reps.zarr/<model>/hidden             (layer, token, feature)  float32|float16
                                          chunks (1, chunk_tokens, feature)
    reps.zarr/<model>                    coordinates on token: sentence, position,
                                          token_id, token_str (the piece the model saw:
                                          <unk> outside its vocabulary), token_text (its
                                          text), word_id, is_special, freq_rank,
                                          is_unknown; with annotated text also upos,
                                          xpos, deprel ("" off it) and head (CoNLL-U,
                                          0 = root, -1 off it), and the attribute
                                          annotated_from (its first sentence, -1: none);
                                          for this project's trained models train_count
                                          (the token's count in the training split) and
                                          train_rank (its type's rank there; 1 = most
                                          frequent, 0 = unseen; attribute train_types);
                                          coordinate layer = 0..L; with extract.layers
                                          the array attribute stored_layers lists the
                                          layers written (the others: no chunks, NaN)
    reps.zarr/<model>/hidden             with extract.rows: needed, (layer, stored_token,
                                          feature) instead: only the rows the analyses
                                          read, the index coordinate stored_token giving
                                          each one's row on the token axis (whose
                                          coordinates are all kept)
    reps.zarr/<model>/attention/attention (sentence, layer, head, query, key)
                                          chunks (1, L, H, T, T), padded to T
    reps.zarr/<model>/attention          sentence (corpus index), length (input
                                          length incl. special tokens), input_id
                                          (sentence, key), -1 where padded; with
                                          extract.attention.norms (Kobayashi et al.
                                          2020): value_norm (sentence, layer, head, key),
                                          weighted_norm (as attention), summed_norm
                                          (sentence, layer, query, key)

The model width dimension is called ``feature`` because a variable may not
share its name with a dimension in xarray (``hidden`` is the variable).
This module is the one place that knows these paths: open with
:func:`open_representations` / :func:`open_attention` (xarray),
:func:`open_hidden` / :func:`read_rows` (zarr, for tasks), or directly
with ``xr.open_zarr(store, group=model, consolidated=False)``.

A group is trusted only when its attribute ``evolution_complete`` equals its
``evolution_fingerprint``; that attribute is written last, after every chunk,
so an interrupted write is detected and redone, never read.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import xarray as xr
import zarr

from evolution.store_rows import (  # the rows and layers a group holds, read by row (re-exported)
    DIMS_STORED,
    read_rows,
    resolve_layers,
    stored_layers,
    stored_rows,
)

logger = logging.getLogger(__name__)

__all__ = [
    "STORE_VERSION",
    "hidden_path",
    "attention_path",
    "open_hidden",
    "open_attention_array",
    "read_rows",
    "n_layers",
    "resolve_layers",
    "stored_layers",
    "has_attention",
    "DIMS_HIDDEN",
    "DIMS_STORED",
    "stored_rows",
    "DIMS_ATTENTION",
    "open_representations",
    "open_attention",
    "group_is_complete",
    "check_store",
    "store_entries",
    "StoreError",
    "mark_complete",
    "create_hidden_group",
    "create_attention_group",
]

#: Bumped when the store layout gains something, so that older groups are redone (2: annotation
#: labels as token coordinates; 3: train_rank; 4: text coordinates as Zarr v3 strings,
#: portable_strings; 5: token_str as the model saw it, token_text, is_unknown, the shipped
#: tokenizer's apostrophe). Part of every extraction key (the pipeline's and the API's).
STORE_VERSION = 5

DIMS_HIDDEN = ("layer", "token", "feature")
DIMS_ATTENTION = ("sentence", "layer", "head", "query", "key")
_COMPLETE = "evolution_complete"
_FINGERPRINT = "evolution_fingerprint"


def hidden_path(model: str) -> str:
    """Path of a model's ``hidden`` array inside the store."""
    return f"{model}/hidden"


def attention_path(model: str) -> str:
    """Path of a model's attention group inside the store."""
    return f"{model}/attention"


def open_hidden(store: str, model: str, *, mode: str = "r") -> zarr.Array:
    """The ``hidden`` array (layer, token, feature) of ``model`` as a zarr array."""
    return zarr.open_array(store, path=hidden_path(model), mode=mode, zarr_format=3)


def open_attention_array(store: str, model: str, *, mode: str = "r", name: str = "attention") -> zarr.Array:
    """An array of ``model``'s attention group as a zarr array: ``attention`` (sentence, layer,
    head, query, key), or one of the norms (``value_norm``, ``weighted_norm``, ``summed_norm``)."""
    return zarr.open_array(store, path=f"{attention_path(model)}/{name}", mode=mode, zarr_format=3)


def has_attention(store: str, model: str) -> bool:
    """Whether ``model`` was extracted with attention maps."""
    try:
        zarr.open_group(store, path=attention_path(model), mode="r", zarr_format=3)
    except Exception:  # noqa: BLE001 - missing: extracted without attention
        return False
    return True


def n_layers(store: str, model: str) -> int | None:
    """Length of ``model``'s layer axis (L + 1), or None when it is not extracted (yet)."""
    try:
        return int(open_hidden(store, model).shape[0])
    except Exception:  # noqa: BLE001 - missing or unreadable: not extracted
        return None


def _open_root(store: str, mode: Literal["r", "r+", "a", "w", "w-"] = "a") -> zarr.Group:
    return zarr.open_group(store, mode=mode, zarr_format=3)


class StoreError(ValueError):
    """The store path holds something this pipeline did not write."""


def store_entries(path: str, *, key: str) -> list[str]:
    """The names directly under a store location ([] when nothing is there yet), for the
    checks of the representation and metrics stores. Raises :class:`StoreError` naming
    ``key`` (the config entry) for a file, or for a location that cannot be read
    (credentials, endpoint)."""
    from evolution import location

    try:
        if not location.exists(path):
            return []
        if not location.is_dir(path):
            raise StoreError(
                f"{path}: {key} is a file, not a Zarr store; point {key} elsewhere, or move it away if it is not needed"
            )
        return location.listdir(path)
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore / fsspec / OS errors alike
        raise StoreError(
            f"{path}: cannot read {key} ({type(exc).__name__}: {exc}); check the path, "
            "and for object storage the credentials and endpoint in the environment"
        ) from None


def check_store(store: str) -> None:
    """Refuse a store path that holds something else than this pipeline's representations:
    a file, a directory (or URL prefix) that is not a Zarr store, or a Zarr store with
    members that are not model groups written here, or a location that cannot be read
    (credentials, endpoint). Nothing is modified."""
    if not store_entries(store, key="extract.store"):
        return
    fix = "point extract.store elsewhere, or move it away if it is not needed"
    try:
        root = zarr.open_group(store, mode="r", zarr_format=3)
        members = list(root.members())
    except Exception as exc:  # noqa: BLE001 - zarr raises many types for what is not a store
        raise StoreError(
            f"{store}: extract.store exists but is not a readable Zarr store ({type(exc).__name__}: {exc}); {fix}"
        ) from None
    foreign = [name for name, m in members if not isinstance(m, zarr.Group) or _FINGERPRINT not in m.attrs]
    if foreign:
        raise StoreError(
            f"{store}: extract.store holds a Zarr store this pipeline did not write (members "
            f"{', '.join(sorted(foreign)[:5])}); {fix}"
        )


def group_is_complete(store: str, group: str, fingerprint: str) -> bool:
    """Whether ``group`` exists, was fully written, and for this ``fingerprint``."""
    try:
        g = zarr.open_group(store, mode="r", path=group, zarr_format=3)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, KeyError, ValueError):
        return False
    return g.attrs.get(_COMPLETE) == fingerprint and g.attrs.get(_FINGERPRINT) == fingerprint


def mark_complete(store: str, group: str, fingerprint: str) -> None:
    """Record that ``group`` is fully written; call after every chunk is written."""
    g = zarr.open_group(store, mode="r+", path=group, zarr_format=3)
    g.attrs[_COMPLETE] = fingerprint


def portable_strings(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with every fixed-width text variable and coordinate (NumPy ``U`` / ``S``: Zarr
    writes them as ``fixed_length_utf32`` / ``null_terminated_bytes``, data types without a
    Zarr v3 specification that other Zarr readers may not open) as variable-length UTF-8
    strings (Zarr v3's ``string``, which zarr-python, zarrita and tensorstore read alike)."""

    def fix(v):
        if v.dtype.kind == "S":
            return v.copy(data=np.array([x.decode("utf-8") for x in v.values.ravel()], dtype=object).reshape(v.shape))
        if v.dtype.kind == "U":
            return v.copy(data=v.values.astype(object))
        return v

    strings = [n for n, v in ds.variables.items() if v.dtype.kind in "US"]
    if not strings:
        return ds
    out = ds.copy()
    for name in strings:
        fixed = fix(ds.variables[name])
        if name in ds.coords:
            out = out.assign_coords({name: fixed})
        else:
            out[name] = fixed
    return out


def _write_skeleton(ds: xr.Dataset, store: str, group: str) -> None:
    # compute=False writes metadata and the eager (coordinate) arrays; the dask
    # placeholder data variables stay unwritten, to be filled region by region.
    portable_strings(ds).to_zarr(store, group=group, mode="w", compute=False, zarr_format=3, consolidated=False)


def create_hidden_group(
    store: str,
    group: str,
    *,
    columns: dict[str, np.ndarray],
    n_layers: int,
    d_model: int,
    chunk_tokens: int,
    dtype: str,
    attrs: dict[str, Any],
    fingerprint: str,
    compressor: str = "none",
    layers: list[int] | None = None,
    rows: np.ndarray | None = None,
) -> None:
    """(Re)create ``group`` with token coordinates and an unwritten ``hidden`` array.

    ``n_layers`` counts layer 0, i.e. L + 1. ``layers`` (sorted indices into 0..L; None: all)
    become the array attribute ``stored_layers``: the extraction writes only their chunks.
    ``rows`` (sorted token-axis rows; None: all) make ``hidden`` (layer, stored_token, feature),
    one row per kept token, ``stored_token`` its row on the token axis (``extract.rows: needed``).
    ``compressor`` is ``"none"`` or ``"zstd"`` (zarr's default codec; on float32 hidden states
    it saved 8% of the bytes and made writing 2.7x slower, measured here).
    """
    import dask.array as da

    n_tokens = len(columns["token_id"]) if rows is None else len(rows)
    chunk = max(1, min(chunk_tokens, n_tokens))
    hidden = da.empty((n_layers, n_tokens, d_model), dtype=dtype, chunks=(1, chunk, d_model))
    coords: dict[str, Any] = {name: ("token", values) for name, values in columns.items()}
    coords["layer"] = ("layer", np.arange(n_layers, dtype=np.int32))
    if rows is not None:
        coords["stored_token"] = ("stored_token", np.asarray(rows, dtype=np.int64))
    dims = DIMS_HIDDEN if rows is None else DIMS_STORED
    ds = xr.Dataset({"hidden": (dims, hidden)}, coords=coords, attrs={**attrs, _FINGERPRINT: fingerprint})
    ds["hidden"].encoding["fill_value"] = np.nan
    if layers is not None and list(layers) != list(range(n_layers)):
        ds["hidden"].attrs["stored_layers"] = [int(k) for k in layers]
    if compressor == "none":
        ds["hidden"].encoding["compressors"] = None
    _write_skeleton(ds, store, group)


def create_attention_group(
    store: str,
    model: str,
    *,
    sentence: np.ndarray,
    inputs: list[list[int]],
    n_layers: int,
    n_heads: int,
    dtype: str,
    attrs: dict[str, Any],
    norms: bool = False,
) -> None:
    """(Re)create ``model``'s attention group (``<model>/attention``) for the sentences given.

    ``inputs`` are the model input ids (special tokens included) per sentence.
    """
    import dask.array as da

    lengths = np.array([len(x) for x in inputs], dtype=np.int32)
    t = int(lengths.max())
    input_id = np.full((len(inputs), t), -1, dtype=np.int32)
    for k, x in enumerate(inputs):
        input_id[k, : len(x)] = x
    att = da.empty((len(inputs), n_layers, n_heads, t, t), dtype=dtype, chunks=(1, n_layers, n_heads, t, t))
    ds = xr.Dataset(
        {"attention": (DIMS_ATTENTION, att), "input_id": (("sentence", "key"), input_id)},
        coords={
            "sentence": ("sentence", sentence.astype(np.int32)),
            "length": ("sentence", lengths),
            "layer": ("layer", np.arange(1, n_layers + 1, dtype=np.int32)),
        },
        attrs=attrs,
    )
    if norms:  # Kobayashi et al. (2020), evolution.models.base.attention_norms
        n = len(inputs)
        ds["value_norm"] = (
            ("sentence", "layer", "head", "key"),
            da.empty((n, n_layers, n_heads, t), dtype=dtype, chunks=(1, n_layers, n_heads, t)),
            {"long_name": "||f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h"},
        )
        ds["weighted_norm"] = (
            DIMS_ATTENTION,
            da.empty((n, n_layers, n_heads, t, t), dtype=dtype, chunks=(1, n_layers, n_heads, t, t)),
            {"long_name": "||alpha_ij f_h(x_j)||"},
        )
        ds["summed_norm"] = (
            ("sentence", "layer", "query", "key"),
            da.empty((n, n_layers, t, t), dtype=dtype, chunks=(1, n_layers, t, t)),
            {"long_name": "||sum_h alpha_ij f_h(x_j)||"},
        )
    for name in ds.data_vars:
        if name != "input_id":
            ds[name].encoding["fill_value"] = np.nan
    _write_skeleton(ds, store, attention_path(model))


def open_representations(store: str, model: str, *, check: bool = True) -> xr.Dataset:
    """The ``hidden`` dataset of one model: ``hidden`` lazily (dask-backed),
    token coordinates in memory.

    With ``check``, refuse a group that was not completely written.
    """
    if check:
        g = zarr.open_group(store, mode="r", path=model, zarr_format=3)
        if g.attrs.get(_COMPLETE) != g.attrs.get(_FINGERPRINT):
            raise ValueError(
                f"{store}: group {model!r} is incomplete (an interrupted extraction); rerun the pipeline to finish it"
            )
    ds = xr.open_zarr(store, group=model, consolidated=False)
    # token coordinates are small; load them so that boolean selections work
    return ds.assign_coords({name: ds[name].load() for name in ds.coords if name not in ds.indexes})


def open_attention(store: str, model: str) -> xr.Dataset:
    """The attention dataset of one model (``<model>/attention``), lazily."""
    return xr.open_zarr(store, group=attention_path(model), consolidated=False)
