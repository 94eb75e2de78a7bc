"""Checkpoint series as models (``models[].revisions`` / ``models[].checkpoints``,
:mod:`evolution.series`): the members, their steps, and the errors a researcher meets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evolution.config import ConfigError, load_config
from evolution.series import step_of_name
from evolution.trajectory import head_roles


def test_the_step_is_the_last_number_of_the_name():
    assert step_of_name("step1000") == 1000
    assert step_of_name("checkpoint-500") == 500
    assert step_of_name("checkpoint_3_1200.pt") == 1200  # fairseq: epoch 3, update 1200
    assert step_of_name("runs/seed7/ckpt-80") == 80  # the name, not the directories above it
    assert step_of_name("step0") == 0
    assert step_of_name("final") is None
    assert step_of_name("checkpoint_best.pt") is None


def test_head_roles_first_step_and_kept():
    """Three steps, two roles, a 1 x 3 layer of heads: head 0 takes role 0 at step 10 and keeps it;
    head 1 takes it at 0 and loses it at 20; head 2 takes it only at the last step (kept); role 1
    is taken by head 1 at 20 after a step that was not analysed (None breaks nothing)."""
    t, f = True, False
    flags = [
        np.array([[[f, t, f]], [[f, f, f]]]),  # step 0
        np.array([[[t, t, f]], [[f, f, f]]]),  # step 10
        None,  # step 15: not analysed
        np.array([[[t, f, t]], [[f, t, f]]]),
    ]  # step 20
    first, kept = head_roles(flags, [0, 10, 15, 20])
    np.testing.assert_array_equal(first, [[[10, 0, 20]], [[-1, 20, -1]]])
    np.testing.assert_array_equal(kept, [[[t, f, t]], [[f, t, f]]])


def _series_dirs(root: Path, name: str, steps, *, arch: str = "gpt2", seed_of=lambda s: s) -> Path:
    from evolution.fixtures.random_init import make_hf_model

    words = "in the beginning god created heaven and earth the was".split()
    for s in steps:
        make_hf_model(root / name / f"checkpoint-{s}", arch=arch, words=words, seed=seed_of(s))
    return root / name


def _config(root: Path, models: str, *, trajectory: bool = True) -> Path:
    (root / "t.txt").write_text("in the beginning god created the heaven and the earth\n" * 4, encoding="utf-8")
    path = root / "c.yaml"
    path.write_text(
        f"corpus: {{source: text, path: t.txt}}\nmodels:\n{models}\n"
        + ("metrics: {trajectory: {}}\n" if trajectory else ""),
        encoding="utf-8",
    )
    return path


def test_a_glob_of_checkpoints_is_a_series_ordered_by_step(tmp_path):
    _series_dirs(tmp_path, "ckpt", [0, 50, 100, 1000])
    cfg = load_config(_config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}'))
    members = cfg.series()["g"]
    assert [(m.name, m.step, m.series) for m in members] == [  # by number, not as the glob sorts (1000 < 50)
        ("g@0", 0, "g"),
        ("g@50", 50, "g"),
        ("g@100", 100, "g"),
        ("g@1000", 1000, "g"),
    ]
    assert [m.path.name for m in members] == ["checkpoint-0", "checkpoint-50", "checkpoint-100", "checkpoint-1000"]
    assert [m.name for m in cfg.models] == ["g@1000"]  # the final member is analysed as a model


def test_a_name_without_a_step_takes_the_step_its_checkpoint_records(tmp_path):
    root = _series_dirs(tmp_path, "ckpt", [0, 50])
    shutil.move(root / "checkpoint-50", root / "checkpoint-last")
    cfg_path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    with pytest.raises(ConfigError, match=r"checkpoint-last.*neither its name nor its metadata gives a step"):
        load_config(cfg_path)
    (root / "checkpoint-last" / "trainer_state.json").write_text(json.dumps({"global_step": 70}), encoding="utf-8")
    assert [m.step for m in load_config(cfg_path).series()["g"]] == [0, 70]


@pytest.mark.parametrize(
    "case, models, message",
    [
        ("nothing", '  - {name: g, kind: huggingface, checkpoints: "nothing-*"}', "matches nothing"),
        ("one", '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-5*"}', "at least two checkpoints"),
        ("twice", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*"}', "step 50 is also"),
        ("both", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*", revisions: [step1]}', "not both"),
        ("path", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*", path: ckpt}', "remove 'path'"),
        ("at", '  - {name: "g@1", kind: huggingface, checkpoints: "ckpt/*"}', "without '@'"),
        ("kind", "  - {name: g, kind: shipped, revisions: [step1, step2], path: org/model}", "kind: huggingface"),
    ],
)
def test_bad_series_are_refused_naming_the_member_and_the_fix(tmp_path, case, models, message):
    root = _series_dirs(tmp_path, "ckpt", [0, 50])
    if case == "twice":
        shutil.copytree(root / "checkpoint-50", root / "step-50")
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, models))


def test_trajectory_without_checkpoints_or_a_series_is_refused(tmp_path):
    _series_dirs(tmp_path, "ckpt", [0])
    with pytest.raises(ConfigError, match="checkpoint series"):
        load_config(_config(tmp_path, "  - {name: g, kind: huggingface, path: ckpt/checkpoint-0}"))


def test_hub_revisions_resolve_from_the_local_cache_offline(tmp_path, monkeypatch):
    """``revisions`` of a hub id, as Pythia publishes them, found in the Hugging Face cache with no
    network: each member is that revision's snapshot; a revision the cache lacks is named."""
    from evolution.fixtures.tiny_series import to_hub_cache

    root = _series_dirs(tmp_path, "ckpt", [0, 500, 2000])
    cache = tmp_path / "hub"
    to_hub_cache(cache, repo_id="lab/tiny", revisions={f"step{s}": root / f"checkpoint-{s}" for s in (0, 500, 2000)})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(
        _config(tmp_path, "  - {name: tiny, kind: huggingface, path: lab/tiny, revisions: [step2000, step0, step500]}")
    )
    members = cfg.series()["tiny"]
    assert [(m.name, m.revision, m.hub_id) for m in members] == [
        ("tiny@0", "step0", "lab/tiny"),
        ("tiny@500", "step500", "lab/tiny"),
        ("tiny@2000", "step2000", "lab/tiny"),
    ]
    for m in members:
        assert m.path.parent.name == "snapshots" and str(m.path).startswith(str(cache))
        assert (m.path / "model.safetensors").read_bytes() == (
            root / f"checkpoint-{m.step}" / "model.safetensors"
        ).read_bytes()
    with pytest.raises(ConfigError, match=r"revision 'step9000' \(member tiny@9000\).*not in the Hugging Face cache"):
        load_config(
            _config(tmp_path, "  - {name: tiny, kind: huggingface, path: lab/tiny, revisions: [step0, step9000]}")
        )
    with pytest.raises(ConfigError, match=r"revision 'main'.*no step in the revision's name"):
        load_config(_config(tmp_path, "  - {name: tiny, kind: huggingface, path: lab/tiny, revisions: [step0, main]}"))


def test_steps_that_hold_the_same_weights_are_found(tmp_path):
    """Two revisions serving one file (EleutherAI/pythia#205) are one model at two steps: found by
    the weights' bytes, whatever the other files (trainer_state.json differs here)."""
    from evolution.series import same_weights

    root = _series_dirs(tmp_path, "ckpt", [0, 100, 200, 300])
    for s in (200, 300):
        shutil.copy(root / "checkpoint-100" / "model.safetensors", root / f"checkpoint-{s}" / "model.safetensors")
        (root / f"checkpoint-{s}" / "trainer_state.json").write_text(json.dumps({"global_step": s}), encoding="utf-8")
    members = load_config(
        _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    ).series()["g"]
    assert same_weights(members) == [["g@100", "g@200", "g@300"]]
    assert same_weights(members[:2]) == []


def test_fairseq_and_shipped_checkpoints_give_their_recorded_steps(tmp_path):
    """A fairseq series from a glob of checkpoint files (fairseq-train's checkpoint_<epoch>_<update>.pt
    and a checkpoint_best.pt whose step is its optimizer history's num_updates), and the update
    count a shipped model records."""
    import torch

    from evolution.fixtures.random_init import make_fairseq_model, vocabulary_of
    from evolution.series import recorded_step

    words = vocabulary_of(["in the beginning god created the heaven and the earth"])
    ckpt, data = make_fairseq_model(tmp_path / "m", task="language_modeling", words=words)
    runs = tmp_path / "ckpts"
    runs.mkdir()
    for name, updates in (("checkpoint_1_50.pt", 50), ("checkpoint_2_100.pt", 100), ("checkpoint_best.pt", 70)):
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        state["optimizer_history"][-1]["num_updates"] = updates
        torch.save(state, runs / name)
    assert recorded_step(runs / "checkpoint_best.pt", "fairseq") == 70
    (tmp_path / "t.txt").write_text("in the beginning god created the heaven and the earth\n", encoding="utf-8")
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(
        f"corpus: {{source: text, path: t.txt}}\nmodels:\n  - {{name: lm, kind: fairseq, "
        f"checkpoints: 'ckpts/checkpoint_*.pt', data: {data}}}\n",
        encoding="utf-8",
    )
    members = load_config(cfg_path).series()["lm"]
    assert [(m.name, m.path.name, m.data) for m in members] == [
        ("lm@50", "checkpoint_1_50.pt", data),
        ("lm@70", "checkpoint_best.pt", data),
        ("lm@100", "checkpoint_2_100.pt", data),
    ]
    shipped = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models" / "mt"
    assert recorded_step(shipped, "shipped") == json.loads((shipped / "model.json").read_text())["updates"]


# --- the steps, the rows and the trajectory's groups on synthetic stores (known answers) -------------


def test_the_step_of_a_path_is_read_from_its_last_component_only():
    """A number in a directory above the checkpoint (a seed, a run) is not its step."""
    assert step_of_name("runs/seed7/final") is None
    assert step_of_name("runs/run3/checkpoint_best.pt") is None
    assert step_of_name("runs/seed7/checkpoint-80") == 80


def test_a_resumed_fairseq_checkpoint_records_the_updates_of_its_last_history_entry(tmp_path):
    """fairseq appends an optimizer-history entry per resume: the step is the last one's num_updates."""
    import torch

    from evolution.series import recorded_step

    path = tmp_path / "checkpoint_last.pt"
    torch.save({"optimizer_history": [{"num_updates": 300}, {"num_updates": 1200}]}, path)
    assert recorded_step(path, "fairseq") == 1200
    torch.save({"model": {}}, path)
    assert recorded_step(path, "fairseq") is None


def _roles_by_loop(flags, steps):
    """head_roles, one head at a time: the first analysed step with the flag, and whether every
    analysed step from there on has it."""
    known = [(f, u) for f, u in zip(flags, steps, strict=True) if f is not None]
    first = np.full(known[0][0].shape, -1)
    kept = np.zeros(known[0][0].shape, dtype=bool)
    for idx in np.ndindex(first.shape):
        seq = [(bool(f[idx]), u) for f, u in known]
        taken = [i for i, (has, _) in enumerate(seq) if has]
        if taken:
            first[idx] = seq[taken[0]][1]
            kept[idx] = all(has for has, _ in seq[taken[0] :])
    return first, kept


def test_head_roles_against_a_plain_loop():
    """Random flags over 1-6 steps, some not analysed: the same first step and kept flag as a loop
    over the heads; a head that has a role, loses it and has it again at the last step does not
    keep it."""
    rng = np.random.default_rng(0)
    for _ in range(40):
        steps = sorted(int(s) for s in rng.choice(1000, int(rng.integers(1, 7)), replace=False))
        flags = [None if rng.random() < 0.25 else rng.random((3, 2, 4)) < 0.5 for _ in steps]
        if all(f is None for f in flags):
            flags[-1] = rng.random((3, 2, 4)) < 0.5
        first, kept = head_roles(flags, steps)
        ref_first, ref_kept = _roles_by_loop(flags, steps)
        np.testing.assert_array_equal(first, ref_first)
        np.testing.assert_array_equal(kept, ref_kept)
    t, f = np.ones((1, 1, 1), bool), np.zeros((1, 1, 1), bool)
    first, kept = head_roles([t, f, t], [0, 10, 20])
    assert int(first[0, 0, 0]) == 0 and not bool(kept[0, 0, 0])


def test_a_snapshot_has_the_trajectorys_analyses_with_a_bootstrap_only_with_intervals():
    from evolution.config import MetricsConfig, TrajectoryConfig
    from evolution.snapshots import snapshot_config

    metrics = MetricsConfig()
    assert (metrics.mi.bootstrap, metrics.neighbors.bootstrap, metrics.similarity.bootstrap) == (200, 200, 20)
    points = snapshot_config(metrics, TrajectoryConfig())
    assert (points.mi.bootstrap, points.neighbors.bootstrap, points.similarity.bootstrap) == (0, 0, 0)
    assert points.influence is None and points.trajectory is None and points.heads == metrics.heads
    both = snapshot_config(metrics, TrajectoryConfig(intervals=True, analyses=["mi", "neighbors"]))
    assert (both.mi.bootstrap, both.neighbors.bootstrap) == (200, 200) and both.similarity is None


def _trained(name: str, step: int | None = None):
    from evolution.config import ModelConfig

    return ModelConfig(name=name, kind="trained", step=step)


def test_series_rows_snapshot_every_member_but_the_last_and_checkpoints_ascend():
    """A series' last member is its final model at its step; the snapshots are the others. Steps
    that only some rows have come in ascending order, each with the rows that have it."""
    from evolution.trajectory import checkpoint_models, series_rows

    rows = series_rows(
        {
            "a": [_trained("a@0", 0), _trained("a@300", 300), _trained("a@400", 400)],
            "b": [_trained("b@100", 100), _trained("b@200", 200), _trained("b@300", 300), _trained("b@500", 500)],
        }
    )
    assert [(r.label, sorted(r.members), r.final.name, r.final_step) for r in rows] == [
        ("a", [0, 300], "a@400", 400),
        ("b", [100, 200, 300], "b@500", 500),
    ]
    got = checkpoint_models(rows)
    assert list(got) == [0, 100, 200, 300]
    assert {u: [m.name for m in ms] for u, ms in got.items()} == {
        0: ["a@0"],
        100: ["b@100"],
        200: ["b@200"],
        300: ["a@300", "b@300"],
    }


def _value(name: str, layer: int, what: str) -> float:
    """The synthetic stores' numbers: distinct per model, layer and quantity."""
    base = {"a": 0.1, "b": 0.2, "c": 0.3}[name.split("@")[0]] + (int(name.split("@")[1]) if "@" in name else 99) / 1000
    return base + layer / 100 + {"mi": 0.0, "same": 0.4, "pwcca": 0.05, "cka": 0.07}[what]


def _store(path: Path, models: list[str], *, to_final=(), sim=None, intervals=False, heads=None, layers=2) -> Path:
    """A metrics store as the analyses write it, with the numbers of :func:`_value`: mi (MI with the
    input = mi_mean / entropy), neighbors (same_token), to_final (of the models in ``to_final``),
    similarity (``sim``: (model_a, model_b) -> (metric, layer) same-layer distances, NaN elsewhere),
    heads (``heads``: model -> (layer, head) positional flags); with ``intervals``, bootstrap
    intervals [x - 0.01, x + 0.02]."""
    import xarray as xr

    from evolution.metrics.results import write_metrics

    lay = np.arange(layers)
    mi = np.array([[[_value(m, layer, "mi") * 2.0, 0.5] for layer in lay] for m in models])  # (model, layer, target)
    same = np.array([[[_value(m, layer, "same")] for layer in lay] for m in models])
    groups = {
        "mi": xr.Dataset(
            {
                "mi_mean": (("model", "layer", "target"), mi),
                "entropy": (("model", "target"), np.full((len(models), 2), 2.0)),
            },
            coords={"model": models, "layer": lay, "target": ["input", "output"]},
        ),
        "neighbors": xr.Dataset(
            {"value": (("model", "layer", "measure"), same)},
            coords={"model": models, "layer": lay, "measure": ["same_token"]},
        ),
    }
    if intervals:
        groups["mi"]["mi_mean_interval"] = (
            ("model", "layer", "target", "bound"),
            np.stack([mi - 0.02, mi + 0.04], axis=-1),
        )
        groups["neighbors"]["interval"] = (
            ("model", "layer", "measure", "bound"),
            np.stack([same - 0.01, same + 0.02], axis=-1),
        )
        groups["mi"] = groups["mi"].assign_coords(bound=["low", "high"])
        groups["neighbors"] = groups["neighbors"].assign_coords(bound=["low", "high"])
    if to_final:
        d = np.array([[[_value(m, layer, k) for layer in lay] for m in to_final] for k in ("pwcca", "cka")])
        groups["to_final"] = xr.Dataset(
            {"distance": (("metric", "model", "layer"), d)},
            coords={"metric": ["pwcca", "cka"], "model": list(to_final), "layer": lay},
        )
    if sim is not None:
        same_layer = np.full((2, len(models), len(models), layers), np.nan)
        for (a, b), v in sim.items():
            same_layer[:, models.index(a), models.index(b), :] = v
        groups["similarity"] = xr.Dataset(
            {
                "same_layer": (("metric", "model_a", "model_b", "layer"), same_layer),
                "distance": (
                    ("metric", "model_a", "layer_a", "model_b", "layer_b"),
                    np.full((2, len(models), layers, len(models), layers), np.nan),
                ),
            },
            coords={
                "metric": ["pwcca", "cka"],
                "model_a": models,
                "model_b": models,
                "layer": lay,
                "layer_a": lay,
                "layer_b": lay,
            },
        )
    if heads is not None:
        names = list(heads)
        groups["heads"] = xr.Dataset(
            {"positional": (("model", "layer", "head"), np.array([heads[m] for m in names]))},
            coords={"model": names, "layer": np.arange(1), "head": np.arange(2)},
        )
    write_metrics(str(path), groups, fingerprint="test")
    return path


def test_collect_places_each_rows_models_at_their_steps(tmp_path):
    """Two rows with their own steps and final steps (a: 10, 30, final 50; b: 10, 20, final 40):
    each curve has the model's own number at its step and NaN where the row has no model; the
    distance to the final model is the snapshot's, and 0 at the final step; intervals where a store
    has them, low below high; ``between`` only at a step both rows have in one store; the final
    snapshot's update is the largest final step; head roles from the flags at each step."""
    from evolution.trajectory import Row, collect

    t, f = True, False
    snaps = {
        10: _store(
            tmp_path / "s10",
            ["a@10", "b@10"],
            to_final=["a@10", "b@10"],
            intervals=True,
            sim={("a@10", "b@10"): np.array([[0.31, 0.32], [0.61, 0.62]])},
            heads={"a@10": [[t, f]], "b@10": [[f, f]]},
        ),
        20: _store(tmp_path / "s20", ["b@20"], to_final=["b@20"], heads={"b@20": [[f, t]]}),
        30: _store(tmp_path / "s30", ["a@30"], to_final=["a@30"], heads={"a@30": [[t, t]]}),
    }
    final = _store(
        tmp_path / "final",
        ["a", "b"],
        intervals=True,
        sim={("a", "b"): np.array([[0.2, 0.2], [0.5, 0.5]])},
        heads={"a": [[f, t]], "b": [[f, t]]},
    )
    rows = [
        Row("a", {10: _trained("a@10"), 30: _trained("a@30")}, _trained("a"), 50, "lm"),
        Row("b", {10: _trained("b@10"), 20: _trained("b@20")}, _trained("b"), 40, "mlm"),
    ]
    out = collect(final, snaps, rows=rows)
    curves = out["curves"]
    steps = [10, 20, 30, 40, 50]
    assert list(curves["checkpoint"].values) == steps
    assert list(curves["series"].values) == ["a", "b"] and list(curves["final_update"].values) == [50, 40]
    assert list(curves["final_model"].values) == ["a", "b"] and list(curves["objective"].values) == ["lm", "mlm"]
    at = {"a": {10: "a@10", 30: "a@30", 50: "a"}, "b": {10: "b@10", 20: "b@20", 40: "b"}}
    for s, models in at.items():
        for u in steps:
            m = models.get(u)
            mi = curves["mi_input"].sel(series=s, checkpoint=u).values
            same = curves["same_token"].sel(series=s, checkpoint=u).values
            if m is None:
                assert np.isnan(mi).all() and np.isnan(same).all(), (s, u)
                assert np.isnan(curves["to_final"].sel(series=s, checkpoint=u).values).all(), (s, u)
                continue
            np.testing.assert_allclose(mi, [_value(m, layer, "mi") for layer in (0, 1)], err_msg=f"{s} {u}")
            np.testing.assert_allclose(same, [_value(m, layer, "same") for layer in (0, 1)], err_msg=f"{s} {u}")
            for metric in ("pwcca", "cka"):
                expected = [0.0, 0.0] if "@" not in m else [_value(m, layer, metric) for layer in (0, 1)]
                np.testing.assert_allclose(
                    curves["to_final"].sel(metric=metric, series=s, checkpoint=u), expected, err_msg=f"{s} {u} {metric}"
                )
            iv = curves["same_token_interval"].sel(series=s, checkpoint=u)
            if u in (10, 40, 50):  # the stores with intervals: s10 and the final one
                np.testing.assert_allclose(iv.sel(bound="low"), same - 0.01)
                np.testing.assert_allclose(iv.sel(bound="high"), same + 0.02)
                np.testing.assert_allclose(
                    curves["mi_input_interval"].sel(series=s, checkpoint=u, bound="high"), mi + 0.02
                )
            else:
                assert np.isnan(iv).all(), (s, u)
    assert list(curves["pair"].values) == ["a | b"]
    between = curves["between"].sel(pair="a | b")
    np.testing.assert_allclose(between.sel(checkpoint=10).values, [[0.31, 0.32], [0.61, 0.62]])
    assert np.isnan(between.sel(checkpoint=[20, 30, 40, 50]).values).all()  # no step where both are in one store
    verdicts = out["verdicts"]
    assert list(verdicts["snapshot"].values) == ["10", "20", "30", "final"]
    assert list(verdicts["update"].values) == [10, 20, 30, 50]
    roles = out["roles"].sel(role="positional", layer=0)
    # a: head 0 at 10, 30, not at the final (lost); head 1 at 30 and the final (kept)
    # b: head 0 never; head 1 at 20, not at 10, and at the final (kept)
    np.testing.assert_array_equal(roles["first"].sel(series="a"), [10, 30])
    np.testing.assert_array_equal(roles["kept"].sel(series="a"), [False, True])
    np.testing.assert_array_equal(roles["first"].sel(series="b"), [-1, 20])
    np.testing.assert_array_equal(roles["kept"].sel(series="b"), [False, True])


def test_collect_labels_each_pair_of_three_rows_with_its_own_distances(tmp_path):
    """Three rows at the same steps: each pair's ``between`` is that pair's same-layer distance, in
    whichever order the similarity group holds it, at the snapshot and at the final models."""
    from evolution.trajectory import Row, collect

    d = {("a", "b"): 0.1, ("a", "c"): 0.2, ("b", "c"): 0.3}
    snap = _store(
        tmp_path / "s5",
        ["a@5", "b@5", "c@5"],
        to_final=["a@5", "b@5", "c@5"],
        sim={
            ("a@5", "b@5"): np.full((2, 2), 0.1),
            ("a@5", "c@5"): np.full((2, 2), 0.2),
            ("c@5", "b@5"): np.full((2, 2), 0.3),
        },
    )
    final = _store(
        tmp_path / "final",
        ["a", "b", "c"],
        sim={("a", "b"): np.full((2, 2), 0.5), ("c", "a"): np.full((2, 2), 0.6), ("b", "c"): np.full((2, 2), 0.7)},
    )
    rows = [Row(s, {5: _trained(f"{s}@5")}, _trained(s), 9) for s in "abc"]
    curves = collect(final, {5: snap}, rows=rows)["curves"]
    assert list(curves["pair"].values) == ["a | b", "a | c", "b | c"]
    for (x, y), v in d.items():
        between = curves["between"].sel(pair=f"{x} | {y}")
        np.testing.assert_allclose(between.sel(checkpoint=5), v, err_msg=f"{x} | {y}")
        np.testing.assert_allclose(between.sel(checkpoint=9), v + 0.4, err_msg=f"{x} | {y}")


def test_a_member_holding_the_final_members_weights_is_reported(tmp_path):
    """A step served with the final checkpoint's file (EleutherAI/pythia#205) is one model with
    the final member: the trajectory's warning names both."""
    from evolution.trajectory import series_rows
    from pipelines.stages import TrajectoryStage

    root = _series_dirs(tmp_path, "ckpt", [0, 50, 100])
    cfg_path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    assert TrajectoryStage._same_weights(series_rows(load_config(cfg_path).series())) == {}
    shutil.copy(root / "checkpoint-100" / "model.safetensors", root / "checkpoint-50" / "model.safetensors")
    assert TrajectoryStage._same_weights(series_rows(load_config(cfg_path).series())) == {"g": [["g@50", "g@100"]]}


def test_a_snapshots_key_follows_its_members_and_the_final_member(tmp_path):
    """A snapshot holds its members' distances to the final member: a later final member changes
    the key of every snapshot (they are recomputed); a step added between changes no other key."""
    from pipelines.stages import Context, TrajectoryStage

    _series_dirs(tmp_path, "ckpt", [0, 50, 100])
    cfg_path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')

    def key(step: int) -> str:
        return TrajectoryStage()._snapshot_key(Context(config=load_config(cfg_path)), step)

    before = key(0)
    assert key(0) == before
    _series_dirs(tmp_path, "ckpt", [25])
    assert key(0) == before
    _series_dirs(tmp_path, "ckpt", [200])
    assert key(0) != before


@pytest.mark.parametrize(
    "steps, scale",
    [
        ([0, 40, 80, 120], "linear"),  # saved every N steps
        ([100, 200, 300, 350], "linear"),  # every N steps and a final one between
        ([1, 2, 4, 8, 16], "log"),  # kept updates F, F R, F R^2, ...
        ([1, 2, 4], "log"),  # three doubling steps are no grid either
        ([25, 50, 100, 600], "log"),
        ([0, 1, 2, 4, 8, 16], "symlog"),  # Pythia's early steps, with step 0
    ],
)
def test_the_step_axis_is_linear_for_evenly_saved_steps_and_log_otherwise(steps, scale):
    from evolution.analyses.plotting import plt
    from evolution.report.trajectory import _step_axis

    fig, ax = plt().subplots()
    _step_axis(ax, np.array(steps))
    assert ax.get_xscale() == scale
    plt().close(fig)


def test_role_rows_list_every_head_that_takes_a_role_from_its_first_step():
    """A head that has its role from step 0 on is listed (0 is a step, -1 is never)."""
    import xarray as xr

    from evolution.report.trajectory import role_rows
    from evolution.trajectory import ROLES

    first = np.full((2, len(ROLES), 1, 2), -1)
    kept = np.zeros(first.shape, dtype=bool)
    first[0, 0, 0, 1], kept[0, 0, 0, 1] = 0, True  # a: positional head (0, 1) from step 0 on
    first[1, 2, 0, 0] = 40  # b: rare-token head (0, 0) at 40, lost later
    dims = ("series", "role", "layer", "head")
    roles = xr.Dataset(
        {"first": (dims, first), "kept": (dims, kept)},
        coords={"series": ["a", "b"], "role": list(ROLES), "layer": [0], "head": [0, 1]},
    )
    assert role_rows(roles) == [
        ["series", "role", "layer", "head", "first step", "kept"],
        ["a", "positional", "0", "1", "0", "yes"],
        ["b", "rare_token", "0", "0", "40", "no"],
    ]


def _curves():
    """A curves group: series a and b, steps 0, 10, 20, two layers; pwcca and cka distinct."""
    import xarray as xr

    x, lay = [0, 10, 20], [0, 1]
    to_final = np.array(
        [
            [[[0.5, 0.6], [0.3, 0.4], [0.0, 0.0]], [[0.7, 0.8], [0.2, 0.1], [0.0, 0.0]]],
            [[[0.05, 0.06], [0.03, 0.04], [0.0, 0.0]], [[0.07, 0.08], [0.02, 0.01], [0.0, 0.0]]],
        ]
    )
    between = np.array(
        [
            [[[0.9, 0.8], [np.nan, np.nan], [0.4, 0.3]], [[np.nan] * 2] * 3],
            [[[0.19, 0.18], [np.nan, np.nan], [0.14, 0.13]], [[np.nan] * 2] * 3],
        ]
    )
    return xr.Dataset(
        {
            "to_final": (("metric", "series", "checkpoint", "layer"), to_final),
            "between": (("metric", "pair", "checkpoint", "layer"), between),
        },
        coords={
            "metric": ["pwcca", "cka"],
            "series": ["a", "b"],
            "pair": ["a | b", "a | c"],
            "checkpoint": x,
            "layer": lay,
        },
    )


def test_the_between_figure_draws_each_measured_pairs_pwcca_distance():
    from evolution.analyses.plotting import plt
    from evolution.report.trajectory import between_grid

    curves = _curves()
    fig = between_grid(curves)
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "a | b"  # "a | c" has no common step
    for layer, line in enumerate(fig.axes[0].lines):
        np.testing.assert_array_equal(line.get_xdata(), [0, 20])
        np.testing.assert_allclose(
            line.get_ydata(), curves["between"].sel(metric="pwcca", pair="a | b", layer=layer).values[[0, 2]]
        )
    plt().close(fig)


@pytest.mark.parametrize("metric", ["pwcca", "cka"])
def test_the_api_plot_draws_the_metric_asked_for(metric):
    import evolution.api as ev
    from evolution.analyses.plotting import plt

    curves = _curves()
    fig = ev.plot.trajectory(curves, "to_final", series="b", metric=metric)
    for layer, line in enumerate(fig.axes[0].lines):
        np.testing.assert_allclose(
            line.get_ydata(), curves["to_final"].sel(metric=metric, series="b", layer=layer).values
        )
    fig = ev.plot.trajectory(curves, "between", pair="a | b", metric=metric)
    np.testing.assert_allclose(
        fig.axes[-1].lines[0].get_ydata(), curves["between"].sel(metric=metric, pair="a | b", layer=0).values[[0, 2]]
    )
    plt().close("all")


def test_load_series_names_the_series_after_its_directory(tmp_path):
    import evolution.api as ev

    root = _series_dirs(tmp_path, "gpt2-small", [0, 10])
    for series in (
        ev.load_series(f"{root}/", checkpoints="checkpoint-*", device="cpu"),
        ev.load_series(checkpoints=str(root / "checkpoint-*"), device="cpu"),
    ):
        assert series.name == "gpt2-small" and series.steps == [0, 10] and series.final.name == "gpt2-small@10"


def test_a_shallower_series_is_at_distance_zero_only_at_its_own_layers(tmp_path):
    """Series of different depths share the layer axis (padded to the deepest): at the final step
    the distance to the final model is 0 at the layers the model has and NaN beyond them, as its
    other curves are, so that no point is drawn for a layer it does not have."""
    import xarray as xr

    from evolution.metrics.results import write_metrics
    from evolution.trajectory import Row, collect

    def store(path, models, *, to_final=None):
        lay = np.arange(3)
        mi = np.array(
            [
                [[0.9 - 0.1 * layer, 0.5] if (m.startswith("deep") or layer < 2) else [np.nan, np.nan] for layer in lay]
                for m in models
            ]
        )
        groups = {
            "mi": xr.Dataset(
                {
                    "mi_mean": (("model", "layer", "target"), mi),
                    "entropy": (("model", "target"), np.full((len(models), 2), 2.0)),
                },
                coords={"model": models, "layer": lay, "target": ["input", "output"]},
            )
        }
        if to_final is not None:
            groups["to_final"] = xr.Dataset(
                {"distance": (("metric", "model", "layer"), to_final)},
                coords={"metric": ["pwcca", "cka"], "model": models, "layer": lay},
            )
        write_metrics(str(path), groups, fingerprint="test")
        return path

    d = np.array([[[0.3, 0.3, 0.3], [0.4, 0.4, np.nan]], [[0.2, 0.2, 0.2], [0.25, 0.25, np.nan]]])
    snap = store(tmp_path / "s10", ["deep@10", "shallow@10"], to_final=d)
    final = store(tmp_path / "final", ["deep@20", "shallow@20"])
    rows = [
        Row("deep", {10: _trained("deep@10", 10)}, _trained("deep@20", 20), 20),
        Row("shallow", {10: _trained("shallow@10", 10)}, _trained("shallow@20", 20), 20),
    ]
    curves = collect(final, {10: snap}, rows=rows)["curves"]
    np.testing.assert_array_equal(
        curves["to_final"].sel(metric="pwcca", series="shallow", checkpoint=20), [0.0, 0.0, np.nan]
    )
    np.testing.assert_array_equal(curves["to_final"].sel(metric="cka", series="deep", checkpoint=20), [0.0] * 3)
    np.testing.assert_array_equal(
        curves["to_final"].sel(metric="pwcca", series="shallow", checkpoint=10), [0.4, 0.4, np.nan]
    )


def test_a_series_named_where_a_model_is_expected_points_to_its_last_member(tmp_path):
    _series_dirs(tmp_path, "ckpt", [0, 50])
    path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    path.write_text(path.read_text(encoding="utf-8") + "report: {views: {models: [g]}}\n", encoding="utf-8")
    with pytest.raises(
        ConfigError,
        match=r"report.views.models: no model named \['g'\].*g is a checkpoint series: "
        r"name its last member, g@50",
    ):
        load_config(path)


def test_extract_layers_with_a_series_says_what_to_change(tmp_path):
    """extract.layers with a checkpoint series (which compares every layer with its final member):
    refused naming each thing to turn off, the series as what to write in its model entry (it said
    "set a checkpoint series (models[].revisions / checkpoints): null", which no key takes); the
    fix it names for the series loads."""
    root = _series_dirs(tmp_path, "ckpt", [0, 50])
    path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    path.write_text(path.read_text() + "extract: {layers: [0, -1]}\n", encoding="utf-8")
    last = (root / "checkpoint-50").resolve()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = " ".join(str(caught.value).split())
    assert (
        "extract.layers stores layers [0, -1] only, and metrics.similarity and metrics.trajectory and checkpoint "
        "series g (models[].revisions / checkpoints) compare every layer (PWCCA / CKA between layers, change by "
        "frequency and by part of speech, distance to the final model): set extract.layers: null to store every "
        "layer, or else set metrics.similarity: null and set metrics.trajectory: null and analyse series g's last "
        f"member alone (replace its checkpoints: by path: {last})"
    ) in message, message
    assert "null, or extract.layers" not in message and "series (models[].revisions / checkpoints): null" not in message
    fixed = _config(tmp_path, f"  - {{name: g, kind: huggingface, path: {last}}}", trajectory=False)
    fixed.write_text(fixed.read_text() + "extract: {layers: [0, -1]}\nmetrics: {similarity: null}\n", encoding="utf-8")
    assert load_config(fixed).extract.layers == [0, -1]


def test_extract_layers_with_a_series_of_hub_revisions_says_what_to_change(tmp_path, monkeypatch):
    from evolution.fixtures.tiny_series import to_hub_cache

    root = _series_dirs(tmp_path, "ckpt", [0, 500])
    to_hub_cache(
        tmp_path / "hub", repo_id="lab/tiny", revisions={f"step{s}": root / f"checkpoint-{s}" for s in (0, 500)}
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    models = "  - {name: tiny, kind: huggingface, path: lab/tiny, revisions: [step0, step500]}"
    path = _config(tmp_path, models, trajectory=False)
    path.write_text(path.read_text() + "extract: {layers: [0]}\nmetrics: {similarity: null}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert " ".join(str(caught.value).split()).endswith(
        "set extract.layers: null to store every layer, or else remove series tiny's revisions: list (model tiny "
        "is then its hub id's default revision alone)"
    ), caught.value


def test_rows_needed_is_refused_with_a_series_and_its_trajectory(tmp_path):
    """extract.rows: needed keeps the rows the final models' analyses read; a checkpoint series
    (and metrics.trajectory over it) extracts other checkpoints too, so the config is refused, by
    name, when it is read; similarity alone is accepted with it."""
    _series_dirs(tmp_path, "ckpt", [0, 50])
    path = _config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}')
    path.write_text(path.read_text() + "extract: {rows: needed}\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"extract\.rows: needed .* metrics\.trajectory .*extract\.rows: null"):
        load_config(path)
    plain = _config(
        tmp_path, f"  - {{name: g, kind: huggingface, path: {tmp_path / 'ckpt' / 'checkpoint-0'}}}", trajectory=False
    )
    plain.write_text(plain.read_text() + "extract: {rows: needed}\n", encoding="utf-8")
    cfg = load_config(plain)
    assert cfg.extract.rows == "needed" and cfg.metrics.similarity is not None
