"""A task over its worker's memory limit fails with an error naming the task and the setting
(``cluster.memory_limit``), instead of swapping the machine; what finished before is kept."""

from __future__ import annotations

import time
from types import SimpleNamespace

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


def test_the_futures_not_done_are_cancelled_when_a_worker_is_lost(monkeypatch):
    import distributed

    from evolution.dask_compute import WorkerLost, compute

    class Future:
        def __init__(self, key, done, exc=None):
            self.key, self._done, self._exc = key, done, exc

        def done(self):
            return self._done

        def result(self):
            if self._exc is not None:
                raise self._exc
            return 1

    killed = Future("big", True, distributed.KilledWorker("big", SimpleNamespace(address="tcp://w"), 0))
    pending = Future("later", False)

    class Client:
        cancelled: list = []

        def scheduler_info(self):
            return {"workers": {"tcp://w": {"memory_limit": 2**30}}}

        def compute(self, delayed, priority=0):
            return list(delayed)

        def cancel(self, futures):
            self.cancelled.extend(futures)

    monkeypatch.setattr(distributed, "as_completed", lambda futures: iter([killed]))
    client = Client()
    with pytest.raises(WorkerLost, match=r"task 'big'.*1.00 GiB per worker"):
        compute([killed, pending], client=client, progress=False, label="metrics")
    assert client.cancelled == [pending]
