"""Representations of given sentences, as the pipeline's extraction writes them: one Zarr
group per model (``hidden`` (layer, token, feature) with the token coordinates, and the
attention group), in memory by default (an fsspec ``memory://`` store) or at any store path.

The extraction is the pipeline's own (:func:`evolution.extract.extract_to_store`, synchronous),
so a dataset from here has the dims, coordinates and attributes of a pipeline run's
``reps.zarr`` group, and every analysis accepts either (:mod:`evolution.api.analyses`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xarray as xr

from evolution.api.model import Model
from evolution.store import StoreError

__all__ = ["Representations", "represent", "open_store", "checked_sentences", "StoreNotFoundError"]

logger = logging.getLogger(__name__)


@dataclass
class Representations(Mapping):
    """The extracted models of one store, by name: ``reps["bert"]`` is that model's dataset
    (:func:`evolution.store.open_representations`; loaded into memory when the store is
    :func:`represent`'s own in-memory one, so that it outlives this object),
    ``reps.attention("bert")`` its attention maps and Kobayashi norms. ``store`` is where they
    live (``memory://...`` for :func:`represent`'s default); ``cache`` where analysis results
    are cached."""

    store: str
    specs: dict[str, dict[str, Any]]
    #: ``model -> its extraction key`` (the store group's fingerprint; unit cache keys build on it)
    extract_keys: dict[str, str]
    cache: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="evolution-cache-")))
    #: whether this object made ``store`` and ``cache`` (a fresh in-memory store, a temporary
    #: cache) and so removes them when closed or collected
    owned: tuple[bool, bool] = (False, True)

    def __post_init__(self) -> None:
        import weakref

        self._finalizer = weakref.finalize(
            self, _release, self.store if self.owned[0] else None, str(self.cache) if self.owned[1] else None
        )

    def close(self) -> None:
        """Free what this object made: an in-memory store's arrays and a temporary cache folder
        (a store at a path you gave stays). Also done when the object is collected; ``with
        represent(...) as reps:`` closes at the end of the block."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or the ``with`` block ended)."""
        return not self._finalizer.alive

    def check_open(self) -> None:
        """Raise a ``ValueError`` saying what to do when this object is closed: what it made (an
        in-memory store, a temporary cache) is gone."""
        if self.closed:
            gone = "its in-memory store and cache" if self.owned[0] else "its cache folder"
            raise ValueError(
                f"{self!r} is closed (reps.close(), or the end of its 'with' block), so {gone} are gone: run the "
                "analyses inside the 'with' block, or call ev.represent(...) again (store=PATH keeps the states "
                "on disk; ev.open_store(PATH) reopens them)"
            )

    def __enter__(self) -> Representations:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, name: str) -> xr.Dataset:
        from evolution.store import open_representations

        if name not in self.specs:
            raise KeyError(f"no model {name!r} here; these are {list(self.specs)}")
        self.check_open()
        ds = open_representations(self.store, name)
        # an in-memory store goes with this object: hand out a copy that outlives it
        return ds.load() if self.owned[0] else ds

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def attention(self, name: str) -> xr.Dataset | None:
        """The attention group of ``name`` (attention, value_norm, weighted_norm, summed_norm), or None."""
        from evolution.store import has_attention, open_attention

        self.check_open()
        if not has_attention(self.store, name):
            return None
        ds = open_attention(self.store, name)
        return ds.load() if self.owned[0] else ds

    def models(self) -> list[Model]:
        return [Model(name=n, spec=s) for n, s in self.specs.items()]

    def __repr__(self) -> str:
        return f"Representations({list(self.specs)}, store={self.store!r})"


def _release(store: str | None, cache: str | None) -> None:
    """Remove an in-memory store's files and a temporary cache folder (a finalizer: no reference
    to the object that owned them)."""
    import shutil

    if store is not None and store.startswith("memory://"):
        import fsspec

        fs = fsspec.filesystem("memory")
        root = store[len("memory://") :].split("/")[0]
        try:
            fs.rm("/" + root, recursive=True)
        except FileNotFoundError:
            pass
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


def _as_models(models) -> list[Model]:
    if isinstance(models, (Model, str, Path)):
        models = [models]
    if isinstance(models, Mapping):
        items = list(models.items())
        for n, m in items:
            if not isinstance(m, Model):
                raise TypeError(
                    f"models[{n!r}] is {type(m).__name__} {m!r}, not a loaded model; load it first: ev.load({str(m)!r})"
                )
        return [Model(name=n, spec={**m.spec, "name": n}) for n, m in items]
    out = list(models)
    if not out:
        raise ValueError("models is empty: pass one or more models loaded with ev.load(...)")
    for i, m in enumerate(out):
        if not isinstance(m, Model):
            hint = f"ev.load({str(m)!r})" if isinstance(m, (str, Path)) else "ev.load(path)"
            raise TypeError(f"models[{i}] is {type(m).__name__} {m!r}, not a loaded model; load it first: {hint}")
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two models share a name ({names}); load them with name=... or pass a dict name -> model")
    return out


def represent(
    models: Model | Sequence[Model] | Mapping[str, Model],
    sentences: str | Sequence[str],
    *,
    attention: bool | int = True,
    norms: bool = True,
    store: str | Path | None = None,
    dtype: str = "float32",
    max_batch_tokens: int = 1024,
    too_long: str = "truncate",
    layers: Sequence[int] | None = None,
    progress: bool = False,
) -> Representations:
    """Hidden states of every layer (and attention) of ``models`` on ``sentences``.

    Parameters
    ----------
    models
        One :class:`~evolution.api.model.Model`, several, or a dict name -> model.
    sentences
        One sentence or several (one per item; not split further).
    attention
        Store attention maps (and, with ``norms``, the Kobayashi et al. 2020 norms) of every
        sentence (True), of the first N sentences (an int), or none (False).
    store
        Where to write (a path or fsspec URL); default a fresh in-memory store.
    layers
        The layers whose states are stored, as ``extract.layers`` (0: the embeddings; -1: the
        last); default all. The others stay unwritten: NaN in ``hidden``, refused by the analyses.

    Returns
    -------
    Representations
        ``reps[name]``: ``hidden`` (layer, token, feature) with the token coordinates of
        ``reps.zarr`` (sentence, position, token_id, token_str, word_id, freq_rank, ...).
    """
    from evolution.config import AttentionConfig, ExtractConfig, resolved_dict
    from evolution.corpus.text import Corpus
    from evolution.extract import extract_to_store
    from evolution.provenance import config_hash, tree_hash, versions
    from evolution.store import STORE_VERSION

    sentences = checked_sentences(sentences)
    models = _as_models(models)
    owned = store is None
    store = str(store) if store is not None else f"memory://evolution-{uuid.uuid4().hex[:12]}/reps.zarr"
    n_att = len(sentences) if attention is True else int(attention or 0)
    config = ExtractConfig(
        dtype=dtype,
        max_batch_tokens=max_batch_tokens,
        too_long=too_long,
        layers=None if layers is None else [int(k) for k in layers],
        attention=AttentionConfig(sentences=n_att, dtype="float32", norms=norms) if n_att else None,
    )
    text = hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()
    corpus = Corpus(sentences=sentences, lines=list(range(1, len(sentences) + 1)), source="<sentences>")
    keys = {}
    for model in models:
        key = config_hash(
            {"sentences": text, "model": model.spec, "extract": config.keyed(), "store_version": STORE_VERSION}
        )
        attrs = {
            "model": model.name,
            "model_config": model.spec,
            "extract_config": resolved_dict(config),
            "model_sha256": tree_hash(Path(model.spec["path"])),
            "versions": versions(),
            "seed": 0,
        }
        extract_to_store(
            model.spec,
            corpus,
            store=store,
            group=model.name,
            fingerprint=key,
            config=config,
            annotation=None,
            attrs=attrs,
            client=None,
            progress=progress,
        )
        keys[model.name] = key
    return Representations(store=store, specs={m.name: m.spec for m in models}, extract_keys=keys, owned=(owned, True))


def checked_sentences(sentences) -> list[str]:
    """``sentences`` as a list of texts, or a ``TypeError`` / ``ValueError`` naming the bad item
    and the fix. A text is a ``str``; a pre-tokenised sentence (a list or tuple of words, each a
    ``str`` without whitespace) is joined by single spaces, where every tokenizer the project
    loads (SentencePiece, WordPiece, byte-level BPE) splits words."""
    if isinstance(sentences, str):
        sentences = [sentences]
    elif not isinstance(sentences, (list, tuple)) and not hasattr(sentences, "__iter__"):
        raise TypeError(f"sentences is {type(sentences).__name__}, not a string or a list of strings")
    out = []
    for i, s in enumerate(sentences):
        if isinstance(s, (list, tuple)):
            bad = [w for w in s if not isinstance(w, str) or not w or any(c.isspace() for c in w)]
            if bad or not s:
                raise TypeError(
                    f"sentences[{i}] is a list, read as words; its words must be non-empty strings "
                    f"without spaces, not {bad[:3] if bad else 'nothing'}: pass the sentence as one "
                    "string instead"
                )
            s = " ".join(s)
        elif not isinstance(s, str):
            raise TypeError(
                f"sentences[{i}] is {type(s).__name__} {s!r}, not a string: pass the text of the "
                "sentence (str), or its words as a list of strings"
            )
        s = s.strip()
        if not s:
            raise ValueError(f"sentences[{i}] is empty: drop it, or pass the text it should hold")
        out.append(s)
    if not out:
        raise ValueError("sentences is empty: pass at least one sentence (a string, or a list of strings)")
    return out


def open_store(path: str | Path, models: Sequence[str] | None = None) -> Representations:
    """The models of an existing representation store (a pipeline run's ``reps.zarr``), as
    :func:`represent` returns them; analysis results are cached beside it
    (``<store's directory>/api-cache``). Anything else is refused with a
    :class:`~evolution.store.StoreError` saying what it is (a metrics store, a run's folder and
    where its states are, one model's group, a file) and what to pass; a missing path with a
    :class:`StoreNotFoundError` (also a ``FileNotFoundError``)."""

    from evolution import location
    from evolution.store import _FINGERPRINT

    path = str(path)
    root = _store_root(path)
    names = sorted(n for n, g in root.groups() if "model_config" in g.attrs)
    if not names:
        _refuse_without_models(path, root)
    if models is not None:
        missing = [m for m in models if m not in names]
        if missing:
            raise KeyError(f"{path} has no model {missing}; it has {names}")
        names = list(models)
    base = Path(location.parent(path)) if not location.is_url(path) else None
    specs = {n: _absolute(_model_config(root[n].attrs, f"{path} group {n}"), base) for n in names}
    keys = {n: str(root[n].attrs.get(_FINGERPRINT, "")) for n in names}
    cache = (
        Path(location.parent(path)) / "api-cache"
        if not location.is_url(path)
        else Path(tempfile.mkdtemp(prefix="evolution-cache-"))
    )
    return Representations(
        store=path, specs=specs, extract_keys=keys, cache=cache, owned=(False, location.is_url(path))
    )


class StoreNotFoundError(StoreError, FileNotFoundError):
    """:func:`open_store`'s path does not exist (a :class:`StoreError` and a ``FileNotFoundError``)."""


_PASS = "ev.open_store takes a representation store: a pipeline run's reps.zarr, or ev.represent(..., store=PATH)'s"


def _store_root(path: str):
    """The root group of the Zarr store at ``path``; a :class:`StoreError` saying what ``path``
    is instead (missing, a file, a run's folder, not a Zarr store) and what to pass."""
    import zarr

    from evolution import location

    try:
        found, folder = location.exists(path), location.is_dir(path)
    except Exception as exc:  # noqa: BLE001 - fsspec / botocore / OS errors alike
        raise StoreError(
            f"{path}: cannot read it ({type(exc).__name__}: {exc}); check the path, and for object storage "
            "the credentials and endpoint in the environment"
        ) from None
    if not found:
        raise StoreNotFoundError(f"{path}: no such file or directory; {_PASS}")
    if not folder:
        raise StoreError(f"{path}: a file, not a Zarr store; {_PASS}")
    try:
        return zarr.open_group(path, mode="r", zarr_format=3)
    except Exception as exc:  # noqa: BLE001 - zarr raises many types for what is not a store
        run = _run_folder_states(path)
        if run is not None:
            raise StoreError(f"{path}: a run folder (a pipeline workdir), not a store: {run}") from None
        raise StoreError(f"{path}: not a Zarr store ({type(exc).__name__}); {_PASS}") from None


def _run_folder_states(path: str) -> str | None:
    """For a pipeline workdir (it holds ``config.resolved.yaml``, ``reps.zarr`` or
    ``metrics.zarr``), where its states are and what to pass; None for any other folder."""
    import yaml

    from evolution import location

    entries = set(location.listdir(path))
    if not entries & {"config.resolved.yaml", "reps.zarr", "metrics.zarr"}:
        return None
    store = location.join(path, "reps.zarr")
    if "config.resolved.yaml" in entries:
        try:
            config = yaml.safe_load(location.read_bytes(location.join(path, "config.resolved.yaml")))
            named = str(((config or {}).get("extract") or {}).get("store") or "")
        except Exception:  # noqa: BLE001 - an unreadable config: the default place
            named = ""
        if named.startswith("…"):  # recorded far from the workdir, by its last component only
            return f"its config.resolved.yaml sets extract.store: {named}; pass that store's full path to ev.open_store"
        if named:
            store = named if location.is_url(named) else os.path.normpath(location.join(path, named))
    if location.exists(store):
        return f"its states are in {store}; pass ev.open_store({store!r})"
    return (
        f"its states would be in {store}, which does not exist (the run has not extracted, or its store was "
        "not kept); run the pipeline's extract stage, then pass that path to ev.open_store"
    )


def _refuse_without_models(path: str, root) -> None:
    """A Zarr group with no model group: say what it is (a metrics store, one model's group, a
    run folder's store of something else) and what to pass."""
    from evolution import location

    attrs = dict(root.attrs)
    if "evolution_metrics" in attrs or "groups" in attrs:  # evolution.metrics.results' root
        states = location.join(location.parent(path), "reps.zarr") if not location.is_url(path) else None
        where = (
            f"pass the run's representation store, {states}"
            if states is not None and location.exists(states)
            else "pass the run's representation store (<workdir>/reps.zarr)"
        )
        groups = [str(g) for g in attrs.get("groups") or []]
        named = ", ".join(groups[:6]) + (f" and {len(groups) - 6} more" if len(groups) > 6 else "") or "none yet"
        raise StoreError(
            f"{path}: a metrics store (the analyses' results: groups {named}), "
            f"not a representation store; read its groups with evolution.metrics.results.open_metrics(path, group), "
            f"and to ev.open_store {where}"
        )
    if "model_config" in attrs:  # one model's group inside a store
        store, model = path.rstrip("/").rpartition("/")[::2]
        raise StoreError(
            f"{path}: one model's group of a representation store; pass the store and the model: "
            f"ev.open_store({store!r}, models=[{model!r}])"
        )
    raise StoreError(f"{path}: a Zarr store with no model group (one whose attributes hold model_config); {_PASS}")


def _absolute(spec: dict, base: Path | None) -> dict:
    """A stored model spec with its file paths made absolute again (a local store records them
    relative to its directory: :func:`evolution.provenance.portable`)."""
    if base is None:
        return spec
    for key in ("path", "data", "sentencepiece"):
        value = spec.get(key)
        if value and not Path(value).is_absolute() and "://" not in str(value):
            spec[key] = str((base / value).resolve())
    return spec


def _model_config(attrs, where: str) -> dict[str, Any]:
    """A store group's ``model_config`` attribute (the model's resolved config entry)."""
    value = attrs.get("model_config")
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: its model_config attribute is not a mapping; re-extract the model")
    return dict(value)
