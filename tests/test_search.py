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
    assert len(set(zip(truth.tolist(), labels.tolist()))) == 4
