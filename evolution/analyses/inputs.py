"""Read what the analyses need from the representation store, once per run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evolution.analyses.base import Inputs, ModelInputs
from evolution.config import MetricsConfig

__all__ = ["ModelSource", "load_inputs"]

#: Token coordinates read into memory for the analyses.
COORDS = ("sentence", "position", "token_id", "token_str", "word_id", "freq_rank")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """A model of the run: its group in the store, how to load it again, its extraction key."""

    name: str
    kind: str
    key: str
    spec: dict[str, Any]
    objective: str | None = None  # None: as the store records it


def load_inputs(
    *,
    store: str,
    models: list[ModelSource],
    config: MetricsConfig,
    seed: int,
    torch_threads: int,
    arrays_dir: str | Path,
    attrs: dict[str, Any] | None = None,
    max_batch_tokens: int = 1024,
    targets: Any = None,
) -> Inputs:
    """Open each model's group, split its token axis into main and annotated text
    (:func:`~evolution.metrics.plan.text_parts`, from the store's annotation
    coordinates) and plan the occurrences of every metric
    (:func:`~evolution.metrics.plan.plan_occurrences`). ``targets``
    (:class:`~evolution.corpus.layout.Targets`, parallel corpora): the target side, for
    the decoder heads of translation models."""
    from evolution.corpus.conllu import ANNOTATION_COLUMNS
    from evolution.metrics.plan import plan_occurrences, text_parts
    from evolution.store import open_representations

    out = {}
    for m in models:
        ds = open_representations(store, m.name)
        coords = {c: ds[c].values for c in COORDS}
        annotated = all(c in ds.coords for c in ANNOTATION_COLUMNS)
        labels = {c: ds[c].values for c in ANNOTATION_COLUMNS} if annotated else None
        if labels is not None:  # (annotated)
            coords.update(labels)
        objective = m.objective or ds.attrs.get("objective")
        trained_ranks = "train_rank" in ds.coords
        rank = ds["train_rank"].values if trained_ranks else coords["freq_rank"]
        parts = text_parts(
            sentence=coords["sentence"],
            token_id=coords["token_id"],
            freq_rank=rank,
            labels=labels,
            annotated_from=int(ds.attrs.get("annotated_from", -1)),
            ranks_given=trained_ranks,
        )
        if trained_ranks:
            frequency, ranked_types = "training split", int(ds.attrs["train_types"])
        else:
            frequency, ranked_types = "analysed text", int(len(np.unique(coords["token_id"][parts["primary"]])))
        plan = plan_occurrences(
            token_id=coords["token_id"],
            token_str=coords["token_str"],
            sentence=coords["sentence"],
            position=coords["position"],
            objective=objective,
            cfg=config,
            seed=seed,
            primary=parts["primary"],
            annotation=parts["annotation"],
            label_strings=labels,
        )
        out[m.name] = ModelInputs(
            name=m.name,
            kind=m.kind,
            objective=objective,
            key=m.key,
            spec=m.spec,
            n_layers=int(ds.sizes["layer"]),
            stored=_stored(store, m.name, int(ds.sizes["layer"])),
            d_model=int(ds.sizes["feature"]),
            coords=coords,
            primary=np.asarray(parts["primary"]),
            annotation=parts["annotation"],
            freq_rank=np.asarray(parts["freq_rank"]),
            plan=plan,
            frequency=frequency,
            ranked_types=ranked_types,
        )
    notes = [n for mi in out.values() for n in mi.plan.notes]
    by_note: dict[str, list[str]] = {}
    for mi in out.values():
        for n in mi.plan.notes:
            by_note.setdefault(n, []).append(mi.name)
    for note, names in by_note.items():  # once per note, naming the models it holds for
        logger.warning("metrics: %s (%s)", note, ", ".join(names))
    return Inputs(
        store=store,
        models=out,
        config=config,
        seed=seed,
        torch_threads=torch_threads,
        arrays_dir=str(arrays_dir),
        max_batch_tokens=max_batch_tokens,
        targets=targets,
        attrs={**(attrs or {}), "notes": notes, "objectives": {n: str(v.objective) for n, v in out.items()}},
    )


def _stored(store: str, model: str, n_layers: int) -> tuple[int, ...] | None:
    """The layers ``extract.layers`` stored (:func:`evolution.store.stored_layers`), or None when
    every layer is."""
    from evolution.store import stored_layers

    layers = stored_layers(store, model)
    return None if layers is None or layers == list(range(n_layers)) else tuple(layers)
