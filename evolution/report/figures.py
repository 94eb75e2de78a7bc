"""Draw every figure of the report. Each analysis owns its figures
(:attr:`evolution.analyses.base.Analysis.figures`: one function per figure,
taking the metrics store path and returning a matplotlib Figure or None when
its group is absent); the notebook calls the same functions, so the report
and the notebook cannot disagree. Beside each figure, the numbers it plots
(:func:`evolution.analyses.plotting.figure_data`) as CSV.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["draw_all", "FORMATS"]

#: the image formats :func:`draw_all` can write
FORMATS = ("png", "svg", "pdf")
#: no creation date in the files: the same store draws the same bytes
_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


def draw_all(path, out_dir, *, formats: Iterable[str] = ("png",), svg: bool = False) -> list[tuple[str, Path, str]]:
    """Draw every figure that the store supports into ``out_dir``: ``<name>.png`` (and
    ``<name>.svg`` with ``svg`` or "svg" in ``formats``, any of :data:`FORMATS`) at
    :data:`~evolution.analyses.plotting.DPI`, and ``<name>.csv``, the plotted numbers as a
    long table (one row per value, columns named as the store's dimensions).
    Returns (name, file of the first format, caption) per figure drawn."""
    from evolution.analyses import figures
    from evolution.analyses.plotting import DPI, figure_data, plt

    formats = list(dict.fromkeys([*formats, *(["svg"] if svg else [])]))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"draw_all: formats {unknown or formats} unknown; use some of {', '.join(FORMATS)}")
    pyplot = plt()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, (fn, caption) in figures(path).items():
        fig = fn(path)
        if fig is None:
            continue
        files = [out_dir / f"{name}.{fmt}" for fmt in formats]
        for f, fmt in zip(files, formats, strict=True):
            fig.savefig(f, dpi=DPI, bbox_inches="tight", metadata=_METADATA.get(fmt))
        figure_data(fig).to_csv(out_dir / f"{name}.csv", index=False)
        pyplot.close(fig)
        drawn.append((name, files[0], caption))
    return drawn
