"""Mutual information between token labels and k-means clusters of one layer.

Voita, Sennrich & Titov (2019), section 4: discretise a layer's
representations with k-means and measure I(X; C) between the token label X
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


def kmeans_labels(
    vectors: np.ndarray, *, k: int, niter: int = 20, seed: int = 0, max_points_per_centroid: int = 256
) -> np.ndarray:
    """Cluster index (n,) of each row of ``vectors`` (n, d) by k-means (faiss, or scikit-learn
    without it: :mod:`evolution.metrics.search`)
    (Lloyd iterations on all cores; centroids trained on at most
    ``max_points_per_centroid * k`` sampled rows, faiss's default, then every
    row assigned to its nearest centroid)."""
    from evolution.metrics.search import kmeans

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, d = x.shape
    if k > n:
        raise ValueError(f"k = {k} clusters for {n} points; lower metrics.mi.k")
    return kmeans(x, k=k, niter=niter, seed=seed, max_points_per_centroid=max_points_per_centroid)


def two_level_kmeans_labels(
    vectors: np.ndarray,
    *,
    k: int,
    niter: int = 20,
    seed: int = 0,
    coarse: int | None = None,
    max_points_per_centroid: int = 256,
    refine: int = 1,
    nprobe: int = 4,
) -> np.ndarray:
    """Cluster index (n,) from two-level k-means: ``coarse`` (default 4 sqrt(k))
    clusters of all rows, then each coarse cluster split into a share of the
    ``k`` fine clusters proportional to its size (at least 1), with faiss
    k-means inside it. Every row is compared with ``coarse`` + (its cluster's
    share) centroids instead of ``k``: for k = 10,000 about 20x less work than
    flat k-means, the route to MI at paper scale (1M x 512) on 2 cores. The
    quality against plain Lloyd is measured in ``benchmarks/metrics.py``
    (defaults chosen there: 4 sqrt(k) cells, 1 refinement pass, 4 probed cells;
    decision 15 in ``docs/decisions.md``).

    The split respects the coarse boundaries, which costs MI; ``refine``
    Lloyd iterations over all ``k`` centroids follow, each row compared only
    with the fine centroids of its ``nprobe`` nearest cells (a cell = the fine
    clusters made inside one coarse cluster; distances as one BLAS product per
    cell: fast assignment).
    """
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(x)
    if k > n:
        raise ValueError(f"k = {k} clusters for {n} points; lower metrics.mi.k")
    c = coarse or max(2, int(round(4 * np.sqrt(k))))
    if c >= k:
        return kmeans_labels(x, k=k, niter=niter, seed=seed, max_points_per_centroid=max_points_per_centroid)
    top = kmeans_labels(x, k=c, niter=niter, seed=seed, max_points_per_centroid=max_points_per_centroid)
    sizes = np.bincount(top, minlength=c)
    # fine clusters per coarse cluster: proportional to size, >= 1, summing to k
    share = np.maximum(1, np.floor(sizes / n * k).astype(int)) * (sizes > 0)
    remainder = (sizes / n * k) - np.floor(sizes / n * k)
    for j in np.argsort(-remainder):
        if share.sum() >= k:
            break
        if sizes[j] > share[j]:
            share[j] += 1
    while share.sum() > k:  # the ">= 1" floor can overshoot; take back from the largest shares
        share[np.argmax(share)] -= 1
    labels = np.empty(n, dtype=np.int64)
    born = np.empty(k + c, dtype=np.int64)  # coarse cell in which each fine cluster was made
    offset = 0
    for j in range(c):
        rows = np.flatnonzero(top == j)
        kj = int(min(share[j], len(rows)))
        if kj <= 1:
            labels[rows] = offset
        else:
            labels[rows] = offset + kmeans_labels(
                x[rows], k=kj, niter=niter, seed=seed + j + 1, max_points_per_centroid=max_points_per_centroid
            )
        width = max(kj, 1 if len(rows) else 0)
        born[offset : offset + width] = j
        offset += width
    born = born[:offset]
    for _ in range(refine):
        labels = _refine_within_cells(x, labels, cells=born, nprobe=nprobe)
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def _refine_within_cells(x: np.ndarray, labels: np.ndarray, *, cells: np.ndarray, nprobe: int) -> np.ndarray:
    """One Lloyd step over all clusters with fast assignment: centroids of ``labels`` (n,),
    then each row compared only with the centroids of its ``nprobe`` nearest cells
    (``cells[label]`` = the cell of each cluster; a cell's centre = the mean of its rows).

    With the coarse cells of the two-level split, a row meets about (its cell's share
    of k) centroids, as in the split itself. Distances are one BLAS product per
    (cell, block of rows). Returns the new labels (n,); an emptied cluster stays unused.
    """
    import scipy.sparse

    from evolution.metrics.search import nearest

    n = len(x)
    counts = np.bincount(labels, minlength=len(cells)).astype(np.float64)
    onehot = scipy.sparse.csr_matrix((np.ones(n, np.float32), (labels, np.arange(n))), shape=(len(cells), n))
    sums = np.asarray(onehot @ x, dtype=np.float64)  # (clusters, d)
    used = counts > 0
    centroids = (sums[used] / counts[used, None]).astype(np.float32)
    ids = np.flatnonzero(used)
    _, cell = np.unique(cells[used], return_inverse=True)  # (used clusters,) index of a non-empty cell
    n_cells = int(cell.max()) + 1
    cell_sums = np.zeros((n_cells, x.shape[1]))
    np.add.at(cell_sums, cell, sums[used])
    cell_counts = np.bincount(cell, weights=counts[used], minlength=n_cells)
    members = [np.flatnonzero(cell == i) for i in range(n_cells)]  # the used clusters of each cell
    _, near = nearest((cell_sums / cell_counts[:, None]).astype(np.float32), x, min(nprobe, n_cells))  # (n, nprobe)
    best = np.full(n, np.inf, dtype=np.float32)
    new = labels.copy()
    order = np.argsort(near, axis=0, kind="stable")  # rows grouped by probed cell, per probe column
    for col in range(near.shape[1]):
        bounds = np.searchsorted(near[order[:, col], col], np.arange(n_cells + 1))
        for i, fine in enumerate(members):
            rows = order[bounds[i] : bounds[i + 1], col]
            if not len(rows):
                continue
            dist, m = nearest(centroids[fine], x[rows], 1)  # BLAS distances with a fused argmin, in blocks
            dist, m = dist[:, 0], m[:, 0]
            better = dist < best[rows]
            best[rows[better]] = dist[better]
            new[rows[better]] = ids[fine[m[better]]]
    return new


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


#: ``algorithm="auto"`` switches to two-level k-means from this many clusters on
TWO_LEVEL_FROM_K = 2000

#: Values of ``algorithm`` (config key ``metrics.mi.algorithm``).
ALGORITHMS = ("auto", "flat", "two_level")


def resolve_algorithm(algorithm: str, *, k: int) -> str:
    """``"flat"`` or ``"two_level"`` for the requested ``algorithm`` at ``k`` clusters
    (``"auto"``: two-level from :data:`TWO_LEVEL_FROM_K` clusters on)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"k-means algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
            f"got {algorithm!r} (config key metrics.mi.algorithm)"
        )
    if algorithm == "auto":
        return "two_level" if k >= TWO_LEVEL_FROM_K else "flat"
    return algorithm


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
    the cap is logged). Restart ``r`` uses seed ``seed + r``. The shuffled
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
        logger.info("MI: k = %d capped to %d for %d occurrences (>= 10 per cluster)", k, cap, n)
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
