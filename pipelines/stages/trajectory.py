"""The ``trajectory`` stage: the analyses of ``metrics.trajectory`` on every checkpoint that
``train.checkpoints`` kept (:mod:`evolution.trajectory`), one snapshot store per checkpoint,
then ``trajectory.zarr``. Does nothing without ``metrics.trajectory``."""

from __future__ import annotations

import logging
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

    def rows(self, ctx: Context) -> list:
        """The trajectory's rows (:class:`evolution.trajectory.Row`): each objective's base run with
        its kept checkpoints, and each checkpoint series of ``models``."""
        from evolution.trajectory import series_rows, trained_rows

        cfg = ctx.config
        if cfg.metrics.trajectory is None:
            return []
        return ctx.memo(
            "trajectory.rows", lambda: [*trained_rows(cfg.train, cfg.seed, cfg.models), *series_rows(cfg.series())]
        )

    def checkpoints(self, ctx: Context) -> dict:
        """``step -> models`` of every snapshot."""
        from evolution.trajectory import checkpoint_models

        return checkpoint_models(self.rows(ctx))

    def _snapshot_key(self, ctx: Context, update: int) -> str:
        from evolution.analyses import enabled
        from evolution.analyses.to_final import ToFinal, settings_read
        from evolution.snapshots import snapshot_config, to_final_config
        from evolution.trajectory import final_of

        cfg = ctx.config
        trajectory = cfg.metrics.trajectory
        if trajectory is None:
            raise ValueError("trajectory: metrics.trajectory is off; there is no snapshot to key")
        metrics = snapshot_config(cfg.metrics, trajectory)
        extract = ExtractStage()
        models = self.checkpoints(ctx)[update]
        finals = final_of(self.rows(ctx))
        models = [*models, *{finals[m.name].name: finals[m.name] for m in models}.values()]
        return config_hash(
            {
                "metrics": MetricsStage()._config_of(metrics),
                "seed": cfg.seed,
                "trajectory": trajectory.model_dump(mode="json"),
                "analyses": {a.name: [a.version, a.layout] for a in enabled(metrics)},
                "models": {m.name: extract.model_key(ctx, m) for m in models},
                # the distance to the final model reads the run's similarity settings even where the
                # snapshot does not run the similarity analysis (evolution.snapshots.to_final_config)
                "to_final": [
                    ToFinal.version,
                    ToFinal.layout,
                    settings_read(to_final_config(metrics, cfg.metrics.similarity).similarity),
                ],
            }
        )

    def _todo(self, ctx: Context) -> list[int]:
        from evolution.metrics.results import metrics_fingerprint

        return [
            u
            for u in self.checkpoints(ctx)
            if self.name in ctx.force or metrics_fingerprint(str(self.snapshot(ctx, u))) != self._snapshot_key(ctx, u)
        ]

    def off(self, ctx: Context) -> str | None:
        return None if self.checkpoints(ctx) else "off (metrics.trajectory off, or no kept checkpoints or series)"

    def pending(self, ctx: Context) -> list[str]:
        from evolution.metrics.results import metrics_fingerprint

        if self.off(ctx):
            return []
        todo = self._todo(ctx)
        lines = [
            f"trajectory: checkpoint at step {u} ({', '.join(m.name for m in self.checkpoints(ctx)[u])}) "
            f"-> {self.snapshot(ctx, u)}"
            for u in todo
        ]
        if todo or MetricsStage().pending(ctx) or metrics_fingerprint(str(self.path(ctx))) != self._key(ctx):
            lines.append(f"trajectory: curves and verdicts per checkpoint -> {self.path(ctx)}")
        return lines

    def _key(self, ctx: Context) -> str:
        return config_hash(
            {
                "final": MetricsStage().fingerprint(ctx),
                "snapshots": {u: self._snapshot_key(ctx, u) for u in self.checkpoints(ctx)},
            }
        )

    def run(self, ctx: Context) -> None:
        from evolution.analyses.runner import run_analyses
        from evolution.metrics.results import write_metrics
        from evolution.snapshots import run_snapshots
        from evolution.trajectory import collect

        if not self.pending(ctx):
            if self.checkpoints(ctx):
                logger.info("trajectory: cached at %s", self.path(ctx))
            elif ctx.config.train is not None and ctx.config.train.checkpoints is not None:
                logger.info(
                    "trajectory: checkpoints are kept (train.checkpoints) but not analysed; "
                    "set metrics.trajectory: {} to analyse them"
                )
            return
        cfg, metrics_stage = ctx.config, MetricsStage()
        trajectory = cfg.metrics.trajectory
        assert trajectory is not None  # pending() is empty without it
        rows = self.rows(ctx)
        extra = [r.final for r in rows if r.final.name not in {x.name for x in cfg.models}]
        if extra:  # the final model of an objective that the config does not analyse itself
            ExtractStage().extract_models(ctx, extra)
        by_name = {m.name: m for r in rows for m in [*r.members.values(), r.final]}

        def inputs(names, metrics):
            return metrics_stage.inputs(ctx, models=[by_name[n] for n in names], metrics=metrics)

        def run(analyses, inputs):
            return run_analyses(
                analyses,
                inputs,
                cache=metrics_stage.cache(ctx),
                client=ctx.client,
                progress=ctx.progress,
                force=self.name in ctx.force,
            )

        def write(update, datasets):
            write_metrics(str(self.snapshot(ctx, update)), datasets, fingerprint=self._snapshot_key(ctx, update))
            return self.snapshot(ctx, update)

        def before(update, models, done, todo):
            self._extract_members(ctx, models, done=done, todo=todo)

        run_snapshots(
            rows,
            metrics=cfg.metrics,
            trajectory=trajectory,
            inputs=inputs,
            run=run,
            write=write,
            steps=self._todo(ctx),
            before=before,
        )
        groups = collect(metrics_stage.path(ctx), {u: self.snapshot(ctx, u) for u in self.checkpoints(ctx)}, rows=rows)
        same = self._same_weights(rows)
        provenance = {
            "trajectory": trajectory.model_dump(mode="json"),
            "seed": cfg.seed,
            "series": {
                r.label: {str(u): _origin(m) for u, m in [*r.members.items(), (r.final_step, r.final)]}
                for r in rows
                if r.final.series is not None
            },
        }
        if same:
            provenance["same_weights"] = same
        if cfg.train is not None and cfg.train.checkpoints is not None:
            provenance["checkpoints"] = cfg.train.checkpoints.model_dump(mode="json")
        for ds in groups.values():
            ds.attrs.update(provenance)
        write_metrics(str(self.path(ctx)), groups, fingerprint=self._key(ctx))
        logger.info("trajectory: %d checkpoints -> %s", len(self.checkpoints(ctx)), self.path(ctx))

    @staticmethod
    def _same_weights(rows: list) -> dict[str, list[list[str]]]:
        """``series -> groups of members with byte-identical weights`` (:func:`evolution.series.same_weights`),
        each logged as a warning: such steps are one model, and the trajectory stands still there."""
        from evolution.series import same_weights

        out = {}
        for r in rows:
            if r.final.series is None:
                continue
            groups = same_weights([*r.members.values(), r.final])
            if groups:
                out[r.label] = groups
                for names in groups:
                    logger.warning(
                        "trajectory: series %r: %s hold byte-identical weights, so they are one model "
                        "at different steps (the checkpoint source serves one file under several "
                        "names; check it, or leave the copies out of the series)",
                        r.label,
                        ", ".join(names),
                    )
        return out

    def _extract_members(self, ctx: Context, models: list, *, done: int, todo: int) -> None:
        """Extract ``models`` one at a time; a member that fails names itself and the fix, and the
        members extracted before it stay in the store (each is a complete group of its own)."""
        from evolution.models.base import ModelLoadError

        for m in models:
            try:
                ExtractStage().extract_models(ctx, [m])
            except Exception as exc:  # noqa: BLE001 - any loading or forward failure of one member
                what = f"series {m.series!r}" if m.series else f"run {m.run_name!r}"
                source = m.revision and f"revision {m.revision!r} of {m.hub_id}" or str(m.path or "its checkpoint")
                raise ModelLoadError(
                    f"trajectory: {what}, member {m.name} ({source}) cannot be extracted: {type(exc).__name__}: "
                    f"{exc}. Fix or replace that checkpoint, or leave it out of the series ('revisions' / the "
                    f"'checkpoints' glob); {done} snapshot(s) of this run and the members extracted so far stay in "
                    "the store and are not recomputed."
                ) from exc


def _origin(m) -> str:
    """Where a series member's weights come from: ``hub_id@revision`` or its path's name."""
    return f"{m.hub_id}@{m.revision}" if m.revision else (Path(str(m.path)).name if m.path else m.name)
