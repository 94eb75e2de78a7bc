"""What the analyses' figures share: the report's size and fonts, the model styles,
matplotlib set-up, opening a group, legends outside the data, colour scales fit to the
data, and the numbers behind a figure.

Every figure function takes the metrics store path and returns a matplotlib Figure (or
None when its group is absent). Decorated with :func:`figure`, it draws in the report's
style (:data:`RC`), no text below :data:`FONT`, and returns the figure with the numbers it
plots attached (:func:`figure_data`: a long table, one row per plotted value, columns
named as the store's dimensions), which :func:`evolution.report.figures.draw_all` writes
as CSV beside the PNG.

Size: the report's column is 1,068 CSS pixels wide (``evolution.report.page.COLUMN``
less its padding); a figure of at most :data:`WIDTH` inches saved at :data:`DPI` is
shown at its natural size there, so :data:`FONT` points are 12 pixels, about 9 points
on a 96-dpi screen. Wide figures are laid out in rows (:func:`panel_grid`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import xarray as xr

__all__ = [
    "STYLES",
    "DPI",
    "WIDTH",
    "FONT",
    "RC",
    "plt",
    "open_group",
    "figure",
    "finish",
    "figure_data",
    "artist_data",
    "tidy",
    "concat",
    "panel_grid",
    "label_edges",
    "legend_below",
    "legend_beside",
    "legend_right",
    "robust_range",
    "scale_label",
    "by_group_panels",
    "adjacent_change_figure",
]

#: Distinct colour + line style + marker per model, so coinciding curves stay visible.
STYLES = [
    dict(color=c, linestyle=ls, marker=mk)
    for c, ls, mk in [
        ("tab:blue", "-", "o"),
        ("tab:orange", "--", "s"),
        ("tab:green", ":", "^"),
        ("tab:red", "-.", "D"),
        ("tab:purple", "-", "v"),
        ("tab:brown", "--", "P"),
        ("tab:pink", ":", "X"),
        ("tab:gray", "-.", "*"),
        ("tab:olive", "-", "h"),
        ("tab:cyan", "--", "<"),
    ]
]  # 10: a run with 3 objectives and their controls

#: dots per inch of the report's PNGs
DPI = 110
#: the widest figure, inches: 1,056 pixels at :data:`DPI`, within the report's 1,068-pixel column
WIDTH = 9.6
#: the smallest font, points at :data:`DPI` (12 pixels: about 9 points on a 96-dpi screen)
FONT = 8.0
#: matplotlib settings every figure is drawn with
RC = {
    "font.size": 8.5,
    "axes.titlesize": 9.0,
    "axes.labelsize": 8.5,
    "xtick.labelsize": FONT,
    "ytick.labelsize": FONT,
    "legend.fontsize": FONT,
    "legend.title_fontsize": FONT,
    "figure.titlesize": 9.5,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
}

#: the attribute of a Figure that holds its numbers (:func:`figure_data`)
_DATA = "evolution_data"


def plt():
    """``matplotlib.pyplot`` on the Agg backend unless one is already chosen (Jupyter's inline
    backend, ``MPLBACKEND``, an earlier ``matplotlib.use``), which is kept."""
    import matplotlib

    chosen = getattr(matplotlib.rcParams, "_get_backend_or_none", lambda: None)()
    if chosen is None and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def open_group(path, group: str) -> xr.Dataset | None:
    """A ``metrics.zarr`` group loaded into memory (metrics are small), or None when absent."""
    from evolution.metrics.results import open_metrics

    try:
        return open_metrics(path, group).load()
    except (FileNotFoundError, KeyError, ValueError, OSError):
        return None


def figure(fn):
    """Decorate a figure function ``fn(path, ...)`` that returns None, a Figure, or
    (Figure, numbers: a pandas DataFrame): it draws with :data:`RC`, and the decorated
    function returns the Figure after :func:`finish` (None stays None)."""

    @functools.wraps(fn)
    def draw(path, *args, **kwargs):
        import matplotlib

        plt()
        with matplotlib.rc_context(RC):
            out = fn(path, *args, **kwargs)
            if out is None:
                return None
            fig, data = out if isinstance(out, tuple) else (out, None)
            return finish(fig, data)

    return draw


def finish(fig, data=None):
    """Raise every text of ``fig`` below :data:`FONT` to it (tick labels included, also those
    drawn later), attach ``data`` (:func:`figure_data`) and return ``fig``."""
    from matplotlib.text import Text

    for ax in fig.axes:
        ax.tick_params(labelsize=max(FONT, RC["xtick.labelsize"]))
    for t in fig.findobj(Text):
        if t.get_text() and t.get_fontsize() < FONT:
            t.set_fontsize(FONT)
    if data is not None:
        setattr(fig, _DATA, data.reset_index(drop=True))
    return fig


def figure_data(fig):
    """The numbers ``fig`` plots as a long table (pandas DataFrame): those its figure function
    attached (:func:`figure`), else what :func:`artist_data` reads off its artists."""
    data = getattr(fig, _DATA, None)
    return data if data is not None else artist_data(fig)


def artist_data(fig):
    """A long table of what ``fig``'s axes draw, for figures that attach none: per line its
    points (panel, series, x, y), per image its cells (panel, series, row, column, value), per
    scatter its points."""
    import pandas as pd
    from matplotlib.collections import PathCollection

    rows = []
    for i, ax in enumerate(fig.axes):
        panel = ax.get_title() or f"panel {i + 1}"
        for line in ax.get_lines():
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            label = line.get_label()
            rows += [dict(panel=panel, series=label, x=a, y=b) for a, b in zip(x, y, strict=True)]
        for im in ax.get_images():
            a = np.asarray(im.get_array(), dtype=float)
            rows += [
                dict(panel=panel, series=im.get_label(), row=r, column=c, value=a[r, c])
                for r in range(a.shape[0])
                for c in range(a.shape[1])
            ]
        for col in ax.collections:
            if isinstance(col, PathCollection):
                rows += [dict(panel=panel, series=col.get_label(), x=x, y=y) for x, y in col.get_offsets()]
    return pd.DataFrame(rows)


def tidy(da: xr.DataArray, quantity: str | None = None, **columns):
    """The values of ``da`` as a long table: one column per coordinate (dimension names as in
    the store), ``value``, and ``quantity`` and the ``columns`` given; NaN values left out."""
    import pandas as pd

    da = da.reset_coords(drop=False) if isinstance(da, xr.Dataset) else da
    if da.ndim:  # one column and row order whatever order the dimensions came in
        da = da.transpose(*sorted(da.dims, key=str))
    if da.ndim == 0:
        df = pd.DataFrame({"value": [da.item()]})
        for name, c in da.coords.items():
            df[name] = c.item()
    else:
        df = da.drop_vars([c for c in da.coords if da[c].ndim > 1]).to_dataframe(name="value").reset_index()
    df = df[np.isfinite(df["value"].astype(float))]
    for name in df.columns:
        if df[name].dtype.kind not in "biufcM":
            df[name] = df[name].astype(str)
    extra = {"quantity": quantity} if quantity is not None else {}
    extra.update(columns)
    for name, v in extra.items():
        df[name] = v
    # coordinates by name (a store's coordinate order follows its directory listing), the value last
    return df[[*extra, *sorted(c for c in df.columns if c not in extra and c != "value"), "value"]]


def concat(frames):
    """The long tables of ``frames`` as one (columns absent from one are empty there)."""
    import pandas as pd

    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def panel_grid(n: int, *, panel: tuple[float, float] = (2.4, 2.1), cols: int = 4, extra: float = 0.0, **kw):
    """A constrained-layout figure of ``n`` panels in rows of at most ``cols`` (fewer when
    ``panel`` width x ``cols`` exceeds :data:`WIDTH`), at most :data:`WIDTH` wide; ``extra``
    inches of height (a legend below). Returns (fig, the n axes in reading order)."""
    pyplot = plt()
    cols = max(1, min(cols, n, int(WIDTH / panel[0] + 1e-6) or 1))
    rows = -(-n // cols)
    fig, grid = pyplot.subplots(
        rows,
        cols,
        figsize=(min(WIDTH, panel[0] * cols), panel[1] * rows + extra),
        squeeze=False,
        layout="constrained",
        **kw,
    )
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def _columns(labels: list[str], width: float) -> int:
    """Legend columns that fit ``labels`` into ``width`` inches at :data:`FONT`."""
    longest = max((len(str(s)) for s in labels), default=1)
    entry = (0.6 * FONT * longest + 40) / 72  # text + handle + padding, inches
    return max(1, min(len(labels), int(width // entry)))


def legend_below(
    fig,
    handles=None,
    labels=None,
    *,
    title: str | None = None,
    ncol: int | None = None,
    loc: str = "outside lower center",
    **kw,
):
    """One legend for ``fig`` below its panels, outside every axes (constrained layout makes
    room); ``handles`` / ``labels`` default to the distinct labelled artists of its axes;
    ``kw``: further arguments of ``Figure.legend``."""
    if handles is None:
        seen: dict[str, Any] = {}  # label -> its first handle
        for ax in fig.axes:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(lab, h)
        labels, handles = list(seen), list(seen.values())
    if not handles:
        return None
    labels = labels if labels is not None else [h.get_label() for h in handles]
    fixed, ncol = ncol is not None, ncol or _columns(labels, fig.get_figwidth() - 0.3)
    renderer = fig.canvas.get_renderer()
    while True:
        legend = fig.legend(handles, labels, loc=loc, ncol=ncol, title=title, frameon=False, **kw)
        if fixed or ncol == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width * 0.98:
            return legend
        legend.remove()
        ncol -= 1


def legend_beside(fig, handles=None, labels=None, **kw):
    """One legend for ``fig`` right of its panels, top-aligned, in one column (for grids whose
    bottom holds a shared x label)."""
    return legend_below(fig, handles, labels, ncol=1, loc="outside right upper", **kw)


def legend_right(ax, handles=None, labels=None, **kw):
    """``ax``'s legend to the right of its data area, top-aligned."""
    args = () if handles is None else (handles, labels) if labels is not None else (handles,)
    return ax.legend(*args, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, **kw)


def robust_range(values, *, low: float | None = None, q: float = 99.0) -> tuple[float, float]:
    """(vmin, vmax) of a colour scale fit to ``values``: ``low`` (default: their 1st
    percentile, or ``100 - q``-th) to their ``q``-th percentile, over the finite values (a
    few outliers do not flatten the rest); (0, 1) when none is finite."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return 0.0, 1.0
    lo = float(np.percentile(v, 100 - q)) if low is None else float(low)
    hi = float(np.percentile(v, q))
    if not hi > lo:
        hi = lo + (abs(lo) * 0.01 or 1e-6)
    return lo, hi


def scale_label(what: str, vmin: float, vmax: float, *, q: float = 99.0, low: str = "") -> str:
    """A colour bar's label that states its scale in short lines: ``what``, the range, and how
    it was fit, e.g. "PWCCA distance / scale 0 to 0.37: / 0 to the data's 99th percentile"."""
    lo_text = low or f"the {_ordinal(100 - q)}"
    return f"{what}\nscale {vmin:.3g} to {vmax:.3g}:\n{lo_text} to the {_ordinal(q)} percentile of the data"


def _ordinal(x: float) -> str:
    """1 -> "1st", 99 -> "99th", 2.5 -> "2.5th"."""
    if float(x).is_integer() and int(x) % 100 not in (11, 12, 13):
        return f"{int(x)}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(int(x) % 10, 'th') }"
    return f"{x:g}th"


def by_group_panels(d, *, series: str, label, width, xlabel: str, ylabel: str, groups: str = "freq_bin"):
    """One panel per model of ``d`` (model, ``series``, ``groups``), a line per ``series``
    value coloured along viridis, the legend below; groups that are NaN for every model are
    dropped. Returns (fig, the plotted numbers as a long table) or None."""
    d = d.isel({groups: ~np.isnan(d).all(("model", series)).values})
    if d.sizes[groups] == 0:
        return None
    pyplot = plt()
    models = list(d.model.values)
    fig, axes = panel_grid(len(models), panel=(2.4, 2.2), sharey=True, extra=0.3)
    cmap = pyplot.get_cmap("viridis")
    n = d.sizes[series]
    x = np.arange(d.sizes[groups])
    for ax, m in zip(axes, models, strict=True):
        for j, v in enumerate(d[series].values):
            ax.plot(
                x,
                d.sel({"model": m, series: v}),
                marker="o",
                markersize=3,
                color=cmap(j / max(1, n - 1)),
                label=label(v),
                lw=width(v),
            )
        ax.set_xticks(x, [str(b) for b in d[groups].values], rotation=60, ha="right", rotation_mode="anchor")
        ax.set_title(str(m))
    label_edges(axes, ylabel=ylabel)
    fig.supxlabel(xlabel, fontsize=RC["axes.labelsize"])
    legend_beside(fig)
    return fig, tidy(d, str(d.name or "value"))


def label_edges(axes, *, xlabel: str = "", ylabel: str = "") -> None:
    """``xlabel`` under the panels with none below them, ``ylabel`` beside the first of each
    row (``axes`` in reading order on one grid, as :func:`panel_grid` returns them)."""
    if not axes:
        return
    cols = axes[0].get_subplotspec().get_gridspec().ncols
    for k, ax in enumerate(axes):
        if xlabel and k + cols >= len(axes):
            ax.set_xlabel(xlabel)
        if ylabel and k % cols == 0:
            ax.set_ylabel(ylabel)


@figure
def adjacent_change_figure(path, *, group: str, groups: str, xlabel: str, metric: str):
    """Distance between layers n and n + 1 per subset (``groups`` dimension of ``group``), one panel per model."""
    ds = open_group(path, group)
    if ds is None or metric not in ds.metric.values:
        return None
    return by_group_panels(
        ds.distance.sel(metric=metric).load(),
        series="layer_pair",
        groups=groups,
        label=lambda pair: f"layers {pair}",
        width=lambda _: 1.5,
        xlabel=xlabel,
        ylabel=f"{metric.upper()} distance,\nlayer n vs n+1",
    )
