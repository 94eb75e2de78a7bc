"""Plots for notebooks: one panel each, on a ``metrics.zarr`` group as a Dataset (from
:mod:`evolution.api.analyses` or :func:`evolution.metrics.results.open_metrics`), choosing
``models=`` and ``layers=``, drawn into ``ax=`` (a new figure without it), returning the
figure. The report's multi-panel figures are the analyses' own figure functions
(:func:`evolution.analyses.figures`); :func:`report_figure` draws any of them for a Dataset.

>>> from evolution.api import plot
>>> fig = plot.mi(ev.mi(reps), models=["mt", "lm"], kind="fraction")        # doctest: +SKIP
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np
import xarray as xr

from evolution.analyses.plotting import STYLES, plt

__all__ = ["mi", "neighbors", "distances", "change", "influence", "heads", "trajectory", "compared", "report_figure"]

#: the plot of an analysis whose name is not a plot's: ``ev.similarity``'s group is drawn by ``distances``
_PLOT_OF = {"similarity": "distances", "to_final": "trajectory"}


class PlotNameError(AttributeError):
    """A name this module does not have; the message names the closest plots."""


def __getattr__(name: str):
    """``ev.plot.compare`` and the like: an :class:`PlotNameError` with the close matches
    (``did you mean ev.plot.compared?``) and the plots there are."""
    if name.startswith("__"):  # copy, pickle, inspect and doctest probe dunders: the plain error
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    close = ([_PLOT_OF[name]] if name in _PLOT_OF else []) + difflib.get_close_matches(name, __all__, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(f'ev.plot.{c}' for c in dict.fromkeys(close))}? " if close else ""
    raise PlotNameError(f"ev.plot has no {name!r}; {hint}its plots are {', '.join(__all__)}")


def _axes(ax):
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt().subplots(figsize=(5.0, 3.4), layout="constrained")
    return fig, ax


def _models(ds: xr.Dataset, models: Sequence[str] | None, dim: str = "model") -> list[str]:
    have = [str(m) for m in ds[dim].values]
    if models is None:
        return have
    missing = [m for m in models if m not in have]
    if missing:
        raise KeyError(f"no model {missing} in this group; it has {have} (pass one of those)")
    return list(models)


def _layers(values, layers: Sequence[int] | None):
    values = np.asarray(values)
    return values if layers is None else np.asarray([v for v in values if int(v) in set(layers)])


def _band(ax, x, iv: xr.DataArray | None, color) -> None:
    if iv is not None and np.isfinite(iv.values).any():
        ax.fill_between(x, iv.sel(bound="low"), iv.sel(bound="high"), color=color, alpha=0.15, linewidth=0)


def mi(
    ds: xr.Dataset,
    *,
    target: str = "input",
    kind: str = "fraction",
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    ax=None,
):
    """MI per layer of the ``mi`` group: ``kind="fraction"`` (MI minus the shuffled control, as a
    fraction of H(X), with its 95% interval over sentences) or ``"nats"`` (mean over restarts)."""
    fig, ax = _axes(ax)
    x = _layers(ds.layer.values, layers)
    for i, m in enumerate(_models(ds, models)):
        style = STYLES[i % len(STYLES)]
        sel = dict(model=m, target=target, layer=x)
        if kind == "fraction":
            v = (
                ds.mi_corrected_fraction.sel(**sel)
                if "mi_corrected_fraction" in ds
                else ((ds.mi_mean - ds.mi_shuffled) / ds.entropy).sel(**sel)
            )
            iv = ds.mi_corrected_fraction_interval.sel(**sel) if "mi_corrected_fraction_interval" in ds else None
        elif kind == "nats":
            v = ds.mi.sel(**sel).mean("restart")
            iv = ds.mi_mean_interval.sel(**sel) if "mi_mean_interval" in ds else None
        else:
            raise ValueError(f"kind={kind!r}: fraction or nats")
        ax.plot(x, v, label=m, **style)
        _band(ax, x, iv, style["color"])
    ax.set(
        xlabel="layer",
        ylabel="(MI - control) / H(X)" if kind == "fraction" else "MI (nats)",
        title=f"MI with the {target.replace('_', ' ')}",
        xticks=x,
    )
    ax.legend(fontsize=8)
    return fig


def neighbors(
    ds: xr.Dataset,
    *,
    measure: str = "same_token",
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    ax=None,
):
    """A neighbour rate per layer (``neighbors`` group) with its 95% bootstrap interval, and for
    within-type rates their chance level (dotted) and ceiling (dashed)."""
    fig, ax = _axes(ax)
    x = _layers(ds.layer.values, layers)
    have = set(map(str, ds.measure.values))
    for i, m in enumerate(_models(ds, models)):
        style = STYLES[i % len(STYLES)]
        ax.plot(x, ds.value.sel(model=m, measure=measure, layer=x), label=m, **style)
        _band(ax, x, ds.interval.sel(model=m, measure=measure, layer=x) if "interval" in ds else None, style["color"])
        for suffix, line in (("_chance", ":"), ("_ceiling", "--")):
            if measure + suffix in have:
                ax.plot(
                    x,
                    ds.value.sel(model=m, measure=measure + suffix, layer=x),
                    color=style["color"],
                    linestyle=line,
                    linewidth=0.8,
                )
    ax.set(xlabel="layer", ylabel=measure.replace("_", " "), title=f"nearest neighbours: {measure}", xticks=x)
    ax.legend(fontsize=8)
    return fig


def distances(
    ds: xr.Dataset,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    metric: str = "pwcca",
    layers: Sequence[int] | None = None,
    ax=None,
):
    """Same-layer distance between pairs of models (``similarity`` group), with 95% intervals where
    stored; default pairs: every pair of distinct models."""
    models = [str(m) for m in ds.model_a.values]
    if pairs is not None:
        _models(ds, [m for pair in pairs for m in pair], dim="model_a")
    fig, ax = _axes(ax)
    pairs = pairs or [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    x = _layers(ds.layer.values if "layer" in ds.coords else ds.layer_a.values, layers)
    for i, (a, b) in enumerate(pairs):
        style = STYLES[i % len(STYLES)]
        if "same_layer" in ds:
            v = ds.same_layer.sel(metric=metric, model_a=a, model_b=b, layer=x)
        else:
            d = ds.distance.sel(metric=metric)
            v = xr.DataArray(
                [
                    (
                        float(d.sel(model_a=a, model_b=b, layer_a=k, layer_b=k))
                        + float(d.sel(model_a=b, model_b=a, layer_a=k, layer_b=k))
                    )
                    / 2
                    for k in x
                ],
                dims="layer",
            )
        ax.plot(x, v, label=f"{a} - {b}", **style)
        _band(
            ax,
            x,
            ds.interval.sel(metric=metric, model_a=a, model_b=b, layer=x) if "interval" in ds else None,
            style["color"],
        )
    ax.set(xlabel="layer", ylabel=f"{metric.upper()} distance", title="distance between models", xticks=x)
    ax.legend(fontsize=8)
    return fig


def change(ds: xr.Dataset, *, model: str, metric: str = "pwcca", bins: Sequence[str] | None = None, ax=None):
    """Change between adjacent layers per frequency bin of one model (``change`` / ``change_equal``)."""
    model = _models(ds, [model])[0]
    fig, ax = _axes(ax)
    d = ds.distance.sel(metric=metric, model=model)
    pairs = [str(p) for p in ds.layer_pair.values]
    for i, b in enumerate(bins or [str(b) for b in ds.freq_bin.values]):
        style = STYLES[i % len(STYLES)]
        v = d.sel(freq_bin=b)
        if np.isfinite(v.values).any():
            ax.plot(pairs, v, label=b, **style)
    ax.set(xlabel="layers", ylabel=f"{metric.upper()} distance", title=f"{model}: change by frequency")
    ax.legend(fontsize=7, title="frequency bin", title_fontsize=7)
    return fig


def influence(ds: xr.Dataset, *, model: str, metric: str = "pwcca", bins: Sequence[str] | None = None, ax=None):
    """Token influence per layer and frequency bin of one model (``influence``), intervals as bands."""
    model = _models(ds, [model])[0]
    fig, ax = _axes(ax)
    x = ds.layer.values
    for i, b in enumerate(bins or [str(b) for b in ds.freq_bin.values]):
        style = STYLES[i % len(STYLES)]
        v = ds.distance.sel(metric=metric, model=model, freq_bin=b)
        if not np.isfinite(v.values).any():
            continue
        ax.plot(x, v, label=b, **style)
        _band(
            ax, x, ds.interval.sel(metric=metric, model=model, freq_bin=b) if "interval" in ds else None, style["color"]
        )
    ax.set(xlabel="layer", ylabel=f"{metric.upper()} distance", title=f"{model}: token influence", xticks=x)
    ax.legend(fontsize=7, title="frequency bin", title_fontsize=7)
    return fig


def heads(ds: xr.Dataset, *, model: str, measure: str = "confidence", layers: Sequence[int] | None = None, ax=None):
    """One per-head statistic of the ``heads`` group as a layer x head heatmap, scaled to the data;
    the model's own heads only (a group of models with different head counts pads the smaller
    ones with NaN columns, which are left out)."""
    model = _models(ds, [model])[0]
    fig, ax = _axes(ax)
    v = ds.value.sel(model=model, measure=measure)
    if layers is not None:
        v = v.sel(layer=list(layers))
    own = ~np.isnan(v.values).all(axis=0)  # heads this model has
    if own.any() and not own.all():
        v = v.isel(head=np.flatnonzero(own))
    finite = v.values[np.isfinite(v.values)]
    im = ax.imshow(
        v.values,
        aspect="auto",
        cmap="viridis",
        vmin=finite.min() if finite.size else None,
        vmax=finite.max() if finite.size else None,
    )
    ax.set(
        xlabel="head",
        ylabel="layer",
        title=f"{model}: {measure}",
        xticks=range(v.sizes["head"]),
        yticks=range(v.sizes["layer"]),
        yticklabels=[int(x) for x in v.layer.values],
    )
    fig.colorbar(im, ax=ax, label=f"{measure} (scale: the data's range)")
    return fig


def trajectory(
    curves: xr.Dataset,
    var: str = "to_final",
    *,
    series: str | None = None,
    pair: str | None = None,
    metric: str = "pwcca",
    layers: Sequence[int] | None = None,
    ax=None,
):
    """A metric of the trajectory's ``curves`` group against training steps, one line per layer
    (log step axis; symlog when step 0 is there): ``mi_input``, ``same_token``, ``to_final``
    (``metric``: pwcca or cka) for one ``series``, or ``between`` for one ``pair`` of series.
    The 95% bootstrap interval is shaded where it was computed (``intervals=True``)."""
    from evolution.report.trajectory import _by_series, layer_lines

    curves = _by_series(curves)
    if var not in ("mi_input", "same_token", "to_final", "between"):
        raise KeyError(f"var={var!r}: one of mi_input, same_token, to_final, between")
    dim, which = ("pair", pair) if var == "between" else ("series", series)
    have = [str(v) for v in curves[dim].values]
    which = which if which is not None else (have[0] if have else None)
    if which not in have:
        raise KeyError(f"no {dim} {which!r} in these curves; they have {have}")
    data = curves[var].sel({dim: which})
    if "metric" in data.dims:
        data = data.sel(metric=metric)
    iv = curves.get(f"{var}_interval")
    fig, ax = _axes(ax)
    x = curves["checkpoint"].values
    drawn = layer_lines(ax, x, data, _layers(curves["layer"].values, layers), n_layers=len(curves["layer"]))
    if iv is not None and dim == "series":
        for layer, (ok, color) in drawn.items():
            _band(ax, x[ok], iv.sel(series=which, layer=layer).isel(checkpoint=np.nonzero(ok)[0]), color)
    label = {
        "to_final": f"{metric.upper()} distance to the final member",
        "between": f"{metric.upper()} distance between the series",
        "mi_input": "MI with the input / H(X)",
        "same_token": "kNN same-token rate",
    }[var]
    ax.set(xlabel="training step", ylabel=label, title=str(which))
    ax.legend(fontsize=7)
    return fig


def compared(
    ds: xr.Dataset,
    *,
    measures: Sequence[str] = ("pwcca_distance", "cka_distance"),
    layers: Sequence[int] | None = None,
    ax=None,
):
    """What an intervention does per layer: ``measures`` of :func:`evolution.api.compare` (distances,
    or ``mi_change`` / ``same_token_change``) against the layer, each with its interval as a band."""
    fig, ax = _axes(ax)
    sel = ds if layers is None else ds.sel(layer=[int(x) for x in layers])
    x = sel["layer"].values
    for i, m in enumerate(measures):
        if m not in sel:
            raise KeyError(
                f"no {m!r} in this comparison; it has {[str(v) for v in sel.data_vars if '_interval' not in str(v)]}"
            )
        color = f"C{i}"
        ax.plot(x, sel[m].values, marker="o", color=color, label=m.replace("_", " "))
        _band(ax, x, sel.get(f"{m}_interval"), color)
    from matplotlib.ticker import MaxNLocator

    ax.axhline(0, color="0.6", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer")
    ax.set_ylabel("b against a (95% interval)")
    ax.set_title(f"{ds.attrs.get('b', 'b')} against {ds.attrs.get('a', 'a')}")
    ax.legend(frameon=False)
    return fig


def report_figure(
    name: str, group: xr.Dataset, *, models: Sequence[str] | None = None, layers: Sequence[int] | None = None
):
    """A report figure (``evolution.analyses.figures``' name, e.g. ``mi``, ``neighbors``,
    ``heads_roles``) drawn for ``group`` (a Dataset of the group that figure reads), restricted to
    ``models`` and ``layers``."""
    import tempfile
    from pathlib import Path

    from evolution.analyses import ANALYSES
    from evolution.metrics.results import write_metrics

    sub = group
    if models is not None:
        for dim in ("model", "model_a", "model_b"):
            if dim in sub.dims:
                sub = sub.sel({dim: list(models)})
    if layers is not None:
        for dim in ("layer", "layer_a", "layer_b"):
            if dim in sub.dims:
                sub = sub.sel({dim: [x for x in sub[dim].values if int(x) in set(layers)]})
    figures = {n: f for a in ANALYSES for n, (f, _) in a.figures.items()}
    if name not in figures:
        raise KeyError(f"no report figure {name!r}; these exist: {sorted(figures)}")
    with tempfile.TemporaryDirectory() as tmp:
        group_name = sub.attrs.get("group") or _group_of(name)
        path = Path(tmp) / "m.zarr"
        write_metrics(path, {group_name: sub}, fingerprint="api")
        return figures[name](str(path))


def _group_of(figure: str) -> str:
    """The metrics group a report figure reads (by its name's prefix)."""
    for prefix, group in (
        ("similarity", "similarity"),
        ("change_equal", "change_equal"),
        ("change_pos", "change_pos"),
        ("change", "change"),
        ("influence", "influence"),
        ("neighbors", "neighbors"),
        ("mi_types", "mi_types"),
        ("mi", "mi"),
        ("heads_importance", "heads_importance"),
        ("heads_pruning", "heads_pruning"),
        ("heads_probes", "heads_probes"),
        ("heads_dependency", "heads_dependency"),
        ("heads_map", "heads_map"),
        ("heads_decoder", "heads_decoder"),
        ("heads", "heads"),
        ("tsne", "tsne"),
    ):
        if figure.startswith(prefix):
            return group if group != "tsne" else figure
    raise KeyError(figure)
