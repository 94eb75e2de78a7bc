"""The extraction's plan (pipelines/plan.py): the bytes it plans against what the run writes,
and a run whose bytes exceed the free space stops before the store exists."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import zarr
from conftest import write_config

from pipelines.plan import PlanError, gemm_rate
from pipelines.run import main, run


def _written(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def test_the_planned_bytes_are_what_the_run_writes(model_specs, corpus_file, tmp_path):
    models = [model_specs["gpt2"], model_specs["bert"], model_specs["translation"]]
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=models, workdir=tmp_path / "w")
    ctx = run(cfg, stage="extract", progress=False)
    plan = ctx.timings["plan.extract"]
    assert plan["workers"] == 1 and plan["gemm64_one_core"] > 1e8
    for m in models:
        planned, written = plan[m["name"]]["bytes"], _written(tmp_path / "w" / "reps.zarr" / m["name"])
        # metadata and the token coordinates are the rest: a few kB on this tiny corpus
        assert planned <= written <= planned * 1.05 + 60_000, (m["name"], planned, written)
        assert plan[m["name"]]["seconds"] > 0 and plan[m["name"]]["worker_peak_bytes"] > 0


def test_plan_after_the_extraction_plans_the_metrics_units(model_specs, corpus_file, tmp_path, capsys):
    """Once the states are stored, --plan also prints the metrics stage's plan (its units counted
    from the stored tokens) and computes none of them; before, it says when it will."""
    extra = "metrics:\n  tokens: {top: 6, min_count: 3}\n  mi: {k: 4, restarts: 2}\n  neighbors: {k: 3}"
    cfg = write_config(
        tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["gpt2"]], workdir=tmp_path / "w", extra=extra
    )
    assert main([str(cfg), "--plan", "--no-progress"]) == 0
    assert "the metrics stage is planned once the extraction is in the store" in capsys.readouterr().err
    run(cfg, stage="extract", progress=False)
    capsys.readouterr()
    assert main([str(cfg), "--plan", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"metrics plan: neighbors +\d+ unit\(s\) +[\d.e+]+ multiply-adds", err), err
    assert re.search(r"metrics plan: mi +\d+ unit\(s\)", err)
    assert re.search(r"metrics plan: .* s of modelled units, about .* s on \d+ worker\(s\)", err)
    assert re.search(r"metrics plan: memory: largest unit \w+ \S+ holds [\d.]+ GiB, a worker about", err), err
    assert not (tmp_path / "w" / "metrics").exists() and not (tmp_path / "w" / "metrics.zarr").exists()


def test_a_run_that_does_not_fit_stops_before_writing(model_specs, corpus_file, tmp_path, monkeypatch, capsys):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["gpt2"]], workdir=tmp_path / "w")
    monkeypatch.setattr("pipelines.plan.free_bytes", lambda store: 1000)
    with pytest.raises(
        PlanError, match=r"needs \d+\.\d kB and its disk has 1.0 kB free.*Nothing was written.*extract.dtype: float16"
    ):
        run(cfg, stage="extract", progress=False)
    assert not (tmp_path / "w" / "reps.zarr" / "gpt2").exists()
    assert main([str(cfg), "--stage", "extract", "--no-progress"]) == 2  # the CLI: the message, no traceback
    assert "Nothing was written" in capsys.readouterr().err


def test_plan_prints_and_writes_nothing(model_specs, corpus_file, tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["gpt2"]], workdir=tmp_path / "w")
    assert main([str(cfg), "--plan", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "plan: gpt2" in err and "float64 multiply-adds/s on one core" in err
    assert not (tmp_path / "w" / "reps.zarr").exists()


def test_the_gemm_rate_counts_multiply_adds():
    """n^3 multiply-adds per n x n product: a rate between 0.1 and 1000 G/s on any CPU."""
    assert 1e8 < gemm_rate(0.1, n=128) < 1e12


def _files(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if f != "zarr.json")


def test_planned_states_and_attention_are_the_stored_cells(model_specs, corpus_file, tmp_path, monkeypatch):
    import pipelines.plan as plan_mod

    plans, real = [], plan_mod.plan_extract
    monkeypatch.setattr(plan_mod, "plan_extract", lambda *a, **kw: plans.append(real(*a, **kw)) or plans[-1])
    models = [model_specs["gpt2"], model_specs["bert"]]
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=models, workdir=tmp_path / "w")
    run(cfg, stage="extract", progress=False)
    for p in plans:
        group = tmp_path / "w" / "reps.zarr" / p.name
        # uncompressed states: the chunk files are exactly (L + 1) x whole chunks x d x itemsize
        assert p.hidden_bytes == _files(group / "hidden" / "c"), p.name
        att = zarr.open_group(str(group / "attention"), mode="r")
        sq = int((np.asarray(att["length"][:]).astype(np.int64) ** 2).sum())
        # every (sentence, ..., query, key) array of the group: its cells within each sentence's length
        cells = sum(
            sq * int(np.prod(v.shape[1:-2])) * v.dtype.itemsize
            for k, v in att.arrays()
            if v.ndim >= 4 and v.shape[-1] == v.shape[-2]
        )
        assert p.attention_bytes == cells, (p.name, p.attention_bytes, cells)


def test_the_plans_rate_is_measured_before_the_workers_start(model_specs, corpus_file, tmp_path, monkeypatch):
    """Workers importing their libraries keep the cores busy for seconds: the rate the plans
    divide by is measured before the cluster starts, once, and the extract plan uses it."""
    import contextlib

    import pipelines.run as R

    events: list[str] = []
    monkeypatch.setattr(R, "gemm_rate", lambda seconds=1.0: events.append("rate") or 3.0e9)
    real = R.dask_client

    @contextlib.contextmanager
    def client(*args, **kwargs):
        events.append("cluster")
        with real(*args, **kwargs) as c:
            yield c

    monkeypatch.setattr(R, "dask_client", client)
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["gpt2"]], workdir=tmp_path / "w")
    ctx = run(cfg, stage="extract", progress=False)
    assert events == ["rate", "cluster"]
    assert ctx.timings["plan.extract"]["gemm64_one_core"] == 3.0e9
