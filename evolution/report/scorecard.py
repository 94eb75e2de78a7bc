"""The findings scorecard: each claim of Voita, Sennrich & Titov (2019) checked against
the numbers of one ``metrics.zarr`` by a stated rule, never by hand.

Every claim is a function of the stored groups that returns a :class:`Finding`:
the claim, the rule, the measured numbers with their uncertainty and a verdict,
one of :data:`VERDICTS`. Uncertainty comes from what the run stored:

* MI: the spread over k-means restarts (``mi/mi_sd``); a difference counts when
  it exceeds twice the combined standard deviation, ``2 sqrt(sd_a^2 + sd_b^2)``
  (:data:`SD_FACTOR`), and a value within 2% of H(X) is saturated (it cannot
  show a fall: too few types for the clusters; ``docs/metrics.md``);
* kNN rates: the 95% bootstrap intervals over sentences (``neighbors/interval``);
  an ordering counts when the intervals do not overlap;
* distances between models (PWCCA) and change by frequency: their bootstrap
  intervals over sentences where stored (``similarity/interval``,
  ``change/interval``); influence has none. Where the run has seed replicates
  (``train.seeds``) a claim must hold for every replicate (the seed-to-seed
  spread is the noise).

Models are told apart by objective (the groups' ``objectives`` attribute) and,
for trained runs, by the ``runs`` attribute: the base model of an objective is
its run with the config's seed and no token dropout, the other seeds are its
replicates, ``token_dropout > 0`` marks the control of claim 12. A run without
what a claim needs (no MT, no seed replicate, no influence group) gets "not
measurable here" and says what is missing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

__all__ = ["Finding", "scorecard", "scorecard_table", "CLAIMS", "VERDICTS", "SD_FACTOR"]

VERDICTS = ("holds", "does not hold", "not measurable here")
HOLDS, FAILS, NA = VERDICTS
#: an MI difference counts when larger than SD_FACTOR x the combined restart standard deviation
SD_FACTOR = 2.0
#: MI within this share of H(X) is saturated (as the MI analysis warns)
SATURATION = 0.02


@dataclass(frozen=True)
class Finding:
    number: int
    claim: str
    rule: str
    measured: str
    verdict: str
    why: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class Run:
    """The groups of one ``metrics.zarr`` and which model plays which role."""

    def __init__(self, path):
        from evolution.analyses.plotting import open_group

        self.path = str(path)
        self.groups = {name: open_group(path, name) for name in ("mi", "neighbors", "similarity", "change",
                                                                 "influence")}
        attrs = next((g.attrs for g in self.groups.values() if g is not None), {})
        self.objectives: dict[str, str] = dict(attrs.get("objectives", {}))
        self.runs: dict[str, dict] = dict(attrs.get("runs", {}))
        self.seed = attrs.get("seed")
        self.missing_intervals = False

    def replicates(self, objective: str) -> list[str]:
        """Models of ``objective`` without token dropout, the base model (the config's seed) first."""
        models = [m for m, o in self.objectives.items() if o == objective
                  and self.runs.get(m, {}).get("token_dropout", 0.0) == 0.0]
        return sorted(models, key=lambda m: self.runs.get(m, {}).get("seed", self.seed) != self.seed)

    def base(self, objective: str) -> str | None:
        r = self.replicates(objective)
        return r[0] if r else None

    def token_dropout(self, objective: str) -> list[str]:
        return [m for m, o in self.objectives.items() if o == objective
                and self.runs.get(m, {}).get("token_dropout", 0.0) > 0]

    def mi(self, model: str, target: str):
        """(mean, sd, H) per layer of MI with ``target``; None when not stored."""
        ds = self.groups["mi"]
        if ds is None or model not in ds.model.values or target not in ds.target.values:
            return None
        mean = ds.mi.sel(model=model, target=target).mean("restart").values
        if np.isnan(mean).all():
            return None
        n = ds.mi.sizes["restart"]
        sd = ds.mi.sel(model=model, target=target).std("restart", ddof=1).values if n > 1 else np.zeros_like(mean)
        keep = ~np.isnan(mean)
        return mean[keep], np.nan_to_num(sd[keep]), float(ds.entropy.sel(model=model, target=target))

    def rate(self, model: str, measure: str):
        """(value, low, high) per layer of a neighbour measure; None when not stored."""
        ds = self.groups["neighbors"]
        if ds is None or model not in ds.model.values or measure not in ds.measure.values:
            return None
        v = ds.value.sel(model=model, measure=measure).values
        keep = ~np.isnan(v)
        if not keep.any():
            return None
        if "interval" in ds and np.isfinite(ds.interval.sel(model=model, measure=measure).values[keep]).all():
            iv = ds.interval.sel(model=model, measure=measure)
            lo, hi = iv.sel(bound="low").values[keep], iv.sel(bound="high").values[keep]
        else:  # no bootstrap in this run: the point values, and the findings say so
            self.missing_intervals = True
            lo = hi = v[keep]
        return v[keep], lo, hi

    def distance(self, a: str, b: str, layer: int) -> float:
        """PWCCA distance of two models at one layer, averaged over both directions (PWCCA
        weights by one view); NaN when not stored."""
        ds = self.groups["similarity"]
        if ds is None or "pwcca" not in ds.metric.values:
            return float("nan")
        d = ds.distance.sel(metric="pwcca")
        if a not in d.model_a.values or b not in d.model_a.values or layer not in d.layer_a.values:
            return float("nan")
        return float((d.sel(model_a=a, model_b=b, layer_a=layer, layer_b=layer)
                      + d.sel(model_a=b, model_b=a, layer_a=layer, layer_b=layer)) / 2)

    def distance_interval(self, a: str, b: str, layer: int) -> tuple[float, float] | None:
        """The bootstrap interval of :meth:`distance`, when the run stored one."""
        ds = self.groups["similarity"]
        if ds is None or "interval" not in ds or "pwcca" not in ds.metric.values:
            return None
        iv = ds.interval.sel(metric="pwcca", model_a=a, model_b=b, layer=layer).values
        return (float(iv[0]), float(iv[1])) if np.isfinite(iv).all() else None

    def top_layer(self, models: list[str]) -> int | None:
        ds = self.groups["similarity"]
        if ds is None:
            return None
        d = ds.distance.sel(metric=ds.metric.values[0])
        layers = [int(max(d.layer_a.values[~np.isnan(d.sel(model_a=m, model_b=m).values.diagonal())], default=-1))
                  for m in models if m in d.model_a.values]
        return min(layers) if layers and min(layers) >= 0 else None


def _u(sd_a: float, sd_b: float) -> float:
    return SD_FACTOR * float(np.hypot(sd_a, sd_b))


def _saturated(value: float, entropy: float) -> bool:
    return value >= (1 - SATURATION) * entropy


def _fmt(x: float, digits: int = 2) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.{digits}f}"


def _mi_claim(run: Run, number: int, claim: str, rule: str, objective: str, target: str,
              check: Callable[[np.ndarray, np.ndarray, float], tuple[bool | None, str, str]]) -> Finding:
    """A claim on one objective's MI curve, checked on every seed replicate."""
    models = run.replicates(objective)
    curves = {m: run.mi(m, target) for m in models}
    curves = {m: c for m, c in curves.items() if c is not None}
    if not curves:
        return Finding(number, claim, rule, "", NA, f"no {objective.upper()} model with MI({target}) in this run")
    results = {m: check(*c) for m, c in curves.items()}
    measured = "; ".join(f"{m}: {results[m][1]}" for m in curves)
    if any(r[0] is None for r in results.values()):
        return Finding(number, claim, rule, measured, NA, next(r[2] for r in results.values() if r[0] is None))
    ok = [r[0] for r in results.values()]
    verdict = HOLDS if all(ok) else FAILS
    why = "" if all(ok) or len(ok) == 1 else f"holds in {sum(ok)} of {len(ok)} seed replicates"
    return Finding(number, claim, rule, measured, verdict, why or next((r[2] for r in results.values() if r[2]), ""))


def claim_lm_input_falls(run: Run) -> Finding:
    def check(mean, sd, h):
        if len(mean) < 4:
            return None, "", "needs layers 2..L with L >= 3"
        tail = mean[2:]
        text = " -> ".join(_fmt(v) for v in tail) + f" (layers 2..{len(mean) - 1}; H {_fmt(h)}; sd <= {_fmt(sd.max(), 3)})"
        if all(_saturated(v, h) for v in tail):
            return None, text, "MI is within 2% of H(X) at every layer from 2 up: saturated, it cannot fall"
        drop = tail[0] - tail[-1] > _u(sd[2], sd[-1])
        rises = [i + 2 for i in range(len(tail) - 1) if tail[i + 1] - tail[i] > _u(sd[i + 2], sd[i + 3])]
        return drop and not rises, text, (f"rises at layer(s) {rises}" if rises else "" if drop else
                                          "the top layer is not below layer 2 beyond the restart spread")

    return _mi_claim(run, 1, "The LM's MI with the input token falls steadily from layer 2 up.",
                     "MI(input) of every LM replicate: top layer below layer 2 by more than 2 sd, and no step from "
                     "layer 2 up rises by more than 2 sd", "lm", "input", check)


def claim_mlm_input_recovers(run: Run) -> Finding:
    def check(mean, sd, h):
        if len(mean) < 3:
            return None, "", "needs at least 2 layers"
        m = 1 + int(np.argmin(mean[1:-1]))
        text = f"layer 0 {_fmt(mean[0])}, min {_fmt(mean[m])} at layer {m}, top {_fmt(mean[-1])} (H {_fmt(h)})"
        if _saturated(mean[m], h):
            return None, text, "MI is within 2% of H(X) at every layer: saturated, a fall cannot show"
        ok = mean[0] - mean[m] > _u(sd[0], sd[m]) and mean[-1] - mean[m] > _u(sd[-1], sd[m])
        return ok, text, ""

    return _mi_claim(run, 2, "The MLM's MI with the input falls, then recovers in the top layers.",
                     "MI(input) of every MLM replicate: its minimum over the middle layers is below both layer 0 and "
                     "the top layer by more than 2 sd", "mlm", "input", check)


def claim_mt_keeps_identity(run: Run) -> Finding:
    claim = "MT loses less token identity than the LM."
    rule = "at the top layer MI(input) of MT exceeds the LM's by more than 2 sd, for every pair of replicates"
    pairs = [(a, b) for a in run.replicates("mt") for b in run.replicates("lm")]
    vals = {(a, b): (run.mi(a, "input"), run.mi(b, "input")) for a, b in pairs}
    vals = {k: v for k, v in vals.items() if v[0] is not None and v[1] is not None}
    if not vals:
        return Finding(3, claim, rule, "", NA, "needs an MT and an LM with MI(input)")
    parts, ok, saturated = [], [], True
    for (a, b), (x, y) in vals.items():
        parts.append(f"{a} {_fmt(x[0][-1])} vs {b} {_fmt(y[0][-1])}")
        ok.append(x[0][-1] - y[0][-1] > _u(x[1][-1], y[1][-1]))
        saturated &= _saturated(x[0][-1], x[2]) and _saturated(y[0][-1], y[2])
    if saturated:
        return Finding(3, claim, rule, "; ".join(parts), NA, "both at H(X): saturated")
    return Finding(3, claim, rule, "; ".join(parts), HOLDS if all(ok) else FAILS,
                   "" if all(ok) else f"holds for {sum(ok)} of {len(ok)} pairs")


def claim_lm_output_rises(run: Run) -> Finding:
    def check(mean, sd, h):
        text = f"layer 0 {_fmt(mean[0])} -> top {_fmt(mean[-1])} (H {_fmt(h)})"
        return bool(mean[-1] - mean[0] > _u(sd[0], sd[-1])), text, ""

    return _mi_claim(run, 4, "The LM's MI with the next token rises with depth.",
                     "MI(output = next token) of every LM replicate: top layer above layer 0 by more than 2 sd",
                     "lm", "output", check)


def claim_mlm_corrupted(run: Run) -> Finding:
    claim = "At the MLM's corrupted positions MI with the original token rises while MI with the input falls."
    rule = ("at the corrupted positions of every MLM replicate: MI(original token) top layer above layer 0, and "
            "MI(token fed there) top layer below layer 0, each by more than 2 sd")
    parts, ok = [], []
    for m in run.replicates("mlm"):
        out, inp = run.mi(m, "output"), run.mi(m, "masked_input")
        if out is None or inp is None:
            continue
        parts.append(f"{m}: original {_fmt(out[0][0])} -> {_fmt(out[0][-1])}, fed {_fmt(inp[0][0])} -> "
                     f"{_fmt(inp[0][-1])}")
        ok.append(out[0][-1] - out[0][0] > _u(out[1][0], out[1][-1])
                  and inp[0][0] - inp[0][-1] > _u(inp[1][0], inp[1][-1]))
    if not ok:
        return Finding(5, claim, rule, "", NA, "needs MI at the corrupted positions of a masked LM of this project "
                                               "(mi targets output and masked_input)")
    return Finding(5, claim, rule, "; ".join(parts), HOLDS if all(ok) else FAILS,
                   "" if all(ok) or len(ok) == 1 else f"holds in {sum(ok)} of {len(ok)} replicates")


def _ordered(run: Run, number: int, claim: str, rule: str, measure: str, order: list[str], *,
             layer: str = "top", higher_first: bool = True) -> Finding:
    """The base models of ``order`` ordered by a neighbour rate at their top layer, with
    non-overlapping bootstrap intervals."""
    models = [run.base(o) for o in order]
    if any(m is None for m in models):
        return Finding(number, claim, rule, "", NA, f"needs {', '.join(o.upper() for o in order)} models")
    rates = [run.rate(m, measure) for m in models]
    if any(r is None for r in rates):
        return Finding(number, claim, rule, "", NA, f"no neighbour rate {measure} in this run")
    top = [(r[0][-1], r[1][-1], r[2][-1]) for r in rates]
    measured = ", ".join(f"{m} {_fmt(v, 3)} [{_fmt(lo, 3)}, {_fmt(hi, 3)}]" for m, (v, lo, hi) in zip(models, top))
    sign = 1 if higher_first else -1
    in_order = all(sign * (a[0] - b[0]) > 0 for a, b in zip(top, top[1:]))
    separate = all((a[1] > b[2]) if higher_first else (a[2] < b[1]) for a, b in zip(top, top[1:]))
    if in_order and separate:
        return Finding(number, claim, rule, measured, HOLDS)
    if in_order:
        return Finding(number, claim, rule, measured, NA, "in this order, but the 95% intervals overlap")
    return Finding(number, claim, rule, measured, FAILS)


def claim_same_token_order(run: Run) -> Finding:
    return _ordered(run, 6, "At the top layer the share of same-token neighbours orders MLM > MT > LM.",
                    "same-token rate among the k nearest neighbours at each base model's top layer: MLM > MT > LM "
                    "with non-overlapping 95% bootstrap intervals over sentences", "same_token", ["mlm", "mt", "lm"])


def claim_mt_position(run: Run) -> Finding:
    claim = "MT keeps position best (lowest position distance among same-token neighbours)."
    rule = ("position distance among same-token neighbours at the top layer: MT's 95% interval lies below every "
            "other base model's")
    mt = run.base("mt")
    others = [run.base(o) for o in ("lm", "mlm") if run.base(o)]
    if mt is None or not others:
        return Finding(7, claim, rule, "", NA, "needs an MT and another objective")
    rates = {m: run.rate(m, "position_distance") for m in [mt, *others]}
    if any(r is None for r in rates.values()):
        return Finding(7, claim, rule, "", NA, "no position distance in this run")
    top = {m: (r[0][-1], r[1][-1], r[2][-1]) for m, r in rates.items()}
    measured = ", ".join(f"{m} {_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]" for m, (v, lo, hi) in top.items())
    lowest = all(top[mt][0] < top[o][0] for o in others)
    separate = all(top[mt][2] < top[o][1] for o in others)
    return Finding(7, claim, rule, measured, HOLDS if lowest and separate else NA if lowest else FAILS,
                   "lowest, but the 95% intervals overlap" if lowest and not separate else "")


def claim_lm_left_context(run: Run) -> Finding:
    claim = "The LM's share of neighbours with the same left token falls with depth."
    rule = ("share of same-token neighbours with the same left neighbour, LM: top layer's 95% interval below "
            "layer 1's")
    lm = run.base("lm")
    r = run.rate(lm, "same_left") if lm else None
    if r is None or len(r[0]) < 3:
        return Finding(8, claim, rule, "", NA, "needs an LM with the same-left rate over at least 2 layers")
    v, lo, hi = r
    measured = f"{lm}: layer 1 {_fmt(v[1], 3)} [{_fmt(lo[1], 3)}, {_fmt(hi[1], 3)}] -> top {_fmt(v[-1], 3)} " \
               f"[{_fmt(lo[-1], 3)}, {_fmt(hi[-1], 3)}]"
    if v[-1] < v[1]:
        return Finding(8, claim, rule, measured, HOLDS if hi[-1] < lo[1] else NA,
                       "" if hi[-1] < lo[1] else "lower, but the 95% intervals overlap")
    return Finding(8, claim, rule, measured, FAILS)


def claim_lm_mt_farthest(run: Run) -> Finding:
    claim = "At the top layer LM and MT are farther apart than MT and MLM."
    rule = ("PWCCA distance (mean of both directions) at the top layer: d(LM, MT) > d(MT, MLM), for every "
            "combination of seed replicates and, where stored, with non-overlapping 95% bootstrap intervals for "
            "the base models")
    mts, lms, mlms = run.replicates("mt"), run.replicates("lm"), run.replicates("mlm")
    layer = run.top_layer(mts + lms + mlms)
    if not (mts and lms and mlms) or layer is None:
        return Finding(9, claim, rule, "", NA, "needs MT, LM and MLM with PWCCA distances")
    combos = [(run.distance(lm, mt, layer), run.distance(mt, mlm, layer)) for mt in mts for lm in lms for mlm in mlms]
    combos = [c for c in combos if np.isfinite(c).all()]
    if not combos:
        return Finding(9, claim, rule, "", NA, "the models were not compared on the same occurrences")
    a, b = np.array(combos).T
    measured = (f"layer {layer}: d(LM, MT) {_fmt(a.min(), 3)}-{_fmt(a.max(), 3)}, d(MT, MLM) {_fmt(b.min(), 3)}-"
                f"{_fmt(b.max(), 3)} over {len(combos)} replicate combination(s)")
    ok = a > b
    if not ok.all():
        return Finding(9, claim, rule, measured, FAILS, f"holds in {int(ok.sum())} of {len(ok)} combinations")
    lm_mt, mt_mlm = (run.distance_interval(lms[0], mts[0], layer), run.distance_interval(mts[0], mlms[0], layer))
    if lm_mt is None or mt_mlm is None:
        return Finding(9, claim, rule, measured, HOLDS)
    measured += (f"; base models' 95% intervals [{_fmt(lm_mt[0], 3)}, {_fmt(lm_mt[1], 3)}] vs "
                 f"[{_fmt(mt_mlm[0], 3)}, {_fmt(mt_mlm[1], 3)}]")
    if lm_mt[0] > mt_mlm[1]:
        return Finding(9, claim, rule, measured, HOLDS)
    return Finding(9, claim, rule, measured, NA, "in this order, but the 95% intervals overlap")


def claim_seeds_closer(run: Run) -> Finding:
    claim = "Two seeds of one objective are closer than any two objectives."
    rule = ("PWCCA distance at every layer from 1 up: the largest distance between two seeds of one objective is "
            "below the smallest distance between models of two objectives")
    groups = {o: run.replicates(o) for o in ("mt", "lm", "mlm")}
    seeds = [(a, b) for reps in groups.values() for i, a in enumerate(reps) for b in reps[i + 1:]]
    if not seeds:
        return Finding(10, claim, rule, "", NA, "no seed replicates in this run (train.seeds)")
    everyone = [m for reps in groups.values() for m in reps]
    cross = [(a, b) for i, a in enumerate(everyone) for b in everyone[i + 1:]
             if run.objectives[a] != run.objectives[b]]
    top = run.top_layer(everyone)
    if not cross or top is None:
        return Finding(10, claim, rule, "", NA, "needs two objectives with PWCCA distances")
    worst = []
    for layer in range(1, top + 1):
        s = max(run.distance(a, b, layer) for a, b in seeds)
        c = min(run.distance(a, b, layer) for a, b in cross)
        worst.append((layer, s, c))
    measured = "; ".join(f"layer {layer}: seeds <= {_fmt(s, 3)}, objectives >= {_fmt(c, 3)}" for layer, s, c in worst
                         if layer in (1, top) or layer == (1 + top) // 2)
    bad = [layer for layer, s, c in worst if not s < c]
    shared = any(run.runs.get(m, {}).get("seed") != run.seed for m in everyone) and bool(run.runs)
    return Finding(10, claim, rule, measured, FAILS if bad else HOLDS,
                   (f"fails at layer(s) {bad}" + ("; the objectives share their initial weights, each seed "
                                                   "replicate has its own" if shared else "")) if bad else "")


def claim_frequent_change_more(run: Run) -> Finding:
    claim = "Frequent tokens change more between layers than rare ones."
    rule = ("PWCCA distance between adjacent layers averaged over layer pairs: the most frequent rank bin above the "
            "rarest filled bin, for every base model and seed replicate (where stored, the bootstrap intervals "
            "averaged the same way do not overlap)")
    ds = run.groups["change"]
    if ds is None or "pwcca" not in ds.metric.values:
        return Finding(11, claim, rule, "", NA, "no change-by-frequency group in this run")
    d = ds.distance.sel(metric="pwcca").mean("layer_pair")
    parts, ok = [], []
    for o in ("mt", "lm", "mlm"):
        for m in run.replicates(o):
            if m not in d.model.values:
                continue
            v = d.sel(model=m).values
            filled = np.flatnonzero(np.isfinite(v))
            if len(filled) < 2:
                continue
            frequent, rare = v[filled[0]], v[filled[-1]]
            parts.append(f"{m}: {_fmt(frequent, 3)} (bin {ds.freq_bin.values[filled[0]]}) vs {_fmt(rare, 3)} "
                         f"(bin {ds.freq_bin.values[filled[-1]]})")
            ok.append(frequent > rare)
            if "interval" in ds:  # the bootstrap intervals of the change, averaged over layer pairs
                iv = ds.interval.sel(metric="pwcca", model=m).mean("layer_pair").values  # (bin, 2)
                if np.isfinite(iv[[filled[0], filled[-1]]]).all():
                    parts[-1] += (f" [{_fmt(iv[filled[0], 0], 3)}, {_fmt(iv[filled[0], 1], 3)}] vs "
                                  f"[{_fmt(iv[filled[-1], 0], 3)}, {_fmt(iv[filled[-1], 1], 3)}]")
                    ok[-1] = ok[-1] and iv[filled[0], 0] > iv[filled[-1], 1]
    if not ok:
        return Finding(11, claim, rule, "", NA, "fewer than two filled frequency bins")
    frequency = ds.attrs.get("frequency", "")
    return Finding(11, claim, rule, "; ".join(parts), HOLDS if all(ok) else FAILS,
                   (f"holds for {sum(ok)} of {len(ok)} models; " if not all(ok) else "")
                   + (f"ranks from the {frequency}" if frequency else ""))


def claim_rare_influence(run: Run) -> Finding:
    claim = ("Rare tokens influence other tokens most at layer 1 in MT, and input token dropout removes that.")
    rule = ("influence (PWCCA) of masking a token, rarest filled bin vs most frequent bin: in every MT replicate the "
            "rare bin's influence at layer 1 exceeds the frequent bin's and is its largest over layers; in the MT "
            "with token dropout the rare bin's layer-1 influence does not exceed the frequent bin's")
    ds = run.groups["influence"]
    if ds is None or "pwcca" not in ds.metric.values:
        return Finding(12, claim, rule, "", NA, "no influence group in this run (needs this project's trained models)")
    d = ds.distance.sel(metric="pwcca")

    def profile(m):
        v = d.sel(model=m).values  # (layer, bin)
        filled = np.flatnonzero(np.isfinite(v[0]))
        if len(filled) < 2:
            return None
        rare, frequent = v[:, filled[-1]], v[:, filled[0]]
        return rare, frequent

    parts, ok, above, peak = [], [], [], []
    for m in run.replicates("mt"):
        if m not in d.model.values or (p := profile(m)) is None:
            continue
        rare, frequent = p
        parts.append(f"{m}: layer 1 rare {rare[0]:.2e} vs frequent {frequent[0]:.2e}, rare peaks at layer "
                     f"{int(np.nanargmax(rare)) + 1}")
        above.append(rare[0] > frequent[0])
        peak.append(int(np.nanargmax(rare)) == 0)
        ok.append(above[-1] and peak[-1])
    if not ok:
        return Finding(12, claim, rule, "", NA, "no MT influence with two filled frequency bins")
    drop = [m for m in run.token_dropout("mt") if m in d.model.values and profile(m) is not None]
    if not drop:
        return Finding(12, claim, rule, "; ".join(parts), NA,
                       "no MT with input token dropout in this run (train.token_dropout)")
    removed = []
    for m in drop:
        rare, frequent = profile(m)
        parts.append(f"{m}: layer 1 rare {rare[0]:.2e} vs frequent {frequent[0]:.2e}")
        removed.append(not rare[0] > frequent[0])
    verdict = HOLDS if all(ok) and all(removed) else FAILS
    reasons = []
    if not all(above):
        reasons.append("in the base MT rare tokens do not influence more than frequent ones at layer 1")
    elif not all(peak):
        reasons.append("rare tokens influence more than frequent ones at layer 1, but their influence peaks later")
    if not all(removed):
        reasons.append("token dropout does not remove the rare tokens' lead at layer 1")
    return Finding(12, claim, rule, "; ".join(parts), verdict, "; ".join(reasons))


CLAIMS: tuple[Callable[[Run], Finding], ...] = (
    claim_lm_input_falls, claim_mlm_input_recovers, claim_mt_keeps_identity, claim_lm_output_rises,
    claim_mlm_corrupted, claim_same_token_order, claim_mt_position, claim_lm_left_context, claim_lm_mt_farthest,
    claim_seeds_closer, claim_frequent_change_more, claim_rare_influence)


def scorecard(path) -> list[Finding]:
    """Every claim of :data:`CLAIMS` on the ``metrics.zarr`` at ``path``."""
    run = Run(path)
    out = []
    for claim in CLAIMS:
        run.missing_intervals = False
        f = claim(run)
        if run.missing_intervals and f.verdict != NA:
            f = Finding(f.number, f.claim, f.rule, f.measured, f.verdict,
                        "; ".join(x for x in (f.why, "no bootstrap interval in this run: point values only") if x))
        out.append(f)
    return out


def scorecard_table(findings: list[Finding]) -> list[list[str]]:
    """Rows (header first) for the report: number, claim, measured, verdict (and why)."""
    rows = [["#", "claim (Voita et al. 2019)", "measured", "verdict"]]
    for f in findings:
        rows.append([str(f.number), f.claim, f.measured or "-", f.verdict + (f" ({f.why})" if f.why else "")])
    return rows
