"""Verdict V3: Voita et al. (ACL 2019), sec. 6: a model pruned with L0 gates translates better
than the same head layout trained from scratch, read off the ``heads_pruning`` group.

The two arms come from two training pipelines in this project (the base model from
fairseq-train, the from-scratch layouts from the project's loop; docs/decisions.md, "The 1.2
BLEU gap"), so each arm is read against the unpruned reference of its own pipeline:

* pruned: ``bleu`` - ``bleu_tuned`` (the same fine-tuning without gates);
* from scratch: ``bleu_scratch`` - ``bleu_scratch_full`` (every head trained from scratch by the
  same loop and budget).

Per seed (each pruned MT model is one seed: ``mt``, ``mt-seed1``, ...; token-dropout models are
left out), d = pruned - from scratch. At each lambda whose layout was trained from scratch, the
mean of d over seeds with a two-sided 95% Student-t interval (n - 1 degrees of freedom):
holds if the lower bound is above 0, does not hold if the mean is 0 or below, undecided
otherwise. The claim needs :data:`MIN_SEEDS` seeds; it holds when it holds at every lambda
(:func:`evolution.report.heads_card.base.verdict`). The released code's continuous test-time
gate (``bleu_continuous``) is reported beside the hard 0/1 layout in the details.
"""

from __future__ import annotations

import numpy as np

from evolution.report.heads_card.base import HeadRun, Outcome, verdict
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding

__all__ = ["claim_pruned_beats_scratch", "seed_interval", "MIN_SEEDS"]

#: seeds (pruned MT models) the rule needs: fewer give no interval worth reading
MIN_SEEDS = 3
LEVEL = 0.95

PAPER = ("a model pruned with L0 gates is better than the same head configuration trained from scratch "
         "(Voita et al. ACL 2019, sec. 6, table 3)")
CLAIM = "Pruning keeps more BLEU than training the pruned layout from scratch."


def seed_interval(d, *, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high) of the values ``d`` (one per seed) with a two-sided Student-t interval at
    ``level`` (n - 1 degrees of freedom); low = high = NaN for fewer than 2 values."""
    from scipy.stats import t

    d = np.asarray(d, dtype=float)
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return mean, float("nan"), float("nan")
    half = float(t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / np.sqrt(n))
    return mean, mean - half, mean + half


def _seeds(ds, runs: dict) -> tuple[list[str], dict[str, str]]:
    """The pruned models that are seeds of one recipe, and those left out with why."""
    def has(var: str, m: str) -> bool:
        return var in ds and bool(np.isfinite(float(ds[var].sel(model=m))))

    keep, gone = [], {}
    for m in (str(x) for x in ds.model.values):
        if float(runs.get(m, {}).get("token_dropout", 0.0) or 0.0) > 0:
            gone[m] = "token dropout: not a seed of the base recipe"
        elif not has("bleu_tuned", m):
            gone[m] = "no gate-free fine-tuned reference (metrics.pruning.control)"
        elif not has("bleu_scratch_full", m):
            gone[m] = "no every-head from-scratch reference (metrics.pruning.scratch_full)"
        else:
            keep.append(m)
    return keep, gone


def claim_pruned_beats_scratch(run: HeadRun) -> Finding:
    from evolution.analyses.plotting import open_group

    rule = (f"per seed, d = (BLEU pruned - BLEU fine-tuned without gates) - (BLEU of the layout from scratch - "
            f"BLEU of every head from scratch); at each lambda trained from scratch, the mean d over >= {MIN_SEEDS} "
            f"seeds with a {LEVEL:.0%} t interval: holds if its lower bound > 0, does not hold if the mean <= 0, "
            "undecided otherwise")
    args = dict(paper=PAPER, figure="heads_pruning")
    ds = open_group(run.path, "heads_pruning")
    if ds is None:
        return verdict("V3", CLAIM, rule, [], {}, missing="no heads_pruning group in this run (metrics.pruning)",
                       **args)
    seeds, gone = _seeds(ds, ds.attrs.get("runs") or {})
    scratch_runs = [r for r in ds.run.values if str(ds.scope.sel(run=r).values) == "all"
                    and np.isfinite(ds.bleu_scratch.sel(run=r, model=seeds).values).all()] if seeds else []
    if len(seeds) < MIN_SEEDS:
        return verdict("V3", CLAIM, rule, [], gone, missing=(
            f"{len(seeds)} seed(s) pruned with both references ({', '.join(seeds) or 'none'}); the rule needs "
            f">= {MIN_SEEDS}: prune models of {MIN_SEEDS} seeds (metrics.pruning.models, e.g. mt, mt-seed1, "
            "mt-seed2)"), **args)
    if not scratch_runs:
        return verdict("V3", CLAIM, rule, [], gone, missing="no lambda's layout trained from scratch for every seed "
                                                            "(metrics.pruning.scratch_updates, scratch_lambdas)", **args)
    outcomes, details = [], []
    for r in scratch_runs:
        lam = float(ds.lam.sel(run=r))
        pruned = ds.bleu.sel(run=r, model=seeds).values - ds.bleu_tuned.sel(model=seeds).values
        scratch = ds.bleu_scratch.sel(run=r, model=seeds).values - ds.bleu_scratch_full.sel(model=seeds).values
        mean, low, high = seed_interval(pruned - scratch)
        text = (f"pruned {pruned.mean():+.2f}, from scratch {scratch.mean():+.2f} BLEU against their references; "
                f"d = {mean:+.2f} [{low:+.2f}, {high:+.2f}] over {len(seeds)} seeds")
        v, why = (HOLDS, "") if low > 0 else (FAILS, "the mean d is not above 0") if mean <= 0 else \
            (NA, f"the {LEVEL:.0%} interval of d reaches 0")
        outcomes.append(Outcome(f"lambda {lam:g}", v, text, why, short=f"d = {mean:+.2f} [{low:+.2f}, {high:+.2f}]"))
        if "bleu_continuous" in ds and np.isfinite(ds.bleu_continuous.sel(run=r, model=seeds).values).all():
            c = ds.bleu_continuous.sel(run=r, model=seeds).values - ds.bleu.sel(run=r, model=seeds).values
            details.append(f"lambda {lam:g}: the continuous test-time gate (released code) against the hard 0/1 "
                           f"layout: {c.mean():+.2f} BLEU over {len(seeds)} seeds")
    return verdict("V3", CLAIM, rule, outcomes, gone, details=tuple(details), **args)
