"""How an extraction (:mod:`evolution.extract`) divides its work: tasks of whole Zarr chunks
along the token axis (:func:`plan_tasks`), and within a task the sentences grouped into
least-cost batches of forward passes (:func:`batches`, which the other forward passes of the
project use too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evolution.tokens import TokenTable

__all__ = ["ChunkTask", "plan_tasks", "BATCH_OVERHEAD_TOKENS", "batches"]


@dataclass(frozen=True)
class ChunkTask:
    """The work of one task: tokens ``[start, stop)`` of the token axis."""

    index: int
    start: int
    stop: int
    sentences: tuple[int, ...]  # rows of the token table's sentence list
    attention_rows: tuple[int, ...]  # rows of the attention group this task writes


def plan_tasks(
    table: TokenTable, *, chunk_tokens: int, task_chunks: int = 1, attention_sentences: int = 0
) -> list[ChunkTask]:
    """Split the token axis into tasks of ``task_chunks`` whole chunks each."""
    n = table.n_tokens
    offsets = table.offsets
    width = chunk_tokens * task_chunks
    tasks = []
    for k, start in enumerate(range(0, n, width)):
        stop = min(start + width, n)
        first = int(np.searchsorted(offsets, start, side="right") - 1)
        last = int(np.searchsorted(offsets, stop, side="left"))  # exclusive
        starts_here = [s for s in range(first, last) if start <= offsets[s] < stop and s < attention_sentences]
        tasks.append(ChunkTask(k, start, stop, tuple(range(first, last)), tuple(starts_here)))
    return tasks


#: The fixed cost of one forward pass, in tokens' worth of compute, that :func:`batches`
#: weighs against padding. Fitted on this project's 2-core CPU for a 6-layer, d = 256
#: fairseq encoder at one thread: 36-38 (``python benchmarks/extract.py --batch-cost``);
#: larger models cost more per token, so fewer tokens per pass.
BATCH_OVERHEAD_TOKENS = 32


def batches(
    lengths: Sequence[int], *, max_batch_tokens: int, overhead_tokens: float = BATCH_OVERHEAD_TOKENS
) -> list[list[int]]:
    """Group indices into batches whose padded size (``len(batch) * max length``)
    stays within ``max_batch_tokens``, at the least cost.

    The cost of a batch is its padded size plus ``overhead_tokens`` (the fixed
    cost of a forward pass); the batches minimise the summed cost. Sentences are
    sorted longest first (ties by index) and cut into runs of consecutive
    sentences by dynamic programming, which is optimal over all groupings (for
    this cost a batch never gains from skipping a sentence of intermediate
    length; tests/test_extract.py checks it against every partition of small
    sets). Filling each batch to the budget instead pads the short sentences:
    within 16,384-token tasks of 8-60 word lines at 1,024 tokens a batch, the
    cost is 8.6% over the unpadded tokens against 6.7% here (``python
    benchmarks/extract.py --padding``).

    Deterministic; batches come longest first; a sentence longer than the
    budget gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n = len(order)
    if n == 0:
        return []
    s = np.array([lengths[i] for i in order], dtype=np.float64)  # descending
    best = np.zeros(n + 1)  # best[j]: least cost of the first j sentences
    cut = np.zeros(n + 1, dtype=np.int64)  # the batch ending at j starts at cut[j]
    lo = 0
    for j in range(1, n + 1):
        # batch order[i:j] has width s[i] and j - i rows; widening it only adds rows and width
        while lo < j - 1 and (j - lo) * s[lo] > max_batch_tokens:
            lo += 1
        i = np.arange(lo, j)
        cost = best[lo:j] + overhead_tokens + (j - i) * s[lo:j]
        k = int(np.argmin(cost))  # ties: the longer batch
        best[j], cut[j] = cost[k], lo + k
    out = []
    j = n
    while j > 0:
        out.append(order[cut[j] : j])
        j = int(cut[j])
    return out[::-1]
