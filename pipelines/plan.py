"""The extraction's plan before any of it runs: per model, the bytes it writes, the peak memory
of a worker and the seconds it takes on this machine, and the free space where the store goes
(``python -m pipelines.run CONFIG --plan``; the same lines open every run's log).

Bytes are exact: the token table (the corpus tokenised by each model, as the extraction does)
fixes the ``hidden`` array, (L + 1) x tokens (rounded up to whole chunks: the last one is stored
whole) x d x the dtype's size, and the attention group,
the sum over sentences of L x H x T_s^2 x 4 (x (2 + 1/H) with the Kobayashi norms; the padding
past each sentence compresses to nearly nothing). Seconds come from rates
measured here in a few seconds: each model's forward pass on one batch of
``extract.max_batch_tokens`` tokens (tokens per second, on one worker), and the machine's float64
GEMM rate on one core, printed beside them so that a reader can scale them to another machine.
A worker's peak is the model's parameters, its task buffer ((L + 1) x ``chunk_tokens`` x
``task_chunks`` x d float32) and one batch's activations (about 12 d-wide float32 arrays per
token and layer: the states, the attention's and the FFN's intermediates at 4 d).

A run whose planned bytes exceed the free space of a local store's disk stops before the
store is written, naming the settings that shrink it (:class:`PlanError`).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ModelPlan", "PlanError", "plan_extract", "gemm_rate", "free_bytes", "check_space", "log_plan"]

logger = logging.getLogger(__name__)

#: float32 arrays of width d per token and layer alive during a forward pass (states, attention
#: projections, the FFN's 4 d intermediate and its activation): the batch term of a worker's peak
ACTIVATION_WIDTHS = 12
#: per token, what a task does besides the forward pass (inputs built and padded, states copied
#: into the task's buffer): 3.2-3.7 s over 120,535 tokens on the default config (2026-11-28)
OTHER_SECONDS_PER_TOKEN = 30e-6
#: the Zarr write rate of a task's states, bytes a second: 0.43 GB/s on the default config's
#: float32 states, 0.17-0.19 GB/s on BERT-base's and Pythia-410M's float16 (2026-11-28)
WRITE_BYTES_PER_SECOND = 0.25e9
#: how much slower each worker's forward pass runs while every worker computes, one core each
#: (they share the memory bus): 1.1 at d = 128, 1.4 for BERT-base (98.8 s summed over its tasks
#: for 35,622 tokens, against 520 tokens/s alone), 1.35 for the Pythia-410M shape (2026-11-28)
CONCURRENT_SLOWDOWN = 1.3


class PlanError(RuntimeError):
    """The planned run does not fit (disk); the message names the sizes and the settings that shrink it."""


@dataclass
class ModelPlan:
    """The extraction of one model: sizes, a worker's peak and the time, from measured rates."""

    name: str
    sentences: int
    tokens: int
    layers: int  # L + 1
    d_model: int
    stored_layers: int  # of the L + 1, those extract.layers keeps (all by default)
    hidden_bytes: int
    attention_bytes: int
    worker_peak_bytes: int
    tokens_per_second: float
    seconds: float
    stored_tokens: int | None = None  # the rows extract.rows: needed keeps (None: every token's)
    row_sources: dict[str, int] = field(default_factory=dict)  # of them, the rows each analysis reads

    @property
    def bytes(self) -> int:
        return self.hidden_bytes + self.attention_bytes


def gemm_rate(seconds: float = 1.0, n: int = 512) -> float:
    """float64 multiply-adds per second of NumPy's BLAS on one core (n x n products for about
    ``seconds``): the machine's arithmetic rate that the plan's times stand beside."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).normal(size=(n, n))
    with threadpool_limits(1):
        a @ a  # warm
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ a
            done += 1
        return done * n**3 / (time.perf_counter() - t0)


def _forward_rate(adapter, table, max_batch_tokens: int, threads: int) -> float:
    """Tokens per second of ``adapter``'s forward pass on the first batch of ``table``'s longest
    sentences (the extraction's own batching), after one warm-up pass."""
    import torch

    from evolution.extract_plan import batches

    torch.set_num_threads(threads)
    first = batches([len(x) for x in table.ids], max_batch_tokens=max_batch_tokens)[0]
    inputs = [adapter.build_input(table.ids[i]) for i in first]
    adapter.forward(inputs)  # warm: the first pass of a shape allocates what the next ones reuse
    t0 = time.perf_counter()
    adapter.forward(inputs)
    return sum(len(table.ids[i]) for i in first) / max(time.perf_counter() - t0, 1e-6)


def _parameters(adapter) -> int:
    model = getattr(adapter, "model", None)
    try:
        return int(sum(p.numel() for p in model.parameters())) if model is not None else 0
    except Exception:  # noqa: BLE001 - an adapter without a torch module: unknown
        return 0


def plan_extract(
    spec: dict,
    corpus,
    config,
    *,
    name: str,
    workers: int,
    training_text=None,
    annotation: dict | None = None,
    select_rows=None,
) -> ModelPlan:
    """The :class:`ModelPlan` of extracting ``spec`` on ``corpus`` under the ``extract`` section
    ``config`` with ``workers`` worker processes (tokenises the corpus and runs one batch).
    ``training_text``: the training split the extraction also tokenises (its token counts).
    With ``extract.rows: needed``, ``annotation`` and ``select_rows`` as
    :func:`evolution.extract.extract_to_store` takes them choose the rows stored (the occurrence
    plan is made here as the extraction makes it: the bytes are those rows').

    Seconds: the tokenisation (timed here; the training split's scaled by its size) plus the
    task graph's wall time: each task (:func:`evolution.extract_plan.plan_tasks`) takes its
    tokens / the forward rate (x :data:`CONCURRENT_SLOWDOWN` with more than one worker) +
    :data:`OTHER_SECONDS_PER_TOKEN` a token + its bytes / :data:`WRITE_BYTES_PER_SECOND`, and the
    tasks go to the least loaded of ``workers`` workers, longest first."""
    import os

    from evolution.models import cached_adapter
    from evolution.tokens import build_token_table

    adapter = cached_adapter(spec)
    t0 = time.perf_counter()
    table = build_token_table(
        corpus.sentences, adapter, too_long=config.too_long, lines=corpus.lines, source=corpus.source
    )
    tokenize_s = time.perf_counter() - t0
    if training_text is not None and os.path.isfile(training_text):
        chars = max(1, sum(len(s) for s in corpus.sentences))
        tokenize_s *= 1 + os.path.getsize(training_text) / chars
    from evolution.store import resolve_layers

    layers, d = adapter.num_layers + 1, adapter.d_model
    try:
        stored = len(resolve_layers(config.layers, layers, model=name))
    except ValueError as exc:
        raise PlanError(f"{exc}. Nothing was written.") from None
    kept, sources = None, dict[str, int]()
    if config.rows == "needed":
        from evolution.extract import kept_rows, stored_rows_of, token_columns

        columns = dict(table.columns)
        more, more_attrs = token_columns(columns, adapter, annotation=annotation, training_text=training_text)
        columns.update(more)
        attrs = {"annotated_from": -1, **more_attrs, **adapter.describe()}
        found = kept_rows(table, columns, attrs, config=config, select_rows=select_rows, group=name)
        if found is not None:
            kept, sources = found
            kept = stored_rows_of(table, kept, config=config, adapter=adapter)
    n_rows = table.n_tokens if kept is None else len(kept)
    # uncompressed, the last chunk of the token axis is stored whole: rows round up to chunks
    from evolution.extract_plan import row_chunk

    chunk = max(1, min(config.chunk_tokens if kept is None else row_chunk(config.chunk_tokens), n_rows))
    rows = -(-n_rows // chunk) * chunk
    hidden = stored * rows * d * np.dtype(config.dtype).itemsize  # a layer left out has no chunks
    attention = 0
    if config.attention is not None:  # the maps' cells; the padding past each sentence compresses to ~0
        n = min(config.attention.sentences, table.n_sentences)
        cells = sum(len(adapter.build_input(ids)) ** 2 for ids in table.ids[:n])
        per = adapter.num_layers * adapter.num_heads * np.dtype(config.attention.dtype).itemsize
        # with the norms: weighted_norm as the maps, summed_norm one map per layer (not per head)
        attention = int(
            cells * per * (2 + 1 / adapter.num_heads if config.attention.norms and adapter.supports_norms else 1)
        )
    task_tokens = min(config.chunk_tokens * config.task_chunks, table.n_tokens)
    peak = (
        4 * _parameters(adapter)
        + 4 * stored * task_tokens * d
        + 4 * ACTIVATION_WIDTHS * layers * config.max_batch_tokens * d
    )
    rate = _forward_rate(adapter, table, config.max_batch_tokens, config.torch_threads)
    seconds = tokenize_s + _graph_seconds(
        table,
        config,
        rate=rate,
        workers=workers,
        bytes_per_row=hidden / max(n_rows, 1),
        rows=kept,
        input_lengths=None if kept is None else [len(adapter.build_input(ids)) for ids in table.ids],
    )
    return ModelPlan(
        name=name,
        sentences=table.n_sentences,
        tokens=table.n_tokens,
        stored_tokens=None if kept is None else n_rows,
        row_sources=sources,
        layers=layers,
        d_model=d,
        stored_layers=stored,
        hidden_bytes=int(hidden),
        attention_bytes=attention,
        worker_peak_bytes=int(peak),
        tokens_per_second=rate,
        seconds=seconds,
    )


def _graph_seconds(
    table, config, *, rate: float, workers: int, bytes_per_row: float, rows=None, input_lengths=None
) -> float:
    """The task graph's wall time: the tasks' times (see :func:`plan_extract`) scheduled longest
    first on the least loaded of ``workers`` workers. With ``rows`` (``extract.rows: needed``) a
    task runs the whole sentences its rows fall in and writes its rows."""
    from evolution.extract_plan import plan_tasks

    tasks = plan_tasks(
        table,
        chunk_tokens=config.chunk_tokens,
        task_chunks=config.task_chunks,
        rows=rows,
        input_lengths=input_lengths,
        max_batch_tokens=config.max_batch_tokens,
    )
    slow = CONCURRENT_SLOWDOWN if workers > 1 and len(tasks) > 1 else 1.0
    lengths = np.diff(np.asarray(table.offsets))
    per_token, per_row = slow / rate + OTHER_SECONDS_PER_TOKEN, bytes_per_row / WRITE_BYTES_PER_SECOND
    work = [
        (t.stop - t.start) * (per_token + per_row)
        if rows is None
        else int(lengths[list(t.sentences)].sum()) * per_token + (t.stop - t.start) * per_row
        for t in tasks
    ]
    loads = [0.0] * max(1, workers)
    for w in sorted(work, reverse=True):
        loads[loads.index(min(loads))] += w
    return max(loads)


def free_bytes(store: str) -> int | None:
    """Free bytes on the disk of a local ``store`` (its nearest existing parent); None for a URL."""
    if "://" in store:
        return None
    path = Path(store).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def check_space(plans: list[ModelPlan], store: str, *, free: int | None) -> None:
    """Raise :class:`PlanError` when the planned bytes exceed ``free`` (None: not known, no check)."""
    total = sum(p.bytes for p in plans)
    if free is None or total <= free:
        return
    big = max(plans, key=lambda p: p.bytes)
    raise PlanError(
        f"extract: the representation store {store} needs {_gb(total)} and its disk has {_gb(free)} free "
        f"(largest: {big.name}, {big.tokens:,} tokens x {big.stored_layers} layers x {big.d_model} features = "
        f"{_gb(big.hidden_bytes)} of states, {_gb(big.attention_bytes)} of attention). Nothing was written. "
        "Shrink it: extract.dtype: float16 halves the states; fewer or shorter corpus sentences "
        "(corpus.max_sentences); extract.attention.sentences lower, or extract.attention: null; fewer models; "
        "extract.layers: fewer layers (e.g. [0, 4, 8, -1]); extract.rows: needed (only the rows the analyses "
        "read); or point extract.store at a disk with room"
    )


def _shape(p: ModelPlan) -> str:
    """``layers x d``; ``stored/layers x d`` when ``extract.layers`` keeps some of them."""
    kept = f"{p.stored_layers}/{p.layers}" if p.stored_layers != p.layers else f"{p.layers}"
    return f"{kept} x {p.d_model}"


def _gb(n: float) -> str:
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def log_plan(plans: list[ModelPlan], *, store: str, free: int | None, gemm: float, workers: int) -> list[str]:
    """The plan's lines (logged at INFO, returned for ``--plan``)."""
    lines = [
        f"plan: extract into {store} with {workers} worker(s); this machine: {gemm / 1e9:.1f} G float64 "
        "multiply-adds/s on one core (NumPy GEMM)",
        f"plan: {'model':<14} {'tokens':>10} {'layers x d':>11} {'writes':>10} {'worker peak':>12} "
        f"{'forward tok/s':>14} {'seconds':>8}",
    ]
    for p in plans:
        lines.append(
            f"plan: {p.name:<14} {p.tokens:>10,} {_shape(p):>11} {_gb(p.bytes):>10} "
            f"{_gb(p.worker_peak_bytes):>12} {p.tokens_per_second:>14,.0f} {p.seconds:>8.0f}"
        )
    for p in plans:
        if p.stored_tokens is not None:
            lines.append(
                f"plan: {p.name} stores {p.stored_tokens:,} of its {p.tokens:,} token rows, those the analyses "
                f"read and the few that fill whole chunks (extract.rows: needed; "
                f"{p.stored_tokens / max(p.tokens, 1):.1%}); the analyses read: "
                + ", ".join(f"{name} {n:,}" for name, n in p.row_sources.items())
            )
    total = sum(p.bytes for p in plans)
    where = f"{_gb(free)} free there" if free is not None else "free space unknown (object storage)"
    lines.append(
        f"plan: extract writes {_gb(total)} in about {sum(p.seconds for p in plans):.0f} s; {where}; "
        "the metrics stage plans its units when it starts (metrics/plan.json)"
    )
    for line in lines:
        logger.info("%s", line)
    return lines
