"""Claim 12: the extreme influence of rare tokens at the first layer of MT and LM, and its
removal by input token dropout (Voita et al. 2019, sec. 5, the figures "Token influence"
and the same with token dropout).

The paper says "this extreme influence of rare tokens on the first layer of MT and for
LM" and, of token dropout, "there is no extreme influence of rare tokens". So, for each
of MT and LM: in every seed replicate the rarest filled bin is the most influential bin
at layer 1 (its 95% interval above the most frequent bin's) and layer 1 is where its
influence peaks; in the token-dropout model the rare bin's layer-1 influence falls below
the base model's by more than the seed-to-seed spread and it is no longer the top bin.
"""

from __future__ import annotations

import numpy as np

from evolution.report.paper import PAPER
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, Run, separate

__all__ = ["claim_rare_influence"]


def _profile(run: Run, model: str):
    """(value (layer, bin), interval (layer, bin, 2) or None, rare bin, frequent bin, samples (bin,)) of
    ``model``; None without two filled bins."""
    ds = run.groups["influence"]
    d = ds.distance.sel(metric="pwcca", model=model).transpose("layer", "freq_bin").values
    filled = np.flatnonzero(np.isfinite(d[0]))
    if len(filled) < 2:
        return None
    iv = None
    if "interval" in ds:
        iv = ds.interval.sel(metric="pwcca", model=model).transpose("layer", "freq_bin", "bound").values
        if not np.isfinite(iv[0, filled]).all():
            iv = None
    samples = ds.samples.sel(model=model).transpose("layer", "freq_bin").values[0] if "samples" in ds else None
    return d, iv, int(filled[-1]), int(filled[0]), samples


def claim_rare_influence(run: Run) -> Finding:
    claim = "Rare tokens influence other tokens most at layer 1 in MT and LM, and input token dropout removes that."
    rule = (
        "influence (PWCCA) of masking a token, by frequency-rank bin, for MT and LM: in every seed replicate the "
        "rarest filled bin has the largest layer-1 influence of all bins (its 95% interval above the most frequent "
        "bin's) and peaks at layer 1; in the model with input token dropout its layer-1 influence is below the base "
        "model's by more than the seed replicates' spread, and it is no longer the top bin"
    )

    def out(measured: str, verdict: str, why: str = "", details: tuple[str, ...] = ()) -> Finding:
        return Finding(
            12, claim, rule, measured, verdict, why, paper=str(PAPER[12]), figure="influence_pwcca", details=details
        )

    ds = run.groups["influence"]
    if ds is None or "pwcca" not in ds.metric.values:
        return out("", NA, "no influence group in this run (needs models that can mask attention keys)")
    models = set(ds.model.values.tolist())
    parts, details, reasons, missing = [], [], [], []
    verdicts = []
    for objective in ("mt", "lm"):
        reps = [m for m in run.replicates(objective) if m in models]
        profiles = {m: p for m in reps if (p := _profile(run, m)) is not None}
        if not profiles:
            missing.append(f"no {objective.upper()} influence with two filled frequency bins")
            continue
        ok = True
        rare_l1 = {}
        for m, (d, iv, rare, frequent, samples) in profiles.items():
            top = int(np.nanargmax(d[0]))
            peak = int(np.nanargmax(d[:, rare]))
            rare_l1[m] = d[0, rare]
            apart = iv is None or separate(iv[0, rare, 0], iv[0, frequent, 1])
            if iv is None:
                run.missing_intervals = True
            parts.append(
                f"{m}: layer 1 rare {d[0, rare]:.2e} vs frequent {d[0, frequent]:.2e}"
                + (
                    f" [{iv[0, rare, 0]:.2e}, {iv[0, rare, 1]:.2e}] vs [{iv[0, frequent, 0]:.2e}, "
                    f"{iv[0, frequent, 1]:.2e}]"
                    if iv is not None
                    else ""
                )
                + f"; top bin {ds.freq_bin.values[top]}; rare peaks at layer {peak + 1}"
            )
            if samples is not None:
                details.append(
                    f"{m}: masked occurrences per bin "
                    + ", ".join(
                        f"{b} {int(s)}"
                        for b, s in zip(ds.freq_bin.values, samples, strict=True)
                        if np.isfinite(s) and s > 0
                    )
                )
            if top != rare:
                ok = False
                reasons.append(f"{m}: the rare bin is not the most influential at layer 1")
            elif not apart:
                ok = False
                reasons.append(f"{m}: the rare and frequent bins' layer-1 intervals overlap")
            if peak != 0:
                ok = False
                reasons.append(f"{m}: the rare bin's influence peaks at layer {peak + 1}")
        drops = [m for m in run.token_dropout(objective) if m in models and _profile(run, m) is not None]
        base = run.base(objective)
        if not drops:
            missing.append(f"no {objective.upper()} with input token dropout (train.token_dropout)")
            verdicts.append(ok)
            continue
        spread = [abs(rare_l1[a] - rare_l1[b]) for i, a in enumerate(rare_l1) for b in list(rare_l1)[i + 1 :]]
        if not spread:
            missing.append(f"no {objective.upper()} seed replicate to measure the seed spread of influence")
            verdicts.append(ok)
            continue
        spread_max = max(spread)
        for m in drops:
            d, iv, rare, frequent, _ = _profile(run, m)
            mean_l1 = float(np.mean(list(rare_l1.values())))
            reference = rare_l1.get(base, mean_l1) if base is not None else mean_l1
            fall = reference - d[0, rare]
            still_top = int(np.nanargmax(d[0])) == rare
            parts.append(
                f"{m}: layer 1 rare {d[0, rare]:.2e} ({fall:+.2e} below {base}; seed spread "
                f"{spread_max:.2e}); top bin {ds.freq_bin.values[int(np.nanargmax(d[0]))]}"
            )
            if not fall > spread_max:
                ok = False
                reasons.append(f"{m}: the rare bin's layer-1 influence does not fall beyond the seed spread")
            if still_top:
                ok = False
                reasons.append(f"{m}: the rare bin is still the top bin at layer 1")
        verdicts.append(ok)
    measured = "; ".join(parts)
    if verdicts and not all(verdicts):
        return out(measured, FAILS, "; ".join(reasons), tuple(details))
    if missing:
        return out(measured, NA, "; ".join(missing), tuple(details))
    return out(measured, HOLDS, "", tuple(details))
