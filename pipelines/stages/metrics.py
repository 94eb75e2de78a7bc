"""The ``metrics`` stage: every analysis of :mod:`evolution.analyses` over the
representation store, into ``<workdir>/metrics.zarr``.

Unit results are cached in ``<workdir>/metrics/cache`` (keyed per unit, so
adding a model computes only its units; written by this process, never by
workers); ``metrics.zarr`` (or ``metrics.store``, which may be an fsspec URL)
is rebuilt from them, its fingerprint written last. The index arrays that
tasks read go to ``metrics-inputs`` beside the representation store
(:func:`evolution.location.inputs_dir`), where every worker that reads the
store can read them.
"""

from __future__ import annotations

import logging
import time

from evolution import location
from evolution.corpus import layout as corpus_layout
from evolution.provenance import config_hash, versions
from pipelines.stages.base import Context, Stage
from pipelines.stages.corpus import CorpusStage
from pipelines.stages.extract import ExtractStage

logger = logging.getLogger(__name__)

__all__ = ["MetricsStage"]


class MetricsStage(Stage):
    name = "metrics"
    after = ("extract",)
    uses_cluster = True

    def path(self, ctx: Context) -> str:
        """The metrics store: ``metrics.store`` (a path or an fsspec URL), default ``<workdir>/metrics.zarr``."""
        return ctx.config.metrics.store or str(ctx.workdir / "metrics.zarr")

    @staticmethod
    def _config(ctx: Context) -> dict:
        """The metrics config without ``store``: where the metrics go is not what they are."""
        return MetricsStage._config_of(ctx.config.metrics)

    @staticmethod
    def _config_of(metrics) -> dict:
        """A ``metrics`` section for a key, without ``store``, ``device`` and ``reuse`` (where the metrics
        go, run and may be copied from is not what they are; :meth:`~evolution.config.base._Section.keyed`)."""
        return {k: v for k, v in metrics.keyed().items() if k not in ("store", "device", "reuse")}

    def fingerprint(self, ctx: Context) -> str:
        """What ``metrics.zarr`` depends on: the metrics config, the analyses' versions,
        the seed and every model's extraction key."""
        from evolution.analyses import enabled

        return config_hash(
            {
                "metrics": self._config(ctx),
                "seed": ctx.config.seed,
                "analyses": {a.name: [a.version, a.layout] for a in enabled(ctx.config.metrics)},
                "models": {m.name: ExtractStage().model_key(ctx, m) for m in ctx.config.models},
            }
        )

    def pending(self, ctx: Context) -> list[str]:
        from evolution.metrics.results import check_metrics_store, metrics_fingerprint

        check_metrics_store(self.path(ctx))  # before any cluster or write: a foreign store stops the run here
        if (
            self.name not in ctx.force
            and ExtractStage().pending(ctx) == []
            and metrics_fingerprint(self.path(ctx)) == self.fingerprint(ctx)
        ):
            return []
        return [f"metrics: {', '.join(m.name for m in ctx.config.models)} -> {self.path(ctx)}"]

    @staticmethod
    def runs(ctx: Context, models=None) -> dict[str, dict]:
        """``model -> {objective, seed, token_dropout}`` for this project's models (default: the
        config's): the train section's runs (``kind: trained``, a kept checkpoint being its run's)
        and what a shipped model's ``model.json`` records."""
        from evolution.models.kinds import kind_of

        cfg = ctx.config
        runs = cfg.train.runs(cfg.seed) if cfg.train is not None else {}
        out = {}
        for m in cfg.models if models is None else models:
            if m.kind == "trained" and m.run_name in runs:
                out[m.name] = runs[m.run_name]
            elif (recorded := kind_of(m.kind).recorded_run) is not None and m.path is not None:
                out[m.name] = recorded(m.path)
        return out

    def inputs(self, ctx: Context, *, models, metrics):
        """The analyses' :class:`~evolution.analyses.base.Inputs` of ``models`` (extracted
        ``ModelConfig`` s) under the ``metrics`` config section."""
        from evolution.analyses.inputs import ModelSource, load_inputs

        extract, cfg = ExtractStage(), ctx.config
        store = extract.store(ctx)
        sources = [
            ModelSource(
                name=m.name,
                kind=m.kind,
                key=extract.model_key(ctx, m),
                spec=extract.spec(ctx, m),
                objective=m.objective,
            )
            for m in models
        ]
        config = self._config_of(metrics)
        attrs = {
            "config": config,
            "seed": cfg.seed,
            "versions": versions(),
            "representations": store,
            "extract_keys": {s.name: s.key for s in sources},
            # which trained run each model is (objective, seed, token dropout): the report's scorecard
            # tells base models from their seed and token-dropout controls by it
            "runs": self.runs(ctx, models),
        }
        return load_inputs(
            store=store,
            models=sources,
            config=metrics,
            seed=cfg.seed,
            torch_threads=cfg.extract.torch_threads,
            max_batch_tokens=cfg.extract.max_batch_tokens,
            arrays_dir=location.inputs_dir(store),
            attrs=attrs,
            targets=corpus_layout.load_targets(CorpusStage().directory(ctx)),
        )

    def plan(self, ctx: Context) -> list[str]:
        """Log the plan of the metrics units not yet cached (:mod:`evolution.analyses.cost`),
        computing none: what ``--plan`` prints once the extraction is in the store."""
        from evolution.analyses import enabled
        from evolution.analyses.runner import log_metrics_plan, reused_file, unit_file
        from pipelines.cluster import planned_memory_limit, planned_workers
        from pipelines.plan import gemm_rate

        cfg = ctx.config
        inputs = self.inputs(ctx, models=cfg.models, metrics=cfg.metrics)
        cache, force, reuse = self.cache(ctx), self.name in ctx.force, cfg.metrics.reuse or ()

        def done(a, u) -> bool:  # cached, or copied from metrics.reuse, as run_analyses decides
            f = unit_file(cache, a, u)
            return not force and (f.is_file() or reused_file(f, reuse) is not None)

        todo = [(a, u) for a in enabled(cfg.metrics) for u in a.units(inputs) if not done(a, u)]
        if not todo:
            logger.info("plan: every metrics unit is cached")
            return []
        rate = ctx.memo("plan.gemm", lambda: gemm_rate(0.25))
        return log_metrics_plan(
            todo, inputs, rate=rate, workers=planned_workers(ctx), memory_limit=planned_memory_limit(ctx)
        )

    def run(self, ctx: Context) -> None:
        from evolution.analyses import enabled
        from evolution.analyses.runner import run_analyses
        from evolution.metrics.results import write_metrics
        from pipelines.cluster import planned_workers
        from pipelines.plan import gemm_rate

        if not self.pending(ctx):
            logger.info("metrics: cached at %s", self.path(ctx))
            return
        t0 = time.perf_counter()
        cfg = ctx.config
        if cfg.metrics.device:
            from evolution.config import ConfigError
            from evolution.models.device import resolve_device

            try:
                logger.info("metrics: dense products on %s (metrics.device)", resolve_device(cfg.metrics.device))
            except ValueError as exc:
                raise ConfigError(f"metrics.device: {exc}") from None
        inputs = self.inputs(ctx, models=cfg.models, metrics=cfg.metrics)
        datasets = run_analyses(
            enabled(cfg.metrics),
            inputs,
            cache=self.cache(ctx),
            client=ctx.client,
            progress=ctx.progress,
            force=self.name in ctx.force,
            reuse=cfg.metrics.reuse or (),
            profile=ctx.workdir / "metrics" / "profile.jsonl",
            rate=ctx.memo("plan.gemm", lambda: gemm_rate(0.25)),
            workers=planned_workers(ctx),
        )
        write_metrics(self.path(ctx), datasets, fingerprint=self.fingerprint(ctx))
        logger.info(
            "metrics: %s in %.1f s -> %s", ", ".join(sorted(datasets)), time.perf_counter() - t0, self.path(ctx)
        )

    @staticmethod
    def cache(ctx: Context):
        """Where unit results are cached (keyed per unit: shared by every run of the workdir)."""
        return ctx.workdir / "metrics" / "cache"
