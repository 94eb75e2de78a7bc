"""The pipeline's stages and their caching.

Stages form a DAG, ``corpus -> train -> extract -> metrics -> report``
(``train`` does nothing when the config has no ``train`` section). Each stage knows its *key*: a hash of the
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolution.atomic import replace_dir
from evolution.config import EvolutionConfig, ModelConfig, resolved_dict
from evolution.corpus import Corpus, read_text_corpus
from evolution.provenance import config_hash, file_hash, tree_hash, versions

logger = logging.getLogger(__name__)

__all__ = ["Context", "Stage", "CorpusStage", "TrainStage", "ExtractStage", "MetricsStage", "ReportStage", "STAGES", "stage_order"]


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
    """Read the corpus; for a parallel one also filter it and split it by whole groups.

    Output ``<workdir>/corpus/<key>/``: ``sentences.txt`` (what is analysed),
    ``meta.json`` (counts, provenance) and, for parallel sources,
    ``text/{train,valid,test}.{src,tgt}`` plus ``refs/<split>.txt``.
    """

    name = "corpus"

    #: Corpus fields that choose what is *analysed*; training data does not depend on them.
    ANALYSIS_FIELDS = ("analyse", "max_sentences", "annotated", "annotated_sentences")

    def _inputs(self, ctx: Context) -> dict:
        c = ctx.config.corpus
        if c.source == "bible":
            from evolution.corpus.sword import module_files

            return {m: tree_hash(module_files(c.sword_root, m)) for m in c.modules}
        return {str(p): file_hash(p) for p in (c.path, c.target_path) if p is not None}

    def _annotated_inputs(self, ctx: Context) -> dict:
        from evolution.corpus.conllu import resolve_treebank

        a = ctx.config.corpus.annotated
        return {} if a is None else {"annotated": file_hash(resolve_treebank(a))}

    def key(self, ctx: Context) -> str:
        def compute():
            section = resolved_dict(ctx.config.corpus)
            return config_hash({"corpus": section, "inputs": {**self._inputs(ctx), **self._annotated_inputs(ctx)},
                                "seed": ctx.config.seed})
        return ctx.memo("corpus.key", compute)

    def training_key(self, ctx: Context) -> str:
        """Hash of what the training text depends on (not of what is analysed), so that
        analysing another split or adding annotated text reuses the trained models."""
        def compute():
            section = {k: v for k, v in resolved_dict(ctx.config.corpus).items() if k not in self.ANALYSIS_FIELDS}
            return config_hash({"corpus": section, "inputs": self._inputs(ctx), "seed": ctx.config.seed})
        return ctx.memo("corpus.training_key", compute)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "corpus" / self.key(ctx)

    def pending(self, ctx: Context) -> list[str]:
        done = (self.directory(ctx) / "done.json").is_file() and self.name not in ctx.force
        c = ctx.config.corpus
        what = {"text": c.path, "parallel": c.path, "bible": f"{c.sword_root} {'+'.join(c.modules)}"}[c.source]
        return [] if done else [f"corpus: read {what} -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        final = self.directory(ctx)
        if not self.pending(ctx):
            logger.info("corpus: cached at %s", final)
            return
        c = ctx.config.corpus
        meta: dict[str, Any] = {"key": self.key(ctx), "inputs": self._inputs(ctx), "config": resolved_dict(c),
                                "versions": versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        # Read (and fail on bad input) before anything is written.
        if c.source == "text":
            corpus = read_text_corpus(c.path, max_sentences=c.max_sentences)
            meta.update(source=corpus.source, source_sha256=file_hash(corpus.source))
        else:
            parallel, splits = self._read_parallel(ctx)
        treebank = self._read_annotated(ctx)
        with replace_dir(final) as tmp:
            tmp.mkdir()
            if c.source == "text":
                sentences, lines = corpus.sentences, corpus.lines
            else:
                sentences, lines = self._write_parallel(ctx, tmp, meta, parallel, splits)
            if treebank is not None:
                meta["annotated"] = self._write_annotated(tmp, treebank, first=len(sentences))
                sentences = sentences + [t.text for t in treebank]
                lines = lines + [t.line for t in treebank]
            (tmp / "sentences.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
            meta.update(n_sentences=len(sentences), lines=lines)
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            (tmp / "done.json").write_text(json.dumps({"key": self.key(ctx)}), encoding="utf-8")
        logger.info("corpus: %d sentences to analyse -> %s", len(sentences), final)

    def _read_annotated(self, ctx: Context):
        from evolution.corpus.conllu import read_conllu, resolve_treebank

        c = ctx.config.corpus
        if c.annotated is None:
            return None
        treebank = read_conllu(resolve_treebank(c.annotated), max_sentences=c.annotated_sentences)
        logger.info("corpus: annotated text %s: %d sentences, %d words", c.annotated, len(treebank),
                    sum(len(t) for t in treebank))
        return treebank

    @staticmethod
    def _write_annotated(tmp: Path, treebank, *, first: int) -> dict:
        """``annotation.json``: per annotated sentence its words' labels; they are corpus
        sentences ``first ...`` (after the main text)."""
        doc = {"first": first, "n_sentences": len(treebank),
               "sentences": [{"upos": t.upos, "xpos": t.xpos, "deprel": t.deprel, "head": t.head}
                             for t in treebank]}
        (tmp / "annotation.json").write_text(json.dumps(doc), encoding="utf-8")
        return {"first": first, "n_sentences": len(treebank), "n_words": sum(len(t) for t in treebank)}

    def annotation(self, ctx: Context) -> dict | None:
        """The ``annotation.json`` of the corpus stage (None without ``corpus.annotated``)."""
        f = self.directory(ctx) / "annotation.json"
        return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None

    def _read_parallel(self, ctx: Context):
        from evolution.corpus.parallel import (
            filter_length_ratio,
            read_bible,
            read_parallel_text,
            read_parallel_tsv,
            split_corpus,
        )

        c = ctx.config.corpus
        if c.source == "bible":
            corpus = read_bible(c.sword_root, source_module=c.modules[0], target_module=c.modules[1])
        elif c.target_path is not None:
            corpus = read_parallel_text(c.path, c.target_path, block_lines=c.split.block_lines)
        else:
            cols = c.columns or {}
            corpus = read_parallel_tsv(c.path, source_column=cols["source"], target_column=cols["target"],
                                       ref_column=cols.get("ref"), group_column=cols.get("group"),
                                       block_lines=c.split.block_lines)
        corpus = filter_length_ratio(corpus, max_ratio=c.max_length_ratio)
        return corpus, split_corpus(corpus, valid=c.split.valid, test=c.split.test, seed=ctx.config.seed)

    def _write_parallel(self, ctx: Context, tmp: Path, meta: dict, corpus, splits) -> tuple[list[str], list[int]]:
        from evolution.corpus.parallel import SPLITS

        c = ctx.config.corpus
        (tmp / "text").mkdir()
        (tmp / "refs").mkdir()
        src, tgt = c.languages
        counts = {}
        for name in SPLITS:
            idx = splits[name]
            (tmp / "text" / f"{name}.{src}").write_text("".join(corpus.source[i] + "\n" for i in idx), encoding="utf-8")
            (tmp / "text" / f"{name}.{tgt}").write_text("".join(corpus.target[i] + "\n" for i in idx), encoding="utf-8")
            (tmp / "refs" / f"{name}.txt").write_text("".join(corpus.refs[i] + "\n" for i in idx), encoding="utf-8")
            groups = list(dict.fromkeys(corpus.groups[i] for i in idx))
            counts[name] = {"pairs": len(idx), "groups": len(groups),
                            "source_words": sum(len(corpus.source[i].split()) for i in idx),
                            "target_words": sum(len(corpus.target[i].split()) for i in idx)}
            if name != "train":
                counts[name]["group_names"] = groups
            logger.info("corpus: %s split: %d pairs in %d groups, %d %s / %d %s words", name, len(idx), len(groups),
                        counts[name]["source_words"], src, counts[name]["target_words"], tgt)
        analysed = splits[c.analyse][:c.max_sentences] if c.max_sentences else splits[c.analyse]
        meta.update(source=corpus.origin, filter=corpus.stats, splits=counts, analysed_split=c.analyse,
                    refs=[corpus.refs[i] for i in analysed])
        # `lines`: 1-based position of each analysed sentence in its split
        return [corpus.source[i] for i in analysed], list(range(1, len(analysed) + 1))

    def load(self, ctx: Context) -> Corpus:
        d = self.directory(ctx)
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        sentences = (d / "sentences.txt").read_text(encoding="utf-8").splitlines()
        return Corpus(sentences=sentences, lines=meta["lines"], source=str(d / "sentences.txt"))


class TrainStage(Stage):
    """Train every run of the ``train`` section (see :mod:`evolution.training.trainer`).

    Not all-or-nothing on purpose: fairseq's ``checkpoint_last.pt`` is the
    resume point of an interrupted run, and finished runs are kept.
    ``done.json`` (written last, with the evaluation) marks the whole stage.
    """

    name = "train"
    after = ("corpus",)

    def key(self, ctx: Context) -> str:
        def compute():
            train = resolved_dict(ctx.config.train) if ctx.config.train else None
            return config_hash({"corpus": CorpusStage().training_key(ctx), "train": train, "seed": ctx.config.seed})
        return ctx.memo("train.key", compute)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "train" / self.key(ctx)

    def paths(self, ctx: Context):
        from evolution.training.trainer import TrainingPaths

        return TrainingPaths(self.directory(ctx), ctx.config.corpus.languages)

    def pending(self, ctx: Context) -> list[str]:
        if ctx.config.train is None:
            return []
        if (self.directory(ctx) / "done.json").is_file() and self.name not in ctx.force:
            return []
        runs = ctx.config.train.runs(ctx.config.seed)
        todo = [n for n in runs if not (self.paths(ctx).run_dir(n) / "done.json").is_file()]
        return [f"train: {', '.join(todo) or 'evaluate'} -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        import shutil

        from evolution.training import trainer

        if not self.pending(ctx):
            if ctx.config.train is not None:
                logger.info("train: cached at %s", self.directory(ctx))
            return
        cfg, languages = ctx.config.train, ctx.config.corpus.languages
        paths = self.paths(ctx)
        if self.name in ctx.force and paths.root.exists():
            shutil.rmtree(paths.root)
        paths.root.mkdir(parents=True, exist_ok=True)
        if not paths.text.is_dir():
            shutil.copytree(CorpusStage().directory(ctx) / "text", paths.text)
        t0 = time.perf_counter()
        prep = trainer.prepare_data(paths, cfg)
        runs = cfg.runs(ctx.config.seed)
        for seed in sorted({r["seed"] for r in runs.values()}):
            trainer.initial_encoder(paths, cfg, seed=seed, languages=languages)
        timings = {n: trainer.train_run(paths, cfg, n, spec, languages=languages, progress=ctx.progress)
                   for n, spec in runs.items()}
        train_seconds = time.perf_counter() - t0
        evaluation = trainer.evaluate_runs(paths, cfg, runs, languages=languages)
        summary = {"key": self.key(ctx), "prepare": prep, "runs": runs, "timings": timings,
                   "train_seconds": round(train_seconds, 1), "evaluation": evaluation,
                   "config": resolved_dict(cfg), "versions": versions()}
        ctx.timings["train"] = summary
        (paths.root / "eval.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
        (paths.root / "done.json").write_text(json.dumps({"key": self.key(ctx)}), encoding="utf-8")
        logger.info("train: %d runs in %.0f s (incl. data preparation); %s", len(runs), train_seconds,
                    "; ".join(f"{n}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "seconds")
                              for n, r in evaluation.items() if isinstance(r, dict)))

    def model_spec(self, ctx: Context, model: ModelConfig) -> dict:
        """The fairseq adapter spec of a ``kind: trained`` model."""
        run = ctx.config.train.runs(ctx.config.seed)[model.run_name]
        paths = self.paths(ctx)
        spec = resolved_dict(model)
        spec.update(kind="fairseq", path=str(paths.checkpoint(model.run_name)),
                    data=str(paths.data(run["objective"])), sentencepiece=str(paths.spm_model),
                    objective=run["objective"], run=model.run_name)
        return spec


class ExtractStage(Stage):
    name = "extract"
    after = ("corpus", "train")
    uses_cluster = True

    def store(self, ctx: Context) -> str:
        return ctx.config.extract.store or str(ctx.workdir / "reps.zarr")

    def spec(self, ctx: Context, model: ModelConfig) -> dict:
        """What :func:`evolution.models.load_adapter` needs (trained models resolved to their checkpoint)."""
        return TrainStage().model_spec(ctx, model) if model.kind == "trained" else resolved_dict(model)

    def model_key(self, ctx: Context, model: ModelConfig) -> str:
        def compute():
            if model.kind == "trained":
                inputs = {"train": TrainStage().key(ctx), "run": model.run_name}
            else:
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
            spec = self.spec(ctx, model)
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
                "model_sha256": tree_hash(Path(spec["path"])),
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


#: Bumped when the metrics stage computes something new, so that older metrics.zarr are redone
#: (2: token influence and MI with the MLM's output label; 3: POS / dependency neighbour rates
#: on annotated text, main-text-only frequency ranks; 4: two-level k-means with 4 sqrt(k) cells
#: and a refinement probing 4 cells, decision 15; 5: models whose stores differ outside the
#: similarity sentences are compared again).
METRICS_VERSION = 5


class MetricsStage(Stage):
    """MI, neighbours, t-SNE per (model, layer) and similarity across views -> ``metrics.zarr``.

    Each (model, layer) task is cached as a JSON file keyed by that model's
    extraction key, the metrics config and the layer, so adding a model
    computes only its layers; the similarity task (one per set of models
    that tokenise identically) is cheap by comparison and keyed by all of
    its models. ``metrics.zarr`` is rebuilt from the cache, written under a
    temporary name and moved into place.
    """

    name = "metrics"
    after = ("extract",)
    uses_cluster = True

    def path(self, ctx: Context) -> Path:
        return ctx.workdir / "metrics.zarr"

    def cache_dir(self, ctx: Context) -> Path:
        return ctx.workdir / "metrics" / "cache"

    def _layer_cfg(self, ctx: Context) -> dict:
        m = resolved_dict(ctx.config.metrics)
        out = {k: m[k] for k in ("tokens", "mi", "neighbors", "tsne")}
        if out["mi"] is not None:  # used only by the MLM-output task: changing it keeps the layer results
            out["mi"] = {k: v for k, v in out["mi"].items() if k != "mlm_corruptions"}
        return out

    def _layer_key(self, ctx: Context, model: ModelConfig, layer: int) -> str:
        return config_hash({"extract": ExtractStage().model_key(ctx, model), "metrics": self._layer_cfg(ctx),
                            "seed": ctx.config.seed, "layer": layer, "version": METRICS_VERSION})

    def _models(self, ctx: Context) -> dict[str, Any]:
        """Per model: its coordinates, number of layers, objective (read once per run)."""
        def compute():
            from evolution.store import open_representations

            store = ExtractStage().store(ctx)
            out = {}
            for m in ctx.config.models:
                ds = open_representations(store, m.name)
                out[m.name] = {"ds": ds, "n_layers": ds.sizes["layer"],
                               "objective": m.objective or ds.attrs.get("objective")}
            return out
        return ctx.memo("metrics.models", compute)

    def fingerprint(self, ctx: Context) -> str:
        keys = {m.name: [self._layer_key(ctx, m, layer) for layer in range(self._n_layers_cheap(ctx, m))]
                for m in ctx.config.models}
        mcfg = resolved_dict(ctx.config.metrics)
        return config_hash({"version": METRICS_VERSION, "layers": keys, "similarity": mcfg.get("similarity"),
                            "influence": mcfg.get("influence"), "mi": mcfg.get("mi"),  # mi: MLM output too
                            "seed": ctx.config.seed, "models": [ExtractStage().model_key(ctx, m)
                                                                for m in ctx.config.models]})

    def _n_layers_cheap(self, ctx: Context, model: ModelConfig) -> int:
        import zarr

        try:
            arr = zarr.open_array(ExtractStage().store(ctx), path=f"{model.name}/hidden", mode="r", zarr_format=3)
            return int(arr.shape[0])
        except Exception:  # noqa: BLE001 - not extracted yet
            return -1

    def pending(self, ctx: Context) -> list[str]:
        from evolution.metrics.results import metrics_fingerprint

        if self.name not in ctx.force and ExtractStage().pending(ctx) == [] and \
                metrics_fingerprint(self.path(ctx)) == self.fingerprint(ctx):
            return []
        return [f"metrics: {', '.join(m.name for m in ctx.config.models)} -> {self.path(ctx)}"]

    def run(self, ctx: Context) -> None:
        import dask
        import numpy as np

        from evolution.extract import compute
        from evolution.metrics.plan import content_ids_by_sentence, plan_occurrences, save_task_plan, text_parts
        from evolution.metrics.results import attach_tsne_labels, build_datasets, write_metrics
        from evolution.metrics.tasks import layer_task, similarity_task

        if not self.pending(ctx):
            logger.info("metrics: cached at %s", self.path(ctx))
            return
        t0 = time.perf_counter()
        cfg = ctx.config.metrics
        store = ExtractStage().store(ctx)
        cache = self.cache_dir(ctx)
        cache.mkdir(parents=True, exist_ok=True)
        models = self._models(ctx)
        layer_cfg = self._layer_cfg(ctx)
        results: dict[tuple[str, int], dict] = {}
        todo, todo_keys = [], []
        plans, tsne_labels = {}, {}
        annotation = CorpusStage().annotation(ctx)
        for m in ctx.config.models:
            info = models[m.name]
            ds = info["ds"]
            info.update(text_parts(sentence=ds["sentence"].values, token_id=ds["token_id"].values,
                                   word_id=ds["word_id"].values, freq_rank=ds["freq_rank"].values,
                                   annotation=annotation))
            plan = plan_occurrences(token_id=ds["token_id"].values, token_str=ds["token_str"].values,
                                    sentence=ds["sentence"].values, position=ds["position"].values,
                                    objective=info["objective"], cfg=cfg, seed=ctx.config.seed,
                                    primary=info["primary"], annotation=info["annotation"])
            plans[m.name] = plan
            tsne_labels[m.name] = plan.tsne
            # the tasks read the plan from disk, as they read the representations: a small graph
            task_plan, written = cache / f"plan-{m.name}-{self._layer_key(ctx, m, 0)[:16]}.npz", False
            for layer in range(info["n_layers"]):
                f = cache / f"layer-{m.name}-{layer}-{self._layer_key(ctx, m, layer)}.json"
                if f.is_file() and self.name not in ctx.force:
                    results[(m.name, layer)] = json.loads(f.read_text(encoding="utf-8"))
                    continue
                if not written:  # once per run that computes a layer of this model
                    save_task_plan(task_plan, plan)
                    written = True
                todo.append(dask.delayed(layer_task, pure=True)(
                    store=store, group=m.name, layer=layer, plan=str(task_plan), cfg=layer_cfg, seed=ctx.config.seed,
                    dask_key_name=f"metrics-{m.name}-{layer}"))
                todo_keys.append(((m.name, layer), f))
        # similarity: one task per set of models with identical tokenisation of the corpus
        sim = None
        scfg = cfg.similarity
        if scfg is not None:
            # models compare on the same occurrences: same (sentence, position, token id) at the
            # similarity rows (models may still differ elsewhere, e.g. one truncates a long sentence
            # of the annotated text one piece earlier because it adds a beginning-of-sentence token)
            classes: dict[bytes, list[str]] = {}
            for m in ctx.config.models:
                ds, rows = models[m.name]["ds"], plans[m.name].similarity_rows
                occurrences = np.stack([ds[v].values[rows].astype(np.int64) for v in ("sentence", "position",
                                                                                      "token_id")])
                classes.setdefault(occurrences.tobytes(), []).append(m.name)
            if len(classes) > 1:
                logger.warning("metrics: models tokenise the similarity sentences differently (%s); similarity is computed "
                               "within each group only", "; ".join(", ".join(v) for v in classes.values()))
            sim_tasks = []
            for names in classes.values():
                rows = {n: plans[n].similarity_rows for n in names}
                d = max(models[n]["ds"].sizes["feature"] for n in names)
                if len(rows[names[0]]) < scfg.min_ratio * d:
                    logger.warning("metrics: similarity skipped for %s: %d occurrences in the first %d sentences, "
                                   "fewer than metrics.similarity.min_ratio x d = %g x %d", ", ".join(names),
                                   len(rows[names[0]]), scfg.sentences, scfg.min_ratio, d)
                    continue
                key = config_hash({"models": [ExtractStage().model_key(ctx, m) for m in ctx.config.models
                                              if m.name in names], "similarity": resolved_dict(scfg),
                                   "version": METRICS_VERSION})
                f = cache / f"similarity-{key}.json"
                if f.is_file() and self.name not in ctx.force:
                    sim_tasks.append(json.loads(f.read_text(encoding="utf-8")))
                    continue
                sim_tasks.append(None)
                todo.append(dask.delayed(similarity_task, pure=True)(
                    store=store, groups=names, n_layers={n: models[n]["n_layers"] for n in names}, rows=rows,
                    freq_rank=models[names[0]]["freq_rank"][rows[names[0]]], cfg=resolved_dict(scfg),
                    dask_key_name=f"similarity-{key[:12]}"))
                todo_keys.append((("similarity", len(sim_tasks) - 1), f))
        influence: dict[str, dict] = {}
        icfg = cfg.influence
        if icfg is not None:
            from evolution.metrics.influence import sample_influencers
            from evolution.metrics.tasks import influence_task

            bins = list(zip(icfg.freq_bins[:-1], icfg.freq_bins[1:]))
            for m in ctx.config.models:
                if m.kind == "huggingface":
                    continue
                ds = models[m.name]["ds"]
                key = config_hash({"extract": ExtractStage().model_key(ctx, m), "influence": resolved_dict(icfg),
                                   "seed": ctx.config.seed})
                f = cache / f"influence-{m.name}-{key}.json"
                if f.is_file() and self.name not in ctx.force:
                    influence[m.name] = json.loads(f.read_text(encoding="utf-8"))
                    continue
                sentence, token_id = ds["sentence"].values, ds["token_id"].values
                main = models[m.name]["primary"]
                samples = sample_influencers(sentence=sentence[main], position=ds["position"].values[main],
                                             freq_rank=models[m.name]["freq_rank"][main], bins=bins,
                                             max_per_bin=icfg.max_per_bin, seed=ctx.config.seed)
                content = content_ids_by_sentence(token_id, sentence, wanted={s for s, _, _ in samples})
                todo.append(dask.delayed(influence_task, pure=True)(
                    spec=ExtractStage().spec(ctx, m), content_ids=content, samples=samples, n_bins=len(bins),
                    cfg=resolved_dict(icfg), torch_threads=ctx.config.extract.torch_threads,
                    dask_key_name=f"influence-{m.name}-{key[:12]}"))
                todo_keys.append((("influence", m.name), f))
        pos_change: dict[str, dict] = {}
        if scfg is not None and annotation is not None:
            from evolution.corpus.conllu import label_vocabulary
            from evolution.metrics.tasks import pos_change_task

            upos_vocab = np.array(label_vocabulary([s["upos"] for s in annotation["sentences"]]), dtype=object)
            for m in ctx.config.models:
                codes = models[m.name]["annotation"]["upos"]
                rows = plans[m.name].annotated_rows
                key = config_hash({"extract": ExtractStage().model_key(ctx, m), "similarity": resolved_dict(scfg),
                                   "version": METRICS_VERSION})
                f = cache / f"change-pos-{m.name}-{key}.json"
                if f.is_file() and self.name not in ctx.force:
                    pos_change[m.name] = json.loads(f.read_text(encoding="utf-8"))
                    continue
                todo.append(dask.delayed(pos_change_task, pure=True)(
                    store=store, group=m.name, n_layers=models[m.name]["n_layers"], rows=rows,
                    pos=upos_vocab[codes[rows]], cfg=resolved_dict(scfg), dask_key_name=f"change-pos-{m.name}-{key[:12]}"))
                todo_keys.append((("change_pos", m.name), f))
        mlm_out: dict[str, dict] = {}
        if cfg.mi is not None:
            from evolution.metrics.tasks import mlm_output_task

            for m in ctx.config.models:
                if models[m.name]["objective"] != "mlm" or m.kind == "huggingface" or "input" not in plans[m.name].mi:
                    continue
                ds = models[m.name]["ds"]
                key = config_hash({"extract": ExtractStage().model_key(ctx, m), "mi": resolved_dict(cfg.mi),
                                   "tokens": resolved_dict(cfg.tokens), "seed": ctx.config.seed,
                                   "version": METRICS_VERSION})
                f = cache / f"mlm-output-{m.name}-{key}.json"
                if f.is_file() and self.name not in ctx.force:
                    mlm_out[m.name] = json.loads(f.read_text(encoding="utf-8"))
                    continue
                sentence, token_id = ds["sentence"].values, ds["token_id"].values
                content = content_ids_by_sentence(token_id, sentence,
                                                  wanted=np.unique(sentence[models[m.name]["primary"]]))
                types = np.unique(plans[m.name].mi["input"][1]).tolist()
                todo.append(dask.delayed(mlm_output_task, pure=True)(
                    spec=ExtractStage().spec(ctx, m), content_ids=content, types=types, cfg=resolved_dict(cfg.mi),
                    seed=ctx.config.seed, torch_threads=ctx.config.extract.torch_threads,
                    dask_key_name=f"mlm-output-{m.name}-{key[:12]}"))
                todo_keys.append((("mlm_output", m.name), f))
        logger.info("metrics: %d task(s) to compute, %d (model, layer) result(s) cached", len(todo), len(results))
        computed = compute(todo, client=ctx.client, progress=ctx.progress, label="metrics", unit="task") if todo else []
        for (key, f), r in zip(todo_keys, computed):
            r = json.loads(json.dumps(r, default=_jsonable))
            tmp = f.with_name(f.name + ".partial")
            tmp.write_text(json.dumps(r), encoding="utf-8")
            os.replace(tmp, f)
            if key[0] == "similarity":
                sim_tasks[key[1]] = r
            elif key[0] == "influence":
                influence[key[1]] = r
            elif key[0] == "mlm_output":
                mlm_out[key[1]] = r
            elif key[0] == "change_pos":
                pos_change[key[1]] = r
            else:
                results[key] = r
        if scfg is not None and sim_tasks:
            sim = _merge_similarity(sim_tasks)
            for note in sim["notes"]:
                logger.info("metrics: %s", note)
        for name, r in mlm_out.items():  # MI with the MLM's output label joins that model's layer results
            for layer, v in enumerate(r.get("layers", [])):
                if (name, layer) in results:
                    results[(name, layer)] = {**results[(name, layer)],
                                              "mi": {**results[(name, layer)].get("mi", {}), "output": v}}
        _warn_saturation(results)
        _warn_bias(results)
        attrs = {"config": resolved_dict(cfg), "seed": ctx.config.seed, "versions": versions(),
                 "representations": store, "extract_keys": {m.name: ExtractStage().model_key(ctx, m)
                                                             for m in ctx.config.models},
                 "objectives": {n: str(v["objective"]) for n, v in models.items()},
                 "notes": [n for p in plans.values() for n in p.notes]}
        names = [m.name for m in ctx.config.models]
        datasets = build_datasets(models=names, n_layers={n: models[n]["n_layers"] for n in names},
                                  layer_results=results, similarity=sim, attrs=attrs)
        attach_tsne_labels(datasets, tsne_labels, names)
        if icfg is not None:
            from evolution.metrics.results import influence_dataset

            for name, r in influence.items():
                for note in r.get("notes", []) + ([r["unsupported"]] if "unsupported" in r else []):
                    logger.info("metrics: influence %s: %s", name, note)
            ds_inf = influence_dataset(influence, freq_bins=icfg.freq_bins, methods=icfg.methods, attrs=attrs)
            if ds_inf is not None:
                datasets["influence"] = ds_inf
        if pos_change:
            from evolution.metrics.results import change_pos_dataset

            for name, r in pos_change.items():
                for note in r.get("notes", []):
                    logger.info("metrics: %s", note)
            datasets["change_pos"] = change_pos_dataset(pos_change, methods=scfg.methods, attrs=attrs)
        write_metrics(self.path(ctx), datasets, fingerprint=self.fingerprint(ctx))
        logger.info("metrics: %s in %.1f s -> %s", ", ".join(sorted(datasets)), time.perf_counter() - t0,
                    self.path(ctx))


def _flag_mi(results: dict[tuple[str, int], dict], test) -> dict[tuple[str, str], list]:
    """(model, target) -> [(layer, MI result), ...] of the layers whose MI result passes ``test``."""
    flagged: dict[tuple[str, str], list] = {}
    for (m, layer), r in sorted(results.items()):
        for t, v in r.get("mi", {}).items():
            if test(v):
                flagged.setdefault((m, t), []).append((layer, v))
    return flagged


def _warn_saturation(results: dict[tuple[str, int], dict]) -> None:
    """One warning per (model, target) whose MI is within 2% of H(X) at some layers."""
    for (m, t), hits in _flag_mi(results, lambda v: v["saturated"]).items():
        v = hits[0][1]
        logger.warning("metrics: MI(%s) of %s is within 2%% of H(X) = %.3f nats at layer(s) %s: almost every "
                       "cluster holds one token. Either those layers keep token identity intact, or k = %d is "
                       "too large for %d occurrences (%.0f per cluster) and the curve cannot show change. "
                       "Check with a smaller metrics.mi.k or more text.", t, m, v["entropy"],
                       ",".join(str(layer) for layer, _ in hits), v["k"], v["n"], v["n"] / v["k"])


#: warn when the shuffled-label control reaches this share of the MI
BIAS_SHARE = 0.5


def _warn_bias(results: dict[tuple[str, int], dict]) -> None:
    """One warning per (model, target) whose shuffled-label control is >= :data:`BIAS_SHARE`
    of the MI at some layers: with few occurrences per cluster the plug-in MI is biased
    upward by about (k - 1)(|X| - 1) / 2n nats, and the curve then mostly shows that bias."""
    import numpy as np

    for (m, t), hits in _flag_mi(results, lambda v: v["shuffled"] >= BIAS_SHARE * float(np.mean(v["mi"]))).items():
        v = hits[-1][1]
        logger.warning("metrics: MI(%s) of %s: the shuffled-label control is %.2f of %.2f nats at layer(s) %s "
                       "(k = %d for %d occurrences, %.0f per cluster): the estimate is mostly the estimator's "
                       "bias. Read MI minus the control (mi_shuffled), or use a smaller metrics.mi.k or more text.",
                       t, m, v["shuffled"], float(np.mean(v["mi"])), ",".join(str(layer) for layer, _ in hits),
                       v["k"], v["n"], v["n"] / v["k"])


def _jsonable(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o)}")


def _merge_similarity(parts: list[dict]) -> dict:
    """One similarity result from per-tokenisation-class results (NaN across classes)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    views = [v for p in parts for v in p["views"]]
    methods = list(parts[0]["similarity"])
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    off = 0
    for p in parts:
        n = len(p["views"])
        for m in methods:
            sim[m][off:off + n, off:off + n] = p["similarity"][m]
        off += n
    change = {m: {g: v for p in parts for g, v in p["change"][m].items()} for m in methods}
    return {"views": views, "similarity": {m: v.tolist() for m, v in sim.items()}, "change": change,
            "bins": parts[0]["bins"], "n": parts[0]["n"], "notes": [n for p in parts for n in p["notes"]]}


class ReportStage(Stage):
    """Figures and ``report.html`` / ``report.md`` under ``<workdir>/report`` from ``metrics.zarr``."""

    name = "report"
    after = ("metrics",)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "report"

    def _key(self, ctx: Context) -> str:
        train = TrainStage().key(ctx) if ctx.config.train is not None else None
        return config_hash({"metrics": MetricsStage().fingerprint(ctx), "train": train})

    def _training(self, ctx: Context) -> dict | None:
        if ctx.config.train is None:
            return None
        path = TrainStage().directory(ctx) / "eval.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def pending(self, ctx: Context) -> list[str]:
        done = self.directory(ctx) / "done.json"
        if self.name not in ctx.force and not MetricsStage().pending(ctx) and done.is_file() and \
                json.loads(done.read_text(encoding="utf-8")).get("key") == self._key(ctx):
            return []
        return [f"report: figures and report.html -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        from evolution.report import write_report

        if not self.pending(ctx):
            logger.info("report: cached at %s", self.directory(ctx))
            return
        page = write_report(MetricsStage().path(ctx), self.directory(ctx),
                            title=f"evolution: {ctx.config.workdir.name}", training=self._training(ctx))
        (self.directory(ctx) / "done.json").write_text(json.dumps({"key": self._key(ctx)}), encoding="utf-8")
        logger.info("report: %s", page)


STAGES: dict[str, Stage] = {s.name: s for s in (CorpusStage(), TrainStage(), ExtractStage(), MetricsStage(),
                                                 ReportStage())}


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
