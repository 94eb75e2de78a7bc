"""The figures of :mod:`evolution.analyses.mi`: MI between a layer's k-means clusters and the
token per layer (Voita et al. 2019, section 3, figures 1-2), and by the number of most frequent
types (``mi_types``).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from evolution.analyses.plotting import (
    STYLES,
    WIDTH,
    concat,
    figure,
    label_edges,
    legend_below,
    open_group,
    panel_grid,
    plt,
    tidy,
)

__all__ = ["mi_by_layer", "mi_by_types", "FIGURES"]


def _fraction(ds: xr.Dataset, name: str) -> xr.DataArray:
    """``mi_fraction`` / ``mi_corrected_fraction`` (model, layer, target), computed as the
    group defines them for stores written before they were stored."""
    if name in ds:
        return ds[name]
    mean = ds.mi_mean if "mi_mean" in ds else ds.mi.mean("restart")
    if name == "mi_corrected_fraction":
        mean = ds.mi_corrected if "mi_corrected" in ds else mean - ds.mi_shuffled
    return mean / ds.entropy


@figure
def mi_by_layer(path):
    """MI with the input token (and the output label where defined) per layer, one column
    per target: top, MI in nats (band: restart spread; error bars: 95% interval over
    sentences; dotted: the shuffled-label control; grey: H(X)); bottom, MI minus the
    control as a fraction of H(X) (what claims 1-5 read), scaled to the data so that gaps
    of a few per cent of H show, with its 95% interval where stored."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import PercentFormatter

    ds = open_group(path, "mi")
    if ds is None:
        return None
    targets = [t for t in ds.target.values if np.isfinite(ds.mi.sel(target=t).values).any()]
    if not targets:
        return None
    pyplot = plt()
    cols = len(targets)
    fig, grid = pyplot.subplots(
        2, cols, figsize=(min(WIDTH, 3.3 * cols + 0.4), 5.6), squeeze=False, sharex=True, layout="constrained"
    )
    corrected = _fraction(ds, "mi_corrected_fraction")
    frames = []
    for c, t in enumerate(targets):
        top, bottom = grid[0, c], grid[1, c]
        for i, m in enumerate(ds.model.values):
            style = STYLES[i % len(STYLES)]
            v = ds.mi.sel(model=m, target=t)
            mean, lo, hi = v.mean("restart"), v.min("restart"), v.max("restart")
            if np.isnan(mean.values).all():
                continue
            top.plot(ds.layer, mean, label=str(m), markersize=3.5, **style)
            top.fill_between(ds.layer, lo, hi, color=style["color"], alpha=0.2, linewidth=0)
            top.plot(
                ds.layer, ds.mi_shuffled.sel(model=m, target=t), color=style["color"], linestyle=":", linewidth=0.8
            )
            frames += [
                tidy(mean, "mi_mean", target=t, model=str(m)),
                tidy(lo, "mi_restart_min", target=t, model=str(m)),
                tidy(hi, "mi_restart_max", target=t, model=str(m)),
                tidy(ds.mi_shuffled.sel(model=m, target=t), "mi_shuffled", target=t, model=str(m)),
            ]
            if "mi_mean_interval" in ds:  # 95% interval over sentences: error bars
                _errorbars(top, ds.layer.values, mean.values, ds.mi_mean_interval.sel(model=m, target=t), style)
                frames += [
                    tidy(ds.mi_mean_interval.sel(model=m, target=t, bound=b), f"mi_mean_{b}", target=t, model=str(m))
                    for b in ("low", "high")
                ]
            f = corrected.sel(model=m, target=t)
            bottom.plot(ds.layer, f, markersize=3.5, **style)
            frames.append(tidy(f, "mi_corrected_fraction", target=t, model=str(m)))
            if "mi_corrected_fraction_interval" in ds:
                iv = ds.mi_corrected_fraction_interval.sel(model=m, target=t)
                _errorbars(bottom, ds.layer.values, f.values, iv, style)
                frames += [
                    tidy(iv.sel(bound=b), f"mi_corrected_fraction_{b}", target=t, model=str(m)) for b in ("low", "high")
                ]
            frames.append(
                tidy(_fraction(ds, "mi_fraction").sel(model=m, target=t), "mi_fraction", target=t, model=str(m))
            )
        top.axhline(ds.entropy.sel(target=t).max().item(), color="grey", linewidth=0.8)
        frames.append(tidy(ds.entropy.sel(target=t), "entropy"))
        top.set_title(f"MI with the {t.replace('_', ' ')} {'token' if t == 'input' else 'label'}")
        bottom.set_xlabel("layer")
        bottom.set_xticks(ds.layer.values)
        bottom.yaxis.set_major_formatter(PercentFormatter(1.0))
        bottom.grid(axis="y", linewidth=0.4, alpha=0.5)
    grid[0, 0].set_ylabel("MI (nats)")
    grid[1, 0].set_ylabel("(MI - control) / H(X)\nscaled to the data")
    handles, labels = grid[0, 0].get_legend_handles_labels()
    for c in range(1, cols):  # models with MI for another target only
        for h, lab in zip(*grid[0, c].get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    handles += [
        Line2D([], [], color="grey", linewidth=0.8),
        Line2D([], [], color="black", linestyle=":", linewidth=0.8),
    ]
    legend_below(fig, handles, labels + ["H(X), the ceiling", "shuffled-label control"])
    fig.suptitle("Mutual information between a layer's k-means clusters and the token")
    return fig, concat(frames)


def _errorbars(ax, x, y, interval: xr.DataArray, style: dict) -> None:
    """Error bars from an interval (..., bound) around ``y`` (NaN bounds draw nothing)."""
    low, high = interval.sel(bound="low").values, interval.sel(bound="high").values
    if not np.isfinite(low).any():
        return
    ax.errorbar(
        x, y, yerr=np.abs(np.stack([y - low, high - y])), fmt="none", ecolor=style["color"], elinewidth=0.8, capsize=2
    )


@figure
def mi_by_types(path, target: str = "input"):
    """MI as a fraction of H(X) per layer, one line per nested type subset (``mi_types``),
    one panel per model: how the fall with depth grows as rarer types join the set."""
    ds = open_group(path, "mi_types")
    if ds is None or target not in ds.target.values:
        return None
    pyplot = plt()
    models = [m for m in ds.model.values if not np.isnan(ds.mi_fraction.sel(model=m, target=target).values).all()]
    if not models:
        return None
    fig, axes = panel_grid(len(models), panel=(2.4, 2.1), sharey=True, extra=0.6)
    cmap = pyplot.get_cmap("viridis")
    sizes = list(ds.types.values)
    frames = []
    for ax, m in zip(axes, models, strict=True):
        for j, size in enumerate(sizes):
            color = cmap(j / max(1, len(sizes) - 1))
            v = ds.sel(model=m, target=target, types=size)
            used = int(v.n_types.item()) if np.isfinite(v.n_types.item()) else size
            ax.plot(ds.layer, v.mi_fraction, marker="o", markersize=3, color=color, label=f"{used} types")
            ax.plot(ds.layer, v.mi_corrected_fraction, linestyle="--", color=color, linewidth=0.8)
            frames += [
                tidy(v[name], name, model=str(m), n_types=used) for name in ("mi_fraction", "mi_corrected_fraction")
            ]
        ax.set(title=str(m), xticks=ds.layer.values)
    label_edges(axes, xlabel="layer", ylabel="MI / H(X)")
    legend_below(fig, title="most frequent types (dashed: minus the shuffled control)")
    fig.suptitle(
        f"MI with the {target} token as a fraction of H(X), by the number of most frequent types (same clusters)"
    )
    return fig, concat(frames)


FIGURES = {
    "mi": (
        mi_by_layer,
        "MI between a layer's k-means clusters and the input token / the output label "
        "(Voita et al. 2019, fig. 1-2). Top: MI in nats; band: spread over k-means "
        "restarts; error bars: 95% interval over sentences; dotted: shuffled-label "
        "control. Bottom: MI minus the control as a fraction of H(X), the quantity the "
        "claims read, on an axis fit to the data.",
    ),
    "mi_types": (
        mi_by_types,
        "MI with the input token as a fraction of H(X) for nested sets of the most "
        "frequent types, with the full set's clusters (metrics.mi.types): how the "
        "fall with depth grows with the number of types (the paper: 1,000 types).",
    ),
}
