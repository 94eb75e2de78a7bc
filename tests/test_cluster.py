"""The whole pipeline on a Dask cluster started the way a user starts one: ``dask scheduler``
and three ``dask worker`` processes on 127.0.0.1, the config's ``cluster`` naming the
scheduler's address. Results equal the synchronous run's; one worker killed (-9) in the middle
of the extraction and another in the middle of the metrics do not stop the run (their tasks
run again on the workers left)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from test_training import _corpus  # the 400 Genesis lines and their learnable "translation"

ROOT = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).with_name("dask")

CONFIG = """
workdir: {workdir}
{cluster}
corpus:
  source: parallel
  path: {src}
  target_path: {tgt}
  languages: [en, xx]
  split: {{valid: 0.1, test: 0.1, block_lines: 20}}
  analyse: all
train:
  vocab_size: 300
  layers: 2
  embed_dim: 16
  ffn_dim: 32
  heads: 2
  decoder_layers: 1
  max_positions: 128
  max_tokens: 512
  warmup_updates: 2
  updates: {{mt: 4, lm: 4, mlm: 4}}
  save_interval_updates: 2
  beam: 1
  threads: 1
extract:
  chunk_tokens: 64
  task_chunks: 1
  max_batch_tokens: 128
  attention: {{sentences: 10}}
metrics:
  tokens: {{top: 20, min_count: 20}}
  mi: {{k: 20, restarts: 2, mlm_corruptions: 2}}
  neighbors: {{k: 5, max_per_type: 30, bootstrap: 20}}
  similarity: {{sentences: 200, min_ratio: 2}}
  influence: {{max_per_bin: 10, min_ratio: 2, freq_bins: [1, 10, 100, 1000]}}
  tsne: {{perplexity: 5, max_points: 40}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [str(DASK), *args], cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


@pytest.mark.slow
def test_pipeline_on_a_user_started_cluster_with_a_killed_worker(tmp_path):
    src, tgt = _corpus(tmp_path)
    sync_cfg = tmp_path / "sync.yaml"
    sync_cfg.write_text(CONFIG.format(workdir=tmp_path / "sync", cluster="cluster: synchronous", src=src, tgt=tgt))
    from pipelines.run import main

    assert main([str(sync_cfg), "--no-progress", "--stage", "train"]) == 0
    shutil.copytree(tmp_path / "sync" / "train", tmp_path / "cl" / "train")  # the same trained models

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [
        _start(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], tmp_path / "scheduler.log")
    ]
    try:
        workers = [
            _start(
                [
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--memory-limit",
                    "3GiB",
                    "--name",
                    f"w{i}",
                ],
                tmp_path / f"worker{i}.log",
            )
            for i in range(3)
        ]
        procs += workers
        from distributed import Client

        deadline = time.time() + 60
        while True:
            try:
                with Client(address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) == 3:
                        break
            except OSError:
                pass
            assert time.time() < deadline, (tmp_path / "scheduler.log").read_text()[-2000:]
            time.sleep(0.5)

        watch = Client(address, timeout="10s")
        w1 = next(a for a, w in watch.scheduler_info()["workers"].items() if w["name"] == "w1")
        cl_cfg = tmp_path / "cl.yaml"
        cl_cfg.write_text(
            CONFIG.format(
                workdir=tmp_path / "cl", cluster=f"cluster: {{kind: address, address: {address}}}", src=src, tgt=tgt
            )
        )
        run = subprocess.Popen(
            [sys.executable, "-m", "pipelines.run", str(cl_cfg), "--no-progress"],
            cwd=ROOT,
            stdout=(tmp_path / "run.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        # kill one worker once the extraction has written its first chunks, before it is complete, and
        # another once the metrics have cached their first units, before they are complete
        store, cache = tmp_path / "cl" / "reps.zarr", tmp_path / "cl" / "metrics" / "cache"
        killed_during_extraction, units_at_kill, killed_unit = None, None, None
        deadline = time.time() + 600
        while run.poll() is None and time.time() < deadline:
            if killed_during_extraction is None:
                chunks = list(store.glob("*/hidden/c/*/*/*")) if store.exists() else []
                if chunks:  # the groups' completion markers say which models are fully extracted
                    complete = [
                        g
                        for g in ("mt", "lm", "mlm")
                        if (store / g / "zarr.json").exists()
                        and "evolution_complete" in (store / g / "zarr.json").read_text()
                    ]
                    killed_during_extraction = len(complete) < 3
                    os.killpg(workers[0].pid, signal.SIGKILL)
            else:
                units = list(cache.glob("*.json")) if cache.exists() else []
                if units and not (tmp_path / "cl" / "metrics.zarr").exists():
                    # kill the second worker while it runs a metrics unit (the scheduler says which)
                    busy = [
                        str(k)
                        for k in watch.processing(workers=[w1])[w1]
                        if not str(k).startswith(("extract-", "warm"))
                    ]
                    if busy:
                        units_at_kill, killed_unit = len(units), busy[0]
                        os.killpg(workers[1].pid, signal.SIGKILL)
                        break
            time.sleep(0.02)
        assert run.wait(timeout=900) == 0, (tmp_path / "run.log").read_text()[-4000:]
        assert killed_during_extraction, "the extraction finished before a worker could be killed"
        assert units_at_kill is not None and units_at_kill < len(list(cache.glob("*.json"))), (
            "the metrics finished before a worker could be killed"
        )
        # the unit that died with its worker ran again elsewhere and was cached
        assert list(cache.glob(f"{killed_unit}-*.json")), killed_unit
        watch.close()
        assert workers[0].wait(timeout=10) == -signal.SIGKILL and workers[1].wait(timeout=10) == -signal.SIGKILL
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    # the synchronous run gives the same numbers
    assert main([str(sync_cfg), "--no-progress"]) == 0
    from evolution.metrics.results import metrics_groups, open_metrics

    groups = metrics_groups(tmp_path / "sync" / "metrics.zarr")
    assert {"mi", "neighbors", "similarity", "change", "influence"} <= set(groups)
    assert groups == metrics_groups(tmp_path / "cl" / "metrics.zarr")
    for g in groups:
        a = open_metrics(tmp_path / "cl" / "metrics.zarr", g).load()
        b = open_metrics(tmp_path / "sync" / "metrics.zarr", g).load()
        xr.testing.assert_equal(a.drop_attrs(), b.drop_attrs())  # bit for bit (tests/test_execution_modes.py)
    mi = open_metrics(tmp_path / "cl" / "metrics.zarr", "mi").load()
    assert np.isfinite(mi.mi.sel(model="mlm", target="output")).any()  # the MLM-output unit ran on the cluster
    # worker log lines reach the run's log
    log = next((tmp_path / "cl" / "logs").glob("run-*.log")).read_text()
    assert "MI: flat k-means" in log and "cluster: connecting to tcp://127.0.0.1" in log
