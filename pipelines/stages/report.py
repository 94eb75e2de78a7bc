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

    def _views(self, ctx: Context, page: Path) -> None:
        """``views.html`` (Vig 2019) for the models extracted with attention, linked from the report."""
        from evolution.report.views import views_data, write_views
        from evolution.store import has_attention
        from pipelines.stages.extract import ExtractStage

        vcfg = ctx.config.report.views
        store = ExtractStage().store(ctx)
        models = [m for m in ctx.config.models if has_attention(store, m.name)]
        if vcfg is None or not models:
            return
        try:
            data = views_data(store, {m.name: ExtractStage().spec(ctx, m) for m in models},
                              sentences=vcfg.sentences, top_k=vcfg.top_k, neuron=vcfg.neuron)
        except ValueError as exc:
            raise ConfigError(f"report.views.sentences: {exc}") from None
        views = write_views(self.directory(ctx) / "views.html", data,
                            title=f"evolution: {ctx.config.workdir.name}: attention views")
        text = page.read_text(encoding="utf-8")
        shown = sorted({s["sentence"] for m in data["models"] for s in m["sentences"]})
        link = (f'<p><a href="{views.name}">Attention views</a> (Vig 2019: head, model and neuron view of corpus '
                f'sentences {", ".join(map(str, shown))}; static, works offline).</p>')
        page.write_text(text.replace("</h1>", "</h1>\n" + link, 1), encoding="utf-8")
        logger.info("report: %s", views)

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
                            title=f"evolution: {ctx.config.workdir.name}", training=TrainStage().evaluation(ctx))
        self._views(ctx, page)
        (self.directory(ctx) / "done.json").write_text(json.dumps({"key": self._key(ctx)}), encoding="utf-8")
        logger.info("report: %s", page)
