"""What every head verdict shares: the stored head groups of one ``metrics.zarr``
(:class:`HeadRun`), the two rank tests the rules use, and the rule that turns the
per-model outcomes of a claim into one :class:`~evolution.report.scorecard.base.Finding`.

Tests (one-sided, level :data:`ALPHA`; the head statistics carry no interval, so the
heads themselves are the samples):

* :func:`rank_greater`: Mann-Whitney U of ``x`` against ``y``; its effect size is
  A = U / (n_x n_y), the probability that a head of ``x`` scores above a head of ``y``
  (ties count one half); the p-value is exact without ties, the normal approximation
  with tie correction otherwise (``scipy.stats.mannwhitneyu``);
* :func:`signed_rank_below`: Wilcoxon's signed-rank test that paired differences lie
  below 0 (``scipy.stats.wilcoxon``; zero differences dropped).

A model's outcome is :data:`HOLDS`, :data:`FAILS`, or :data:`NA` when the numbers point
the claimed way but the test does not reach :data:`ALPHA`; a model without what a claim
needs is left out with its reason. A claim (:func:`verdict`) does not hold when it fails
for any model it concerns, is not measurable here when no model has what it needs or
when some model's outcome is undecided, and holds when it holds for every model it
concerns; ``why`` names the models behind the verdict and those left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "ALPHA",
    "NOT_SIGNIFICANT",
    "SINKS",
    "HeadRun",
    "Outcome",
    "Source",
    "rank_greater",
    "signed_rank_below",
    "halves",
    "span",
    "verdict",
    "pfmt",
]

#: one-sided level of every test of the head verdicts
ALPHA = 0.05
#: why a model's outcome is undecided when its numbers point the claimed way
NOT_SIGNIFICANT = f"in the claimed direction, but p >= {ALPHA:g}"
#: the key types that are sink tokens: BOS / [CLS] / <s> (``bos``) and EOS / [SEP] / </s> (``eos``)
SINKS = ("bos", "eos")


def pfmt(p: float) -> str:
    """A p-value as the findings print it: 3 decimals, or 2 significant digits below 0.001."""
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def rank_greater(x, y) -> tuple[float, float]:
    """(A, p): the Mann-Whitney effect size A = U_x / (n_x n_y) and the one-sided p-value
    of "``x`` tends to exceed ``y``" (exact without ties, normal approximation with tie
    correction otherwise). ``x``, ``y``: 1-D samples, each non-empty."""
    from scipy.stats import mannwhitneyu

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    pooled = np.concatenate([x, y])
    ties = len(np.unique(pooled)) < len(pooled)
    res = mannwhitneyu(x, y, alternative="greater", method="asymptotic" if ties else "exact")
    return float(res.statistic) / (len(x) * len(y)), float(res.pvalue)


def signed_rank_below(d) -> tuple[int, int, float, bool]:
    """(below, n, p, in_order) for paired differences ``d`` (1-D): how many of the n non-zero
    differences are negative, the one-sided p-value of Wilcoxon's signed-rank test that they
    lie below 0, and whether the signed ranks point that way (the ranks of the positive
    differences sum to less than half of n(n+1)/2). p is NaN without a non-zero difference."""
    from scipy.stats import wilcoxon

    d = np.asarray(d, dtype=float)
    d = d[d != 0]
    n = len(d)
    if n == 0:
        return 0, 0, float("nan"), False
    res = wilcoxon(d, alternative="less")
    r_plus = float(res.statistic)  # one-sided: the sum of the ranks of the positive differences
    return int((d < 0).sum()), n, float(res.pvalue), bool(r_plus < n * (n + 1) / 4)


def halves(layers) -> tuple[list[int], list[int]]:
    """(lower, upper): the first and the last floor(L / 2) of the ``layers`` (the middle one
    left out when L is odd)."""
    layers = [int(x) for x in layers]
    k = len(layers) // 2
    return layers[:k], layers[len(layers) - k :]


def span(layers: list[int]) -> str:
    return f"{layers[0]}" if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


@dataclass(frozen=True)
class Outcome:
    """One model's result under one claim: ``verdict`` (HOLDS, FAILS, or NA: undecided),
    ``text`` what was measured, ``why`` a reason beside the verdict, ``short`` the numbers
    the verdict rests on (the finding's ``measured``; the full ``text`` goes to its details)."""

    model: str
    verdict: str
    text: str
    why: str = ""
    short: str = ""


class Source(TypedDict):
    """Where a claim comes from: :func:`verdict`'s ``paper`` and ``figure``."""

    paper: str
    figure: str


def verdict(
    label: str,
    claim: str,
    rule: str,
    outcomes: list[Outcome],
    left_out: dict[str, str],
    *,
    missing: str = "",
    paper: str = "",
    figure: str = "",
    details: tuple[str, ...] = (),
    unit: str = "models",
) -> Finding:
    """The claim's :class:`Finding` from the per-model ``outcomes`` (see the module's rule):
    ``measured`` the short numbers of each model, ``details`` each model's full text, then
    ``details``; ``left_out``: model -> why the claim does not concern it; ``missing``: why
    the whole claim cannot be measured (a group or variable not in the store). ``unit``: what
    the outcomes are, in the counts of ``why`` (``does not hold for 2 of 2 lambdas``)."""
    lines = tuple(f"{o.model}: {o.text}" for o in outcomes) + tuple(details)

    def out(measured: str, v: str, why: str) -> Finding:
        return Finding(label, claim, rule, measured, v, why, paper=paper, figure=figure, details=lines)

    gone = _left_out(left_out)
    if missing or not outcomes:
        return out("", NA, "; ".join(x for x in (missing, gone) if x) or "no model with these numbers")
    measured = "; ".join(f"{o.model}: {o.short or o.text}" for o in outcomes)
    n = len(outcomes)
    fails = [o for o in outcomes if o.verdict == FAILS]
    undecided = [o for o in outcomes if o.verdict == NA]
    holds = [o.model for o in outcomes if o.verdict == HOLDS]
    if fails:
        why = (
            f"does not hold for {len(fails)} of {n} {unit}"
            + (f" (holds for {', '.join(holds)})" if holds else "")
            + ": "
            + _reasons(fails)
        )
        return out(measured, FAILS, "; ".join([why, *([gone] if gone else [])]))
    if undecided:
        why = f"undecided for {len(undecided)} of {n} {unit}: " + _reasons(undecided)
        return out(measured, NA, "; ".join([why, *([gone] if gone else [])]))
    return out(measured, HOLDS, gone)


def _reasons(outcomes: list[Outcome]) -> str:
    """ "reason (model, model); other reason (model)": each reason of ``outcomes`` (a why may
    join several with "; ") with the models it applies to."""
    by_reason: dict[str, list[str]] = {}
    for o in outcomes:
        for reason in o.why.split("; ") if o.why else ["see the measured values"]:
            by_reason.setdefault(reason, []).append(o.model)
    return "; ".join(f"{reason} ({', '.join(ms)})" for reason, ms in by_reason.items())


def _left_out(left_out: dict[str, str]) -> str:
    """ "left out: a, b (reason); c (other reason)", models grouped by their reason."""
    if not left_out:
        return ""
    by_reason: dict[str, list[str]] = {}
    for m, reason in left_out.items():
        by_reason.setdefault(reason, []).append(m)
    return "left out: " + "; ".join(f"{', '.join(ms)} ({reason})" for reason, ms in by_reason.items())


class HeadRun:
    """The head groups of one ``metrics.zarr`` (``heads``, ``heads_dependency``,
    ``heads_importance``; None where absent), read as the verdicts need them."""

    GROUPS = ("heads", "heads_dependency", "heads_importance")

    def __init__(self, path):
        from evolution.analyses.plotting import open_group

        self.path = str(path)
        self.groups = {name: open_group(path, name) for name in self.GROUPS}

    @classmethod
    def from_groups(
        cls,
        heads: xr.Dataset | None,
        dependency: xr.Dataset | None = None,
        importance: xr.Dataset | None = None,
        *,
        path: str = "",
    ) -> HeadRun:
        """The verdicts' view of groups already in memory (e.g. rebuilt from a report's CSVs)."""
        run = cls.__new__(cls)
        run.path = path
        run.groups = dict(zip(cls.GROUPS, (heads, dependency, importance), strict=True))
        return run

    @property
    def heads(self) -> xr.Dataset | None:
        return self.groups["heads"]

    @property
    def dependency(self) -> xr.Dataset | None:
        return self.groups["heads_dependency"]

    @property
    def importance(self) -> xr.Dataset | None:
        return self.groups["heads_importance"]

    def group(self, name: str) -> xr.Dataset:
        """The group ``name`` of :attr:`GROUPS`, for code that has checked it is there."""
        ds = self.groups[name]
        if ds is None:
            raise ValueError(f"{self.path or 'this run'}: no {name} group")
        return ds

    def models(self) -> list[str]:
        return [str(m) for m in self.heads.model.values] if self.heads is not None else []

    def has_measures(self, *names: str) -> bool:
        ds = self.heads
        return ds is not None and "value" in ds and all(n in ds.measure.values for n in names)

    def exists(self, model: str) -> np.ndarray:
        """(layer, head) bool: the heads the model has (models with fewer layers or heads are
        padded with NaN in every group)."""
        return np.isfinite(self.group("heads").value.sel(model=model, measure="entropy").values)

    def layers(self, model: str) -> list[int]:
        """The model's own layers (1-based), those with at least one head."""
        return [
            int(x) for x, row in zip(self.group("heads").layer.values, self.exists(model), strict=True) if row.any()
        ]

    def measure(self, model: str, name: str) -> np.ndarray:
        """(layer, head) values of one measure of ``heads/value``, NaN where a head does not exist."""
        v = self.group("heads").value.sel(model=model, measure=name).values.astype(float)
        return np.where(self.exists(model), v, np.nan)

    def sink_share(self, var: str, model: str) -> np.ndarray | None:
        """The share of ``var`` (``alpha_share`` / ``norm_share``: (layer, head, key_type);
        ``layer_alpha_share`` / ``layer_norm_share``: (layer, key_type)) going to the sink
        tokens together: the sum over :data:`SINKS`, an absent token (NaN) counting 0, NaN
        where every sink is NaN. None when the group lacks ``var``."""
        ds = self.heads
        if ds is None or var not in ds:
            return None
        keys = [k for k in SINKS if k in ds.key_type.values]
        if not keys:
            return None
        v = ds[var].sel(model=model, key_type=keys).values.astype(float)
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(v).all(-1), np.nan, np.nansum(v, axis=-1))

    def roles(self, model: str, rare_share: float) -> tuple[np.ndarray, dict[str, int], list[str]] | None:
        """(role (layer, head) bool, count of heads per role, the role kinds stored) for the
        heads of Voita et al. (ACL 2019): positional, syntactic (any relation), rare-token
        (``rare_token_share`` >= ``rare_share``); None when the group stores no role."""
        ds = self.group("heads")
        exists = self.exists(model)
        kinds: dict[str, np.ndarray] = {}
        if "positional" in ds:
            kinds["positional"] = ds.positional.sel(model=model).values.astype(bool)
        if "syntactic" in ds:
            kinds["syntactic"] = ds.syntactic.sel(model=model).values.astype(bool).any(-1)
        if "rare_token_share" in ds:
            rare = ds.rare_token_share.sel(model=model).values.astype(float)
            if np.isfinite(rare).any():
                kinds["rare-token"] = np.nan_to_num(rare, nan=-1.0) >= rare_share
        if not kinds:
            return None
        role = np.zeros_like(exists)
        for mask in kinds.values():
            role |= mask & exists
        return role, {k: int((v & exists).sum()) for k, v in kinds.items()}, list(kinds)
