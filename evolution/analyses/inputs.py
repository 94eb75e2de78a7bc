"""Read what the analyses need from the representation store, once per run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evolution.analyses.base import Inputs, ModelInputs
from evolution.config import MetricsConfig

__all__ = ["ModelSource", "load_inputs", "plan_model", "needed_rows", "row_sources"]

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
    from evolution.store import open_representations, stored_rows

    out = {}
    for m in models:
        ds = open_representations(store, m.name)
        columns = {str(c): ds[c].values for c in ds.coords if ds[c].dims == ("token",)}
        objective = m.objective or ds.attrs.get("objective")
        planned = plan_model(
            columns=columns,
            annotated_from=int(ds.attrs.get("annotated_from", -1)),
            train_types=ds.attrs.get("train_types"),
            objective=objective,
            config=config,
            seed=seed,
        )
        coords, parts, plan = planned["coords"], planned["parts"], planned["plan"]
        kept = stored_rows(store, m.name)
        if kept is not None:  # extract.rows: needed: what the plan reads must have been kept
            wanted = needed_rows(plan, config=config)
            missing = np.setdiff1d(wanted, kept)
            if len(missing):
                raise ValueError(
                    f"{m.name}: the metrics read {len(missing)} token rows that extract.rows: needed did not "
                    f"store in {store} (the metrics settings or seed changed since the extraction); rerun "
                    "the extract stage (--force extract), or set extract.rows: null"
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
            frequency=planned["frequency"],
            ranked_types=planned["ranked_types"],
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


def plan_model(
    *,
    columns: dict[str, np.ndarray],
    annotated_from: int,
    train_types: int | None,
    objective: str | None,
    config: MetricsConfig,
    seed: int,
) -> dict[str, Any]:
    """One model's occurrence plan from its token coordinates (``columns``, each (n,), as the store
    holds them on ``token``; ``annotated_from`` and ``train_types`` its group attributes): the main
    and annotated text (:func:`~evolution.metrics.plan.text_parts`) and the rows of every metric
    (:func:`~evolution.metrics.plan.plan_occurrences`). The metrics stage reads it from the store;
    ``extract.rows: needed`` makes it before the extraction, from the same columns. Returns
    ``coords``, ``parts``, ``plan``, ``frequency`` and ``ranked_types``."""
    from evolution.corpus.conllu import ANNOTATION_COLUMNS
    from evolution.metrics.plan import plan_occurrences, text_parts

    coords = {c: np.asarray(columns[c]) for c in COORDS}
    annotated = all(c in columns for c in ANNOTATION_COLUMNS)
    labels = {c: np.asarray(columns[c]) for c in ANNOTATION_COLUMNS} if annotated else None
    if labels is not None:
        coords.update(labels)
    trained_ranks = "train_rank" in columns
    rank = np.asarray(columns["train_rank"]) if trained_ranks else coords["freq_rank"]
    parts = text_parts(
        sentence=coords["sentence"],
        token_id=coords["token_id"],
        freq_rank=rank,
        labels=labels,
        annotated_from=annotated_from,
        ranks_given=trained_ranks,
    )
    if trained_ranks:
        frequency, ranked_types = "training split", int(train_types)  # type: ignore[arg-type]
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
    return {"coords": coords, "parts": parts, "plan": plan, "frequency": frequency, "ranked_types": ranked_types}


def row_sources(plan: Any, *, config: MetricsConfig) -> dict[str, np.ndarray]:
    """The token-axis rows each analysis of ``config`` reads, from one model's
    :class:`~evolution.metrics.plan.OccurrencePlan`, by what reads them: ``MI`` (every target's
    rows), ``neighbours`` (queries and candidates alike), ``syntax neighbours``, ``t-SNE``,
    ``similarity sentences`` (PWCCA / CKA, the change by frequency, the distance to the final
    model) and, with metrics.similarity, ``annotated text`` (the change by part of speech). The
    head analyses read the attention group and the models, not ``hidden``."""
    out: dict[str, list[np.ndarray]] = {}
    out["MI"] = [rows for rows, _ in plan.mi.values()]
    out["neighbours"] = [plan.neighbors["rows"]] if "rows" in plan.neighbors else []
    out["syntax neighbours"] = [plan.syntax["rows"]] if "rows" in plan.syntax else []
    out["t-SNE"] = [t["rows"] for t in plan.tsne.values()]
    out["similarity sentences"] = [plan.similarity_rows] if plan.similarity_rows is not None else []
    if config.similarity is not None and plan.annotated_rows is not None:
        out["annotated text"] = [plan.annotated_rows]
    return {
        name: np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))
        for name, parts in out.items()
        if parts
    }


def needed_rows(plan: Any, *, config: MetricsConfig) -> np.ndarray:
    """The token-axis rows (sorted, int64) whose states the analyses of ``config`` read: the union
    of :func:`row_sources`."""
    parts = list(row_sources(plan, config=config).values())
    if not parts:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


def _stored(store: str, model: str, n_layers: int) -> tuple[int, ...] | None:
    """The layers ``extract.layers`` stored (:func:`evolution.store.stored_layers`), or None when
    every layer is."""
    from evolution.store import stored_layers

    layers = stored_layers(store, model)
    return None if layers is None or layers == list(range(n_layers)) else tuple(layers)
