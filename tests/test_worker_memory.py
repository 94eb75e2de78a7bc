"""A task over its worker's memory limit fails with an error naming the task and the setting
(``cluster.memory_limit``), instead of swapping the machine; what finished before is kept."""

from __future__ import annotations

import time

import numpy as np
import pytest


def _small(i: int) -> int:
    return i * 2


def _large(i: int) -> int:
    x = np.ones(1_500_000_000 // 8)  # 1.5 GB, written: resident
    time.sleep(2.0)  # long enough for the nanny's memory monitor to see it
    return int(x[0]) + i


@pytest.mark.slow
def test_a_task_over_the_memory_limit_names_itself_and_the_setting():
    import dask
    from distributed import Client, LocalCluster

    from evolution.dask_compute import WorkerLost, compute

    kept = []
    with dask.config.set({"distributed.scheduler.allowed-failures": 0, "distributed.worker.memory.terminate": 0.9}):
        with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="600MiB", processes=True) as cluster:
            with Client(cluster) as client:
                small = dask.delayed(_small, pure=True)(3, dask_key_name="metrics-small")
                large = dask.delayed(_large, pure=True)(1, dask_key_name="similarity-change-unit")
                with pytest.raises(WorkerLost) as err:
                    compute(
                        [small, large],
                        client=client,
                        progress=False,
                        label="metrics",
                        first=1,
                        on_result=lambda i, r: kept.append((i, r)),
                    )
    message = str(err.value)
    assert "'similarity-change-unit'" in message
    assert "0.59 GiB per worker: cluster.memory_limit" in message
    assert "rerun the same command" in message
    assert kept == [(0, 6)]  # the task that finished first was handed over before the failure
