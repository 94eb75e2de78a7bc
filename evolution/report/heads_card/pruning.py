"""Verdict V3: Voita et al. (ACL 2019), sec. 6: a model pruned with L0 gates translates better
than the same head layout trained from scratch, read off the ``heads_pruning`` group.

The base models are trained by fairseq-train, the from-scratch layouts by the project's loop
(on fairseq-train's own batches with ``metrics.pruning.scratch_batches: fixed``;
docs/decisions.md, "The 1.2 BLEU gap"), so each arm is read against the unpruned reference of
its own pipeline (:mod:`evolution.analyses.heads.pruning_seeds`, whose table the report shows):

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

from evolution.analyses.heads.pruning_seeds import LEVEL, arm_values, recipe_seeds, seed_interval
from evolution.report.heads_card.base import HeadRun, Outcome, Source, verdict
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding

__all__ = ["claim_pruned_beats_scratch", "seed_interval", "MIN_SEEDS"]

#: seeds (pruned MT models) the rule needs: fewer give no interval worth reading
MIN_SEEDS = 3

PAPER = (
    "a model pruned with L0 gates is better than the same head configuration trained from scratch "
    "(Voita et al. ACL 2019, sec. 6, table 3)"
)
CLAIM = "Pruning keeps more BLEU than training the pruned layout from scratch."


def claim_pruned_beats_scratch(run: HeadRun) -> Finding:
    from evolution.analyses.plotting import open_group

    rule = (
        f"per seed, d = (BLEU pruned - BLEU fine-tuned without gates) - (BLEU of the layout from scratch - "
        f"BLEU of every head from scratch); at each lambda trained from scratch, the mean d over >= {MIN_SEEDS} "
        f"seeds with a {LEVEL:.0%} t interval: holds if its lower bound > 0, does not hold if the mean <= 0, "
        "undecided otherwise"
    )
    args = Source(paper=PAPER, figure="heads_pruning")
    ds = open_group(run.path, "heads_pruning")
    if ds is None:
        return verdict(
            "V3", CLAIM, rule, [], {}, missing="no heads_pruning group in this run (metrics.pruning)", **args
        )
    seeds, gone = recipe_seeds(ds)
    if len(seeds) < MIN_SEEDS:
        return verdict(
            "V3",
            CLAIM,
            rule,
            [],
            gone,
            missing=(
                f"{len(seeds)} seed(s) pruned with both references ({', '.join(seeds) or 'none'}); the rule needs "
                f">= {MIN_SEEDS}: prune models of {MIN_SEEDS} seeds (metrics.pruning.models, e.g. mt, mt-seed1, "
                "mt-seed2)"
            ),
            **args,
        )
    # each all-attention run whose layout every seed trained from scratch, with its arms
    by_run = {r: arm_values(ds, r, seeds) for r in ds.run.values if str(ds.scope.sel(run=r).values) == "all"}
    scratch_runs = {r: arms for r, arms in by_run.items() if np.isfinite(arms["scratch"]).all()}
    if not scratch_runs:
        return verdict(
            "V3",
            CLAIM,
            rule,
            [],
            gone,
            missing="no lambda's layout trained from scratch for every seed "
            "(metrics.pruning.scratch_updates, scratch_lambdas)",
            **args,
        )
    outcomes, details = [], []
    for r, arms in scratch_runs.items():
        lam = float(ds.lam.sel(run=r))
        pruned, scratch = arms["pruned"], arms["scratch"]
        mean, low, high = seed_interval(arms["d"])
        text = (
            f"pruned {pruned.mean():+.2f}, from scratch {scratch.mean():+.2f} BLEU against their references; "
            f"d = {mean:+.2f} [{low:+.2f}, {high:+.2f}] over {len(seeds)} seeds"
        )
        v, why = (
            (HOLDS, "")
            if low > 0
            else (FAILS, "the mean d is not above 0")
            if mean <= 0
            else (NA, f"the {LEVEL:.0%} interval of d reaches 0")
        )
        outcomes.append(Outcome(f"lambda {lam:g}", v, text, why, short=f"d = {mean:+.2f} [{low:+.2f}, {high:+.2f}]"))
        if np.isfinite(arms["continuous"]).all():
            c = arms["continuous"] - pruned  # continuous - hard, both against the same reference
            details.append(
                f"lambda {lam:g}: the continuous test-time gate (released code) against the hard 0/1 "
                f"layout: {c.mean():+.2f} BLEU over {len(seeds)} seeds"
            )
    # one outcome per lambda (each over every seed), so the counts of the verdict are of lambdas
    return verdict("V3", CLAIM, rule, outcomes, gone, details=tuple(details), unit="lambdas", **args)
