"""Properties of the estimators that must hold for any input, checked with hypothesis.

Hypothesis draws the shapes, seeds, scales, permutations and curves; the data themselves are
continuous draws from a seeded generator (normal states, Dirichlet attention rows), so that
no two distances or weights tie and every property is exact up to float rounding. Bounded to
run in a few seconds on one core; the examples per test (``max_examples``):

* PWCCA / CKA unchanged by a rotation, a positive scaling and a joint permutation of the
  occurrences of either view; CKA(a, a) = 1; CKA symmetric (:data:`SIMILARITY_EXAMPLES` = 25);
  rotating the view that weights a PWCCA changes it, as the module docstring says (one fixed
  example);
* a rank cut-off that binds (d = 10, rank 4) gives the plain definition on the full-rank
  part (QR / SVD in NumPy) (25);
* the bootstrap from weighted cross-products with every weight 1 (each sentence drawn once)
  equals the point estimate (20), and a replicate does not depend on the chunk of replicates
  that computes it, by the definition and by the cross-products (15);
* MI unchanged by relabelling clusters (and labels) and permuting occurrences, also the
  sentence bootstrap's replicates (40);
* the same-token rate and the within-type position and annotation rates unchanged by an
  orthogonal transform and a uniform scaling, and equal to a brute-force kNN (30 each);
* head statistics permute with the heads (30);
* the probes' early stopping keeps the best held-out epoch of any loss curve (60).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evolution.metrics import heads as H
from evolution.metrics.mi import bootstrap_mi, mutual_information
from evolution.metrics.neighbors import knn, same_label_rate, within_type_measures
from evolution.metrics.resample import SentenceSums, sentence_draws
from evolution.metrics.similarity import View, bootstrap_replicates, cka, pair_similarity, pwcca
from evolution.metrics.similarity_bootstrap import (
    MARGIN,
    between_replicates,
    change_with_replicates,
    pair_with_replicates,
)

TOL = 1e-8
SIMILARITY_EXAMPLES = 25
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

seeds = st.integers(0, 2**32 - 1)
scales = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)


def _orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def _views(seed: int, n: int, d_a: int, d_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Two views of the same n occurrences: b a noisy non-linear map of a, unequal column scales
    and a mean away from 0."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, d_a)) * rng.uniform(0.3, 3.0, d_a) + rng.normal(size=d_a)
    b = np.tanh(a @ rng.normal(size=(d_a, d_b)) / np.sqrt(d_a)) + 0.5 * rng.normal(size=(n, d_b))
    return a, b


def _similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    va, vb = View(a), View(b)
    return np.array([pwcca(va, vb), pwcca(vb, va), cka(va, vb), cka(vb, va), *pair_similarity(va, vb)])


# -- PWCCA and CKA -----------------------------------------------------------------------------------


@settings(FAST, max_examples=SIMILARITY_EXAMPLES)
@given(
    seed=seeds,
    d_a=st.integers(1, 6),
    d_b=st.integers(1, 6),
    extra=st.integers(0, 30),
    which=st.sampled_from(["a", "b"]),
    scale=scales,
)
def test_pwcca_and_cka_are_invariant_to_rotation_scaling_and_occurrence_order(seed, d_a, d_b, extra, which, scale):
    """Scaling either view and permuting the occurrences of both leave every value unchanged;
    rotating one view leaves CKA and the PWCCA weighted by the *other* view unchanged (the PWCCA
    weighted by the rotated view is not: see the xfail test below)."""
    n = 10 * max(d_a, d_b) + extra
    a, b = _views(seed, n, d_a, d_b)
    base = _similarity(a, b)  # pwcca(a, b), pwcca(b, a), cka(a, b), cka(b, a), pair_similarity(a, b)
    rng = np.random.default_rng([seed, 1])
    if which == "a":
        rotated, scaled = (a @ _orthogonal(rng, d_a), b), (scale * a, b)
        unmoved = [1, 2, 3, 5, 6]  # pwcca(b, a) weights by b's units
    else:
        rotated, scaled = (a, b @ _orthogonal(rng, d_b)), (a, scale * b)
        unmoved = [0, 2, 3, 4, 6]
    perm = rng.permutation(n)
    np.testing.assert_allclose(_similarity(*rotated)[unmoved], base[unmoved], rtol=0, atol=TOL)
    for moved in (scaled, (a[perm], b[perm])):
        np.testing.assert_allclose(_similarity(*moved), base, rtol=0, atol=TOL)
    # CKA symmetric (and pair_similarity's three equal to the single calls)
    assert abs(base[2] - base[3]) <= TOL
    np.testing.assert_allclose(base[4:], base[[0, 1, 2]], rtol=0, atol=TOL)
    # a view against itself: CKA 1 (PWCCA too)
    va = View(a)
    assert cka(va, va) == pytest.approx(1.0, abs=TOL)
    assert pwcca(va, va) == pytest.approx(1.0, abs=TOL)


def test_pwcca_weighted_by_a_rotated_view_changes_as_the_docstring_says():
    """PWCCA(a, b) weights each canonical direction by alpha_i = sum_j |<h_i, a_j>| over a's own
    units, an L1 sum that a rotation of a changes (Kornblith et al. 2019, Table 1: PWCCA is not
    invariant to orthogonal transforms), while rotating b, the view it does not weight by, does not."""
    a, b = _views(0, 40, 2, 2)
    q = _orthogonal(np.random.default_rng(1), 2)
    assert abs(pwcca(View(a @ q), View(b)) - pwcca(View(a), View(b))) > 1e-3
    assert pwcca(View(a), View(b @ q)) == pytest.approx(pwcca(View(a), View(b)), abs=TOL)


def _plain_similarity(x: np.ndarray, y: np.ndarray, fx: np.ndarray, fy: np.ndarray) -> tuple[float, float, float]:
    """PWCCA(x, y), PWCCA(y, x) and linear CKA by the plain definitions, ``fx`` and ``fy`` the views'
    full-rank parts (x = fx W + mean, fx of full column rank): centre; an orthonormal basis of each
    view's column space by a QR of its centred full-rank part; the canonical correlations rho and
    directions from an SVD of Qx^T Qy; the canonical variates h_i = Qx u_i weighted by
    alpha_i = sum_j |<h_i, x_j>| over x's centred columns (Morcos et al. 2018), normalised:
    PWCCA = sum_i alpha_i rho_i / sum_i alpha_i; CKA = ||y^T x||_F^2 / (||x^T x||_F ||y^T y||_F)
    (Kornblith et al. 2019)."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    qx, _ = np.linalg.qr(fx - fx.mean(0))
    qy, _ = np.linalg.qr(fy - fy.mean(0))
    u, rho, vt = np.linalg.svd(qx.T @ qy, full_matrices=False)
    m = len(rho)

    def weighted(h: np.ndarray, z: np.ndarray) -> float:
        alpha = np.abs(h.T @ z).sum(axis=1)
        return float((alpha * rho).sum() / alpha.sum())

    c = np.linalg.norm(yc.T @ xc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))
    return weighted(qx @ u[:, :m], xc), weighted(qy @ vt[:m].T, yc), float(c)


def _rows_orthonormal(rng: np.random.Generator, r: int, d: int) -> np.ndarray:
    """(r, d), r <= d, orthonormal rows with scales in [0.5, 2]: maps a full-rank (n, r) part onto d
    features without making it ill-conditioned."""
    return rng.uniform(0.5, 2.0, (r, 1)) * _orthogonal(rng, d)[:r]


@settings(FAST, max_examples=SIMILARITY_EXAMPLES)
@given(seed=seeds, rank_b=st.integers(1, 10), extra=st.integers(0, 40), scale=scales)
def test_a_binding_rank_cut_off_gives_the_plain_definition_on_the_full_rank_part(seed, rank_b, extra, scale):
    """View a has d = 10 features of rank 4 (its full-rank part (n, 4) times (4, 10)); b 10 features
    of rank ``rank_b`` (10: full rank): the cut-off drops the null directions, and PWCCA / CKA equal
    the definitions on the full-rank parts."""
    rng = np.random.default_rng(seed)
    n, d = 100 + extra, 10
    fa = rng.normal(size=(n, 4)) * rng.uniform(0.3, 3.0, 4)
    a = scale * (fa @ _rows_orthonormal(rng, 4, d)) + rng.normal(size=d)
    fb = np.tanh(fa @ rng.normal(size=(4, rank_b))) + 0.3 * rng.normal(size=(n, rank_b))
    b = fb @ _rows_orthonormal(rng, rank_b, d)
    va, vb = View(a), View(b)
    assert (va.rank, vb.rank) == (4, rank_b)
    want = _plain_similarity(a, b, fa, fb)
    np.testing.assert_allclose(pair_similarity(va, vb), want, rtol=0, atol=TOL)
    np.testing.assert_allclose([pwcca(va, vb), pwcca(vb, va), cka(va, vb)], want, rtol=0, atol=TOL)


# -- the similarity bootstrap -------------------------------------------------------------------------


def _sentences(rng: np.random.Generator, n_sentences: int, lo: int = 4, hi: int = 12) -> np.ndarray:
    """Each row's sentence, 0 .. S - 1, sentences of lo..hi rows, in a shuffled order."""
    return rng.permutation(np.repeat(np.arange(n_sentences), rng.integers(lo, hi, n_sentences)))


def _layers(rng: np.random.Generator, n: int, d: int, layers: int) -> list[np.ndarray]:
    """One model's states (n, d) at ``layers`` layers, each a noisy non-linear map of the one before."""
    x = rng.normal(size=(n, d)) * rng.uniform(0.3, 3.0, d)
    out = [x]
    for _ in range(1, layers):
        x = np.tanh(x @ rng.normal(size=(d, d)) / np.sqrt(d)) + 0.3 * rng.normal(size=(n, d))
        out.append(x)
    return out


@settings(FAST, max_examples=20)
@given(seed=seeds, d=st.integers(1, 5), n_sentences=st.integers(12, 30), layers=st.integers(2, 3))
def test_the_bootstrap_with_every_weight_one_is_the_point_estimate(seed, d, n_sentences, layers):
    """One replicate that draws every sentence once (every row's weight 1): its distances are the
    estimates, by each route of :mod:`evolution.metrics.similarity_bootstrap`."""
    rng = np.random.default_rng(seed)
    group = _sentences(rng, n_sentences)
    n = len(group)
    assume(n >= 10 * d)
    states = {g: _layers(rng, n, d, layers) for g in ("x", "y")}
    ones = np.arange(n_sentences)[None]  # each sentence drawn once
    assert (SentenceSums(group, n_groups=n_sentences).rows(np.ones((1, n_sentences))) == n).all()

    est, reps = pair_with_replicates(
        states["x"][0], states["y"][0], group=group, draws=ones, epsilon=1e-6, min_ratio=10
    )
    np.testing.assert_allclose(reps[0], est, rtol=0, atol=TOL)

    views = {layer: {g: View(states[g][layer], margin=MARGIN) for g in states} for layer in range(layers)}
    between = between_replicates(
        views,
        sums=SentenceSums(group, n_groups=n_sentences),
        draws=ones,
        pairs=[("x", "y")],
        methods=["pwcca", "cka"],
        epsilon=1e-6,
        min_ratio=10,
        states=lambda g, layer: states[g][layer],
    )
    for layer in range(layers):
        p_ab, p_ba, c = pair_similarity(View(states["x"][layer]), View(states["y"][layer]))
        assert between["pwcca"][0, layer, 0] == pytest.approx(1 - (p_ab + p_ba) / 2, abs=TOL)
        assert between["cka"][0, layer, 0] == pytest.approx(1 - c, abs=TOL)

    masks = {"all": np.ones(n, bool), "some": rng.random(n) < 0.7}
    got = change_with_replicates(
        states["x"],
        masks,
        group=group,
        draws=ones,
        methods=["pwcca", "cka"],
        epsilon=1e-6,
        min_ratio=1,
        name="x",
    )
    for m in ("pwcca", "cka"):
        np.testing.assert_allclose(got["replicates"][m][0], got["estimate"][m], rtol=0, atol=TOL, equal_nan=True)


@settings(FAST, max_examples=15)
@given(
    seed=seeds,
    n_sentences=st.integers(12, 25),
    total=st.integers(2, 9),
    cuts=st.lists(st.integers(1, 8), max_size=3),
    boot_seed=st.integers(0, 1000),
)
def test_a_replicate_does_not_depend_on_the_chunk_that_computes_it(seed, n_sentences, total, cuts, boot_seed):
    """Replicates 0..R-1 computed in one chunk and in chunks ``[i, j)`` cut anywhere: the same draws,
    and the same distances by the definition (exactly) and by the cross-products (to rounding)."""
    rng = np.random.default_rng(seed)
    group = _sentences(rng, n_sentences)
    n, d = len(group), 2
    states = {g: _layers(rng, n, d, 2) for g in ("x", "y")}
    edges = sorted({0, total, *(c for c in cuts if c < total)})
    chunks = [range(i, j) for i, j in zip(edges[:-1], edges[1:], strict=True)]

    draws = sentence_draws(n_sentences, replicates=total, seed=boot_seed)
    np.testing.assert_array_equal(
        np.concatenate([sentence_draws(n_sentences, replicates=c, seed=boot_seed) for c in chunks]), draws
    )

    def definition(replicates: range) -> dict:
        return bootstrap_replicates(
            read=lambda g, layer: states[g][layer],
            models=["x", "y"],
            n_layers={"x": 2, "y": 2},
            sentence=group * 7 + 3,
            masks={"all": np.ones(n, bool)},
            methods=["pwcca", "cka"],
            replicates=replicates,
            seed=boot_seed,
            epsilon=1e-6,
            min_ratio=1,
        )

    whole = definition(range(total))
    parts = [definition(c) for c in chunks]
    for m in ("pwcca", "cka"):
        np.testing.assert_array_equal(np.concatenate([p["between"][m] for p in parts]), whole["between"][m])
        for g in ("x", "y"):
            np.testing.assert_array_equal(np.concatenate([p["change"][m][g] for p in parts]), whole["change"][m][g])

    views = {layer: {g: View(states[g][layer], margin=MARGIN, min_ratio=1) for g in states} for layer in range(2)}

    def fast(replicates: range) -> dict:
        return between_replicates(
            views,
            sums=SentenceSums(group, n_groups=n_sentences),
            draws=sentence_draws(n_sentences, replicates=replicates, seed=boot_seed),
            pairs=[("x", "y")],
            methods=["pwcca", "cka"],
            epsilon=1e-6,
            min_ratio=1,
            states=lambda g, layer: states[g][layer],
        )

    whole_fast, parts_fast = fast(range(total)), [fast(c) for c in chunks]
    for m in ("pwcca", "cka"):
        np.testing.assert_allclose(
            np.concatenate([p[m] for p in parts_fast]), whole_fast[m], rtol=0, atol=1e-12, equal_nan=True
        )
        np.testing.assert_allclose(whole_fast[m], whole["between"][m], rtol=0, atol=TOL, equal_nan=True)


# -- MI ------------------------------------------------------------------------------------------------


@settings(FAST, max_examples=40)
@given(
    seed=seeds,
    n=st.integers(2, 200),
    n_labels=st.integers(1, 12),
    n_clusters=st.integers(1, 12),
    n_sentences=st.integers(1, 15),
)
def test_mi_is_invariant_to_relabelling_clusters_and_permuting_occurrences(seed, n, n_labels, n_clusters, n_sentences):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_labels, n)
    clusters = (labels * 3 + rng.integers(0, n_clusters, n)) % n_clusters  # dependent on the labels
    sentence = rng.integers(0, n_sentences, n)
    base = mutual_information(labels, clusters)
    relabel = rng.permutation(10 * n_clusters)[:n_clusters] - 5  # any distinct ids, negative ones too
    label_names = np.array([f"t{i}" for i in rng.permutation(n_labels)])
    perm = rng.permutation(n)
    for x, c in (
        (labels, relabel[clusters]),
        (labels[perm], clusters[perm]),
        (label_names[labels][perm], relabel[clusters][perm]),
    ):
        assert mutual_information(x, c) == pytest.approx(base, abs=1e-12)
    assert mutual_information(clusters, labels) == pytest.approx(base, abs=1e-12)

    second = rng.integers(0, n_clusters, n)
    boot = bootstrap_mi(labels, [clusters, second], sentence, replicates=3, seed=seed % 100)
    moved = bootstrap_mi(
        label_names[labels][perm],
        [relabel[clusters][perm], second[perm] + 7],
        sentence[perm],
        replicates=3,
        seed=seed % 100,
    )
    np.testing.assert_allclose(moved["mi"], boot["mi"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(moved["entropy"], boot["entropy"], rtol=0, atol=1e-12)


# -- nearest neighbours ----------------------------------------------------------------------------------


def _brute_neighbours(x: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, float]:
    """Each row's k nearest other rows by an argsort of float64 distances, and the smallest relative
    gap between a query's k-th and (k+1)-th neighbour (0 where that boundary is a tie)."""
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    dist = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    np.fill_diagonal(dist, np.inf)
    order = np.argsort(dist, axis=1, kind="stable")
    k = min(k, len(x) - 1)
    ranked = np.take_along_axis(dist, order, axis=1)
    gap = np.inf
    if k < len(x) - 1:
        gap = float(((ranked[:, k] - ranked[:, k - 1]) / np.maximum(ranked[:, k], 1e-300)).min())
    return order[:, :k], gap


MARGIN_KNN = 1e-3  # float32 search: a k-th / (k+1)-th boundary closer than this may swap


@settings(FAST, max_examples=30)
@given(
    seed=seeds,
    n=st.integers(3, 60),
    d=st.integers(1, 6),
    k=st.integers(1, 8),
    n_labels=st.integers(1, 6),
    metric=st.sampled_from(["euclidean", "cosine"]),
    scale=st.floats(1e-2, 1e2),
)
def test_the_same_token_rate_is_a_brute_force_knn_and_invariant(seed, n, d, k, n_labels, metric, scale):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) + (rng.normal(size=d) if metric == "euclidean" else 0)
    labels = rng.integers(0, n_labels, n)
    want, gap = _brute_neighbours(x, k, metric)
    assume(gap > MARGIN_KNN)
    found = knn(x, k=k, metric=metric)
    np.testing.assert_array_equal(np.sort(found, axis=1), np.sort(want, axis=1))
    rate = same_label_rate(found, labels)
    plain = np.mean([(labels[row] == labels[q]).mean() for q, row in enumerate(want)])
    assert rate == pytest.approx(plain, abs=1e-12)
    q = _orthogonal(rng, d)
    for moved in (x @ q, scale * x, scale * (x @ q)):
        assert same_label_rate(knn(moved, k=k, metric=metric), labels) == pytest.approx(rate, abs=1e-12)


@settings(FAST, max_examples=30)
@given(
    seed=seeds,
    n=st.integers(4, 60),
    d=st.integers(1, 5),
    k=st.integers(1, 6),
    n_types=st.integers(1, 4),
    scale=st.floats(1e-2, 1e2),
)
def test_within_type_rates_are_a_brute_force_knn_and_invariant(seed, n, d, k, n_types, scale):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) + rng.normal(size=d)
    types = rng.integers(0, n_types, n)
    assume(np.bincount(types).max() >= 2)
    position = rng.integers(0, 30, n)
    left = rng.integers(-1, 3, n)  # -1: no left token
    plain = {"position_distance": [], "same_left": []}
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        if len(rows) < 2:
            continue
        nb, gap = _brute_neighbours(x[rows], k, "euclidean")
        assume(gap > MARGIN_KNN)
        nb = rows[nb]
        plain["position_distance"].append(np.mean(np.abs(position[nb] - position[rows][:, None]).mean(1)))
        has = left[rows] >= 0
        if has.any():
            plain["same_left"].append(np.mean((left[nb] == left[rows][:, None]).mean(1)[has]))
    got = within_type_measures(x, types=types, position=position, annotations={"left": left}, k=k)
    for name, values in plain.items():
        want = np.mean(values) if values else np.nan
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-12, equal_nan=True, err_msg=name)
    q = _orthogonal(rng, d)
    for moved in (x @ q, scale * x):
        again = within_type_measures(moved, types=types, position=position, annotations={"left": left}, k=k)
        assert set(again) == set(got)
        for name in got:
            np.testing.assert_allclose(again[name], got[name], rtol=0, atol=1e-12, equal_nan=True, err_msg=name)


# -- head statistics ---------------------------------------------------------------------------------------


@settings(FAST, max_examples=30)
@given(
    seed=seeds,
    layers=st.integers(1, 3),
    n_heads=st.integers(2, 5),
    t=st.integers(3, 9),
    causal=st.booleans(),
    has_bos=st.booleans(),
    has_eos=st.booleans(),
)
def test_head_statistics_permute_with_the_heads(seed, layers, n_heads, t, causal, has_bos, has_eos):
    rng = np.random.default_rng(seed)
    alpha = rng.dirichlet(np.full(t, 0.7), size=(layers, n_heads, t))
    if causal:
        alpha = np.tril(alpha)
        alpha /= alpha.sum(-1, keepdims=True)
    norm = alpha * rng.uniform(0.1, 3.0, (layers, n_heads, 1, t))
    bos = np.zeros(t, bool)
    bos[0] = has_bos
    eos = np.zeros(t, bool)
    eos[-1] = has_eos
    punct = rng.random(t) < 0.3
    perm = rng.permutation(n_heads)

    sums, counts, norm_sums = H.head_sums(alpha, bos=bos, eos=eos, punct=punct, causal=causal, norm=norm)
    p_sums, p_counts, p_norm = H.head_sums(
        alpha[:, perm], bos=bos, eos=eos, punct=punct, causal=causal, norm=norm[:, perm]
    )
    np.testing.assert_allclose(p_sums, sums[:, perm], rtol=0, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(p_norm, norm_sums[:, perm], rtol=0, atol=1e-12, equal_nan=True)
    assert p_counts == counts

    cross = rng.dirichlet(np.ones(t + 1), size=(layers, n_heads, t))
    c_sums, c_counts = H.cross_head_sums(
        cross, bos=np.zeros(t + 1, bool), eos=np.arange(t + 1) == t, punct=punct.tolist() + [False]
    )
    pc_sums, pc_counts = H.cross_head_sums(
        cross[:, perm], bos=np.zeros(t + 1, bool), eos=np.arange(t + 1) == t, punct=punct.tolist() + [False]
    )
    np.testing.assert_allclose(pc_sums, c_sums[:, perm], rtol=0, atol=1e-12, equal_nan=True)
    assert pc_counts == c_counts

    units = np.concatenate([[0], 1 + np.sort(rng.integers(0, max(1, t - 2), t - 1))])
    units = np.unique(units, return_inverse=True)[1]
    for rule in ("mean", "first"):
        words = H.word_attention(alpha, units, rule=rule)
        np.testing.assert_allclose(H.word_attention(alpha[:, perm], units, rule=rule), words[:, perm], atol=1e-12)

    n_words = t
    heads = np.array([0] + [int(rng.integers(1, n_words + 1)) for _ in range(n_words - 1)])
    heads[1:] = np.where(heads[1:] == np.arange(2, n_words + 1), 1, heads[1:])  # no word its own head
    relations = rng.integers(0, 3, n_words)
    hits, arcs, offsets = H.dependency_hits(alpha, heads, relations, 3)
    p_hits, p_arcs, p_offsets = H.dependency_hits(alpha[:, perm], heads, relations, 3)
    np.testing.assert_array_equal(p_hits, hits[:, perm])
    np.testing.assert_array_equal(p_arcs, arcs)
    np.testing.assert_array_equal(p_offsets, offsets)

    flat = rng.dirichlet(np.ones(t), size=(n_heads, t))
    js = H.js_divergence_sums(flat)
    np.testing.assert_allclose(H.js_divergence_sums(flat[perm]), js[np.ix_(perm, perm)], rtol=0, atol=1e-12)


# -- probes' early stopping -----------------------------------------------------------------------------------


def _plain_early_stopping(losses: list[float], patience: int) -> tuple[int, int]:
    """(epochs run, best epoch), 1-based: after each epoch e, stop once e - argmin(losses[:e]) >= patience
    (argmin: the first of equal minima); the best epoch is the argmin over the epochs run."""
    for e in range(1, len(losses) + 1):
        best = int(np.argmin(losses[:e])) + 1
        if e - best >= patience:
            return e, best
    return len(losses), int(np.argmin(losses)) + 1


@settings(FAST, max_examples=60)
@given(
    losses=st.lists(
        st.one_of(st.floats(0.0, 10.0, allow_nan=False), st.sampled_from([1.0, 2.0])), min_size=1, max_size=12
    ),
    patience=st.integers(1, 5),
)
def test_early_stopping_keeps_the_best_held_out_epoch_of_any_curve(losses, patience):
    """``fit_probe`` with its held-out loss replaced by a given curve (ties included): it trains the
    epochs of the plain rule, reports the curve's argmin as ``best_epoch`` and keeps the weights
    the net had after that epoch."""
    import torch

    from evolution.metrics import probes

    states = []

    def scored(net, held, kind):
        states.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        return losses[len(states) - 1], 0.5

    rng = np.random.default_rng(0)
    sentence = probes.ProbeSentence(
        attention=rng.dirichlet(np.ones(5), size=(2, 5)), heads=np.array([0, 1, 1]), punct=None
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(probes, "_held_out_score", scored)
        probe = probes.fit_probe(
            [sentence], kind="attention", epochs=len(losses), held_out=[sentence], patience=patience
        )
    run, best = _plain_early_stopping(losses, patience)
    assert [e for e, _, _ in probe.curve] == list(range(1, run + 1))
    assert probe.best_epoch == best
    kept = probe.net.state_dict()
    for name, value in states[best - 1].items():
        assert torch.equal(kept[name], value), name
