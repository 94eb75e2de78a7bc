"""The pruning comparison over seeds (Voita et al. ACL 2019, sec. 6 and table 3), read off the
``heads_pruning`` group: each arm against its own unpruned reference, averaged over the pruned
models that are seeds of one recipe, with a Student-t interval.

Arms, per seed (model) and run (lambda, scope):

* ``pruned``: ``bleu`` - ``bleu_tuned``: the model fine-tuned with gates, translated with the
  hard 0/1 layout, against the same fine-tuning without gates;
* ``continuous``: ``bleu_continuous`` - ``bleu_tuned``: the same model with each head scaled by
  its gate's deterministic test-time value, as the released code evaluates
  (the-story-of-heads, ``lib/layers/concrete_gate.py``);
* ``scratch``: ``bleu_scratch`` - ``bleu_scratch_full``: the kept layout trained from scratch
  against every head trained from scratch by the same loop and budget;
* ``d``: ``pruned`` - ``scratch``: what verdict V3 reads
  (:mod:`evolution.report.heads_card.pruning`).

A seed is a pruned model without token dropout that has both references; the others are left
out with their reason (:func:`recipe_seeds`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LEVEL", "ARMS", "seed_interval", "recipe_seeds", "arm_values", "seed_rows"]

#: the two-sided level of the seed intervals
LEVEL = 0.95
#: the arms (:func:`arm_values`) and how the tables name them
ARMS = {
    "pruned": "pruned (hard 0/1 layout) - fine-tuned without gates",
    "continuous": "pruned (continuous test-time gate) - fine-tuned without gates",
    "scratch": "layout from scratch - every head from scratch",
    "d": "d = pruned arm - from-scratch arm",
}


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


def recipe_seeds(ds) -> tuple[list[str], dict[str, str]]:
    """The pruned models of ``ds`` (a ``heads_pruning`` group) that are seeds of one recipe, and
    those left out with why: a token-dropout model (``runs`` attribute), or one without the gate-free
    fine-tuned reference (``bleu_tuned``) or the every-head from-scratch one (``bleu_scratch_full``)."""
    runs = ds.attrs.get("runs") or {}

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


def arm_values(ds, run, models, *, metric: str = "bleu") -> dict[str, np.ndarray]:
    """Each arm of :data:`ARMS` for ``run`` (one value per model of ``models``, in order; NaN where
    the run lacks it), ``metric`` "bleu" or "chrf"."""

    def get(var: str, by_run: bool) -> np.ndarray:
        if var not in ds:
            return np.full(len(models), np.nan)
        x = ds[var].sel(model=list(models))
        return np.asarray((x.sel(run=run) if by_run else x).values, dtype=float)

    tuned = get(f"{metric}_tuned", False)
    pruned = get(metric, True) - tuned
    scratch = get(f"{metric}_scratch", True) - get(f"{metric}_scratch_full", False)
    return {
        "pruned": pruned,
        "continuous": get(f"{metric}_continuous", True) - tuned,
        "scratch": scratch,
        "d": pruned - scratch,
    }


def seed_rows(ds, *, level: float = LEVEL) -> tuple[list[list[str]], list[str]]:
    """A table over the seeds of ``ds`` (:func:`recipe_seeds`): per run and arm measured for every
    seed, the mean BLEU difference with its ``level`` t interval and the per-seed values; and the
    models it uses. Empty rows for fewer than 2 seeds."""
    seeds, _ = recipe_seeds(ds)
    if len(seeds) < 2:
        return [], seeds
    rows = [
        [
            "lambda",
            "gated",
            "arm (BLEU difference)",
            f"mean [{level:.0%} t interval]",
            "per seed (" + ", ".join(seeds) + ")",
        ]
    ]
    for run in ds.run.values:
        for arm, x in arm_values(ds, run, seeds).items():
            if not np.isfinite(x).all():
                continue
            mean, low, high = seed_interval(x, level=level)
            rows.append(
                [
                    f"{float(ds.lam.sel(run=run)):g}",
                    str(ds.scope.sel(run=run).values),
                    ARMS[arm],
                    f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]",
                    ", ".join(f"{v:+.2f}" for v in x),
                ]
            )
    return rows, seeds
