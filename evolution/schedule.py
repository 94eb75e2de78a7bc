"""How long a set of independent units takes on ``workers`` workers: Graham's list scheduling
(each unit, in the given order, starts on the worker that frees first; what Dask's scheduler
does with independent tasks of one priority), its longest-first variant, and the lower bound
no schedule beats (the longest unit, or the summed time shared evenly).

Used by ``benchmarks/scaling.py`` to read a run's measured units (``metrics/profile.jsonl``)
as the stage's wall time on 1 to 32 workers. Graham (1969), "Bounds on multiprocessing timing
anomalies": list scheduling is within ``2 - 1/workers`` of the optimum, longest-first within
``4/3 - 1/(3 workers)``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

__all__ = ["list_schedule", "longest_first", "lower_bound"]


def list_schedule(seconds: Sequence[float], *, workers: int) -> float:
    """The makespan (s) of the units ``seconds``, in this order, on ``workers`` workers."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    free = [0.0] * min(workers, max(1, len(seconds)))
    for s in seconds:
        heapq.heapreplace(free, free[0] + float(s))
    return max(free)


def longest_first(seconds: Sequence[float], *, workers: int) -> float:
    """:func:`list_schedule` of the units sorted longest first."""
    return list_schedule(sorted(seconds, reverse=True), workers=workers)


def lower_bound(seconds: Sequence[float], *, workers: int) -> float:
    """No schedule finishes before the longest unit, nor before the summed time over ``workers``."""
    return max(max(seconds, default=0.0), sum(seconds) / workers)
