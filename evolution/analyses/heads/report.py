"""Tables of the heads analysis (:mod:`evolution.analyses.heads`); its figures are in
:mod:`evolution.analyses.heads.figures` (importable from here too)."""

from __future__ import annotations

import numpy as np

from evolution.analyses.heads.dependency import CLARK_DIRECTIONS
from evolution.analyses.heads.figures import (  # noqa: F401  # re-exported: importable from here as before
    FIGURES,
    dependency_heatmap,
    entropy_by_head,
    head_map,
    head_roles,
    special_tokens_by_layer,
)
from evolution.analyses.plotting import open_group


def _tables(path) -> list[tuple[str, list[list[str]], str]]:
    """Head roles per model, dependency heads for Voita et al.'s relations, frequency correlations."""
    ds, dep = open_group(path, "heads"), open_group(path, "heads_dependency")
    out: list[tuple[str, list[list[str]], str]] = []
    if ds is None:
        return out

    def f(v) -> str:
        return "" if not np.isfinite(v) else f"{v:.2f}"

    head = ["model", "positional heads", "max rare-token share (layer-head)"]
    rels = list(ds.syntactic_relation.values) if "syntactic" in ds else []
    rows = [head + [f"syntactic {r}" for r in rels]]
    for m in ds.model.values:
        rare = ds.rare_token_share.sel(model=m).values
        where = np.unravel_index(np.nanargmax(rare), rare.shape) if np.isfinite(rare).any() else None
        rows.append(
            [str(m), str(int(ds.positional.sel(model=m).sum()))]
            + [f"{np.nanmax(rare):.2f} ({where[0] + 1}-{where[1]})" if where else ""]
            + [str(int(ds.syntactic.sel(model=m, syntactic_relation=r).sum())) for r in rels]
        )
    out.append(
        (
            "Head roles",
            rows,
            "Positional: >= 90% of maxima on one offset; rare-token: share of main-text "
            "sentences whose maxima (content queries) go mostly to the least frequent token (training-split "
            "counts); syntactic: dependency accuracy (the dependent's or the head word's most attended other "
            "word) >= the offset baseline + 10 points (Voita et al. ACL 2019).",
        )
    )
    if dep is not None:
        rows = [["model", "relation", "direction", "head (dev)", "test accuracy", "same-data best", "offset baseline"]]
        for m in dep.model.values:
            for r in [x for x in ("nsubj", "obj", "amod", "advmod") if x in dep.relation.values]:
                for d in [x for x in CLARK_DIRECTIONS if x in dep.direction.values]:
                    sel = dict(model=m, relation=r, direction=d)
                    rows.append(
                        [
                            str(m),
                            r,
                            str(d).replace("_", " "),
                            f"{int(dep.picked_layer.sel(**sel))}-{int(dep.picked_head.sel(**sel))}",
                            f(dep.picked_accuracy.sel(**sel).item()),
                            f(dep.best_accuracy.sel(**sel).item()),
                            f"{f(dep.baseline_accuracy.sel(**sel).item())} "
                            f"(offset {int(dep.baseline_offset.sel(**sel)):+d})",
                        ]
                    )
        out.append(
            (
                "Dependency heads",
                rows,
                f"Picked on {dep.treebank.values[0]}, scored on {dep.treebank.values[1]} "
                "(layer-head counted from 1-0); same-data best: picked and scored on the second, as Clark et al. "
                "Directions as Clark et al.'s released code: dependent to head (the dependent's most attended "
                "other word is its head) and head to dependent clark (the transposed map: the word attending "
                "most to the dependent is its head).",
            )
        )
    dec = open_group(path, "heads_decoder")
    if dec is not None:
        rows = [
            [
                "model",
                "attention",
                "layer",
                "entropy (uniform)",
                "confidence",
                "to </s>",
                "to punct.",
                "positional heads",
                "max rare-token share",
            ]
        ]
        for m in dec.model.values:
            for a in dec.attention.values:
                v = dec.value.sel(model=m, attention=a)
                for layer in dec.layer.values:
                    x = v.sel(layer=layer)
                    if np.isnan(x.sel(measure="entropy")).all():
                        continue

                    def mean(name, x=x):
                        return x.sel(measure=name).mean("head").item()

                    rows.append(
                        [
                            str(m),
                            str(a).replace("_", "-"),
                            str(int(layer)),
                            f"{f(mean('entropy'))} ({f(mean('uniform_entropy'))})",
                            f(mean("confidence")),
                            f(mean("to_bos" if a == "decoder_self" else "to_eos")),
                            f(mean("to_punct")),
                            str(int(dec.positional.sel(model=m, attention=a, layer=layer).sum()))
                            if a == "decoder_self"
                            else "n/a",
                            f(dec.rare_token_share.sel(model=m, attention=a, layer=layer).max().item()),
                        ]
                    )
        out.append(
            (
                "Decoder heads of the translation model",
                rows,
                "Teacher-forced on the reference translations of the analysed sentences; means over heads. "
                "Decoder self-attention: to </s> is the start symbol, positional heads have >= 90% of maxima on "
                "offset -1 or 0; encoder-decoder: to </s> is the source's end, positions do not apply. "
                "Rare-token share: the least frequent target (self) or source (encoder-decoder) token.",
            )
        )
    rows = [["model", "quantity"] + [str(int(v)) for v in ds.layer.values]]
    for m in ds.model.values:
        for q in ds.quantity.values:
            rows.append([str(m), str(q)] + [f(v) for v in ds.spearman.sel(model=m, quantity=q).values])
    out.append(
        (
            "Spearman correlation with frequency rank, by layer",
            rows,
            "Of ||f(x)|| (averaged over heads) and of the attention a token receives, over the content tokens of "
            "the analysis set (Kobayashi et al. 2020); frequency: training-split counts where the model has them "
            f"({', '.join(f'{m}: {v}' for m, v in ds.attrs.get('frequency', {}).items())}); a positive value: rarer "
            "tokens score higher.",
        )
    )
    return out
