"""The pipeline's stages and their caching.

Stages form a DAG, ``corpus -> extract`` today (``train``, ``metrics`` and
``report`` join as they are built). Each stage knows its *key*: a hash of the
config section it depends on plus its inputs' keys and content hashes. A
stage is done when its output carries that key in a marker written last:

* ``corpus``: ``<workdir>/corpus/<key>/`` with ``done.json``; the directory
  is written under a temporary name and renamed into place, so it is
  all-or-nothing.
* ``extract``: one group per model in ``<workdir>/reps.zarr``, trusted only
  when its completion attribute equals its key (see :mod:`evolution.store`).
  Models are cached independently: adding a model runs only that model.

A half-written output is never trusted: it is deleted and redone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolution.config import EvolutionConfig, ModelConfig, resolved_dict
from evolution.corpus import Corpus, read_text_corpus
from evolution.provenance import config_hash, file_hash, tree_hash, versions

logger = logging.getLogger(__name__)

__all__ = ["Context", "Stage", "CorpusStage", "ExtractStage", "STAGES", "stage_order"]


@dataclass
class Context:
    """What stages share during one run."""

    config: EvolutionConfig
    force: set[str] = field(default_factory=set)
    client: Any = None
    progress: bool = True
    #: per-stage measurements of this run (e.g. extraction timings per model), for logs and benchmarks
    timings: dict[str, Any] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return self.config.workdir

    def memo(self, key: str, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]


class Stage:
    """A node of the pipeline DAG."""

    name: str = ""
    after: tuple[str, ...] = ()
    uses_cluster: bool = False

    def pending(self, ctx: Context) -> list[str]:
        """What would run (empty when everything is cached), one line each."""
        raise NotImplementedError

    def run(self, ctx: Context) -> None:
        raise NotImplementedError


class CorpusStage(Stage):
    name = "corpus"

    def key(self, ctx: Context) -> str:
        def compute():
            section = resolved_dict(ctx.config.corpus)
            return config_hash({"corpus": section, "source_sha256": file_hash(ctx.config.corpus.path)})
        return ctx.memo("corpus.key", compute)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "corpus" / self.key(ctx)

    def pending(self, ctx: Context) -> list[str]:
        done = (self.directory(ctx) / "done.json").is_file() and self.name not in ctx.force
        return [] if done else [f"corpus: read {ctx.config.corpus.path} -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        final = self.directory(ctx)
        if not self.pending(ctx):
            logger.info("corpus: cached at %s", final)
            return
        corpus = read_text_corpus(ctx.config.corpus.path, max_sentences=ctx.config.corpus.max_sentences)
        tmp = final.with_name(f"{final.name}.partial-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "sentences.txt").write_text("".join(s + "\n" for s in corpus.sentences), encoding="utf-8")
        meta = {"key": self.key(ctx), "source": corpus.source, "source_sha256": file_hash(corpus.source),
                "n_sentences": len(corpus), "lines": corpus.lines, "config": resolved_dict(ctx.config.corpus),
                "versions": versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        (tmp / "done.json").write_text(json.dumps({"key": self.key(ctx)}), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        logger.info("corpus: %d sentences -> %s", len(corpus), final)

    def load(self, ctx: Context) -> Corpus:
        d = self.directory(ctx)
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        sentences = (d / "sentences.txt").read_text(encoding="utf-8").splitlines()
        return Corpus(sentences=sentences, lines=meta["lines"], source=meta["source"])


class ExtractStage(Stage):
    name = "extract"
    after = ("corpus",)
    uses_cluster = True

    def store(self, ctx: Context) -> str:
        return ctx.config.extract.store or str(ctx.workdir / "reps.zarr")

    def model_key(self, ctx: Context, model: ModelConfig) -> str:
        def compute():
            inputs = {p: tree_hash(getattr(model, p)) for p in ("path", "data", "sentencepiece")
                      if getattr(model, p) is not None}
            return config_hash({"corpus": CorpusStage().key(ctx), "extract": resolved_dict(ctx.config.extract),
                                "model": resolved_dict(model), "inputs": inputs})
        return ctx.memo(f"extract.key.{model.name}", compute)

    def _todo(self, ctx: Context) -> list[ModelConfig]:
        from evolution.store import group_is_complete

        store = self.store(ctx)
        return [m for m in ctx.config.models
                if self.name in ctx.force or not group_is_complete(store, m.name, self.model_key(ctx, m))]

    def pending(self, ctx: Context) -> list[str]:
        return [f"extract: model {m.name} ({m.kind}) -> {self.store(ctx)} group {m.name}" for m in self._todo(ctx)]

    def run(self, ctx: Context) -> None:
        from evolution.extract import extract_model, warm_workers
        from evolution.models import cached_adapter
        from evolution.store import create_attention_group, create_hidden_group, mark_complete
        from evolution.tokens import build_token_table

        store = self.store(ctx)
        todo = {m.name for m in self._todo(ctx)}
        corpus = CorpusStage().load(ctx)
        xcfg = ctx.config.extract
        for model in ctx.config.models:
            if model.name not in todo:
                logger.info("extract: %s cached in %s", model.name, store)
                continue
            key = self.model_key(ctx, model)
            spec = resolved_dict(model)
            t0 = time.perf_counter()
            warming = warm_workers(ctx.client, spec)
            adapter = cached_adapter(spec)  # shared with in-process tasks; workers load their own
            table = build_token_table(corpus.sentences, adapter, too_long=xcfg.too_long, lines=corpus.lines,
                                      source=corpus.source)
            attrs = {
                "model": model.name,
                "model_config": spec,
                "extract_config": resolved_dict(xcfg),
                "corpus_key": CorpusStage().key(ctx),
                "corpus_source": corpus.source,
                "corpus_sha256": file_hash(corpus.source),
                "model_sha256": tree_hash(model.path),
                "seed": ctx.config.seed,
                "versions": versions(),
                "n_truncated": table.n_truncated,
                "n_skipped": table.n_skipped,
                **adapter.describe(),
            }
            create_hidden_group(store, model.name, columns=table.columns, n_layers=adapter.num_layers + 1,
                                d_model=adapter.d_model, chunk_tokens=xcfg.chunk_tokens, dtype=xcfg.dtype,
                                attrs=attrs, fingerprint=key, compressor=xcfg.compressor)
            n_att = 0
            if xcfg.attention is not None:
                n_att = min(xcfg.attention.sentences, table.n_sentences)
                create_attention_group(
                    store, f"{model.name}/attention", sentence=table.sentence_index[:n_att],
                    inputs=[adapter.build_input(ids) for ids in table.ids[:n_att]],
                    n_layers=adapter.num_layers, n_heads=adapter.num_heads, dtype=xcfg.attention.dtype,
                    attrs={"special_ids": sorted(adapter.special_ids), **attrs})
            stats = extract_model(spec, table, adapter, store=store, group=model.name,
                              chunk_tokens=xcfg.chunk_tokens, task_chunks=xcfg.task_chunks,
                              max_batch_tokens=xcfg.max_batch_tokens,
                              dtype=xcfg.dtype, attention_sentences=n_att,
                              attention_dtype=xcfg.attention.dtype if xcfg.attention else None,
                              torch_threads=xcfg.torch_threads, client=ctx.client, progress=ctx.progress)
            del warming
            mark_complete(store, model.name, key)
            stats["stage_seconds"] = time.perf_counter() - t0
            ctx.timings[f"extract.{model.name}"] = stats
            logger.info("extract: %s, %d tokens in %.1f s -> %s", model.name, stats["tokens"],
                        stats["stage_seconds"], store)


STAGES: dict[str, Stage] = {s.name: s for s in (CorpusStage(), ExtractStage())}


def stage_order(target: str | None = None) -> list[str]:
    """Stage names in dependency order, up to and including ``target``."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in STAGES[name].after:
            visit(dep)
        order.append(name)

    for name in ([target] if target else list(STAGES)):
        if name not in STAGES:
            raise KeyError(f"unknown stage {name!r}; stages are {list(STAGES)}")
        visit(name)
    return order


def downstream(name: str) -> set[str]:
    """``name`` and every stage that depends on it."""
    out = {name}
    changed = True
    while changed:
        changed = False
        for s in STAGES.values():
            if s.name not in out and any(d in out for d in s.after):
                out.add(s.name)
                changed = True
    return out
