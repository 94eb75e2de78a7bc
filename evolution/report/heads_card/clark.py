"""Verdicts C1-C3: Clark, Khandelwal, Levy & Manning (2019), "What Does BERT Look At?",
read off the ``heads`` and ``heads_dependency`` groups.

* C1 (sec. 3, fig. 2): attention concentrates on the sink tokens in the middle and upper
  layers: over half of BERT-base's attention in layers 6-10 goes to [SEP];
* C2 (sec. 3, fig. 4): some heads attend broadly, especially in the lower layers: the
  lowest layer's heads are the broad ones (BERT-base's layer 1; the earlier rule, the lower
  half of the layers against the upper half, is kept beside it as ``earlier``);
* C3 (sec. 4.2, table 1): no head does syntax well overall, but particular heads find
  particular dependency relations far better than a fixed-offset baseline.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from evolution.report.heads_card.base import (
    ALPHA,
    NOT_SIGNIFICANT,
    SINKS,
    HeadRun,
    Outcome,
    Source,
    halves,
    pfmt,
    rank_greater,
    span,
    verdict,
)
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, fmt

__all__ = [
    "claim_sinks_upper",
    "claim_broad_lower",
    "claim_broad_lower_halves",
    "claim_dependency_heads",
    "SINK_SHARE",
    "DEPENDENCY_MARGIN",
    "SE_FACTOR",
    "MIN_ARCS",
]

#: C1: a layer "concentrates" on the sinks when they get at least this share of its attention
#: (Clark et al. 2019, sec. 3: over half of BERT-base's attention in layers 6-10 goes to [SEP])
SINK_SHARE = 0.5
#: C3: the picked head must beat the offset baseline by at least this accuracy (the default of
#: ``heads.syntactic_margin``, Voita et al.'s syntactic heads)
DEPENDENCY_MARGIN = 0.10
#: C3: ... and by more than this many standard errors of the difference of two accuracies
#: (binomial, on the score treebank's arcs; as the scorecard's 2 combined sd)
SE_FACTOR = 2.0
#: C3: relations with fewer arcs in the score treebank are not read
MIN_ARCS = 50

PAPER = {
    "C1": "BERT-base: over half of the attention in layers 6-10 goes to [SEP]; early heads attend to [CLS], deep "
    "heads to periods and commas (Clark et al. 2019, sec. 3, fig. 2)",
    "C2": "some heads, especially in the lower layers, attend broadly, putting at most about 10% of their weight on "
    "any one word (Clark et al. 2019, sec. 3, fig. 4)",
    "C3": "no single head does syntax well overall, but particular heads find particular relations (direct objects, "
    "determiners, objects of prepositions) with high accuracy, far above the fixed-offset baseline "
    "(Clark et al. 2019, sec. 4.2, table 1)",
}


def claim_sinks_upper(run: HeadRun) -> Finding:
    claim = "Attention in the middle and upper layers concentrates on the sink (separator) tokens."
    rule = (
        f"per model, the heads' attention weight on the sinks ({' + '.join(SINKS)}: [CLS] / [SEP], <s> / </s>; "
        "heads/alpha_share, an absent token counting 0): the upper half of the layers above the lower half "
        f"(one-sided Mann-Whitney over heads, p < {ALPHA:g}), and some upper layer's mean over heads at least "
        f"{SINK_SHARE:g} (Clark et al.: over half in layers 6-10 of BERT-base); every model with the numbers"
    )
    args = Source(paper=PAPER["C1"], figure="heads_special")
    if run.heads is None:
        return verdict("C1", claim, rule, [], {}, missing="no heads group in this run", **args)
    if "alpha_share" not in run.heads or "value" not in run.heads:
        return verdict("C1", claim, rule, [], {}, missing="the heads group has no alpha_share", **args)
    outcomes, left_out = [], {}
    for m in run.models():
        share = run.sink_share("alpha_share", m)
        layers = run.layers(m)
        if len(layers) < 2:
            left_out[m] = "fewer than 2 layers"
            continue
        if share is None or not np.isfinite(share).any():
            left_out[m] = "no sink token in its input"
            continue
        lower, upper = halves(layers)
        row = {int(x): i for i, x in enumerate(run.heads.layer.values)}
        lo = np.concatenate([share[row[x]] for x in lower])
        hi = np.concatenate([share[row[x]] for x in upper])
        lo, hi = lo[np.isfinite(lo)], hi[np.isfinite(hi)]
        if not len(lo) or not len(hi):
            left_out[m] = "no sink token in its input"
            continue
        by_layer = {x: float(np.nanmean(share[row[x]])) for x in upper}
        top = max(by_layer, key=by_layer.__getitem__)
        a, p = rank_greater(hi, lo)
        text = (
            f"sinks {fmt(lo.mean())} (layers {span(lower)}) -> {fmt(hi.mean())} (layers {span(upper)}), "
            f"upper maximum {fmt(by_layer[top])} at layer {top}; A = {fmt(a)}, p = {pfmt(p)}"
        )
        short = f"{fmt(lo.mean())} -> {fmt(hi.mean())}, maximum {fmt(by_layer[top])}, p = {pfmt(p)}"
        if a <= 0.5:
            outcomes.append(Outcome(m, FAILS, text, "the sinks' share does not rise", short))
        elif by_layer[top] < SINK_SHARE:
            outcomes.append(
                Outcome(m, FAILS, text, f"no upper layer gives the sinks {SINK_SHARE:g} of its attention", short)
            )
        else:
            outcomes.append(Outcome(m, HOLDS if p < ALPHA else NA, text, "" if p < ALPHA else NOT_SIGNIFICANT, short))
    return verdict("C1", claim, rule, outcomes, left_out, **args)


def _entropy_missing(run: HeadRun) -> str:
    """Why C2 cannot be read on this run ("" when it can)."""
    if run.heads is None:
        return "no heads group in this run"
    if not run.has_measures("entropy", "uniform_entropy"):
        return "the heads group has no entropy and uniform_entropy"
    return ""


def _entropy_models(run: HeadRun, left_out: dict[str, str]):
    """(model, its layers, (layer, head) entropy as a share of the uniform attention's) for each
    model with at least 2 layers; the others go to ``left_out`` with the reason."""
    for m in run.models():
        layers = run.layers(m)
        if len(layers) < 2:
            left_out[m] = "fewer than 2 layers"
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            yield m, layers, run.measure(m, "entropy") / run.measure(m, "uniform_entropy")


def claim_broad_lower(run: HeadRun) -> Finding:
    claim = "Attention is broadest in the lowest layer."
    rule = (
        "per model, each head's entropy as a share of the uniform attention's (heads/value entropy / "
        "uniform_entropy): the heads of the first layer above the heads of every other layer (one-sided "
        f"Mann-Whitney over heads, p < {ALPHA:g}; Clark et al.: BERT-base's layer-1 heads attend most broadly); "
        "every model with the numbers"
    )
    args = Source(paper=PAPER["C2"], figure="heads_entropy")
    missing = _entropy_missing(run)
    if missing:
        return verdict("C2", claim, rule, [], {}, missing=missing, **args)
    outcomes: list[Outcome] = []
    left_out: dict[str, str] = {}
    row = {int(x): i for i, x in enumerate(run.group("heads").layer.values)}
    for m, layers, share in _entropy_models(run, left_out):
        first = share[row[layers[0]]]
        rest = np.concatenate([share[row[x]] for x in layers[1:]])
        first, rest = first[np.isfinite(first)], rest[np.isfinite(rest)]
        a, p = rank_greater(first, rest)
        means = [float(np.nanmean(share[row[x]])) for x in layers]
        text = (
            f"entropy {fmt(first.mean())} of uniform (layer {layers[0]}) vs {fmt(rest.mean())} (layers "
            f"{span(layers[1:])}); layer means {', '.join(fmt(x) for x in means)}; A = {fmt(a)}, p = {pfmt(p)}"
        )
        short = f"{fmt(first.mean())} vs {fmt(rest.mean())} of uniform, p = {pfmt(p)}"
        if a <= 0.5:
            outcomes.append(Outcome(m, FAILS, text, "the first layer's heads are not the broader ones", short))
        else:
            outcomes.append(Outcome(m, HOLDS if p < ALPHA else NA, text, "" if p < ALPHA else NOT_SIGNIFICANT, short))
    found = verdict("C2", claim, rule, outcomes, left_out, **args)
    old = claim_broad_lower_halves(run)
    return replace(found, earlier={k: getattr(old, k) for k in ("claim", "rule", "verdict", "why", "measured")})


def claim_broad_lower_halves(run: HeadRun) -> Finding:
    """C2 under its rule until 2026-11-26: the lower half of the layers against the upper half
    (kept beside the verdict for comparison; a model whose layers 2-L/2 are narrow fails it
    although its first layer is its broadest)."""
    claim = "Attention is broader in the lower layers than in the upper ones."
    rule = (
        "per model, each head's entropy as a share of the uniform attention's (heads/value entropy / "
        "uniform_entropy): the lower half of the layers above the upper half (one-sided Mann-Whitney over heads, "
        f"p < {ALPHA:g}); every model with the numbers"
    )
    args = Source(paper=PAPER["C2"], figure="heads_entropy")
    missing = _entropy_missing(run)
    if missing:
        return verdict("C2", claim, rule, [], {}, missing=missing, **args)
    outcomes: list[Outcome] = []
    left_out: dict[str, str] = {}
    row = {int(x): i for i, x in enumerate(run.group("heads").layer.values)}
    for m, layers, share in _entropy_models(run, left_out):
        lower, upper = halves(layers)
        lo = np.concatenate([share[row[x]] for x in lower])
        hi = np.concatenate([share[row[x]] for x in upper])
        lo, hi = lo[np.isfinite(lo)], hi[np.isfinite(hi)]
        a, p = rank_greater(lo, hi)
        text = (
            f"entropy {fmt(lo.mean())} of uniform (layers {span(lower)}) vs {fmt(hi.mean())} (layers "
            f"{span(upper)}); A = {fmt(a)}, p = {pfmt(p)}"
        )
        short = f"{fmt(lo.mean())} -> {fmt(hi.mean())} of uniform, p = {pfmt(p)}"
        if a <= 0.5:
            outcomes.append(Outcome(m, FAILS, text, "the lower layers' heads are not the broader ones", short))
        else:
            outcomes.append(Outcome(m, HOLDS if p < ALPHA else NA, text, "" if p < ALPHA else NOT_SIGNIFICANT, short))
    return verdict("C2", claim, rule, outcomes, left_out, **args)


def claim_dependency_heads(run: HeadRun) -> Finding:
    from evolution.analyses.heads.dependency import CLARK_DIRECTIONS

    claim = "Some heads find some dependency relations better than the best fixed-offset baseline."
    rule = (
        "per model, for the relations with at least "
        f"{MIN_ARCS} arcs in the score treebank and Clark et al.'s directions ({', '.join(CLARK_DIRECTIONS)}): "
        "the head picked on the select treebank, scored on the score treebank (heads_dependency/picked_accuracy), "
        "against the offset picked and scored the same way (baseline_accuracy); holds when some relation's "
        f"margin is at least {DEPENDENCY_MARGIN:g} and more than {SE_FACTOR:g} standard errors of the difference "
        "(binomial on the score arcs); every model with the numbers"
    )
    args = Source(paper=PAPER["C3"], figure="heads_dependency")
    dep = run.dependency
    if dep is None:
        return verdict(
            "C3",
            claim,
            rule,
            [],
            {},
            missing="no heads_dependency group in this run (heads.select / heads.score not configured)",
            **args,
        )
    needed = [v for v in ("picked_accuracy", "baseline_accuracy", "arcs") if v not in dep]
    if needed:
        return verdict(
            "C3", claim, rule, [], {}, missing=f"the heads_dependency group has no {', '.join(needed)}", **args
        )
    directions = [d for d in CLARK_DIRECTIONS if d in dep.direction.values]
    if not directions:
        return verdict(
            "C3",
            claim,
            rule,
            [],
            {},
            missing="the heads_dependency group has none of Clark et al.'s directions",
            **args,
        )
    details = []
    if len(directions) < len(CLARK_DIRECTIONS):
        details.append(
            f"this store has only {', '.join(directions)} of Clark et al.'s directions (the transposed "
            "head_to_dependent_clark came with heads analysis version 4)"
        )
    outcomes, left_out = [], {}
    for m in (str(x) for x in dep.model.values):
        rows = []
        for r in (str(x) for x in dep.relation.values):
            n = int(dep.arcs.sel(model=m, split="score", relation=r))
            if n < MIN_ARCS:
                continue
            for d in directions:
                picked = float(dep.picked_accuracy.sel(model=m, relation=r, direction=d))
                base = float(dep.baseline_accuracy.sel(model=m, relation=r, direction=d))
                if not (np.isfinite(picked) and np.isfinite(base)):
                    continue
                se = float(np.sqrt((picked * (1 - picked) + base * (1 - base)) / n))
                rows.append((picked - base, se, r, d, picked, base, n))
        if not rows:
            left_out[m] = f"no relation with {MIN_ARCS} arcs"
            continue
        beats = [x for x in rows if x[0] >= DEPENDENCY_MARGIN and x[0] > SE_FACTOR * x[1]]
        close = [x for x in rows if x[0] >= DEPENDENCY_MARGIN]
        best = max(beats or close or rows, key=lambda x: x[0])
        margin, se, r, d, picked, base, n = best
        text = (
            f"{r} ({d.replace('_', ' ')}) {fmt(picked, 3)} vs offset {fmt(base, 3)}: {margin:+.3f} "
            f"({SE_FACTOR:g} se {fmt(SE_FACTOR * se, 3)}, {n} arcs)"
        )
        short = f"{r} {margin:+.3f} ({SE_FACTOR:g} se {fmt(SE_FACTOR * se, 3)})"
        if beats:
            text += f"; {len(beats)} relation-direction(s) of {len(rows)} beat it"
            outcomes.append(Outcome(m, HOLDS, text, "", short))
        elif close:
            outcomes.append(Outcome(m, NA, text, f"the margin is within {SE_FACTOR:g} standard errors", short))
        else:
            outcomes.append(
                Outcome(m, FAILS, text, f"no relation beats the offset baseline by {DEPENDENCY_MARGIN:g}", short)
            )
    return verdict("C3", claim, rule, outcomes, left_out, details=tuple(details), **args)
