"""The metrics stage's plan (issue 50): each unit's multiply-adds and working-set bytes counted
by hand on small cases, seconds at a rate and an efficiency, the stage's wall time as list
scheduling of the planned units on the run's workers, and a unit planned over the workers' memory
limit named with the setting."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from evolution.analyses.base import Unit
from evolution.analyses.cost import (
    EFFICIENCY,
    UNIT_FIXED,
    WORKER_BASE,
    UnitCost,
    memory_lines,
    plan_lines,
    plan_units,
    unit_memory,
    unit_work,
)
from evolution.analyses.mi import layer_task as mi_task
from evolution.analyses.mi import mlm_output_task
from evolution.analyses.neighbors import layer_task as neighbors_task
from evolution.analyses.similarity_tasks import change_task, similarity_task
from evolution.config import MIConfig, SimilarityConfig


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


def test_the_mlm_output_unit_counts_its_forward_passes_and_two_k_means_a_layer():
    """An MLM of 2 blocks (layers 0..2), d = 4, two sentences of 30 and 10 content tokens, 20 and 6
    of them of the MI types, 4 corruptions: 4 x 40 tokens fed, each 2 blocks x 12 d^2 = 384 →
    61,440; BERT changes 0.135 of the positions, so 0.135 x 4 x 26 = 14.04 → 14 occurrences of
    the types, k = 50 capped at 2 (n / 10 below 2), flat: 3 restarts x (14 x 5 + 14) x 2 x 4 =
    2,016 a k-means, two a layer (output label, input fed) x 3 layers."""
    types = [1, 2]
    content = {0: [1] * 20 + [7] * 10, 1: [2] * 6 + [8] * 4}
    model = SimpleNamespace(d_model=4, n_layers=3)
    cfg = MIConfig(k=50, restarts=3, niter=5, algorithm="flat", mlm_corruptions=4)
    unit = Unit("m-mlm-output", mlm_output_task, {"content_ids": content, "types": types, "mi": cfg}, {})
    family, work = unit_work("mi", unit, _inputs(m=model))
    assert family == "mlm_output"
    assert work == 4 * 40 * 2 * 12 * 16 + 2 * 3 * 3 * (14 * 5 + 14) * 2 * 4
    # its memory: every layer's states at the 14 positions, the k-means rows and their labels
    held = unit_memory("mlm_output", unit, _inputs(m=model)) - UNIT_FIXED
    assert held == 4.0 * 3 * 14 * 4 + 4.0 * (14 + 14) * 4 + 96.0 * 14


def test_mi_is_planned_at_the_efficiency_of_its_k_means():
    """Flat and two-level k-means run at different shares of the GEMM rate (docs/decisions.md
    #32): a unit is "mi_flat" when the k-means of its largest target is flat, k capped at n / 10
    first (k = 2,000 on 10,000 rows is capped to 1,000: flat under "auto"), and its seconds are
    its multiply-adds at that family's efficiency."""
    from evolution.metrics.kmeans import TWO_LEVEL_FROM_K

    big, small = np.arange(10 * TWO_LEVEL_FROM_K), np.arange(10 * TWO_LEVEL_FROM_K - 10)
    model = SimpleNamespace(d_model=4, plan=SimpleNamespace(mi={"input": (big, big % 7), "output": (small, small % 3)}))
    inputs = _inputs(m=model)

    def family(k, algorithm="auto"):
        unit = Unit("m-0", mi_task, {"model": "m", "mi": MIConfig(k=k, restarts=1, niter=2, algorithm=algorithm)}, {})
        return unit_work("mi", unit, inputs)[0], unit

    assert family(TWO_LEVEL_FROM_K)[0] == "mi"  # 20,000 rows: k = 2,000 is not capped, two-level
    assert family(TWO_LEVEL_FROM_K - 1)[0] == "mi_flat"
    assert family(TWO_LEVEL_FROM_K, algorithm="flat")[0] == "mi_flat"
    assert family(300, algorithm="two_level")[0] == "mi"
    capped = SimpleNamespace(d_model=4, plan=SimpleNamespace(mi={"input": (small, small % 7)}))
    unit = Unit("m-0", mi_task, {"model": "m", "mi": MIConfig(k=TWO_LEVEL_FROM_K)}, {})
    assert unit_work("mi", unit, _inputs(m=capped))[0] == "mi_flat"  # 19,990 rows: k capped to 1,999
    fam, unit = family(300)
    (cost,) = plan_units([(SimpleNamespace(name="mi"), unit)], inputs, rate=1e9)
    assert cost.family == "mi_flat" and EFFICIENCY["mi_flat"] != EFFICIENCY["mi"]
    assert cost.seconds == pytest.approx(cost.work / (1e9 * EFFICIENCY["mi_flat"]), rel=1e-12)


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
    stage = next(line for line in lines if "of modelled units" in line)
    assert "about 5 s on 2 worker(s)" in stage
    assert "the largest unit neighbors m-0[0] is 50.0% of them" in stage
    assert any("about 10 s on 1 worker(s)" in line for line in plan_lines(plan, workers=1, rate=rate))
    assert plan_lines(other, workers=2, rate=rate)[-1] == "metrics plan: none of the 1 unit(s) is modelled"


GIB = 2**30
F = UNIT_FIXED  # what every modelled unit holds besides its arrays


def test_the_similarity_estimate_counts_every_pair_of_views_with_itself_included():
    """Models a (3 layers) and b (4) on 500 occurrences of width 6: 7 views, each factorised once
    (2 n d^2), and a cross-product n d^2 for every pair (i, j) with i <= j that similarity_task
    computes, a view with itself included: 28 pairs (counted by a loop), 500 x 36 x (14 + 28) =
    756,000. One model of 3 layers: 6 pairs, 500 x 36 x (6 + 6)."""
    inputs = _inputs(
        a=SimpleNamespace(d_model=6, plan=SimpleNamespace(similarity_rows=np.arange(500))),
        b=SimpleNamespace(d_model=6, plan=SimpleNamespace(similarity_rows=np.arange(500))),
    )
    for n_layers, total in [({"a": 3, "b": 4}, 756_000), ({"a": 3}, 216_000)]:
        views = sum(n_layers.values())
        pairs = sum(1 for i in range(views) for j in range(views) if i <= j)
        assert total == 500 * 36 * (2 * views + pairs)
        kw = {"models": list(n_layers), "n_layers": n_layers, "similarity": SimilarityConfig(bootstrap=0)}
        assert unit_work("similarity", Unit("ab", similarity_task, kw, {}), inputs) == ("similarity", total)


def test_mi_memory_of_targets_that_run_in_turn_is_the_largest_one():
    """An MI unit runs its targets one after another (input label, then output label), so it holds
    one target's arrays at a time: with 1,000 input and 600 output rows of width 4, k = 50 (all
    rows train: 256 k > n), the peak is the input's, 4 x (1,000 + 1,000) x 4 + 96 x 1,000 =
    128,000 bytes, not the sum of both targets' (128,000 + 4 x 1,200 x 4 + 57,600)."""
    rows_in, rows_out = np.arange(1000), np.arange(600)
    plan = SimpleNamespace(mi={"input": (rows_in, rows_in % 7), "output": (rows_out, rows_out % 3)})
    cfg = MIConfig(k=50, restarts=3, niter=5, algorithm="flat")
    unit = Unit("m-0", mi_task, {"model": "m", "mi": cfg}, {})
    held = unit_memory("mi", unit, _inputs(m=SimpleNamespace(d_model=4, plan=plan)))
    assert held == F + 4 * (1000 + 1000) * 4 + 96 * 1000 == F + 128_000
    # the output target alone: its own 600 rows
    alone = SimpleNamespace(mi={"output": (rows_out, rows_out % 3)})
    assert unit_memory("mi", unit, _inputs(m=SimpleNamespace(d_model=4, plan=alone))) == F + 4 * 1200 * 4 + 96 * 600


def test_memory_of_a_neighbour_part_and_of_mi():
    """Neighbours: the rows and faiss's copy of them, 8 x 10 rows x 3 = 240 bytes, whatever the
    part; the NumPy route (no faiss) adds its float64 distances of 4,096 queries x 10 rows.
    MI: the float32 rows and faiss's training sample, plus 96 bytes a row: flat, n = 1,000 rows of
    width 4 with k = 50 trains on all of them (256 k > n): 4 x 2,000 x 4 + 96,000; two-level at
    k = 2,000 on 200,000 rows trains its 179 coarse centroids on 256 x 179 = 45,824 rows."""
    import evolution.metrics.search as search

    inputs = _inputs(m=_neighbors_model())
    part = Unit("m-0[1]", neighbors_task, {"model": "m", "queries": (4, 10)}, {})
    assert unit_memory("neighbors", part, inputs) == F + 240.0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "backend", lambda: "sklearn")
        assert unit_memory("neighbors", part, inputs) == F + 240.0 + 8 * 4096 * 10

    def mi(n, d, k, algorithm):
        rows = np.arange(n)
        model = SimpleNamespace(d_model=d, plan=SimpleNamespace(mi={"input": (rows, rows % 7)}))
        cfg = MIConfig(k=k, restarts=3, niter=5, algorithm=algorithm)
        return unit_memory("mi", Unit("m-0", mi_task, {"model": "m", "mi": cfg}, {}), _inputs(m=model))

    assert mi(1000, 4, 50, "flat") == F + 4 * 2000 * 4 + 96 * 1000
    assert mi(200_000, 8, 2000, "two_level") == F + 4 * (200_000 + 45_824) * 8 + 96 * 200_000


def test_only_the_first_neighbour_part_holds_the_syntax_rows(monkeypatch):
    """The within-type searches (and the annotated text's rows) run in the part that starts at 0:
    with 5 syntax rows, part [0, 4) holds 8 x (10 + 5) x 3 bytes, part [4, 10) 8 x 10 x 3."""
    import evolution.metrics.search as search

    monkeypatch.setattr(search, "backend", lambda: "faiss")
    model = _neighbors_model()
    model.plan.syntax = {"rows": np.arange(5)}
    inputs = _inputs(m=model)
    first = Unit("m-0[0]", neighbors_task, {"model": "m", "queries": (0, 4)}, {})
    rest = Unit("m-0[1]", neighbors_task, {"model": "m", "queries": (4, 10)}, {})
    assert unit_memory("neighbors", first, inputs) == F + 8 * (10 + 5) * 3
    assert unit_memory("neighbors", rest, inputs) == F + 8 * 10 * 3


def test_a_unit_exactly_at_the_stop_is_not_over():
    """The nanny stops a worker above the share of its limit, not at it: a unit whose peak is the
    stop exactly (terminate 0.5, limit twice the peak) is not over; 2 bytes less of limit, it is."""
    import dask

    plan = [UnitCost("mi", "m-0", "mi", 1.0, 1.0, 3.0 * GIB)]
    peak = WORKER_BASE + 3 * GIB
    with dask.config.set({"distributed.worker.memory.terminate": 0.5}):
        assert len(memory_lines(plan, workers=1, memory_limit=2 * peak)) == 1
        assert len(memory_lines(plan, workers=1, memory_limit=2 * peak - 2)) == 2


def test_memory_of_the_similarity_estimate_and_of_a_change_part(tmp_path):
    """Similarity of 2 models with 3 and 4 stored layers on 500 occurrences of width 6: 7 float64
    bases, the view in the making (2 more) and the float32 rows read, 8 x 500 x 6 x 9 + 4 x 500 x 6;
    one model of 3 layers: 3 + 2 bases.
    Change of one model with 5 layers, width 2, on bins of 30 (ranks [0, 1)) and 20 (ranks [1, 10))
    occurrences and 7 outside both: a part holds its bins' rows of every layer (4 x 5 x kept x 2)
    and 96 bytes x 2 features for its largest bin of at least min_ratio x d = 20 rows; a part whose
    one bin is below that holds only its rows."""
    from evolution.analyses.base import save_arrays

    sim_inputs = _inputs(
        a=SimpleNamespace(d_model=6, plan=SimpleNamespace(similarity_rows=np.arange(500))),
        b=SimpleNamespace(d_model=6, plan=SimpleNamespace(similarity_rows=np.arange(500))),
    )
    kw = {"models": ["a", "b"], "n_layers": {"a": 3, "b": 4}, "similarity": SimilarityConfig(bootstrap=0)}
    unit = Unit("ab", similarity_task, kw, {})
    assert unit_memory("similarity", unit, sim_inputs) == F + 8 * 500 * 6 * 9 + 4 * 500 * 6
    # with the bootstrap between the 2 models, a layer's 2 bases stacked, their weighted copies and
    # one more: 8 x 500 x 6 x (2 x 2 + 1); one model has no pair to bootstrap
    boot = Unit("ab", similarity_task, {**kw, "similarity": SimilarityConfig(bootstrap=20)}, {})
    assert unit_memory("similarity", boot, sim_inputs) == F + 8 * 500 * 6 * 9 + 4 * 500 * 6 + 8 * 500 * 6 * 5
    one = {"models": ["a"], "n_layers": {"a": 3}, "similarity": SimilarityConfig(bootstrap=20)}
    assert (
        unit_memory("similarity", Unit("a", similarity_task, one, {}), sim_inputs) == F + 8 * 500 * 6 * 5 + 4 * 500 * 6
    )

    freq_rank = np.array([0] * 30 + [5] * 20 + [50] * 7)
    arrays = save_arrays(str(tmp_path), "change", {"freq_rank": freq_rank, "rows/m": np.arange(57)})
    cfg = SimilarityConfig(min_ratio=10, equal_bins=0)
    inputs = _inputs(m=SimpleNamespace(d_model=2))

    def change(subsets, min_ratio=10.0):
        kw = {"model": "m", "n_layers": 5, "arrays": arrays, "bins": [(0, 1), (1, 10)], "subsets": subsets}
        kw["similarity"] = cfg.model_copy(update={"min_ratio": min_ratio})
        return unit_memory("change", Unit("m[0]", change_task, kw, {}), inputs)

    assert change((0, 2)) == F + 4 * 5 * 50 * 2 + 96 * 30 * 2
    assert change((1, 2)) == F + 4 * 5 * 20 * 2 + 96 * 20 * 2
    assert change((1, 2), min_ratio=11) == F + 4 * 5 * 20 * 2  # 20 < 11 x 2: the bin is left as NaN
    assert unit_memory(None, unit, sim_inputs) is None


def test_memory_lines_name_the_largest_unit_and_a_limit_it_exceeds():
    """Units holding 3, 1 and 2 GiB on 2 workers: the largest is 3 GiB, a worker about 3 GiB plus
    the base, and the two largest at once 3 + 2 GiB plus two bases. Under a 3 GiB limit the
    3 GiB unit (3 GiB + base) is over it, and the line names it and cluster.memory_limit; a 4 GiB
    limit leaves all three under."""
    plan = [UnitCost("mi", f"m-{i}", "mi", 1.0, 1.0, g * GIB) for i, g in enumerate([1.0, 3.0, 2.0])] + [
        UnitCost("tsne", "m-0", None, None, None, None)
    ]
    base = WORKER_BASE / GIB
    lines = memory_lines(plan, workers=2)
    assert len(lines) == 1
    assert "largest unit mi m-1 holds 3.00 GiB" in lines[0]
    assert f"a worker about {3 + base:.2f} GiB" in lines[0]
    assert f"2 worker(s) at most {5 + 2 * base:.2f} GiB together" in lines[0]
    over = memory_lines(plan, workers=2, memory_limit=3 * GIB)
    assert len(over) == 2 and "1 unit(s)" in over[1] and "mi m-1" in over[1] and "cluster.memory_limit" in over[1]
    assert over[1].endswith("or lower metrics.tokens.top (its types' occurrences)")
    assert len(memory_lines(plan, workers=2, memory_limit=4 * GIB)) == 1
    # under a 3.5 GiB limit, but above the 95% of it (3.325 GiB, printed 3.32) at which the nanny stops a worker
    close = memory_lines(plan, workers=2, memory_limit=3.5 * GIB)
    assert len(close) == 2 and "3.32 GiB at which a worker is stopped (95% of" in close[1]
    assert memory_lines(plan[-1:], workers=2) == []


def test_the_runner_warns_of_a_unit_over_the_limit(caplog, monkeypatch):
    """log_metrics_plan logs the over-the-limit line as a WARNING, the others at INFO."""
    import logging

    import evolution.metrics.search as search
    from evolution.analyses.runner import log_metrics_plan

    monkeypatch.setattr(search, "backend", lambda: "faiss")  # 240 bytes of rows: no NumPy distance block

    inputs = _inputs(m=_neighbors_model())
    units = [(SimpleNamespace(name="neighbors"), Unit("m-0[0]", neighbors_task, {"model": "m", "queries": None}, {}))]
    need = WORKER_BASE + UNIT_FIXED + 240  # the unit's planned peak; a worker is stopped at 95% of its limit
    with caplog.at_level(logging.INFO, logger="evolution.analyses.runner"):
        log_metrics_plan(units, inputs, rate=1e9, workers=1, memory_limit=need / 0.95 - 1000)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "neighbors m-0[0]" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="evolution.analyses.runner"):
        log_metrics_plan(units, inputs, rate=1e9, workers=1, memory_limit=need / 0.95 + 1000)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_memory_projected_onto_a_shape_is_the_plan_of_that_shape():
    """benchmarks/metrics_plan.py's projection of each family's largest unit onto 3 stored layers
    of width 8 equals the plan's terms counted at that shape, from a plan of 2 layers of width 4
    (n = 100 rows; a change bin of 50): the similarity estimate 8 n d (V + 2) + 4 n d, a change
    part n_b d (4 L + 96), a neighbour part 8 n d; the fixed part is not scaled."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "metrics_plan.py"
    spec = importlib.util.spec_from_file_location("metrics_plan", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def unit(family, memory):
        return {"family": family, "unit": "m", "memory": 7 + memory, "work": 1.0}

    plan = {
        "unit_fixed": 7,
        "units": [
            unit("similarity", 8 * 100 * 4 * 4 + 4 * 100 * 4),
            unit("change", 50 * 4 * (4 * 2 + 96)),
            unit("change", 20 * 4 * (4 * 2 + 96)),  # a smaller bin: not the largest
            unit("neighbors", 8 * 100 * 4),
            {"family": None, "unit": "m-0", "memory": None, "work": None},
        ],
    }
    got = bench.project_memory(plan, layers=2, d=4, to_layers=3, to_d=8)
    assert got["similarity"] == pytest.approx(7 + 8 * 100 * 8 * 5 + 4 * 100 * 8)
    assert got["change"] == pytest.approx(7 + 50 * 8 * (4 * 3 + 96))
    assert got["neighbors"] == pytest.approx(7 + 8 * 100 * 8)
    assert set(got) == {"similarity", "change", "neighbors"}
    several = {"units": [{"family": "similarity", "unit": "mt+lm", "memory": 1.0, "work": 1.0}]}
    with pytest.raises(ValueError, match="one model; mt\\+lm compares several"):
        bench.project_memory(several, layers=2, d=4, to_layers=3, to_d=8)


def test_the_memory_limit_the_plan_compares_with():
    """A client's workers: the smallest limit (a worker without one is left out); a local cluster:
    cluster.memory_limit as distributed reads it ("2GiB"; "auto" = the machine's memory x
    threads per worker / cores); Slurm: a job's memory over its worker processes (cores /
    threads per worker); a scheduler address without a client: not known."""
    from dask.system import CPU_COUNT
    from distributed.system import MEMORY_LIMIT

    from evolution.config.cluster import ClusterConfig
    from evolution.dask_compute import worker_memory_limit
    from pipelines.cluster import planned_memory_limit

    class Client:
        def scheduler_info(self):
            return {"workers": {"a": {"memory_limit": 3 * GIB}, "b": {"memory_limit": 2 * GIB}, "c": {}}}

    assert worker_memory_limit(Client()) == 2 * GIB
    assert worker_memory_limit(None) is None

    def ctx(**cluster):
        return SimpleNamespace(client=None, config=SimpleNamespace(cluster=ClusterConfig(**cluster)))

    assert planned_memory_limit(ctx(memory_limit="2GiB")) == 2 * GIB
    assert planned_memory_limit(ctx(threads_per_worker=1)) == int(MEMORY_LIMIT * min(1, 1 / CPU_COUNT))
    slurm = ctx(kind="slurm", jobs=1, cores=4, threads_per_worker=2, memory="16GiB", walltime="01:00:00")
    assert planned_memory_limit(slurm) == 8 * GIB
    assert planned_memory_limit(ctx(kind="address", address="tcp://127.0.0.1:8786")) is None
    assert planned_memory_limit(SimpleNamespace(client=Client(), config=None)) == 2 * GIB
