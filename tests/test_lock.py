"""One run per workdir (``pipelines/lock.py``), with real processes: a second run on a workdir
that a live run holds stops at once with exit 2 and names the other process; the lock file of
a run killed with -9 is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import write_config

ROOT = Path(__file__).resolve().parents[1]
HOLD = (
    "import sys, time\nfrom pipelines.lock import workdir_lock\n"
    "with workdir_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)\n"
)


def _holder(workdir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(workdir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _run(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.run", str(config), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_second_run_on_a_busy_workdir_exits_2_naming_the_other(tmp_path, corpus_file, model_specs):
    workdir = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=workdir)
    other = _holder(workdir)
    try:
        t0 = time.monotonic()
        result = _run(config)
        waited = time.monotonic() - t0
    finally:
        other.kill()
        other.wait()
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"process {other.pid}" in result.stderr and "--workdir" in result.stderr
    assert not (workdir / "reps.zarr").exists() and not (workdir / "config.resolved.yaml").exists()
    assert waited < 60  # it stops at once rather than waiting for the other run


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, corpus_file, model_specs):
    workdir = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=workdir)
    dead = _holder(workdir)
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    assert json.loads((workdir / "run.lock").read_text())["pid"] == dead.pid  # the stale record is still there
    result = _run(config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "taking over" in result.stderr and f"process {dead.pid}" in result.stderr
    assert (workdir / "reps.zarr").is_dir()
    assert (workdir / "run.lock").read_text() == ""  # released when the run finished
    again = _run(config)  # a finished run leaves the workdir free
    assert again.returncode == 0 and "taking over" not in again.stderr
