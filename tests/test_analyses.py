"""The analyses framework: one module + one list entry adds an analysis; logs from
workers reach the run log; the k-means choice is validated and recorded."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import xarray as xr
from conftest import write_config
from test_metrics_stage import METRICS

from evolution.analyses.base import Analysis, Unit
from evolution.metrics.results import open_metrics
from pipelines.run import run


def test_unknown_kmeans_algorithm_is_refused_with_the_allowed_values():
    from evolution.metrics.mi import layer_mi

    x = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
    labels = np.arange(100) % 5
    with pytest.raises(ValueError, match="'auto', 'flat', 'two_level'.*got 'lloyd'.*metrics.mi.algorithm"):
        layer_mi(x, labels, k=5, algorithm="lloyd")
    # the choice that ran is recorded: auto is flat below 2,000 clusters; two_level when asked
    assert layer_mi(x, labels, k=5, restarts=1, algorithm="auto").algorithm == "flat"
    assert layer_mi(x, labels, k=5, restarts=1, algorithm="two_level").as_dict()["algorithm"] == "two_level"


def test_logged_collects_this_threads_lines_and_replay_skips_this_process(caplog):
    from evolution.analyses.runner import _replay, logged

    def unit(*, n):
        logging.getLogger("evolution.metrics.mi").info("capped %d", n)
        logging.getLogger("elsewhere").info("not captured")
        return {"n": n}

    lg = logging.getLogger("evolution")
    old = lg.level
    lg.setLevel(logging.WARNING)  # as on a Dask worker: INFO would be dropped before any handler
    try:
        out = logged(unit, n=3)
    finally:
        lg.setLevel(old)
    assert out["result"] == {"n": 3}
    assert [r["msg"] for r in out["logs"]] == ["capped 3"] and out["logs"][0]["name"] == "evolution.metrics.mi"
    assert lg.level == logging.WARNING or old != logging.WARNING  # level restored
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _replay(out["logs"], unit="mi m-1")  # written by this process: already in the log
        _replay([{**out["logs"][0], "process": os.getpid() + 1}], unit="mi m-1")  # from a worker
    assert [r.getMessage() for r in caplog.records] == ["[mi m-1] capped 3"]


@pytest.mark.slow
def test_worker_log_lines_reach_the_run_log(tmp_path, corpus_file, model_specs):
    """On worker processes (a LocalCluster), the library's lines (the k-means chosen, openTSNE's
    own) end up in the run's log file, tagged with their unit; MI's capped k is said once."""
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        workdir=tmp_path / "w",
        extra=METRICS,
        models=[model_specs["translation"]],
        cluster="local",
    )
    text = cfg.read_text().replace("cluster: local", "cluster: {kind: local, n_workers: 1}")
    cfg.write_text(text.replace("mi: {k: 4, restarts: 2}", "mi: {k: 400, restarts: 2}"))
    run(cfg, progress=False)
    log = next((tmp_path / "w" / "logs").glob("run-*.log")).read_text()
    assert log.count("MI's k = 400 is capped to a tenth of the occurrences") == 1  # from the planning process
    assert "MI: k = 400 capped to" not in log  # not once per (model, layer) from the workers
    assert "[mi translation-1] MI: flat k-means" in log
    assert "[tsne translation-0] Automatically determined negative gradient method" in log  # openTSNE's
    mi = open_metrics(tmp_path / "w" / "metrics.zarr", "mi")
    assert mi.attrs["kmeans"] == {"translation": {"input": "flat (faiss)"}}
    assert (mi.k.sel(model="translation", target="input") < 400).all()  # k after capping is stored


def test_an_analysis_is_one_module_and_one_list_entry(tmp_path, corpus_file, model_specs, monkeypatch):
    """A new analysis (here: the mean norm of each layer's states, defined in this test)
    needs nothing but its class and an entry in ANALYSES: its units run, its group is written
    with the values a direct computation gives, its figure is in the report, and its units are
    cached like any other."""
    import evolution.analyses as analyses
    from evolution.analyses.base import Analysis, Unit, strings
    from evolution.store import open_representations

    calls = []

    def norm_task(*, store, model, layer):
        from evolution.store import read_rows

        calls.append((model, layer))
        x = read_rows(store, model, layer, np.arange(10))
        return {"norm": float(np.linalg.norm(x, axis=1).mean())}

    class MeanNorm(Analysis):
        name = "mean_norm"  # no config section: always on

        def units(self, inputs):
            return [
                Unit(
                    f"{m.name}-{layer}",
                    norm_task,
                    dict(store=inputs.store, model=m.name, layer=layer),
                    key={"model": m.key, "layer": layer},
                )
                for m in inputs.models.values()
                for layer in range(m.n_layers)
            ]

        def datasets(self, inputs, results):
            v = np.array(
                [[results[f"{m}-{layer}"]["norm"] for layer in range(inputs.models[m].n_layers)] for m in inputs.names]
            )
            return {"mean_norm": xr.Dataset({"norm": (("model", "layer"), v)}, coords={"model": strings(inputs.names)})}

    def figure(path):
        from evolution.analyses.plotting import open_group, plt

        ds = open_group(path, "mean_norm")
        fig, ax = plt().subplots()
        ax.plot(ds.norm.values.T)
        return fig

    MeanNorm.figures = {"mean_norm": (figure, "Mean state norm per layer.")}
    monkeypatch.setattr(analyses, "ANALYSES", analyses.ANALYSES + (MeanNorm(),))
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        workdir=tmp_path / "w",
        extra=METRICS,
        models=[model_specs["translation"]],
    )
    run(cfg, progress=False)
    got = open_metrics(tmp_path / "w" / "metrics.zarr", "mean_norm").load()
    ds = open_representations(str(tmp_path / "w" / "reps.zarr"), "translation")
    expected = [
        float(np.linalg.norm(ds.hidden.sel(layer=layer).values[:10], axis=1).mean())
        for layer in range(ds.sizes["layer"])
    ]
    np.testing.assert_allclose(got.norm.sel(model="translation").values, expected, rtol=1e-6)
    assert got.attrs["analysis"] == "mean_norm" and "extract_keys" in got.attrs
    assert (tmp_path / "w" / "report" / "mean_norm.png").is_file()
    assert "Mean state norm per layer." in (tmp_path / "w" / "report" / "report.md").read_text()
    n = len(calls)
    run(cfg, progress=False, force=["metrics"])
    assert len(calls) == 2 * n  # --force redoes its units
    (tmp_path / "w" / "metrics.zarr" / "zarr.json").unlink()  # the store is gone, the unit cache is not
    run(cfg, progress=False)
    assert len(calls) == 2 * n  # rebuilt from the cache
    # metrics.reuse: another workdir copies the unit results of the same key instead of computing them
    cache = tmp_path / "w" / "metrics" / "cache"
    run(cfg, progress=False, workdir=tmp_path / "w2", overrides={"metrics.reuse": [str(cache)]})
    assert len(calls) == 2 * n
    np.testing.assert_array_equal(
        open_metrics(tmp_path / "w2" / "metrics.zarr", "mean_norm").norm.values, got.norm.values
    )
    assert {f.name for f in (tmp_path / "w2" / "metrics" / "cache").glob("mean_norm-*")} == {
        f.name for f in cache.glob("mean_norm-*")
    }
    other = tmp_path / "other"  # results of other settings (another key) are not reused
    other.mkdir()
    for f in cache.glob("mean_norm-*.json"):
        (other / (f.name.rsplit("-", 1)[0] + "-" + "0" * 16 + ".json")).write_text(f.read_text())
    run(cfg, progress=False, workdir=tmp_path / "w3", overrides={"metrics.reuse": [str(other)]})
    assert len(calls) == 3 * n


_ORDER: list[str] = []


def _record(*, name: str) -> dict:
    _ORDER.append(name)
    return {"name": name}


class _Resumable(Analysis):
    """Four units, of which c and d left checkpoints in an interrupted run."""

    name, version = "resumable", 1

    def units(self, inputs):
        return [Unit(n, _record, {"name": n}, key={}, started=n in ("c", "d")) for n in "abcd"]

    def datasets(self, inputs, results):
        return {"resumable": xr.Dataset(attrs={"units": list(results)})}


@pytest.mark.parametrize("with_client", [False, True])
def test_a_rerun_finishes_the_units_it_began_before_it_starts_new_ones(tmp_path, with_client):
    """The units marked ``started`` (a checkpoint on disk) are computed first, then the
    rest; without a client and on a one-thread Dask client."""
    from types import SimpleNamespace

    from evolution.analyses.runner import run_analyses

    inputs = SimpleNamespace(config=SimpleNamespace(device=None), attrs={})
    _ORDER.clear()
    if with_client:
        from distributed import Client

        with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
            out = run_analyses([_Resumable()], inputs, cache=tmp_path, client=client, progress=False)
    else:
        out = run_analyses([_Resumable()], inputs, cache=tmp_path, client=None, progress=False)
    assert sorted(_ORDER[:2]) == ["c", "d"] and sorted(_ORDER[2:]) == ["a", "b"]
    assert sorted(out["resumable"].attrs["units"]) == list("abcd")


def test_a_plan_that_fails_is_a_warning_and_the_units_still_run(tmp_path, monkeypatch, caplog):
    """The metrics plan is a forecast: an error while making it is logged, and the stage computes
    its units all the same; without an error the plan is written beside the profile."""
    from types import SimpleNamespace

    import evolution.analyses.cost as cost
    from evolution.analyses.runner import run_analyses

    inputs = SimpleNamespace(config=SimpleNamespace(device=None), attrs={})
    out = run_analyses(
        [_Resumable()], inputs, cache=tmp_path / "a", progress=False, rate=1e9, profile=tmp_path / "p.jsonl"
    )
    assert (tmp_path / "plan.json").is_file() and sorted(out["resumable"].attrs["units"]) == list("abcd")

    def broken(*args, **kwargs):
        raise KeyError("neighbors")

    monkeypatch.setattr(cost, "plan_units", broken)
    with caplog.at_level("WARNING"):
        out = run_analyses([_Resumable()], inputs, cache=tmp_path / "b", progress=False, rate=1e9)
    assert sorted(out["resumable"].attrs["units"]) == list("abcd")
    assert "metrics plan: not made (KeyError" in caplog.text


def test_a_pruning_unit_is_started_exactly_when_its_checkpoint_directory_exists(tmp_path):
    """HeadPruning marks a unit ``started`` when the directory its run checkpoints into exists
    (an interrupted run left it), and no other unit."""
    from pathlib import Path
    from types import SimpleNamespace

    from evolution.analyses.base import Inputs, ModelInputs
    from evolution.analyses.heads.pruning import HeadPruning
    from evolution.config.metrics import MetricsConfig

    corpus = tmp_path / "corpus" / "key"
    (corpus / "data").mkdir(parents=True)
    (corpus / "data" / "train.en").write_text("a b\nc d\n", encoding="utf-8")
    (corpus / "data" / "train.es").write_text("x y\nz w\n", encoding="utf-8")
    (corpus / "sentences.txt").write_text("a b\n", encoding="utf-8")
    weights = tmp_path / "mt.pt"
    weights.write_bytes(b"weights")
    model = ModelInputs(
        name="mt",
        kind="fairseq",
        objective="mt",
        key="k",
        spec={"kind": "fairseq", "path": str(weights)},
        n_layers=2,
        d_model=4,
        coords={},
        primary=np.ones(0, bool),
        annotation=None,
        freq_rank=np.zeros(0, int),
        plan=None,
    )
    arrays = tmp_path / "work" / "arrays"
    arrays.mkdir(parents=True)
    cfg = MetricsConfig(pruning={"lambdas": [0.5], "updates": 2, "scratch_updates": 4})
    inputs = Inputs(
        store="unused",
        models={"mt": model},
        config=cfg,
        seed=0,
        torch_threads=1,
        arrays_dir=str(arrays),
        targets=SimpleNamespace(training_text=corpus / "data" / "train.es", sentences=["x y"]),
    )
    units = {u.name: u for u in HeadPruning().units(inputs)}
    assert set(units) == {"mt-scratch", "mt-full", "mt-tuned", "mt-encoder-0.5", "mt-all-0.5"}
    assert not any(u.started for u in units.values())
    Path(units["mt-all-0.5"].kwargs["directory"]).mkdir(parents=True)
    assert [n for n, u in {u.name: u for u in HeadPruning().units(inputs)}.items() if u.started] == ["mt-all-0.5"]
