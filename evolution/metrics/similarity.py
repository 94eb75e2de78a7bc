"""PWCCA (Morcos, Raghu & Bengio, 2018) and linear CKA (Kornblith et al., 2019).

A *view* is one layer's representations of a fixed set of occurrences,
shape (n, d). :class:`View` centres it and factorises it once (thin SVD),
so that comparing V views pairwise costs V factorisations plus a small
(r x r) SVD per pair, not a factorisation per pair (``docs/metrics.md``).

Distances are ``1 - similarity``: 0 for identical views, invariant to
rotations and isotropic scaling of either view.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = [
    "pair_similarity",
    "similarities",
    "thin_svd",
    "GRAM_SHARE",
    "View",
    "pwcca",
    "cka",
    "pwcca_distance",
    "cka_distance",
    "MIN_RATIO",
    "equal_size_bins",
    "bin_sizes",
    "adjacent_change",
    "bootstrap_distances",
    "bootstrap_replicates",
    "summarise_replicates",
    "centre_intervals",
]

#: Default minimum occurrences per dimension: CCA on fewer points than ~10 d
#: overfits (correlations tend to 1 as n approaches d).
MIN_RATIO = 10


class View:
    """Centred representations of one layer, factorised once.

    Parameters
    ----------
    x : array (n, d)
    epsilon : float
        Directions whose singular value is below ``epsilon`` times the
        largest are dropped (rank deficiency, e.g. dead units).
    min_ratio : float
        Refuse n < ``min_ratio`` * d.
    name : str
        For error messages.
    margin : float
        Also keep the directions above ``margin`` (at most 1) x the smallest kept singular
        value in the ``*_all_`` attributes.

    Attributes
    ----------
    basis_ : (n, r) orthonormal basis of the column space (r = numerical rank)
    coords_ : (r, d) the centred x in that basis, x = basis_ @ coords_ (= S V^T of its SVD,
        up to the dropped directions)
    singular_ : (r,) the kept singular values
    gram_norm_ : ||x^T x||_F, for CKA
    basis_all_, singular_all_, coords_all_ : the same with the directions whose singular value
        is above ``margin`` x the smallest kept one (``margin`` < 1: spare directions, which a
        bootstrap replicate may keep or which move its kept ones:
        :mod:`evolution.metrics.similarity_bootstrap`)

    Only the (n, r) basis is kept per occurrence, not x itself: comparing many
    views (every layer of every model) holds half the memory.
    """

    def __init__(
        self,
        x: np.ndarray,
        *,
        epsilon: float = 1e-6,
        min_ratio: float = MIN_RATIO,
        name: str = "view",
        margin: float = 1.0,
    ):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"{name}: expected (occurrences, feature), got shape {x.shape}")
        n, d = x.shape
        if n < min_ratio * d:
            raise ValueError(
                f"{name}: {n} occurrences for {d} dimensions; PWCCA/CKA need at least "
                f"{min_ratio:g} x d = {int(np.ceil(min_ratio * d))} (use more sentences, or "
                "lower metrics.similarity.min_ratio knowingly)"
            )
        from evolution.metrics import backend

        self.name = name
        xc = x - x.mean(axis=0)
        u, s, _ = thin_svd(xc)
        top = s[0] if len(s) and s[0] > 0 else 1.0
        keep = s > epsilon * top
        if not keep.any():
            raise ValueError(f"{name}: the representations are constant over occurrences")
        spare = s >= min(margin, 1.0) * s[keep][-1]  # a prefix of the sorted s, as keep is
        self.rank = int(keep.sum())
        self.basis_all_ = np.ascontiguousarray(u[:, spare])
        self.singular_all_ = s[spare]
        self.coords_all_ = backend.tmatmul(self.basis_all_, xc)  # = S V^T of the SVD: x in the basis
        self.gram_norm_ = float(np.sqrt((s**4).sum()))  # ||X^T X||_F = sqrt(sum sigma^4)

    @property
    def basis_(self) -> np.ndarray:
        return self.basis_all_[:, : self.rank]

    @property
    def singular_(self) -> np.ndarray:
        return self.singular_all_[: self.rank]

    @property
    def coords_(self) -> np.ndarray:
        return self.coords_all_[: self.rank]

    @property
    def n(self) -> int:
        return self.basis_.shape[0]


#: :func:`thin_svd` takes the directions above this share of the largest singular value from the
#: eigendecomposition of x^T x (a singular value s there is accurate to about 1e-16 (s_max / s)^2
#: relative, 1e-10 at this share) and the rest from an SVD of x projected onto them.
GRAM_SHARE = 1e-3


def thin_svd(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``u`` (n, k), ``s`` (k,) descending, ``vt`` (k, d) with x = u diag(s) vt: the thin SVD of a
    tall (n, d) matrix from its (d, d) Gram, k <= d. For n >= 4 d the Gram x^T x (one GEMM) gives
    the directions above :data:`GRAM_SHARE` of the largest, u = x v / s; the remaining ones come
    from an exact SVD of x's projection onto them, with the large directions' part removed first
    (so the two sets stay orthogonal to rounding). About 10x less time than LAPACK's SVD of the
    rows at n = 74k, d = 128 (one GEMM instead of Householder reflections), and equal to it to
    1e-10 in singular values, subspaces and PWCCA (``tests/test_similarity_bootstrap.py``).
    Directions with a zero singular value may be left out (k < d)."""
    from evolution.metrics import backend

    n, d = x.shape
    if n < 4 * d:
        return np.linalg.svd(x, full_matrices=False)
    lam, v = backend.eigh(backend.tmatmul(x))
    lam, v = lam[::-1], np.ascontiguousarray(v[:, ::-1])
    if lam[0] <= 0:
        return np.linalg.svd(x, full_matrices=False)
    k = int((lam > (GRAM_SHARE**2) * lam[0]).sum())  # a prefix: lam descends
    s_big = np.sqrt(lam[:k])
    u_big = backend.matmul(x, v[:, :k]) / s_big
    if k == d:
        return u_big, s_big, v.T
    rest = backend.matmul(x, v[:, k:])
    rest -= backend.matmul(u_big, backend.tmatmul(u_big, rest))  # what the large directions left there
    u_small, s_small, w = np.linalg.svd(rest, full_matrices=False)
    u = np.hstack([u_big, u_small])
    s = np.concatenate([s_big, s_small])
    vt = np.vstack([v[:, :k].T, w @ v[:, k:].T])
    order = np.argsort(-s, kind="stable")
    return u[:, order], s[order], vt[order]


def _check(a: View, b: View) -> None:
    if a.n != b.n:
        raise ValueError(f"{a.name} and {b.name} cover different occurrences ({a.n} vs {b.n})")


def pwcca(a: View, b: View) -> float:
    """Projection-weighted CCA similarity in [0, 1], weights from view ``a``.

    CCA via the orthonormal bases: the canonical correlations are the
    singular values of Qa^T Qb and the canonical variates of ``a`` are
    ``h = Qa U``. Weight alpha_i = sum_j |<h_i, x_j>| over the original
    (centred) dimensions x_j of ``a``, normalised to sum 1;
    PWCCA = sum_i alpha_i rho_i. Not symmetric.
    """
    _check(a, b)
    u, rho, _ = np.linalg.svd(a.basis_.T @ b.basis_, full_matrices=False)
    m = len(rho)  # min(rank_a, rank_b)
    alpha = np.abs(u[:, :m].T @ a.coords_).sum(axis=1)  # h^T x = U^T Qa^T Qa C = U^T C
    return float(np.clip((alpha * np.clip(rho, 0, 1)).sum() / alpha.sum(), 0.0, 1.0))


def cka(a: View, b: View) -> float:
    """Linear CKA: ||b^T a||_F^2 / (||a^T a||_F ||b^T b||_F) on centred views. Symmetric.
    With x = Q S V^T: ||b^T a||_F = ||S_b (Q_b^T Q_a) S_a||_F (V orthonormal)."""
    _check(a, b)
    cross = np.linalg.norm(b.singular_[:, None] * (b.basis_.T @ a.basis_) * a.singular_[None, :]) ** 2
    return float(np.clip(cross / (a.gram_norm_ * b.gram_norm_), 0.0, 1.0))


def pair_similarity(a: View, b: View) -> tuple[float, float, float]:
    """``(pwcca(a, b), pwcca(b, a), cka(a, b))`` from one (r_a, r_b) product of the bases
    and one SVD: M = Qa^T Qb = U S V^T gives a's canonical directions (U), b's (V), the
    correlations (S) and, with the singular values, CKA. Equal to the three calls."""
    from evolution.metrics import backend

    _check(a, b)
    m_ab = backend.tmatmul(a.basis_, b.basis_)
    cross = np.linalg.norm(a.singular_[:, None] * m_ab * b.singular_[None, :]) ** 2
    return similarities(m_ab, a.coords_, b.coords_, cross=cross, norm_a=a.gram_norm_, norm_b=b.gram_norm_)


def similarities(
    m_ab: np.ndarray, coords_a: np.ndarray, coords_b: np.ndarray, *, cross: float, norm_a: float, norm_b: float
) -> tuple[float, float, float]:
    """``(pwcca(a, b), pwcca(b, a), cka)`` from ``m_ab`` (r_a, r_b) = Qa^T Qb, the views'
    orthonormal bases' product; ``coords_a`` (r_a, d_a) the centred a in the basis Qa
    (``coords_b`` likewise); ``cross`` = ||a^T b||_F^2 and ``norm_a`` = ||a^T a||_F (CKA).
    The one formula behind :func:`pair_similarity` and the bootstrap's replicates
    (:mod:`evolution.metrics.similarity_bootstrap`), which reach the same quantities from
    cross-products."""
    u, rho, vt = np.linalg.svd(m_ab, full_matrices=False)
    k = len(rho)
    rho = np.clip(rho, 0, 1)

    def weighted(directions: np.ndarray, coords: np.ndarray) -> float:
        alpha = np.abs(directions @ coords).sum(axis=1)
        return float(np.clip((alpha * rho).sum() / alpha.sum(), 0.0, 1.0))

    return (
        weighted(u[:, :k].T, coords_a),
        weighted(vt[:k], coords_b),
        float(np.clip(cross / (norm_a * norm_b), 0.0, 1.0)),
    )


def pwcca_distance(a: View, b: View) -> float:
    return 1.0 - pwcca(a, b)


def cka_distance(a: View, b: View) -> float:
    return 1.0 - cka(a, b)


def bootstrap_distances(
    *,
    read,
    models: list[str],
    n_layers: dict[str, int],
    sentence: np.ndarray,
    masks: dict[str, np.ndarray],
    methods: list[str],
    replicates: int,
    seed: int,
    epsilon: float,
    min_ratio: float,
    level: float = 0.95,
) -> dict[str, Any]:
    """``read(model, layer)`` (n, d) the states of the compared occurrences, ``sentence``
    (n,) their sentences. Percentile intervals of the distances the figures compare, over ``replicates``
    resamples of whole sentences (replicate ``r`` draws with ``default_rng([seed, r])``,
    the same occurrences for every model): the same-layer distance of every pair of
    models, and each model's change between adjacent layers per subset of ``masks``.
    Each replicate redoes the SVDs (a View per model and layer), one layer at a time.
    ``between`` (layer, pair, 2) and ``change`` (layer_pair, subset, 2) are the plain
    percentiles; ``between_mean`` / ``change_mean`` the replicates' means, with which
    :func:`centre_intervals` places them around the estimates (a resample repeats
    sentences, and repeated rows make CCA fit closer: the replicates' distances sit below
    the estimate, the more so the fewer occurrences per dimension).

    :func:`bootstrap_replicates` on blocks of replicates followed by
    :func:`summarise_replicates` gives the same numbers (the pipeline's route: one task per
    block, so that the replicates spread over the workers)."""
    block = bootstrap_replicates(
        read=read,
        models=models,
        n_layers=n_layers,
        sentence=sentence,
        masks=masks,
        methods=methods,
        replicates=range(replicates),
        seed=seed,
        epsilon=epsilon,
        min_ratio=min_ratio,
    )
    return summarise_replicates([block], level=level)


def bootstrap_replicates(
    *,
    read,
    models: list[str],
    n_layers: dict[str, int],
    sentence: np.ndarray,
    masks: dict[str, np.ndarray],
    methods: list[str],
    replicates: range,
    seed: int,
    epsilon: float,
    min_ratio: float,
) -> dict[str, Any]:
    """The replicates ``replicates`` (e.g. ``range(10, 20)``) of :func:`bootstrap_distances`,
    unsummarised: ``between[method]`` (replicate, layer, pair) and
    ``change[method][model]`` (replicate, layer_pair, subset) as nested lists (NaN where
    a pair or subset has no value), with ``first`` and ``pairs``. Replicate ``r`` is the
    same resample whichever block computes it."""
    from evolution.metrics.plan import rows_by_sentence

    fns = {"pwcca": pwcca, "cka": cka}
    groups = list(rows_by_sentence(np.asarray(sentence)).values())
    picks = [
        np.concatenate([groups[k] for k in np.random.default_rng([seed, r]).integers(0, len(groups), len(groups))])
        for r in replicates
    ]
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    L = max(n_layers.values())
    R = len(picks)
    between = {m: np.full((R, L, len(pairs)), np.nan) for m in methods}
    change = {m: {g: np.full((R, L - 1, len(masks)), np.nan) for g in models} for m in methods}
    previous: dict[str, np.ndarray] = {}
    for layer in range(L):
        states = {g: read(g, layer) for g in models if layer < n_layers[g]}
        for r, idx in enumerate(picks):
            views = {
                g: View(x[idx], epsilon=epsilon, min_ratio=min_ratio, name=f"{g} layer {layer}")
                for g, x in states.items()
            }
            for p, (a, b) in enumerate(pairs):
                if a in views and b in views:
                    p_ab, p_ba, c = pair_similarity(views[a], views[b])
                    for m in methods:  # PWCCA weights by one view: the mean of both directions
                        between[m][r, layer, p] = 1.0 - ((p_ab + p_ba) / 2 if m == "pwcca" else c)
            for g, x in states.items():
                if g not in previous:
                    continue
                for k, mask in enumerate(masks.values()):
                    sel = idx[mask[idx]]
                    if len(sel) < min_ratio * x.shape[1]:
                        continue
                    va = View(previous[g][sel], epsilon=epsilon, min_ratio=min_ratio)
                    vb = View(x[sel], epsilon=epsilon, min_ratio=min_ratio)
                    for m in methods:
                        change[m][g][r, layer - 1, k] = 1.0 - fns[m](va, vb)
        previous = states
    return {
        "first": replicates.start,
        "replicates": R,
        "pairs": pairs,
        "between": {m: v.tolist() for m, v in between.items()},
        "change": {m: {g: v.tolist() for g, v in per.items()} for m, per in change.items()},
    }


def summarise_replicates(blocks: list[dict[str, Any]], *, level: float = 0.95) -> dict[str, Any]:
    """:func:`bootstrap_distances`'s result from blocks of :func:`bootstrap_replicates`
    (any order: they are put in replicate order; a block without replicates is skipped)."""
    blocks = sorted((b for b in blocks if b["replicates"]), key=lambda b: b["first"])
    if not blocks:
        raise ValueError("summarise_replicates: no replicates; ask for similarity.bootstrap >= 1")
    methods = list(blocks[0]["between"])

    def stack(get) -> np.ndarray:
        return np.concatenate([np.asarray(get(b), dtype=float) for b in blocks], axis=0)

    between = {m: stack(lambda b: b["between"][m]) for m in methods}
    change = {m: {g: stack(lambda b: b["change"][m][g]) for g in blocks[0]["change"][m]} for m in methods}
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def bounds(x: np.ndarray) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: bins too small
            return np.moveaxis(np.nanpercentile(x, q, axis=0), 0, -1).tolist()

    def mean(x: np.ndarray) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(x, axis=0).tolist()

    return {
        "pairs": [tuple(p) for p in blocks[0]["pairs"]],
        "replicates": sum(b["replicates"] for b in blocks),
        "between": {m: bounds(v) for m, v in between.items()},
        "change": {m: {g: bounds(v) for g, v in per.items()} for m, per in change.items()},
        "between_mean": {m: mean(v) for m, v in between.items()},
        "change_mean": {m: {g: mean(v) for g, v in per.items()} for m, per in change.items()},
    }


def centre_intervals(bounds, means, estimates) -> list:
    """Percentile ``bounds`` (..., 2) moved by ``estimates - means`` (...): the bootstrap
    interval placed around the estimate (its spread from the replicates, its location from
    the estimate; Efron & Tibshirani 1993, ch. 10: mean(replicates) - estimate is the
    bootstrap's bias estimate). NaN where either is NaN."""
    shift = np.asarray(estimates, dtype=float) - np.asarray(means, dtype=float)
    return (np.asarray(bounds, dtype=float) + shift[..., None]).tolist()


def adjacent_change(
    states: list[np.ndarray],
    masks: dict[str, np.ndarray],
    *,
    methods: list[str],
    epsilon: float,
    min_ratio: float,
    name: str,
) -> tuple[dict[str, list[list[float]]], list[str]]:
    """Distance between layers n and n + 1 on each subset of occurrences.

    ``states[layer]`` (n, d) for layers 0..L-1 on the same occurrences;
    ``masks`` (n,) bool per subset (a frequency bin, a POS group). Returns
    ``{method: (L - 1, subsets) nested list}`` with NaN where a subset has
    fewer than ``min_ratio x d`` occurrences (each such subset named in the
    notes), and the notes.
    """

    fns = {"pwcca": pwcca, "cka": cka}
    L = len(states)
    out = {m: np.full((L - 1, len(masks)), np.nan) for m in methods}
    notes = []
    for b, (label, mask) in enumerate(masks.items()):
        if mask.sum() < min_ratio * states[0].shape[1]:
            notes.append(f"change {name} {label}: {int(mask.sum())} occurrences < {min_ratio:g} x d; left as NaN")
            continue
        vs = [
            View(s[mask], name=f"{name} layer {i} {label}", epsilon=epsilon, min_ratio=min_ratio)
            for i, s in enumerate(states)
        ]
        for layer in range(L - 1):
            for m in methods:
                out[m][layer, b] = 1.0 - fns[m](vs[layer], vs[layer + 1])
    return {m: v.tolist() for m, v in out.items()}, notes


def equal_size_bins(freq_rank: np.ndarray, *, bins: int) -> np.ndarray:
    """Bin index (n,) of each occurrence for ``bins`` frequency bins of equal size.

    The occurrences with a rank (``freq_rank`` >= 1; 1 = most frequent type) are
    sorted by rank, ties in their order along the axis, and cut into ``bins``
    consecutive groups whose sizes differ by at most one (occurrence i of m goes to
    bin floor(i * bins / m)); a type whose occurrences straddle a cut is split
    between two bins. Occurrences without a rank (0) get -1. PWCCA and CKA distances
    depend on the number of occurrences compared (CCA fits closer on fewer), so bins of
    one size make the distances of frequent and rare tokens comparable (Voita et al.'s
    rank bins hold 19,026 (ranks 1-10) to 3,575 (2500-5000) occurrences of the test
    books; ``docs/metrics.md``).
    """
    freq_rank = np.asarray(freq_rank)
    if bins < 1:
        raise ValueError(f"equal_size_bins: bins must be >= 1, got {bins} (metrics.similarity.equal_bins)")
    ranked = np.flatnonzero(freq_rank > 0)
    order = ranked[np.argsort(freq_rank[ranked], kind="stable")]
    out = np.full(len(freq_rank), -1, dtype=np.int64)
    out[order] = np.arange(len(order), dtype=np.int64) * bins // max(1, len(order))
    return out


def bin_sizes(freq_rank: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """Per bin: occurrences ``n``, distinct ranks (= types) ``types`` and the rank range
    ``rank_lo`` .. ``rank_hi`` - 1 (0, 0 for an empty bin)."""
    ranks = [np.asarray(freq_rank)[m] for m in masks.values()]
    return {
        "n": [int(len(r)) for r in ranks],
        "types": [int(len(np.unique(r))) for r in ranks],
        "rank_lo": [int(r.min()) if len(r) else 0 for r in ranks],
        "rank_hi": [int(r.max()) + 1 if len(r) else 0 for r in ranks],
    }
