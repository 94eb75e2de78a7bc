"""Tables and figures of the heads analysis (:mod:`evolution.analyses.heads`)."""

from __future__ import annotations

import numpy as np

from evolution.analyses.heads.dependency import CLARK_DIRECTIONS
from evolution.analyses.heads.statistics import KEY_TYPES
from evolution.analyses.plotting import STYLES, open_group, plt

def _tables(path) -> list[tuple[str, list[list[str]], str]]:
    """Head roles per model, dependency heads for Voita et al.'s relations, frequency correlations."""
    ds, dep = open_group(path, "heads"), open_group(path, "heads_dependency")
    out = []
    if ds is None:
        return out
    f = lambda v: "" if not np.isfinite(v) else f"{v:.2f}"  # noqa: E731
    head = ["model", "positional heads", "max rare-token share (layer-head)"]
    rels = list(ds.syntactic_relation.values) if "syntactic" in ds else []
    rows = [head + [f"syntactic {r}" for r in rels]]
    for m in ds.model.values:
        rare = ds.rare_token_share.sel(model=m).values
        where = np.unravel_index(np.nanargmax(rare), rare.shape) if np.isfinite(rare).any() else None
        rows.append([str(m), str(int(ds.positional.sel(model=m).sum()))]
                    + [f"{np.nanmax(rare):.2f} ({where[0] + 1}-{where[1]})" if where else ""]
                    + [str(int(ds.syntactic.sel(model=m, syntactic_relation=r).sum())) for r in rels])
    out.append(("Head roles", rows, "Positional: >= 90% of maxima on one offset; rare-token: share of main-text "
                "sentences whose maxima (content queries) go mostly to the least frequent token (training-split "
                "counts); syntactic: dependency accuracy (the dependent's or the head word's most attended other "
                "word) >= the offset baseline + 10 points (Voita et al. ACL 2019)."))
    if dep is not None:
        rows = [["model", "relation", "direction", "head (dev)", "test accuracy", "same-data best", "offset baseline"]]
        for m in dep.model.values:
            for r in [x for x in ("nsubj", "obj", "amod", "advmod") if x in dep.relation.values]:
                for d in [x for x in CLARK_DIRECTIONS if x in dep.direction.values]:
                    sel = dict(model=m, relation=r, direction=d)
                    rows.append([str(m), r, str(d).replace("_", " "),
                                 f"{int(dep.picked_layer.sel(**sel))}-{int(dep.picked_head.sel(**sel))}",
                                 f(dep.picked_accuracy.sel(**sel).item()), f(dep.best_accuracy.sel(**sel).item()),
                                 f"{f(dep.baseline_accuracy.sel(**sel).item())} "
                                 f"(offset {int(dep.baseline_offset.sel(**sel)):+d})"])
        out.append(("Dependency heads", rows, f"Picked on {dep.treebank.values[0]}, scored on {dep.treebank.values[1]} "
                    "(layer-head counted from 1-0); same-data best: picked and scored on the second, as Clark et al. "
                    "Directions as Clark et al.'s released code: dependent to head (the dependent's most attended "
                    "other word is its head) and head to dependent clark (the transposed map: the word attending "
                    "most to the dependent is its head)."))
    dec = open_group(path, "heads_decoder")
    if dec is not None:
        rows = [["model", "attention", "layer", "entropy (uniform)", "confidence", "to </s>", "to punct.",
                 "positional heads", "max rare-token share"]]
        for m in dec.model.values:
            for a in dec.attention.values:
                v = dec.value.sel(model=m, attention=a)
                for layer in dec.layer.values:
                    x = v.sel(layer=layer)
                    if np.isnan(x.sel(measure="entropy")).all():
                        continue
                    mean = lambda name: x.sel(measure=name).mean("head").item()  # noqa: E731
                    rows.append([str(m), str(a).replace("_", "-"), str(int(layer)),
                                 f"{f(mean('entropy'))} ({f(mean('uniform_entropy'))})", f(mean("confidence")),
                                 f(mean("to_bos" if a == "decoder_self" else "to_eos")), f(mean("to_punct")),
                                 str(int(dec.positional.sel(model=m, attention=a, layer=layer).sum()))
                                 if a == "decoder_self" else "n/a",
                                 f(dec.rare_token_share.sel(model=m, attention=a, layer=layer).max().item())])
        out.append(("Decoder heads of the translation model", rows,
                    "Teacher-forced on the reference translations of the analysed sentences; means over heads. "
                    "Decoder self-attention: to </s> is the start symbol, positional heads have >= 90% of maxima on "
                    "offset -1 or 0; encoder-decoder: to </s> is the source's end, positions do not apply. "
                    "Rare-token share: the least frequent target (self) or source (encoder-decoder) token."))
    rows = [["model", "quantity"] + [str(int(v)) for v in ds.layer.values]]
    for m in ds.model.values:
        for q in ds.quantity.values:
            rows.append([str(m), str(q)] + [f(v) for v in ds.spearman.sel(model=m, quantity=q).values])
    out.append(("Spearman correlation with frequency rank, by layer", rows,
                "Of ||f(x)|| (averaged over heads) and of the attention a token receives, over the content tokens of "
                "the analysis set (Kobayashi et al. 2020); frequency: training-split counts where the model has them "
                f"({', '.join(f'{m}: {v}' for m, v in ds.attrs.get('frequency', {}).items())}); a positive value: rarer "
                "tokens score higher."))
    return out


def entropy_by_head(path):
    """Per model, the entropy of every head (dots) by layer against the uniform baseline (line)."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    models = list(ds.model.values)
    fig, axes = pyplot.subplots(1, len(models), figsize=(3.8 * len(models), 3.2), squeeze=False, sharey=True,
                                layout="constrained")
    for i, (ax, m) in enumerate(zip(axes[0], models)):
        v = ds.value.sel(model=m)
        for layer in ds.layer.values:
            e = v.sel(layer=layer, measure="entropy").values
            ax.scatter(np.full(len(e), layer), e, s=14, color=STYLES[i % len(STYLES)]["color"],
                       marker=STYLES[i % len(STYLES)]["marker"])
        ax.plot(ds.layer, v.sel(measure="uniform_entropy").mean("head"), color="grey", lw=0.8, label="uniform")
        ax.set(title=str(m), xlabel="layer")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("entropy of a head's attention (nats)")
    return fig


def special_tokens_by_layer(path):
    """Share of attention going to BOS / EOS / punctuation per layer: weights (solid) and
    ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020) fig. 2-3."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    fig, axes = pyplot.subplots(1, len(KEY_TYPES), figsize=(4 * len(KEY_TYPES), 3.2), squeeze=False, sharey=True,
                                layout="constrained")
    for ax, k in zip(axes[0], KEY_TYPES):
        for i, m in enumerate(ds.model.values):
            color = STYLES[i % len(STYLES)]["color"]
            ax.plot(ds.layer, ds.layer_alpha_share.sel(model=m, key_type=k), color=color, marker="o", label=f"{m}: alpha")
            norm = ds.layer_norm_share.sel(model=m, key_type=k)
            if not np.isnan(norm.values).all():
                ax.plot(ds.layer, norm, color=color, linestyle="--", marker="x", label=f"{m}: ||sum alpha f||")
        ax.set(title=f"to {k}", xlabel="layer", ylim=(0, 1))
    axes[0][0].set_ylabel("share of each query's attention")
    axes[0][-1].legend(fontsize=6)
    return fig


def dependency_heatmap(path, top: int = 15):
    """Per direction of Clark et al.'s table (dependent to head; head to dependent on the
    transposed map): relations x models, the score-split accuracy of the head picked on the
    select split, annotated with it and (in brackets) the offset baseline's."""
    ds = open_group(path, "heads_dependency")
    if ds is None:
        return None
    pyplot = plt()
    arcs = ds.arcs.sel(split="score").sum("model").values
    rel = ds.relation.values[np.argsort(-arcs, kind="stable")[:top]]
    models = list(ds.model.values)
    fig, axes = pyplot.subplots(1, 2, figsize=(2.2 + 1.6 * len(models) * 2, 0.35 * len(rel) + 1.6), squeeze=False,
                                layout="constrained")
    for ax, direction in zip(axes[0], CLARK_DIRECTIONS):
        acc = ds.picked_accuracy.sel(direction=direction, relation=rel).transpose("relation", "model").values
        base = ds.baseline_accuracy.sel(direction=direction, relation=rel).transpose("relation", "model").values
        im = ax.imshow(acc, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for r in range(acc.shape[0]):
            for c in range(acc.shape[1]):
                if np.isfinite(acc[r, c]):
                    ax.text(c, r, f"{acc[r, c]:.2f} ({base[r, c]:.2f})", ha="center", va="center", fontsize=6,
                            color="white" if acc[r, c] < 0.6 else "black")
        ax.set_xticks(range(len(models)), models, fontsize=8)
        ax.set_yticks(range(len(rel)), rel, fontsize=7)
        ax.set_title(str(direction).replace("_", " "), fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), fraction=0.03, label="accuracy of the dev-picked head on test")
    return fig


def head_roles(path):
    """Per model, how many heads are positional and, per relation, syntactic."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    roles = {"positional": ds.positional.sum(("layer", "head")).values}
    if "syntactic" in ds:
        for r in ds.syntactic_relation.values:
            roles[f"syntactic {r}"] = ds.syntactic.sel(syntactic_relation=r).sum(("layer", "head")).values
    models = list(ds.model.values)
    fig, ax = pyplot.subplots(figsize=(1.2 + 0.9 * len(roles) * len(models) / 2, 3.2), layout="constrained")
    width = 0.8 / len(models)
    x = np.arange(len(roles))
    for i, m in enumerate(models):
        ax.bar(x + i * width, [v[i] for v in roles.values()], width, label=str(m),
               color=STYLES[i % len(STYLES)]["color"])
    ax.set_xticks(x + width * (len(models) - 1) / 2, list(roles), rotation=30, fontsize=7)
    ax.set(ylabel="heads", title=f"head roles ({int(ds.sizes['layer'] * ds.sizes['head'])} heads per model at most)")
    ax.legend(fontsize=7)
    return fig


def head_map(path):
    """All heads of all models in one 2-D MDS map of their Jensen-Shannon distances."""
    ds = open_group(path, "heads_map")
    if ds is None:
        return None
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(5.2, 4.4), layout="constrained")
    layers = ds.unit_layer.values
    for i, m in enumerate(dict.fromkeys(ds.unit_model.values)):
        sel = ds.unit_model.values == m
        style = STYLES[i % len(STYLES)]
        ax.scatter(ds.xy.values[sel, 0], ds.xy.values[sel, 1], s=12 + 10 * layers[sel], color=style["color"],
                   marker=style["marker"], alpha=0.75, label=str(m))
    ax.set(title=f"heads by Jensen-Shannon distance (MDS; {ds.attrs.get('sentences')} sentences)",
           xticks=[], yticks=[])
    ax.legend(fontsize=7, title="marker size: layer", title_fontsize=7)
    return fig


#: The figures of :class:`~evolution.analyses.heads.analysis.Heads`: name -> (function, caption).
FIGURES = {
    "heads_entropy": (entropy_by_head, "Entropy of each head's attention (dots), averaged over the queries of the "
                                       "stored sentences, against uniform attention (grey), per layer "
                                       "(Clark et al. 2019, fig. 4)."),
    "heads_special": (special_tokens_by_layer,
                      "Share of attention to the beginning token (BOS / [CLS]), the end token (EOS / [SEP]) and "
                      "punctuation per layer: attention weights averaged over heads (solid) against the norm of the "
                      "summed weighted vectors ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020)."),
    "heads_dependency": (dependency_heatmap,
                         "Dependency relations (the 15 most frequent) found by one attention head: accuracy on the "
                         "score treebank (UD EWT test) of the head picked on the select treebank (UD EWT dev), in "
                         "brackets the best fixed-offset baseline picked the same way (Clark et al. 2019, section "
                         "4.2; they picked and scored on the same data: heads_dependency/best_accuracy)."),
    "heads_map": (head_map, "Every head of every model placed by multidimensional scaling of the Jensen-Shannon "
                            "distance between their word-level attention (content words; Clark et al. 2019, fig. 6)."),
    "heads_roles": (head_roles, "Head roles per model: positional heads (>= 90% of maxima on one offset) and "
                                "syntactic heads per relation (>= 10 points over the offset baseline), Voita et al. "
                                "(ACL 2019)."),
}
