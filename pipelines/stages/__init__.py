"""The pipeline's stages and their DAG.

::

    corpus ──> train ──> extract ──> metrics ──> trajectory ──> report
       └──────────────────^           (extract reads the corpus directly too)

Each stage knows its *key*: a hash of the config section it depends on plus
its inputs' keys and content hashes, and is done when its output carries
that key in a marker written last; a half-written output is never trusted
(it is deleted and redone). Stages only orchestrate: what they compute and
the layout of what they write live in the library (``evolution.corpus.layout``,
``evolution.training``, ``evolution.extract`` / ``evolution.store``,
``evolution.analyses`` / ``evolution.metrics.results``, ``evolution.report``).
"""

from __future__ import annotations

from pipelines.stages.base import Context, Stage
from pipelines.stages.corpus import CorpusStage
from pipelines.stages.extract import ExtractStage
from pipelines.stages.metrics import MetricsStage
from pipelines.stages.report import ReportStage
from pipelines.stages.train import TrainStage
from pipelines.stages.trajectory import TrajectoryStage

__all__ = [
    "Context",
    "Stage",
    "CorpusStage",
    "TrainStage",
    "ExtractStage",
    "MetricsStage",
    "ReportStage",
    "TrajectoryStage",
    "STAGES",
    "stage_order",
    "downstream",
]

#: The DAG: every stage, each naming the stages it runs after.
STAGES: dict[str, Stage] = {
    s.name: s for s in (CorpusStage(), TrainStage(), ExtractStage(), MetricsStage(), TrajectoryStage(), ReportStage())
}


def stage_order(target: str | None = None) -> list[str]:
    """Stage names in dependency order, up to and including ``target``."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in STAGES[name].after:
            visit(dep)
        order.append(name)

    for name in [target] if target else list(STAGES):
        if name not in STAGES:
            raise KeyError(f"unknown stage {name!r}; stages are {list(STAGES)}")
        visit(name)
    return order


def downstream(name: str) -> set[str]:
    """``name`` and every stage that depends on it."""
    out = {name}
    changed = True
    while changed:
        changed = False
        for s in STAGES.values():
            if s.name not in out and any(d in out for d in s.after):
                out.add(s.name)
                changed = True
    return out
