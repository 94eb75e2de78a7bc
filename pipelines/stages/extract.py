"""The ``extract`` stage: one group per model in the representation store
(:mod:`evolution.store`), trusted only when its completion attribute equals its
key; models are cached independently, so adding a model extracts only that model."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from evolution.config import ModelConfig, resolved_dict
from evolution.provenance import config_hash, file_hash, tree_hash, versions
from evolution.store import STORE_VERSION  # the layout's version, part of every extraction key
from pipelines.stages.base import Context, Stage
from pipelines.stages.corpus import CorpusStage
from pipelines.stages.train import TrainStage

logger = logging.getLogger(__name__)

__all__ = ["ExtractStage", "STORE_VERSION"]


#: the metrics sections the occurrence plan reads (:func:`evolution.analyses.inputs.row_sources`):
#: with ``extract.rows: needed`` they are part of the extraction key, the others (where the metrics
#: go and run, the head analyses, influence) are not
NEEDED_BY = ("tokens", "mi", "neighbors", "tsne", "similarity")


class ExtractStage(Stage):
    name = "extract"
    after = ("corpus", "train")
    uses_cluster = True

    def store(self, ctx: Context) -> str:
        return ctx.config.extract.store or str(ctx.workdir / "reps.zarr")

    def spec(self, ctx: Context, model: ModelConfig) -> dict:
        """What :func:`evolution.models.load_adapter` needs (trained models resolved to their checkpoint),
        with the config's ``extract.device`` (resolved where the model is loaded: on each worker)."""
        spec = TrainStage().model_spec(ctx, model) if model.kind == "trained" else resolved_dict(model)
        return {**spec, "device": ctx.config.extract.device}

    def model_key(self, ctx: Context, model: ModelConfig) -> str:
        from evolution.models.kinds import kind_of

        def compute():
            if model.kind == "trained":
                inputs = {"train": TrainStage().key(ctx), "run": model.run_name}
                if model.update is not None:
                    inputs["update"] = model.update
            else:
                inputs = {
                    p: tree_hash(getattr(model, p))
                    for p in ("path", "data", "sentencepiece")
                    if getattr(model, p) is not None
                }
                # files beside the weights that are part of the model (a shipped model's vocabulary), and the
                # training text it records (the corpus key above fixes the text the hash is compared with)
                kind = kind_of(model.kind)
                inputs.update({k: tree_hash(f) for k, f in kind.identity_files(model.path).items()})
                if kind.training_text is not None:
                    inputs["training_text"] = kind.training_text(model.path)
            # where the store is is not what it holds: moving it (say, to object storage) keeps the keys
            extract = {**ctx.config.extract.keyed(), "store": None}
            # nor where the model's files are: their content is in ``inputs``, so that a clone of the
            # project elsewhere (or another machine) finds the same keys (and reuses committed units)
            keyed = {k: (None if k in inputs else v) for k, v in model.keyed().items()}
            parts = {
                "corpus": CorpusStage().key(ctx),
                "extract": extract,
                "model": keyed,
                "inputs": inputs,
                "store_version": STORE_VERSION,
            }
            if ctx.config.extract.rows == "needed":  # the rows kept follow the occurrence plan's settings and seed
                metrics = ctx.config.metrics.keyed()
                parts["needed"] = {"metrics": {k: metrics[k] for k in NEEDED_BY}, "seed": ctx.config.seed}
            return config_hash(parts)

        return ctx.memo(f"extract.key.{model.name}", compute)

    def select_rows(self, ctx: Context, model: ModelConfig):
        """For ``extract.rows: needed``: ``(columns, attrs) -> {analysis: rows}``, the token rows the
        metrics stage will read (:func:`evolution.analyses.inputs.row_sources` of the occurrence
        plan it will make from the same coordinates, settings and seed); None otherwise."""
        if ctx.config.extract.rows != "needed":
            return None
        from evolution.analyses.inputs import plan_model, row_sources

        metrics, seed = ctx.config.metrics, ctx.config.seed

        def select(columns, attrs):
            plan = plan_model(
                columns=columns,
                annotated_from=int(attrs.get("annotated_from", -1)),
                train_types=attrs.get("train_types"),
                objective=model.objective or attrs.get("objective"),
                config=metrics,
                seed=seed,
            )["plan"]
            return row_sources(plan, config=metrics)

        return select

    def training_text(self, ctx: Context, model: ModelConfig) -> Path | None:
        """The training split's source text when ``model`` was trained on it: every ``kind: trained``
        model, and a ``kind: shipped`` one whose ``model.json`` records this text's SHA-256 (token
        frequency ranks then come from the training split; otherwise from the analysed text)."""
        from evolution.models.kinds import kind_of

        kind = kind_of(model.kind)
        if not (model.kind == "trained" or kind.training_text is not None) or not ctx.config.corpus.parallel:
            return None
        text = CorpusStage().directory(ctx) / "text" / f"train.{ctx.config.corpus.languages[0]}"
        if kind.training_text is None or model.path is None:  # a run of this config's train section
            return text
        recorded = kind.training_text(model.path)
        return text if recorded is not None and text.is_file() and file_hash(text) == recorded else None

    def _todo(self, ctx: Context, models: list[ModelConfig] | None = None) -> list[ModelConfig]:
        """Those of ``models`` (default: the config's) whose group is not complete for its key."""
        from evolution.store import check_store, group_is_complete

        store = self.store(ctx)
        check_store(store)  # before any cluster or write: a foreign store stops the run here
        return [
            m
            for m in (ctx.config.models if models is None else models)
            if self.name in ctx.force or not group_is_complete(store, m.name, self.model_key(ctx, m))
        ]

    def pending(self, ctx: Context) -> list[str]:
        return [f"extract: model {m.name} ({m.kind}) -> {self.store(ctx)} group {m.name}" for m in self._todo(ctx)]

    def prepare(self, ctx: Context) -> None:
        """Load every model still to extract once, so that a bad checkpoint or model directory
        fails before a cluster starts (through ``cached_adapter``: the last few loaded stay
        cached for the extraction); on a local cluster (or none), whose workers and memory limit
        the config fixes, plan them too, so that a run that does not fit (disk, a worker's memory)
        stops before its workers start (a Slurm or address cluster's plan waits for its workers)."""
        from evolution.models import cached_adapter
        from pipelines.plan import check_layers_before_loading

        todo = self._todo(ctx)
        for model in todo:
            check_layers_before_loading(self.spec(ctx, model), ctx.config.extract, name=model.name)
        for model in todo:
            cached_adapter(self.spec(ctx, model))
        if ctx.config.cluster.kind in ("local", "synchronous"):
            self.plan(ctx, todo)

    def run(self, ctx: Context) -> None:
        self.extract_models(ctx, ctx.config.models)

    def plan(self, ctx: Context, models: list[ModelConfig], *, corpus=None, only: bool = False) -> list[str]:
        """Log the extraction's plan of ``models`` (:mod:`pipelines.plan`: bytes, a worker's peak,
        seconds from rates measured now, the store disk's free space) and raise
        :class:`~pipelines.plan.PlanError` before anything is written when the bytes do not fit, or
        when a worker's peak is over its memory limit and ``extract.memory_check`` is ``stop``
        (``only``, for ``--plan``: a WARNING instead)."""
        from pipelines.cluster import planned_memory_limit, planned_workers
        from pipelines.plan import (
            PlanError,
            check_space,
            free_bytes,
            gemm_rate,
            log_plan,
            memory_line,
            memory_problem,
            plan_extract,
        )

        planned = ctx.memo("extract.planned", set)  # the models planned in this run (before its workers start)
        models = [m for m in models if m.name not in planned]
        if not models:
            return []
        planned.update(m.name for m in models)
        corpus = corpus if corpus is not None else CorpusStage().load(ctx)
        workers = planned_workers(ctx)
        # the occurrence plan of extract.rows: needed reads the annotation; read it once, and only then
        annotation = CorpusStage().annotation(ctx) if ctx.config.extract.rows == "needed" else None
        plans = [
            plan_extract(
                self.spec(ctx, m),
                corpus,
                ctx.config.extract,
                name=m.name,
                workers=workers,
                training_text=self.training_text(ctx, m),
                annotation=annotation,
                select_rows=self.select_rows(ctx, m),
            )
            for m in models
        ]
        store = self.store(ctx)
        free = free_bytes(store)
        t_gemm = time.perf_counter()
        gemm = ctx.memo("plan.gemm", lambda: gemm_rate(0.25))
        gemm_s = time.perf_counter() - t_gemm
        lines = log_plan(plans, store=store, free=free, gemm=gemm, workers=workers, gemm_seconds=gemm_s)
        cfg = ctx.config
        limit = planned_memory_limit(ctx)
        problem = memory_problem(plans, limit=limit, cluster=cfg.cluster, config=cfg.extract, workers=workers)
        if problem is None:
            lines.append(memory_line(plans, limit=limit, cluster=cfg.cluster, mode=cfg.extract.memory_check))
            logger.info("%s", lines[-1])
        ctx.timings["plan.extract"] = {
            "gemm64_one_core": gemm,
            "workers": workers,
            "memory_limit": limit,
            **{
                p.name: {
                    "bytes": p.bytes,
                    "worker_peak_bytes": p.worker_peak_bytes,
                    "worker_peak_parts": {
                        "parameters": p.parameters_bytes,
                        "task_buffer": p.buffer_bytes,
                        "activations": p.activation_bytes,
                        "worker_base": p.base_bytes,
                    },
                    "seconds": p.seconds,
                    "tokens": p.tokens,
                    "layers": p.layers,
                    "stored_layers": p.stored_layers,
                    "d_model": p.d_model,
                    "tokens_per_second": p.tokens_per_second,
                }
                for p in plans
            },
        }
        if problem is not None:
            go_on = "extract.memory_check: warn (e.g. --set extract.memory_check=warn) runs it anyway"
            if only or cfg.extract.memory_check == "warn":
                if not only:
                    then = "Going on anyway: extract.memory_check: warn."
                elif cfg.extract.memory_check == "stop":
                    then = f"A run stops here before it extracts unless {go_on}."
                else:
                    then = "A run goes on anyway: extract.memory_check: warn."
                lines.append(f"{problem} {then}")
                logger.warning("%s", lines[-1])
            else:
                raise PlanError(f"{problem} Nothing was written; {go_on}.")
        check_space(plans, store, free=free)
        return lines

    def extract_models(self, ctx: Context, models: list[ModelConfig]) -> None:
        """Extract each of ``models`` whose group is not complete for its key (the config's own in
        :meth:`run`; the trajectory's checkpoints, :mod:`pipelines.stages.trajectory`)."""
        from evolution.extract import extract_to_store

        store = self.store(ctx)
        todo = {m.name for m in self._todo(ctx, models)}
        if not todo:
            return
        corpus, annotation = CorpusStage().load(ctx), CorpusStage().annotation(ctx)
        self.plan(ctx, [m for m in models if m.name in todo], corpus=corpus)  # stops here if the disk is short
        for model in models:
            if model.name not in todo:
                logger.info("extract: %s cached in %s", model.name, store)
                continue
            spec = self.spec(ctx, model)
            attrs = {
                "model": model.name,
                "model_config": spec,
                "extract_config": resolved_dict(ctx.config.extract),
                "corpus_key": CorpusStage().key(ctx),
                "model_sha256": tree_hash(Path(spec["path"])),
                "seed": ctx.config.seed,
                "versions": versions(),
            }
            training_text = self.training_text(ctx, model)
            stats = extract_to_store(
                spec,
                corpus,
                store=store,
                group=model.name,
                fingerprint=self.model_key(ctx, model),
                config=ctx.config.extract,
                annotation=annotation,
                attrs=attrs,
                client=ctx.client,
                progress=ctx.progress,
                training_text=training_text,
                select_rows=self.select_rows(ctx, model),
            )
            ctx.timings[f"extract.{model.name}"] = stats
            logger.info(
                "extract: %s, %d tokens in %.1f s -> %s", model.name, stats["tokens"], stats["stage_seconds"], store
            )
