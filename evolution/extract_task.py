"""What one extraction task (:class:`~evolution.extract_plan.ChunkTask`) runs on a worker:
:func:`run_chunk` computes its tokens' states in batches into a reused buffer
(:func:`task_buffer`) and writes its region of ``hidden`` (and its sentences' attention maps)
to the store.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from evolution.extract_plan import ChunkTask, batches
from evolution.models import Adapter, cached_adapter
from evolution.store import open_attention_array, open_hidden

__all__ = ["run_chunk", "task_buffer", "release_buffers"]


_buffers: dict[int, np.ndarray] = {}  # thread id -> flat buffer of the stored dtype


def task_buffer(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype`` (the stored one, ``extract.dtype``: the
    states are rounded to it as they are copied in, as ``astype`` would round them, and written
    without a copy), reused by the tasks one worker thread runs (a task's states,
    ``(L + 1, tokens, d)``, about 117 MB in float32 for 16,384 tokens of a 6-layer d = 256 model).
    Allocated afresh, it is page-faulted in again by every task whenever the allocator hands back
    new pages (system time, the larger the slower a machine's page faults).
    :func:`release_buffers` frees it."""
    size, thread = int(np.prod(shape)), threading.get_ident()
    flat = _buffers.get(thread)
    if flat is None or flat.size < size or flat.dtype != np.dtype(dtype):
        _buffers.pop(thread, None)  # drop the old one before allocating the new
        _buffers[thread] = flat = np.empty(size, dtype=dtype)
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
    layers: list[int] | None = None,
) -> dict[str, Any]:
    """Compute and write one chunk. Runs on a worker. ``layers``: the indices into 0..L whose
    states are written (None: all; the others' chunks stay unwritten).

    ``inputs[i]`` is the model input of ``task.sentences[i]``; its content
    tokens occupy rows ``token_offsets[i] : token_offsets[i] + content_lengths[i]``
    of the token axis (with ``task.rows``, those of them it lists are written). With ``norms``,
    the attention sentences also get the norms of Kobayashi et al. (2020)
    (:meth:`evolution.models.Adapter.forward_norms`).
    """
    import torch

    t_start = time.perf_counter()
    torch.set_num_threads(torch_threads)
    adapter: Adapter = cached_adapter(spec)
    t_loaded = time.perf_counter()
    forward_s = 0.0
    off = adapter.content_offset
    hidden_arr = open_hidden(store, group, mode="r+")
    keep = list(range(hidden_arr.shape[0])) if layers is None else list(layers)
    every = keep == list(range(hidden_arr.shape[0]))
    buf = task_buffer((len(keep), task.stop - task.start, hidden_arr.shape[2]), dtype)
    filled = 0  # rows of buf written: all of them, or the plan is wrong (the buffer holds an older task's rows)
    # local index (into inputs) -> row of the attention group (= row of the token table)
    if task.attention_slots is None:
        att_row_of = {task.sentences.index(s): s for s in task.attention_rows}
    else:  # extract.rows: needed: a sentence may run twice, once per full task it spans
        att_row_of = dict(zip(task.attention_slots, task.attention_rows, strict=True))
    att_arr = open_attention_array(store, group, mode="r+") if att_row_of else None
    norm_arrs = (
        {
            name: open_attention_array(store, group, mode="r+", name=name)
            for name in ("value_norm", "weighted_norm", "summed_norm")
        }
        if att_row_of and norms
        else {}
    )
    att: np.ndarray | None  # None from a batch that needs no attention
    plan = task.batch_plan
    if plan is None:
        plan = tuple(
            (tuple(b), any(i in att_row_of for i in b))
            for b in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens)
        )
    for batch, need_att in plan:
        t0 = time.perf_counter()
        if need_att and norms:
            hidden, att, norm = adapter.forward_norms([inputs[i] for i in batch])
        else:
            hidden, att = adapter.forward([inputs[i] for i in batch], attention=need_att)
        forward_s += time.perf_counter() - t0
        for b, i in enumerate(batch):
            lo, n = token_offsets[i], content_lengths[i]
            if task.rows is None:  # rows of this sentence inside the task's range
                a, z = max(lo, task.start), min(lo + n, task.stop)
                states = hidden[:, b, off + (a - lo) : off + (z - lo)] if a < z else None
                a, z = a - task.start, z - task.start
            else:  # extract.rows: needed: the sentence's rows the task keeps, inside its window
                w0, w1 = task.windows[i] if task.windows is not None else (lo, lo + n)
                a, z = (int(j) for j in np.searchsorted(task.rows, [max(lo, w0), min(lo + n, w1)]))
                states = hidden[:, b, off + task.rows[a:z] - lo] if a < z else None
            if states is not None:
                buf[:, a:z] = states if every else states[keep]
                filled += z - a
            if i in att_row_of:
                # the batch asked for attention, and the attention array is open
                assert att is not None and att_arr is not None
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
    if every:
        hidden_arr[:, task.start : task.stop] = buf.astype(dtype, copy=False)
    else:  # one write per stored layer; the others' chunks are never created
        for i, k in enumerate(keep):
            hidden_arr[k, task.start : task.stop] = buf[i].astype(dtype, copy=False)
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
