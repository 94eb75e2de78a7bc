"""PWCCA (Morcos, Raghu & Bengio, 2018) and linear CKA (Kornblith et al., 2019).

A *view* is one layer's representations of a fixed set of occurrences,
shape (n, d). :class:`View` centres it and factorises it once (thin SVD),
so that comparing V views pairwise costs V factorisations plus a small
(r x r) SVD per pair, not a factorisation per pair (``docs/metrics.md``).

Distances are ``1 - similarity``: 0 for identical views. CKA is invariant to rotations and
isotropic scaling of either view; PWCCA to isotropic scaling of either, and to rotations of the
view it does not weight by: it weights each canonical direction by its summed absolute
projections onto the weighting view's own units, which a rotation of that view changes
(Kornblith et al. 2019, Table 1; ``tests/test_properties.py``). Their bootstrap intervals over
sentences: :mod:`evolution.metrics.similarity_intervals`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# every name the module had before the split stays importable from here
from evolution.metrics.similarity_intervals import (
    bootstrap_distances,
    bootstrap_replicates,
    centre_intervals,
    summarise_replicates,
)

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
        if np.ndim(x) != 2:
            raise ValueError(f"{name}: expected (occurrences, feature), got shape {np.shape(x)}")
        n, d = np.shape(x)
        if n < min_ratio * d:
            raise ValueError(
                f"{name}: {n} occurrences for {d} dimensions; PWCCA/CKA need at least "
                f"{min_ratio:g} x d = {int(np.ceil(min_ratio * d))} (use more sentences, or "
                "lower metrics.similarity.min_ratio knowingly)"
            )
        from evolution.metrics import backend

        self.name = name
        # one float64 copy, centred in place (x - mean, as the same arithmetic), and the basis
        # taken as a prefix of u's columns: no transient copies of (n, d) float64 beyond xc and u
        xc = np.array(x, dtype=np.float64)
        xc -= xc.mean(axis=0)
        u, s, _ = thin_svd(xc)
        top = s[0] if len(s) and s[0] > 0 else 1.0
        keep = s > epsilon * top
        if not keep.any():
            raise ValueError(f"{name}: the representations are constant over occurrences")
        spare = s >= min(margin, 1.0) * s[keep][-1]  # a prefix of the sorted s, as keep is
        self.rank = int(keep.sum())
        self.basis_all_ = np.ascontiguousarray(u[:, : int(spare.sum())])
        del u
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
    rows at n = 74k, d = 128 (one GEMM instead of Householder reflections).

    Precision, against LAPACK's SVD of the same float64 rows (measured on spectra crowding
    GRAM_SHARE and the cut, d = 32 to 256): singular values within 1e-13 of the largest; the
    subspace of the directions above 1e-6 of the largest and the orthonormality of ``u`` within
    2e-10 (the Gram's rounding, 1e-16 / GRAM_SHARE^2, times a small factor; LAPACK's two drivers
    agree to 1e-12). PWCCA of :class:`View` s made with it equals the definition on a float64 SVD
    of the centred rows with the same cut (``epsilon`` x the largest singular value) within 1e-10,
    rank-deficient views included: repeated rows, low rank plus noise below, near and above the
    cut, and canonical directions mixing directions just above GRAM_SHARE with ones near the cut
    (at most 5e-11; without the removal of the large directions' part, up to 6e-9), and layers
    0-2 of the shipped MT, LM and MLM's frequency-rank bins, whose layer 0 repeats a few types'
    rows at rank 33 of 128 (at most 1.1e-13)
    (``tests/test_metrics.py::test_pwcca_of_rank_deficient_views_equals_the_plain_svd_definition``).
    Two conditions: the definition is computed in float64 (in float32, an SVD of the rows as
    stored, it is itself 1.6e-6 to 3e-5 off on the LM's layer 0 to 1 and up to 8e-3 the other
    way, weighted by layer 1), and no singular value lies
    within rounding of the cut (such a direction may be kept by one SVD and dropped by the
    other, which moves PWCCA by its weight). Directions with a zero singular value may be left
    out (k < d)."""
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
    u_big = backend.matmul(x, v[:, :k])
    u_big /= s_big
    if k == d:
        return u_big, s_big, v.T
    rest = backend.matmul(x, v[:, k:])
    rest -= backend.matmul(u_big, backend.tmatmul(u_big, rest))  # what the large directions left there
    u_small, s_small, w = np.linalg.svd(rest, full_matrices=False)
    u = np.hstack([u_big, u_small])
    s = np.concatenate([s_big, s_small])
    vt = np.vstack([v[:, :k].T, w @ v[:, k:].T])
    order = np.argsort(-s, kind="stable")
    if np.array_equal(order, np.arange(len(s))):  # already descending: no (n, d) copy
        return u, s, vt
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
    PWCCA = sum_i alpha_i rho_i. Not symmetric. Equals the definition on a float64 SVD of each
    view's centred rows with the views' cut within 1e-10, rank-deficient views included
    (:func:`thin_svd`).
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
    cross = float(np.linalg.norm(a.singular_[:, None] * m_ab * b.singular_[None, :]) ** 2)
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


def adjacent_change(
    states: list[np.ndarray],
    masks: dict[str, np.ndarray],
    *,
    methods: Sequence[str],
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
