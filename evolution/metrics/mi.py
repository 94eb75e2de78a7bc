"""Mutual information between token labels and k-means clusters of one layer.

Voita, Sennrich & Titov (2019), section 4: discretise a layer's
representations with k-means (:mod:`evolution.metrics.kmeans`) and measure I(X; C) between the token label X
(the input token, or the output label) and the cluster C, in nats, from the
contingency table. The upper bound is H(X), reported beside it; a shuffled
pairing of labels and clusters measures the estimator's bias at this n and k
(``docs/metrics.md``). Uncertainty: the spread over k-means restarts (each
restart its own seed) and, given each restart's clusters, a bootstrap over
whole sentences of the contingency table (:func:`bootstrap_mi`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

# every name the module had before the split stays importable from here
from evolution.metrics.kmeans import (  # noqa: F401  # re-exported: importable from here as before
    ALGORITHMS,
    TWO_LEVEL_FROM_K,
    kmeans_labels,
    resolve_algorithm,
    two_level_kmeans_labels,
)

logger = logging.getLogger(__name__)

__all__ = [
    "entropy",
    "mutual_information",
    "select_frequent",
    "kmeans_labels",
    "LayerMI",
    "layer_mi",
    "bootstrap_mi",
    "nested_type_mi",
    "centred_interval",
]

#: MI above this share of H(X) is reported as saturated: k is too large for the data.
SATURATION = 0.98


def _codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, codes = np.unique(np.asarray(labels), return_inverse=True)
    return codes.ravel(), len(uniq)


def entropy(labels: np.ndarray) -> float:
    """Shannon entropy of the empirical distribution of ``labels`` (n,), in nats."""
    codes, _ = _codes(labels)
    p = np.bincount(codes) / len(codes)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def mutual_information(x: np.ndarray, c: np.ndarray) -> float:
    """I(X; C) in nats from two label arrays of shape (n,).

    sum over observed (x, c) of p(x, c) log[p(x, c) / (p(x) p(c))]; equal to
    :func:`sklearn.metrics.mutual_info_score`. Only observed pairs are
    visited, so memory is O(n) even for 1,000 tokens x 10,000 clusters.
    """
    x_codes, nx = _codes(x)
    c_codes, nc = _codes(c)
    if len(x_codes) != len(c_codes):
        raise ValueError(f"label arrays differ in length: {len(x_codes)} vs {len(c_codes)}")
    n = len(x_codes)
    if n == 0:
        raise ValueError("no occurrences: cannot estimate mutual information")
    joint, counts = np.unique(x_codes.astype(np.int64) * nc + c_codes, return_counts=True)
    px = np.bincount(x_codes, minlength=nx) / n
    pc = np.bincount(c_codes, minlength=nc) / n
    pxy = counts / n
    xi, ci = joint // nc, joint % nc
    return float(max(0.0, (pxy * (np.log(pxy) - np.log(px[xi]) - np.log(pc[ci]))).sum()))


def select_frequent(labels: np.ndarray, *, n_types: int, min_count: int) -> np.ndarray:
    """Boolean mask (n,) of occurrences whose label is among the ``n_types``
    most frequent labels that occur at least ``min_count`` times (ties by
    smaller label). Voita et al.: 1,000 types with >= 1,000 occurrences.
    """
    labels = np.asarray(labels)
    uniq, counts = np.unique(labels, return_counts=True)
    keep = counts >= min_count
    uniq, counts = uniq[keep], counts[keep]
    order = np.lexsort((uniq, -counts))[:n_types]
    return np.isin(labels, uniq[order])


class _Table:
    """The contingency table of two code arrays ``x``, ``c`` (n,), built once: each occurrence's
    cell among the observed (x, c) pairs, so that a bootstrap replicate's table is one weighted
    count over the occurrences (O(n)), not over every possible pair (nx x nc: a million cells
    for the MLM's fed tokens against 300 clusters)."""

    def __init__(self, x: np.ndarray, c: np.ndarray):
        nx, nc = int(x.max()) + 1, int(c.max()) + 1
        joint, cell = np.unique(x * nc + c, return_inverse=True)  # ascending codes, as a dense table's cells
        self.x, self.c, self.cell = x, c, cell.ravel()
        self.xi, self.ci, self.nx, self.nc = joint // nc, joint % nc, nx, nc

    def mi(self, weights: np.ndarray | None = None) -> float:
        pxy = np.bincount(self.cell, weights=weights, minlength=len(self.xi))
        keep = pxy > 0
        pxy, xi, ci = pxy[keep], self.xi[keep], self.ci[keep]
        px = np.bincount(self.x, weights=weights, minlength=self.nx)
        pc = np.bincount(self.c, weights=weights, minlength=self.nc)
        total = pxy.sum()
        return float(max(0.0, (pxy / total * (np.log(pxy * total) - np.log(px[xi]) - np.log(pc[ci]))).sum()))


def _weighted_mi(x: np.ndarray, c: np.ndarray, weights: np.ndarray | None = None) -> float:
    """I(X; C) in nats of the code arrays ``x``, ``c`` (n,) with occurrence ``weights`` (n,)
    (a bootstrap's multiplicities; None: all 1), from the weighted contingency table."""
    return _Table(x, c).mi(weights)


def _weighted_entropy(x: np.ndarray, weights: np.ndarray) -> float:
    p = np.bincount(x, weights=weights)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


def bootstrap_mi(
    labels: np.ndarray, clusterings: list[np.ndarray], sentence: np.ndarray, *, replicates: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """MI over resamples of whole sentences, each restart's clusters held fixed.

    ``labels`` (n,), ``clusterings`` one (n,) cluster array per k-means restart,
    ``sentence`` (n,) the sentence of each occurrence. Replicate ``b`` draws with
    ``np.random.default_rng([seed, b])`` first the sentences (``integers(0, S, S)`` over
    the S distinct sentences in sorted order, with replacement: the contingency table is
    the sum of the drawn sentences' tables), then a permutation of the n labels: its
    shuffled-label control is the MI of the same resample of (permuted labels, first
    restart's clusters). Returns ``mi`` (replicates, restarts), ``shuffled`` and
    ``entropy`` (replicates,) H(X) of the resample. No k-means runs again: the
    interval is the sampling variability of the sentences given the clusters; the
    spread over restarts is the clustering's.
    """
    x = np.unique(np.asarray(labels), return_inverse=True)[1].ravel().astype(np.int64)
    cs = [np.unique(np.asarray(c), return_inverse=True)[1].ravel().astype(np.int64) for c in clusterings]
    group = np.unique(np.asarray(sentence), return_inverse=True)[1].ravel()
    n_groups = int(group.max()) + 1 if len(group) else 0
    out = {"mi": np.empty((replicates, len(cs))), "shuffled": np.empty(replicates), "entropy": np.empty(replicates)}
    tables = [_Table(x, c) for c in cs]  # the same cells in every replicate: built once
    for b in range(replicates):
        rng = np.random.default_rng([seed, b])
        w = np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)[group].astype(np.float64)
        out["mi"][b] = [t.mi(w) for t in tables]
        out["shuffled"][b] = _weighted_mi(x[rng.permutation(len(x))], cs[0], w)
        out["entropy"][b] = _weighted_entropy(x, w)
    return out


def centred_interval(values: np.ndarray, estimate: float, level: float = 0.95) -> list[float]:
    """``[low, high]``: the central ``level`` percentile interval of the bootstrap ``values``
    (replicates,) moved by ``estimate - mean(values)``, i.e. placed around the estimate.

    A resample repeats whole sentences, and repeated occurrences make the plug-in MI
    and its shuffled control larger than on the original sentences (the bias grows
    as distinct occurrences per cell fall): the replicates' spread measures the sampling
    variability, their location does not (measured: the plain percentile interval
    missed the estimate by 1.5-3.7 widths at 33-200 occurrences per cluster on synthetic
    data: ``benchmarks/bootstrap_checks.py``, ``docs/metrics.md``). The shift removes that
    bootstrap bias estimate, mean(values) - estimate (Efron & Tibshirani 1993, ch. 10)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]  # a resample of one type has H(X) = 0: no fraction
    if not len(values) or not np.isfinite(estimate):
        return [float("nan"), float("nan")]
    lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    shift = float(estimate) - float(values.mean())
    return [float(lo + shift), float(hi + shift)]


def nested_type_mi(
    labels: np.ndarray, clusterings: list[np.ndarray], *, types: list[int], seed: int = 0
) -> dict[str, list]:
    """MI of the same clusters on the occurrences of the ``t`` most frequent labels, per ``t``
    in ``types`` (ties by smaller label, as :func:`select_frequent`; ``t`` beyond the
    labels present takes them all): how much of the identity of each nested set of types
    the layer's partition keeps, with no new k-means. Per ``t``: ``n_types`` and ``n``
    (occurrences), ``mi`` (restart,), ``shuffled`` (first restart's clusters with the
    subset's labels permuted by ``default_rng([seed, t])``) and ``entropy`` (H of the subset)."""
    labels = np.asarray(labels)
    out: dict[str, list] = {k: [] for k in ("types", "n_types", "n", "mi", "shuffled", "entropy")}
    for t in types:
        keep = select_frequent(labels, n_types=int(t), min_count=1)
        sub = labels[keep]
        out["types"].append(int(t))
        out["n_types"].append(int(len(np.unique(sub))))
        out["n"].append(int(keep.sum()))
        out["mi"].append([mutual_information(sub, c[keep]) for c in clusterings])
        out["shuffled"].append(
            mutual_information(np.random.default_rng([seed, int(t)]).permutation(sub), clusterings[0][keep])
        )
        out["entropy"].append(entropy(sub))
    return out


@dataclass(frozen=True)
class LayerMI:
    """MI of one layer: per k-means restart (with its seed), the shuffled control and H(X);
    optionally the sentence-bootstrap intervals (:func:`bootstrap_mi`) and the nested
    type subsets (:func:`nested_type_mi`)."""

    mi: np.ndarray  # (restart,)
    shuffled: float
    entropy: float
    k: int
    n: int
    algorithm: str = "flat"  # the k-means that ran: "flat" or "two_level"
    backend: str = "faiss"  # what ran it: faiss, or sklearn where faiss is not installed (metrics/search.py)
    seeds: tuple[int, ...] = ()  # the k-means seed of each restart
    #: ``mi_mean``, ``mi_corrected``, ``mi_fraction``, ``mi_corrected_fraction`` -> [low, high]
    interval: dict[str, list[float]] | None = None
    replicates: int = 0
    by_types: dict[str, list] | None = None

    @property
    def mean(self) -> float:
        return float(np.mean(self.mi))

    @property
    def corrected(self) -> float:
        """Mean MI minus the shuffled-label control (the estimator's bias removed)."""
        return self.mean - self.shuffled

    @property
    def saturated(self) -> bool:
        return bool(self.mean >= SATURATION * self.entropy)

    def as_dict(self) -> dict:
        """JSON-serialisable form (what the metrics tasks return and cache)."""
        return {
            "mi": self.mi.tolist(),
            "shuffled": self.shuffled,
            "entropy": self.entropy,
            "k": self.k,
            "n": self.n,
            "saturated": self.saturated,
            "algorithm": self.algorithm,
            "backend": self.backend,
            "seeds": list(self.seeds),
            "interval": self.interval,
            "replicates": self.replicates,
            "by_types": self.by_types,
        }


def layer_mi(
    vectors: np.ndarray,
    labels: np.ndarray,
    *,
    k: int,
    restarts: int = 3,
    niter: int = 20,
    seed: int = 0,
    algorithm: str = "auto",
    sentence: np.ndarray | None = None,
    bootstrap: int = 0,
    level: float = 0.95,
    types: list[int] | tuple[int, ...] = (),
) -> LayerMI:
    """I(label; k-means cluster) for ``vectors`` (n, d) and ``labels`` (n,).

    ``k`` is capped at n // 10 (at least 10 points per cluster on average;
    the result's ``k`` is the one used; the cap is logged at DEBUG, as the MI analysis
    warns of it once per call). Restart ``r`` uses seed ``seed + r``. The shuffled
    control pairs the first restart's clusters with labels permuted by
    ``default_rng(seed)``. ``algorithm`` is one of :data:`ALGORITHMS`; the one that
    ran is in the result. With ``sentence`` (n,) and ``bootstrap`` replicates, the
    ``level`` intervals over resampled sentences (:func:`bootstrap_mi`, placed around
    the estimate by :func:`centred_interval`) of the mean MI, the control-subtracted MI
    and both as fractions of H(X) (per replicate: the mean over restarts, minus the
    replicate's control, over the replicate's H(X)).
    ``types``: also :func:`nested_type_mi` of the same clusters.
    """
    resolve_algorithm(algorithm, k=k)  # a bad name fails before any work
    n = len(labels)
    cap = max(2, n // 10)
    if k > cap:
        # DEBUG: this runs once per (model, layer, target); the MI analysis warns once per call, naming every cap
        logger.debug("MI: k = %d capped to %d for %d occurrences (>= 10 per cluster)", k, cap, n)
        k = cap
    chosen = resolve_algorithm(algorithm, k=k)
    logger.info("MI: %s k-means, k = %d, %d occurrences, %d restart(s)", chosen.replace("_", "-"), k, n, restarts)
    cluster = two_level_kmeans_labels if chosen == "two_level" else kmeans_labels
    labels = np.asarray(labels)
    seeds = tuple(seed + r for r in range(restarts))
    clusterings = [cluster(vectors, k=k, niter=niter, seed=s) for s in seeds]
    mi = np.array([mutual_information(labels, c) for c in clusterings])
    shuffled = mutual_information(np.random.default_rng(seed).permutation(labels), clusterings[0])
    interval = None
    if bootstrap and sentence is not None:
        boot = bootstrap_mi(labels, clusterings, sentence, replicates=bootstrap, seed=seed)
        h = entropy(labels)
        mean = boot["mi"].mean(axis=1)
        corrected = mean - boot["shuffled"]
        est = {"mi_mean": float(mi.mean()), "mi_corrected": float(mi.mean()) - shuffled}
        with np.errstate(divide="ignore", invalid="ignore"):  # H = 0: one type, no fraction (NaN)
            fraction, corrected_fraction = mean / boot["entropy"], corrected / boot["entropy"]
            est_fraction = (np.float64(est["mi_mean"]) / h, np.float64(est["mi_corrected"]) / h)
        interval = {
            "mi_mean": centred_interval(mean, est["mi_mean"], level),
            "mi_corrected": centred_interval(corrected, est["mi_corrected"], level),
            "mi_fraction": centred_interval(fraction, est_fraction[0], level),
            "mi_corrected_fraction": centred_interval(corrected_fraction, est_fraction[1], level),
        }
    by_types = nested_type_mi(labels, clusterings, types=list(types), seed=seed) if len(types) else None
    from evolution.metrics.search import backend

    return LayerMI(
        mi=mi,
        shuffled=shuffled,
        entropy=entropy(labels),
        k=k,
        n=n,
        algorithm=chosen,
        backend=backend(),
        seeds=seeds,
        interval=interval,
        replicates=bootstrap if interval else 0,
        by_types=by_types,
    )
