"""Metrics against reference implementations and known answers."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import mutual_info_score
from sklearn.neighbors import NearestNeighbors

from evolution.metrics.mi import entropy, layer_mi, mutual_information, select_frequent
from evolution.metrics.neighbors import knn, same_label_rate, within_type_measures
from evolution.metrics.similarity import View, cka, cka_distance, pwcca, pwcca_distance
from evolution.metrics.tsne import tsne_layout


def test_mi_equals_sklearn():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 40, 4000)
    c = (x * 7 + rng.integers(0, 5, 4000)) % 90
    assert mutual_information(x, c) == pytest.approx(mutual_info_score(x, c), abs=1e-12)
    assert mutual_information(x, x) == pytest.approx(entropy(x), abs=1e-12)  # I(X;X) = H(X)


def test_mi_recovers_known_value_on_clustered_data():
    # 8 equiprobable tokens, each a tight, well separated blob: clusters = tokens, MI = H(X) = ln 8.
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(8, 16)) * 20
    labels = np.repeat(np.arange(8), 200)
    x = centres[labels] + rng.normal(size=(len(labels), 16)) * 0.1
    r = layer_mi(x, labels, k=8, restarts=2, seed=0)
    assert r.entropy == pytest.approx(np.log(8))
    assert np.mean(r.mi) > 0.95 * np.log(8)
    assert r.shuffled < 0.05  # the shuffled control is near zero
    # a layer that carries no token information: MI near the shuffled control
    noise = layer_mi(rng.normal(size=x.shape), labels, k=8, restarts=2, seed=0)
    assert np.mean(noise.mi) < 0.05


def test_mi_caps_k_and_flags_saturation():
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(20), 10)
    r = layer_mi(rng.normal(size=(200, 4)), labels, k=1000, restarts=1)
    assert r.k == 20  # n // 10
    # k large for the data: 5 well separated tokens, 20 clusters -> every cluster is pure, MI = H(X)
    few = np.repeat(np.arange(5), 40)
    sat = layer_mi(np.eye(5)[few] * 100 + rng.normal(size=(200, 5)), few, k=20, restarts=1)
    assert sat.saturated and np.mean(sat.mi) == pytest.approx(np.log(5))


def test_select_frequent():
    labels = np.array([5] * 6 + [3] * 6 + [9] * 4 + [1] * 2)
    assert set(labels[select_frequent(labels, n_types=2, min_count=3)]) == {3, 5}  # tie 3/5 by label
    assert set(labels[select_frequent(labels, n_types=10, min_count=3)]) == {3, 5, 9}


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_knn_equals_sklearn_brute(metric):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(600, 12)).astype(np.float32)
    ours = knn(x, k=7, metric=metric)
    ref = (
        NearestNeighbors(n_neighbors=8, algorithm="brute", metric=metric)
        .fit(x)
        .kneighbors(x, return_distance=False)[:, 1:]
    )
    # each row's neighbours in ascending index order (exact_knn); sklearn's by distance. Cosine: ours is
    # the Euclidean distance of the float32 unit rows, sklearn's float64, which may swap near-ties
    assert (np.sort(ours, axis=1) == np.sort(ref, axis=1)).mean() > (0.999 if metric == "cosine" else 1 - 1e-9)
    labels = rng.integers(0, 5, 600)
    assert same_label_rate(ours, labels) == pytest.approx(same_label_rate(ref, labels), abs=1e-3)


def test_knn_with_duplicate_points_excludes_exactly_one_self():
    x = np.zeros((5, 3), dtype=np.float32)
    nb = knn(x, k=3)
    assert nb.shape == (5, 3)
    assert all(i not in row for i, row in enumerate(nb))


def test_same_label_rate_known_answer():
    # two far-apart groups: every neighbour is in the query's group
    x = np.concatenate([np.zeros((10, 2)), np.ones((10, 2)) * 100]) + np.random.default_rng(4).normal(size=(20, 2))
    labels = np.repeat([0, 1], 10)
    assert same_label_rate(knn(x, k=5), labels) == 1.0
    # half the group has another label: expected rate = (4/9 + 5/9) / 2 mix, computed by hand
    mixed = np.tile([0, 1], 10)
    rate = same_label_rate(knn(x, k=9), mixed)
    assert rate == pytest.approx(4 / 9)  # each query sees its 9 group mates: 4 share its label


def test_within_type_measures_position_and_context():
    # type 0: representation = position, so neighbours are the closest positions
    pos = np.arange(10)
    x = pos[:, None].astype(np.float32)
    types = np.zeros(10, dtype=int)
    left = np.where(pos % 2 == 0, 7, 8)
    out = within_type_measures(x, types=types, position=pos, annotations={"left": left}, k=2)
    # ends have neighbours at distance 1 and 2, inner points at 1 and 1
    assert out["position_distance"] == pytest.approx((2 * 1.5 + 8 * 1.0) / 10)
    # neighbours at +-1 have the other parity, at +2 the same: ends 1/2 same, inner 0
    assert out["same_left"] == pytest.approx((2 * 0.5) / 10)


def _views(seed=0, n=1500, d=12):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return x, q, rng


def test_similarity_identity_rotation_scaling_symmetry():
    x, q, rng = _views()
    a = View(x)
    b = View(2.5 * x @ q + 3.0)  # rotated, scaled, shifted
    for f in (pwcca_distance, cka_distance):
        assert f(a, a) == pytest.approx(0, abs=1e-10)
        assert f(a, b) == pytest.approx(0, abs=1e-10)
    c = View(rng.normal(size=x.shape) + 0.3 * x)
    assert cka(a, c) == pytest.approx(cka(c, a), abs=1e-12)  # CKA is symmetric
    assert 0 < pwcca(a, c) < 1


def test_cka_and_pwcca_small_case_by_hand():
    # a = [e1 | e2] spread, b keeps dimension 1 and replaces dimension 2 by an orthogonal signal.
    s1 = np.array([1.0, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1])
    s2 = np.tile([1.0, 1, -1, -1], 5)
    s3 = np.tile([1.0, 1, 1, 1, -1, -1, -1, -1], 3)[:20]
    s3 = s3 - s3.mean()
    s3 -= s3 @ s1 / (s1 @ s1) * s1 + s3 @ s2 / (s2 @ s2) * s2  # orthogonal to s1, s2
    a = View(np.stack([s1, 2 * s2], axis=1), min_ratio=1)
    b = View(np.stack([s1, s3], axis=1), min_ratio=1)
    # CCA: correlations 1 (s1) and 0; canonical variate weights from a: |<s1,s1>| and |<s2, 2 s2>|
    n1, n2 = s1 @ s1, 2 * (s2 @ s2)
    w1, w2 = n1 / np.sqrt(n1), n2 / np.sqrt(s2 @ s2)
    assert pwcca(a, b) == pytest.approx(w1 / (w1 + w2))
    # CKA: ||B^T A||^2 = (s1.s1)^2; ||A^T A|| = sqrt((s1.s1)^2 + (4 s2.s2)^2); ||B^T B|| likewise
    expected = (s1 @ s1) ** 2 / (np.hypot(s1 @ s1, 4 * (s2 @ s2)) * np.hypot(s1 @ s1, s3 @ s3))
    assert cka(a, b) == pytest.approx(expected)


def reference_pwcca(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """PWCCA by the covariance route (Morcos et al. 2018), independent of the SVD-of-bases code:
    whiten with Sxx^-1/2 and Syy^-1/2 (eigendecompositions, on their numerical range), canonical correlations =
    singular values of Sxx^-1/2 Sxy Syy^-1/2, canonical variates of x = x Sxx^-1/2 u (unit
    norm), weights alpha_i = sum_j |<h_i, x_j>| over x's centred columns. Returns (PWCCA, rho, alpha)."""
    x = x - x.mean(0)
    y = y - y.mean(0)

    def whitening(c):  # (d, r): c^-1/2 on its numerical range (layer-normed states lose a direction)
        w, v = np.linalg.eigh(c)
        keep = w > 1e-12 * w.max()
        return v[:, keep] / np.sqrt(w[keep])

    wx, wy = whitening(x.T @ x), whitening(y.T @ y)
    u, rho, _ = np.linalg.svd(wx.T @ (x.T @ y) @ wy)
    m = min(wx.shape[1], wy.shape[1])
    h = x @ wx @ u[:, :m]
    h /= np.linalg.norm(h, axis=0)
    alpha = np.abs(h.T @ x).sum(axis=1)
    return float((alpha * rho[:m]).sum() / alpha.sum()), rho[:m], alpha


def reference_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA in its kernel form (Kornblith et al. 2019): HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))
    with K = x x^T, L = y y^T and the centring matrix H = I - 11^T / n."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l_ = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h
    return float((k * l_).sum() / np.sqrt((k * k).sum() * (l_ * l_).sum()))


def test_pwcca_and_cka_against_independent_implementations_with_intermediate_correlations():
    """Views sharing signals with correlations spread over (0, 1) and unequal scales: PWCCA equals
    the covariance-route reference and CKA the kernel form. With every canonical correlation
    0 or 1, replacing rho by rho^2 or dropping the weights would go unnoticed; here it cannot."""
    rng = np.random.default_rng(11)
    n = 400
    z = rng.normal(size=(n, 4))
    x = np.column_stack([z, rng.normal(size=n)]) @ np.diag([3.0, 1.0, 0.5, 2.0, 1.5])
    mix = rng.normal(size=(5, 4))
    y = (
        np.column_stack(
            [
                z[:, 0] + 0.3 * rng.normal(size=n),
                z[:, 1] + 1.0 * rng.normal(size=n),
                z[:, 2] + 2.5 * rng.normal(size=n),
                rng.normal(size=n),
            ]
        )
        @ mix[:4]
    )
    expected, rho, alpha = reference_pwcca(x, y)
    assert ((rho > 0.2) & (rho < 0.97)).sum() >= 2  # intermediate correlations
    a, b = View(x, min_ratio=1), View(y, min_ratio=1)
    assert pwcca(a, b) == pytest.approx(expected, rel=1e-9)
    assert pwcca(b, a) == pytest.approx(reference_pwcca(y, x)[0], rel=1e-9)
    # the wrong variants this catches differ by more than the tolerance: unweighted mean, rho^2
    assert abs(expected - rho.mean()) > 0.01 and abs(expected - (alpha * rho**2).sum() / alpha.sum()) > 0.01
    assert cka(a, b) == pytest.approx(reference_cka(x, y), rel=1e-9)
    assert 0.05 < cka(a, b) < 0.95


def plain_svd_pwcca(x: np.ndarray, y: np.ndarray, *, epsilon: float = 1e-6) -> tuple[float, int, float]:
    """PWCCA(x, y) by its definition on each view's SVD (Morcos et al. 2018, after SVCCA's first
    step, Raghu et al. 2017), in float64 throughout: centre; each view's basis its left singular
    vectors (LAPACK's QR-iteration SVD of the rows, scipy's gesvd: neither numpy's gesdd nor the
    library's Gram route) whose singular value is above ``epsilon`` x the largest (the library's
    cut); the canonical correlations rho_i the singular values of Qx^T Qy, x's canonical variates
    h_i = Qx u_i, weighted by alpha_i = sum_j |<h_i, x_j>| over x's centred columns. Returns
    (PWCCA, rank of x, the smallest |log(s / (epsilon s_max))| of either view: how far its
    nearest singular value is from the cut)."""
    from scipy.linalg import svd

    def basis(z: np.ndarray) -> tuple[np.ndarray, float]:
        z = np.asarray(z, dtype=np.float64)
        u, s, _ = svd(z - z.mean(axis=0), full_matrices=False, lapack_driver="gesvd")
        rel = s[s > 0] / s[0]
        return u[:, s > epsilon * s[0]], float(np.min(np.abs(np.log(rel / epsilon))))

    x = np.asarray(x, dtype=np.float64)
    (qx, gap_x), (qy, gap_y) = basis(x), basis(y)
    u, rho, _ = np.linalg.svd(qx.T @ qy)
    m = min(qx.shape[1], qy.shape[1])
    alpha = np.abs((qx @ u[:, :m]).T @ (x - x.mean(axis=0))).sum(axis=1)
    return float((alpha * np.clip(rho[:m], 0, 1)).sum() / alpha.sum()), qx.shape[1], min(gap_x, gap_y)


def _rank_deficient_views(seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pairs (x, y) of n >= 4 d rows (the Gram route of ``thin_svd``) where x is rank-deficient:
    layer 0 of a frequency bin (a few types' embeddings plus a few positions', repeated, float32:
    rank <= types + positions - 1), few distinct rows at unequal scales, low rank plus noise
    below, near (but not within 5% of) and above the cut (1e-6 of the largest singular value)
    and below GRAM_SHARE, and a spectrum spread from 1 to 1e-9 across both; y a noisy nonlinear
    function of x (full rank) or x's repeated rows permuted (rank-deficient too)."""
    rng = np.random.default_rng(seed)
    out = {}
    d, n = 32, 1500
    types, positions = rng.normal(size=(7, d)) * 4, rng.normal(size=(12, d)) * 0.3
    x = (types[rng.integers(0, 7, n)] + positions[rng.integers(0, 12, n)]).astype(np.float32)
    out["layer 0 of a bin"] = x, np.tanh(x @ rng.normal(size=(d, d)) / 8) + 0.05 * rng.normal(size=(n, d))
    proto = rng.normal(size=(30, d)) * np.logspace(0, -4, d)
    x = proto[rng.integers(0, 30, n)] * 1e3 + 50.0
    out["30 distinct rows"] = x, x[:, rng.permutation(d)] + rng.normal(size=(n, d)) * 1e-2
    signal = rng.normal(size=(n, 6)) @ rng.normal(size=(6, d))
    for level in (1e-9, 3e-7, 2e-5, 1e-4):
        x = signal + level * rng.normal(size=(n, d))
        out[f"rank 6 + noise {level:g}"] = (
            x,
            np.tanh(signal @ rng.normal(size=(d, d)) / 4) + 0.3 * rng.normal(size=(n, d)),
        )
    s = np.logspace(0, -9, d)
    s = s[np.abs(np.log10(s) + 6) > 0.1]  # none within 25% of the cut
    q, _ = np.linalg.qr(rng.normal(size=(n, len(s))))
    w, _ = np.linalg.qr(rng.normal(size=(d, d)))
    x = (q * s) @ w[: len(s)] * 1e-2 - 3.0
    out["spectrum 1 .. 1e-9"] = x, np.tanh(x @ rng.normal(size=(d, d)) * 50) + 0.2 * rng.normal(size=(n, d))
    # directions just above GRAM_SHARE (from the Gram) and near the cut (from the SVD of the rest), which
    # y's canonical directions mix: a basis whose two parts are not made orthogonal is 2e-10 to 6e-9 off
    s = np.concatenate([[1.0, 0.5, 0.2], 10 ** rng.uniform(-2.995, -2.95, 12), 10 ** rng.uniform(-5.9, -5.5, d - 15)])
    q, _ = np.linalg.qr(rng.normal(size=(n, d)))
    x = (q * s) @ w
    mixed = np.column_stack([q[:, 3:15] + q[:, 15:27], rng.normal(size=(n, d - 12))])
    out["beside GRAM_SHARE and the cut"] = x, mixed @ rng.normal(size=(d, d)) + 0.01 * rng.normal(size=(n, d))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_pwcca_of_rank_deficient_views_equals_the_plain_svd_definition(seed):
    """``thin_svd``'s docstring: PWCCA within 1e-10 of the definition on a float64 SVD of the rows
    with the same cut, on strongly rank-deficient views (repeated rows, low rank + tiny noise),
    whose singular values span the cut and GRAM_SHARE (measured: at most 5e-12 here, and 1e-13 on
    layers 0-2 of the shipped MT, LM and MLM's frequency bins)."""
    from evolution.metrics.similarity import GRAM_SHARE, pair_similarity

    for name, (x, y) in _rank_deficient_views(seed).items():
        n, d = x.shape
        assert n >= 4 * d, name  # the Gram route
        want_ab, rank_x, gap = plain_svd_pwcca(x, y)
        want_ba, rank_y, gap_ba = plain_svd_pwcca(y, x)
        assert min(gap, gap_ba) > 0.05, name  # no singular value within 5% of the cut: both keep the same
        a, b = View(x, min_ratio=1), View(y, min_ratio=1)
        assert (a.rank, b.rank) == (rank_x, rank_y), name
        assert a.rank < d or a.singular_[-1] < GRAM_SHARE * a.singular_[0], name  # directions of the SVD route
        assert abs(pwcca(a, b) - want_ab) <= 1e-10, (name, pwcca(a, b) - want_ab)
        assert abs(pwcca(b, a) - want_ba) <= 1e-10, (name, pwcca(b, a) - want_ba)
        np.testing.assert_allclose(pair_similarity(a, b)[:2], [want_ab, want_ba], rtol=0, atol=1e-10, err_msg=name)


def test_similarity_refuses_too_few_occurrences():
    with pytest.raises(ValueError, match="at least 10 x d"):
        View(np.random.default_rng(0).normal(size=(50, 10)), name="mt layer 3")


def test_rank_deficient_view_is_handled():
    x, _, _ = _views()
    dead = np.concatenate([x, np.zeros((len(x), 3))], axis=1)  # three dead units
    assert pwcca_distance(View(x), View(dead)) == pytest.approx(0, abs=1e-10)
    assert View(dead).basis_.shape[1] == x.shape[1]


def test_tsne_separates_clusters_deterministically():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=(60, 10)), rng.normal(size=(60, 10)) + 8])
    labels = np.repeat([0, 1], 60)
    y = tsne_layout(x, perplexity=15, seed=3)
    assert np.array_equal(y, tsne_layout(x, perplexity=15, seed=3))
    assert same_label_rate(knn(y, k=5), labels) > 0.98  # the embedding keeps the clusters apart


class _FakeAdapter:
    """A 'model' whose layer-n states are fixed random vectors per token; masking a key
    adds noise of a known size to the other positions, larger for token ids below 5."""

    num_layers, content_offset, d_model, supports_key_masking = 2, 0, 4, True

    def __init__(self, effect):
        self.effect = effect
        self.table = np.random.default_rng(0).normal(size=(50, 3, 4))

    def build_input(self, ids):
        return list(ids)

    def forward(self, inputs):
        h = np.stack([self.table[np.asarray(x)] for x in inputs])  # (B, T, L+1, d)
        return h.transpose(2, 0, 1, 3), None

    def forward_masked_keys(self, inputs, *, masked):
        h = self.forward(inputs)[0].copy()
        rng = np.random.default_rng(len(inputs))
        for b, (block, pos) in enumerate(masked):
            scale = self.effect(inputs[b][pos])
            h[block + 1, b] += scale * rng.normal(size=h[block + 1, b].shape)
        return h

    def masked_key_states(self, inputs, *, base, masked):  # the adapters' default: from forward_masked_keys
        from evolution.models.base import Adapter

        return Adapter.masked_key_states(self, inputs, base=base, masked=masked)


def test_token_influence_is_zero_without_effect_and_ranks_a_known_effect():
    from evolution.metrics.influence import sample_influencers, token_influence

    rng = np.random.default_rng(1)
    content = {s: rng.integers(0, 50, size=12).tolist() for s in range(300)}
    sentence = np.repeat(np.arange(300), 12)
    position = np.tile(np.arange(12), 300)
    token = np.concatenate([content[s] for s in range(300)])
    rank = token  # pretend the id is the frequency rank
    bins = [(0, 5), (5, 50)]
    samples = sample_influencers(sentence=sentence, position=position, freq_rank=rank, bins=bins, max_per_bin=60)
    assert len(samples) == 120 and {b for _, _, b in samples} == {0, 1}
    assert all((rank[(sentence == s) & (position == p)][0] < 5) == (b == 0) for s, p, b in samples)
    none = token_influence(_FakeAdapter(lambda t: 0.0), content_ids=content, samples=samples, n_bins=2)
    np.testing.assert_allclose(none["distance"]["pwcca"], 0, atol=1e-9)
    rare = token_influence(
        _FakeAdapter(lambda t: 0.5 if t < 5 else 0.05), content_ids=content, samples=samples, n_bins=2
    )
    d = np.asarray(rare["distance"]["pwcca"])
    assert (d[:, 0] > 5 * d[:, 1]).all() and (d > 0).all()
    assert rare["samples"] == [[60, 60], [60, 60]] and rare["rows"][0][0] == 60 * 11


def test_word_forms_match_whole_words_only():
    from evolution.metrics.plan import word_forms

    assert list(word_forms(["▁is", "h", "is", "▁was", "Ġare"])) == ["is", "", "", "was", "are"]
    assert list(word_forms(["is", "##is", "was"])) == ["is", "", "was"]


def test_corruption_follows_the_bert_recipe():
    from evolution.metrics.masked import corrupt

    rng = np.random.default_rng(0)
    ids = rng.integers(10, 1000, size=200_000)
    new, changed = corrupt(ids, rng=np.random.default_rng(1), mask_id=5, low=10, high=1000)
    new = np.asarray(new)
    assert abs((new == 5).mean() - 0.15 * 0.8) < 0.003  # 80% of the 15% chosen become <mask>
    random = (new != ids) & (new != 5)
    assert abs(random.mean() - 0.15 * 0.1 * (1 - 1 / 990)) < 0.002  # 10% random (may redraw the same id)
    np.testing.assert_array_equal(changed, np.flatnonzero(new != ids))
    assert new[random].min() >= 10 and new[random].max() < 1000


def test_two_level_kmeans_recovers_separated_blobs_like_flat():
    from evolution.metrics.mi import kmeans_labels, mutual_information, two_level_kmeans_labels

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 16)) * 20
    labels = rng.integers(0, 40, size=8000)
    x = (centres[labels] + rng.normal(size=(8000, 16))).astype(np.float32)
    two = two_level_kmeans_labels(x, k=40, niter=20, seed=0)
    flat = kmeans_labels(x, k=40, niter=20, seed=0)
    assert len(np.unique(two)) <= 40 and two.min() == 0
    h = mutual_information(labels, labels)
    # flat k-means from k-means++ seeds finds the 40 blobs (from faiss's random seeds it stopped in
    # local minima at 88% of H); two-level splits within coarse cells, which costs a little
    assert mutual_information(labels, flat) >= 0.99 * h
    assert mutual_information(labels, two) >= 0.95 * h
    np.testing.assert_array_equal(two, two_level_kmeans_labels(x, k=40, niter=20, seed=0))  # deterministic


def test_refinement_probing_every_cell_is_one_exact_lloyd_step():
    """With every cell probed, the fast-assignment refinement is a plain Lloyd step:
    centroids of the current labels, then each row to its nearest centroid (numpy reference)."""
    from evolution.metrics.kmeans import _refine_within_cells

    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 8)).astype(np.float32)
    labels = rng.integers(0, 60, size=3000)
    labels[labels == 7] = 8  # an empty cluster stays unused
    cells = np.arange(60) % 5
    new = _refine_within_cells(x, labels, cells=cells, nprobe=5)
    used = np.unique(labels)
    centroids = np.stack([x[labels == j].mean(0) for j in used])
    reference = used[((x[:, None, :] - centroids[None]) ** 2).sum(-1).argmin(1)]
    assert (new == reference).mean() > 0.999  # float32 ties aside
    # one probe: each row takes the nearest centroid among the clusters of its nearest cell
    # (a cell's centre = the mean of its rows)
    one = _refine_within_cells(x, labels, cells=cells, nprobe=1)
    assert set(np.unique(one)) <= set(used)
    centres = np.stack([x[cells[labels] == j].mean(0) for j in range(5)])
    near = ((x[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
    in_cell = cells[used][None, :] == near[:, None]  # (row, used cluster)
    d = np.where(in_cell, ((x[:, None, :] - centroids[None]) ** 2).sum(-1), np.inf)
    assert (one == used[d.argmin(1)]).mean() > 0.999  # float32 ties aside
    assert (one != reference).any()  # one probe is not the full Lloyd step here: the check above says something


def test_task_arrays_file_round_trip(tmp_path):
    """The plan the tasks read from disk is the plan the client decided (every array, dtype kept),
    and the file is named by its content (a changed plan never reads a stale file)."""
    from evolution.analyses.base import load_arrays, save_arrays
    from evolution.config import MetricsConfig
    from evolution.corpus.conllu import NO_LABEL
    from evolution.metrics.plan import plan_occurrences

    rng = np.random.default_rng(0)
    n = 400
    token_id = rng.integers(0, 8, size=n)
    sentence = np.repeat(np.arange(40), 10)
    position = np.tile(np.arange(10), 40)
    pos = np.where(sentence >= 30, rng.integers(0, 3, size=n), NO_LABEL)
    cfg = MetricsConfig.model_validate(
        {"tokens": {"top": 5, "min_count": 3}, "mi": {"k": 4}, "tsne": {"selections": []}}
    )
    plan = plan_occurrences(
        token_id=token_id,
        token_str=np.array([f"w{t}" for t in token_id]),
        sentence=sentence,
        position=position,
        objective="lm",
        cfg=cfg,
        seed=0,
        primary=sentence < 30,
        annotation={"pos": pos, "deprel": pos},
    )
    assert set(plan.mi) == {"input", "output"} and plan.syntax
    arrays = {f"mi/{t}/{i}": v for t, pair in plan.mi.items() for i, v in enumerate(pair)}
    arrays.update({f"{part}/{k}": v for part in ("neighbors", "syntax") for k, v in getattr(plan, part).items()})
    path = save_arrays(tmp_path, "plan", arrays)
    back = load_arrays(path)
    assert back.keys() == arrays.keys()
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype
    assert save_arrays(tmp_path, "plan", arrays) == path  # same content, same file
    arrays["mi/input/0"] = arrays["mi/input/0"][1:]
    assert save_arrays(tmp_path, "plan", arrays) != path


def test_bootstrap_interval_resamples_sentences_not_queries():
    """Queries of one sentence sharing a value (perfectly correlated): the interval has the
    width of n_sentences independent draws, 2 x 1.96 sd / sqrt(n_sentences), not the sqrt(m)
    narrower width a bootstrap over queries would give."""
    from evolution.metrics.neighbors import bootstrap_interval

    rng = np.random.default_rng(0)
    n_sent, m, sd = 400, 9, 2.0
    per_sentence = rng.normal(5.0, sd, size=n_sent)
    values = np.repeat(per_sentence, m)
    sentence = np.repeat(np.arange(n_sent), m)
    lo, hi = bootstrap_interval(values, sentence=sentence, n_boot=2000, seed=1)
    expected = 2 * 1.96 * per_sentence.std() / np.sqrt(n_sent)
    assert hi - lo == pytest.approx(expected, rel=0.1)
    assert lo < values.mean() < hi
    # NaN queries are not counted; groups: the mean of group means, its interval around it
    values[::7] = np.nan
    groups = np.arange(len(values)) % 3
    lo, hi = bootstrap_interval(values, sentence=sentence, groups=groups, n_boot=500, seed=1)
    point = np.mean([np.nanmean(values[groups == g]) for g in range(3)])
    assert lo < point < hi and hi - lo < 3 * expected


def test_within_type_per_query_values_average_to_the_measures():
    from evolution.metrics.neighbors import within_type_measures

    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 4))
    types = np.repeat([3, 5, 8], 20)
    types[-1] = 9  # a type with one occurrence: left out (NaN per query)
    pos = rng.integers(0, 10, size=60)
    left = rng.integers(0, 3, size=60)
    values, queries = within_type_measures(
        x, types=types, position=pos, annotations={"left": left}, k=4, per_query=True
    )
    assert np.isnan(queries["same_left"][-1])
    for name in ("position_distance", "same_left"):
        by_type = [np.nanmean(queries[name][types == t]) for t in (3, 5, 8)]
        assert values[name] == pytest.approx(np.mean(by_type))


def test_tsne_selection_coloured_by_ud_label_takes_annotated_rows():
    """``color: upos`` lays out the word's occurrences in the annotated text only, with their
    labels; without annotation it is skipped with a note naming corpus.annotated."""
    from evolution.config import MetricsConfig
    from evolution.metrics.plan import plan_occurrences

    token_id = np.array([1, 2, 1, 3, 1, 2, 1, 2, 1, 2, 3, 1, 2])
    sentence = np.arange(13) // 4
    words = np.array([f"w{t}" for t in token_id])
    upos = np.array([""] * 5 + ["AUX", "", "VERB", "", "AUX", "", "VERB", "AUX"], dtype=object)
    annotated = upos != ""
    cfg = MetricsConfig(
        tokens={"top": 2, "min_count": 2},
        mi={"k": 2},
        neighbors=None,
        similarity=None,
        tsne={"perplexity": 2, "selections": [{"name": "w2", "tokens": ["w2"], "color": "upos"}]},
    )
    from evolution.corpus.conllu import NO_LABEL

    pos_codes = np.where(annotated, 0, NO_LABEL)
    plan = plan_occurrences(
        token_id=token_id,
        token_str=words,
        sentence=sentence,
        position=np.arange(13) % 4,
        objective="mlm",
        cfg=cfg,
        seed=0,
        primary=~annotated,
        annotation={"pos": pos_codes, "deprel": pos_codes, "upos": pos_codes},
        label_strings={"upos": upos},
    )
    sel = plan.tsne["w2"]
    np.testing.assert_array_equal(sel["rows"], [5, 7, 9, 12])  # w2 in the annotated rows, not row 1
    assert list(sel["label"]) == ["AUX", "VERB", "AUX", "AUX"]
    plain = plan_occurrences(
        token_id=token_id,
        token_str=words,
        sentence=sentence,
        position=np.arange(13) % 4,
        objective="mlm",
        cfg=cfg,
        seed=0,
    )
    assert "w2" not in plain.tsne and any("corpus.annotated" in n for n in plain.notes)


def test_similarity_bootstrap_against_a_loop_with_the_reference_pwcca():
    """Paired bootstrap over sentences of the same-layer distance between two models and of a
    model's adjacent-layer change on a subset: the percentiles of a loop that resamples the
    same sentences and computes the covariance-route PWCCA (mean of both directions)."""
    from evolution.analyses.similarity import bootstrap_distances

    rng = np.random.default_rng(4)
    n_sent, per = 60, 5
    sentence = np.repeat(np.arange(n_sent), per)
    z = rng.normal(size=(n_sent * per, 3))
    states = {
        ("a", 0): z @ rng.normal(size=(3, 3)) + 0.3 * rng.normal(size=(len(z), 3)),
        ("a", 1): z @ rng.normal(size=(3, 3)) + 0.8 * rng.normal(size=(len(z), 3)),
        ("b", 0): z @ rng.normal(size=(3, 3)) + 0.5 * rng.normal(size=(len(z), 3)),
        ("b", 1): rng.normal(size=(len(z), 3)),
    }
    mask = np.arange(len(z)) % 2 == 0
    out = bootstrap_distances(
        read=lambda g, layer: states[(g, layer)],
        models=["a", "b"],
        n_layers={"a": 2, "b": 2},
        sentence=sentence,
        masks={"even": mask},
        methods=["pwcca"],
        replicates=30,
        seed=7,
        epsilon=1e-9,
        min_ratio=1.0,
    )
    between, change = [], []
    for r in range(30):
        idx = np.concatenate(
            [np.flatnonzero(sentence == k) for k in np.random.default_rng([7, r]).integers(0, n_sent, n_sent)]
        )
        between.append(
            [
                1
                - (
                    reference_pwcca(states[("a", layer)][idx], states[("b", layer)][idx])[0]
                    + reference_pwcca(states[("b", layer)][idx], states[("a", layer)][idx])[0]
                )
                / 2
                for layer in (0, 1)
            ]
        )
        sel = idx[mask[idx]]
        change.append(1 - reference_pwcca(states[("a", 0)][sel], states[("a", 1)][sel])[0])
    np.testing.assert_allclose(
        np.asarray(out["between"]["pwcca"])[:, 0], np.percentile(between, [2.5, 97.5], axis=0).T, rtol=1e-8
    )
    np.testing.assert_allclose(
        np.asarray(out["change"]["pwcca"]["a"])[0, 0], np.percentile(change, [2.5, 97.5]), rtol=1e-8
    )
    lo, hi = np.asarray(out["between"]["pwcca"])[1, 0]
    assert hi - lo > 0.01  # layer 1 of b is noise: a wide, non-degenerate interval


def test_bootstrap_blocks_give_the_one_pass_intervals():
    """The pipeline computes the paired bootstrap in blocks of replicates (one task each); the
    blocks, joined in any order, give exactly the intervals of one pass over every replicate,
    and a missing block changes them."""
    from evolution.metrics.similarity import bootstrap_distances, bootstrap_replicates, summarise_replicates

    rng = np.random.default_rng(11)
    sentence = np.repeat(np.arange(40), rng.integers(2, 7, size=40))
    z = rng.normal(size=(len(sentence), 3))
    states = {
        (g, layer): z @ rng.normal(size=(3, 4)) + s * rng.normal(size=(len(z), 4))
        for g, s0 in (("a", 0.3), ("b", 0.6), ("c", 1.0))
        for layer, s in enumerate((s0, 2 * s0, 3 * s0))
    }
    kw = dict(
        read=lambda g, layer: states[(g, layer)],
        models=["a", "b", "c"],
        n_layers={"a": 3, "b": 3, "c": 2},
        sentence=sentence,
        masks={"even": np.arange(len(z)) % 2 == 0, "all": np.ones(len(z), bool)},
        methods=["pwcca", "cka"],
        seed=3,
        epsilon=1e-9,
        min_ratio=1.0,
    )
    whole = bootstrap_distances(replicates=11, **kw)
    blocks = [bootstrap_replicates(replicates=range(lo, hi), **kw) for lo, hi in ((4, 8), (0, 4), (8, 11), (11, 11))]
    joined = summarise_replicates(blocks)
    assert joined["replicates"] == whole["replicates"] == 11
    for key in ("between", "between_mean"):
        for m in ("pwcca", "cka"):
            np.testing.assert_array_equal(np.asarray(joined[key][m]), np.asarray(whole[key][m]))
    for key in ("change", "change_mean"):
        for m in ("pwcca", "cka"):
            for g in ("a", "b", "c"):
                np.testing.assert_array_equal(np.asarray(joined[key][m][g]), np.asarray(whole[key][m][g]))
    layer2 = np.asarray(whole["between"]["cka"])[2]  # pairs (a, b), (a, c), (b, c); c has no layer 2
    assert np.isfinite(layer2[0]).all() and np.isnan(layer2[1:]).all()
    short = summarise_replicates(blocks[:2])
    assert short["replicates"] == 8
    assert not np.array_equal(np.asarray(short["between_mean"]["pwcca"]), np.asarray(whole["between_mean"]["pwcca"]))


def test_pair_similarity_equals_the_separate_calls():
    from evolution.metrics.similarity import pair_similarity

    rng = np.random.default_rng(9)
    x = rng.normal(size=(300, 6))
    y = np.column_stack([x[:, :3] @ rng.normal(size=(3, 3)) + rng.normal(size=(300, 3)), np.zeros((300, 2))])
    for a, b in [(View(x), View(y)), (View(y), View(x)), (View(x), View(x @ rng.normal(size=(6, 4))))]:
        np.testing.assert_allclose(pair_similarity(a, b), (pwcca(a, b), pwcca(b, a), cka(a, b)), rtol=1e-10)
