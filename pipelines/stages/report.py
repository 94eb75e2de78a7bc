"""The ``report`` stage: figures and ``report.html`` / ``report.md`` under ``<workdir>/report``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from evolution.config import ConfigError, resolved_dict
from evolution.provenance import config_hash
from pipelines.stages.base import Context, Stage
from pipelines.stages.metrics import MetricsStage
from pipelines.stages.train import TrainStage

logger = logging.getLogger(__name__)

__all__ = ["ReportStage"]


class ReportStage(Stage):
    name = "report"
    after = ("metrics",)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "report"

    def _key(self, ctx: Context) -> str:
        train = TrainStage().key(ctx) if ctx.config.train is not None else None
        return config_hash({"metrics": MetricsStage().fingerprint(ctx), "train": train,
                            "report": resolved_dict(ctx.config.report)})

    def _views_data(self, ctx: Context) -> dict | None:
        """The data of ``views.html`` (Vig 2019) for the models extracted with attention; None
        without ``report.views`` or attention. Read before anything is written, so that a bad
        sentence choice leaves the previous report in place."""
        from evolution.report.views import views_data
        from evolution.store import has_attention
        from pipelines.stages.extract import ExtractStage

        vcfg = ctx.config.report.views
        store = ExtractStage().store(ctx)
        models = [m for m in ctx.config.models if has_attention(store, m.name)]
        if vcfg is None or not models:
            return None
        try:
            return views_data(store, {m.name: ExtractStage().spec(ctx, m) for m in models},
                              sentences=vcfg.sentences, top_k=vcfg.top_k, neuron=vcfg.neuron)
        except ValueError as exc:
            raise ConfigError(f"report.views.sentences: {exc}") from None

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
        from evolution.report.views import write_views

        views = self._views_data(ctx)
        links = []
        if views is not None:
            shown = sorted({s["sentence"] for m in views["models"] for s in m["sentences"]})
            links.append(("views.html", "Attention views", f"Vig 2019: head, model and neuron view of corpus sentences "
                                                           f"{', '.join(map(str, shown))}; static, works offline"))
        page = write_report(MetricsStage().path(ctx), self.directory(ctx), links=links,
                            title=f"evolution: {ctx.config.workdir.name}", training=TrainStage().evaluation(ctx))
        if views is not None:
            logger.info("report: %s", write_views(self.directory(ctx) / "views.html", views,
                                                  title=f"evolution: {ctx.config.workdir.name}: attention views"))
        (self.directory(ctx) / "done.json").write_text(json.dumps({"key": self._key(ctx)}), encoding="utf-8")
        logger.info("report: %s", page)
