"""One snapshot of the trajectory per checkpoint step: the loop that the pipeline's ``trajectory``
stage and :func:`evolution.api.trajectory` share (``docs/trajectory.md``).

A snapshot is the ``metrics.trajectory.analyses`` on the models kept at one step
(:func:`snapshot_config`: the run's settings, every other analysis off, no bootstrap unless
``intervals``) plus each model's distance to its final model
(:class:`~evolution.analyses.to_final.ToFinal`), every group carrying the step as its ``update``
attribute. The distance is computed on the similarity sentences' occurrences, so its inputs
always hold the ``similarity`` section (:func:`to_final_config`), whether or not the snapshot
runs the similarity analysis itself.

The two routes differ only in how models are extracted and how inputs are loaded, run and
written; they hand those in as functions (``inputs``, ``run``, ``write``, ``before``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evolution.config import MetricsConfig, ModelConfig, SimilarityConfig, TrajectoryConfig
from evolution.trajectory import Row, checkpoint_models, final_of

if TYPE_CHECKING:
    import xarray as xr

    from evolution.analyses.base import Analysis, Inputs

logger = logging.getLogger(__name__)

__all__ = ["snapshot_config", "to_final_config", "snapshot_datasets", "run_snapshots"]

#: the analyses of a snapshot's inputs: ``(model names, metrics section) -> Inputs``
InputsOf = Callable[[list[str], MetricsConfig], "Inputs"]
#: runs analyses on inputs: ``(analyses, inputs) -> {group: dataset}``
RunAnalyses = Callable[[list["Analysis"], "Inputs"], dict[str, "xr.Dataset"]]


def _sections() -> tuple[str, ...]:
    from evolution.analyses import SECTIONS

    return SECTIONS


def snapshot_config(metrics: MetricsConfig, trajectory: TrajectoryConfig) -> MetricsConfig:
    """The ``metrics`` section of one snapshot: the analyses of ``trajectory.analyses`` with the
    run's settings, every other section of the analyses' registry off, and no bootstrap unless
    ``trajectory.intervals``."""
    off = {s: None for s in _sections() if s not in trajectory.analyses}
    out = metrics.model_copy(update={**off, "trajectory": None, "store": None})
    if not trajectory.intervals:
        for section in ("mi", "neighbors", "similarity"):
            cfg = getattr(out, section)
            if cfg is not None:
                out = out.model_copy(update={section: cfg.model_copy(update={"bootstrap": 0})})
    return out


def to_final_config(snapshot: MetricsConfig, similarity: SimilarityConfig | None = None) -> MetricsConfig:
    """The ``metrics`` section of the inputs on which each checkpoint's distance to its final
    model is computed: every analysis off but ``similarity``, whose sentences, ``epsilon`` and
    ``min_ratio`` the distance uses: the snapshot's own where it runs the similarity analysis,
    else ``similarity`` (the run's), else the defaults."""
    chosen = snapshot.similarity or similarity or SimilarityConfig()
    off = {s: None for s in _sections()}
    return snapshot.model_copy(update={**off, "similarity": chosen})


def snapshot_datasets(
    step: int,
    names: Sequence[str],
    *,
    metrics: MetricsConfig,
    finals: dict[str, str],
    methods: Sequence[str],
    inputs: InputsOf,
    run: RunAnalyses,
    similarity: SimilarityConfig | None = None,
) -> dict[str, xr.Dataset]:
    """The groups of the snapshot at ``step`` of the models ``names`` (``finals``: member name ->
    its final model's name): the analyses ``metrics`` enables, and ``to_final`` with ``methods``;
    each group's ``update`` attribute is ``step``."""
    from evolution.analyses import enabled
    from evolution.analyses.to_final import ToFinal

    names = list(names)
    datasets = dict(run(enabled(metrics), inputs(names, metrics)))
    own = list(dict.fromkeys(finals[n] for n in names))
    pairs = inputs([*names, *own], to_final_config(metrics, similarity))
    pairs.attrs["finals"] = {n: finals[n] for n in names}
    datasets.update(run([ToFinal(list(methods))], pairs))
    for ds in datasets.values():
        ds.attrs["update"] = step
    return datasets


def run_snapshots(
    rows: Sequence[Row],
    *,
    metrics: MetricsConfig,
    trajectory: TrajectoryConfig,
    inputs: InputsOf,
    run: RunAnalyses,
    write: Callable[[int, dict[str, xr.Dataset]], Path],
    steps: Sequence[int] | None = None,
    before: Callable[[int, list[ModelConfig], int, int], None] | None = None,
) -> dict[int, Path]:
    """Compute and write the snapshot of every checkpoint step of ``rows`` (or of ``steps``, those
    still to do), one step at a time: ``before(step, models, done, todo)`` first (e.g. extract
    the step's models), then :func:`snapshot_datasets` under :func:`snapshot_config` of the run's
    ``metrics``, then ``write(step, datasets)``, which returns where it wrote. Returns ``step ->
    path`` of the snapshots written."""
    snapshot = snapshot_config(metrics, trajectory)
    checkpoints = checkpoint_models(rows)
    finals = {name: final.name for name, final in final_of(rows).items()}
    todo = list(checkpoints) if steps is None else list(steps)
    written: dict[int, Path] = {}
    for i, step in enumerate(todo):
        t0 = time.perf_counter()
        models = checkpoints[step]
        if before is not None:
            before(step, models, i, len(todo))
        datasets = snapshot_datasets(
            step,
            [m.name for m in models],
            metrics=snapshot,
            finals=finals,
            methods=trajectory.methods,
            inputs=inputs,
            run=run,
            similarity=metrics.similarity,
        )
        written[step] = write(step, datasets)
        logger.info(
            "trajectory: step %d (%s) in %.1f s -> %s [%d of %d]",
            step,
            ", ".join(m.name for m in models),
            time.perf_counter() - t0,
            written[step],
            i + 1,
            len(todo),
        )
    return written
