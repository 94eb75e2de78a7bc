"""Draw every figure of the report. Each analysis owns its figures
(:attr:`evolution.analyses.base.Analysis.figures`: one function per figure,
taking the metrics store path and returning a matplotlib Figure or None when
its group is absent); the notebook calls the same functions, so the report
and the notebook cannot disagree.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["draw_all"]


def draw_all(path, out_dir) -> list[tuple[str, Path, str]]:
    """Draw every figure that the store supports into ``out_dir`` as PNG.
    Returns (name, file, caption) per figure drawn."""
    from evolution.analyses import figures
    from evolution.analyses.plotting import plt

    pyplot = plt()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, (fn, caption) in figures(path).items():
        fig = fn(path)
        if fig is None:
            continue
        f = out_dir / f"{name}.png"
        fig.savefig(f, dpi=110, bbox_inches="tight")
        pyplot.close(fig)
        drawn.append((name, f, caption))
    return drawn
