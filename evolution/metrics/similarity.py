"""PWCCA (Morcos, Raghu & Bengio, 2018) and linear CKA (Kornblith et al., 2019).

A *view* is one layer's representations of a fixed set of occurrences,
shape (n, d). :class:`View` centres it and factorises it once (thin SVD),
so that comparing V views pairwise costs V factorisations plus a small
(r x r) SVD per pair, not a factorisation per pair (METHODS.md 4).

Distances are ``1 - similarity``: 0 for identical views, invariant to
rotations and isotropic scaling of either view.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pair_similarity", "View", "pwcca", "cka", "pwcca_distance", "cka_distance", "MIN_RATIO"]

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

    Attributes
    ----------
    basis_ : (n, r) orthonormal basis of the column space (r = numerical rank)
    coords_ : (r, d) the centred x in that basis, x = basis_ @ coords_ (= S V^T of its SVD,
        up to the dropped directions)
    singular_ : (r,) the kept singular values
    gram_norm_ : ||x^T x||_F, for CKA

    Only the (n, r) basis is kept per occurrence, not x itself: comparing many
    views (every layer of every model) holds half the memory.
    """

    def __init__(self, x: np.ndarray, *, epsilon: float = 1e-6, min_ratio: float = MIN_RATIO, name: str = "view"):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"{name}: expected (occurrences, feature), got shape {x.shape}")
        n, d = x.shape
        if n < min_ratio * d:
            raise ValueError(f"{name}: {n} occurrences for {d} dimensions; PWCCA/CKA need at least "
                             f"{min_ratio:g} x d = {int(np.ceil(min_ratio * d))} (use more sentences, or "
                             "lower metrics.similarity.min_ratio knowingly)")
        self.name = name
        u, s, vt = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
        keep = s > epsilon * (s[0] if len(s) and s[0] > 0 else 1.0)
        if not keep.any():
            raise ValueError(f"{name}: the representations are constant over occurrences")
        self.basis_ = u[:, keep]
        self.singular_ = s[keep]
        self.coords_ = s[keep, None] * vt[keep]
        self.gram_norm_ = float(np.sqrt((s ** 4).sum()))  # ||X^T X||_F = sqrt(sum sigma^4)

    @property
    def n(self) -> int:
        return self.basis_.shape[0]


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
    _check(a, b)
    m_ab = a.basis_.T @ b.basis_
    u, rho, vt = np.linalg.svd(m_ab, full_matrices=False)
    k = len(rho)
    rho = np.clip(rho, 0, 1)

    def weighted(directions: np.ndarray, coords: np.ndarray) -> float:
        alpha = np.abs(directions @ coords).sum(axis=1)
        return float(np.clip((alpha * rho).sum() / alpha.sum(), 0.0, 1.0))

    cross = np.linalg.norm(a.singular_[:, None] * m_ab * b.singular_[None, :]) ** 2
    return (weighted(u[:, :k].T, a.coords_), weighted(vt[:k], b.coords_),
            float(np.clip(cross / (a.gram_norm_ * b.gram_norm_), 0.0, 1.0)))


def pwcca_distance(a: View, b: View) -> float:
    return 1.0 - pwcca(a, b)


def cka_distance(a: View, b: View) -> float:
    return 1.0 - cka(a, b)
