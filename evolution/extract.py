"""Extraction of layerwise representations (and attention) as a Dask task graph.

One task per ``K`` consecutive Zarr chunks along ``token``: task ``k`` owns
tokens ``[k*K*C, (k+1)*K*C)`` (``C = extract.chunk_tokens``,
``K = extract.task_chunks``), runs every sentence that overlaps that range (a
sentence straddling a boundary is run by both neighbours, each writing only
its own tokens) and writes its region of ``hidden``. Writes are therefore
disjoint, whole-chunk and lock-free, and a task's memory is bounded by
``(L + 1) * K * C * d`` floats plus one batch, whatever the corpus size. Attention
maps (chunked one sentence per chunk) are written by the task that owns a sentence's
first token.

The model never travels in the graph: a task carries the model's config (a
small dict) and :func:`evolution.models.cached_adapter` loads it once per
worker process.

The tasks and their batches are planned in :mod:`evolution.extract_plan`, a task runs
on a worker as :mod:`evolution.extract_task` says, and the graph is computed by
:func:`evolution.dask_compute.compute`; this module builds the graph of a model
(:func:`extract_model`) and the store group around it (:func:`extract_to_store`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from evolution.config import ExtractConfig

# every name the module had before the split stays importable from here
from evolution.dask_compute import compute
from evolution.extract_plan import BATCH_OVERHEAD_TOKENS, ChunkTask, batches, plan_tasks, row_chunk  # noqa: F401  # re-exported: importable from here as before
from evolution.extract_task import release_buffers, run_chunk, task_buffer  # noqa: F401  # re-exported: importable from here as before
from evolution.models import Adapter, cached_adapter
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
    layers: list[int] | None = None,
    rows: np.ndarray | None = None,
) -> dict[str, float]:
    """Build and compute the task graph for one model; the group's skeleton must exist.
    ``layers``: the indices into 0..L whose states are written (None: all); ``rows``: the
    token-axis rows (sorted; None: all), ``extract.rows: needed``.

    ``client`` is a :class:`distributed.Client`, or ``None`` for the
    synchronous scheduler (everything in this process). Returns timings:
    ``tokens`` written, wall ``seconds`` of the graph, and ``load_s``,
    ``forward_s``, ``write_s`` summed over tasks (model loading happens in
    the first task a worker runs, unless :func:`warm_workers` did it).
    """
    import dask

    tasks = plan_tasks(
        table,
        chunk_tokens=chunk_tokens,
        task_chunks=task_chunks,
        attention_sentences=attention_sentences,
        rows=rows,
        input_lengths=None if rows is None else [len(adapter.build_input(ids)) for ids in table.ids],
        max_batch_tokens=max_batch_tokens,
    )
    lengths = [len(x) for x in table.ids]
    delayed = []
    for task in tasks:
        sentences = task.sentences
        delayed.append(
            dask.delayed(run_chunk, pure=True)(
                spec,
                store=store,
                group=group,
                task=task,
                inputs=[adapter.build_input(table.ids[s]) for s in sentences],
                content_lengths=[lengths[s] for s in sentences],
                token_offsets=[int(table.offsets[s]) for s in sentences],
                max_batch_tokens=max_batch_tokens,
                dtype=dtype,
                attention_dtype=attention_dtype,
                torch_threads=torch_threads,
                norms=norms,
                layers=layers,
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
    first: dict[int, float] = {}  # worker process id -> when its first task began
    for r in results:
        first[r["worker"]] = min(first.get(r["worker"], np.inf), r["began"])
    if first:  # (extract.rows: needed with no row to store has no task)
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


def _unknown(adapter: Adapter, columns: dict[str, np.ndarray], group: str) -> dict:
    """The share of pieces the model saw as its unknown piece (:func:`evolution.tokens.unknown_pieces`),
    logged, and a WARNING naming the texts that became unknown above
    :data:`evolution.tokens.UNKNOWN_WARN`; ``columns`` gains ``is_unknown`` (``token_str`` shows
    ``<unk>``, ``token_text`` the text). An apostrophe the tokenizer normalised
    (:func:`evolution.models.base.apostrophe_for`) is logged at INFO."""
    from evolution.tokens import UNKNOWN_WARN, unknown_pieces

    unk = adapter.unk_id
    found = unknown_pieces(columns["token_id"], columns["token_text"], unk)
    if unk is not None:
        columns["is_unknown"] = np.asarray(columns["token_id"]) == unk
    logger.info("%s: %d of %d pieces unknown to the model", group, found["count"], len(columns["token_id"]))
    if adapter.apostrophe is not None:
        logger.info(
            "%s: the ASCII apostrophe is read as %s (U+%04X), the piece the model's vocabulary holds "
            "(its training text is typeset)",
            group,
            adapter.apostrophe,
            ord(adapter.apostrophe),
        )
    if found["share"] > UNKNOWN_WARN:
        texts = ", ".join(f"{t!r} x{n}" for t, n in found["texts"].items())
        logger.warning(
            "%s: %.2f%% of the pieces (%d) are unknown to the model, which sees each as the same <unk>: %s. "
            "The statistics then merge them into one type (token_str shows <unk>, token_text the text, "
            "is_unknown marks them); replace these characters in the text with ones the vocabulary holds, "
            "or leave the sentences out.",
            group,
            100 * found["share"],
            found["count"],
            texts,
        )
    return found


def token_columns(
    columns: dict[str, np.ndarray], adapter: Adapter, *, annotation: dict | None, training_text=None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The token coordinates a group gets besides the token table's ``columns``, and their group
    attributes: ``train_count`` / ``train_rank`` from ``training_text`` (attributes
    ``train_count_source``, ``train_types``), the annotation's labels (attribute
    ``annotated_from``); see :func:`extract_to_store`."""
    from evolution.corpus.conllu import annotation_columns

    out: dict[str, np.ndarray] = {}
    attrs: dict[str, Any] = {}
    if training_text is not None:
        counts = training_counts(adapter, training_text)
        out["train_count"] = np.array([counts.get(int(i), 0) for i in columns["token_id"]], dtype=np.int64)
        rank = training_ranks(counts)
        out["train_rank"] = np.array([rank.get(int(i), 0) for i in columns["token_id"]], dtype=np.int32)
        attrs.update(train_count_source=str(training_text), train_types=len(rank))
    if annotation is not None:
        out.update(
            annotation_columns(
                sentence=columns["sentence"],
                word_id=columns["word_id"],
                first=annotation["first"],
                sentences=annotation["sentences"],
            )
        )
        attrs["annotated_from"] = int(annotation["first"])
    return out, attrs


def kept_rows(
    table: TokenTable,
    columns: dict[str, np.ndarray],
    attrs: dict[str, Any],
    *,
    config: ExtractConfig,
    select_rows: Callable[[dict[str, np.ndarray], dict[str, Any]], dict[str, np.ndarray]] | None,
    group: str,
) -> tuple[np.ndarray, dict[str, int]] | None:
    """The token-axis rows ``extract.rows: needed`` stores (sorted, int64): the union of those
    ``select_rows(columns, attrs)`` gives by analysis and the attention sentences' (the first
    ``extract.attention.sentences``, whose forward passes write the maps), with how many rows each
    source reads; None without it."""
    if config.rows != "needed":
        return None
    if select_rows is None:
        raise ValueError(
            f"{group}: extract.rows: needed keeps the rows the metrics read, and no metrics settings were "
            "given to choose them; run it through the pipeline (python -m pipelines.run), or leave it null"
        )
    n_att = min(config.attention.sentences, table.n_sentences) if config.attention is not None else 0
    sources = dict(select_rows(columns, attrs))
    if n_att:
        sources["attention sentences"] = np.arange(int(table.offsets[n_att]), dtype=np.int64)
    parts = [np.asarray(r, dtype=np.int64) for r in sources.values()]
    rows = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
    return rows, {name: len(r) for name, r in sources.items()}


def stored_rows_of(table: TokenTable, rows: np.ndarray, *, config: ExtractConfig, adapter: Adapter) -> np.ndarray:
    """The token-axis rows ``extract.rows: needed`` stores for the ``rows`` the analyses read: those
    and the few that fill each task's last chunk (:func:`evolution.extract_plan.plan_tasks`)."""
    tasks = plan_tasks(
        table,
        chunk_tokens=config.chunk_tokens,
        task_chunks=config.task_chunks,
        attention_sentences=min(config.attention.sentences, table.n_sentences) if config.attention else 0,
        rows=rows,
        input_lengths=[len(adapter.build_input(ids)) for ids in table.ids],
        max_batch_tokens=config.max_batch_tokens,
    )
    parts = [t.rows for t in tasks if t.rows is not None]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


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
    select_rows: Callable[[dict[str, np.ndarray], dict[str, Any]], dict[str, np.ndarray]] | None = None,
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
    the adapter's own description. With ``config.rows == "needed"``, ``select_rows(columns,
    attrs)`` (the token coordinates and group attributes about to be stored) gives the token-axis
    rows the analyses read, by analysis; they and the attention sentences' rows are the ones stored
    (:func:`evolution.store.create_hidden_group`). Returns the timings of :func:`extract_model`
    plus ``stage_seconds``.
    """
    from evolution.provenance import file_hash
    from evolution.store import create_attention_group, create_hidden_group, mark_complete, resolve_layers
    from evolution.tokens import build_token_table

    t0 = time.perf_counter()
    warming = warm_workers(client, spec)
    adapter = cached_adapter(spec)  # shared with in-process tasks; workers load their own
    table = build_token_table(
        corpus.sentences, adapter, too_long=config.too_long, lines=corpus.lines, source=corpus.source
    )
    columns = dict(table.columns)
    unknown = _unknown(adapter, columns, group)
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
        "unknown_pieces": unknown["count"],
        "unknown_share": unknown["share"],
        "unknown_texts": unknown["texts"],
        "annotated_from": -1,
        **adapter.describe(),
    }
    more, more_attrs = token_columns(columns, adapter, annotation=annotation, training_text=training_text)
    columns.update(more)
    attrs.update(more_attrs)
    if "://" not in str(store):  # a local store records its inputs relative to its directory (the workdir)
        from evolution.provenance import portable

        attrs = portable(attrs, os.path.dirname(os.path.abspath(str(store))))
    layers = None
    if config.layers is not None:
        layers = resolve_layers(config.layers, adapter.num_layers + 1, model=group)
        logger.info("%s: storing layers %s of 0..%d (extract.layers)", group, layers, adapter.num_layers)
    n_att = min(config.attention.sentences, table.n_sentences) if config.attention is not None else 0
    kept = kept_rows(table, columns, attrs, config=config, select_rows=select_rows, group=group)
    rows, chunk_tokens = None, config.chunk_tokens
    if kept is not None:
        rows, sources = kept
        stored = stored_rows_of(table, rows, config=config, adapter=adapter)
        logger.info(
            "%s: storing %d of %d token rows, %d of them read by the analyses (extract.rows: needed; %s) and "
            "the others filling whole chunks",
            group,
            len(stored),
            table.n_tokens,
            len(rows),
            ", ".join(f"{name} {n:,}" for name, n in sources.items()),
        )
        rows, chunk_tokens = stored, row_chunk(config.chunk_tokens)
    create_hidden_group(
        store,
        group,
        columns=columns,
        rows=rows,
        layers=layers,
        n_layers=adapter.num_layers + 1,
        d_model=adapter.d_model,
        chunk_tokens=chunk_tokens,
        dtype=config.dtype,
        attrs=attrs,
        fingerprint=fingerprint,
        compressor=config.compressor,
    )
    norms = False
    if config.attention is not None:
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
        layers=layers,
        rows=rows,
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
