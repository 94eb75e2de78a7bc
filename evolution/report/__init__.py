"""Figures and the static report, drawn from ``metrics.zarr`` only."""

from evolution.report.figures import FIGURES, draw_all
from evolution.report.write import write_report

__all__ = ["FIGURES", "draw_all", "write_report"]
