"""Claims 6-8: who a token's nearest neighbours are (Voita et al. 2019, sec. 5, the figures
"Accuracy for top-50 neighbors", "Position distance" and "Same left token").

Each rule compares 95% bootstrap intervals over sentences and must hold for every
combination of seed replicates (the seed-to-seed spread is the noise floor of a
comparison between objectives).
"""

from __future__ import annotations

import itertools

from evolution.report.paper import PAPER
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, Run, fmt, separate

__all__ = ["claim_same_token_order", "claim_mt_position", "claim_lm_left_context"]


def _finding(
    number: int, claim: str, rule: str, measured: str, verdict: str, why: str = "", details: tuple[str, ...] = ()
) -> Finding:
    return Finding(
        number, claim, rule, measured, verdict, why, paper=str(PAPER[number]), figure="neighbors", details=details
    )


def _top(run: Run, model: str, measure: str):
    r = run.rate(model, measure)
    return None if r is None else (r[0][-1], r[1][-1], r[2][-1])


def _iv(m: str, v, digits: int = 3) -> str:
    return f"{m} {fmt(v[0], digits)} [{fmt(v[1], digits)}, {fmt(v[2], digits)}]"


def claim_same_token_order(run: Run) -> Finding:
    claim = "At the top layer the share of same-token neighbours orders MLM > MT > LM."
    rule = (
        "same-token rate among the k nearest neighbours at each model's top layer: MLM > MT > LM with "
        "non-overlapping 95% bootstrap intervals over sentences, for every combination of seed replicates"
    )
    groups = [run.replicates(o) for o in ("mlm", "mt", "lm")]
    if not all(groups):
        return _finding(6, claim, rule, "", NA, "needs MLM, MT and LM models")
    tops = {m: _top(run, m, "same_token") for g in groups for m in g}
    if any(v is None for v in tops.values()):
        return _finding(6, claim, rule, "", NA, "no same-token rate in this run")
    measured = ", ".join(_iv(m, v) for m, v in tops.items())
    combos = list(itertools.product(*groups))
    in_order = [tops[a][0] > tops[b][0] > tops[c][0] for a, b, c in combos]
    apart = [separate(tops[a][1], tops[b][2]) and separate(tops[b][1], tops[c][2]) for a, b, c in combos]
    if all(in_order) and all(apart):
        return _finding(6, claim, rule, measured, HOLDS)
    if all(in_order):
        return _finding(
            6,
            claim,
            rule,
            measured,
            NA,
            f"in this order, but some 95% intervals overlap ({len(combos) - sum(apart)} of {len(combos)} combinations)",
        )
    return _finding(
        6,
        claim,
        rule,
        measured,
        FAILS,
        f"in this order for {sum(in_order)} of {len(combos)} combinations of replicates",
    )


def claim_mt_position(run: Run) -> Finding:
    claim = "MT keeps position best (lowest position distance among same-token neighbours)."
    rule = (
        "position distance among same-token neighbours at the top layer: every MT replicate's 95% interval lies "
        "below that of every LM and MLM replicate"
    )
    mts = run.replicates("mt")
    others = run.replicates("lm") + run.replicates("mlm")
    if not mts or not others:
        return _finding(7, claim, rule, "", NA, "needs an MT and another objective")
    tops = {m: _top(run, m, "position_distance") for m in mts + others}
    if any(v is None for v in tops.values()):
        return _finding(7, claim, rule, "", NA, "no position distance in this run")
    measured = ", ".join(_iv(m, v, 2) for m, v in tops.items())
    lowest = all(tops[a][0] < tops[b][0] for a in mts for b in others)
    apart = all(separate(tops[b][1], tops[a][2]) for a in mts for b in others)
    if lowest and apart:
        return _finding(7, claim, rule, measured, HOLDS)
    if lowest:
        return _finding(7, claim, rule, measured, NA, "lowest, but the 95% intervals overlap")
    return _finding(7, claim, rule, measured, FAILS)


def claim_lm_left_context(run: Run) -> Finding:
    claim = "The LM's share of neighbours with the same left token falls with depth."
    rule = (
        "share of same-token neighbours with the same left token (sentence-initial queries left out), every LM "
        "replicate: the top layer's 95% interval below layer 1's; chance and ceiling reported beside it"
    )
    lms = run.replicates("lm")
    rates = {m: run.rate(m, "same_left") for m in lms}
    rates = {m: r for m, r in rates.items() if r is not None and len(r[0]) >= 3}
    if not rates:
        return _finding(8, claim, rule, "", NA, "needs an LM with the same-left rate over at least 2 layers")
    parts, ok, lower = [], [], []
    details = []
    for m, (v, lo, hi) in rates.items():
        parts.append(
            f"{m}: layer 1 {fmt(v[1], 3)} [{fmt(lo[1], 3)}, {fmt(hi[1], 3)}] -> top {fmt(v[-1], 3)} "
            f"[{fmt(lo[-1], 3)}, {fmt(hi[-1], 3)}]"
        )
        lower.append(v[-1] < v[1])
        ok.append(separate(lo[1], hi[-1]))
        chance, ceiling = run.rate(m, "same_left_chance"), run.rate(m, "same_left_ceiling")
        if chance is not None and ceiling is not None:
            details.append(
                f"{m}: chance {fmt(chance[0][-1], 3)}, ceiling {fmt(ceiling[0][-1], 3)} (what a "
                "representation ordered perfectly by the left token would score with this k)"
            )
    measured = "; ".join(parts)
    if all(ok):
        return _finding(8, claim, rule, measured, HOLDS, details=tuple(details))
    if all(lower):
        return _finding(8, claim, rule, measured, NA, "lower, but the 95% intervals overlap", tuple(details))
    return _finding(
        8,
        claim,
        rule,
        measured,
        FAILS,
        "" if len(lower) == 1 else f"lower in {sum(lower)} of {len(lower)} replicates",
        tuple(details),
    )
