"""The report: every analysis's figures and per-layer tables in ``report.html`` / ``report.md``."""

from evolution.report.figures import draw_all
from evolution.report.write import write_report

__all__ = ["draw_all", "write_report"]
