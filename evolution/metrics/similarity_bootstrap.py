"""PWCCA and linear CKA of sentence resamples from weighted cross-products.

The definition (:func:`evolution.metrics.similarity.bootstrap_replicates`): replicate ``r``
draws whole sentences with replacement, stacks the drawn sentences' rows and compares the
resampled views as the estimates compare the originals, a thin SVD of every (rows, d)
view. A resample is only integer weights w on the original occurrences (how often each
one's sentence was drawn), and PWCCA and CKA depend on a view only through its weighted
mean and cross-products. So each view enters once, in the orthonormal basis Q (n, r) of
its full-data SVD, x - mean = Q S V^T (:class:`~evolution.metrics.similarity.View`), and a
replicate needs

* G = Q^T W Q - N m m^T (r, r) and the cross terms Qa^T W Qb - N ma mb^T: per-sentence
  products contracted with the replicate's counts (:class:`~evolution.metrics.resample.SentenceSums`),
* a Cholesky factor G = L L^T, which makes Q~ L^-T an orthonormal basis of the resample
  (Q~: Q centred about the replicate's mean, under the weights), in which the resample is
  B V^T with B = L^T S: the SVD of the small B gives the resample's singular values, hence
  the definition's rank cut-off (skipped where a bound shows every direction kept), and its
  basis and coordinates (the PWCCA weights) (:func:`whiten`);
* the canonical correlations from the two bases' product L_a^-1 G_ab L_b^-T, and CKA from the
  same product and ||S G S||_F.

Working in the basis Q rather than on the raw states keeps G near the identity (its
condition is that of the resample, not the square of the data's), so the replicates equal
the definition's to float64 rounding (``tests/test_similarity_bootstrap.py``: within 1e-8).

Directions: the view keeps spare directions down to :data:`MARGIN` x its smallest kept
singular value (``View(margin=...)``), which a replicate keeps or drops by its own cut-off; a
direction below the margin in the full data is too small to move a replicate's kept ones. A replicate
whose G is singular (a direction carried only by sentences it did not draw) is computed by the
definition (an SVD of its resampled rows), as are the pairs it is in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from evolution.metrics.resample import SentenceSums, sentence_counts
from evolution.metrics.similarity import View, pair_similarity, similarities

logger = logging.getLogger(__name__)

__all__ = [
    "MARGIN",
    "Whitened",
    "whiten",
    "replicate_similarity",
    "between_replicates",
    "change_with_replicates",
    "pair_with_replicates",
]

#: Spare directions: a view keeps those above MARGIN x its smallest kept singular value s_k. A
#: direction of singular value s left out of the basis moves a resample's kept subspace by about
#: (s / s_k)^2 (it enters the resample's scatter squared), so below this margin by less than 1e-10.
#: Measured on the shipped models' states: post-LayerNorm layers keep every direction down to
#: about 1e-2 of the largest and hold one near 3e-8 (the LayerNorm's hyperplane in float32),
#: which stays out; layer 0 of the frequent-token bins keeps directions near 1e-6 beside float32
#: rounding near 1e-8, which must come in (leaving it out moved PWCCA by 1e-7).
MARGIN = 1e-5


@dataclass
class Whitened:
    """One view in one replicate, in an orthonormal basis of the directions the replicate keeps:
    ``left`` (r, k) maps the view's basis Q (centred under the replicate's weights) to it
    (basis = Q~ left), ``coords`` (k, d) is the resample in that basis (the definition's
    ``coords_`` up to a rotation), ``gram`` (k, k) = coords coords^T and ``norm`` =
    ||X~^T W X~||_F (CKA's normaliser)."""

    left: np.ndarray
    coords: np.ndarray
    gram: np.ndarray
    norm: float


def whiten(view: View, gram: np.ndarray, *, epsilon: float) -> Whitened | None:
    """:class:`Whitened` from the replicate's centred weighted Gram ``gram`` (r, r) of
    ``view.basis_all_``, keeping the directions whose singular value in the resample is above
    ``epsilon`` x its largest (the cut-off of :class:`~evolution.metrics.similarity.View`);
    None where ``gram`` is singular (a direction carried only by sentences the replicate did
    not draw): then the definition must compute it.

    With G = L L^T, the resample is X~ = (Q~ L^-T) B V^T with B = L^T S (r, r) and Q~ L^-T
    orthonormal, so the SVD of B gives the resample's singular values (to the same absolute
    precision as an SVD of its rows) and its basis. That SVD is skipped where a bound shows that
    every direction is kept: lambda_min(G) s_min^2 > epsilon^2 lambda_max(G) s_max^2, with
    lambda_min(G) >= 1 / ||L^-1||_F^2 and lambda_max(G) <= trace(G); then the basis is Q~ L^-T."""
    s = view.singular_all_
    try:
        chol = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        return None
    linv = solve_triangular(chol, np.eye(len(s)), lower=True)
    norm = float(np.linalg.norm(s[:, None] * gram * s[None, :]))  # the scatter S G S in the basis V
    if 1.0 / np.sum(linv**2) * s[-1] ** 2 > epsilon**2 * np.trace(gram) * s[0] ** 2:
        coords = chol.T @ view.coords_all_
        return Whitened(left=linv.T, coords=coords, gram=coords @ coords.T, norm=norm)
    u, sigma, _ = np.linalg.svd(chol.T * s[None, :])
    keep = sigma > epsilon * sigma[0]
    u = u[:, keep]
    coords = (u.T @ chol.T) @ view.coords_all_
    return Whitened(left=linv.T @ u, coords=coords, gram=np.diag(sigma[keep] ** 2), norm=norm)


def replicate_similarity(a: Whitened, b: Whitened, gram_ab: np.ndarray) -> tuple[float, float, float]:
    """``(pwcca(a, b), pwcca(b, a), cka)`` of one replicate from the centred weighted cross
    term ``gram_ab`` (r_a, r_b) of the two views' bases."""
    m_ab = a.left.T @ gram_ab @ b.left  # the product of the two orthonormal bases
    cross = float(np.sum((a.gram @ m_ab) * (m_ab @ b.gram)))  # ||coords_a^T M coords_b||_F^2
    return similarities(m_ab, a.coords, b.coords, cross=cross, norm_a=a.norm, norm_b=b.norm)


def _definition(x: np.ndarray, y: np.ndarray, *, epsilon: float, min_ratio: float) -> tuple[float, float, float]:
    """``(pwcca(x, y), pwcca(y, x), cka)`` of resampled rows by the definition (two SVDs)."""
    return pair_similarity(View(x, epsilon=epsilon, min_ratio=min_ratio), View(y, epsilon=epsilon, min_ratio=min_ratio))


def _distances(values: tuple[float, float, float], methods: Sequence[str]) -> dict[str, float]:
    """1 - similarity per method; PWCCA the mean of both directions (what the bootstrap of
    same-layer distances bounds)."""
    p_ab, p_ba, c = values
    return {m: 1.0 - ((p_ab + p_ba) / 2 if m == "pwcca" else c) for m in methods}


def between_replicates(
    views: dict[int, dict[str, View]],
    *,
    sums: SentenceSums,
    draws: np.ndarray,
    pairs: list[tuple[str, str]],
    methods: Sequence[str],
    epsilon: float,
    min_ratio: float,
    states: Callable[[str, int], np.ndarray],
) -> dict[str, np.ndarray]:
    """Same-layer distances of model pairs in every replicate: ``{method: (R, layers, pairs)}``.

    ``views[layer][model]``: the full data's views (``margin`` :data:`MARGIN`) of the rows
    that ``sums`` groups by sentence; ``draws`` (R, sentences) the sentences each replicate
    draws (:func:`~evolution.metrics.resample.sentence_draws`);
    ``states(model, layer)`` (n, d) the rows themselves, read for a replicate that the
    definition must compute (:func:`whiten`). NaN where a pair is absent from a
    layer or a replicate has fewer than ``min_ratio`` x d rows."""
    counts = sentence_counts(draws, sums.n_groups)
    n_rep, n_layers = counts.shape[0], max(views) + 1
    out = {m: np.full((n_rep, n_layers, len(pairs)), np.nan) for m in methods}
    rows = sums.rows(counts)
    fallbacks = 0
    for layer, per_model in views.items():
        names = [g for g in dict.fromkeys(g for pair in pairs for g in pair) if g in per_model]
        if len(names) < 2:
            continue
        bases = [per_model[g].basis_all_ for g in names]
        blocks = {}  # (a, b) -> (R, r_a, r_b): the upper triangle of blocks, each model against itself and those after
        for i, g in enumerate(names):
            rest = np.hstack(bases[i:])
            gram, _ = sums.centred(bases[i], rest, counts)
            edges = np.cumsum([0] + [q.shape[1] for q in bases[i:]])
            for j, h in enumerate(names[i:]):
                blocks[(g, h)] = gram[:, :, edges[j] : edges[j + 1]]
        for r in range(n_rep):
            white = {g: whiten(per_model[g], blocks[(g, g)][r], epsilon=epsilon) for g in names}
            for p, (a, b) in enumerate(pairs):
                if a not in per_model or b not in per_model:
                    continue
                d = max(per_model[a].coords_all_.shape[1], per_model[b].coords_all_.shape[1])
                if rows[r] < min_ratio * d:
                    continue
                white_a, white_b = white[a], white[b]
                if white_a is None or white_b is None:
                    fallbacks += 1
                    idx = sums.resample_rows(draws[r])
                    values = _definition(
                        states(a, layer)[idx], states(b, layer)[idx], epsilon=epsilon, min_ratio=min_ratio
                    )
                else:
                    cross = blocks[(a, b)][r] if (a, b) in blocks else blocks[(b, a)][r].T
                    values = replicate_similarity(white_a, white_b, cross)
                for m, v in _distances(values, methods).items():
                    out[m][r, layer, p] = v
    if fallbacks:
        logger.info(
            "similarity bootstrap: %d replicate pair(s) computed from their resampled rows (a direction "
            "dropped or carried only by undrawn sentences)",
            fallbacks,
        )
    return out


def change_with_replicates(
    states: list[np.ndarray],
    masks: dict[str, np.ndarray],
    *,
    group: np.ndarray,
    draws: np.ndarray | None,
    methods: Sequence[str],
    epsilon: float,
    min_ratio: float,
    name: str,
) -> dict:
    """Distance between layers n and n + 1 on each subset of occurrences, and in each
    replicate: the estimates of :func:`~evolution.metrics.similarity.adjacent_change` and
    the replicates of :func:`~evolution.metrics.similarity.bootstrap_replicates` (its
    ``change``), from one set of views per (subset, layer).

    ``states[layer]`` (n, d); ``masks`` (n,) bool per subset; ``group`` (n,) each row's
    sentence index (0 .. S - 1); ``draws`` (R, S) the sentences each replicate draws
    (:func:`~evolution.metrics.resample.sentence_draws`), or None: no replicates.
    Returns ``estimate`` {method: (L - 1, subsets)}, ``replicates`` {method: (R, L - 1,
    subsets)} (NaN where a subset, or its resample, has fewer than ``min_ratio`` x d rows)
    and ``notes``."""
    n_layers, d = len(states), states[0].shape[1]
    n_rep = 0 if draws is None else draws.shape[0]
    n_groups = 0 if draws is None else draws.shape[1]
    counts = None if draws is None else sentence_counts(draws, n_groups)
    estimate = {m: np.full((n_layers - 1, len(masks)), np.nan) for m in methods}
    replicates = {m: np.full((n_rep, n_layers - 1, len(masks)), np.nan) for m in methods}
    notes, fallbacks = [], 0
    for k, (label, mask) in enumerate(masks.items()):
        if mask.sum() < min_ratio * d:
            notes.append(f"change {name} {label}: {int(mask.sum())} occurrences < {min_ratio:g} x d; left as NaN")
            continue

        def view(i: int, mask: np.ndarray = mask, label: str = label) -> View:
            return View(
                states[i][mask],
                name=f"{name} layer {i} {label}",
                epsilon=epsilon,
                min_ratio=min_ratio,
                margin=MARGIN if n_rep else 1.0,
            )

        # two layers' views at a time (layer, layer + 1): the bases of one subset's every layer
        # never coexist, which at paper size is most of the unit's memory
        bootstrap = bool(n_rep) and draws is not None and counts is not None  # (no draws: n_rep is 0)
        if bootstrap:
            assert counts is not None
            sums = SentenceSums(group[mask], n_groups=n_groups)
            rows = sums.rows(counts)
            where = np.flatnonzero(mask)
        white_prev: list[Whitened | None] = []
        cross_prev: np.ndarray | None = None
        current: View | None = view(0)
        for layer in range(n_layers):
            assert current is not None  # the step before made it (layer < n_layers)
            following = view(layer + 1) if layer + 1 < n_layers else None
            if following is not None:
                p_ab, _, c = pair_similarity(current, following)
                for m in methods:
                    estimate[m][layer, k] = 1.0 - (p_ab if m == "pwcca" else c)
            if not bootstrap:
                current = following
                continue
            assert counts is not None and draws is not None  # bootstrap says so
            q = current.basis_all_
            nxt = following.basis_all_ if following is not None else None
            both = q if nxt is None else np.hstack([q, nxt])
            gram, _ = sums.centred(q, both, counts)  # (R, r_l, r_l [+ r_l+1]): G_l and G_l,l+1
            del both
            r_l = q.shape[1]
            white = [
                whiten(current, gram[r, :, :r_l], epsilon=epsilon) if rows[r] >= min_ratio * d else None
                for r in range(n_rep)
            ]
            if layer:
                assert cross_prev is not None  # the previous layer had this one as its next
                for r in range(n_rep):
                    if rows[r] < min_ratio * d:
                        continue
                    white_a, white_b = white_prev[r], white[r]
                    if white_a is None or white_b is None:
                        fallbacks += 1
                        idx = where[sums.resample_rows(draws[r])]
                        values = _definition(
                            states[layer - 1][idx], states[layer][idx], epsilon=epsilon, min_ratio=min_ratio
                        )
                    else:
                        values = replicate_similarity(white_a, white_b, cross_prev[r])
                    for m in methods:
                        replicates[m][r, layer - 1, k] = 1.0 - (values[0] if m == "pwcca" else values[2])
            white_prev, cross_prev = white, (gram[:, :, r_l:] if nxt is not None else None)
            current = following
    if fallbacks:
        logger.info("change %s: %d replicate layer pair(s) computed from their resampled rows", name, fallbacks)
    return {"estimate": estimate, "replicates": replicates, "notes": notes}


def pair_with_replicates(
    x: np.ndarray, y: np.ndarray, *, group: np.ndarray, draws: np.ndarray | None, epsilon: float, min_ratio: float
) -> tuple[tuple[float, float, float], np.ndarray | None]:
    """``(pwcca(x, y), pwcca(y, x), cka)`` of two views of the same rows (n, d), and the same
    for each replicate of ``draws`` (R, S) over the rows' sentences ``group`` (n,) in
    ``0 .. S - 1``: (R, 3), NaN where a resample has fewer than ``min_ratio`` x d rows (None
    without ``draws``). As :func:`between_replicates` for one pair (token influence)."""
    vx = View(x, epsilon=epsilon, min_ratio=min_ratio, margin=MARGIN if draws is not None else 1.0)
    vy = View(y, epsilon=epsilon, min_ratio=min_ratio, margin=MARGIN if draws is not None else 1.0)
    estimate = pair_similarity(vx, vy)
    if draws is None:
        return estimate, None
    sums = SentenceSums(group, n_groups=draws.shape[1])
    counts = sentence_counts(draws, sums.n_groups)
    rows = sums.rows(counts)
    rx = vx.basis_all_.shape[1]
    gx, _ = sums.centred(vx.basis_all_, np.hstack([vx.basis_all_, vy.basis_all_]), counts)  # G_xx, G_xy
    gy, _ = sums.centred(vy.basis_all_, None, counts)
    out = np.full((len(draws), 3), np.nan)
    for r in range(len(draws)):
        if rows[r] < min_ratio * max(x.shape[1], y.shape[1]):
            continue
        wx, wy = whiten(vx, gx[r, :, :rx], epsilon=epsilon), whiten(vy, gy[r], epsilon=epsilon)
        if wx is None or wy is None:
            idx = sums.resample_rows(draws[r])
            out[r] = _definition(x[idx], y[idx], epsilon=epsilon, min_ratio=min_ratio)
        else:
            out[r] = replicate_similarity(wx, wy, gx[r, :, rx:])
    return estimate, out
