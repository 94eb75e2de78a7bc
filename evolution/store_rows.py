"""Reading a model's ``hidden`` array by token row, and what rows and layers it holds
(:mod:`evolution.store` holds the layout and re-exports these): ``extract.layers`` keeps some
layers (the array attribute ``stored_layers``), ``extract.rows: needed`` some token rows
(``hidden`` is then (layer, stored_token, feature), the coordinate ``stored_token`` each row's
place on the token axis)."""

from __future__ import annotations

import numpy as np
import zarr

__all__ = ["DIMS_STORED", "read_rows", "resolve_layers", "stored_layers", "stored_rows"]

#: ``hidden``'s dimensions with ``extract.rows: needed``: the stored rows only
DIMS_STORED = ("layer", "stored_token", "feature")


def _open_hidden(store: str, model: str) -> zarr.Array:
    from evolution.store import open_hidden

    return open_hidden(store, model)


def resolve_layers(layers: list[int] | None, n_layers: int, *, model: str = "the model") -> list[int]:
    """``extract.layers`` as sorted distinct indices into 0..``n_layers`` - 1 (negative: from the
    end); None: all. Raises ValueError naming the setting for a layer the model does not have."""
    if layers is None:
        return list(range(n_layers))
    bad = [k for k in layers if not -n_layers <= k < n_layers]
    if bad:
        raise ValueError(
            f"extract.layers: {model} has layers 0..{n_layers - 1} (0: the embeddings; -1: the last), "
            f"not {', '.join(map(str, bad))}; drop them, or count from the end (-1, -2, ...)"
        )
    return sorted({k % n_layers for k in layers})


def stored_layers(store: str, model: str) -> list[int] | None:
    """The layers of ``model``'s ``hidden`` whose states were written (all of 0..L unless
    ``extract.layers`` chose some), or None when it is not extracted (yet)."""
    try:
        arr = _open_hidden(store, model)
    except Exception:  # noqa: BLE001 - missing or unreadable: not extracted
        return None
    return _stored(arr)


def _stored(arr: zarr.Array) -> list[int]:
    layers = arr.attrs.get("stored_layers")
    if not isinstance(layers, list):  # not set: every layer is stored
        return list(range(arr.shape[0]))
    return [int(k) for k in layers]  # type: ignore[arg-type]


def read_rows(store: str, model: str, layer: int, rows: np.ndarray, *, block_rows: int = 65536) -> np.ndarray:
    """``hidden[layer, rows, :]`` as float32 (n, d), in the order of ``rows`` (repeats allowed),
    reading only the chunks needed.

    Dense selections are read ``block_rows`` stored rows at a time (rounded to whole chunks),
    each block's selected rows widened into the float32 result: the peak is the result plus
    one float16 block, not the whole stored range in float16 and float32 besides (at MiniLM
    paper size, 848,637 of 993,345 rows of 384: the 1.21 GiB result and a 48 MiB block, instead
    of 0.71 + 1.42 GiB of range besides the result). float16 -> float32 is exact, so
    the values equal a plain ``hidden[layer][rows]``.
    """
    arr = _open_hidden(store, model)
    if "stored_layers" in arr.attrs and layer not in _stored(arr):
        raise ValueError(
            f"{model} layer {layer} is not stored in {store} (extract.layers kept {_stored(arr)}); "
            "add it to extract.layers and rerun the extract stage, or leave this analysis out"
        )
    rows = np.asarray(rows, dtype=np.int64)
    kept = _stored_rows(store, model, arr)
    if kept is not None:  # extract.rows: needed: token-axis rows -> rows of the array
        rows = _positions(kept, rows, store=store, model=model)
    d = arr.shape[2]
    if len(rows) == 0:
        return np.empty((0, d), dtype=np.float32)
    lo, hi = int(rows.min()), int(rows.max()) + 1
    if lo < 0 or hi > arr.shape[1]:
        raise IndexError(
            f"{model} layer {layer}: rows {lo}..{hi - 1} outside the {arr.shape[1]} stored tokens of {store}; "
            "the analysis' inputs come from another extraction: rerun the metrics stage with --force metrics"
        )
    if len(rows) <= (hi - lo) // 4:  # sparse: zarr reads just the chunks holding them
        return np.asarray(arr.get_orthogonal_selection((layer, rows, slice(None))), dtype=np.float32)
    chunk = int(arr.chunks[1])
    step = max(chunk, block_rows // chunk * chunk)
    order = np.argsort(rows, kind="stable")
    ranked = rows[order]
    out = np.empty((len(rows), d), dtype=np.float32)
    start = lo // chunk * chunk
    for b0 in range(start, hi, step):
        b1 = min(b0 + step, hi)
        i0, i1 = np.searchsorted(ranked, [b0, b1])
        if i0 == i1:
            continue
        block = np.asarray(arr[layer, b0:b1])
        out[order[i0:i1]] = block[ranked[i0:i1] - b0]
    return out


def stored_rows(store: str, model: str) -> np.ndarray | None:
    """The token-axis rows whose states ``extract.rows: needed`` stored (sorted, int64), or None
    when every token's are (or ``model`` is not extracted)."""
    try:
        arr = _open_hidden(store, model)
    except Exception:  # noqa: BLE001 - missing or unreadable: not extracted
        return None
    return _stored_rows(store, model, arr)


def _stored_rows(store: str, model: str, arr: zarr.Array) -> np.ndarray | None:
    names = getattr(arr.metadata, "dimension_names", None) or ()
    if tuple(names) != DIMS_STORED:
        return None
    return np.asarray(zarr.open_array(store, path=f"{model}/stored_token", mode="r", zarr_format=3)[:], np.int64)


def _positions(kept: np.ndarray, rows: np.ndarray, *, store: str, model: str) -> np.ndarray:
    """Where each token-axis row of ``rows`` sits among the ``kept`` rows; refuses one not kept."""
    pos = np.searchsorted(kept, rows)
    found = pos < len(kept)
    found[found] = kept[pos[found]] == rows[found]
    if not found.all():
        missing = rows[~found]
        raise ValueError(
            f"{model}: {len(np.unique(missing))} token rows (e.g. {int(missing[0])}) are not stored in {store}: "
            "extract.rows: needed kept only the rows the analyses read when it ran, and the metrics settings "
            "have changed since; rerun the extract stage (--force extract), or set extract.rows: null"
        )
    return pos
