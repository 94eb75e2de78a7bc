"""Load a model for the notebook API: the same model kinds, validation and adapters as a config's
``models:`` entries (:class:`evolution.config.ModelConfig`, :func:`evolution.models.load_adapter`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Model", "load", "infer_kind"]


@dataclass(frozen=True)
class Model:
    """A model the API can run: its ``name`` and ``spec`` (a config ``models:`` entry with every
    default filled in: what the pipeline's workers load). The adapter is loaded once per process
    (:func:`evolution.models.cached_adapter`) on first use."""

    name: str
    spec: dict[str, Any]

    @property
    def adapter(self):
        from evolution.models import cached_adapter

        return cached_adapter(self.spec)

    @property
    def objective(self) -> str | None:
        return self.spec.get("objective") or self.adapter.objective

    def tokenize(self, sentence: str) -> list[str]:
        """The model's pieces of ``sentence`` (content tokens, no special tokens)."""
        return list(self.adapter.tokenize(sentence).pieces)

    def __repr__(self) -> str:
        where = self.spec.get("hub_id") or self.spec.get("path")
        return f"Model({self.name!r}, kind={self.spec['kind']!r}, path={str(where)!r})"


def infer_kind(path: str | Path) -> str:
    """``shipped`` for a directory with ``model.json`` and ``model.safetensors``, ``huggingface``
    for one with ``config.json`` or for a hub id, ``fairseq`` for a checkpoint file
    (:func:`evolution.models.kinds.infer_kind`)."""
    from evolution.models.kinds import infer_kind as infer

    return infer(path)


def load(
    path: str | Path,
    *,
    kind: str | None = None,
    name: str | None = None,
    data: str | Path | None = None,
    sentencepiece: str | Path | None = None,
    objective: str | None = None,
    device: str = "auto",
) -> Model:
    """A model from a Hugging Face directory or hub id, a shipped model directory, or a fairseq
    checkpoint (with ``data``, the directory of its dictionary, and optionally ``sentencepiece``).
    ``device``: ``auto`` (a CUDA GPU where torch sees one, else the CPU), ``cpu``, ``cuda``, ``cuda:N``.

    Examples
    --------
    >>> bert = load("sentence-transformers/all-MiniLM-L6-v2")        # doctest: +SKIP
    >>> mt = load("results/bible-full/models/mt")                       # doctest: +SKIP
    """
    from pydantic import ValidationError

    from evolution.config import ConfigError, ModelConfig, resolved_dict

    kind = kind or infer_kind(path)
    name = name or (
        Path(str(path)).name if kind != "huggingface" or Path(str(path)).exists() else str(path).rsplit("/", 1)[-1]
    )
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).lstrip("-_.") or "model"
    entry = {"name": name, "kind": kind, "path": str(path), "objective": objective}
    if data is not None:
        entry["data"] = str(data)
    if sentencepiece is not None:
        entry["sentencepiece"] = str(sentencepiece)
    try:
        model = ModelConfig.model_validate(entry, context={"base_dir": Path.cwd()})
    except ValidationError as exc:
        raise ConfigError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    from evolution.models.device import resolve_device

    resolve_device(device)  # a bad or absent device fails here, not in the first forward pass
    return Model(name=model.name, spec={**resolved_dict(model), "device": device})
