"""Claims 1-5: mutual information with the input token and the output label (Voita et al.
2019, sec. 4, the figures "MI(layer, src token)" and "MI with src and dst").

Every rule reads the control-subtracted MI (``mi_corrected``: the shuffled-label
control removed, so that a layer's estimator bias does not pass for information),
reports it as a fraction of H(X), and counts a difference beyond 2 combined standard
deviations (restart spread and sentence bootstrap, :mod:`.base`). Saturation: a fall
cannot show where the lower end is at the ceiling, and two models cannot be compared
where either is (the ceiling hides how much each lost).
"""

from __future__ import annotations

import numpy as np

from evolution.report.paper import PAPER
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, MICurve, Run, fmt, threshold

__all__ = [
    "claim_lm_input_falls",
    "claim_mlm_input_recovers",
    "claim_mt_keeps_identity",
    "claim_lm_output_rises",
    "claim_mlm_corrupted",
]


def _f(c: MICurve, layer: int) -> str:
    """A layer's control-subtracted MI as a fraction of H(X), with its combined sd."""
    return f"{fmt(c.corrected_fraction[layer])} H (±{fmt(c.sd[layer] / c.entropy, 3)})"


def _finding(
    number: int, claim: str, rule: str, measured: str, verdict: str, why: str = "", details: tuple[str, ...] = ()
) -> Finding:
    return Finding(number, claim, rule, measured, verdict, why, paper=str(PAPER[number]), figure="mi", details=details)


def _each_replicate(run: Run, number: int, claim: str, rule: str, objective: str, target: str, check) -> Finding:
    """A claim on one objective's MI curve, checked on every seed replicate: ``check(curve)``
    returns (ok: bool or None for not measurable, measured text, reason)."""
    curves = {m: run.mi(m, target) for m in run.replicates(objective)}
    curves = {m: c for m, c in curves.items() if c is not None}
    if not curves:
        return _finding(number, claim, rule, "", NA, f"no {objective.upper()} model with MI({target}) in this run")
    results = {m: check(c) for m, c in curves.items()}
    measured = "; ".join(f"{m}: {results[m][1]}" for m in curves)
    if any(r[0] is None for r in results.values()):
        return _finding(number, claim, rule, measured, NA, next(r[2] for r in results.values() if r[0] is None))
    ok = [r[0] for r in results.values()]
    why = "" if all(ok) or len(ok) == 1 else f"holds in {sum(ok)} of {len(ok)} seed replicates"
    why = "; ".join(x for x in (why, *(r[2] for r in results.values() if not r[0] and r[2])) if x)
    return _finding(number, claim, rule, measured, HOLDS if all(ok) else FAILS, why)


def claim_lm_input_falls(run: Run) -> Finding:
    def check(c: MICurve):
        if len(c) < 4:
            return None, "", "needs layers 2..L with L >= 3"
        top = len(c) - 1
        text = (
            f"layer 2 {_f(c, 2)} -> top {_f(c, top)} (MI minus control, {fmt(c.value[2])} -> "
            f"{fmt(c.value[top])} nats of H {fmt(c.entropy)})"
        )
        if c.saturated[top]:
            return None, text, "the top layer's MI is within 2% of H(X): saturated, a fall cannot show"
        drop = c.value[2] - c.value[top] > threshold(c.sd[2], c.sd[top])
        rises = [
            layer + 1
            for layer in range(2, top)
            if c.value[layer + 1] - c.value[layer] > threshold(c.sd[layer], c.sd[layer + 1])
        ]
        return (
            drop and not rises,
            text,
            (
                f"rises at layer(s) {rises}"
                if rises
                else ""
                if drop
                else "the top layer is not below layer 2 by more than 2 combined sd"
            ),
        )

    return _each_replicate(
        run,
        1,
        "The LM's MI with the input token falls steadily from layer 2 up.",
        "MI(input) minus its shuffled control, every LM replicate: the top layer below layer 2 by "
        "more than 2 combined sd (restarts and sentences), and no step from layer 2 up rising by "
        "more than 2 combined sd",
        "lm",
        "input",
        check,
    )


def claim_mlm_input_recovers(run: Run) -> Finding:
    def check(c: MICurve):
        if len(c) < 3:
            return None, "", "needs at least 2 layers"
        top = len(c) - 1
        m = 1 + int(np.argmin(c.value[1:-1]))
        text = f"layer 0 {_f(c, 0)}, minimum {_f(c, m)} at layer {m}, top {_f(c, top)}"
        if c.saturated[m]:
            return None, text, "the minimum over the middle layers is within 2% of H(X): saturated, a fall cannot show"
        ok = c.value[0] - c.value[m] > threshold(c.sd[0], c.sd[m]) and c.value[top] - c.value[m] > threshold(
            c.sd[top], c.sd[m]
        )
        return ok, text, "" if ok else "the minimum is not below both ends by more than 2 combined sd"

    return _each_replicate(
        run,
        2,
        "The MLM's MI with the input falls, then recovers in the top layers.",
        "MI(input) minus its shuffled control, every MLM replicate: its minimum over the middle "
        "layers is below both layer 0 and the top layer by more than 2 combined sd",
        "mlm",
        "input",
        check,
    )


def claim_mt_keeps_identity(run: Run) -> Finding:
    claim = "MT loses less token identity than the LM."
    rule = (
        "at the top layer MI(input) minus its control of MT exceeds the LM's by more than 2 combined sd, for "
        "every pair of MT and LM replicates; not measurable where either is saturated"
    )
    pairs = [(a, b) for a in run.replicates("mt") for b in run.replicates("lm")]
    vals: dict[tuple[str, str], tuple[MICurve, MICurve]] = {}
    for a, b in pairs:
        x, y = run.mi(a, "input"), run.mi(b, "input")
        if x is not None and y is not None:
            vals[(a, b)] = (x, y)
    if not vals:
        return _finding(3, claim, rule, "", NA, "needs an MT and an LM with MI(input)")
    parts, ok, saturated = [], [], []
    for (a, b), (x, y) in vals.items():
        i, j = len(x) - 1, len(y) - 1
        parts.append(f"{a} {_f(x, i)} vs {b} {_f(y, j)}")
        ok.append(x.value[i] - y.value[j] > threshold(x.sd[i], y.sd[j]))
        saturated += [m for m, c, k in ((a, x, i), (b, y, j)) if c.saturated[k]]
    if saturated:
        return _finding(
            3,
            claim,
            rule,
            "; ".join(parts),
            NA,
            f"{', '.join(sorted(set(saturated)))} within 2% of H(X) at the top layer: saturated",
        )
    return _finding(
        3,
        claim,
        rule,
        "; ".join(parts),
        HOLDS if all(ok) else FAILS,
        "" if all(ok) else f"holds for {sum(ok)} of {len(ok)} pairs",
    )


def claim_lm_output_rises(run: Run) -> Finding:
    def check(c: MICurve):
        top = len(c) - 1
        text = f"layer 0 {fmt(c.value[0])} -> top {fmt(c.value[top])} nats (MI minus control; H {fmt(c.entropy)})"
        ok = c.value[top] - c.value[0] > threshold(c.sd[0], c.sd[top])
        return ok, text, "" if ok else "the top layer is not above layer 0 by more than 2 combined sd"

    return _each_replicate(
        run,
        4,
        "The LM's MI with the next token rises with depth.",
        "MI(output = next token) minus its control, every LM replicate: the top layer above layer 0 "
        "by more than 2 combined sd",
        "lm",
        "output",
        check,
    )


def claim_mlm_corrupted(run: Run) -> Finding:
    claim = "At the MLM's corrupted positions MI with the original token rises while MI with the input falls."
    rule = (
        "MI minus its control at the corrupted positions of every MLM replicate: MI(original token) top layer "
        "above layer 0, and MI(token fed there) top layer below layer 0, each by more than 2 combined sd"
    )
    parts, ok = [], []
    for m in run.replicates("mlm"):
        out, inp = run.mi(m, "output"), run.mi(m, "masked_input")
        if out is None or inp is None:
            continue
        t, u = len(out) - 1, len(inp) - 1
        parts.append(
            f"{m}: original {fmt(out.value[0])} -> {fmt(out.value[t])}, fed {fmt(inp.value[0])} -> "
            f"{fmt(inp.value[u])} nats"
        )
        ok.append(
            out.value[t] - out.value[0] > threshold(out.sd[0], out.sd[t])
            and inp.value[0] - inp.value[u] > threshold(inp.sd[0], inp.sd[u])
        )
    if not ok:
        return _finding(
            5,
            claim,
            rule,
            "",
            NA,
            "needs MI at the corrupted positions of a masked LM of this project (mi targets output and masked_input)",
        )
    return _finding(
        5,
        claim,
        rule,
        "; ".join(parts),
        HOLDS if all(ok) else FAILS,
        "" if all(ok) or len(ok) == 1 else f"holds in {sum(ok)} of {len(ok)} replicates",
    )
