"""The ``report`` stage: figures and ``report.html`` / ``report.md`` under ``<workdir>/report``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

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
        return config_hash({"metrics": MetricsStage().fingerprint(ctx), "train": train})

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
        (self.directory(ctx) / "done.json").write_text(json.dumps({"key": self._key(ctx)}), encoding="utf-8")
        logger.info("report: %s", page)
