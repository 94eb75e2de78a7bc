"""The figures of the heads analysis (:mod:`evolution.analyses.heads`): entropy per head
(Clark et al. 2019, fig. 4), attention and norms to special tokens (Kobayashi et al. 2020),
dependency heads (Clark et al. 2019, sec. 4.2), the head map (Clark et al. 2019, fig. 6)
and confidence with the roles of every head (Voita et al. ACL 2019, fig. 1-3).
Wide figures are laid out in rows (:func:`~evolution.analyses.plotting.panel_grid`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from evolution.analyses.heads.dependency import CLARK_DIRECTIONS
from evolution.analyses.heads.statistics import KEY_TYPES
from evolution.analyses.plotting import (
    STYLES,
    WIDTH,
    concat,
    figure,
    label_edges,
    legend_below,
    legend_right,
    open_group,
    panel_grid,
    plt,
    robust_range,
    scale_label,
    tidy,
)

__all__ = [
    "entropy_by_head",
    "special_tokens_by_layer",
    "dependency_heatmap",
    "head_roles",
    "head_map",
    "role_table",
    "RARE_SHARE",
    "FIGURES",
]

#: a rare-token head points to the sentence's rarest token in at least this share of sentences
#: (the heads group's attribute ``rare_share`` where stored; as the pruning analysis and the
#: head verdicts count the roles)
RARE_SHARE = 0.2


@figure
def entropy_by_head(path):
    """Per model (rows of four panels), the entropy of every head (dots) by layer against the
    uniform baseline (line)."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    models = list(ds.model.values)
    fig, axes = panel_grid(len(models), panel=(2.4, 2.0), sharey=True, extra=0.3)
    frames = []
    for i, (ax, m) in enumerate(zip(axes, models, strict=True)):
        v = ds.value.sel(model=m)
        style = STYLES[i % len(STYLES)]
        for layer in ds.layer.values:
            e = v.sel(layer=layer, measure="entropy").values
            ax.scatter(np.full(len(e), layer), e, s=12, color=style["color"], marker=style["marker"])
        uniform = v.sel(measure="uniform_entropy").mean("head")
        ax.plot(ds.layer, uniform, color="grey", lw=0.8, label="uniform attention (mean over heads)")
        ax.set(title=str(m), xticks=ds.layer.values)
        frames += [
            tidy(v.sel(measure="entropy"), "entropy", model=str(m)),
            tidy(uniform, "uniform_entropy (mean over heads)", model=str(m)),
        ]
    label_edges(axes, xlabel="layer", ylabel="entropy (nats)")
    legend_below(fig)
    return fig, concat(frames)


@figure
def special_tokens_by_layer(path):
    """Share of attention going to BOS / EOS / punctuation per layer, one panel per key type:
    weights (solid) and ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020) fig. 2-3."""
    from matplotlib.lines import Line2D

    ds = open_group(path, "heads")
    if ds is None:
        return None
    fig, axes = panel_grid(len(KEY_TYPES), panel=(3.2, 2.5), sharey=True, extra=0.5)
    frames, has_norm = [], False
    for ax, k in zip(axes, KEY_TYPES, strict=True):
        for i, m in enumerate(ds.model.values):
            color = STYLES[i % len(STYLES)]["color"]
            alpha = ds.layer_alpha_share.sel(model=m, key_type=k)
            ax.plot(ds.layer, alpha, color=color, marker="o", markersize=3, label=str(m))
            frames.append(tidy(alpha, "layer_alpha_share"))
            norm = ds.layer_norm_share.sel(model=m, key_type=k)
            if not np.isnan(norm.values).all():
                has_norm = True
                ax.plot(ds.layer, norm, color=color, linestyle="--", marker="x", markersize=3)
                frames.append(tidy(norm, "layer_norm_share"))
        ax.set(title=f"to {k}", xticks=ds.layer.values)
        ax.set_ylim(bottom=0)  # shares: from 0, the top fit to the data
    label_edges(axes, xlabel="layer", ylabel="share of each query's attention")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], color="black", marker="o", markersize=3)]
    labels += ["attention weights (solid)"]
    if has_norm:
        handles.append(Line2D([], [], color="black", linestyle="--", marker="x", markersize=3))
        labels.append("||sum alpha f(x)|| (dashed)")
    legend_below(fig, handles, labels)
    return fig, concat(frames)


@figure
def dependency_heatmap(path, top: int = 15):
    """Per direction of Clark et al.'s table (dependent to head; head to dependent on the
    transposed map), one panel under the other: relations x models, the score-split accuracy
    of the head picked on the select split (colour: fit to the data, stated), annotated with
    it and (in brackets) the offset baseline's."""
    ds = open_group(path, "heads_dependency")
    if ds is None:
        return None
    pyplot = plt()
    arcs = ds.arcs.sel(split="score").sum("model").values
    rel = ds.relation.values[np.argsort(-arcs, kind="stable")[:top]]
    models = list(ds.model.values)
    directions = [d for d in CLARK_DIRECTIONS if d in ds.direction.values]
    acc = ds.picked_accuracy.sel(direction=directions, relation=rel)
    base = ds.baseline_accuracy.sel(direction=directions, relation=rel)
    vmin, vmax = robust_range(acc.values)
    cell = (WIDTH - 2.4) / max(1, len(models))  # inches per model column
    both = cell >= 0.8  # room for "0.52 (0.40)" at the smallest font
    fig, axes = pyplot.subplots(
        len(directions),
        1,
        figsize=(WIDTH, (0.24 * len(rel) + 1.0) * len(directions)),
        squeeze=False,
        layout="constrained",
    )
    axes = list(axes[:, 0])
    cmap = pyplot.get_cmap("viridis")
    for ax, direction in zip(axes, directions, strict=True):
        a = acc.sel(direction=direction).transpose("relation", "model").values
        b = base.sel(direction=direction).transpose("relation", "model").values
        im = ax.imshow(a, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
        for r in range(a.shape[0]):
            for c in range(a.shape[1]):
                if np.isfinite(a[r, c]):
                    shade = (a[r, c] - vmin) / (vmax - vmin)
                    ax.text(
                        c,
                        r,
                        f"{a[r, c]:.2f} ({b[r, c]:.2f})" if both else f"{a[r, c]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if shade < 0.6 else "black",
                    )
        ax.set_xticks(range(len(models)), models)
        ax.set_yticks(range(len(rel)), rel)
        ax.set_title(
            f"{str(direction).replace('_', ' ')}: accuracy of the head picked on "
            f"{ds.treebank.values[0]}, scored on {ds.treebank.values[1]}"
            + (" (in brackets: the offset baseline)" if both else ""),
            loc="left",
        )
    fig.colorbar(
        im,
        ax=axes,
        fraction=0.03,
        extend=_extend(acc.values, vmin, vmax),
        label=scale_label("accuracy of the picked head", vmin, vmax),
    )
    frames = [tidy(acc, "picked_accuracy"), tidy(base, "baseline_accuracy")]
    return fig, concat(frames)


def _extend(values, vmin: float, vmax: float) -> str:
    """A colour bar's ``extend`` for data beyond [vmin, vmax]."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    low, high = bool(v.size and v.min() < vmin), bool(v.size and v.max() > vmax)
    return "both" if low and high else "min" if low else "max" if high else "neither"


def role_table(ds: xr.Dataset, model: str):
    """One row per head of ``model`` that exists (finite confidence): layer, head, confidence
    and the roles of Voita et al. (ACL 2019): ``positional``, ``syntactic`` (any relation;
    ``syntactic_relations`` names them), ``rare_token`` (``rare_token_share`` >=
    :data:`RARE_SHARE` or the group's ``rare_share``) and ``roles``, their letters (P, S, R)."""
    import pandas as pd

    rare_share = float(ds.attrs.get("rare_share", RARE_SHARE))
    h = ds.sel(model=model)
    conf = h.value.sel(measure="confidence").transpose("layer", "head").values
    rows = []
    for i, layer in enumerate(ds.layer.values):
        for j, head in enumerate(ds["head"].values):
            if not np.isfinite(conf[i, j]):
                continue
            pos = bool(h.positional.values[i, j]) if "positional" in h else False
            rels = (
                [
                    str(r)
                    for r, s in zip(
                        h.syntactic_relation.values,
                        h.syntactic.transpose("layer", "head", "syntactic_relation").values[i, j],
                        strict=True,
                    )
                    if s
                ]
                if "syntactic" in h
                else []
            )
            share = (
                float(h.rare_token_share.transpose("layer", "head").values[i, j])
                if "rare_token_share" in h
                else float("nan")
            )
            rare = bool(np.isfinite(share) and share >= rare_share)
            rows.append(
                dict(
                    model=str(model),
                    layer=int(layer),
                    head=int(head),
                    confidence=float(conf[i, j]),
                    positional=pos,
                    syntactic=bool(rels),
                    syntactic_relations=" ".join(rels),
                    rare_token_share=share,
                    rare_token=rare,
                    roles="".join(x for x, on in (("P", pos), ("S", bool(rels)), ("R", rare)) if on),
                )
            )
    return pd.DataFrame(rows)


def _confidence_label(ds) -> str:
    """What the store's ``confidence`` is: over content keys since heads version 4 (which stores
    ``confidence_with_sink`` beside it), over every key, the sinks included, before."""
    if "confidence_with_sink" in ds.measure.values:
        return "confidence (mean largest weight on a content key)"
    return "confidence (mean largest weight on any key, sinks included: a store before heads version 4)"


@figure
def head_roles(path):
    """Confidence and roles of every head, as Voita et al. (ACL 2019) fig. 1-3: per model a
    layer x head heatmap of confidence (one colour scale for all models, fit to the data and
    stated), each head marked with the letters of its roles: P positional, S syntactic (any
    relation), R rare-token; models in rows of panels."""
    from matplotlib.lines import Line2D

    ds = open_group(path, "heads")
    if ds is None or "confidence" not in ds.measure.values:
        return None
    pyplot = plt()
    tables = [role_table(ds, m) for m in ds.model.values]
    models = [str(m) for m, t in zip(ds.model.values, tables, strict=True) if len(t)]
    tables = [t for t in tables if len(t)]
    if not tables:
        return None
    L, H = ds.sizes["layer"], ds.sizes["head"]
    panel = (max(2.2, 0.34 * H + 0.5), max(1.8, 0.26 * L + 0.6))
    fig, axes = panel_grid(len(models), panel=panel, cols=max(1, min(4, int(WIDTH / panel[0] + 1e-6))), extra=1.4)
    conf = np.concatenate([t.confidence.values for t in tables])
    vmin, vmax = robust_range(conf)
    cmap = pyplot.get_cmap("viridis")
    for ax, m, t in zip(axes, models, tables, strict=True):
        grid = np.full((L, H), np.nan)
        layers, heads = list(ds.layer.values), list(ds["head"].values)
        for row in t.itertuples():
            r, c = layers.index(row.layer), heads.index(row.head)
            grid[r, c] = row.confidence
            if row.roles:
                shade = (row.confidence - vmin) / (vmax - vmin)
                ax.text(
                    c,
                    r,
                    row.roles,
                    ha="center",
                    va="center",
                    fontsize=8,
                    fontweight="bold",
                    color="white" if shade < 0.6 else "black",
                )
        im = ax.imshow(grid, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
        ax.set_xticks(range(H), [str(h) for h in heads])
        ax.set_yticks(range(L), [str(x) for x in layers])
        ax.set_title(m)
    label_edges(axes, xlabel="head", ylabel="layer")
    fig.colorbar(
        im,
        ax=axes,
        location="bottom",
        fraction=0.05,
        aspect=40,
        shrink=0.8,
        extend=_extend(conf, vmin, vmax),
        label=scale_label(_confidence_label(ds), vmin, vmax).replace(":\n", ": ", 1),
    )
    rare_share = float(ds.attrs.get("rare_share", RARE_SHARE))
    rels = ", ".join(str(r) for r in ds.syntactic_relation.values) if "syntactic" in ds else ""
    positional = ds.positional.attrs.get("long_name", "one offset holds most maxima") if "positional" in ds else ""
    marks = [
        ("P", f"positional ({positional})" if positional else "positional (not measured)"),
        ("S", f"syntactic (any of {rels})" if rels else "syntactic (not measured)"),
        ("R", f"rare-token (share of sentences >= {rare_share:g})"),
    ]
    legend_below(
        fig,
        [Line2D([], [], linestyle="none", marker=f"${x}$", color="black", markersize=7) for x, _ in marks],
        [text for _, text in marks],
    )
    return fig, concat(tables)


@figure
def head_map(path):
    """All heads of all models in one 2-D MDS map of their Jensen-Shannon distances."""
    ds = open_group(path, "heads_map")
    if ds is None:
        return None
    import pandas as pd

    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(7.0, 4.6), layout="constrained")
    layers = ds.unit_layer.values
    for i, m in enumerate(dict.fromkeys(ds.unit_model.values)):
        sel = ds.unit_model.values == m
        style = STYLES[i % len(STYLES)]
        ax.scatter(
            ds.xy.values[sel, 0],
            ds.xy.values[sel, 1],
            s=12 + 10 * layers[sel],
            color=style["color"],
            marker=style["marker"],
            alpha=0.75,
            label=str(m),
        )
    ax.set(title=f"heads by Jensen-Shannon distance (MDS; {ds.attrs.get('sentences')} sentences)", xticks=[], yticks=[])
    legend_right(ax, title="model\n(marker size: layer)")
    data = pd.DataFrame(
        {
            "model": [str(m) for m in ds.unit_model.values],
            "layer": ds.unit_layer.values,
            "head": ds.unit_head.values,
            "x": ds.xy.values[:, 0],
            "y": ds.xy.values[:, 1],
        }
    )
    return fig, data


#: The figures of :class:`~evolution.analyses.heads.analysis.Heads`: name -> (function, caption).
FIGURES = {
    "heads_entropy": (
        entropy_by_head,
        "Entropy of each head's attention (dots), averaged over the queries of the "
        "stored sentences, against uniform attention (grey), per layer "
        "(Clark et al. 2019, fig. 4).",
    ),
    "heads_special": (
        special_tokens_by_layer,
        "Share of attention to the beginning token (BOS / [CLS]), the end token (EOS / [SEP]) and "
        "punctuation per layer: attention weights averaged over heads (solid) against the norm of the "
        "summed weighted vectors ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020).",
    ),
    "heads_dependency": (
        dependency_heatmap,
        "Dependency relations (the 15 most frequent) found by one attention head: accuracy on the "
        "score treebank (UD EWT test) of the head picked on the select treebank (UD EWT dev), in "
        "brackets the best fixed-offset baseline picked the same way (Clark et al. 2019, section "
        "4.2; they picked and scored on the same data: heads_dependency/best_accuracy). Colour "
        "scale fit to the data (stated on the colour bar).",
    ),
    "heads_map": (
        head_map,
        "Every head of every model placed by multidimensional scaling of the Jensen-Shannon "
        "distance between their word-level attention (content words; Clark et al. 2019, fig. 6).",
    ),
    "heads_roles": (
        head_roles,
        "Confidence of every head (the mean over content queries of its largest weight on a "
        "content key; in stores before heads version 4 on any key: the colour bar says which) by "
        "layer and head, one panel per model, with its roles (Voita et al., "
        "ACL 2019, fig. 1-3): P positional (>= 90% of maxima on one offset), S syntactic "
        "(dependency accuracy >= the offset baseline + 10 points for a relation), R rare-token "
        "(share of sentences whose maxima go mostly to the rarest token >= 0.2). One colour "
        "scale for every model, fit to the data.",
    ),
}
