"""One function per figure; each takes the metrics store path and returns a
matplotlib Figure (or None when its group is absent). The notebook calls the
same functions, so the report and the notebook cannot disagree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

__all__ = ["FIGURES", "draw_all", "STYLES"]

#: Distinct colour + line style + marker per model, so coinciding curves stay visible.
STYLES = [dict(color=c, linestyle=ls, marker=mk) for c, ls, mk in
          [("tab:blue", "-", "o"), ("tab:orange", "--", "s"), ("tab:green", ":", "^"), ("tab:red", "-.", "D"),
           ("tab:purple", "-", "v"), ("tab:brown", "--", "P")]]


def _open(path, group) -> xr.Dataset | None:
    try:
        return xr.open_zarr(path, group=group, consolidated=False).load()  # metrics are small
    except (FileNotFoundError, KeyError, ValueError, OSError):
        return None


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def mi_by_layer(path):
    """MI with the input token (and the output label where defined) per layer; band = restart spread."""
    ds = _open(path, "mi")
    if ds is None:
        return None
    plt = _plt()
    targets = list(ds.target.values)
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 3.6), squeeze=False, layout="constrained")
    for ax, t in zip(axes[0], targets):
        for i, m in enumerate(ds.model.values):
            v = ds.mi.sel(model=m, target=t)
            mean, lo, hi = v.mean("restart"), v.min("restart"), v.max("restart")
            if np.isnan(mean.values).all():
                continue
            ax.plot(ds.layer, mean, label=str(m), **STYLES[i % len(STYLES)])
            ax.fill_between(ds.layer, lo, hi, color=STYLES[i % len(STYLES)]["color"], alpha=0.2)
            ax.plot(ds.layer, ds.mi_shuffled.sel(model=m, target=t), color=STYLES[i % len(STYLES)]["color"],
                    linestyle=":", linewidth=0.8)
        h = ds.entropy.sel(target=t).max().item()
        ax.axhline(h, color="grey", linewidth=0.8)
        ax.text(ds.layer.values[0], h, " H(X)", va="bottom", fontsize=8, color="grey")
        ax.set(title=f"MI with the {t} {'token' if t == 'input' else 'label'}", xlabel="layer", ylabel="MI (nats)")
        ax.legend(fontsize=8)
    fig.suptitle("Mutual information via k-means (dotted: shuffled-label control)", fontsize=10)
    return fig


def neighbors_by_layer(path):
    """kNN measures per layer, one panel per measure."""
    ds = _open(path, "neighbors")
    if ds is None:
        return None
    plt = _plt()
    labels = {"same_token": "same token among k-NN", "position_distance": "position distance (same token)",
              "same_left": "same left neighbour (same token)", "same_right": "same right neighbour (same token)",
              "same_pos": "same POS (PTB tag; same token)", "same_deprel": "same dependency relation (same token)"}
    measures = [str(m) for m in ds.measure.values if not str(m).endswith("_chance")]
    cols = min(4, len(measures))
    rows = -(-len(measures) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False, layout="constrained")
    for ax in axes.ravel()[len(measures):]:
        ax.set_visible(False)
    for ax, meas in zip(axes.ravel(), measures):
        for i, m in enumerate(ds.model.values):
            style = STYLES[i % len(STYLES)]
            ax.plot(ds.layer, ds.value.sel(model=m, measure=meas), label=str(m), **style)
            if f"{meas}_chance" in ds.measure.values:  # random neighbours among the type's occurrences
                ax.plot(ds.layer, ds.value.sel(model=m, measure=f"{meas}_chance"), color=style.get("color"),
                        linestyle=":", linewidth=0.8, label="chance (dotted)" if i == 0 else None)
        ax.set(title=labels.get(meas, meas), xlabel="layer")
        ax.legend(fontsize=8)
    return fig


def similarity_heatmaps(path, metric: str = "pwcca"):
    """Layer x layer distance within each model, and same-layer distance between models."""
    ds = _open(path, "similarity")
    if ds is None or metric not in ds.metric.values:
        return None
    plt = _plt()
    d = ds.distance.sel(metric=metric).load()
    models = list(ds.model_a.values)
    fig, axes = plt.subplots(1, len(models) + 1, figsize=(3.6 * (len(models) + 1), 3.4), squeeze=False, layout="constrained")
    for ax, m in zip(axes[0], models):
        im = ax.imshow(d.sel(model_a=m, model_b=m), vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set(title=f"{m}: layer vs layer", xlabel="layer", ylabel="layer")
    fig.colorbar(im, ax=axes[0][:len(models)].tolist(), fraction=0.02, label=f"{metric.upper()} distance")
    ax = axes[0][-1]
    k = 0
    for i, a in enumerate(models):
        for b in models[i + 1:]:
            same = [d.sel(model_a=a, model_b=b, layer_a=layer, layer_b=layer).item() for layer in ds.layer_a.values]
            ax.plot(ds.layer_a, same, label=f"{a} vs {b}", **STYLES[k % len(STYLES)])
            k += 1
    ax.set(title="between models, same layer", xlabel="layer", ylabel=f"{metric.upper()} distance", ylim=(0, 1))
    if k:
        ax.legend(fontsize=8)
    return fig


def _by_group_panels(d, *, series: str, label, width, xlabel: str, ylabel: str, groups: str = "freq_bin"):
    """One panel per model of ``d`` (model, ``series``, ``groups``), a line per ``series``
    value coloured along viridis; groups that are NaN for every model are dropped."""
    d = d.isel({groups: ~np.isnan(d).all(("model", series)).values})
    if d.sizes[groups] == 0:
        return None
    plt = _plt()
    models = list(d.model.values)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False, sharey=True,
                             layout="constrained")
    cmap = plt.get_cmap("viridis")
    n = d.sizes[series]
    x = np.arange(d.sizes[groups])
    for ax, m in zip(axes[0], models):
        for j, v in enumerate(d[series].values):
            ax.plot(x, d.sel({"model": m, series: v}), marker="o", color=cmap(j / max(1, n - 1)), label=label(v),
                    lw=width(v))
        ax.set_xticks(x, [str(b) for b in d[groups].values], rotation=45, fontsize=7)
        ax.set(title=str(m), xlabel=xlabel)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7)
    return fig


def _adjacent_change(path, *, group: str, groups: str, xlabel: str, metric: str):
    """Distance between layers n and n + 1 per subset (``groups`` dimension of ``group``), one panel per model."""
    ds = _open(path, group)
    if ds is None or metric not in ds.metric.values:
        return None
    return _by_group_panels(ds.distance.sel(metric=metric).load(), series="layer_pair", groups=groups,
                            label=lambda pair: f"layers {pair}", width=lambda _: 1.5, xlabel=xlabel,
                            ylabel=f"{metric.upper()} distance, layer n vs n+1")


def change_by_frequency(path, metric: str = "pwcca"):
    """Distance between layers n and n + 1 by frequency-rank bin, one panel per model."""
    return _adjacent_change(path, group="change", groups="freq_bin", xlabel="frequency rank bin", metric=metric)


def change_by_pos(path, metric: str = "pwcca"):
    """Distance between layers n and n + 1 by POS tag of the annotated text, one panel per model."""
    return _adjacent_change(path, group="change_pos", groups="pos",
                            xlabel="UPOS tag (annotated text; most frequent first)", metric=metric)


def influence_by_frequency(path, metric: str = "pwcca"):
    """Token influence by frequency-rank bin of the masked token, one panel per model, a line per layer."""
    ds = _open(path, "influence")
    if ds is None or metric not in ds.metric.values:
        return None
    return _by_group_panels(ds.distance.sel(metric=metric).load(), series="layer",
                            label=lambda layer: f"layer {layer}", width=lambda layer: 2.5 if layer == 1 else 1.2,
                            xlabel="frequency rank bin of the masked token",
                            ylabel=f"{metric.upper()} distance (influence)")


def tsne_grid(path, name: str):
    """models x layers small multiples of one t-SNE selection."""
    ds = _open(path, f"tsne_{name}")
    if ds is None:
        return None
    plt = _plt()
    models, layers = list(ds.model.values), list(ds.layer.values)
    fig, axes = plt.subplots(len(models), len(layers), figsize=(1.9 * len(layers), 2.0 * len(models)),
                             squeeze=False, layout="constrained")
    tokens = ds.token.values
    by_position = bool((ds.position.values >= 0).any()) and len({t for t in tokens.ravel() if t}) == 1
    vocab = sorted({t for t in tokens.ravel() if t})
    cmap = plt.get_cmap("tab10")
    for i, m in enumerate(models):
        keep = ds.token.sel(model=m).values != ""
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            xy = ds.xy.sel(model=m, layer=layer).values[keep]
            if by_position:
                sc = ax.scatter(xy[:, 0], xy[:, 1], c=ds.position.sel(model=m).values[keep], s=3, cmap="viridis")
            else:
                for c, t in enumerate(vocab):
                    sel = ds.token.sel(model=m).values[keep] == t
                    ax.scatter(xy[sel, 0], xy[sel, 1], s=3, color=cmap(c % 10), label=t)
            ax.set_xticks([]), ax.set_yticks([])
            if i == 0:
                ax.set_title(f"layer {layer}", fontsize=8)
            if j == 0:
                ax.set_ylabel(str(m), fontsize=8)
    if by_position:
        fig.colorbar(sc, ax=axes.ravel().tolist(), fraction=0.02, label="position")
    else:
        axes[0][-1].legend(fontsize=6, markerscale=3, loc="upper right")
    fig.suptitle(f"t-SNE of '{' / '.join(vocab)}' occurrences "
                 f"({'coloured by position' if by_position else 'coloured by token'})", fontsize=9)
    return fig


def _tsne_names(path) -> list[str]:
    import zarr

    try:
        groups = zarr.open_group(path, mode="r", zarr_format=3).attrs.get("groups", [])
    except Exception:  # noqa: BLE001
        return []
    return [g[len("tsne_"):] for g in groups if g.startswith("tsne_")]


#: figure name -> (function, caption)
FIGURES = {
    "mi": (mi_by_layer, "MI between a layer's k-means clusters and the input token / the output label "
                        "(Voita et al. 2019, fig. 1-2). Band: spread over k-means restarts; dotted: shuffled control."),
    "neighbors": (neighbors_by_layer, "Who are the k nearest neighbours: same-token rate over pooled "
                                      "occurrences; among occurrences of one token, position distance and the "
                                      "rate of the same left / right neighbour token (fig. 5); with annotated "
                                      "text (corpus.annotated), the rate of the same POS tag / dependency "
                                      "relation there, dotted: the rate of random neighbours of the same token."),
    "similarity_pwcca": (lambda p: similarity_heatmaps(p, "pwcca"),
                         "PWCCA distance between layers of one model and between models at the same layer (fig. 3)."),
    "similarity_cka": (lambda p: similarity_heatmaps(p, "cka"), "The same with linear CKA."),
    "change_pwcca": (lambda p: change_by_frequency(p, "pwcca"),
                     "Change between adjacent layers (PWCCA distance) by token frequency rank (fig. 4)."),
    "change_pos_pwcca": (lambda p: change_by_pos(p, "pwcca"),
                         "Change between adjacent layers (PWCCA distance) by POS tag (UPOS) on the annotated text "
                         "(METHODS.md 4); tags with fewer than min_ratio x d occurrences are left out."),
    "influence_pwcca": (lambda p: influence_by_frequency(p, "pwcca"),
                        "Token influence: PWCCA distance between the other tokens' layer-n states with and without "
                        "one token masked out of the attention keys at layer n, by the frequency rank of the masked "
                        "token (section 5; rare tokens influential at layer 1 in MT and LM)."),
}


def draw_all(path, out_dir) -> list[tuple[str, Path, str]]:
    """Draw every figure that the store supports into ``out_dir`` as PNG.
    Returns (name, file, caption) per figure drawn."""
    plt = _plt()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = dict(FIGURES)
    for name in _tsne_names(path):
        figures[f"tsne_{name}"] = (lambda p, n=name: tsne_grid(p, n),
                                   f"t-SNE (openTSNE, PCA init, fixed seed) of the '{name}' selection per model and layer.")
    drawn = []
    for name, (fn, caption) in figures.items():
        fig = fn(path)
        if fig is None:
            continue
        f = out_dir / f"{name}.png"
        fig.savefig(f, dpi=110, bbox_inches="tight")
        plt.close(fig)
        drawn.append((name, f, caption))
    return drawn
