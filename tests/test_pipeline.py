"""The CLI: caching, --force, --dry-run, added models, interruption and bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import write_config

import evolution.extract
from evolution.store import open_representations
from pipelines.run import main, run
from pipelines.stages import STAGES, Context

REPO = Path(__file__).resolve().parent.parent


def _pending(cfg_path):
    from evolution.config import load_config

    ctx = Context(config=load_config(cfg_path))
    return {name: stage.pending(ctx) for name, stage in STAGES.items()}


def _hidden(workdir, model):
    return open_representations(str(workdir / "reps.zarr"), model).hidden.values


def test_rerun_is_cached_and_force_redoes(tmp_path, corpus_file, model_specs, monkeypatch, capsys):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=tmp_path / "w")
    capsys.readouterr()
    assert main([str(cfg), "--dry-run"]) == 0
    assert not (tmp_path / "w").exists()  # a dry run writes nothing
    said = {
        line.split("pipelines.run: ")[1].split()[0]: line
        for line in capsys.readouterr().err.splitlines()
        if "pipelines.run: " in line
    }
    assert "off (no train section" in said["train"] and "off (metrics.trajectory off" in said["trajectory"]
    assert "to run" in said["extract"]
    run(cfg, progress=False)
    assert all(not v for v in _pending(cfg).values())
    assert (tmp_path / "w" / "config.resolved.yaml").is_file()
    calls = []
    real = evolution.extract.run_chunk
    monkeypatch.setattr(evolution.extract, "run_chunk", lambda *a, **k: calls.append(1) or real(*a, **k))
    run(cfg, progress=False)
    assert calls == []  # cached
    run(cfg, progress=False, force=["corpus"])  # corpus and everything after it
    assert calls


def test_added_model_reuses_existing_groups(tmp_path, corpus_file, model_specs):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=tmp_path / "w")
    run(cfg, progress=False)
    store = str(tmp_path / "w" / "reps.zarr")
    chunk = Path(store) / "bert" / "hidden"
    before = {p: p.stat().st_mtime_ns for p in chunk.rglob("*") if p.is_file()}
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=[model_specs["bert"], model_specs["gpt2"]],
        workdir=tmp_path / "w",
    )
    assert [len(v) for v in _pending(cfg).values()] == [
        0,
        0,
        1,
        1,
        0,
        1,
    ]  # corpus cached; no train; extract gpt2; metrics; no trajectory; report
    run(cfg, progress=False)
    assert {p: p.stat().st_mtime_ns for p in chunk.rglob("*") if p.is_file()} == before
    assert _hidden(tmp_path / "w", "gpt2").shape[0] == 3


def test_changed_setting_redoes_the_group(tmp_path, corpus_file, model_specs):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=tmp_path / "w")
    run(cfg, progress=False)
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=[model_specs["bert"]],
        workdir=tmp_path / "w",
        extra="  dtype: float16",
    )
    assert len(_pending(cfg)["extract"]) == 1
    run(cfg, progress=False)
    assert _hidden(tmp_path / "w", "bert").dtype == np.float16


def test_crash_mid_extraction_is_redone_identically(tmp_path, corpus_file, model_specs, monkeypatch):
    models = [model_specs["translation"]]
    clean = write_config(tmp_path / "a.yaml", corpus=corpus_file, models=models, workdir=tmp_path / "a")
    run(clean, progress=False)
    cfg = write_config(tmp_path / "b.yaml", corpus=corpus_file, models=models, workdir=tmp_path / "b")
    real = evolution.extract.run_chunk
    done = []

    def crash_after_two(*a, **k):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(1)
        return real(*a, **k)

    monkeypatch.setattr(evolution.extract, "run_chunk", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, progress=False)
    with pytest.raises(ValueError, match="incomplete"):
        open_representations(str(tmp_path / "b" / "reps.zarr"), "translation")
    monkeypatch.setattr(evolution.extract, "run_chunk", real)
    run(cfg, progress=False)
    np.testing.assert_array_equal(_hidden(tmp_path / "b", "translation"), _hidden(tmp_path / "a", "translation"))


@pytest.mark.slow
def test_kill_9_then_rerun(tmp_path, model_specs):
    corpus = tmp_path / "big.txt"
    rng = np.random.default_rng(0)
    words = "the cat sat on mat a dog ran to red blue".split()
    corpus.write_text("".join(" ".join(rng.choice(words, 20)) + "\n" for _ in range(1000)))
    models = [model_specs["bert"]]
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus, models=models, workdir=tmp_path / "w")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.run", str(cfg), "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    hidden = tmp_path / "w" / "reps.zarr" / "bert" / "hidden" / "c"
    deadline = time.time() + 120
    while time.time() < deadline and not (hidden.exists() and any(hidden.rglob("*"))):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    g = zarr.open_group(str(tmp_path / "w" / "reps.zarr"), path="bert", mode="r")
    assert g.attrs.get("evolution_complete") is None  # killed mid-way
    assert subprocess.run([sys.executable, "-m", "pipelines.run", str(cfg), "--no-progress"], env=env).returncode == 0
    ref = write_config(tmp_path / "r.yaml", corpus=corpus, models=models, workdir=tmp_path / "r")
    run(ref, progress=False)
    np.testing.assert_array_equal(_hidden(tmp_path / "w", "bert"), _hidden(tmp_path / "r", "bert"))


def test_bad_input_exits_2_and_writes_nothing(tmp_path, model_specs, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat\n\nthe dog \xff\xfe sat\n")
    cfg = write_config(tmp_path / "c.yaml", corpus=bad, models=[model_specs["bert"]], workdir=tmp_path / "w")
    assert main([str(cfg)]) == 2
    assert "bad.txt:3: not UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "w" / "corpus").exists() and not (tmp_path / "w" / "reps.zarr").exists()
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 10)
    good = tmp_path / "good.txt"
    good.write_text("the cat\n")
    spec = {**model_specs["translation"], "path": str(junk)}
    cfg = write_config(tmp_path / "c.yaml", corpus=good, models=[spec], workdir=tmp_path / "w")
    assert main([str(cfg)]) == 2
    assert "not a fairseq checkpoint" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.yaml")]) == 2


def test_empty_lines_are_dropped_with_line_numbers(tmp_path, model_specs):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat\n\n   \na dog ran\n")
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus, models=[model_specs["bert"]], workdir=tmp_path / "w")
    ctx = run(cfg, progress=False)
    corp = STAGES["corpus"].load(ctx)
    assert corp.sentences == ["the cat", "a dog ran"] and corp.lines == [1, 4]
    assert open_representations(str(tmp_path / "w" / "reps.zarr"), "bert").sentence.values.tolist() == [0, 0, 1, 1, 1]


def test_default_run_trains_nothing_and_from_scratch_trains_the_three(tmp_path):
    """evolution.yaml plans no training (its models are shipped); configs/from-scratch.yaml, the
    former default, plans the three runs of its train section (docs/decisions.md #22)."""
    from evolution.config import load_config

    for config, trains in (("evolution.yaml", None), ("configs/from-scratch.yaml", "mt, lm, mlm")):
        cfg = load_config(REPO / config, overrides={"workdir": str(tmp_path / config.replace("/", "-"))})
        ctx = Context(config=cfg)
        plan = STAGES["train"].pending(ctx)
        if trains is None:
            assert plan == [] and STAGES["train"].off(ctx).startswith("off (no train section")
            assert all(m.kind == "shipped" for m in cfg.models)
        else:
            assert len(plan) == 1 and plan[0].startswith(f"train: {trains} -> ") and STAGES["train"].off(ctx) is None
