"""The ``report`` stage: figures and ``report.html`` / ``report.md`` under ``<workdir>/report``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from evolution.config import ConfigError, resolved_dict
from evolution.provenance import config_hash
from pipelines.stages.base import Context, Stage
from pipelines.stages.metrics import MetricsStage
from pipelines.stages.train import TrainStage
from pipelines.stages.trajectory import TrajectoryStage

logger = logging.getLogger(__name__)

__all__ = ["ReportStage"]


class ReportStage(Stage):
    name = "report"
    after = ("metrics", "trajectory")

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "report"

    #: bumped when the page's structure changes, so that a cached report is written again
    LAYOUT = 2

    def _key(self, ctx: Context) -> str:
        train = TrainStage().key(ctx) if ctx.config.train is not None else None
        key = {
            "metrics": MetricsStage().fingerprint(ctx),
            "train": train,
            "report": resolved_dict(ctx.config.report),
            "layout": self.LAYOUT,
        }
        if TrajectoryStage().checkpoints(ctx):
            key["trajectory"] = TrajectoryStage()._key(ctx)
        if TrainStage().evaluation(ctx) is None:  # the shipped models' table: redrawn when their scores change
            shipped = self._training(ctx)
            if shipped is not None:
                key["shipped"] = shipped
        return config_hash(key)

    def _corpus_meta(self, ctx: Context) -> dict | None:
        """The corpus stage's ``meta.json`` (what was analysed) without its per-sentence lists;
        None when it is not there."""
        from pipelines.stages.corpus import CorpusStage

        path = CorpusStage().directory(ctx) / "meta.json"
        if not path.is_file():
            return None
        meta = json.loads(path.read_text(encoding="utf-8"))
        return {k: v for k, v in meta.items() if k not in ("lines", "refs")}

    def _training(self, ctx: Context) -> dict | None:
        """The train stage's ``eval.json``; without one (every model given), the shipped models'
        summary (:func:`~evolution.models.shipped_format.shipped_summary`: updates and stored test
        scores), so that a run on shipped weights still says what the models are."""
        from evolution.models.shipped_format import shipped_summary

        training = TrainStage().evaluation(ctx)
        if training is not None:
            return training
        # (a shipped model's path is required)
        return shipped_summary(
            {m.name: m.path for m in ctx.config.models if m.kind == "shipped" and m.path is not None}
        )

    def _views_data(self, ctx: Context) -> dict | None:
        """The data of ``views.html`` (Vig 2019) for the models extracted with attention; None
        without ``report.views`` or attention. Read before anything is written, so that a bad
        sentence choice leaves the previous report in place."""
        from evolution.report.views import views_data
        from evolution.store import has_attention
        from pipelines.stages.extract import ExtractStage

        vcfg = ctx.config.report.views
        if vcfg is None:
            return None
        store = ExtractStage().store(ctx)
        models = [
            m
            for m in ctx.config.models
            if has_attention(store, m.name) and (vcfg.models is None or m.name in vcfg.models)
        ]
        if not models:
            return None
        try:
            return views_data(
                store,
                {m.name: ExtractStage().spec(ctx, m) for m in models},
                sentences=vcfg.sentences,
                top_k=vcfg.top_k,
                neuron=vcfg.neuron,
                word_rule=ctx.config.metrics.heads.word_rule if ctx.config.metrics.heads else "mean",
            )
        except ValueError as exc:
            raise ConfigError(f"report.views.sentences: {exc}") from None

    def pending(self, ctx: Context) -> list[str]:
        done = self.directory(ctx) / "done.json"
        if (
            self.name not in ctx.force
            and not MetricsStage().pending(ctx)
            and not TrajectoryStage().pending(ctx)
            and done.is_file()
            and json.loads(done.read_text(encoding="utf-8")).get("key") == self._key(ctx)
        ):
            return []
        return [f"report: figures and report.html -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        from evolution.report import write_report

        if not self.pending(ctx):
            logger.info("report: cached at %s", self.directory(ctx))
            return
        from evolution.report.views import write_views

        views = self._views_data(ctx)
        links: list[tuple[str, str, str]] = []
        pages: dict[str, Callable[[Path], object]] = {}  # file name -> what writes it
        if views is not None:
            shown = sorted({s["sentence"] for m in views["models"] for s in m["sentences"]})
            links.append(
                (
                    "views.html",
                    "Attention views",
                    f"Vig 2019: head, model and neuron view of corpus sentences "
                    f"{', '.join(map(str, shown))}; static, works offline",
                )
            )
            # written into the report directory before the page, so that the page links to a file that exists
            pages["views.html"] = lambda path: write_views(
                path, views, title=f"evolution: {ctx.config.workdir.name}: attention views"
            )
        trajectory = TrajectoryStage().path(ctx)
        if TrajectoryStage().checkpoints(ctx) and trajectory.exists():
            from evolution.report.scorecard import scorecard
            from evolution.report.trajectory import write_trajectory_page

            links.append(
                (
                    "trajectory.html",
                    "Trajectory over training",
                    "the scorecard per checkpoint kept in training: when each finding first holds",
                )
            )
            pages["trajectory.html"] = lambda path: write_trajectory_page(
                path,
                trajectory,
                title=f"evolution: {ctx.config.workdir.name}: trajectory over training",
                findings=scorecard(MetricsStage().path(ctx)),
            )
        page = write_report(
            MetricsStage().path(ctx),
            self.directory(ctx),
            links=links,
            pages=pages,
            title=f"evolution: {ctx.config.workdir.name}",
            training=self._training(ctx),
            corpus=self._corpus_meta(ctx),
            workdir=ctx.workdir,
        )
        (self.directory(ctx) / "done.json").write_text(json.dumps({"key": self._key(ctx)}), encoding="utf-8")
        logger.info("report: %s", page)
