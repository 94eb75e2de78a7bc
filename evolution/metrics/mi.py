"""Mutual information between token labels and k-means clusters of one layer.

Voita, Sennrich & Titov (2019), section 4: discretise a layer's
representations with k-means and measure I(X; C) between the token label X
(the input token, or the output label) and the cluster C, in nats, from the
contingency table. The upper bound is H(X), reported beside it; a shuffled
pairing of labels and clusters measures the estimator's bias (METHODS.md 2).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["entropy", "mutual_information", "select_frequent", "kmeans_labels", "LayerMI", "layer_mi"]

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


def kmeans_labels(vectors: np.ndarray, *, k: int, niter: int = 20, seed: int = 0,
                  max_points_per_centroid: int = 256) -> np.ndarray:
    """Cluster index (n,) of each row of ``vectors`` (n, d) by faiss k-means
    (Lloyd iterations on all cores; centroids trained on at most
    ``max_points_per_centroid * k`` sampled rows, faiss's default, then every
    row assigned to its nearest centroid)."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, d = x.shape
    if k > n:
        raise ValueError(f"k = {k} clusters for {n} points; lower metrics.mi.k")
    km = faiss.Kmeans(d, k, niter=niter, seed=seed, verbose=False, spherical=False,
                      max_points_per_centroid=max_points_per_centroid, min_points_per_centroid=1)
    km.train(x)
    _, idx = km.index.search(x, 1)
    return idx.ravel().astype(np.int64)


def two_level_kmeans_labels(vectors: np.ndarray, *, k: int, niter: int = 20, seed: int = 0,
                            coarse: int | None = None, max_points_per_centroid: int = 256,
                            refine: int = 1, nprobe: int = 4) -> np.ndarray:
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
            labels[rows] = offset + kmeans_labels(x[rows], k=kj, niter=niter, seed=seed + j + 1,
                                                  max_points_per_centroid=max_points_per_centroid)
        width = max(kj, 1 if len(rows) else 0)
        born[offset:offset + width] = j
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
    import faiss
    import scipy.sparse

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
    probe = faiss.IndexFlatL2(x.shape[1])
    probe.add((cell_sums / cell_counts[:, None]).astype(np.float32))
    _, near = probe.search(x, min(nprobe, n_cells))  # (n, nprobe) cell indices
    best = np.full(n, np.inf, dtype=np.float32)
    new = labels.copy()
    order = np.argsort(near, axis=0, kind="stable")  # rows grouped by probed cell, per probe column
    for col in range(near.shape[1]):
        bounds = np.searchsorted(near[order[:, col], col], np.arange(n_cells + 1))
        for i, fine in enumerate(members):
            rows = order[bounds[i]:bounds[i + 1], col]
            if not len(rows):
                continue
            index = faiss.IndexFlatL2(x.shape[1])  # BLAS distances with a fused argmin, in blocks
            index.add(centroids[fine])
            dist, m = index.search(x[rows], 1)
            dist, m = dist[:, 0], m[:, 0]
            better = dist < best[rows]
            best[rows[better]] = dist[better]
            new[rows[better]] = ids[fine[m[better]]]
    return new


@dataclass(frozen=True)
class LayerMI:
    """MI of one layer: per k-means restart, the shuffled control and H(X)."""

    mi: np.ndarray  # (restart,)
    shuffled: float
    entropy: float
    k: int
    n: int
    algorithm: str = "flat"  # the k-means that ran: "flat" or "two_level"

    @property
    def saturated(self) -> bool:
        return bool(np.mean(self.mi) >= SATURATION * self.entropy)

    def as_dict(self) -> dict:
        """JSON-serialisable form (what the metrics tasks return and cache)."""
        return {"mi": self.mi.tolist(), "shuffled": self.shuffled, "entropy": self.entropy, "k": self.k,
                "n": self.n, "saturated": self.saturated, "algorithm": self.algorithm}


#: ``algorithm="auto"`` switches to two-level k-means from this many clusters on
TWO_LEVEL_FROM_K = 2000

#: Values of ``algorithm`` (config key ``metrics.mi.algorithm``).
ALGORITHMS = ("auto", "flat", "two_level")


def resolve_algorithm(algorithm: str, *, k: int) -> str:
    """``"flat"`` or ``"two_level"`` for the requested ``algorithm`` at ``k`` clusters
    (``"auto"``: two-level from :data:`TWO_LEVEL_FROM_K` clusters on)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"k-means algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
                         f"got {algorithm!r} (config key metrics.mi.algorithm)")
    if algorithm == "auto":
        return "two_level" if k >= TWO_LEVEL_FROM_K else "flat"
    return algorithm


def layer_mi(vectors: np.ndarray, labels: np.ndarray, *, k: int, restarts: int = 3, niter: int = 20,
             seed: int = 0, algorithm: str = "auto") -> LayerMI:
    """I(label; k-means cluster) for ``vectors`` (n, d) and ``labels`` (n,).

    ``k`` is capped at n // 10 (at least 10 points per cluster on average;
    the cap is logged). Restart ``r`` uses seed ``seed + r``. The shuffled
    control pairs the first restart's clusters with permuted labels.
    ``algorithm`` is one of :data:`ALGORITHMS`; the one that ran is in the result.
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
    mi, first = [], None
    for r in range(restarts):
        clusters = cluster(vectors, k=k, niter=niter, seed=seed + r)
        first = clusters if first is None else first
        mi.append(mutual_information(labels, clusters))
    rng = np.random.default_rng(seed)
    shuffled = mutual_information(rng.permutation(np.asarray(labels)), first)
    return LayerMI(mi=np.array(mi), shuffled=shuffled, entropy=entropy(labels), k=k, n=n, algorithm=chosen)
