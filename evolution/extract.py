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

import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from evolution.models import Adapter, cached_adapter
from evolution.tokens import TokenTable

logger = logging.getLogger(__name__)

__all__ = ["ChunkTask", "plan_tasks", "run_chunk", "batches", "extract_model", "warm_workers", "compute"]


@dataclass(frozen=True)
class ChunkTask:
    """The work of one task: tokens ``[start, stop)`` of the token axis."""

    index: int
    start: int
    stop: int
    sentences: tuple[int, ...]  # rows of the token table's sentence list
    attention_rows: tuple[int, ...]  # rows of the attention group this task writes


def plan_tasks(table: TokenTable, *, chunk_tokens: int, task_chunks: int = 1,
               attention_sentences: int = 0) -> list[ChunkTask]:
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


def batches(lengths: Sequence[int], *, max_batch_tokens: int) -> list[list[int]]:
    """Group indices into batches of similar length whose padded size
    (``len(batch) * max length``) stays within ``max_batch_tokens``.

    Longest first, deterministic (ties by index); a sentence longer than the
    budget gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        w = max(width, lengths[i])
        if current and w * (len(current) + 1) > max_batch_tokens:
            out.append(current)
            current, w = [], lengths[i]
        current.append(i)
        width = w
    if current:
        out.append(current)
    return out


def run_chunk(spec: dict, *, store: str, group: str, task: ChunkTask, inputs: list[list[int]],
              content_lengths: list[int], token_offsets: list[int], max_batch_tokens: int, dtype: str,
              attention_dtype: str | None, torch_threads: int) -> dict[str, Any]:
    """Compute and write one chunk. Runs on a worker.

    ``inputs[i]`` is the model input of ``task.sentences[i]``; its content
    tokens occupy rows ``token_offsets[i] : token_offsets[i] + content_lengths[i]``
    of the token axis.
    """
    import torch
    import zarr

    t_start = time.perf_counter()
    torch.set_num_threads(torch_threads)
    adapter: Adapter = cached_adapter(spec)
    t_loaded = time.perf_counter()
    forward_s = 0.0
    off = adapter.content_offset
    hidden_arr = zarr.open_array(store, path=f"{group}/hidden", mode="r+", zarr_format=3)
    buf = np.empty((hidden_arr.shape[0], task.stop - task.start, hidden_arr.shape[2]), dtype=np.float32)
    # local index (into inputs) -> row of the attention group (= row of the token table)
    att_row_of = {task.sentences.index(s): s for s in task.attention_rows}
    att_arr = (zarr.open_array(store, path=f"{group}/attention/attention", mode="r+", zarr_format=3)
               if att_row_of else None)
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        need_att = any(i in att_row_of for i in batch)
        t0 = time.perf_counter()
        hidden, att = adapter.forward([inputs[i] for i in batch], attention=need_att)
        forward_s += time.perf_counter() - t0
        for b, i in enumerate(batch):
            lo, n = token_offsets[i], content_lengths[i]
            # rows of this sentence inside the task's range
            a, z = max(lo, task.start), min(lo + n, task.stop)
            if a < z:
                buf[:, a - task.start:z - task.start] = hidden[:, b, off + (a - lo):off + (z - lo)]
            if i in att_row_of:
                t = len(inputs[i])
                row = np.full(att_arr.shape[1:], np.nan, dtype=attention_dtype)
                row[:, :, :t, :t] = att[:, b, :, :t, :t]
                att_arr[att_row_of[i]] = row
    t0 = time.perf_counter()
    hidden_arr[:, task.start:task.stop] = buf.astype(dtype, copy=False)
    t_end = time.perf_counter()
    return {"index": task.index, "tokens": task.stop - task.start, "load_s": t_loaded - t_start,
            "forward_s": forward_s, "write_s": t_end - t0, "total_s": t_end - t_start}


def extract_model(spec: dict, table: TokenTable, adapter: Adapter, *, store: str, group: str,
                  chunk_tokens: int, task_chunks: int, max_batch_tokens: int, dtype: str,
                  attention_sentences: int,
                  attention_dtype: str | None, torch_threads: int, client=None,
                  progress: bool = True) -> dict[str, float]:
    """Build and compute the task graph for one model; the group's skeleton must exist.

    ``client`` is a :class:`distributed.Client`, or ``None`` for the
    synchronous scheduler (everything in this process). Returns timings:
    ``tokens`` written, wall ``seconds`` of the graph, and ``load_s``,
    ``forward_s``, ``write_s`` summed over tasks (model loading happens in
    the first task a worker runs, unless :func:`warm_workers` did it).
    """
    import dask

    tasks = plan_tasks(table, chunk_tokens=chunk_tokens, task_chunks=task_chunks,
                       attention_sentences=attention_sentences)
    lengths = [len(x) for x in table.ids]
    delayed = []
    for task in tasks:
        rows = task.sentences
        delayed.append(dask.delayed(run_chunk, pure=True)(
            spec, store=store, group=group, task=task,
            inputs=[adapter.build_input(table.ids[s]) for s in rows],
            content_lengths=[lengths[s] for s in rows],
            token_offsets=[int(table.offsets[s]) for s in rows],
            max_batch_tokens=max_batch_tokens, dtype=dtype, attention_dtype=attention_dtype,
            torch_threads=torch_threads, dask_key_name=f"extract-{group}-{task.index}"))
    logger.info("%s: %d tokens of %d sentences in %d task(s) of <= %d tokens", group, table.n_tokens,
                table.n_sentences, len(tasks), chunk_tokens * task_chunks)
    t0 = time.perf_counter()
    results = compute(delayed, client=client, progress=progress, label=f"extract {group}")
    seconds = time.perf_counter() - t0
    n = sum(r["tokens"] for r in results)
    times = {k: sum(r[k] for r in results) for k in ("load_s", "forward_s", "write_s", "total_s")}
    logger.info("%s: task graph computed in %.1f s (%.0f tokens/s); summed over tasks: model load %.1f s, "
                "forward %.1f s, Zarr write %.1f s, other %.1f s", group, seconds, n / seconds, times["load_s"],
                times["forward_s"], times["write_s"],
                times["total_s"] - times["load_s"] - times["forward_s"] - times["write_s"])
    return {"tokens": n, "seconds": seconds, **times}


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


def compute(delayed: list, *, client, progress: bool, label: str, unit: str = "chunk") -> list:
    """Compute Dask delayed objects on ``client`` (or synchronously), with a progress bar
    counting ``unit``s (one per delayed object)."""
    import dask

    if client is None:
        if progress:
            from dask.diagnostics import ProgressBar

            with ProgressBar(minimum=1):
                return list(dask.compute(*delayed, scheduler="synchronous"))
        return list(dask.compute(*delayed, scheduler="synchronous"))
    from distributed import as_completed
    from tqdm.auto import tqdm

    futures = client.compute(delayed)
    results = [None] * len(futures)
    index = {f.key: i for i, f in enumerate(futures)}
    with tqdm(total=len(futures), desc=label, unit=unit, disable=not progress) as bar:
        for fut in as_completed(futures):
            results[index[fut.key]] = fut.result()
            bar.update(1)
    return results
