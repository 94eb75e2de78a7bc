"""Nearest-neighbour search and k-means, with faiss where it is installed (``pip install
'evolution[fast]'``; ``make setup`` does) and scikit-learn / NumPy otherwise.

faiss is the fast route (benchmarks/metrics.py: its exact kNN gives sklearn's neighbours
3.3x faster, its Lloyd iterations run at the machine's float32 GEMM rate). Without it every
metric still runs, on the same definitions: exact neighbours are the same (up to ties);
k-means is Lloyd's algorithm from the same k-means++ seeds, on a subsample of
``max_points_per_centroid * k`` rows, then every row assigned to its nearest centroid, but
its sampling differs from faiss's, so clusters (and MI) differ within the restart spread.
:func:`backend` says which one ran; the MI group records it.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np

__all__ = ["backend", "faiss_or_none", "nearest", "kmeans", "kmeans_plusplus_init", "INIT_ROWS_PER_CLUSTER"]

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def faiss_or_none():
    """The faiss module, or None when it is not installed (logged once)."""
    try:
        import faiss
    except ImportError:
        logger.info(
            "faiss is not installed: nearest neighbours and k-means run on scikit-learn / NumPy "
            "(pip install faiss-cpu for the fast route)"
        )
        return None
    return faiss


def backend() -> str:
    return "faiss" if faiss_or_none() is not None else "sklearn"


def nearest(base: np.ndarray, queries: np.ndarray, k: int, *, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Squared Euclidean distances and indices (n_queries, k) of each query's ``k`` nearest rows
    of ``base`` (exact; ascending distance, ties by smaller index)."""
    from evolution.metrics import backend

    base = np.ascontiguousarray(base, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if backend.on_torch():
        return backend.nearest(base, queries, k)
    faiss = faiss_or_none()
    if faiss is not None:
        index = faiss.IndexFlatL2(base.shape[1])
        index.add(base)
        return index.search(queries, k)
    b2 = (base.astype(np.float64) ** 2).sum(1)
    dist = np.empty((len(queries), k), dtype=np.float32)
    idx = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), block):
        q = queries[s : s + block].astype(np.float64)
        d = (q**2).sum(1)[:, None] - 2 * q @ base.T.astype(np.float64) + b2[None, :]
        part = (
            np.argpartition(d, min(k, d.shape[1] - 1), axis=1)[:, :k]
            if k < d.shape[1]
            else np.tile(np.arange(d.shape[1]), (len(q), 1))
        )
        dd = np.take_along_axis(d, part, 1)
        order = np.lexsort((part, dd), axis=1)
        idx[s : s + block] = np.take_along_axis(part, order, 1)
        dist[s : s + block] = np.maximum(np.take_along_axis(dd, order, 1), 0)
    return dist, idx


#: k-means++ seeds its centroids on a sample of this many rows per cluster (at least
#: :data:`INIT_MIN_ROWS`): Lloyd's iterations then run on the training rows from them.
INIT_ROWS_PER_CLUSTER = 8
INIT_MIN_ROWS = 2000


def kmeans_plusplus_init(x: np.ndarray, *, k: int, seed: int) -> np.ndarray:
    """(k, d) float32 initial centroids: scikit-learn's greedy k-means++ (Arthur & Vassilvitskii
    2007; 2 + log k candidates per centroid) on ``INIT_ROWS_PER_CLUSTER * k`` rows (at least
    ``INIT_MIN_ROWS``) drawn by ``default_rng(seed)``. Measured on the default run's MI
    occurrences (``benchmarks/kmeans.py``; mean MI over 3 restarts), faiss's random initial
    centroids left Lloyd's iterations up to 2.78% below scikit-learn's Lloyd in MI; from these
    seeds they are within 1% on every layer, and the seeding costs about one Lloyd pass over all rows."""
    from sklearn.cluster import kmeans_plusplus

    n = len(x)
    m = min(n, max(INIT_MIN_ROWS, INIT_ROWS_PER_CLUSTER * k))
    rng = np.random.default_rng(seed)
    sample = x if m == n else x[np.sort(rng.choice(n, m, replace=False))]
    centres, _ = kmeans_plusplus(np.asarray(sample, dtype=np.float32), k, random_state=seed)
    return np.ascontiguousarray(centres, dtype=np.float32)


def kmeans(x: np.ndarray, *, k: int, niter: int, seed: int, max_points_per_centroid: int = 256) -> np.ndarray:
    """Cluster index (n,) of each row: Lloyd's k-means (faiss, or scikit-learn) from k-means++
    seeds (:func:`kmeans_plusplus_init`), trained on at most ``max_points_per_centroid * k``
    sampled rows, then every row assigned to its nearest centroid."""
    from evolution.metrics import backend

    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    init = kmeans_plusplus_init(x, k=k, seed=seed)
    if backend.on_torch():  # Lloyd's iterations on the device, from the same seeds and training sample
        rng = np.random.default_rng(seed)
        sample = (
            x
            if n <= max_points_per_centroid * k
            else x[np.sort(rng.choice(n, max_points_per_centroid * k, replace=False))]
        )
        centroids = backend.lloyd(sample, init, niter=niter, seed=seed)
        return backend.nearest(centroids, x, 1)[1].ravel()
    faiss = faiss_or_none()
    if faiss is not None:
        km = faiss.Kmeans(
            d,
            k,
            niter=niter,
            seed=seed,
            verbose=False,
            spherical=False,
            max_points_per_centroid=max_points_per_centroid,
            min_points_per_centroid=1,
        )
        km.train(x, init_centroids=init)
        _, idx = km.index.search(x, 1)
        return idx.ravel().astype(np.int64)
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    sample = x if n <= max_points_per_centroid * k else x[rng.choice(n, max_points_per_centroid * k, replace=False)]
    km = KMeans(n_clusters=k, init=init, n_init=1, max_iter=niter, random_state=seed, algorithm="lloyd")
    km.fit(sample)
    _, idx = nearest(km.cluster_centers_.astype(np.float32), x, 1)
    return idx.ravel().astype(np.int64)
