"""Dask client set-up from the ``cluster`` section of the config."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from evolution.config import ClusterConfig

logger = logging.getLogger(__name__)

__all__ = ["dask_client", "default_workers", "worker_environ", "gpu_workers"]

#: glibc malloc trim and mmap thresholds for local workers (bytes).
MALLOC_THRESHOLD = 1 << 30


def default_workers(threads_per_worker: int = 1) -> int:
    """One worker per ``threads_per_worker`` cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // threads_per_worker)


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


@contextlib.contextmanager
def dask_client(cfg: ClusterConfig, *, device: str = "cpu") -> Iterator[object | None]:
    """Yield a :class:`distributed.Client`, or ``None`` for ``kind: synchronous``.

    A local cluster is started with worker *processes* (the GIL would serialise
    threads running Python-heavy tokenisation and small matrix products) and
    shut down on exit, Ctrl-C included.
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
