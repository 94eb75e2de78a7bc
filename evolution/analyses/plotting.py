"""What the analyses' figures share: the model styles, matplotlib set-up, opening a group."""

from __future__ import annotations

import numpy as np
import xarray as xr

__all__ = ["STYLES", "plt", "open_group", "by_group_panels", "adjacent_change_figure"]

#: Distinct colour + line style + marker per model, so coinciding curves stay visible.
STYLES = [dict(color=c, linestyle=ls, marker=mk) for c, ls, mk in
          [("tab:blue", "-", "o"), ("tab:orange", "--", "s"), ("tab:green", ":", "^"), ("tab:red", "-.", "D"),
           ("tab:purple", "-", "v"), ("tab:brown", "--", "P"), ("tab:pink", ":", "X"), ("tab:gray", "-.", "*"),
           ("tab:olive", "-", "h"), ("tab:cyan", "--", "<")]]  # 10: a run with 3 objectives and their controls


def plt():
    """``matplotlib.pyplot`` on the Agg backend unless one is already chosen (notebooks)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as pyplot

    return pyplot


def open_group(path, group: str) -> xr.Dataset | None:
    """A ``metrics.zarr`` group loaded into memory (metrics are small), or None when absent."""
    from evolution.metrics.results import open_metrics

    try:
        return open_metrics(path, group).load()
    except (FileNotFoundError, KeyError, ValueError, OSError):
        return None


def by_group_panels(d, *, series: str, label, width, xlabel: str, ylabel: str, groups: str = "freq_bin"):
    """One panel per model of ``d`` (model, ``series``, ``groups``), a line per ``series``
    value coloured along viridis; groups that are NaN for every model are dropped."""
    d = d.isel({groups: ~np.isnan(d).all(("model", series)).values})
    if d.sizes[groups] == 0:
        return None
    pyplot = plt()
    models = list(d.model.values)
    cols = min(4, len(models))  # a run with controls has 8 models: two rows of four
    rows = -(-len(models) // cols)
    fig, axes = pyplot.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True,
                                layout="constrained")
    for ax in axes.ravel()[len(models):]:
        ax.set_visible(False)
    cmap = pyplot.get_cmap("viridis")
    n = d.sizes[series]
    x = np.arange(d.sizes[groups])
    for ax, m in zip(axes.ravel(), models):
        for j, v in enumerate(d[series].values):
            ax.plot(x, d.sel({"model": m, series: v}), marker="o", color=cmap(j / max(1, n - 1)), label=label(v),
                    lw=width(v))
        ax.set_xticks(x, [str(b) for b in d[groups].values], rotation=45, fontsize=7)
        ax.set(title=str(m), xlabel=xlabel)
    for row in axes:
        row[0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7)
    return fig


def adjacent_change_figure(path, *, group: str, groups: str, xlabel: str, metric: str):
    """Distance between layers n and n + 1 per subset (``groups`` dimension of ``group``), one panel per model."""
    ds = open_group(path, group)
    if ds is None or metric not in ds.metric.values:
        return None
    return by_group_panels(ds.distance.sel(metric=metric).load(), series="layer_pair", groups=groups,
                           label=lambda pair: f"layers {pair}", width=lambda _: 1.5, xlabel=xlabel,
                           ylabel=f"{metric.upper()} distance, layer n vs n+1")
