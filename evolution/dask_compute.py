"""Computing Dask delayed objects on a :class:`distributed.Client` or synchronously in this
process, with a progress bar and each result handed over as it finishes (:func:`compute`):
the extraction's task graph and the metrics' units.
"""

from __future__ import annotations

__all__ = ["compute", "WorkerLost", "worker_memory_limit"]


class WorkerLost(RuntimeError):
    """A task killed its worker as often as the scheduler allows (``distributed.KilledWorker``): the
    nanny stopped it at its memory limit, or it crashed. The message names the task and the limit."""


def _limits(client) -> set[int]:
    """The workers' memory limits in bytes (read before the tasks run: a killed worker leaves the list)."""
    try:
        return {int(w.get("memory_limit") or 0) for w in client.scheduler_info()["workers"].values()}
    except Exception:  # noqa: BLE001 - no scheduler information: the message says "unknown"
        return set()


def worker_memory_limit(client) -> int | None:
    """The smallest memory limit in bytes among ``client``'s workers (None: no client, or no limit)."""
    if client is None:
        return None
    limits = [v for v in _limits(client) if v]
    return min(limits) if limits else None


def _lost(limits: set[int], key, exc, label: str) -> WorkerLost:
    """The :class:`WorkerLost` for task ``key``: its name, the workers' memory limit, what to change."""
    limit = ", ".join(f"{v / 2**30:.2f} GiB" for v in sorted(limits) if v) or "unknown"
    return WorkerLost(
        f"{label}: task {key!r} killed its worker each time it ran ({exc}). A worker is stopped when it "
        f"exceeds its memory limit (here {limit} per worker: cluster.memory_limit), so this task most likely "
        "needs more than that. Raise cluster.memory_limit (and lower cluster.n_workers so that the limits fit the "
        "machine; on Slurm raise cluster.memory, which the job's workers share), or make the task smaller "
        "(extract.chunk_tokens / extract.task_chunks for extraction; the "
        "analysis' sentences, bootstrap or layers for a metrics unit). Everything that finished is kept: "
        "rerun the same command to go on."
    )


def compute(
    delayed: list, *, client, progress: bool, label: str, unit: str = "chunk", on_result=None, first: int = 0
) -> list:
    """Compute Dask delayed objects on ``client`` (or synchronously), with a progress bar
    counting ``unit``s (one per delayed object). ``on_result(i, result)`` is called as
    each one finishes, so that a caller can keep what is done if the run is killed.
    ``first``: the first ``first`` objects run before the rest (a higher Dask priority on a
    client; list order without one)."""
    import dask

    if client is None:
        if on_result is None:
            if progress:
                from dask.diagnostics import ProgressBar

                with ProgressBar(minimum=1):
                    return list(dask.compute(*delayed, scheduler="synchronous"))
            return list(dask.compute(*delayed, scheduler="synchronous"))
        from tqdm.auto import tqdm

        results = []
        for i, d in enumerate(tqdm(delayed, desc=label, unit=unit, disable=not progress)):
            results.append(dask.compute(d, scheduler="synchronous")[0])
            on_result(i, results[-1])
        return results
    from distributed import KilledWorker, as_completed
    from tqdm.auto import tqdm

    limits = _limits(client)
    futures = (client.compute(delayed[:first], priority=1) if first else []) + client.compute(delayed[first:])
    results = [None] * len(futures)
    index = {f.key: i for i, f in enumerate(futures)}
    with tqdm(total=len(futures), desc=label, unit=unit, disable=not progress) as bar:
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except KilledWorker as exc:
                client.cancel([f for f in futures if not f.done()])
                raise _lost(limits, fut.key, exc, label) from None
            if on_result is not None:
                on_result(i, results[i])
            bar.update(1)
    return results
