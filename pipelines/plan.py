"""The extraction's plan before any of it runs: per model, the bytes it writes, the peak memory
of a worker and the seconds it takes on this machine, and the free space where the store goes
(``python -m pipelines.run CONFIG --plan``; the same lines open every run's log).

Bytes are exact: the token table (the corpus tokenised by each model, as the extraction does)
fixes the ``hidden`` array, stored layers x rows x d x the dtype's size, the rows the tokens
rounded up to whole chunks of ``extract.chunk_tokens`` (uncompressed, the last chunk is stored
whole). The attention group is compressed (zstd, one chunk a sentence): the plan computes the maps
of the first attention sentences (:data:`ATTENTION_SAMPLE_TOKENS`) and compresses them as the
store does, and scales their bytes per stored cell to every sentence's cells, T_s^2 a map, or
T_s (T_s + 1) / 2 for a causal model, whose maps' upper triangle is zeros (0.3-3.4% above the
chunk files on the GPT-2-small, BERT-base, Pythia-410M and Pythia-1B shapes and the default config's
trained MT and LM, where counting every cell gave 1.07-2.15x: :func:`_attention_bytes`). Seconds come from
rates measured here: each model's forward pass on one batch of
``extract.max_batch_tokens`` tokens (tokens per second, on one worker), and the machine's float64
GEMM rate on one core, printed beside them so that a reader can scale them to another machine.
A worker's peak is the model's parameters (float32), its task buffer (stored layers x
``chunk_tokens`` x ``task_chunks`` x d in ``extract.dtype``), one batch's activations (about 12
d-wide float32 arrays per token and layer: the states, the attention's and the FFN's
intermediates at 4 d; none where the forward pass runs on a GPU, whose memory holds them) and
the worker's own memory (its imports, :data:`evolution.analyses.cost.WORKER_BASE`).

A run whose planned bytes exceed the free space of a local store's disk stops before the
store is written, naming the settings that shrink it (:class:`PlanError`); so does a run whose
worker peak is above the point where a worker's nanny stops it (its memory limit x
``distributed.worker.memory.terminate``), naming the settings that lower the peak, unless
``extract.memory_check: warn`` (``--plan`` warns of it either way: :func:`memory_problem`).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "ModelPlan",
    "PlanError",
    "plan_extract",
    "gemm_rate",
    "free_bytes",
    "check_space",
    "log_plan",
    "memory_problem",
    "memory_line",
]

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
    """The planned run does not fit (disk, or a worker's memory); the message names the sizes and
    the settings that shrink them."""


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
    # hidden_bytes = stored_layers x rows x d_model x itemsize: rows the kept ones rounded up to whole chunks
    rows: int = 0
    chunk: int = 0  # rows per chunk along the token (or stored_token) axis
    dtype: str = "float32"  # extract.dtype
    itemsize: int = 4
    # worker_peak_bytes is their sum
    parameters_bytes: int = 0  # the model's parameters, float32
    buffer_bytes: int = 0  # the task buffer: stored_layers x task_tokens x d_model x itemsize
    task_tokens: int = 0
    activation_bytes: int = 0  # one batch: ACTIVATION_WIDTHS x layers x max_batch_tokens x d_model x 4 (0 on a GPU)
    device: str = "cpu"  # where the forward pass runs: on a GPU the activations are not in the host's memory
    max_batch_tokens: int = 0
    base_bytes: int = 0  # the worker's own (its imports)
    causal: bool | None = None  # the maps' upper triangles are empty (seen in the sample); None: no attention
    #: what planning took, seconds: loading the model, tokenising, the forward batch, the attention sample
    measured: dict[str, float] = field(default_factory=dict)

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


#: input tokens of the first attention sentences whose maps the plan computes and compresses as the
#: store does: at most this many, and no more than the measured forward rate makes in
#: :data:`ATTENTION_SAMPLE_SECONDS` (at least one sentence). From 40 to 256 tokens the planned bytes
#: were 1.0-3.4% above the chunk files on the GPT-2-small, BERT-base and Pythia-410M shapes
ATTENTION_SAMPLE_TOKENS = 256
ATTENTION_SAMPLE_SECONDS = 2.0


def _attention_bytes(adapter, table, config, *, rate: float) -> tuple[int, bool, float]:
    """The attention group's bytes as stored: ``(bytes, causal, seconds taken)``.

    Each sentence is one chunk per array (``attention``, and with the Kobayashi norms
    ``weighted_norm``, ``summed_norm``, ``value_norm``) of the longest sentence's size,
    NaN past its length, compressed (zstd). The maps of the first sentences, up to
    :data:`ATTENTION_SAMPLE_TOKENS` input tokens or what the forward ``rate`` (tokens a second)
    makes in :data:`ATTENTION_SAMPLE_SECONDS`, are computed and compressed as the store
    compresses them; each array's bytes are its sample's bytes per stored cell times the cells of
    every sentence: T_s^2 per map, or T_s (T_s + 1) / 2 where the model is causal (seen in the
    sample: every map's upper triangle is 0, and the zeros compress to nearly nothing)."""
    import zarr

    from evolution.extract_plan import batches

    t0 = time.perf_counter()
    att = config.attention
    n = min(att.sentences, table.n_sentences)
    if n == 0:
        return 0, False, 0.0
    inputs = [adapter.build_input(ids) for ids in table.ids[:n]]
    lengths = np.array([len(x) for x in inputs], dtype=np.int64)
    width = int(lengths.max())
    budget = min(ATTENTION_SAMPLE_TOKENS, rate * ATTENTION_SAMPLE_SECONDS)
    k = max(1, int(np.searchsorted(np.cumsum(lengths), budget, side="right")))
    norms = att.norms and adapter.supports_norms
    arrays: dict[str, zarr.Array] = {}  # in memory, chunked and encoded as the store's (zarr's defaults)
    empty: dict[str, int] = {}
    causal = True
    for batch in batches([int(t) for t in lengths[:k]], max_batch_tokens=config.max_batch_tokens):
        if norms:
            _, maps, more = adapter.forward_norms([inputs[i] for i in batch])
        else:
            _, maps = adapter.forward([inputs[i] for i in batch], attention=True)
            more = {}
        for b, i in enumerate(batch):
            t = int(lengths[i])
            for name, arr in {"attention": maps, **more}.items():
                one = arr[:, b]
                key_only = name == "value_norm"  # (layer, head, key); the others end in (query, key)
                if not key_only:
                    causal = causal and not np.triu(one[..., :t, :t], 1).any()
                cut = (Ellipsis,) + (slice(0, t),) * (1 if key_only else 2)
                shape = one.shape[:-1] + (width,) if key_only else one.shape[:-2] + (width, width)
                row = np.full(shape, np.nan, dtype=att.dtype)
                row[cut] = one[cut]
                if name not in arrays:
                    arrays[name] = zarr.create_array(
                        store=zarr.storage.MemoryStore(),
                        shape=(k, *row.shape),
                        chunks=(1, *row.shape),
                        dtype=att.dtype,
                        fill_value=np.nan,
                        zarr_format=3,
                    )
                    empty[name] = arrays[name].nbytes_stored()  # its metadata: the chunks' bytes come on top
                arrays[name][i] = row
    sample = {name: a.nbytes_stored() - empty[name] for name, a in arrays.items()}

    def cells(name: str, ts: np.ndarray) -> int:
        if name == "value_norm":
            return int(ts.sum())
        return int((ts * (ts + 1) // 2).sum() if causal else (ts**2).sum())

    total = sum(round(b / max(cells(name, lengths[:k]), 1) * cells(name, lengths)) for name, b in sample.items())
    return int(total), causal, time.perf_counter() - t0


def _parameters(adapter) -> int:
    model = getattr(adapter, "model", None)
    try:
        return int(sum(p.numel() for p in model.parameters())) if model is not None else 0
    except Exception:  # noqa: BLE001 - an adapter without a torch module: unknown
        return 0


def check_layers_before_loading(spec: dict, config, *, name: str) -> None:
    """Refuse an ``extract.layers`` entry the model does not have from what its files say without
    its weights (a Hugging Face directory's config.json), before it loads (which takes minutes for
    a large model): a :class:`PlanError` naming the setting. Other kinds are checked once loaded."""
    from evolution.models.huggingface import blocks_in_config
    from evolution.store import resolve_layers

    if config.layers is None or spec.get("kind") != "huggingface":
        return
    blocks = blocks_in_config(spec["path"])
    if blocks is not None:
        try:
            resolve_layers(config.layers, blocks + 1, model=name)
        except ValueError as exc:
            raise PlanError(f"{exc}. Nothing was written.") from None


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
    from evolution.store import resolve_layers
    from evolution.tokens import build_token_table

    check_layers_before_loading(spec, config, name=name)
    t_load = time.perf_counter()
    adapter = cached_adapter(spec)
    t0 = time.perf_counter()
    load_s = t0 - t_load
    table = build_token_table(
        corpus.sentences, adapter, too_long=config.too_long, lines=corpus.lines, source=corpus.source
    )
    tokenize_s = time_tokenise = time.perf_counter() - t0
    if training_text is not None and os.path.isfile(training_text):
        chars = max(1, sum(len(s) for s in corpus.sentences))
        tokenize_s *= 1 + os.path.getsize(training_text) / chars
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
    hidden = rows * stored * d * np.dtype(config.dtype).itemsize  # a layer left out has no chunks
    from evolution.analyses.cost import WORKER_BASE

    task_tokens = min(config.chunk_tokens * config.task_chunks, table.n_tokens)
    itemsize = np.dtype(config.dtype).itemsize
    parameters = 4 * _parameters(adapter)
    buffer = stored * task_tokens * d * itemsize  # the task buffer holds the stored dtype (extract_task.task_buffer)
    device = str(getattr(adapter, "device", "cpu"))
    # on a GPU a batch's activations are in its memory, not the host's that the workers' limit is about
    on_gpu = device.startswith("cuda")
    activations = 0 if on_gpu else 4 * ACTIVATION_WIDTHS * layers * config.max_batch_tokens * d
    peak = parameters + buffer + activations + WORKER_BASE
    t_rate = time.perf_counter()
    rate = _forward_rate(adapter, table, config.max_batch_tokens, config.torch_threads)
    rate_s = time.perf_counter() - t_rate
    attention, attention_seconds, causal = 0, 0.0, None
    if config.attention is not None:  # after the forward rate's warm-up pass: the first pass is slow
        attention, causal, attention_seconds = _attention_bytes(adapter, table, config, rate=rate)
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
        rows=rows,
        chunk=chunk,
        dtype=config.dtype,
        itemsize=itemsize,
        parameters_bytes=parameters,
        buffer_bytes=buffer,
        task_tokens=task_tokens,
        activation_bytes=activations,
        max_batch_tokens=config.max_batch_tokens,
        base_bytes=WORKER_BASE,
        device=device,
        causal=causal,
        measured={"load": load_s, "tokenise": time_tokenise, "forward": rate_s, "attention": attention_seconds},
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


def states_sum(p: ModelPlan) -> str:
    """The sum of ``p``'s states as the plan makes it: rows (the tokens, or the rows
    ``extract.rows: needed`` keeps, rounded up to whole chunks) x layers x features x bytes."""
    n = p.tokens if p.stored_tokens is None else p.stored_tokens
    what = f"{n:,} tokens" if p.stored_tokens is None else f"{n:,} kept rows"
    key = "extract.chunk_tokens" if p.stored_tokens is None else "extract.chunk_tokens / 8"
    padded = f" padded to {p.rows:,} rows (whole chunks of {p.chunk:,}: {key})" if p.rows != n else ""
    return (
        f"{what}{padded} x {p.stored_layers} layers x {p.d_model:,} features x {p.itemsize} bytes ({p.dtype}) "
        f"= {p.hidden_bytes:,} bytes ({_gb(p.hidden_bytes)})"
    )


def check_space(plans: list[ModelPlan], store: str, *, free: int | None) -> None:
    """Raise :class:`PlanError` when the planned bytes exceed ``free`` (None: not known, no check)."""
    total = sum(p.bytes for p in plans)
    if free is None or total <= free:
        return
    big = max(plans, key=lambda p: p.bytes)
    n = big.tokens if big.stored_tokens is None else big.stored_tokens
    padding = (
        f"; a smaller extract.chunk_tokens pads less (the last chunk is stored whole: {big.rows - n:,} of "
        f"{big.name}'s {big.rows:,} rows are padding)"
        if big.rows - n > 0.1 * big.rows
        else ""
    )
    raise PlanError(
        f"extract: the representation store {store} needs {_gb(total)} and its disk has {_gb(free)} free "
        f"(largest: {big.name}, states {states_sum(big)}, and {_gb(big.attention_bytes)} of attention). "
        "Nothing was written. "
        "Shrink it: extract.dtype: float16 halves the states; fewer or shorter corpus sentences "
        "(corpus.max_sentences); extract.attention.sentences lower, or extract.attention: null; fewer models; "
        "extract.layers: fewer layers (e.g. [0, 4, 8, -1]); extract.rows: needed (only the rows the analyses "
        f"read){padding}; or point extract.store at a disk with room"
    )


def _limit_key(cluster) -> str:
    """The setting a worker's memory limit comes from, as the config spells it."""
    if cluster.kind == "slurm":
        return f"cluster.memory: {cluster.memory} per job over its cluster.cores / cluster.threads_per_worker workers"
    if cluster.kind == "local":
        return f"cluster.memory_limit: {cluster.memory_limit}"
    return "the workers' --memory-limit"


def _more_memory(cluster, need: int, workers: int) -> str:
    """The cluster settings that give each worker ``need`` bytes (``workers`` of them now), as the
    config spells them."""
    gib = -(-need // 2**30)  # whole GiB, rounded up
    if cluster.kind == "slurm":
        per_job = cluster.cores // cluster.threads_per_worker
        return (
            f"more memory for each worker: cluster.memory: {gib * per_job}GiB per job for its {per_job} "
            f"worker(s), or fewer workers a job (cluster.threads_per_worker: {cluster.cores} gives one worker "
            f"all of cluster.memory: {cluster.memory})"
        )
    if cluster.kind == "local":
        from distributed.system import MEMORY_LIMIT

        fit = min(workers, int(MEMORY_LIMIT // (gib * 2**30)))
        if fit < 1:
            return (
                f"more memory for each worker: a worker needs {gib} GiB and this machine has "
                f"{MEMORY_LIMIT / 2**30:.1f} GiB; run on a larger machine or a Slurm cluster (cluster.kind: slurm "
                f"with cluster.memory of at least {gib}GiB per worker)"
            )
        fewer = "fewer workers with " if fit < workers else ""
        return (
            f"{fewer}more memory for each worker: cluster: {{kind: local, n_workers: {fit}, memory_limit: {gib}GiB}} "
            f"({fit} x {gib} GiB of this machine's {MEMORY_LIMIT / 2**30:.1f} GiB, {workers} worker(s) now; on the "
            f"command line --set 'cluster={{kind: local, n_workers: {fit}, memory_limit: {gib}GiB}}', which "
            "replaces the cluster section whole)"
        )
    return f"more memory for each worker (start them with --memory-limit {gib}GiB, fewer of them a machine)"


def memory_problem(plans: list[ModelPlan], *, limit: int | None, cluster, config, workers: int = 1) -> str | None:
    """What is wrong when a worker's planned peak (:func:`plan_extract`) of some of ``plans`` is
    above the bytes at which a worker is stopped (``limit``, a worker's memory limit, x
    :func:`evolution.analyses.cost.terminate_fraction`), naming the parts of the peak and the
    settings of ``config`` (``extract``) and ``cluster`` (``workers`` workers) that lower it; None
    when every peak fits or the limit is not known."""
    from evolution.analyses.cost import terminate_fraction

    if not limit or not plans:
        return None
    stop = limit * terminate_fraction()
    big = max(plans, key=lambda p: p.worker_peak_bytes)
    if big.worker_peak_bytes <= stop:
        return None
    over = [p.name for p in plans if p.worker_peak_bytes > stop]
    need = int(big.worker_peak_bytes / terminate_fraction()) + 1
    more = _more_memory(cluster, need, workers)
    fixed = big.parameters_bytes + big.base_bytes
    if fixed > stop:
        fixes = f"The parameters and the worker's own memory alone ({_gb(fixed)}) are above it: only {more} helps."
    else:
        # the largest power-of-two batch under which the peak fits, the other terms as they are
        per_token = big.activation_bytes / max(big.max_batch_tokens, 1)
        room = stop - (big.worker_peak_bytes - big.activation_bytes)
        batch = 2 ** int(np.log2(room / per_token)) if per_token and room >= 16 * per_token else 0
        fits = f": {batch} (it fits from there; " if batch else " lower ("
        lower = (
            [
                f"extract.max_batch_tokens{fits}"
                + f"the activations scale with it: {ACTIVATION_WIDTHS} x {big.layers} layers x "
                f"{big.max_batch_tokens:,} tokens x {big.d_model:,} features x 4 bytes = {_gb(big.activation_bytes)})"
            ]
            if big.activation_bytes
            else []
        )
        if config.dtype != "float16":
            lower.append(f"extract.dtype: float16 (halves the task buffer, {_gb(big.buffer_bytes)})")
        lower += [
            f"extract.task_chunks: 1 or a smaller extract.chunk_tokens (the task buffer holds extract.chunk_tokens x "
            f"extract.task_chunks tokens: {big.stored_layers} layers x {big.task_tokens:,} tokens x "
            f"{big.d_model:,} features x {big.itemsize} bytes = {_gb(big.buffer_bytes)})",
            "extract.layers: fewer layers, e.g. [0, 4, 8, -1] (the task buffer holds the stored ones)",
        ]
        fixes = f"Lower the peak: {'; '.join(lower)}; or {more}."
    return (
        f"extract: a worker's planned peak for {big.name} is {_gb(big.worker_peak_bytes)} (the parameters "
        f"{_gb(big.parameters_bytes)} in float32, the task buffer {_gb(big.buffer_bytes)}, one batch's "
        f"activations {_gb(big.activation_bytes)}, the worker's own {_gb(big.base_bytes)}), above the "
        f"{_gb(stop)} at which a worker is stopped ({terminate_fraction():.0%} of its memory limit "
        f"{_gb(limit)}: {_limit_key(cluster)})"
        + (f"; so are {', '.join(n for n in over if n != big.name)}'s" if len(over) > 1 else "")
        + f": its tasks would be stopped and retried until the run fails. {fixes}"
    )


def memory_line(plans: list[ModelPlan], *, limit: int | None, cluster, mode: str) -> str:
    """The plan's line on memory when no peak is over the limit (or it is not known): the largest
    peak against the limit, and what ``extract.memory_check`` (``mode``) does."""
    from evolution.analyses.cost import terminate_fraction

    check = (
        f"extract.memory_check: {mode} ({'the default: ' if mode == 'stop' else ''}a peak over it "
        + ("stops a run before it extracts" if mode == "stop" else "is a WARNING and the run goes on")
        + ")"
    )
    big = max(plans, key=lambda p: p.worker_peak_bytes)
    if not limit:
        why = (
            "cluster.kind: synchronous runs in this process, without one"
            if cluster.kind == "synchronous"
            else "not known until the workers start; checked when they do"
        )
        return f"plan: memory: a worker's peak at most {_gb(big.worker_peak_bytes)}; the workers' memory limit: {why}"
    stop = limit * terminate_fraction()
    return (
        f"plan: memory: a worker's peak at most {_gb(big.worker_peak_bytes)} ({big.name}), within the {_gb(stop)} "
        f"at which a worker is stopped ({terminate_fraction():.0%} of {_limit_key(cluster)}); {check}"
    )


def _shape(p: ModelPlan) -> str:
    """``layers x d``; ``stored/layers x d`` when ``extract.layers`` keeps some of them."""
    kept = f"{p.stored_layers}/{p.layers}" if p.stored_layers != p.layers else f"{p.layers}"
    return f"{kept} x {p.d_model}"


def _gb(n: float) -> str:
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def log_plan(
    plans: list[ModelPlan], *, store: str, free: int | None, gemm: float, workers: int, gemm_seconds: float = 0.0
) -> list[str]:
    """The plan's lines (logged at INFO, returned for ``--plan``); ``gemm_seconds``: how long the
    GEMM rate took to measure (0 when an earlier plan of the run measured it)."""
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
        lines.append(
            f"plan: {p.name} states: {states_sum(p)}; worker peak {_gb(p.worker_peak_bytes)}: parameters "
            f"{_gb(p.parameters_bytes)} + task buffer {_gb(p.buffer_bytes)} + one batch's activations "
            + (f"{_gb(p.activation_bytes)}" if p.activation_bytes else f"(on {p.device}, not in the host's memory)")
            + f" + the worker's own {_gb(p.base_bytes)}"
        )
    for p in plans:
        if p.stored_tokens is not None:
            lines.append(
                f"plan: {p.name} stores {p.stored_tokens:,} of its {p.tokens:,} token rows, those the analyses "
                f"read and the few that fill whole chunks (extract.rows: needed; "
                f"{p.stored_tokens / max(p.tokens, 1):.1%}); the analyses read: "
                + ", ".join(f"{name} {n:,}" for name, n in p.row_sources.items())
            )
    took = {k: sum(p.measured.get(k, 0.0) for p in plans) for k in ("load", "tokenise", "forward", "attention")}
    lines.append(
        f"plan: measured in {sum(took.values()) + gemm_seconds:.1f} s: loading the model(s) {took['load']:.1f} s, "
        f"tokenising {took['tokenise']:.1f} s, two forward passes of one batch each {took['forward']:.1f} s"
        + (f", the attention sample {took['attention']:.1f} s" if took["attention"] else "")
        + (f", the GEMM rate {gemm_seconds:.1f} s" if gemm_seconds >= 0.05 else "")
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
