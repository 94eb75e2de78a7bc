"""Model adapters: one interface over Hugging Face and fairseq models.

:func:`load_adapter` builds the adapter a :class:`~evolution.config.ModelConfig`
describes; :func:`cached_adapter` keeps one per process so that Dask workers
load each model once, never receiving it through the task graph.
"""

from __future__ import annotations

import json
from functools import lru_cache

from evolution.models.base import Adapter, ModelLoadError, Tokenized

__all__ = [
    "Adapter",
    "ModelLoadError",
    "Tokenized",
    "load_adapter",
    "cached_adapter",
    "fairseq_adapter",
    "model_identity",
]


def load_adapter(spec: dict) -> Adapter:
    """Build an adapter from a model spec (``ModelConfig.model_dump(mode="json")``, plus an
    optional ``device``: :mod:`evolution.models.device`; default the CPU)."""
    from evolution.models.kinds import kind_of

    return kind_of(spec["kind"]).build(spec)


def fairseq_adapter(spec: dict, *, cached: bool = True) -> Adapter:
    """The adapter for ``spec`` built from fairseq's classes, for the analyses that need them
    (LRP relevance patches fairseq's attention; pruning trains): a kind whose own adapter is not
    fairseq's through its :attr:`~evolution.models.kinds.Kind.fairseq_adapter` (a shipped model:
    :class:`~evolution.models.shipped_fairseq.ShippedAdapter`), other kinds as :func:`load_adapter`
    (``cached``: loaded at most once per process). Needs fairseq: ``pip install 'evolution[train]'``."""
    from evolution.models.kinds import kind_of

    if kind_of(spec["kind"]).fairseq_adapter is None:
        return cached_adapter(spec) if cached else load_adapter(spec)
    if cached:
        return _cached_fairseq(json.dumps(spec, sort_keys=True))
    return _cached_fairseq.__wrapped__(json.dumps(spec, sort_keys=True))


@lru_cache(maxsize=4)
def _cached_fairseq(spec_json: str) -> Adapter:
    from evolution.models.kinds import kind_of

    spec = json.loads(spec_json)
    kind = kind_of(spec["kind"])
    return kind.build(spec, adapter=kind.fairseq_adapter)


@lru_cache(maxsize=4)
def _cached(spec_json: str) -> Adapter:
    return load_adapter(json.loads(spec_json))


def cached_adapter(spec: dict) -> Adapter:
    """The adapter for ``spec``, loaded at most once per process."""
    return _cached(json.dumps(spec, sort_keys=True))


def model_identity(spec: dict) -> str:
    """A hash of what the model of ``spec`` is: its kind, objective and the content of every file
    it is loaded from (weights, dictionary, subword model; a shipped model's vocabulary), not where
    they are or how its states were extracted. Units that re-run a model and read nothing of the
    representation store (pruning) key on it, so that a new extraction does not redo them."""
    from pathlib import Path

    from evolution.models.kinds import kind_of
    from evolution.provenance import config_hash, tree_hash

    files = {p: tree_hash(spec[p]) for p in ("path", "data", "sentencepiece") if spec.get(p)}
    if spec.get("path"):
        files.update({k: tree_hash(f) for k, f in kind_of(spec["kind"]).identity_files(Path(spec["path"])).items()})
    return config_hash({"kind": spec["kind"], "objective": spec.get("objective"), "files": files})
