"""Claims 9-11: distances between models and change between layers (Voita et al. 2019,
sec. 4, the figures "Distance between tasks" and "Token change").

Claim 10 follows the paper's design: the objectives of one seed share their initial
weights ("we fix model hyperparameters, training data, and parameter initialization"),
the seed replicates have their own. Beside its verdict it reports the comparison a
reader needs to see through that design: objectives that differ in their initial weights
too (the init-controlled pairs), and the distances at layer 0, where the shared
initialisation shows most.
"""

from __future__ import annotations

import numpy as np

from evolution.report.paper import PAPER
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, Run, fmt, separate

__all__ = ["claim_lm_mt_farthest", "claim_seeds_closer", "claim_frequent_change_more"]

SEEDS, SHARED, CROSS = "seeds", "objectives, shared init", "objectives, different inits"


def claim_lm_mt_farthest(run: Run) -> Finding:
    claim = "At the top layer LM and MT are farther apart than MT and MLM."
    rule = (
        "PWCCA distance (mean of both directions) at the top layer: d(LM, MT) > d(MT, MLM) for every combination "
        "of seed replicates, and for the base models with non-overlapping 95% bootstrap intervals where stored"
    )

    def out(measured: str, verdict: str, why: str = "") -> Finding:
        return Finding(9, claim, rule, measured, verdict, why, paper=str(PAPER[9]), figure="similarity_pairs")

    mts, lms, mlms = run.replicates("mt"), run.replicates("lm"), run.replicates("mlm")
    layer = run.top_layer(mts + lms + mlms)
    if not (mts and lms and mlms) or layer is None:
        return out("", NA, "needs MT, LM and MLM with PWCCA distances")
    combos = [(run.distance(lm, mt, layer), run.distance(mt, mlm, layer)) for mt in mts for lm in lms for mlm in mlms]
    combos = [c for c in combos if np.isfinite(c).all()]
    if not combos:
        return out("", NA, "the models were not compared on the same occurrences")
    a, b = np.array(combos).T
    measured = (
        f"layer {layer}: d(LM, MT) {fmt(a.min(), 3)}-{fmt(a.max(), 3)}, d(MT, MLM) {fmt(b.min(), 3)}-"
        f"{fmt(b.max(), 3)} over {len(combos)} replicate combination(s)"
    )
    ok = a > b
    if not ok.all():
        return out(measured, FAILS, f"holds in {int(ok.sum())} of {len(ok)} combinations")
    lm_mt, mt_mlm = run.distance_interval(lms[0], mts[0], layer), run.distance_interval(mts[0], mlms[0], layer)
    if lm_mt is None or mt_mlm is None:
        run.missing_intervals = True
        return out(measured, HOLDS)
    measured += (
        f"; base models' 95% intervals [{fmt(lm_mt[0], 3)}, {fmt(lm_mt[1], 3)}] vs "
        f"[{fmt(mt_mlm[0], 3)}, {fmt(mt_mlm[1], 3)}]"
    )
    if separate(lm_mt[0], mt_mlm[1]):
        return out(measured, HOLDS)
    return out(measured, NA, "in this order, but the 95% intervals overlap")


def _pairs(run: Run, models: list[str]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {SEEDS: [], SHARED: [], CROSS: []}
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            kind = run.pair_kind(a, b)
            if kind in out:
                out[kind].append((a, b))
    return out


def _span(run: Run, pairs: list[tuple[str, str]], layer: int) -> tuple[float, float]:
    d = [run.distance(a, b, layer) for a, b in pairs]
    d = [x for x in d if np.isfinite(x)]
    return (min(d), max(d)) if d else (float("nan"), float("nan"))


def claim_seeds_closer(run: Run) -> Finding:
    claim = "Two seeds of one objective are closer than any two objectives."
    rule = (
        "PWCCA distance at every layer from 1 up: the largest distance between two seeds of one objective is below "
        "the smallest distance between models of two objectives (as in the paper, the objectives of one seed share "
        "their initial weights)"
    )
    everyone = [m for o in ("mt", "lm", "mlm") for m in run.replicates(o)]
    pairs = _pairs(run, everyone)
    seeds, objectives = pairs[SEEDS], pairs[SHARED] + pairs[CROSS]

    def out(measured: str, verdict: str, why: str = "", details: tuple[str, ...] = ()) -> Finding:
        return Finding(
            10, claim, rule, measured, verdict, why, paper=str(PAPER[10]), figure="similarity_pairs", details=details
        )

    if not seeds:
        return out("", NA, "no seed replicates in this run (train.seeds)")
    top = run.top_layer(everyone)
    if not objectives or top is None:
        return out("", NA, "needs two objectives with PWCCA distances")
    rows = [(layer, _span(run, seeds, layer)[1], _span(run, objectives, layer)[0]) for layer in range(1, top + 1)]
    measured = "; ".join(
        f"layer {layer}: seeds <= {fmt(s, 3)}, objectives >= {fmt(c, 3)}"
        for layer, s, c in rows
        if layer in (1, top) or layer == (1 + top) // 2
    )
    bad = [layer for layer, s, c in rows if not s < c]
    details = []
    if pairs[CROSS]:
        controlled = [
            (layer, _span(run, seeds, layer)[1], _span(run, pairs[CROSS], layer)[0]) for layer in range(1, top + 1)
        ]
        held = [layer for layer, s, c in controlled if s < c]
        details.append(
            "init-controlled (objectives that also differ in their initial weights): seeds <= "
            + ", ".join(f"{fmt(s, 3)}" for _, s, _ in controlled)
            + " vs objectives >= "
            + ", ".join(f"{fmt(c, 3)}" for _, _, c in controlled)
            + f" at layers 1..{top}; seeds closer at layer(s) {held or 'none'}"
        )
    zero = {kind: _span(run, p, 0) for kind, p in pairs.items() if p}
    if zero and any(np.isfinite(v[0]) for v in zero.values()):
        details.append(
            "layer 0 (embeddings): " + "; ".join(f"{kind} {fmt(lo, 3)}-{fmt(hi, 3)}" for kind, (lo, hi) in zero.items())
        )
    why = ""
    if bad:
        why = f"fails at layer(s) {bad}"
        if pairs[SHARED]:
            why += (
                "; the objectives of one seed share their initial weights (the paper's design), which keeps "
                "them close in the lower layers of models trained this briefly"
            )
    return out(measured, FAILS if bad else HOLDS, why, tuple(details))


def _change_group(run: Run):
    """The change-by-frequency group the claim reads: equal-size bins where stored (PWCCA distance
    depends on the number of occurrences, so bins of one size compare fairly), else rank bins."""
    for name in ("change_equal", "change"):
        ds = run.groups.get(name)
        if ds is not None and "pwcca" in ds.metric.values:
            return name, ds
    return None, None


def _paper_pairs(ds):
    """The layer pairs Voita et al. plot (1-2 .. (L-1)-L): layer_from >= 1 where stored."""
    if "layer_from" in ds.coords:
        keep = ds.layer_from.values >= 1
    else:
        keep = np.array([not str(p).startswith("0-") for p in ds.layer_pair.values])
    return ds.isel(layer_pair=np.flatnonzero(keep))


def claim_frequent_change_more(run: Run) -> list[Finding]:
    claim = "Frequent tokens change more between layers than rare ones."
    rule = (
        "PWCCA distance between adjacent layers over the paper's layer pairs (1-2 up), averaged over the pairs: the "
        "most frequent bin above the rarest filled bin, for every base model and seed replicate, with "
        "non-overlapping intervals (averaged the same way) where stored; bins of equal size where stored"
    )
    claim_b = "The MLM reverses in its top layers: there rare tokens change more than frequent ones."
    rule_b = (
        "PWCCA change of the top layer pair, every MLM replicate: the rarest filled bin above the most frequent, "
        "with non-overlapping intervals where stored"
    )
    name, ds = _change_group(run)

    def out(measured, verdict, why="", details=(), part="", c=claim, r=rule):
        return Finding(
            11,
            c,
            r,
            measured,
            verdict,
            why,
            paper=str(PAPER[f"11{part}" if part else 11]),
            figure=f"{name}_pwcca" if name else "change_pwcca",
            details=details,
            part=part,
        )

    if ds is None:
        return [out("", NA, "no change-by-frequency group in this run")]
    sub = _paper_pairs(ds)
    d = sub.distance.sel(metric="pwcca")
    has_iv = "interval" in sub
    parts, ok, details, reversal = [], [], [], []
    for o in ("mt", "lm", "mlm"):
        for m in run.replicates(o):
            if m not in d.model.values:
                continue
            v = d.sel(model=m).mean("layer_pair").values
            filled = np.flatnonzero(np.isfinite(v))
            if len(filled) < 2:
                continue
            f, r = filled[0], filled[-1]
            text = f"{m}: {fmt(v[f], 3)} (bin {ds.freq_bin.values[f]}) vs {fmt(v[r], 3)} (bin {ds.freq_bin.values[r]})"
            good = v[f] > v[r]
            if has_iv:
                iv = sub.interval.sel(metric="pwcca", model=m).mean("layer_pair").values  # (bin, 2)
                if np.isfinite(iv[[f, r]]).all():
                    text += f" [{fmt(iv[f, 0], 3)}, {fmt(iv[f, 1], 3)}] vs [{fmt(iv[r, 0], 3)}, {fmt(iv[r, 1], 3)}]"
                    good = good and separate(iv[f, 0], iv[r, 1])
                else:
                    run.missing_intervals = True
            else:
                run.missing_intervals = True
            parts.append(text)
            ok.append(bool(good))
            if "n_occurrences" in ds:
                n = ds.n_occurrences.sel(model=m).values
                details.append(f"{m}: {int(n[f])} occurrences in the frequent bin, {int(n[r])} in the rare one")
            if o == "mlm":
                top = d.sel(model=m).isel(layer_pair=-1).values
                tf, tr = top[f], top[r]
                rev_text = f"{m} pair {d.layer_pair.values[-1]}: rare {fmt(tr, 3)} vs frequent {fmt(tf, 3)}"
                rev = tr > tf
                if has_iv:
                    iv = sub.interval.sel(metric="pwcca", model=m).isel(layer_pair=-1).values
                    if np.isfinite(iv[[f, r]]).all():
                        rev_text += (
                            f" [{fmt(iv[r, 0], 3)}, {fmt(iv[r, 1], 3)}] vs [{fmt(iv[f, 0], 3)}, {fmt(iv[f, 1], 3)}]"
                        )
                        rev = rev and separate(iv[r, 0], iv[f, 1])
                reversal.append((rev_text, bool(rev), tr > tf))
    if not ok:
        return [out("", NA, "fewer than two filled frequency bins")]
    bins = "bins of equal size by frequency rank" if name == "change_equal" else "frequency-rank bins"
    frequency = ds.attrs.get("frequency", "")
    why = "; ".join(
        x
        for x in (
            (f"holds for {sum(ok)} of {len(ok)} models" if not all(ok) else ""),
            f"{bins}" + (f", ranks from the {frequency}" if frequency else ""),
        )
        if x
    )
    findings = [out("; ".join(parts), HOLDS if all(ok) else FAILS, why, tuple(details))]
    if reversal:
        texts, strict, point = zip(*reversal, strict=True)
        verdict = HOLDS if all(strict) else NA if all(point) else FAILS
        findings.append(
            out(
                "; ".join(texts),
                verdict,
                "in this order, but the intervals overlap" if verdict == NA else "",
                part="b",
                c=claim_b,
                r=rule_b,
            )
        )
    return findings
