"""How an extraction (:mod:`evolution.extract`) divides its work: tasks of whole Zarr chunks
along the token axis (:func:`plan_tasks`), and within a task the sentences grouped into
least-cost batches of forward passes (:func:`batches`, which the other forward passes of the
project use too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from evolution.tokens import TokenTable

__all__ = ["ChunkTask", "plan_tasks", "BATCH_OVERHEAD_TOKENS", "batches"]


@dataclass(frozen=True)
class ChunkTask:
    """The work of one task: rows ``[start, stop)`` of the ``hidden`` array.

    Without ``rows``, those are the token axis's rows ``start..stop``, the task runs
    ``sentences`` in the batches :func:`batches` makes of them, and writes the maps of the
    ``attention_rows`` sentences (those that start in its range). With ``rows``
    (``extract.rows: needed``) the array's rows hold the token-axis rows ``rows`` (sorted); the
    task runs ``batch_plan`` (indices into ``sentences``, and whether the batch returns
    attention), each sentence writing its rows inside its ``windows`` entry, and the sentence
    at ``attention_slots[i]`` writes the maps of ``attention_rows[i]``.
    """

    index: int
    start: int
    stop: int
    sentences: tuple[int, ...]  # rows of the token table's sentence list
    attention_rows: tuple[int, ...]  # rows of the attention group this task writes
    rows: np.ndarray | None = field(default=None, compare=False)
    windows: tuple[tuple[int, int], ...] | None = None
    batch_plan: tuple[tuple[tuple[int, ...], bool], ...] | None = None
    attention_slots: tuple[int, ...] | None = None


def plan_tasks(
    table: TokenTable,
    *,
    chunk_tokens: int,
    task_chunks: int = 1,
    attention_sentences: int = 0,
    rows: np.ndarray | None = None,
    input_lengths: Sequence[int] | None = None,
    max_batch_tokens: int = 1024,
) -> list[ChunkTask]:
    """Split the token axis into tasks of ``task_chunks`` whole chunks each.

    With ``rows`` (sorted token-axis rows, ``extract.rows: needed``) split those rows instead.
    Each row comes from the very forward pass that makes it in a full extraction: the batch, of
    the full extraction's task holding the row, that holds its sentence (batches of the
    ``input_lengths``, each sentence's model input length, at ``max_batch_tokens``). So a kept
    row's states, and the attention maps, are bit for bit those of a full extraction; a batch
    runs whole even where only some of its sentences have rows kept."""
    offsets = table.offsets
    width = chunk_tokens * task_chunks
    n = table.n_tokens
    tasks = []
    for k, start in enumerate(range(0, n, width)):
        stop = min(start + width, n)
        first = int(np.searchsorted(offsets, start, side="right") - 1)
        last = int(np.searchsorted(offsets, stop, side="left"))  # exclusive
        starts_here = [s for s in range(first, last) if start <= offsets[s] < stop and s < attention_sentences]
        tasks.append(ChunkTask(k, start, stop, tuple(range(first, last)), tuple(starts_here)))
    if rows is None:
        return tasks
    if input_lengths is None:
        raise ValueError("plan_tasks: rows need the sentences' input_lengths (the full extraction's batches)")
    return _row_tasks(
        table,
        np.asarray(rows, dtype=np.int64),
        full=tasks,
        width=width,
        attention_sentences=attention_sentences,
        input_lengths=input_lengths,
        max_batch_tokens=max_batch_tokens,
    )


def _row_tasks(
    table: TokenTable,
    rows: np.ndarray,
    *,
    full: list[ChunkTask],
    width: int,
    attention_sentences: int,
    input_lengths: Sequence[int],
    max_batch_tokens: int,
) -> list[ChunkTask]:
    offsets = np.asarray(table.offsets)
    sentence_of = np.searchsorted(offsets, rows, side="right") - 1  # each row's sentence
    full_of = rows // width  # the full extraction's task of each row
    attention: dict[int, list[int]] = {}  # written by the task holding the sentence's first row
    if len(rows):
        for s in range(min(attention_sentences, table.n_sentences)):
            at = min(int(np.searchsorted(rows, offsets[s])), len(rows) - 1)
            attention.setdefault(at // width, []).append(s)
    made: dict[int, list[tuple[list[int], bool]]] = {}

    def full_batches(k: int) -> list[tuple[list[int], bool]]:
        """Full task ``k``'s batches as sentences, with whether each returns attention."""
        if k not in made:
            t = full[k]
            lengths = [input_lengths[s] for s in t.sentences]
            made[k] = [
                ([t.sentences[i] for i in b], any(t.sentences[i] in t.attention_rows for i in b))
                for b in batches(lengths, max_batch_tokens=max_batch_tokens)
            ]
        return made[k]

    tasks = []
    for j, start in enumerate(range(0, len(rows), width)):
        stop = min(start + width, len(rows))
        heads = attention.get(j, [])
        want: dict[int, set[int]] = {}
        for k, s in zip(full_of[start:stop].tolist(), sentence_of[start:stop].tolist(), strict=True):
            want.setdefault(k, set()).add(s)
        head_task = {s: min(int(offsets[s]) // width, len(full) - 1) for s in heads}
        for s, k in head_task.items():
            want.setdefault(k, set()).add(s)
        slots: list[int] = []
        windows: list[tuple[int, int]] = []
        plan: list[tuple[tuple[int, ...], bool]] = []
        head_slot: dict[int, int] = {}
        for k in sorted(want):
            for sentences, returns_attention in full_batches(k):
                if want[k].isdisjoint(sentences):
                    continue
                idx = []
                for s in sentences:
                    if head_task.get(s) == k:
                        head_slot[s] = len(slots)
                    idx.append(len(slots))
                    slots.append(s)
                    windows.append((full[k].start, full[k].stop))
                plan.append((tuple(idx), returns_attention))
        tasks.append(
            ChunkTask(
                j,
                start,
                stop,
                tuple(slots),
                tuple(heads),
                rows[start:stop],
                windows=tuple(windows),
                batch_plan=tuple(plan),
                attention_slots=tuple(head_slot[s] for s in heads),
            )
        )
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
