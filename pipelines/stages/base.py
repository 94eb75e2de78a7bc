"""What every stage shares: the run's :class:`Context` and the :class:`Stage` interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolution.config import EvolutionConfig

__all__ = ["Context", "Stage"]


@dataclass
class Context:
    """What stages share during one run."""

    config: EvolutionConfig
    force: set[str] = field(default_factory=set)
    client: Any = None
    progress: bool = True
    #: per-stage measurements of this run (e.g. extraction timings per model), for logs and benchmarks
    timings: dict[str, Any] = field(default_factory=dict)
    #: the corpus stage's directory when it is not the workdir's (``--plan`` reads a corpus not yet built
    #: into a temporary directory, writing nothing under the workdir)
    corpus_directory: Path | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return self.config.workdir

    def memo(self, key: str, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]


class Stage:
    """A node of the pipeline DAG: ``pending`` says what would run, ``run`` runs it
    (and does nothing when everything is cached)."""

    name: str = ""
    after: tuple[str, ...] = ()
    uses_cluster: bool = False

    def pending(self, ctx: Context) -> list[str]:
        """What would run (empty when everything is cached), one line each."""
        raise NotImplementedError

    def off(self, ctx: Context) -> str | None:
        """Why this config gives the stage nothing to do (logged instead of "cached"); None when it has work."""
        return None

    def prepare(self, ctx: Context) -> None:
        """Checks of the stage's inputs that can fail, run before a Dask cluster is started for
        it (default: none), so that bad input stops the run before any cluster exists."""

    def run(self, ctx: Context) -> None:
        raise NotImplementedError
