"""Verdicts K1-K2: Kobayashi, Kuribayashi, Yokoi & Inui (EMNLP 2020), "Attention is Not
Only a Weight: Analyzing Transformers with Vector Norms", read off the ``heads`` group.

The norm of a weighted vector is alpha ||f(x)||, f(x) = (x W_V + b_V) W_O (docs/heads.md).
For one query and a sink key s with weight a_s, the share of the norm going to s,
a_s ||f(s)|| / sum_j a_j ||f(x_j)||, is below its share of the weight a_s exactly when
||f(s)|| is below the weight-averaged ||f(x)|| of the other keys. So:

* K1: ||f(x)|| is small for the sink tokens, head by head (``heads/norm_share`` below
  ``heads/alpha_share`` for the sinks), and for frequent words (``heads/spearman``,
  quantity ``value_norm``: Spearman's rho of ||f(x)|| with a rank that grows with rarity,
  positive when rarer tokens have larger norms);
* K2: per layer, the sinks' share of ||sum_h alpha f(x)|| (the heads' vectors summed, as
  they reach the residual stream: ``heads/layer_norm_share``) is below their share of the
  weight averaged over heads (``heads/layer_alpha_share``): "BERT pays poor attention to
  special tokens" (abstract).
"""

from __future__ import annotations

import numpy as np

from evolution.report.heads_card.base import (
    ALPHA,
    NOT_SIGNIFICANT,
    SINKS,
    HeadRun,
    Outcome,
    Source,
    pfmt,
    signed_rank_below,
    verdict,
)
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, fmt

__all__ = ["claim_small_norms", "claim_norm_below_weight", "RHO_MIN"]

#: K1: the mean over layers of Spearman's rho(||f(x)||, rarity) must reach this (a small
#: correlation by Cohen's convention; Kobayashi et al. report a clearly positive one)
RHO_MIN = 0.1

PAPER = {
    "K1": "the tokens BERT weights most ([CLS], [SEP], periods, commas) have small ||f(x)||, and ||f(x)|| is smaller "
    "for frequent words: it correlates positively with the frequency rank (Kobayashi et al. 2020, sec. 4)",
    "K2": "contrary to the weights, BERT pays poor attention to special tokens once the norms ||alpha f(x)|| are "
    "counted (Kobayashi et al. 2020, abstract, sec. 4)",
}

_SINKS = " + ".join(SINKS)


def _sink_share(run: HeadRun, var: str, model: str) -> np.ndarray:
    """:meth:`HeadRun.sink_share` of a variable that the heads group has (the caller checks)."""
    share = run.sink_share(var, model)
    if share is None:
        raise ValueError(f"{run.path or 'this run'}: heads/{var} has none of the sink key types ({_SINKS})")
    return share


def claim_small_norms(run: HeadRun) -> Finding:
    claim = "||f(x)|| is small for the sink tokens and for frequent words."
    rule = (
        f"per model: (a) the sinks' ({_SINKS}) share of ||alpha f(x)|| (heads/norm_share) below their share of "
        "the weight (heads/alpha_share), head by head, over the heads that attend to a sink: one-sided Wilcoxon "
        f"signed-rank test, p < {ALPHA:g}; and (b) Spearman's rho of ||f(x)|| with the frequency rank "
        "(heads/spearman value_norm; positive: rarer tokens have larger norms) averaged over the layers at least "
        f"{RHO_MIN:g}; every model with norms"
    )
    args = Source(paper=PAPER["K1"], figure="heads_special")
    if run.heads is None:
        return verdict("K1", claim, rule, [], {}, missing="no heads group in this run", **args)
    needed = [v for v in ("value", "alpha_share", "norm_share", "spearman") if v not in run.heads]
    if not needed and "value_norm" not in run.heads.quantity.values:
        needed = ["spearman value_norm"]
    if needed:
        return verdict("K1", claim, rule, [], {}, missing=f"the heads group has no {', '.join(needed)}", **args)
    outcomes, left_out = [], {}
    for m in run.models():
        alpha, norm = _sink_share(run, "alpha_share", m), _sink_share(run, "norm_share", m)
        ok = run.exists(m) & np.isfinite(alpha) & np.isfinite(norm) & (np.nan_to_num(alpha) > 0)
        rho = run.heads.spearman.sel(model=m, quantity="value_norm").values.astype(float)
        rho = rho[np.isfinite(rho)]
        if not np.isfinite(norm).any() or not len(rho):
            left_out[m] = "no norms stored (the model's adapter computes none)"
            continue
        if not ok.any():
            left_out[m] = "no head attends to a sink token"
            continue
        below, n, p, in_order = signed_rank_below(norm[ok] - alpha[ok])
        mean_rho = float(rho.mean())
        text = (
            f"sinks' norm share below their weight share in {below} of {n} heads (signed rank p = {pfmt(p)}); "
            f"Spearman(||f(x)||, rarity) {mean_rho:+.2f} averaged over layers ({rho.min():+.2f} to "
            f"{rho.max():+.2f})"
        )
        reasons = []
        if not in_order:
            reasons.append("the sinks' norm shares are not below their weight shares")
        if mean_rho < RHO_MIN:
            reasons.append(f"the mean rho of ||f(x)|| with rarity is below {RHO_MIN:g}")
        short = f"sinks p = {pfmt(p)}, rho {mean_rho:+.2f}"
        if reasons:
            outcomes.append(Outcome(m, FAILS, text, "; ".join(reasons), short))
        else:
            outcomes.append(Outcome(m, HOLDS if p < ALPHA else NA, text, "" if p < ALPHA else NOT_SIGNIFICANT, short))
    return verdict("K1", claim, rule, outcomes, left_out, **args)


def claim_norm_below_weight(run: HeadRun) -> Finding:
    claim = "The sinks' share of the norms is below their share of the attention weights."
    rule = (
        f"per model, in every layer whose heads give the sinks ({_SINKS}) some weight: their share of "
        "||sum_h alpha f(x)|| (heads/layer_norm_share) below their share of the weight averaged over heads "
        "(heads/layer_alpha_share); point values (no interval is stored); every model with norms"
    )
    args = Source(paper=PAPER["K2"], figure="heads_special")
    if run.heads is None:
        return verdict("K2", claim, rule, [], {}, missing="no heads group in this run", **args)
    needed = [v for v in ("value", "layer_alpha_share", "layer_norm_share") if v not in run.heads]
    if needed:
        return verdict("K2", claim, rule, [], {}, missing=f"the heads group has no {', '.join(needed)}", **args)
    outcomes, left_out = [], {}
    layers = [int(x) for x in run.heads.layer.values]
    for m in run.models():
        alpha, norm = _sink_share(run, "layer_alpha_share", m), _sink_share(run, "layer_norm_share", m)
        if not np.isfinite(norm).any():
            left_out[m] = "no norms stored (the model's adapter computes none)"
            continue
        ok = np.isfinite(alpha) & np.isfinite(norm) & (np.nan_to_num(alpha) > 0)
        if not ok.any():
            left_out[m] = "no attention to a sink token"
            continue
        rows = [(layers[i], float(norm[i]), float(alpha[i])) for i in np.flatnonzero(ok)]
        bad = [(x, nv, av) for x, nv, av in rows if not nv < av]
        worst = max(rows, key=lambda r: r[1] - r[2])
        text = (
            f"norm share below weight share in {len(rows) - len(bad)} of {len(rows)} layers"
            + (f" (not in layer(s) {', '.join(str(x) for x, _, _ in bad)})" if bad else "")
            + f"; the least below: layer {worst[0]}, norm {fmt(worst[1], 3)} vs weight {fmt(worst[2], 3)}"
        )
        short = f"{len(rows) - len(bad)} of {len(rows)} layers"
        if bad:
            outcomes.append(
                Outcome(m, FAILS, text, "the sinks' norm share reaches their weight share in some layer", short)
            )
        else:
            outcomes.append(Outcome(m, HOLDS, text, "", short))
    return verdict("K2", claim, rule, outcomes, left_out, **args)
