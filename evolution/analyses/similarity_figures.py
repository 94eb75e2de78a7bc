"""The figures of :mod:`evolution.analyses.similarity`: distances between the layers of a
model and between models (Voita et al. 2019, section 4, figures 3-4).

Between models, the pairs are drawn as groups by what the two models differ in
(:func:`~evolution.analyses.pair_kinds.pair_kind`: two seeds of one objective, two
objectives sharing their initial weights, two objectives across initialisations, one model
with token dropout): per layer the mean over the pairs of a kind, with their minimum-maximum
range as a band (:func:`kind_bands`); and the three objective pairs of the base models
(LM-MT, MT-MLM, LM-MLM: claim 9) as their own lines (:func:`objective_pairs`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from evolution.analyses.plotting import (
    WIDTH,
    adjacent_change_figure,
    concat,
    figure,
    label_edges,
    legend_right,
    open_group,
    plt,
    robust_range,
    scale_label,
    tidy,
)

__all__ = [
    "same_layer",
    "pair_kinds",
    "kind_bands",
    "objective_pairs",
    "similarity_heatmaps",
    "pair_distances",
    "change_by_frequency",
    "GROUPED_KINDS",
    "OBJECTIVE_PAIRS",
    "FIGURES",
]

#: the pair kinds drawn as groups, in legend order (``other``: a token-dropout model against
#: another objective or seed, and ``same model`` are left out)
GROUPED_KINDS = (
    "seeds",
    "objectives, shared init",
    "objectives, different inits",
    "token dropout",
    "same objective",
    "objectives",
)
_KIND_STYLE = {
    "seeds": ("tab:blue", "o", "-"),
    "objectives, shared init": ("tab:orange", "s", "--"),
    "objectives, different inits": ("tab:red", "D", "-."),
    "token dropout": ("tab:green", "^", ":"),
    "same objective": ("tab:blue", "o", "-"),
    "objectives": ("tab:red", "D", "-."),
}
#: the objective pairs of claim 9 (Voita et al. 2019, fig. 3): (first, second) objective
OBJECTIVE_PAIRS = (("lm", "mt"), ("mt", "mlm"), ("lm", "mlm"))
_PAIR_STYLE: dict[tuple[str, ...], tuple[str, str, str]] = {
    ("lm", "mt"): ("tab:purple", "o", "-"),
    ("mt", "mlm"): ("tab:olive", "s", "--"),
    ("lm", "mlm"): ("tab:cyan", "^", ":"),
}


def same_layer(ds: xr.Dataset, metric: str) -> xr.DataArray:
    """(model_a, model_b, layer) distance between two models at the same layer: the group's
    ``same_layer``, or for stores written before it, the same quantity from ``distance``
    (PWCCA: the mean of both directions; CKA is symmetric)."""
    if "same_layer" in ds:
        return ds.same_layer.sel(metric=metric)
    d = ds.distance.sel(metric=metric).transpose("model_a", "layer_a", "model_b", "layer_b").values
    diag = np.diagonal(d, axis1=1, axis2=3)  # (model_a, model_b, layer)
    return xr.DataArray(
        (diag + np.swapaxes(diag, 0, 1)) / 2,
        dims=("model_a", "model_b", "layer"),
        coords={"model_a": ds.model_a.values, "model_b": ds.model_b.values, "layer": ds.layer_a.values},
    )


def pair_kinds(ds: xr.Dataset) -> dict[tuple[str, str], str]:
    """What each pair of models (a before b in the group's order) differs in: the ``pair``
    coordinate, or :func:`~evolution.analyses.pair_kinds.pair_kind` of the group's attributes
    (``objectives``, ``runs``) for stores written before it."""
    from evolution.analyses.pair_kinds import pair_kind

    models = [str(m) for m in ds.model_a.values]
    out = {}
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            if "pair" in ds.coords:
                out[(a, b)] = str(ds.pair.sel(model_a=a, model_b=b).item())
            else:
                out[(a, b)] = pair_kind(
                    a, b, objectives=dict(ds.attrs.get("objectives", {})), runs=dict(ds.attrs.get("runs", {}))
                )
    return out


def kind_bands(same: xr.DataArray, kinds: dict[tuple[str, str], str]) -> xr.Dataset:
    """Per kind of :data:`GROUPED_KINDS` that has a pair with a finite distance, per layer:
    ``mean``, ``min`` and ``max`` over its pairs (NaN pairs of a layer left out) and
    ``n_pairs``; dims (pair, layer)."""
    groups: dict[str, list] = {}
    for (a, b), kind in kinds.items():
        v = same.sel(model_a=a, model_b=b).values
        if kind in GROUPED_KINDS and np.isfinite(v).any():
            groups.setdefault(kind, []).append(v)
    order = [k for k in GROUPED_KINDS if k in groups]
    stats = {name: np.full((len(order), same.sizes["layer"]), np.nan) for name in ("mean", "min", "max")}
    n = np.zeros((len(order), same.sizes["layer"]), dtype=int)
    for i, kind in enumerate(order):
        v = np.asarray(groups[kind], dtype=float)  # (pairs, layer)
        ok = np.isfinite(v)
        n[i] = ok.sum(0)
        with np.errstate(invalid="ignore"):
            for name, fn in (("mean", np.nanmean), ("min", np.nanmin), ("max", np.nanmax)):
                stats[name][i, n[i] > 0] = fn(v[:, n[i] > 0], axis=0)
    coords = {"pair": np.array(order, dtype=object), "layer": same.layer.values}
    return xr.Dataset(
        {**{k: (("pair", "layer"), v) for k, v in stats.items()}, "n_pairs": (("pair", "layer"), n)}, coords=coords
    )


def _replicates(attrs: dict, objective: str) -> list[str]:
    """Models of ``objective`` without token dropout, the base model (the run's seed) first
    (as the scorecard reads them)."""
    objectives, runs, seed = dict(attrs.get("objectives", {})), dict(attrs.get("runs", {})), attrs.get("seed")
    models = [
        m
        for m, o in objectives.items()
        if o == objective and float(runs.get(m, {}).get("token_dropout", 0.0) or 0.0) == 0.0
    ]
    return sorted(models, key=lambda m: runs.get(m, {}).get("seed", seed) != seed)


def objective_pairs(ds: xr.Dataset, metric: str) -> xr.Dataset | None:
    """Per objective pair of :data:`OBJECTIVE_PAIRS` whose models are in the group, per layer:
    ``distance`` of the base models, its 95% bootstrap interval ``low`` / ``high`` where
    stored, and ``range_min`` / ``range_max`` over every combination of seed replicates;
    dims (objective_pair, layer); coordinates ``model_a`` / ``model_b``: the base models.
    None when no pair is there."""
    same = same_layer(ds, metric)
    present = set(str(m) for m in ds.model_a.values)
    rows = []
    for first, second in OBJECTIVE_PAIRS:
        ra = [m for m in _replicates(ds.attrs, first) if m in present]
        rb = [m for m in _replicates(ds.attrs, second) if m in present]
        if not ra or not rb or not np.isfinite(same.sel(model_a=ra[0], model_b=rb[0]).values).any():
            continue
        combos = np.array([same.sel(model_a=a, model_b=b).values for a in ra for b in rb], dtype=float)
        low = high = np.full(same.sizes["layer"], np.nan)
        if "interval" in ds:
            iv = ds.interval.sel(metric=metric, model_a=ra[0], model_b=rb[0])
            low, high = iv.sel(bound="low").values, iv.sel(bound="high").values
        with np.errstate(invalid="ignore"):
            base = same.sel(model_a=ra[0], model_b=rb[0]).values
            rows.append(
                (
                    f"{first.upper()}-{second.upper()}",
                    ra[0],
                    rb[0],
                    base,
                    low,
                    high,
                    np.nanmin(combos, 0),
                    np.nanmax(combos, 0),
                    len(combos),
                )
            )
    if not rows:
        return None
    names, a, b, d, lows, highs, rmin, rmax, n = zip(*rows, strict=True)
    dims = ("objective_pair", "layer")
    return xr.Dataset(
        {
            "distance": (dims, np.array(d)),
            "low": (dims, np.array(lows)),
            "high": (dims, np.array(highs)),
            "range_min": (dims, np.array(rmin)),
            "range_max": (dims, np.array(rmax)),
            "combinations": (("objective_pair",), np.array(n)),
        },
        coords={
            "objective_pair": np.array(names, dtype=object),
            "layer": same.layer.values,
            "model_a": ("objective_pair", np.array(a, dtype=object)),
            "model_b": ("objective_pair", np.array(b, dtype=object)),
        },
    )


def _draw_kinds(ax, bands: xr.Dataset, metric: str) -> None:
    """Mean line and min-max band per pair kind, the legend right of the axes."""
    for kind in bands.pair.values:
        color, marker, line = _KIND_STYLE.get(str(kind), ("grey", "o", "-"))
        b = bands.sel(pair=kind)
        n = int(b.n_pairs.max())
        ax.fill_between(bands.layer, b["min"], b["max"], color=color, alpha=0.18, linewidth=0)
        ax.plot(
            bands.layer,
            b["mean"],
            color=color,
            marker=marker,
            markersize=3.5,
            linestyle=line,
            label=f"{kind} ({n} pair{'s' if n != 1 else ''})",
        )
    ax.set(ylabel=f"{metric.upper()} distance", xticks=bands.layer.values)
    ax.set_title("pairs of models by what they differ in: mean, band = range over the pairs", loc="left")
    legend_right(ax)


def _kind_rows(bands: xr.Dataset, same: xr.DataArray, kinds: dict[tuple[str, str], str]):
    frames = [tidy(bands[name], name, panel="pair kinds") for name in ("mean", "min", "max")]
    frames.append(tidy(bands.n_pairs.astype(float), "n_pairs", panel="pair kinds"))
    for (a, b), kind in kinds.items():
        if kind in bands.pair.values:
            frames.append(
                tidy(same.sel(model_a=a, model_b=b), "distance", panel="pair kinds", pair=kind, model_a=a, model_b=b)
            )
    return frames


@figure
def similarity_heatmaps(path, metric: str = "pwcca"):
    """Layer x layer distance within each model (heatmaps in rows of four, one colour scale
    fit to the data: 0 to its 99th percentile), and below, the same-layer distance between
    models by pair kind (:func:`kind_bands`)."""
    from matplotlib.ticker import MaxNLocator

    ds = open_group(path, "similarity")
    if ds is None or metric not in ds.metric.values:
        return None
    pyplot = plt()
    d = ds.distance.sel(metric=metric)
    models = [str(m) for m in ds.model_a.values]
    within = np.stack([d.sel(model_a=m, model_b=m).values for m in models])
    same = same_layer(ds, metric)
    kinds = pair_kinds(ds)
    bands = kind_bands(same, kinds)
    cols = min(4, len(models))
    rows = -(-len(models) // cols)
    fig = pyplot.figure(figsize=(WIDTH, 2.15 * rows + (2.6 if bands.sizes["pair"] else 0)), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[2.15 * rows, 2.6]) if bands.sizes["pair"] else (fig, None)
    axes = top.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(models) :]:
        ax.remove()
    vmin, vmax = robust_range(within, low=0.0)
    for ax, m, v in zip(axes, models, within, strict=False):
        im = ax.imshow(v, vmin=vmin, vmax=vmax, cmap="viridis", origin="lower")
        ax.set_title(m)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    label_edges(list(axes[: len(models)]), xlabel="layer", ylabel="layer")
    extend = "max" if np.nanmax(within) > vmax else "neither"
    top.colorbar(
        im,
        ax=list(axes[: len(models)]),
        fraction=0.03,
        extend=extend,
        label=scale_label(f"{metric.upper()} distance,\nlayer vs layer", vmin, vmax, low="0"),
    )
    frames = [tidy(d.sel(model_a=m, model_b=m), "distance", panel="layer vs layer", model=m) for m in models]
    frames = [f.drop(columns=[c for c in ("model_a", "model_b") if c in f.columns]) for f in frames]
    if bottom is not None:
        _draw_kinds(bottom.subplots(), bands, metric)
        bottom.axes[0].set_xlabel("layer (same layer in both models)")
        frames += _kind_rows(bands, same, kinds)
    fig.suptitle(f"{metric.upper()} distance within each model and between models")
    return fig, concat(frames)


@figure
def pair_distances(path, metric: str = "pwcca"):
    """Same-layer distance between two models from layer 0 up, as groups (claims 9 and 10):
    top, per pair kind the mean over its pairs with the min-max range as a band
    (:func:`kind_bands`); bottom, the base models' LM-MT, MT-MLM and LM-MLM
    (:func:`objective_pairs`) with their 95% intervals over sentences as error bars where
    stored and, as a band, the range over every combination of seed replicates."""
    ds = open_group(path, "similarity")
    if ds is None or metric not in ds.metric.values:
        return None
    same = same_layer(ds, metric)
    kinds = pair_kinds(ds)
    bands = kind_bands(same, kinds)
    pairs = objective_pairs(ds, metric)
    panels = int(bands.sizes["pair"] > 0) + int(pairs is not None)
    if not panels:
        return None
    pyplot = plt()
    fig, axes = pyplot.subplots(
        panels, 1, figsize=(WIDTH, 2.7 * panels + 0.3), sharex=True, squeeze=False, layout="constrained"
    )
    axes = list(axes[:, 0])
    frames = []
    if bands.sizes["pair"]:
        _draw_kinds(axes[0], bands, metric)
        frames += _kind_rows(bands, same, kinds)
    if pairs is not None:
        ax = axes[-1]
        for p in pairs.objective_pair.values:
            v = pairs.sel(objective_pair=p)
            key = tuple(str(p).lower().split("-"))
            color, marker, line = _PAIR_STYLE.get(key, ("grey", "o", "-"))
            n = int(v.combinations)
            if n > 1:
                ax.fill_between(pairs.layer, v.range_min, v.range_max, color=color, alpha=0.18, linewidth=0)
            ax.plot(
                pairs.layer,
                v.distance,
                color=color,
                marker=marker,
                markersize=3.5,
                linestyle=line,
                label=f"{p}: {v.model_a.item()} vs {v.model_b.item()}"
                + (f" (band: {n} seed combinations)" if n > 1 else ""),
            )
            if np.isfinite(v.low.values).any():
                y = v.distance.values
                ax.errorbar(
                    pairs.layer,
                    y,
                    yerr=np.abs(np.stack([y - v.low.values, v.high.values - y])),
                    fmt="none",
                    ecolor=color,
                    elinewidth=0.8,
                    capsize=2,
                )
            for name in ("distance", "low", "high", "range_min", "range_max"):
                frames.append(
                    tidy(
                        v[name],
                        name,
                        panel="objective pairs",
                        pair=str(p),
                        model_a=v.model_a.item(),
                        model_b=v.model_b.item(),
                    )
                )
        ax.set(ylabel=f"{metric.upper()} distance", xticks=pairs.layer.values)
        ax.set_title("objective pairs of the base models (claim 9); bars: 95% interval over sentences", loc="left")
        legend_right(ax)
    axes[-1].set_xlabel("layer (same layer in both models; 0 = embeddings)")
    return fig, concat(frames)


def change_by_frequency(path, metric: str = "pwcca"):
    """Distance between layers n and n + 1 by frequency-rank bin, one panel per model."""
    return adjacent_change_figure(path, group="change", groups="freq_bin", xlabel="frequency rank bin", metric=metric)


#: The figures of :class:`~evolution.analyses.similarity.Similarity`: name -> (function, caption).
FIGURES = {
    "similarity_pwcca": (
        lambda p: similarity_heatmaps(p, "pwcca"),
        "PWCCA distance between the layers of each model (one colour scale for every model, fit to "
        "the data: 0 to its 99th percentile, stated on the colour bar), and between models at the "
        "same layer by what the two differ in: the mean over the pairs of a kind, the band their "
        "range (fig. 3).",
    ),
    "similarity_cka": (lambda p: similarity_heatmaps(p, "cka"), "The same with linear CKA."),
    "similarity_pairs": (
        lambda p: pair_distances(p, "pwcca"),
        "PWCCA distance between two models at the same layer (layer 0 = embeddings). Top: pairs "
        "grouped by what they differ in (two seeds of one objective; two objectives sharing their "
        "initial weights, as in the paper; two objectives across initialisations; token dropout), "
        "the mean over the pairs with their min-max range as a band (claim 10; a token-dropout "
        "model against another objective or seed is left out). Bottom: LM-MT, MT-MLM and LM-MLM "
        "of the base models (claim 9), error bars their 95% intervals over sentences where stored, "
        "the band the range over every combination of seed replicates.",
    ),
    "similarity_pairs_cka": (lambda p: pair_distances(p, "cka"), "The same with linear CKA."),
    "change_pwcca": (
        lambda p: change_by_frequency(p, "pwcca"),
        "Change between adjacent layers (PWCCA distance) by token frequency rank (fig. 4).",
    ),
    "change_equal_pwcca": (
        lambda p: adjacent_change_figure(
            p,
            group="change_equal",
            groups="freq_bin",
            xlabel="bin of equal occurrences, by frequency rank",
            metric="pwcca",
        ),
        "The same on bins holding equal numbers of occurrences (q1: the most frequent tokens; "
        "the bins' rank ranges and sizes are in the change_equal group).",
    ),
}
