"""The metrics stage's plan (issue 50): each unit's multiply-adds counted by hand on small
cases, seconds at a rate and an efficiency, and the stage's wall time as list scheduling of the
planned units on the run's workers."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from evolution.analyses.base import Unit
from evolution.analyses.cost import EFFICIENCY, plan_lines, plan_units, unit_work
from evolution.analyses.mi import layer_task as mi_task
from evolution.analyses.neighbors import layer_task as neighbors_task
from evolution.config import MIConfig


def _inputs(**models):
    return SimpleNamespace(models=models)


def _neighbors_model():
    # 10 pooled occurrences of two types (6 and 4), width 3; no annotated text
    plan = SimpleNamespace(neighbors={"rows": np.arange(10), "token": np.array([7] * 6 + [9] * 4)}, syntax=None)
    return SimpleNamespace(d_model=3, plan=plan)


def test_a_neighbour_part_counts_its_queries_against_every_occurrence():
    """Part [0, 4): 4 queries x 10 occurrences x 3 = 120, and the within-type searches once (the
    part that starts at 0): (6^2 + 4^2) x 3 = 156. Part [4, 10): 6 x 10 x 3 = 180. Together they
    count what one search of the layer does: 10 x 10 x 3 + 156."""
    inputs = _inputs(m=_neighbors_model())
    first = Unit("m-0[0]", neighbors_task, {"model": "m", "queries": (0, 4)}, {})
    rest = Unit("m-0[1]", neighbors_task, {"model": "m", "queries": (4, 10)}, {})
    whole = Unit("m-0", neighbors_task, {"model": "m", "queries": None}, {})
    assert unit_work("neighbors", first, inputs) == ("neighbors", 276.0)
    assert unit_work("neighbors", rest, inputs) == ("neighbors", 180.0)
    assert unit_work("neighbors", whole, inputs)[1] == 300.0 + 156.0 == 276.0 + 180.0


def test_mi_counts_lloyd_on_the_training_sample_and_one_assignment():
    """Flat k-means, n = 1,000 rows of width 4, k = 50, 5 iterations, 2 restarts: Lloyd on all
    1,000 rows (fewer than 256 k) compares each with 50 centroids 5 times, then assigns every row
    once: 2 x (1,000 x 5 + 1,000) x 50 x 4 = 2,400,000. k = 500 is capped at n / 10 = 100 first
    (layer_mi's cap): 2 x 6,000 x 100 x 4."""
    rows = np.arange(1000)
    model = SimpleNamespace(d_model=4, plan=SimpleNamespace(mi={"input": (rows, rows % 7)}))
    inputs = _inputs(m=model)

    def work(k):
        cfg = MIConfig(k=k, restarts=2, niter=5, algorithm="flat")
        return unit_work("mi", Unit("m-0", mi_task, {"model": "m", "mi": cfg}, {}), inputs)[1]

    assert work(50) == 2_400_000
    assert work(500) == 2 * 6000 * 100 * 4


def test_two_level_mi_costs_far_less_than_flat_at_large_k():
    """k = 2,000 on 200,000 rows: flat Lloyd trains on all rows (256 k = 512,000 > n) and compares
    each with 2,000 centroids an iteration (4e8 row-centroid pairs). Two-level trains its c =
    4 sqrt(k) ~ 179 coarse centroids on 256 c ~ 45,800 rows (8.2e6 pairs) and compares each row
    with the ~11 fine centroids of its cell (2.2e6): about 38x fewer pairs an iteration; with the
    final assignments (flat 2,000 a row, two-level 179 + 4 x 11) about 30x fewer in all."""
    rows = np.arange(200_000)
    inputs = _inputs(m=SimpleNamespace(d_model=8, plan=SimpleNamespace(mi={"input": (rows, rows % 5)})))

    def work(algorithm):
        cfg = MIConfig(k=2000, restarts=1, niter=10, algorithm=algorithm)
        return unit_work("mi", Unit("m-0", mi_task, {"model": "m", "mi": cfg}, {}), inputs)[1]

    flat, two = work("flat"), work("two_level")
    assert flat == (200_000 * 10 + 200_000) * 2000 * 8
    assert 25 < flat / two < 35


def test_the_plan_is_seconds_at_the_rate_and_the_stage_is_list_scheduled():
    """Units of 5, 3 and 2 planned seconds on 2 workers, in this order: the first takes one worker
    for 5 s, the other two follow on the second (3 + 2): the stage takes 5 s, not (5 + 3 + 2) / 2.
    A unit no family models is counted and said to be not modelled."""
    inputs = _inputs(m=_neighbors_model())
    rate = 100.0 / EFFICIENCY["neighbors"]  # so that seconds = multiply-adds / 100
    units = [
        (SimpleNamespace(name="neighbors"), Unit(f"m-0[{i}]", neighbors_task, {"model": "m", "queries": q}, {}))
        for i, q in enumerate([(4, 10), (0, 1), (1, 4)])
    ]
    # 180, 30 + 156 and 90 multiply-adds -> 1.8, 1.86, 0.9 s; scaled to 5, 3, 2 below
    plan = plan_units(units, inputs, rate=rate)
    assert [c.seconds for c in plan] == pytest.approx([1.8, 1.86, 0.9])
    plan = [c.__class__(**{**c.__dict__, "seconds": s}) for c, s in zip(plan, [5.0, 3.0, 2.0], strict=True)]
    other = plan_units([(SimpleNamespace(name="tsne"), Unit("m-0", lambda: None, {}, {}))], inputs, rate=rate)
    assert other[0].family is None and other[0].seconds is None
    lines = plan_lines(plan + other, workers=2, rate=rate)
    assert any(re.search(r"tsne +1 unit\(s\), not modelled", line) for line in lines)
    assert "about 5 s on 2 worker(s)" in lines[-1]
    assert "the largest unit neighbors m-0[0] is 50.0% of them" in lines[-1]
    assert "about 10 s on 1 worker(s)" in plan_lines(plan, workers=1, rate=rate)[-1]
    assert plan_lines(other, workers=2, rate=rate)[-1] == "metrics plan: none of the 1 unit(s) is modelled"
