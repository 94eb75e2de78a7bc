"""The trajectory over checkpoint series trained offline (:mod:`evolution.fixtures.tiny_series`): a
tiny GPT-2 and a tiny BERT trained from scratch on the shipped Genesis text, saved every 40 steps
as the hub lays out revisions, analysed by the pipeline and by the API.

What training must show, whatever the numbers of one run: the representations move most early and
settle, so each layer's distance to the final member falls with the step, and the first members
are far from the last."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

STEPS, EVERY = 120, 40
SENTENCES = 300

CONFIG = """workdir: run
corpus: {{source: text, path: {text}, max_sentences: {n}}}
extract: {{attention: {{sentences: 100}}}}
models:
  - {{name: gpt2, kind: huggingface, checkpoints: "{gpt2}"}}
  - {{name: bert, kind: huggingface, checkpoints: "{bert}"}}
metrics:
  tokens: {{top: 50, min_count: 5}}
  mi: {{k: 20, restarts: 2, bootstrap: 5}}
  neighbors: {{k: 5, max_per_type: 50, bootstrap: 5}}
  similarity: {{sentences: 250, bootstrap: 4, equal_bins: 0}}
  tsne: null
  influence: null
  trajectory: {{}}
report: {{views: null}}
"""


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    from evolution.fixtures.tiny_series import GENESIS, train_series

    root = tmp_path_factory.mktemp("series")
    for arch in ("gpt2", "bert"):
        train_series(root / "ckpt" / arch, arch=arch, steps=STEPS, every=EVERY, seed=0)
    text = root / "genesis.txt"
    shutil.copy(GENESIS, text)
    return root


def _write_config(root: Path, *, gpt2: str = "ckpt/gpt2/step*", bert: str = "ckpt/bert/step*") -> Path:
    path = root / "series.yaml"
    path.write_text(CONFIG.format(text="genesis.txt", n=SENTENCES, gpt2=gpt2, bert=bert), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(series):
    from evolution.config import load_config
    from pipelines.run import main
    from pipelines.stages import Context

    cfg = _write_config(series)
    assert main([str(cfg), "--no-progress"]) == 0
    return Context(config=load_config(cfg))


def test_every_saved_step_is_a_member_and_the_last_is_the_analysed_model(run):
    from pipelines.stages import TrajectoryStage

    cfg = run.config
    assert [m.name for m in cfg.models] == [f"gpt2@{STEPS}", f"bert@{STEPS}"]
    assert {u: [m.name for m in ms] for u, ms in TrajectoryStage().checkpoints(run).items()} == {
        u: [f"gpt2@{u}", f"bert@{u}"] for u in range(0, STEPS, EVERY)
    }


def test_distance_to_the_final_member_falls_with_training(run):
    """Each layer's PWCCA and CKA distance to the last member falls from step to step, starts far
    (the random initialisation is not the trained model) and is 0 at the final member."""
    from evolution.analyses.plotting import open_group
    from pipelines.stages import TrajectoryStage

    curves = open_group(TrajectoryStage().path(run), "curves")
    assert list(curves["checkpoint"].values) == [0, 40, 80, 120]
    assert list(curves["series"].values) == ["gpt2", "bert"]
    assert list(curves["objective"].values) == ["lm", "mlm"]  # as the adapters inferred them for the final members
    for metric in ("pwcca", "cka"):
        for s in ("gpt2", "bert"):
            d = curves["to_final"].sel(metric=metric, series=s).values  # (checkpoint, layer)
            assert np.all(np.diff(d, axis=0) < 0), (metric, s, d)
            assert np.all(d[0] > 0.1) and np.all(d[-1] == 0.0), (metric, s, d)


def test_curves_between_series_are_the_snapshots_similarity(run):
    """``between`` at a step is the similarity group's same-layer distance of the two members in
    that step's snapshot (and the report's at the final step); the two series are far apart."""
    from evolution.analyses.plotting import open_group
    from pipelines.stages import MetricsStage, TrajectoryStage

    stage = TrajectoryStage()
    curves = open_group(stage.path(run), "curves")
    assert list(curves["pair"].values) == ["gpt2 | bert"]
    for step, path, a, b in (
        (40, stage.snapshot(run, 40), "gpt2@40", "bert@40"),
        (STEPS, MetricsStage().path(run), f"gpt2@{STEPS}", f"bert@{STEPS}"),
    ):
        sim = open_group(path, "similarity")["same_layer"].sel(metric="pwcca", model_a=a, model_b=b)
        np.testing.assert_allclose(
            curves["between"].sel(metric="pwcca", pair="gpt2 | bert", checkpoint=step), sim.values
        )
    assert float(curves["between"].sel(metric="pwcca").min()) > 0.2  # an LM and an MLM from two inits


def test_verdicts_roles_and_the_page(run):
    from evolution.analyses.plotting import open_group
    from pipelines.stages import ReportStage, TrajectoryStage

    path = TrajectoryStage().path(run)
    verdicts = open_group(path, "verdicts")
    assert list(verdicts["snapshot"].values) == ["0", "40", "80", "final"]
    assert list(verdicts["update"].values) == [0, 40, 80, STEPS]
    roles = open_group(path, "roles")
    assert roles is not None and list(roles["series"].values) == ["gpt2", "bert"]
    assert set(verdicts.attrs["series"]["gpt2"]) == {"0", "40", "80", "120"}
    page = (ReportStage().directory(run) / "trajectory.html").read_text(encoding="utf-8")
    assert "trajectory-between.png" in page and "gpt2, bert" in page


def test_a_new_step_computes_only_itself(run, series):
    """A checkpoint saved between two others adds one snapshot: nothing else is pending."""
    from evolution.config import load_config
    from pipelines.stages import Context, ExtractStage, TrajectoryStage

    shutil.copytree(series / "ckpt" / "gpt2" / "step80", series / "ckpt" / "gpt2" / "step100")
    try:
        ctx = Context(config=load_config(_write_config(series)))
        pending = TrajectoryStage().pending(ctx)
        assert len(pending) == 2 and "step 100 (gpt2@100)" in pending[0] and "curves" in pending[1], pending
        assert [m.name for m in ExtractStage()._todo(ctx, TrajectoryStage().checkpoints(ctx)[100])] == ["gpt2@100"]
        assert ExtractStage()._todo(ctx, TrajectoryStage().checkpoints(ctx)[80]) == []
        # a copy is one model at two steps: the trajectory says so
        assert TrajectoryStage()._same_weights(TrajectoryStage().rows(ctx)) == {"gpt2": [["gpt2@80", "gpt2@100"]]}
    finally:
        shutil.rmtree(series / "ckpt" / "gpt2" / "step100")


def test_a_member_that_fails_names_itself_and_the_others_stay(series, tmp_path):
    """A corrupt checkpoint stops the trajectory with the member's name and the fix; the members
    extracted before it stay complete in the store and are not extracted again."""
    from evolution.config import load_config
    from evolution.models.base import ModelLoadError
    from evolution.store import group_is_complete
    from pipelines.stages import STAGES, Context, ExtractStage, MetricsStage, TrajectoryStage

    broken = tmp_path / "ckpt" / "gpt2"
    shutil.copytree(series / "ckpt" / "gpt2", broken)
    (broken / "step40" / "model.safetensors").write_bytes(b"not a safetensors file")
    shutil.copy(series / "genesis.txt", tmp_path / "genesis.txt")
    cfg = _write_config(tmp_path, gpt2="ckpt/gpt2/step*", bert=str(series / "ckpt" / "bert" / "step*"))
    ctx = Context(config=load_config(cfg))
    for stage in ("corpus", "extract", "metrics"):
        STAGES[stage].run(ctx)
    with pytest.raises(ModelLoadError, match=r"series 'gpt2', member gpt2@40 .*step40.*Fix or replace that checkpoint"):
        TrajectoryStage().run(ctx)
    store = ExtractStage().store(ctx)
    members = {m.name: m for ms in ctx.config.series().values() for m in ms}
    for name in ("gpt2@0", "bert@0", f"gpt2@{STEPS}"):
        assert group_is_complete(store, name, ExtractStage().model_key(ctx, members[name])), name
    assert ExtractStage()._todo(ctx, [members["gpt2@0"], members["bert@0"]]) == []
    assert TrajectoryStage().snapshot(ctx, 0).exists() and not TrajectoryStage().snapshot(ctx, 40).exists()
    assert Path(MetricsStage().path(ctx)).exists()


def test_the_api_gives_the_pipelines_trajectory(run, series):
    """ev.load_series + ev.trajectory on the corpus sentences and the config's settings: the same
    distances to the final member and between the series as the pipeline's trajectory.zarr."""
    import evolution.api as ev
    from evolution.analyses.plotting import open_group
    from evolution.corpus.text import read_text_corpus
    from pipelines.stages import TrajectoryStage

    gpt2 = ev.load_series(series / "ckpt" / "gpt2", checkpoints="step*", name="gpt2", device="cpu")
    bert = ev.load_series(checkpoints=str(series / "ckpt" / "bert" / "step*"), name="bert", device="cpu")
    assert gpt2.steps == [0, 40, 80, 120] and gpt2.final.name == "gpt2@120" and bert[40].name == "bert@40"
    sentences = read_text_corpus(series / "genesis.txt", max_sentences=SENTENCES).sentences
    cfg = run.config.metrics
    traj = ev.trajectory(
        [gpt2, bert],
        sentences,
        tokens=cfg.tokens.model_dump(),
        options={
            "mi": {"k": 20, "restarts": 2, "bootstrap": 5},
            "neighbors": {"k": 5, "max_per_type": 50, "bootstrap": 5},
            "similarity": {"sentences": 250, "bootstrap": 4, "equal_bins": 0},
        },
    )
    ref = open_group(TrajectoryStage().path(run), "curves")
    for var in ("to_final", "between"):
        np.testing.assert_allclose(traj["curves"][var].values, ref[var].values, atol=1e-6, err_msg=var)
    fig = ev.plot.trajectory(traj["curves"], "to_final", series="bert")
    assert len(fig.axes[0].lines) == 3  # one line per layer


def test_intervals_per_step_only_where_asked(run, series, tmp_path):
    """Without ``intervals`` a snapshot has point values (NaN intervals) and the final member its
    bootstrap interval; with ``intervals=True`` each step's interval is its snapshot's, around
    its value."""
    import evolution.api as ev
    from evolution.analyses.plotting import open_group
    from evolution.corpus.text import read_text_corpus
    from pipelines.stages import TrajectoryStage

    ref = open_group(TrajectoryStage().path(run), "curves")["same_token_interval"].sel(series="gpt2")
    assert np.isnan(ref.sel(checkpoint=40)).all() and np.isfinite(ref.sel(checkpoint=STEPS)).all()
    gpt2 = ev.load_series(series / "ckpt" / "gpt2", checkpoints="step*", name="gpt2", device="cpu")
    sentences = read_text_corpus(series / "genesis.txt", max_sentences=150).sentences
    traj = ev.trajectory(
        gpt2,
        sentences,
        analyses=["mi", "neighbors"],
        intervals=True,
        workdir=tmp_path / "w",
        options={
            "mi": {"k": 10, "restarts": 1, "bootstrap": 5},
            "neighbors": {"k": 5, "max_per_type": 50, "bootstrap": 5},
        },
    )
    curves = traj["curves"]
    for var in ("same_token", "mi_input"):  # every step has its interval, and it has a width
        iv = curves[f"{var}_interval"].sel(series="gpt2")
        assert np.isfinite(iv).all() and (iv.sel(bound="high") > iv.sel(bound="low")).all(), var
    snap = open_group(tmp_path / "w" / "trajectory" / "update-40" / "metrics.zarr", "neighbors")
    np.testing.assert_allclose(
        curves["same_token_interval"].sel(series="gpt2", checkpoint=40),
        snap["interval"].sel(model="gpt2@40", measure="same_token"),
    )
    mi = open_group(tmp_path / "w" / "trajectory" / "update-80" / "metrics.zarr", "mi").sel(model="gpt2@80")
    np.testing.assert_allclose(
        curves["mi_input_interval"].sel(series="gpt2", checkpoint=80),
        (mi["mi_mean_interval"] / mi["entropy"]).sel(target="input"),
    )


LEAVE_OUT = """workdir: leave-out
corpus: {{source: text, path: genesis.txt, max_sentences: 120}}
extract: {{attention: {{sentences: 40}}}}
models:
  - {{name: g, kind: huggingface, checkpoints: "ckpt/gpt2/step[08]*"}}
metrics:
  tokens: {{top: 30, min_count: 5}}
  mi: {{k: 10, restarts: 1, bootstrap: 0}}
  neighbors: {{k: 5, max_per_type: 30, bootstrap: 0}}
  similarity: {{sentences: 100, bootstrap: 0, equal_bins: 0}}
  tsne: null
  influence: null
  trajectory: {{analyses: {analyses}}}
report: {{views: null}}
"""


def test_the_pipeline_route_with_each_analysis_left_out(series):
    """metrics.trajectory.analyses without one of its analyses: the run finishes, the snapshot has
    every other analysis's group and not the one left out, and each layer's distance to the final
    member is the same as with all four (it reads the similarity sentences whether or not the
    similarity analysis runs on the snapshot)."""
    from evolution.analyses.plotting import open_group
    from evolution.config import load_config
    from pipelines.run import main
    from pipelines.stages import Context, TrajectoryStage

    every = ["mi", "neighbors", "similarity", "heads"]
    groups = {"mi": "mi", "neighbors": "neighbors", "similarity": "similarity", "heads": "heads"}
    distances = {}
    for left_out in [None, *every]:
        analyses = [a for a in every if a != left_out]
        path = series / f"leave-out-{left_out}.yaml"
        path.write_text(LEAVE_OUT.format(analyses="[" + ", ".join(analyses) + "]"), encoding="utf-8")
        assert main([str(path), "--no-progress"]) == 0, left_out
        ctx = Context(config=load_config(path))
        assert sorted(TrajectoryStage().checkpoints(ctx)) == [0]  # g@0 against the final g@80
        snapshot = TrajectoryStage().snapshot(ctx, 0)
        for a in every:
            present = open_group(snapshot, groups[a]) is not None
            assert present == (a != left_out), (left_out, a)
        d = open_group(snapshot, "to_final")["distance"].sel(model="g@0")
        assert np.isfinite(d.values).all() and (d.values > 0).all(), left_out
        distances[left_out] = d.values
    for left_out in every:
        np.testing.assert_allclose(distances[left_out], distances[None], rtol=0, atol=1e-12, err_msg=left_out)


ONE_WORKDIR = """workdir: one-workdir
cluster: synchronous
corpus: {{source: text, path: genesis.txt, max_sentences: 120}}
extract: {{attention: {{sentences: 40}}}}
models:
  - {{name: g, kind: huggingface, checkpoints: "ckpt/gpt2/step[08]*"}}
metrics:
  tokens: {{top: 30, min_count: 5}}
  mi: {{k: 10, restarts: 1, bootstrap: 0}}
  neighbors: null
  similarity: {{sentences: {sentences}, epsilon: {epsilon}, min_ratio: {min_ratio}, bootstrap: 0, equal_bins: 0}}
  tsne: null
  influence: null
  trajectory: {{analyses: {analyses}, methods: {methods}}}
report: {{views: null}}
"""


def _plain_pwcca_distance(x: np.ndarray, y: np.ndarray, epsilon: float) -> float:
    """1 - the mean of both PWCCA directions (the distance of docs/trajectory.md), each view the
    centred float64 rows cut to the directions whose singular value is above ``epsilon`` x the
    largest (a plain LAPACK SVD), then the covariance-route reference of tests/test_metrics.py."""
    from test_metrics import reference_pwcca

    def cut(a):
        a = np.asarray(a, dtype=np.float64)
        a = a - a.mean(0)
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        keep = s > epsilon * s[0]
        return (u[:, keep] * s[keep]) @ vt[keep]

    a, b = cut(x), cut(y)
    return 1 - (reference_pwcca(a, b)[0] + reference_pwcca(b, a)[0]) / 2


def test_each_setting_the_distance_to_the_final_member_reads_changes_it_in_one_workdir(series):
    """One workdir, one run after another, each changing one setting that the distance to the final
    member reads (metrics.similarity.sentences, so the rows; epsilon; min_ratio;
    metrics.trajectory.methods), with and without the similarity analysis in the snapshot: every
    run's distance is the plain definition on the rows of the first ``sentences`` sentences of the
    store, never the cached distance of an earlier setting, and a min_ratio the rows cannot meet
    refuses. Before the distance's key held the sentences and its rows, and the snapshot's key the
    settings it reads, the second run gave the first run's distances."""
    from test_metrics import reference_cka

    from evolution.analyses.plotting import open_group
    from evolution.config import load_config
    from evolution.store import open_representations
    from pipelines.run import main
    from pipelines.stages import Context, ExtractStage, TrajectoryStage

    base = {"sentences": 100, "epsilon": 1e-6, "min_ratio": 10, "analyses": "[mi]", "methods": "[pwcca, cka]"}
    steps = [
        {},
        {"sentences": 60},
        {"sentences": 60, "epsilon": 0.3},
        {"sentences": 60, "analyses": "[similarity]"},
        {"sentences": 100, "analyses": "[similarity]"},
        {"sentences": 100, "methods": "[cka]"},
    ]
    path = series / "one-workdir.yaml"
    seen = []
    for change in steps:
        settings = {**base, **change}
        path.write_text(ONE_WORKDIR.format(**settings), encoding="utf-8")
        assert main([str(path), "--no-progress"]) == 0, change
        ctx = Context(config=load_config(path))
        got = open_group(TrajectoryStage().snapshot(ctx, 0), "to_final")["distance"].sel(model="g@0")
        store = ExtractStage().store(ctx)
        member, final = open_representations(store, "g@0"), open_representations(store, "g@80")
        sentence = member["sentence"].values
        np.testing.assert_array_equal(sentence, final["sentence"].values)
        rows = np.flatnonzero(np.isin(sentence, np.unique(sentence)[: settings["sentences"]]))
        methods = settings["methods"].strip("[]").split(", ")
        assert list(got["metric"].values) == methods, change
        for layer in range(int(got.sizes["layer"])):
            x = member["hidden"].isel(layer=layer).values[rows]
            y = final["hidden"].isel(layer=layer).values[rows]
            if "pwcca" in methods:
                expected = _plain_pwcca_distance(x, y, settings["epsilon"])
                assert float(got.sel(metric="pwcca", layer=layer)) == pytest.approx(expected, abs=1e-5), (change, layer)
            if "cka" in methods and settings["epsilon"] < 1e-3:  # CKA's cut directions: below rounding
                expected = 1 - reference_cka(x.astype(np.float64), y.astype(np.float64))
                assert float(got.sel(metric="cka", layer=layer)) == pytest.approx(expected, abs=1e-5), (change, layer)
        seen.append(got.values)
    assert not np.allclose(seen[0], seen[1]) and not np.allclose(seen[1], seen[2])  # each change moved it
    # a min_ratio that the rows of 60 sentences cannot meet (d = 32): the run refuses, naming it
    path.write_text(ONE_WORKDIR.format(**{**base, "sentences": 60, "min_ratio": 1000}), encoding="utf-8")
    n = int(np.isin(sentence, np.unique(sentence)[:60]).sum())
    with pytest.raises(ValueError, match=rf"{n} occurrences for 32 dimensions.*1000 x d = 32000.*min_ratio"):
        main([str(path), "--no-progress"])
