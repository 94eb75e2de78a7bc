"""The ``trajectory`` stage: the analyses of ``metrics.trajectory`` on every checkpoint that
``train.checkpoints`` kept (:mod:`evolution.trajectory`), one snapshot store per checkpoint,
then ``trajectory.zarr``. Does nothing without ``metrics.trajectory``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from evolution.provenance import config_hash
from pipelines.stages.base import Context, Stage
from pipelines.stages.extract import ExtractStage
from pipelines.stages.metrics import MetricsStage

logger = logging.getLogger(__name__)

__all__ = ["TrajectoryStage"]


class TrajectoryStage(Stage):
    name = "trajectory"
    after = ("metrics",)
    uses_cluster = True

    def path(self, ctx: Context) -> Path:
        return ctx.workdir / "trajectory.zarr"

    def snapshot(self, ctx: Context, update: int) -> Path:
        return ctx.workdir / "trajectory" / f"update-{update}" / "metrics.zarr"

    def checkpoints(self, ctx: Context) -> dict:
        from evolution.trajectory import checkpoint_models

        cfg = ctx.config
        if cfg.metrics.trajectory is None:
            return {}
        return ctx.memo("trajectory.models", lambda: checkpoint_models(cfg.train, cfg.seed))

    def _finals(self, ctx: Context) -> dict:
        """``objective -> ModelConfig`` of the base runs' final models (added where the config lists none)."""
        from evolution.config import ModelConfig
        from evolution.trajectory import base_runs

        listed = {m.run_name: m for m in ctx.config.models if m.kind == "trained" and m.update is None}
        return {o: listed.get(r, ModelConfig(name=r, kind="trained")) for o, r in
                base_runs(ctx.config.train, ctx.config.seed).items()}

    def _snapshot_key(self, ctx: Context, update: int) -> str:
        from evolution.analyses import enabled
        from evolution.trajectory import snapshot_config

        cfg = ctx.config
        metrics = snapshot_config(cfg.metrics, cfg.metrics.trajectory)
        extract = ExtractStage()
        models = [*self.checkpoints(ctx)[update], *self._finals(ctx).values()]
        return config_hash({"metrics": MetricsStage()._config_of(metrics), "seed": cfg.seed,
                            "trajectory": cfg.metrics.trajectory.model_dump(mode="json"),
                            "analyses": {a.name: [a.version, a.layout] for a in enabled(metrics)},
                            "models": {m.name: extract.model_key(ctx, m) for m in models}})

    def _todo(self, ctx: Context) -> list[int]:
        from evolution.metrics.results import metrics_fingerprint

        return [u for u in self.checkpoints(ctx) if self.name in ctx.force or
                metrics_fingerprint(str(self.snapshot(ctx, u))) != self._snapshot_key(ctx, u)]

    def off(self, ctx: Context) -> str | None:
        return None if self.checkpoints(ctx) else "off (metrics.trajectory off, or no kept checkpoints)"

    def pending(self, ctx: Context) -> list[str]:
        from evolution.metrics.results import metrics_fingerprint

        if self.off(ctx):
            return []
        todo = self._todo(ctx)
        lines = [f"trajectory: checkpoint at update {u} ({', '.join(m.name for m in self.checkpoints(ctx)[u])}) "
                 f"-> {self.snapshot(ctx, u)}" for u in todo]
        if todo or MetricsStage().pending(ctx) or metrics_fingerprint(str(self.path(ctx))) != self._key(ctx):
            lines.append(f"trajectory: curves and verdicts per checkpoint -> {self.path(ctx)}")
        return lines

    def _key(self, ctx: Context) -> str:
        return config_hash({"final": MetricsStage().fingerprint(ctx),
                            "snapshots": {u: self._snapshot_key(ctx, u) for u in self.checkpoints(ctx)}})

    def run(self, ctx: Context) -> None:
        from evolution.analyses import enabled
        from evolution.analyses.runner import run_analyses
        from evolution.analyses.to_final import ToFinal
        from evolution.metrics.results import write_metrics
        from evolution.trajectory import base_runs, collect, snapshot_config

        if not self.pending(ctx):
            if self.checkpoints(ctx):
                logger.info("trajectory: cached at %s", self.path(ctx))
            elif ctx.config.train is not None and ctx.config.train.checkpoints is not None:
                logger.info("trajectory: checkpoints are kept (train.checkpoints) but not analysed; "
                            "set metrics.trajectory: {} to analyse them")
            return
        cfg, metrics_stage = ctx.config, MetricsStage()
        trajectory = cfg.metrics.trajectory
        metrics = snapshot_config(cfg.metrics, trajectory)
        finals = self._finals(ctx)
        todo = self._todo(ctx)
        objective = {n: spec["objective"] for n, spec in cfg.train.runs(cfg.seed).items()}
        extra = [m for m in finals.values() if m.name not in {x.name for x in cfg.models}]
        if extra:  # the final model of an objective that the config does not analyse itself
            ExtractStage().extract_models(ctx, extra)
        for update in todo:
            t0 = time.perf_counter()
            models = self.checkpoints(ctx)[update]
            ExtractStage().extract_models(ctx, models)
            inputs = metrics_stage.inputs(ctx, models=models, metrics=metrics)
            datasets = run_analyses(enabled(metrics), inputs, cache=metrics_stage.cache(ctx), client=ctx.client,
                                    progress=ctx.progress, force=self.name in ctx.force)
            pairs = metrics_stage.inputs(ctx, models=[*models, *finals.values()], metrics=metrics)
            pairs.attrs["finals"] = {m.name: finals[objective[m.run_name]].name for m in models}
            datasets.update(run_analyses([ToFinal(trajectory.methods)], pairs, cache=metrics_stage.cache(ctx),
                                         client=ctx.client, progress=ctx.progress, force=self.name in ctx.force))
            for ds in datasets.values():
                ds.attrs["update"] = update
            write_metrics(str(self.snapshot(ctx, update)), datasets, fingerprint=self._snapshot_key(ctx, update))
            logger.info("trajectory: update %d (%s) in %.1f s -> %s", update, ", ".join(m.name for m in models),
                        time.perf_counter() - t0, self.snapshot(ctx, update))
        runs = base_runs(cfg.train, cfg.seed)
        totals = {o: getattr(cfg.train.updates, o) for o in runs}
        groups = collect(metrics_stage.path(ctx), {u: self.snapshot(ctx, u) for u in self.checkpoints(ctx)},
                         runs=runs, finals={o: finals[o].name for o in runs}, totals=totals)
        for ds in groups.values():
            ds.attrs.update({"trajectory": trajectory.model_dump(mode="json"), "seed": cfg.seed,
                             "checkpoints": cfg.train.checkpoints.model_dump(mode="json")})
        write_metrics(str(self.path(ctx)), groups, fingerprint=self._key(ctx))
        logger.info("trajectory: %d checkpoints -> %s", len(self.checkpoints(ctx)), self.path(ctx))
