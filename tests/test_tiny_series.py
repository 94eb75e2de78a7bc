"""The offline checkpoint series: a tiny GPT-2 and a tiny BERT trained from scratch on the shipped
Genesis text learn (the loss falls, the weights settle), are bit-identical for a seed, load in the
Hugging Face adapter with the right objective, and resolve offline as revisions ``step<N>`` of a
model repository in the huggingface_hub cache layout."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from evolution.fixtures.tiny_series import GENESIS, main, to_hub_cache, train_series

STEPS, EVERY = 120, 40
ARCHS = ("gpt2", "bert")


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> dict[str, dict[int, Path]]:
    """arch -> {step: directory}, trained once with the default sizes (about 5 s each)."""
    root = tmp_path_factory.mktemp("series")
    return {arch: train_series(root / arch, arch=arch, steps=STEPS, every=EVERY, seed=0) for arch in ARCHS}


def _weights(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(directory / "model.safetensors"))


def _distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return math.sqrt(sum(float(((a[k] - b[k]) ** 2).sum()) for k in a))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_series_is_saved_every_few_steps_in_the_hub_layout(series, arch):
    saved = series[arch]
    assert list(saved) == [0, 40, 80, 120]
    head = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM"}[arch]
    for step, directory in saved.items():
        assert directory.name == f"step{step}"
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            assert (directory / name).is_file(), name
        assert json.loads((directory / "config.json").read_text())["architectures"] == [head]
        assert json.loads((directory / "trainer_state.json").read_text())["global_step"] == step
    losses = json.loads((saved[0].parent / "losses.json").read_text())
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("arch", ARCHS)
def test_training_learns(series, arch):
    losses = np.array(json.loads((series[arch][0].parent / "losses.json").read_text()))
    k = STEPS // 10
    first, last = losses[:k].mean(), losses[-k:].mean()
    vocab = json.loads((series[arch][0] / "config.json").read_text())["vocab_size"]
    assert last < 0.8 * first, (first, last)
    assert last < math.log(vocab) - 1.5  # far better than a uniform guess over the vocabulary


@pytest.mark.parametrize("arch", ARCHS)
def test_the_weights_settle_as_the_learning_rate_decays(series, arch):
    w = [_weights(d) for d in series[arch].values()]
    steps = [_distance(a, b) for a, b in zip(w, w[1:], strict=False)]  # step0->40, 40->80, 80->120
    assert all(a > b for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps[0] > 3 * steps[-1], steps


@pytest.mark.parametrize("arch", ARCHS)
def test_the_same_seed_gives_identical_weights(tmp_path, arch):
    lines = GENESIS.read_text(encoding="utf-8").splitlines()[:64]
    kw = dict(arch=arch, steps=3, every=3, batch_size=8, sentences=lines)
    a = train_series(tmp_path / "a", seed=1, **kw)
    b = train_series(tmp_path / "b", seed=1, **kw)
    c = train_series(tmp_path / "c", seed=2, **kw)
    for step in (0, 3):
        data = (a[step] / "model.safetensors").read_bytes()
        assert data == (b[step] / "model.safetensors").read_bytes()
        assert data != (c[step] / "model.safetensors").read_bytes()
    assert (a[3].parent / "losses.json").read_text() == (b[3].parent / "losses.json").read_text()


@pytest.mark.parametrize("arch", ARCHS)
def test_a_checkpoint_loads_in_the_adapter(series, arch):
    from evolution.models.huggingface import HuggingFaceAdapter

    adapter = HuggingFaceAdapter(series[arch][STEPS])
    assert adapter.objective == {"gpt2": "lm", "bert": "mlm"}[arch]
    assert (adapter.num_layers, adapter.num_heads, adapter.d_model, adapter.max_positions) == (2, 4, 32, 96)
    tok = adapter.tokenize("God said, “Let there be light.”")
    # punctuation is split off into its own tokens, each mapped to the whitespace word it is in
    assert tok.pieces == ["God", "said", ",", "“", "Let", "there", "be", "light", ".", "”"]
    assert tok.word_ids == [0, 1, 1, 2, 2, 3, 4, 5, 5, 5]
    assert adapter.tokenize("Zyzzyva begat").pieces[0] == adapter.tokenizer.unk_token
    ids = adapter.prefix + tok.ids + adapter.suffix
    hidden, att = adapter.forward([ids], attention=True)
    assert hidden.shape == (3, 1, len(ids), 32) and att.shape == (2, 1, 4, len(ids), len(ids))
    assert np.isfinite(hidden).all() and np.allclose(att.sum(-1), 1, atol=1e-5)
    assert adapter.loss_unavailable is None


def test_the_series_resolves_offline_from_a_hub_cache(series, tmp_path, monkeypatch):
    from huggingface_hub import snapshot_download

    from evolution.models.hub import resolve
    from evolution.models.huggingface import HuggingFaceAdapter

    repo_id = "local/tiny-bert"
    revisions = {f"step{s}": d for s, d in series["bert"].items()}
    cache = tmp_path / "hub"
    repo = to_hub_cache(cache, repo_id=repo_id, revisions=revisions)
    assert repo == cache / "models--local--tiny-bert"
    commits = {rev: (repo / "refs" / rev).read_text() for rev in revisions}
    assert all(len(c) == 40 and int(c, 16) >= 0 for c in commits.values())
    assert len(set(commits.values())) == len(revisions)
    assert (repo / "refs" / "main").read_text() == commits[f"step{STEPS}"]
    # the layout is deterministic: writing it again changes nothing
    to_hub_cache(cache, repo_id=repo_id, revisions=revisions)
    assert {rev: (repo / "refs" / rev).read_text() for rev in revisions} == commits

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for rev, directory in revisions.items():
        path = Path(snapshot_download(repo_id, revision=rev, local_files_only=True, cache_dir=str(cache)))
        assert path == repo / "snapshots" / commits[rev]
        assert resolve(repo_id, revision=rev) == path
        assert (path / "config.json").is_file()
        for f in directory.iterdir():
            assert (path / f.name).read_bytes() == f.read_bytes()
    assert resolve(repo_id) == repo / "snapshots" / commits[f"step{STEPS}"]  # main: the last revision
    adapter = HuggingFaceAdapter(resolve(repo_id, revision="step40"))
    assert adapter.objective == "mlm"
    hidden, _ = adapter.forward([adapter.prefix + adapter.tokenize("God saw the light").ids + adapter.suffix])
    assert hidden.shape == (3, 1, 6, 32)


def test_the_command_line_trains_and_fills_a_hub_cache(tmp_path, capsys):
    assert (
        main(
            [
                str(tmp_path / "out"),
                "--arch",
                "gpt2",
                "--steps",
                "2",
                "--every",
                "1",
                "--hub-cache",
                str(tmp_path / "hub"),
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["losses.json", "step0", "step1", "step2"]
    refs = tmp_path / "hub" / "models--local--tiny-gpt2" / "refs"
    assert sorted(p.name for p in refs.iterdir()) == ["main", "step0", "step1", "step2"]
    assert "local/tiny-gpt2" in capsys.readouterr().out
    # training again into the same directory replaces the series: no step of the first run stays
    assert main([str(tmp_path / "out"), "--arch", "gpt2", "--steps", "2", "--every", "2"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["losses.json", "step0", "step2"]


def test_a_pretraining_checkpoint_loads_as_the_bare_model_quietly_and_a_missing_weight_is_warned(
    series, tmp_path, caplog, capfd
):
    """A BertForMaskedLM checkpoint read as the bare BertModel: its MLM head is unused and BERT's
    pooler is absent, neither of which enters the hidden states, so no load table is printed and
    the log says it in one line; a checkpoint that lacks an encoder weight is warned about, since
    that weight is random."""
    import logging

    from safetensors.torch import load_file, save_file

    from evolution.models.huggingface import HuggingFaceAdapter

    caplog.set_level(logging.INFO, logger="evolution.models.huggingface")
    src = series["bert"][max(series["bert"])]
    assert HuggingFaceAdapter(src).model is not None  # the property loads the weights
    out = capfd.readouterr()
    assert "LOAD REPORT" not in out.out + out.err
    assert any("not part of the bare model" in r.message for r in caplog.records)
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    weights = load_file(str(broken / "model.safetensors"))
    key = next(k for k in weights if "encoder.layer.1.attention.self.query.weight" in k)
    del weights[key]
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    caplog.clear()
    assert HuggingFaceAdapter(broken).model is not None
    warned = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "1 weights are not in the checkpoint" in warned[0] and "query.weight" in warned[0]
