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

__all__ = ["ChunkTask", "plan_tasks", "row_chunk", "BATCH_OVERHEAD_TOKENS", "batches"]


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

    With ``rows`` (token-axis rows, ``extract.rows: needed``) each task is a full task's share
    of them (:func:`_row_tasks`): it runs the very batches of that full task that make its rows
    in a full extraction (batches of the ``input_lengths``, each sentence's model input length,
    at ``max_batch_tokens``), so a kept row's states, and the attention maps, are bit for bit
    those of a full extraction, and no batch runs twice. Each task keeps a few more rows than
    asked, of the sentences it runs, to fill whole chunks of :func:`row_chunk` rows: the rows
    stored are the tasks' ``rows``, in order."""
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
        np.unique(np.asarray(rows, dtype=np.int64)),
        full=tasks,
        chunk=row_chunk(chunk_tokens),
        input_lengths=input_lengths,
        max_batch_tokens=max_batch_tokens,
    )


def row_chunk(chunk_tokens: int) -> int:
    """The ``hidden`` chunk length along ``stored_token`` with ``extract.rows: needed``: an eighth
    of ``extract.chunk_tokens`` (at least 16), so that padding each task's kept rows to whole
    chunks adds few rows (:func:`plan_tasks`)."""
    return chunk_tokens // 8 if chunk_tokens % 8 == 0 and chunk_tokens >= 128 else chunk_tokens


def _row_tasks(
    table: TokenTable,
    rows: np.ndarray,
    *,
    full: list[ChunkTask],
    chunk: int,
    input_lengths: Sequence[int],
    max_batch_tokens: int,
) -> list[ChunkTask]:
    """One task per full task holding a row of ``rows``: it runs the full task's batches that hold
    a sentence with such a row (or an attention sentence it writes), and keeps, besides the rows
    asked for, as many more rows of the sentences those batches run as fill its last chunk of
    ``chunk`` rows (adding batches, in order, where they run too few), so that no two tasks write
    one chunk. Its stored range follows the previous task's."""
    offsets = np.asarray(table.offsets)
    tasks: list[ChunkTask] = []
    at = 0
    cuts = np.searchsorted(rows, [t.start for t in full] + [table.n_tokens])
    busy = [k for k, t in enumerate(full) if cuts[k + 1] > cuts[k] or t.attention_rows]
    for k in busy:
        t = full[k]
        wanted = rows[cuts[k] : cuts[k + 1]]
        lengths = [input_lengths[s] for s in t.sentences]
        made = [
            ([t.sentences[i] for i in b], any(t.sentences[i] in t.attention_rows for i in b))
            for b in batches(lengths, max_batch_tokens=max_batch_tokens)
        ]
        sentence_of = np.searchsorted(offsets, wanted, side="right") - 1
        need = set(sentence_of.tolist()) | set(t.attention_rows)
        run = [i for i, (sentences, _) in enumerate(made) if not need.isdisjoint(sentences)]
        last = k == busy[-1]  # the array's last task: no neighbour shares its last chunk

        def rows_of(batch_ids: list[int], made=made, lo: int = t.start, hi: int = t.stop) -> np.ndarray:
            """The token-axis rows, inside this full task, of the sentences of these batches."""
            spans = [
                np.arange(max(int(offsets[s]), lo), min(int(offsets[s + 1]), hi)) for i in batch_ids for s in made[i][0]
            ]
            return np.unique(np.concatenate(spans)) if spans else np.empty(0, dtype=np.int64)

        kept = wanted
        if not last:
            more = (-len(wanted)) % chunk
            free = np.setdiff1d(rows_of(run), wanted)
            extra = [i for i in range(len(made)) if i not in run]
            while len(free) < more and extra:  # too few rows in the batches run: run more
                run.append(extra.pop(0))
                free = np.setdiff1d(rows_of(run), wanted)
            if len(free) < more:  # (a full task other than the last holds whole chunks: not reached)
                raise RuntimeError(f"extract task {k}: {len(free)} rows to fill its last chunk, {more} needed")
            kept = np.union1d(wanted, free[:more])
        run.sort()
        slots: list[int] = []
        plan: list[tuple[tuple[int, ...], bool]] = []
        head_slot: dict[int, int] = {}
        for i in run:
            sentences, returns_attention = made[i]
            idx = []
            for s in sentences:
                if s in t.attention_rows:
                    head_slot[s] = len(slots)
                idx.append(len(slots))
                slots.append(s)
            plan.append((tuple(idx), returns_attention))
        tasks.append(
            ChunkTask(
                len(tasks),
                at,
                at + len(kept),
                tuple(slots),
                t.attention_rows,
                np.asarray(kept, dtype=np.int64),
                windows=tuple((t.start, t.stop) for _ in slots),
                batch_plan=tuple(plan),
                attention_slots=tuple(head_slot[s] for s in t.attention_rows),
            )
        )
        at += len(kept)
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
