"""Dask client set-up from the ``cluster`` section of the config."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from evolution.config import ClusterConfig

logger = logging.getLogger(__name__)

__all__ = ["dask_client", "default_workers", "planned_workers", "worker_environ", "gpu_workers"]

#: glibc malloc trim and mmap thresholds for local workers (bytes).
MALLOC_THRESHOLD = 1 << 30


def default_workers(threads_per_worker: int = 1) -> int:
    """One worker per ``threads_per_worker`` cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // threads_per_worker)


def planned_workers(ctx) -> int:
    """The workers a stage's tasks share (``ctx``: the run's :class:`~pipelines.stages.base.Context`):
    its client's, else the local cluster's planned count, else 1."""
    cluster = ctx.config.cluster
    if ctx.client is not None:
        return len(ctx.client.scheduler_info()["workers"]) or 1
    if cluster.kind == "local":
        from evolution.models.device import cuda_count

        # as dask_client starts them: one worker per GPU where models run on GPUs
        gpus = gpu_workers(ctx.config.extract.device, gpus=cuda_count(), n_workers=cluster.n_workers)
        return len(gpus) if gpus is not None else cluster.n_workers or default_workers(cluster.threads_per_worker)
    return 1


def planned_memory_limit(ctx) -> int | None:
    """A worker's memory limit in bytes for the plan (``ctx``: the run's
    :class:`~pipelines.stages.base.Context`): its client's workers' smallest, else a local
    cluster's ``cluster.memory_limit`` as distributed reads it ("auto": the machine's memory x
    threads per worker / cores), else a Slurm job's ``cluster.memory`` over its worker processes,
    else None (a scheduler address: not known before its workers answer)."""
    from evolution.dask_compute import worker_memory_limit

    if ctx.client is not None:
        return worker_memory_limit(ctx.client)
    cluster = ctx.config.cluster
    if cluster.kind == "slurm" and cluster.memory:
        from dask.utils import parse_bytes

        return parse_bytes(cluster.memory) // _processes(cluster)  # a job's memory over its worker processes
    if cluster.kind != "local":
        return None
    from distributed.worker_memory import parse_memory_limit

    return parse_memory_limit(cluster.memory_limit, cluster.threads_per_worker, logger=logger)


def worker_environ(threads: int) -> dict[str, str]:
    """Environment of local worker processes: glibc's malloc thresholds and ``threads``
    for the OpenMP / MKL / OpenBLAS pools."""
    # distributed's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in workers. Setting that variable at
    # all (to any value) switches off glibc's dynamic mmap threshold, so every tensor above 128 KiB
    # is mmap'ed, page-faulted in and unmapped again: measured here, a 6-layer encoder forwarded
    # 3.9k tokens/s in a worker against 6.1k in a plain process. Fixing both thresholds restores
    # the plain-process speed (docs/decisions.md, "Worker memory allocator").
    return {
        "MALLOC_TRIM_THRESHOLD_": str(MALLOC_THRESHOLD),
        "MALLOC_MMAP_THRESHOLD_": str(MALLOC_THRESHOLD),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": str(threads),
    }


def gpu_workers(device: str, *, gpus: int, n_workers: int | None) -> list[str] | None:
    """The ``CUDA_VISIBLE_DEVICES`` of each local worker when models run on GPUs: one worker per
    GPU for ``auto`` / ``cuda`` (each sees its own GPU as ``cuda``), one worker for ``cuda:N``
    (it sees GPU N); None for the CPU, or where ``cluster.n_workers`` is set (the config decides)."""
    if n_workers is not None or gpus == 0 or device == "cpu":
        return None
    if device in ("auto", "cuda"):
        return [str(i) for i in range(gpus)]
    return [device.split(":")[1]]


class _VisibleDevice:
    """A worker plugin that shows worker ``i`` only GPU ``visible[i]`` (before torch starts CUDA)."""

    def __init__(self, visible: list[str]):
        self.visible = visible

    def setup(self, worker) -> None:
        index = int(str(worker.name).rsplit("-", 1)[-1]) if str(worker.name).rsplit("-", 1)[-1].isdigit() else 0
        os.environ["CUDA_VISIBLE_DEVICES"] = self.visible[index % len(self.visible)]


#: seconds to wait for the first Slurm worker when ``cluster.start_timeout`` is not set
SLURM_START_TIMEOUT = 600


def _processes(cfg: ClusterConfig) -> int:
    """Worker processes per Slurm job: one per ``threads_per_worker`` of its cores."""
    assert cfg.cores is not None  # ClusterConfig requires it for kind: slurm
    return cfg.cores // cfg.threads_per_worker


def slurm_cluster(cfg: ClusterConfig, *, log_directory: Path | None = None):
    """A ``dask_jobqueue.SLURMCluster`` for ``cfg`` (``kind: slurm``), not yet scaled.

    Each job runs ``cores / threads_per_worker`` worker processes (dask-jobqueue's default is
    about sqrt(cores) processes of several threads: docs/decisions.md, "Slurm workers"), each
    with the local workers' environment (:func:`worker_environ`) and no profiler."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as exc:
        raise ImportError(
            f"cluster.kind: slurm needs dask-jobqueue ({exc}); install it with: pip install -e '.[slurm]' "
            "(or pip install 'dask-jobqueue>=0.9')"
        ) from exc
    env = {
        # the nanny applies its pre-spawn-environ after the job's environment, so the thresholds go
        # through dask's own config (DASK_* variables are read as Python literals)
        "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": json.dumps(worker_environ(cfg.threads_per_worker)),
        "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    }
    prologue = [f"export {k}='{v}'" for k, v in env.items()]
    if log_directory is not None:
        log_directory.mkdir(parents=True, exist_ok=True)
    assert cfg.cores is not None and cfg.memory is not None  # ClusterConfig requires them for kind: slurm
    return SLURMCluster(
        cores=cfg.cores,
        processes=_processes(cfg),
        memory=cfg.memory,
        walltime=cfg.walltime,
        queue=cfg.queue,
        account=cfg.account,
        job_extra_directives=list(cfg.job_extra),
        job_script_prologue=prologue,
        python=cfg.python or sys.executable,
        log_directory=str(log_directory) if log_directory is not None else None,
        scheduler_options={"dashboard": False, "dashboard_address": ":0"},  # no dashboard; its HTTP port free
        silence_logs=logging.WARNING,
    )


def _squeue(job_ids: list[str]) -> str:
    if not job_ids or shutil.which("squeue") is None:
        return ""
    try:
        out = subprocess.run(
            ["squeue", "-j", ",".join(job_ids), "-o", "%i %T %R"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


@contextlib.contextmanager
def _slurm_client(cfg: ClusterConfig, workdir: Path | None) -> Iterator[object]:
    from distributed import Client

    log_directory = workdir / "logs" / "slurm" if workdir is not None else None
    with slurm_cluster(cfg, log_directory=log_directory) as cluster, Client(cluster) as client:
        logger.info(
            "cluster: slurm, %d job(s) x %d core(s) (%d worker process(es) each), %s, walltime %s%s%s; job script:\n%s",
            cfg.jobs,
            cfg.cores,
            _processes(cfg),
            cfg.memory,
            cfg.walltime,
            f", partition {cfg.queue}" if cfg.queue else "",
            f", account {cfg.account}" if cfg.account else "",
            cluster.job_script(),
        )
        # adapt() between jobs and jobs keeps that many running: a job that ends (scancel, a node
        # failure, its walltime) leaves SpecCluster.workers after distributed.deploy.lost-worker-timeout,
        # and the adaptive loop submits a new one for its place (verified in tests/test_slurm.py)
        cluster.scale(jobs=cfg.jobs)
        cluster.adapt(minimum_jobs=cfg.jobs, maximum_jobs=cfg.jobs)
        timeout = cfg.start_timeout or SLURM_START_TIMEOUT
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            ids = [str(j.job_id) for j in cluster.workers.values() if getattr(j, "job_id", None)]
            raise TimeoutError(
                f"no Slurm worker started in {timeout} s: the jobs ({', '.join(ids) or 'none submitted'}) "
                f"are pending or failed; see `squeue -j {','.join(ids)}` and their logs in {log_directory}; "
                f"raise cluster.start_timeout to wait longer\n{_squeue(ids)}"
            ) from None
        yield client


@contextlib.contextmanager
def dask_client(cfg: ClusterConfig, *, device: str = "cpu", workdir: Path | None = None) -> Iterator[object | None]:
    """Yield a :class:`distributed.Client`, or ``None`` for ``kind: synchronous``.

    A local cluster is started with worker *processes* (the GIL would serialise
    threads running Python-heavy tokenisation and small matrix products) and
    shut down on exit, Ctrl-C included. ``kind: slurm`` submits the worker jobs
    (:func:`slurm_cluster`; their logs under ``workdir/logs/slurm``) and cancels
    them on exit.
    """
    if cfg.kind == "synchronous":
        logger.info("cluster: synchronous (every task in this process)")
        yield None
        return
    import dask
    from distributed import Client, LocalCluster

    for name in ("distributed", "distributed.scheduler", "distributed.nanny", "distributed.core"):
        logging.getLogger(name).setLevel(logging.WARNING)

    if cfg.kind == "address":
        logger.info("cluster: connecting to %s", cfg.address)
        try:
            client = Client(cfg.address, timeout="30s")
        except OSError as exc:
            raise ConnectionError(
                f"cannot reach the Dask scheduler at {cfg.address} ({exc}); start it with "
                "`dask scheduler` or use cluster: local"
            ) from exc
        with client:
            yield client
        return
    if cfg.kind == "slurm":
        with _slurm_client(cfg, workdir) as slurm_client:
            yield slurm_client
        return
    from evolution.models.device import cuda_count

    gpus = gpu_workers(device, gpus=cuda_count(), n_workers=cfg.n_workers)
    if gpus is not None:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            LocalCUDACluster = None
        if LocalCUDACluster is not None:
            logger.info("cluster: local, one dask-cuda worker per GPU (%s)", ",".join(gpus))
            with (
                LocalCUDACluster(
                    CUDA_VISIBLE_DEVICES=",".join(gpus),
                    threads_per_worker=cfg.threads_per_worker,
                    memory_limit=cfg.memory_limit,
                    dashboard_address=None,
                    silence_logs=logging.WARNING,
                ) as cluster,
                Client(cluster) as client,
            ):
                yield client
            return
    n = len(gpus) if gpus is not None else cfg.n_workers or default_workers(cfg.threads_per_worker)
    logger.info(
        "cluster: local, %d worker process(es) x %d thread(s), memory_limit=%s%s",
        n,
        cfg.threads_per_worker,
        cfg.memory_limit,
        f", one per GPU ({','.join(gpus)})" if gpus else "",
    )
    # Each worker's statistical profiler samples every thread's stack every 10 ms for a dashboard
    # that a local cluster here does not serve: measured, it took 7-10% of a core beside a
    # single-threaded forward loop (benchmarks/extract.py --worker-profiler; docs/decisions.md #11).
    settings = {
        "distributed.nanny.pre-spawn-environ": worker_environ(cfg.threads_per_worker),
        "distributed.worker.profile.enabled": False,
    }
    with (
        dask.config.set(settings),
        LocalCluster(
            n_workers=n,
            threads_per_worker=cfg.threads_per_worker,
            processes=True,
            memory_limit=cfg.memory_limit,
            dashboard_address=None,
            silence_logs=logging.WARNING,
        ) as cluster,
        Client(cluster) as client,
    ):
        if gpus is not None:
            client.register_plugin(_VisibleDevice(gpus), name="evolution-visible-device")
        yield client
