"""Model adapters: one interface over Hugging Face and fairseq models.

:func:`load_adapter` builds the adapter a :class:`~evolution.config.ModelConfig`
describes; :func:`cached_adapter` keeps one per process so that Dask workers
load each model once, never receiving it through the task graph.
"""

from __future__ import annotations

import json
from functools import lru_cache

from evolution.models.base import Adapter, ModelLoadError, Tokenized

__all__ = ["Adapter", "ModelLoadError", "Tokenized", "load_adapter", "cached_adapter"]


def load_adapter(spec: dict) -> Adapter:
    """Build an adapter from a model spec (``ModelConfig.model_dump(mode="json")``)."""
    kind = spec["kind"]
    if kind == "huggingface":
        from evolution.models.huggingface import HuggingFaceAdapter

        return HuggingFaceAdapter(spec["path"], name=spec.get("name"), objective=spec.get("objective"))
    if kind == "fairseq":
        from evolution.models.fairseq import FairseqAdapter

        return FairseqAdapter(spec["path"], data=spec["data"], sentencepiece=spec.get("sentencepiece"),
                              name=spec.get("name"), objective=spec.get("objective"))
    if kind == "shipped":
        from evolution.models.shipped import ShippedAdapter

        return ShippedAdapter(spec["path"], name=spec.get("name"), objective=spec.get("objective"))
    raise ModelLoadError(f"unknown model kind {kind!r}; use huggingface, fairseq or shipped")


@lru_cache(maxsize=4)
def _cached(spec_json: str) -> Adapter:
    return load_adapter(json.loads(spec_json))


def cached_adapter(spec: dict) -> Adapter:
    """The adapter for ``spec``, loaded at most once per process."""
    return _cached(json.dumps(spec, sort_keys=True))
