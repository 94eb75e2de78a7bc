"""Computing Dask delayed objects on a :class:`distributed.Client` or synchronously in this
process, with a progress bar and each result handed over as it finishes (:func:`compute`):
the extraction's task graph and the metrics' units.
"""

from __future__ import annotations

__all__ = ["compute"]


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
    from distributed import as_completed
    from tqdm.auto import tqdm

    futures = (client.compute(delayed[:first], priority=1) if first else []) + client.compute(delayed[first:])
    results = [None] * len(futures)
    index = {f.key: i for i, f in enumerate(futures)}
    with tqdm(total=len(futures), desc=label, unit=unit, disable=not progress) as bar:
        for fut in as_completed(futures):
            i = index[fut.key]
            results[i] = fut.result()
            if on_result is not None:
                on_result(i, results[i])
            bar.update(1)
    return results
