"""What every claim shares: the :class:`Finding`, the verdicts, the uncertainty rules and
:class:`Run`, the stored numbers of one ``metrics.zarr`` with the role of each model.

Uncertainty (``docs/metrics.md``, "Findings scorecard"):

* an MI value's standard deviation combines the spread over k-means restarts
  (``mi_sd``) and the sentence bootstrap (``mi_corrected_interval``, read as
  ``(high - low) / 3.92``) in quadrature; a difference counts when it exceeds
  :data:`SD_FACTOR` x the two values' combined sd, ``2 sqrt(sd_a^2 + sd_b^2)``;
* an MI value at or above :data:`SATURATION` of H(X) is saturated: the clusters
  reproduce the token, so the curve cannot show a fall there;
* rates, distances, change and influence are compared by their 95% bootstrap
  intervals over sentences: an ordering counts when the intervals do not overlap.

Models are told apart by objective (the groups' ``objectives`` attribute) and by
``runs`` (objective, seed, token dropout of this project's models): the base
model of an objective is its run with the config's seed and no token dropout,
the other seeds are its replicates, ``token_dropout > 0`` marks claim 12's control.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "Finding",
    "Run",
    "VERDICTS",
    "HOLDS",
    "FAILS",
    "NA",
    "SD_FACTOR",
    "SATURATION",
    "Z95",
    "fmt",
    "threshold",
    "separate",
    "ClaimFn",
]

VERDICTS = ("holds", "does not hold", "not measurable here")
HOLDS, FAILS, NA = VERDICTS
#: a difference of MI counts when larger than SD_FACTOR x the combined standard deviation
SD_FACTOR = 2.0
#: MI at or above this share of H(X) is saturated (as the MI analysis warns)
SATURATION = 0.98
#: half-width of a normal 95% interval in standard deviations (interval width = 2 x Z95 sd)
Z95 = 1.959964


@dataclass(frozen=True)
class Finding:
    """One claim's verdict. ``paper``: the published value (:data:`evolution.report.paper.PAPER`);
    ``figure``: the report figure that shows the claim's numbers (its name in the report, e.g.
    ``mi``); ``details``: diagnostics a reader needs beside the verdict; ``part``: "" for the
    12 claims of the paper, a letter for a further line of one claim (e.g. 11 "b"). ``number``:
    the claim's number, or a label of its own where the finding is not one of the 12 (the
    head verdicts: "C1", ..., :mod:`evolution.report.heads_card`)."""

    number: int | str
    claim: str
    rule: str
    measured: str
    verdict: str
    why: str = ""
    paper: str = ""
    figure: str = ""
    details: tuple[str, ...] = ()
    part: str = ""
    #: the same claim under an earlier rule, kept beside the verdict for comparison (its
    #: ``rule``, ``verdict``, ``why``, ``measured``); omitted from :meth:`as_dict` when None
    earlier: dict | None = None

    @property
    def label(self) -> str:
        return f"{self.number}{self.part}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["details"] = list(self.details)
        if d["earlier"] is None:
            del d["earlier"]
        return d


ClaimFn = Callable[["Run"], "Finding | list[Finding]"]


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def threshold(sd_a: float, sd_b: float) -> float:
    """The smallest difference of two values that counts: SD_FACTOR x their combined sd."""
    return SD_FACTOR * float(np.hypot(sd_a, sd_b))


def separate(low_of_higher: float, high_of_lower: float) -> bool:
    """True when the interval of the value claimed higher lies wholly above the other's."""
    return bool(low_of_higher > high_of_lower)


class MICurve:
    """One model's MI with one target per layer, as the claims read it: ``value`` the
    control-subtracted MI (``mi_corrected``), ``sd`` its combined standard deviation,
    ``fraction`` the raw MI as a share of H(X) (``mi_fraction``), ``corrected_fraction``,
    ``saturated`` per layer, ``entropy``, and ``has_interval``."""

    def __init__(self, value, sd, fraction, corrected_fraction, entropy: float, has_interval: bool):
        self.value, self.sd, self.fraction = value, sd, fraction
        self.corrected_fraction, self.entropy, self.has_interval = corrected_fraction, entropy, has_interval
        self.saturated = fraction >= SATURATION

    def __len__(self) -> int:
        return len(self.value)


class Run:
    """The groups of one ``metrics.zarr`` and which model plays which role."""

    GROUPS = ("mi", "neighbors", "similarity", "change", "change_equal", "influence")

    def __init__(self, path):
        from evolution.analyses.plotting import open_group

        self.path = str(path)
        self.groups = {name: open_group(path, name) for name in self.GROUPS}
        attrs = next((g.attrs for g in self.groups.values() if g is not None), {})
        self.objectives = dict(attrs.get("objectives", {}))
        self.runs = dict(attrs.get("runs", {}))
        self.seed = attrs.get("seed")
        self.missing_intervals = False

    # roles -----------------------------------------------------------------------------------
    def replicates(self, objective: str) -> list[str]:
        """Models of ``objective`` without token dropout, the base model (the config's seed) first."""
        models = [
            m
            for m, o in self.objectives.items()
            if o == objective and self.runs.get(m, {}).get("token_dropout", 0.0) == 0.0
        ]
        return sorted(models, key=lambda m: self.runs.get(m, {}).get("seed", self.seed) != self.seed)

    def base(self, objective: str) -> str | None:
        r = self.replicates(objective)
        return r[0] if r else None

    def token_dropout(self, objective: str) -> list[str]:
        return [
            m
            for m, o in self.objectives.items()
            if o == objective and self.runs.get(m, {}).get("token_dropout", 0.0) > 0
        ]

    # MI ----------------------------------------------------------------------------------------
    def mi(self, model: str, target: str) -> MICurve | None:
        """The :class:`MICurve` of ``model`` and ``target`` over its layers; None when not stored.
        Stores from before the control-subtracted intervals give the restart spread alone."""
        ds = self.groups["mi"]
        if ds is None or model not in ds.model.values or target not in ds.target.values:
            return None
        sel = dict(model=model, target=target)
        mean = ds.mi.sel(**sel).mean("restart").values
        keep = ~np.isnan(mean)
        if not keep.any():
            return None
        n = ds.mi.sizes["restart"]
        sd_restart = ds.mi.sel(**sel).std("restart", ddof=1).values if n > 1 else np.zeros_like(mean)
        sd_restart = np.nan_to_num(sd_restart)
        shuffled = ds.mi_shuffled.sel(**sel).values if "mi_shuffled" in ds else np.zeros_like(mean)
        value = ds.mi_corrected.sel(**sel).values if "mi_corrected" in ds else mean - shuffled
        entropy = float(ds.entropy.sel(**sel))
        has_interval = (
            "mi_corrected_interval" in ds and np.isfinite(ds.mi_corrected_interval.sel(**sel).values[keep]).all()
        )
        if has_interval:
            iv = ds.mi_corrected_interval.sel(**sel)
            sd_sentences = (iv.sel(bound="high").values - iv.sel(bound="low").values) / (2 * Z95)
        else:
            self.missing_intervals = True
            sd_sentences = np.zeros_like(mean)
        sd = np.hypot(sd_restart, sd_sentences)
        fraction = ds.mi_fraction.sel(**sel).values if "mi_fraction" in ds else mean / entropy
        corrected_fraction = value / entropy
        return MICurve(value[keep], sd[keep], fraction[keep], corrected_fraction[keep], entropy, has_interval)

    # neighbours --------------------------------------------------------------------------------
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

    # similarity --------------------------------------------------------------------------------
    def _same_layer(self):
        ds = self.groups["similarity"]
        if ds is None or "pwcca" not in ds.metric.values:
            return None
        return ds

    def distance(self, a: str, b: str, layer: int) -> float:
        """PWCCA distance of two models at one layer, the mean of both directions (PWCCA weights
        by one view); NaN when not stored."""
        ds = self._same_layer()
        if ds is None or a not in ds.model_a.values or b not in ds.model_a.values:
            return float("nan")
        if "same_layer" in ds:
            if layer not in ds.layer.values:
                return float("nan")
            return float(ds.same_layer.sel(metric="pwcca", model_a=a, model_b=b, layer=layer))
        d = ds.distance.sel(metric="pwcca")
        if layer not in d.layer_a.values:
            return float("nan")
        return float(
            (
                d.sel(model_a=a, model_b=b, layer_a=layer, layer_b=layer)
                + d.sel(model_a=b, model_b=a, layer_a=layer, layer_b=layer)
            )
            / 2
        )

    def distance_interval(self, a: str, b: str, layer: int) -> tuple[float, float] | None:
        """The bootstrap interval of :meth:`distance`, when the run stored one."""
        ds = self._same_layer()
        if ds is None or "interval" not in ds or a not in ds.model_a.values or b not in ds.model_a.values:
            return None
        iv = ds.interval.sel(metric="pwcca", model_a=a, model_b=b, layer=layer).values
        return (float(iv[0]), float(iv[1])) if np.isfinite(iv).all() else None

    def pair_kind(self, a: str, b: str) -> str:
        from evolution.analyses.pair_kinds import pair_kind

        return pair_kind(a, b, objectives=self.objectives, runs=self.runs)

    def top_layer(self, models: list[str]) -> int | None:
        """The highest layer that every one of ``models`` has in the similarity group."""
        ds = self.groups["similarity"]
        if ds is None:
            return None
        d = ds.distance.sel(metric=ds.metric.values[0])
        layers = [
            int(max(d.layer_a.values[~np.isnan(d.sel(model_a=m, model_b=m).values.diagonal())], default=-1))
            for m in models
            if m in d.model_a.values
        ]
        return min(layers) if layers and min(layers) >= 0 else None
