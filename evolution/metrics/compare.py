"""What an intervention does to each layer: two runs' states of the same tokens compared layer
by layer (a clean run and a patched or ablated one; two models on the same sentences).

Per layer: the PWCCA distance (weights from run ``a``, the reference; Morcos et al. 2018) and
the linear CKA distance (Kornblith et al. 2019) between the runs' states of the same
occurrences; the change in MI with the input token (k-means clusters, Voita et al. 2019, sec.
4) and in the same-token rate of the nearest neighbours (sec. 5), b minus a. Every number has a
percentile interval over resamples of whole sentences, the same resamples for both runs
(paired: a resample's change is b's value minus a's on the same sentences), placed around the
estimate (:func:`evolution.metrics.mi.centred_interval`: a resample repeats sentences, which
biases CCA and plug-in MI; the shift removes that bias, Efron & Tibshirani 1993, ch. 10).

MI's interval holds a second error: k-means finds another optimum when the data move a little,
so a change of states far too small to alter what they say about the token moves a single
restart's MI by several hundredths of a nat. The spread over ``restarts`` (standard error of the
difference of two means) is added in quadrature to the bootstrap's half-widths
(:func:`widened`); with it, states perturbed by noise at 1e-4 of their spread get an interval
that covers 0 (``tests/test_activations.py``).

Identical states (a layer below the intervention) have distance 0 and change 0 by definition;
they are reported as exactly 0 with the interval [0, 0], without the SVD's rounding.
"""

from __future__ import annotations

import logging

import numpy as np

from evolution.metrics.mi import bootstrap_mi, centred_interval, kmeans_labels, mutual_information
from evolution.metrics.neighbors import bootstrap_replicates, knn, same_label_per_query
from evolution.metrics.resample import sentence_draws
from evolution.metrics.similarity import View, cka_distance, pwcca_distance

__all__ = ["compare_layer", "MEASURES"]

logger = logging.getLogger(__name__)

#: the measures of :func:`compare_layer`, each with an interval
MEASURES = ("pwcca_distance", "cka_distance", "mi_change", "same_token_change")


def _distances(xa: np.ndarray, xb: np.ndarray, *, epsilon: float, min_ratio: float) -> tuple[float, float]:
    va = View(xa, epsilon=epsilon, min_ratio=min_ratio, name="a")
    vb = View(xb, epsilon=epsilon, min_ratio=min_ratio, name="b")
    return pwcca_distance(va, vb), cka_distance(va, vb)


def _mi(x: np.ndarray, labels: np.ndarray, *, k: int, restarts: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """MI of each k-means restart (seed ``seed + r``) and the restarts' clusters."""
    clusterings = [kmeans_labels(x, k=k, seed=seed + r) for r in range(restarts)]
    return np.array([mutual_information(labels, c) for c in clusterings]), clusterings


def widened(interval: list[float], estimate: float, se: float, level: float) -> list[float]:
    """``interval`` around ``estimate`` with each half-width ``h`` made ``sqrt(h^2 + (z se)^2)``
    (z the normal quantile of ``level``): a second, independent source of error added in quadrature."""
    from scipy.stats import norm

    extra = float(norm.ppf(0.5 + level / 2)) * se
    lo, hi = estimate - interval[0], interval[1] - estimate
    return [estimate - float(np.hypot(lo, extra)), estimate + float(np.hypot(hi, extra))]


def compare_layer(
    xa: np.ndarray,
    xb: np.ndarray,
    *,
    token_id: np.ndarray,
    sentence: np.ndarray,
    mi_rows: np.ndarray,
    k: int,
    neighbors: int = 10,
    restarts: int = 5,
    bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
    epsilon: float = 1e-6,
    min_ratio: float = 1.0,
) -> dict[str, float | list[float]]:
    """One layer of two runs: ``xa``, ``xb`` (n, d_a), (n, d_b) the states of the same n
    occurrences, ``token_id`` and ``sentence`` (n,) theirs; ``mi_rows`` (n,) bool the
    occurrences of MI (the frequent types). ``k``: MI's clusters (``restarts`` k-means runs, seeds
    ``seed`` ..; at least 2, so that their spread enters MI's interval); ``neighbors``: the k of the
    same-token rate (the query itself excluded). Returns each measure of :data:`MEASURES` and,
    under ``<measure>_interval``, its ``[low, high]``; beside them the runs' own values
    (``mi_a``, ``mi_b``, ``same_token_a``, ``same_token_b``)."""
    if restarts < 2:
        raise ValueError(
            f"restarts={restarts}: MI's change needs at least 2 k-means restarts (their spread is part of its error)"
        )
    xa, xb = np.asarray(xa, dtype=np.float64), np.asarray(xb, dtype=np.float64)
    if xa.shape[0] != xb.shape[0] or len(token_id) != xa.shape[0] or len(sentence) != xa.shape[0]:
        raise ValueError(f"the runs' states have {xa.shape[0]} and {xb.shape[0]} rows, tokens {len(token_id)}")
    same = xa.shape == xb.shape and np.array_equal(xa, xb)
    out: dict[str, float | list[float]] = {}
    # PWCCA / CKA: each replicate redoes the views on the rows of the sentences it draws
    if same:
        out.update(pwcca_distance=0.0, cka_distance=0.0, pwcca_distance_interval=[0.0, 0.0])
        out["cka_distance_interval"] = [0.0, 0.0]
    else:
        p, c = _distances(xa, xb, epsilon=epsilon, min_ratio=min_ratio)
        _, group = np.unique(sentence, return_inverse=True)
        rows_of = [np.flatnonzero(group == g) for g in range(int(group.max()) + 1)]
        reps = []
        for draw in sentence_draws(len(rows_of), replicates=bootstrap, seed=seed):
            rows = np.concatenate([rows_of[g] for g in draw])
            try:
                reps.append(_distances(xa[rows], xb[rows], epsilon=epsilon, min_ratio=min_ratio))
            except ValueError:  # a resample with too few distinct rows: left out
                continue
        boot = np.array(reps) if reps else np.full((1, 2), np.nan)
        out.update(pwcca_distance=p, cka_distance=c)
        out["pwcca_distance_interval"] = centred_interval(boot[:, 0], p, level)
        out["cka_distance_interval"] = centred_interval(boot[:, 1], c, level)
    # MI with the token: the same k-means seeds for both runs, paired sentence resamples; the
    # interval also holds the clustering's own error (a k-means optimum moves with a small change
    # of the data: the spread over restarts, its standard error over the mean of `restarts`)
    labels, sent = token_id[mi_rows], sentence[mi_rows]
    per_a, ca = _mi(xa[mi_rows], labels, k=k, restarts=restarts, seed=seed)
    per_b, cb = (per_a, ca) if same else _mi(xb[mi_rows], labels, k=k, restarts=restarts, seed=seed)
    mi_a, mi_b = float(per_a.mean()), float(per_b.mean())
    ra = bootstrap_mi(labels, ca, sent, replicates=bootstrap, seed=seed)["mi"].mean(axis=1)
    rb = ra if same else bootstrap_mi(labels, cb, sent, replicates=bootstrap, seed=seed)["mi"].mean(axis=1)
    out.update(mi_a=mi_a, mi_b=mi_b, mi_change=mi_b - mi_a)
    if same:
        out["mi_change_interval"] = [0.0, 0.0]
    else:
        se = float(np.sqrt((per_a.var(ddof=1) + per_b.var(ddof=1)) / restarts)) if restarts > 1 else 0.0
        out["mi_change_interval"] = widened(centred_interval(rb - ra, mi_b - mi_a, level), mi_b - mi_a, se, level)
    # same-token rate of the nearest neighbours; resamples as the neighbours analysis draws them
    qa = same_label_per_query(knn(xa, k=neighbors), token_id)
    qb = qa if same else same_label_per_query(knn(xb, k=neighbors), token_id)
    sa, sb = float(np.nanmean(qa)), float(np.nanmean(qb))
    out.update(same_token_a=sa, same_token_b=sb, same_token_change=sb - sa)
    diff = bootstrap_replicates(qb - qa, sentence=sentence, n_boot=bootstrap, seed=seed)
    out["same_token_change_interval"] = [0.0, 0.0] if same else centred_interval(diff, sb - sa, level)
    return out
