"""k-means clusterings of one layer's vectors, which the MI (:mod:`evolution.metrics.mi`; Voita,
Sennrich & Titov 2019, section 4) discretises the representations with: flat k-means
(:func:`kmeans_labels`: faiss, or scikit-learn without it, :mod:`evolution.metrics.search`), and
two-level k-means for k in the thousands (:func:`two_level_kmeans_labels`; decision 15 in
``docs/decisions.md``); :func:`resolve_algorithm` says which one runs (``metrics.mi.algorithm``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["kmeans_labels", "two_level_kmeans_labels", "resolve_algorithm", "ALGORITHMS", "TWO_LEVEL_FROM_K"]


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
