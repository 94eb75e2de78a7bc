"""Extraction of layerwise representations (and attention) as a Dask task graph.

One task per ``K`` consecutive Zarr chunks along ``token``: task ``k`` owns
tokens ``[k*K*C, (k+1)*K*C)`` (``C = extract.chunk_tokens``,
``K = extract.task_chunks``), runs every sentence that overlaps that range (a
sentence straddling a boundary is run by both neighbours, each writing only
its own tokens) and writes its region of ``hidden``. Writes are therefore
disjoint, whole-chunk and lock-free, and a task's memory is bounded by
``(L + 1) * K * C * d`` floats plus one batch, whatever the corpus size. Attention maps (chunked one sentence per chunk) are
written by the task that owns a sentence's first token.

The model never travels in the graph: a task carries the model's config (a
small dict) and :func:`evolution.models.cached_adapter` loads it once per
worker process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evolution.config import ExtractConfig
from evolution.models import Adapter, cached_adapter
from evolution.store import open_attention_array, open_hidden
from evolution.tokens import TokenTable

logger = logging.getLogger(__name__)

__all__ = [
    "ChunkTask",
    "plan_tasks",
    "run_chunk",
    "batches",
    "extract_model",
    "extract_to_store",
    "warm_workers",
    "compute",
]


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


_buffers: dict[int, np.ndarray] = {}  # thread id -> flat float32 buffer


def task_buffer(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of ``shape``, reused by the tasks one worker
    thread runs (a task's states, ``(L + 1, tokens, d)``, about 117 MB for 16,384
    tokens of a 6-layer d = 256 model). Allocated afresh, it is page-faulted in
    again by every task whenever the allocator hands back new pages (system time,
    the larger the slower a machine's page faults). :func:`release_buffers` frees it."""
    size, thread = int(np.prod(shape)), threading.get_ident()
    flat = _buffers.get(thread)
    if flat is None or flat.size < size:
        _buffers.pop(thread, None)  # drop the old one before allocating the new
        _buffers[thread] = flat = np.empty(size, dtype=np.float32)
    return flat[:size].reshape(shape)


def release_buffers() -> None:
    """Free the :func:`task_buffer` of every thread of this process (run on every
    worker after an extraction)."""
    _buffers.clear()


def run_chunk(
    spec: dict,
    *,
    store: str,
    group: str,
    task: ChunkTask,
    inputs: list[list[int]],
    content_lengths: list[int],
    token_offsets: list[int],
    max_batch_tokens: int,
    dtype: str,
    attention_dtype: str | None,
    torch_threads: int,
    norms: bool = False,
) -> dict[str, Any]:
    """Compute and write one chunk. Runs on a worker.

    ``inputs[i]`` is the model input of ``task.sentences[i]``; its content
    tokens occupy rows ``token_offsets[i] : token_offsets[i] + content_lengths[i]``
    of the token axis. With ``norms``, the attention sentences also get the
    norms of Kobayashi et al. (2020) (:meth:`evolution.models.Adapter.forward_norms`).
    """
    import torch

    t_start = time.perf_counter()
    torch.set_num_threads(torch_threads)
    adapter: Adapter = cached_adapter(spec)
    t_loaded = time.perf_counter()
    forward_s = 0.0
    off = adapter.content_offset
    hidden_arr = open_hidden(store, group, mode="r+")
    buf = task_buffer((hidden_arr.shape[0], task.stop - task.start, hidden_arr.shape[2]))
    filled = 0  # rows of buf written: all of them, or the plan is wrong (the buffer holds an older task's rows)
    # local index (into inputs) -> row of the attention group (= row of the token table)
    att_row_of = {task.sentences.index(s): s for s in task.attention_rows}
    att_arr = open_attention_array(store, group, mode="r+") if att_row_of else None
    norm_arrs = (
        {
            name: open_attention_array(store, group, mode="r+", name=name)
            for name in ("value_norm", "weighted_norm", "summed_norm")
        }
        if att_row_of and norms
        else {}
    )
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        need_att = any(i in att_row_of for i in batch)
        t0 = time.perf_counter()
        if need_att and norms:
            hidden, att, norm = adapter.forward_norms([inputs[i] for i in batch])
        else:
            hidden, att = adapter.forward([inputs[i] for i in batch], attention=need_att)
        forward_s += time.perf_counter() - t0
        for b, i in enumerate(batch):
            lo, n = token_offsets[i], content_lengths[i]
            # rows of this sentence inside the task's range
            a, z = max(lo, task.start), min(lo + n, task.stop)
            if a < z:
                buf[:, a - task.start : z - task.start] = hidden[:, b, off + (a - lo) : off + (z - lo)]
                filled += z - a
            if i in att_row_of:
                t = len(inputs[i])
                row = np.full(att_arr.shape[1:], np.nan, dtype=attention_dtype)
                row[:, :, :t, :t] = att[:, b, :, :t, :t]
                att_arr[att_row_of[i]] = row
                for name, arr in norm_arrs.items():  # value_norm ends in (key,), the others in (query, key)
                    cut = (Ellipsis,) + (slice(0, t),) * (1 if name == "value_norm" else 2)
                    row = np.full(arr.shape[1:], np.nan, dtype=attention_dtype)
                    row[cut] = norm[name][:, b][cut]
                    arr[att_row_of[i]] = row
    if filled != task.stop - task.start:
        raise RuntimeError(
            f"extract task {task.index}: its sentences cover {filled} of the {task.stop - task.start} "
            f"tokens [{task.start}, {task.stop}); the task plan is inconsistent with the token table"
        )
    t0 = time.perf_counter()
    hidden_arr[:, task.start : task.stop] = buf.astype(dtype, copy=False)
    t_end = time.perf_counter()
    return {
        "index": task.index,
        "tokens": task.stop - task.start,
        "load_s": t_loaded - t_start,
        "forward_s": forward_s,
        "write_s": t_end - t0,
        "total_s": t_end - t_start,
        "began": time.time() - (t_end - t_start),
        "worker": os.getpid(),
    }


def extract_model(
    spec: dict,
    table: TokenTable,
    adapter: Adapter,
    *,
    store: str,
    group: str,
    chunk_tokens: int,
    task_chunks: int,
    max_batch_tokens: int,
    dtype: str,
    attention_sentences: int,
    attention_dtype: str | None,
    torch_threads: int,
    client=None,
    progress: bool = True,
    norms: bool = False,
) -> dict[str, float]:
    """Build and compute the task graph for one model; the group's skeleton must exist.

    ``client`` is a :class:`distributed.Client`, or ``None`` for the
    synchronous scheduler (everything in this process). Returns timings:
    ``tokens`` written, wall ``seconds`` of the graph, and ``load_s``,
    ``forward_s``, ``write_s`` summed over tasks (model loading happens in
    the first task a worker runs, unless :func:`warm_workers` did it).
    """
    import dask

    tasks = plan_tasks(
        table, chunk_tokens=chunk_tokens, task_chunks=task_chunks, attention_sentences=attention_sentences
    )
    lengths = [len(x) for x in table.ids]
    delayed = []
    for task in tasks:
        rows = task.sentences
        delayed.append(
            dask.delayed(run_chunk, pure=True)(
                spec,
                store=store,
                group=group,
                task=task,
                inputs=[adapter.build_input(table.ids[s]) for s in rows],
                content_lengths=[lengths[s] for s in rows],
                token_offsets=[int(table.offsets[s]) for s in rows],
                max_batch_tokens=max_batch_tokens,
                dtype=dtype,
                attention_dtype=attention_dtype,
                torch_threads=torch_threads,
                norms=norms,
                dask_key_name=f"extract-{group}-{task.index}",
            )
        )
    logger.info(
        "%s: %d tokens of %d sentences in %d task(s) of <= %d tokens",
        group,
        table.n_tokens,
        table.n_sentences,
        len(tasks),
        chunk_tokens * task_chunks,
    )
    t0, wall0 = time.perf_counter(), time.time()
    results = compute(delayed, client=client, progress=progress, label=f"extract {group}")
    seconds = time.perf_counter() - t0
    if client is None:
        release_buffers()
    else:
        client.run(release_buffers, on_error="ignore")  # a worker lost meanwhile holds nothing
    first = {}
    for r in results:
        first[r["worker"]] = min(first.get(r["worker"], np.inf), r["began"])
    logger.info(
        "%s: first task began %.1f s after submission (%s)",
        group,
        min(first.values()) - wall0,
        ", ".join(f"{v - wall0:.1f}" for v in first.values()),
    )
    n = sum(r["tokens"] for r in results)
    times = {k: sum(r[k] for r in results) for k in ("load_s", "forward_s", "write_s", "total_s")}
    logger.info(
        "%s: task graph computed in %.1f s (%.0f tokens/s); summed over tasks: model load %.1f s, "
        "forward %.1f s, Zarr write %.1f s, other %.1f s",
        group,
        seconds,
        n / seconds,
        times["load_s"],
        times["forward_s"],
        times["write_s"],
        times["total_s"] - times["load_s"] - times["forward_s"] - times["write_s"],
    )
    return {"tokens": n, "seconds": seconds, **times}


def training_counts(adapter: Adapter, path) -> dict[int, int]:
    """How often each token id occurs in the text at ``path`` (one sentence per line) as the
    adapter tokenises it: the frequency of a token in the model's training data."""
    from collections import Counter

    counts: Counter = Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                counts.update(adapter.tokenize(line.strip()).ids)
    return dict(counts)


def training_ranks(counts: dict[int, int]) -> dict[int, int]:
    """The frequency rank of every token id seen in training (1 = most frequent; ties: the
    smaller id first, as :func:`evolution.tokens.frequency_ranks`); unseen ids have none."""
    order = sorted(counts, key=lambda i: (-counts[i], i))
    return {int(i): r for r, i in enumerate(order, start=1)}


def extract_to_store(
    spec: dict,
    corpus,
    *,
    store: str,
    group: str,
    fingerprint: str,
    config: ExtractConfig,
    annotation: dict | None,
    attrs: dict[str, Any],
    client=None,
    progress: bool = True,
    training_text=None,
) -> dict[str, float]:
    """Extract one model into ``store``/``group`` (hidden states, token coordinates,
    attention for the first ``config.attention.sentences``), then mark the group complete.

    ``corpus`` is the analysed :class:`~evolution.corpus.Corpus`; ``annotation``
    the corpus directory's ``annotation.json`` (None without annotated text): its
    labels become the token coordinates ``upos``, ``xpos``, ``deprel``, ``head``
    (:func:`evolution.corpus.conllu.annotation_columns`) and its first sentence
    the group attribute ``annotated_from``, so that the metrics read only the
    store. ``training_text`` (the model's training split, source side; this
    project's trained models) gives the token coordinates ``train_count``: each
    token's count there (:func:`training_counts`), and ``train_rank``: its type's
    frequency rank there (:func:`training_ranks`; 0 = never seen in training), with
    the group attribute ``train_types`` (how many types training has: the ranks a
    frequency bin can reach). ``attrs`` (provenance) join
    the adapter's own description. Returns the timings of :func:`extract_model`
    plus ``stage_seconds``.
    """
    from evolution.corpus.conllu import annotation_columns
    from evolution.provenance import file_hash
    from evolution.store import create_attention_group, create_hidden_group, mark_complete
    from evolution.tokens import build_token_table

    t0 = time.perf_counter()
    warming = warm_workers(client, spec)
    adapter = cached_adapter(spec)  # shared with in-process tasks; workers load their own
    table = build_token_table(
        corpus.sentences, adapter, too_long=config.too_long, lines=corpus.lines, source=corpus.source
    )
    columns = dict(table.columns)
    digest = (
        file_hash(corpus.source)
        if os.path.isfile(corpus.source)
        # sentences given in memory
        else hashlib.sha256("\n".join(corpus.sentences).encode("utf-8")).hexdigest()
    )
    attrs = {
        **attrs,
        "corpus_source": corpus.source,
        "corpus_sha256": digest,
        "n_truncated": table.n_truncated,
        "n_skipped": table.n_skipped,
        "annotated_from": -1,
        **adapter.describe(),
    }
    if training_text is not None:
        counts = training_counts(adapter, training_text)
        columns["train_count"] = np.array([counts.get(int(i), 0) for i in columns["token_id"]], dtype=np.int64)
        rank = training_ranks(counts)
        columns["train_rank"] = np.array([rank.get(int(i), 0) for i in columns["token_id"]], dtype=np.int32)
        attrs.update(train_count_source=str(training_text), train_types=len(rank))
    if annotation is not None:
        columns.update(
            annotation_columns(
                sentence=columns["sentence"],
                word_id=columns["word_id"],
                first=annotation["first"],
                sentences=annotation["sentences"],
            )
        )
        attrs["annotated_from"] = int(annotation["first"])
    if "://" not in str(store):  # a local store records its inputs relative to its directory (the workdir)
        from evolution.provenance import portable

        attrs = portable(attrs, os.path.dirname(os.path.abspath(str(store))))
    create_hidden_group(
        store,
        group,
        columns=columns,
        n_layers=adapter.num_layers + 1,
        d_model=adapter.d_model,
        chunk_tokens=config.chunk_tokens,
        dtype=config.dtype,
        attrs=attrs,
        fingerprint=fingerprint,
        compressor=config.compressor,
    )
    n_att, norms = 0, False
    if config.attention is not None:
        n_att = min(config.attention.sentences, table.n_sentences)
        norms = config.attention.norms and adapter.supports_norms
        if config.attention.norms and not norms:
            logger.info(
                "%s: %s has no value-vector norms (Kobayashi et al. 2020); the attention group holds the maps only",
                group,
                type(adapter).__name__,
            )
        create_attention_group(
            store,
            group,
            sentence=table.sentence_index[:n_att],
            inputs=[adapter.build_input(ids) for ids in table.ids[:n_att]],
            n_layers=adapter.num_layers,
            n_heads=adapter.num_heads,
            dtype=config.attention.dtype,
            attrs={"special_ids": sorted(adapter.special_ids), **attrs},
            norms=norms,
        )
    # the graph is timed from when every worker holds the model (loading overlapped tokenisation
    # above; what is left of it is waited for here and reported as warm_s, not as graph time)
    t_warm = time.perf_counter()
    if warming:
        from distributed import wait

        try:  # bounded: a warm-up pinned to a worker that died never finishes
            wait(warming, timeout=120)
        except TimeoutError:
            logger.info("%s: a worker did not finish loading the model in 120 s; starting anyway", group)
    warm_s = time.perf_counter() - t_warm
    stats = extract_model(
        spec,
        table,
        adapter,
        store=store,
        group=group,
        chunk_tokens=config.chunk_tokens,
        task_chunks=config.task_chunks,
        max_batch_tokens=config.max_batch_tokens,
        dtype=config.dtype,
        attention_sentences=n_att,
        attention_dtype=config.attention.dtype if config.attention else None,
        torch_threads=config.torch_threads,
        client=client,
        progress=progress,
        norms=norms,
    )
    del warming
    mark_complete(store, group, fingerprint)
    stats["warm_s"] = warm_s
    stats["stage_seconds"] = time.perf_counter() - t0
    return stats


def _warm(spec: dict) -> None:
    cached_adapter(spec)


def warm_workers(client, spec: dict) -> list:
    """Start loading the model on every worker now (one task pinned to each),
    so that loading overlaps with tokenisation in the client process.

    Returns the futures; keep them until the graph has run. A no-op (empty
    list) for the synchronous scheduler.
    """
    if client is None:
        return []
    workers = list(client.scheduler_info()["workers"])
    return [client.submit(_warm, spec, workers=[w], allow_other_workers=False, pure=False) for w in workers]


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
