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
    flags = [np.array([[[f, t, f]], [[f, f, f]]]),   # step 0
             np.array([[[t, t, f]], [[f, f, f]]]),   # step 10
             None,                                    # step 15: not analysed
             np.array([[[t, f, t]], [[f, t, f]]])]   # step 20
    first, kept = head_roles(flags, [0, 10, 15, 20])
    np.testing.assert_array_equal(first, [[[10, 0, 20]], [[-1, 20, -1]]])
    np.testing.assert_array_equal(kept, [[[t, f, t]], [[f, t, f]]])


def _series_dirs(root: Path, name: str, steps, *, arch: str = "gpt2", seed_of=lambda s: s) -> Path:
    from evolution.models.random_init import make_hf_model

    words = "in the beginning god created heaven and earth the was".split()
    for s in steps:
        make_hf_model(root / name / f"checkpoint-{s}", arch=arch, words=words, seed=seed_of(s))
    return root / name


def _config(root: Path, models: str, *, trajectory: bool = True) -> Path:
    (root / "t.txt").write_text("in the beginning god created the heaven and the earth\n" * 4, encoding="utf-8")
    path = root / "c.yaml"
    path.write_text(f"corpus: {{source: text, path: t.txt}}\nmodels:\n{models}\n"
                    + ("metrics: {trajectory: {}}\n" if trajectory else ""), encoding="utf-8")
    return path


def test_a_glob_of_checkpoints_is_a_series_ordered_by_step(tmp_path):
    _series_dirs(tmp_path, "ckpt", [0, 50, 100, 1000])
    cfg = load_config(_config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}'))
    members = cfg.series()["g"]
    assert [(m.name, m.step, m.series) for m in members] == [  # by number, not as the glob sorts (1000 < 50)
        ("g@0", 0, "g"), ("g@50", 50, "g"), ("g@100", 100, "g"), ("g@1000", 1000, "g")]
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


@pytest.mark.parametrize("case, models, message", [
    ("nothing", '  - {name: g, kind: huggingface, checkpoints: "nothing-*"}', "matches nothing"),
    ("one", '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-5*"}', "at least two checkpoints"),
    ("twice", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*"}', "step 50 is also"),
    ("both", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*", revisions: [step1]}', "not both"),
    ("path", '  - {name: g, kind: huggingface, checkpoints: "ckpt/*", path: ckpt}', "remove 'path'"),
    ("at", '  - {name: "g@1", kind: huggingface, checkpoints: "ckpt/*"}', "without '@'"),
    ("kind", '  - {name: g, kind: shipped, revisions: [step1, step2], path: org/model}', "kind: huggingface"),
])
def test_bad_series_are_refused_naming_the_member_and_the_fix(tmp_path, case, models, message):
    root = _series_dirs(tmp_path, "ckpt", [0, 50])
    if case == "twice":
        shutil.copytree(root / "checkpoint-50", root / "step-50")
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, models))


def test_trajectory_without_checkpoints_or_a_series_is_refused(tmp_path):
    _series_dirs(tmp_path, "ckpt", [0])
    with pytest.raises(ConfigError, match="checkpoint series"):
        load_config(_config(tmp_path, '  - {name: g, kind: huggingface, path: ckpt/checkpoint-0}'))


def test_hub_revisions_resolve_from_the_local_cache_offline(tmp_path, monkeypatch):
    """``revisions`` of a hub id, as Pythia publishes them, found in the Hugging Face cache with no
    network: each member is that revision's snapshot; a revision the cache lacks is named."""
    from evolution.models.tiny_series import to_hub_cache

    root = _series_dirs(tmp_path, "ckpt", [0, 500, 2000])
    cache = tmp_path / "hub"
    to_hub_cache(cache, repo_id="lab/tiny", revisions={f"step{s}": root / f"checkpoint-{s}" for s in (0, 500, 2000)})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(_config(tmp_path, "  - {name: tiny, kind: huggingface, path: lab/tiny, "
                                        "revisions: [step2000, step0, step500]}"))
    members = cfg.series()["tiny"]
    assert [(m.name, m.revision, m.hub_id) for m in members] == [
        ("tiny@0", "step0", "lab/tiny"), ("tiny@500", "step500", "lab/tiny"), ("tiny@2000", "step2000", "lab/tiny")]
    for m in members:
        assert m.path.parent.name == "snapshots" and str(m.path).startswith(str(cache))
        assert (m.path / "model.safetensors").read_bytes() == (root / f"checkpoint-{m.step}" /
                                                                 "model.safetensors").read_bytes()
    with pytest.raises(ConfigError, match=r"revision 'step9000' \(member tiny@9000\).*not in the Hugging Face cache"):
        load_config(_config(tmp_path, "  - {name: tiny, kind: huggingface, path: lab/tiny, "
                                      "revisions: [step0, step9000]}"))
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
    members = load_config(_config(tmp_path, '  - {name: g, kind: huggingface, checkpoints: "ckpt/checkpoint-*"}'
                                  )).series()["g"]
    assert same_weights(members) == [["g@100", "g@200", "g@300"]]
    assert same_weights(members[:2]) == []


def test_fairseq_and_shipped_checkpoints_give_their_recorded_steps(tmp_path):
    """A fairseq series from a glob of checkpoint files (fairseq-train's checkpoint_<epoch>_<update>.pt
    and a checkpoint_best.pt whose step is its optimizer history's num_updates), and the update
    count a shipped model records."""
    import torch

    from evolution.models.random_init import make_fairseq_model, vocabulary_of
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
    cfg_path.write_text(f"corpus: {{source: text, path: t.txt}}\nmodels:\n  - {{name: lm, kind: fairseq, "
                        f"checkpoints: 'ckpts/checkpoint_*.pt', data: {data}}}\n", encoding="utf-8")
    members = load_config(cfg_path).series()["lm"]
    assert [(m.name, m.path.name, m.data) for m in members] == [
        ("lm@50", "checkpoint_1_50.pt", data), ("lm@70", "checkpoint_best.pt", data),
        ("lm@100", "checkpoint_2_100.pt", data)]
    shipped = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models" / "mt"
    assert recorded_step(shipped, "shipped") == json.loads((shipped / "model.json").read_text())["updates"]
