"""Nearest neighbours and k-means without faiss (:mod:`evolution.metrics.search`): the NumPy
neighbours equal scikit-learn's brute force, and the scikit-learn k-means finds well-separated
clusters exactly, so every metric runs where faiss is not installed."""

from __future__ import annotations

import numpy as np
import pytest

import evolution.metrics.search as search


@pytest.fixture()
def no_faiss(monkeypatch):
    monkeypatch.setattr(search, "faiss_or_none", lambda: None)


def test_numpy_neighbours_equal_sklearns_brute_force(no_faiss):
    from sklearn.neighbors import NearestNeighbors

    rng = np.random.default_rng(3)
    base, queries = rng.normal(size=(300, 7)).astype(np.float32), rng.normal(size=(50, 7)).astype(np.float32)
    dist, idx = search.nearest(base, queries, 6, block=17)
    ref_d, ref_i = NearestNeighbors(n_neighbors=6, algorithm="brute").fit(base).kneighbors(queries)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(np.sqrt(dist), ref_d, rtol=1e-4, atol=1e-5)
    assert search.backend() == "sklearn"


def test_the_same_neighbours_with_and_without_faiss(monkeypatch):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    with_faiss = search.nearest(x, x, 4)[1]
    monkeypatch.setattr(search, "faiss_or_none", lambda: None)
    np.testing.assert_array_equal(search.nearest(x, x, 4)[1], with_faiss)


def test_sklearn_kmeans_recovers_separated_clusters(no_faiss):
    rng = np.random.default_rng(5)
    centres = np.eye(4, 6) * 50
    truth = rng.integers(0, 4, 400)
    x = (centres[truth] + rng.normal(size=(400, 6))).astype(np.float32)
    labels = search.kmeans(x, k=4, niter=20, seed=1, max_points_per_centroid=50)  # trained on a 200-row sample
    # one cluster per true group: the partition equals the truth up to renaming
    assert len(set(zip(truth.tolist(), labels.tolist(), strict=True))) == 4


@pytest.mark.parametrize("with_faiss", [True, False])
def test_kmeans_plusplus_seeds_find_small_clusters(with_faiss, monkeypatch):
    """Twelve well-separated clusters of very unequal sizes (8 to 800 rows): Lloyd from k-means++
    seeds finds each one, for every seed, as scikit-learn's Lloyd does; from centroids drawn
    uniformly among the rows (faiss's own seeding, the k-means before 2026-11-26) the small
    clusters share a centroid with a large one, and the partition is wrong for most seeds."""
    if with_faiss:
        faiss = pytest.importorskip("faiss")
    else:
        monkeypatch.setattr(search, "faiss_or_none", lambda: None)
    rng = np.random.default_rng(7)
    sizes = [800, 600, 400, 300, 200, 120, 60, 40, 20, 12, 10, 8]
    centres = rng.normal(size=(12, 8)) * 40
    truth = np.repeat(np.arange(12), sizes)
    x = (centres[truth] + rng.normal(size=(len(truth), 8))).astype(np.float32)
    for seed in range(5):
        labels = search.kmeans(x, k=12, niter=20, seed=seed)
        assert len(set(zip(truth.tolist(), labels.tolist(), strict=True))) == 12, seed  # the truth up to renaming
    np.testing.assert_array_equal(search.kmeans(x, k=12, niter=20, seed=3), search.kmeans(x, k=12, niter=20, seed=3))
    if with_faiss:
        wrong = 0
        for seed in range(5):
            km = faiss.Kmeans(8, 12, niter=20, seed=seed, min_points_per_centroid=1)
            km.train(x)
            labels = km.index.search(x, 1)[1].ravel()
            wrong += len(set(zip(truth.tolist(), labels.tolist(), strict=True))) != 12
        assert wrong >= 3


@pytest.mark.parametrize("with_faiss", [True, False])
def test_each_restart_seeds_k_means_plus_plus_from_its_own_seed(with_faiss, monkeypatch):
    """MI's k-means restarts differ only by their seed, so the k-means++ seeds must come from it.
    kmeans_plusplus_init equals scikit-learn's kmeans_plusplus with random_state = the seed on the
    rows default_rng(seed) samples (max(INIT_MIN_ROWS, INIT_ROWS_PER_CLUSTER x k) of them); and on
    uniform noise, where Lloyd's iterations have many local optima, restarts from seeds 0..5 end in
    more than one partition (restarts that all started from one seed would end in one)."""
    from sklearn.cluster import kmeans_plusplus

    if with_faiss:
        pytest.importorskip("faiss")
    else:
        monkeypatch.setattr(search, "faiss_or_none", lambda: None)
    rng = np.random.default_rng(2)
    x = rng.random((3000, 3)).astype(np.float32)
    m = max(search.INIT_MIN_ROWS, search.INIT_ROWS_PER_CLUSTER * 5)
    assert m < len(x)  # k-means++ runs on a sample
    for seed in (1, 2, 3):
        sample = x[np.sort(np.random.default_rng(seed).choice(len(x), m, replace=False))]
        want, _ = kmeans_plusplus(sample, 5, random_state=seed)
        got = search.kmeans_plusplus_init(x, k=5, seed=seed)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}: not scikit-learn's k-means++ seeds")

    def partition(labels: np.ndarray) -> tuple[int, ...]:  # clusters renamed by first appearance
        first: dict[int, int] = {}
        return tuple(first.setdefault(int(v), len(first)) for v in labels)

    small = x[:300]  # below every sample size: only the k-means++ seeds differ between restarts
    ends = {partition(search.kmeans(small, k=8, niter=20, seed=seed)) for seed in range(6)}
    assert len(ends) > 1, "six restarts with different seeds ended in one partition: the seed is not used"
