"""kill -9 in every stage, then the same command again: it completes, and what the stages
leave equals an uninterrupted run's. The process is killed from inside at a chosen point of
each stage (a SIGKILL the process sends itself, so the point is deterministic: half a corpus
directory, some metrics units cached, one figure drawn); training is killed for real from
outside, in the middle of an interval, as soon as its first checkpoint exists; the
extraction's kill is tests/test_pipeline.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import xarray as xr
from conftest import write_config

ROOT = Path(__file__).resolve().parents[1]

#: stage -> Python run in the child before the pipeline: patches one function so that the
#: process kills itself (SIGKILL: no cleanup, no finally) at that point of the stage
KILL_AT = {
    "corpus": """
        import evolution.corpus.layout as m
        def write(directory, source, *, key):
            (directory / "sentences.txt").write_text("half", encoding="utf-8")
            os.kill(os.getpid(), signal.SIGKILL)
        m.write = write
    """,
    "metrics": """
        import evolution.analyses.runner as m
        calls = {"n": 0}
        def replay(lines, *, unit, _real=m._replay):
            calls["n"] += 1
            if calls["n"] == 4:  # three units cached, the fourth computed but not written
                os.kill(os.getpid(), signal.SIGKILL)
            _real(lines, unit=unit)
        m._replay = replay
    """,
    "report": """
        import evolution.report.write as m
        def draw_all(path, out_dir, _real=m.draw_all):
            drawn = _real(path, out_dir)
            os.kill(os.getpid(), signal.SIGKILL)
        m.draw_all = draw_all
    """,
}


def _child(cfg: Path, stage: str) -> int:
    code = (
        "import os, signal, sys\n"
        + textwrap.dedent(KILL_AT[stage])
        + textwrap.dedent(f"""
        from pipelines.run import main
        sys.exit(main([{str(cfg)!r}, "--no-progress"]))
    """)
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).returncode


def _groups(path: Path) -> dict[str, xr.Dataset]:
    from evolution.metrics.results import metrics_groups, open_metrics

    return {g: open_metrics(path, g).load().drop_attrs() for g in metrics_groups(path)}


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["corpus", "metrics", "report"])
def test_kill_9_in_a_stage_then_rerun_equals_an_uninterrupted_run(tmp_path, corpus_file, model_specs, stage):
    from test_metrics_stage import METRICS

    from pipelines.run import main

    models = [model_specs["translation"], model_specs["gpt2"]]
    ref = write_config(
        tmp_path / "ref.yaml", corpus=corpus_file, workdir=tmp_path / "ref", models=models, extra=METRICS
    )
    assert main([str(ref), "--no-progress"]) == 0
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, workdir=tmp_path / "w", models=models, extra=METRICS)
    assert _child(cfg, stage) == -signal.SIGKILL
    w = tmp_path / "w"
    if stage == "corpus":  # nothing half-written is trusted: no corpus directory is marked done
        assert not list((w / "corpus").glob("*/done.json"))
    if stage == "metrics":
        assert len(list((w / "metrics" / "cache").glob("*.json"))) == 3 and not (w / "metrics.zarr").exists()
    if stage == "report":
        assert (w / "metrics.zarr").exists() and not (w / "report" / "report.html").exists()
    assert main([str(cfg), "--no-progress"]) == 0
    a, b = _groups(w / "metrics.zarr"), _groups(tmp_path / "ref" / "metrics.zarr")
    assert a.keys() == b.keys()
    for g in a:
        xr.testing.assert_equal(a[g], b[g])
    assert (w / "report" / "report.html").is_file()
    assert sorted(p.name for p in (w / "report").iterdir()) == sorted(
        p.name for p in (tmp_path / "ref" / "report").iterdir()
    )


@pytest.mark.slow
def test_training_killed_mid_interval_resumes(tmp_path):
    """The train stage killed (-9, from outside) while an objective trains, after its first
    checkpoint: the rerun resumes from that checkpoint (not from scratch) and completes."""
    from test_training import CONFIG, _corpus

    src, tgt = _corpus(tmp_path)
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG.format(workdir=tmp_path / "run", src=src, tgt=tgt), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.run", str(cfg), "--no-progress", "--stage", "train"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 600
    first = None
    while proc.poll() is None and time.time() < deadline:
        found = list((tmp_path / "run" / "train").glob("*/runs/*/checkpoint_last.pt"))
        if found:
            first = found[0]
            time.sleep(0.5)  # into the next interval (fairseq copies checkpoint_last.pt into place)
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    assert first is not None, "training finished or failed before its first checkpoint"
    assert proc.wait(timeout=30) == -signal.SIGKILL
    run = first.parent.name
    assert not (first.parent.parent.parent / "done.json").exists()  # the stage is not marked done
    from pipelines.run import main

    assert main([str(cfg), "--no-progress", "--stage", "train"]) == 0
    log = (first.parent / "train.log").read_text(encoding="utf-8")
    assert "Loaded checkpoint" in log, f"{run} did not resume from its checkpoint"
