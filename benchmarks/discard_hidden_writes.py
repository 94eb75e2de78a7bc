"""Dask worker preload for ``benchmarks/extract.py --discard-writes``: extraction tasks
compute and copy every state as usual but do not store ``hidden`` (diagnostic only:
it isolates what storing costs; the store it leaves is incomplete)."""

import numpy as np


class _Discard:
    def __init__(self, array):
        self.shape, self.dtype = array.shape, array.dtype

    def __setitem__(self, key, value):
        np.asarray(value)  # the cast to the stored dtype still happens; the bytes go nowhere


def dask_setup(worker) -> None:
    import evolution.extract_task as extract_task  # run_chunk looks up open_hidden there

    open_hidden = extract_task.open_hidden
    extract_task.open_hidden = lambda *args, **kwargs: _Discard(open_hidden(*args, **kwargs))
