"""``cluster: {kind: slurm}``: the workers as Slurm jobs (dask_jobqueue.SLURMCluster).

The config checks need nothing. The rest runs against a real single-node Slurm that
``tests/slurm_fixture.py`` configures and starts as root (Debian's slurmctld, slurmd and munge)
and is skipped, with the reason, where it cannot start. The pipeline test runs
tests/test_cluster.py's tiny config (400 Genesis lines, 2-layer models trained for 4 updates)
rather than the default config, which takes some 16 minutes on 2 cores: on 2 one-core jobs, one
of them cancelled with ``scancel`` while the metrics run, it gives the synchronous run's numbers,
and a new job takes the cancelled one's place (3 minutes on 2 cores: training 65 s, the
Slurm run 45 s, the synchronous run 75 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr
from slurm_fixture import SlurmUnavailable, start_slurm
from test_cluster import CONFIG  # the tiny config of the user-started-cluster test
from test_training import _corpus

from evolution.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, cluster: str) -> Path:
    (tmp_path / "c.txt").write_text("a b\n")
    p = tmp_path / "c.yaml"
    corpus = "{source: parallel, path: c.txt, target_path: c.txt, languages: [en, xx]}"
    p.write_text(f"workdir: {tmp_path / 'w'}\ncorpus: {corpus}\ntrain: {{}}\ncluster: {cluster}\n")
    return p


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ("{kind: slurm, jobs: 2}", r"cluster: .*cluster.cores, cluster.memory, cluster.walltime are missing; give"),
        ("{jobs: 2, cores: 4}", r"cluster.jobs, cluster.cores are only for kind: slurm .* set kind: slurm or remove"),
        ("{kind: address, address: 'tcp://h:1', queue: q}", r"cluster.queue is only for kind: slurm but .*'address'"),
        ("{kind: slurm, jobs: 1, cores: 1, memory: lots, walltime: '1:00:00'}", r"cluster.memory 'lots' is not a size"),
        ("{kind: slurm, jobs: 1, cores: 1, memory: 1GB, walltime: 1h}", r"cluster.walltime '1h' .* HH:MM:SS"),
        ("{kind: slurm, jobs: 1, cores: 3, threads_per_worker: 2, memory: 1GB, walltime: '1:00:00'}", "multiple"),
        ("{kind: slurm, jobs: 1, cores: 1, n_workers: 2, memory: 1GB, walltime: '1:00:00'}", "for kind: local"),
        ("{kind: slurm, jobs: 1, cores: 1, memory: 1GB, walltim: '1:00:00'}", r"walltim: .*did you mean walltime"),
        ("{kind: slurm, jobs: 0, cores: 1, memory: 1GB, walltime: '1:00:00'}", r"cluster.jobs: .*greater than or"),
    ],
)
def test_slurm_config_errors(tmp_path, cluster, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, cluster))


def test_slurm_config(tmp_path):
    # an unquoted 01:30:00 is the YAML 1.1 integer 5400: read back as the time it was
    c = load_config(
        _write(tmp_path, "{kind: slurm, jobs: 4, cores: 8, memory: 32GB, walltime: 01:30:00, job_extra: [--qos=short]}")
    ).cluster
    assert (c.kind, c.jobs, c.cores, c.memory, c.walltime, c.job_extra) == (
        "slurm",
        4,
        8,
        "32GB",
        "01:30:00",
        ["--qos=short"],
    )


def test_slurm_needs_the_extra(monkeypatch):
    from pipelines.cluster import slurm_cluster

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    c = load_config_cluster("{kind: slurm, jobs: 1, cores: 1, memory: 1GB, walltime: '00:10:00'}")
    with pytest.raises(ImportError, match=r"pip install -e '.\[slurm\]'"):
        slurm_cluster(c)


@pytest.mark.parametrize(
    "cores, threads, workers, limit",
    [
        (8, 2, 4, "1.86GiB"),  # 8 GB over 4 workers: 2e9 bytes = 1.86 GiB each
        (4, 1, 4, "1.86GiB"),
        (6, 3, 2, "3.73GiB"),  # 4e9 bytes
        (4, 2, 2, "3.73GiB"),
    ],
)
def test_a_slurm_jobs_worker_processes_and_threads(cores, threads, workers, limit):
    """The job script of a job of ``cores`` cores and threads_per_worker ``threads``, made without
    submitting it: cores / threads worker processes (--nworkers) of ``threads`` threads each
    (--nthreads, and the BLAS pools' environment), the job's 8 GB over its processes each, all
    its cores asked of Slurm; the plan's memory limit of a worker is that share."""
    pytest.importorskip("dask_jobqueue", reason="the slurm extra (pip install -e '.[slurm]') is not installed")
    import json
    import re
    from types import SimpleNamespace

    from pipelines.cluster import planned_memory_limit, slurm_cluster

    cfg = load_config_cluster(
        f"{{kind: slurm, jobs: 1, cores: {cores}, threads_per_worker: {threads}, memory: 8GB, walltime: '00:10:00'}}"
    )
    with slurm_cluster(cfg) as cluster:
        script = cluster.job_script()
    assert f"#SBATCH --cpus-per-task={cores}\n" in script
    assert re.search(rf"--nworkers {workers}( |$)", script, re.M), script
    assert re.search(rf"--nthreads {threads}( |$)", script, re.M), script
    assert f"--memory-limit {limit} " in script, script
    environ = json.loads(re.search(r"PRE_SPAWN_ENVIRON='(.*?)'", script).group(1))
    assert [environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")] == [str(threads)] * 3
    assert planned_memory_limit(SimpleNamespace(client=None, config=SimpleNamespace(cluster=cfg))) == 8e9 // workers


def load_config_cluster(text: str):
    import yaml

    from evolution.config import ClusterConfig

    return ClusterConfig(**yaml.safe_load(text))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    pytest.importorskip("dask_jobqueue", reason="the slurm extra (pip install -e '.[slurm]') is not installed")
    try:
        s = start_slurm(tmp_path_factory.mktemp("slurm"), cpus=2)
    except SlurmUnavailable as exc:
        pytest.skip(f"no Slurm here: {exc}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(s.conf)
    try:
        yield s
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        s.stop()


def _job_ids(slurm) -> list[str]:
    return slurm.run("squeue", "-h", "-o", "%i").split()


def test_pending_jobs_time_out_with_squeue(slurm, tmp_path):
    from pipelines.cluster import dask_client

    c = load_config_cluster(
        "{kind: slurm, jobs: 1, cores: 1, memory: 500MB, walltime: '00:05:00', start_timeout: 3,"
        " job_extra: ['--begin=now+3600']}"
    )
    with pytest.raises(TimeoutError, match=r"no Slurm worker started in 3 s: .*squeue -j \d+"):
        with dask_client(c, workdir=tmp_path):
            pass
    deadline = time.time() + 20  # and the pending job is cancelled on the way out
    while _job_ids(slurm) and time.time() < deadline:
        time.sleep(0.5)
    assert not _job_ids(slurm)


@pytest.mark.slow
def test_pipeline_on_slurm_with_a_cancelled_job(slurm, tmp_path):
    src, tgt = _corpus(tmp_path)
    sync_cfg = tmp_path / "sync.yaml"
    sync_cfg.write_text(CONFIG.format(workdir=tmp_path / "sync", cluster="cluster: synchronous", src=src, tgt=tgt))
    from pipelines.run import main

    assert main([str(sync_cfg), "--no-progress", "--stage", "train"]) == 0
    shutil.copytree(tmp_path / "sync" / "train", tmp_path / "sl" / "train")  # the same trained models

    cluster = "cluster: {kind: slurm, jobs: 2, cores: 1, memory: 3GB, walltime: '00:20:00', queue: debug, account: t}"
    sl_cfg = tmp_path / "sl.yaml"
    sl_cfg.write_text(CONFIG.format(workdir=tmp_path / "sl", cluster=cluster, src=src, tgt=tgt))
    # the job's environment is the submitter's (sbatch --export=ALL): this checkout, and a lost worker
    # given up after 2 s instead of 15 before its job is replaced
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "DASK_DISTRIBUTED__DEPLOY__LOST_WORKER_TIMEOUT": "2s",
    }
    t0 = time.time()
    run = subprocess.Popen(
        [sys.executable, "-m", "pipelines.run", str(sl_cfg), "--no-progress", "--stage", "metrics"],
        cwd=ROOT,
        env=env,
        stdout=(tmp_path / "run.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    cache, done = tmp_path / "sl" / "metrics" / "cache", tmp_path / "sl" / "metrics.zarr"
    cancelled, units_at_cancel, seen = None, None, set()
    try:
        deadline = time.time() + 600
        while run.poll() is None and time.time() < deadline:
            ids = _job_ids(slurm)
            seen.update(ids)
            units = list(cache.glob("*.json")) if cache.exists() else []
            if cancelled is None and units and not done.exists() and len(ids) == 2:
                cancelled, units_at_cancel = ids[0], len(units)
                slurm.run("scancel", cancelled)
            time.sleep(0.2)
        rc = run.wait(timeout=max(1, deadline - time.time()))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, 9)
    wall = time.time() - t0
    log = (tmp_path / "run.log").read_text()
    assert rc == 0, log[-4000:]
    assert cancelled is not None, "the metrics finished before a job could be cancelled"
    assert units_at_cancel < len(list(cache.glob("*.json"))), "the metrics finished when the job was cancelled"
    # every job ever started left its log; the cancelled one was replaced by a job that ran a worker
    logs = sorted((tmp_path / "sl" / "logs" / "slurm").glob("dask-worker-*.err"))
    started = [p.stem.rsplit("-", 1)[1] for p in logs]
    print(f"jobs started: {started}; cancelled {cancelled}; seen in squeue {sorted(seen)}; run {wall:.0f} s")
    assert len(started) > 2 and cancelled in started, started
    replacement = max(started, key=int)
    assert replacement != cancelled and "Registered to" in (logs[started.index(replacement)]).read_text()
    assert "CANCELLED" in (logs[started.index(cancelled)]).read_text()
    assert "cluster: slurm, 2 job(s) x 1 core(s)" in log and "#SBATCH --cpus-per-task=1" in log

    assert main([str(sync_cfg), "--no-progress", "--stage", "metrics"]) == 0  # the report adds nothing here
    from evolution.metrics.results import metrics_groups, open_metrics

    groups = metrics_groups(tmp_path / "sync" / "metrics.zarr")
    assert {"mi", "neighbors", "similarity", "change", "influence"} <= set(groups)
    assert groups == metrics_groups(tmp_path / "sl" / "metrics.zarr")
    for g in groups:
        a = open_metrics(tmp_path / "sl" / "metrics.zarr", g).load()
        b = open_metrics(tmp_path / "sync" / "metrics.zarr", g).load()
        xr.testing.assert_equal(a.drop_attrs(), b.drop_attrs())  # bit for bit (tests/test_execution_modes.py)
