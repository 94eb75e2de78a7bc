"""The trajectory over training (``train.checkpoints`` + ``metrics.trajectory``): every kept
checkpoint analysed as a snapshot, its distance to the final model, the scorecard per snapshot,
and when each claim first holds."""

from __future__ import annotations

import numpy as np
import pytest

from evolution.report.scorecard import FAILS, HOLDS, NA
from evolution.trajectory import first_holds


def test_first_holds_reads_a_row_of_verdicts():
    updates = [25, 50, 100, 200, 400, 600]
    assert first_holds([FAILS, HOLDS, FAILS, HOLDS, HOLDS, HOLDS], updates) == (50, 200)
    assert first_holds([FAILS, FAILS, FAILS, FAILS, FAILS, HOLDS], updates) == (600, 600)
    assert first_holds([HOLDS, HOLDS, HOLDS, HOLDS, HOLDS, FAILS], updates) == (25, None)  # lost at the end
    assert first_holds([NA, HOLDS, NA, HOLDS, HOLDS, HOLDS], updates) == (50, 50)  # not measurable breaks nothing
    assert first_holds([NA] * 6, updates) == (None, None)
    assert first_holds([FAILS] * 6, updates) == (None, None)


def _config() -> str:
    """test_training's tiny training with kept checkpoints and small-corpus metrics settings."""
    from test_training import CONFIG

    out = CONFIG
    for old, new in (
        ("max_sentences: 30", "max_sentences: 60"),
        (
            "  updates: {{mt: 4, lm: 4, mlm: 4}}\n",
            "  lr: 0.01\n  updates: {{mt: 4, lm: 4, mlm: 6}}\n  checkpoints: {{first: 1, factor: 2}}\n",
        ),
        ("  token_dropout: [lm]\n", ""),
        ("  max_batch_tokens: 128\n", "  max_batch_tokens: 128\n  attention: {{sentences: 10}}\n"),
    ):
        assert old in out, old
        out = out.replace(old, new)
    return (
        out
        + """metrics:
  tokens: {{top: 20, min_count: 5}}
  mi: {{k: 4, restarts: 2, bootstrap: 5}}
  neighbors: {{k: 3, max_per_type: 20, bootstrap: 5}}
  similarity: {{sentences: 60, min_ratio: 1, bootstrap: 4, equal_bins: 0}}
  tsne: null
  influence: null
  trajectory: {{}}
report:
  views: null
"""
    )


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory):
    from test_training import _corpus

    from evolution.config import load_config
    from pipelines.run import main
    from pipelines.stages import Context

    tmp = tmp_path_factory.mktemp("trajectory")
    src, tgt = _corpus(tmp)
    cfg_path = tmp / "trajectory.yaml"
    cfg_path.write_text(_config().format(workdir=tmp / "run", src=src, tgt=tgt), encoding="utf-8")
    assert main([str(cfg_path), "--stage", "trajectory", "--no-progress"]) == 0
    return Context(config=load_config(cfg_path))


def test_every_kept_checkpoint_is_a_snapshot_with_its_own_settings(trajectory):
    from evolution.analyses.plotting import open_group
    from pipelines.stages import TrajectoryStage

    stage = TrajectoryStage()
    assert {u: [m.name for m in ms] for u, ms in stage.checkpoints(trajectory).items()} == {
        1: ["mt@1", "lm@1", "mlm@1"],
        2: ["mt@2", "lm@2", "mlm@2"],
        4: ["mlm@4"],
    }  # mlm trains 6 updates
    mi = open_group(stage.snapshot(trajectory, 2), "mi")
    assert list(mi["model"].values) == ["mt@2", "lm@2", "mlm@2"]
    assert int(mi["k"].max()) <= 4 and mi.sizes["restart"] == 2  # the run's metrics.mi settings
    assert "mi_corrected_interval" not in mi  # no bootstrap per checkpoint unless trajectory.intervals
    from evolution.metrics.results import metrics_groups

    groups = set(metrics_groups(str(stage.snapshot(trajectory, 2))))
    assert {"mi", "neighbors", "similarity", "change", "heads", "to_final"} <= groups
    assert not groups & {"influence", "heads_importance", "heads_probes"}


def test_distance_to_the_final_model_against_the_reference_pwcca_and_cka(trajectory):
    from test_metrics import reference_cka, reference_pwcca

    from evolution.analyses.plotting import open_group
    from evolution.store import read_rows
    from pipelines.stages import ExtractStage, MetricsStage, TrajectoryStage

    stage = TrajectoryStage()
    snap = open_group(stage.snapshot(trajectory, 2), "to_final")
    assert dict(zip(snap["model"].values, snap["final"].values, strict=True)) == {
        "mt@2": "mt",
        "lm@2": "lm",
        "mlm@2": "mlm",
    }
    cfg = trajectory.config
    models = [m for m in cfg.models if m.name == "lm"] + stage.checkpoints(trajectory)[2]
    inputs = MetricsStage().inputs(trajectory, models=models, metrics=cfg.metrics)
    store = ExtractStage().store(trajectory)
    for layer in (0, 2):
        x = read_rows(store, "lm@2", layer, inputs.models["lm@2"].plan.similarity_rows)
        y = read_rows(store, "lm", layer, inputs.models["lm"].plan.similarity_rows)
        pwcca = (reference_pwcca(x, y)[0] + reference_pwcca(y, x)[0]) / 2
        got = snap["distance"].sel(model="lm@2", layer=layer)
        # the distances are 1 - (a similarity near 1), computed from float32 states: the
        # similarity's rounding (PWCCA's decompositions in float32: up to a few 1e-6, seen 2.5e-6
        # against float64) is a large share of a distance of ~1e-2, so the tolerance is absolute,
        # on the similarity; a wrong weighting or pairing moves it by orders of magnitude more
        assert float(got.sel(metric="pwcca")) == pytest.approx(1 - pwcca, abs=1e-5)
        assert float(got.sel(metric="cka")) == pytest.approx(1 - reference_cka(x, y), abs=1e-5)
    assert float(snap["distance"].sel(model="lm@2", metric="pwcca", layer=2)) > 0.01  # 2 of 4 updates: not there yet


def test_curves_place_each_snapshot_at_its_update_and_objective(trajectory):
    from evolution.analyses.plotting import open_group
    from pipelines.stages import MetricsStage, TrajectoryStage

    stage = TrajectoryStage()
    curves = open_group(stage.path(trajectory), "curves")
    assert list(curves["checkpoint"].values) == [1, 2, 4, 6]  # kept updates and the finals (mt, lm: 4; mlm: 6)
    nb = open_group(stage.snapshot(trajectory, 1), "neighbors")
    for objective in ("mt", "lm", "mlm"):
        np.testing.assert_allclose(
            curves["same_token"].sel(series=objective, checkpoint=1),
            nb["value"].sel(model=f"{objective}@1", measure="same_token"),
        )
    final = open_group(MetricsStage().path(trajectory), "mi")
    expected = (final["mi_mean"] / final["entropy"]).sel(model="mlm", target="input")
    np.testing.assert_allclose(curves["mi_input"].sel(series="mlm", checkpoint=6), expected)
    assert np.isnan(curves["mi_input"].sel(series="mt", checkpoint=6)).all()  # mt has no update 6
    assert np.isnan(curves["mi_input"].sel(series="mt", checkpoint=4)).all() == False  # noqa: E712 (mt's final)
    assert float(curves["to_final"].sel(series="mlm", checkpoint=6).max()) == 0.0
    td = open_group(stage.snapshot(trajectory, 4), "to_final")
    np.testing.assert_allclose(
        curves["to_final"].sel(series="mlm", checkpoint=4, metric="cka"),
        td["distance"].sel(model="mlm@4", metric="cka"),
    )


def test_verdicts_per_snapshot_are_the_scorecard_of_each_store(trajectory):
    from evolution.analyses.plotting import open_group
    from evolution.report.scorecard import scorecard
    from pipelines.stages import MetricsStage, TrajectoryStage

    stage = TrajectoryStage()
    verdicts = open_group(stage.path(trajectory), "verdicts")
    assert list(verdicts["snapshot"].values) == ["1", "2", "4", "final"]
    assert list(verdicts["update"].values) == [1, 2, 4, 6]
    for label, path in (("2", stage.snapshot(trajectory, 2)), ("final", MetricsStage().path(trajectory))):
        expected = {f.label: f.verdict for f in scorecard(path)}
        got = dict(zip(verdicts["claim"].values, verdicts["verdict"].sel(snapshot=label).values, strict=True))
        assert got == expected
    for c in verdicts["claim"].values:
        row = list(verdicts["verdict"].sel(claim=c).values)
        first, since = first_holds(row, [1, 2, 4, 6])
        assert int(verdicts["first"].sel(claim=c)) == (-1 if first is None else first)
        assert int(verdicts["since"].sel(claim=c)) == (-1 if since is None else since)


def test_the_report_links_a_trajectory_page_with_when_each_claim_first_holds(trajectory):
    from evolution.analyses.plotting import open_group
    from pipelines.stages import ReportStage, TrajectoryStage

    ReportStage().run(trajectory)
    out = ReportStage().directory(trajectory)
    assert 'href="trajectory.html"' in (out / "report.html").read_text(encoding="utf-8")
    page = (out / "trajectory.html").read_text(encoding="utf-8")
    assert "trajectory-verdicts.png" in page and (out / "trajectory-curves.png").is_file()
    verdicts = open_group(TrajectoryStage().path(trajectory), "verdicts")
    rows = (out / "trajectory-first.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert len(rows) == verdicts.sizes["claim"]
    for row, first in zip(rows, verdicts["first"].values, strict=True):
        assert row.split('","')[2] == ("never" if first < 0 else str(int(first)))


def test_a_new_checkpoint_computes_only_itself(trajectory, tmp_path):
    """Adding the analysis of a kept update re-uses every other snapshot: rerunning the
    unchanged config plans nothing, and a snapshot whose store is removed is the only one redone."""
    import shutil

    from pipelines.stages import TrajectoryStage

    stage = TrajectoryStage()
    assert stage.pending(trajectory) == []
    shutil.rmtree(stage.snapshot(trajectory, 1))
    pending = stage.pending(trajectory)
    assert len(pending) == 2 and "step 1 " in pending[0] and "curves" in pending[1]


def test_curve_tick_labels_do_not_overprint_on_the_log_axis():
    """The final models' totals sit close together on the log axis of the curves: of 600, 700,
    800 and 1000 (gaps of 0.07, 0.06 and 0.10 decades) only 600 and 1000 are labelled; the
    kept updates, a factor 2 apart (0.3 decades), all are."""
    from evolution.report.trajectory import _spaced_labels

    assert _spaced_labels([25, 50, 100, 200, 400, 600, 700, 800, 1000]) == [
        "25",
        "50",
        "100",
        "200",
        "400",
        "600",
        "",
        "",
        "1000",
    ]
    assert _spaced_labels([1, 2, 4]) == ["1", "2", "4"]
    assert _spaced_labels([100, 110, 400]) == ["100", "", "400"]


def test_curve_panels_of_a_metric_share_one_y_scale():
    """An MLM whose MI stays within 0.995-1.000 must not look as eventful as an MT falling from
    1.0 to 0.2: the panels of one row (one metric, every objective) share their y limits, which
    span both objectives' values."""
    import xarray as xr

    from evolution.report.trajectory import curve_grid

    x, layers = [25, 50, 100], [0, 1]
    mi = np.array(
        [
            [[1.0, 1.0], [0.9, 0.6], [0.8, 0.2]],  # mt: falls to 0.2
            [[0.999, 0.999], [0.998, 0.997], [0.997, 0.995]],
        ]
    )  # mlm: within 0.005
    dims = ("objective", "checkpoint", "layer")
    curves = xr.Dataset(
        {
            "mi_input": (dims, mi),
            "same_token": (dims, mi),
            "to_final": (dims + ("metric",), np.stack([mi, mi], axis=-1)),
        },
        coords={"objective": ["mt", "mlm"], "checkpoint": x, "layer": layers, "metric": ["pwcca", "cka"]},
    )
    fig = curve_grid(curves)
    axes = np.array(fig.axes).reshape(3, 2)
    for row in axes:
        low, high = row[1].get_ylim()
        assert row[0].get_ylim() == (low, high)
        assert low <= 0.2 and high >= 1.0  # the MLM's panel shows the MT's range too


def test_base_runs_are_the_config_seed_without_token_dropout():
    """Each objective's base run (whose kept checkpoints make the trajectory's row) is the run at the
    config's seed without token dropout: not another seed's run, nor the token-dropout control that
    shares its seed (the control's checkpoints are of a different training)."""
    from evolution.config import TrainConfig
    from evolution.trajectory import base_runs

    train = TrainConfig(seeds=[0, 1, 2], token_dropout=["mt", "lm"])
    assert base_runs(train, 0) == {"mt": "mt", "lm": "lm", "mlm": "mlm"}
    runs = train.runs(1)
    for objective, run in base_runs(train, 1).items():  # another base seed: still the plain runs
        assert runs[run] == {"objective": objective, "seed": 1, "token_dropout": 0.0}, (objective, run)
