"""What an intervention does to each layer: two runs' states of the same tokens compared layer
by layer (a clean run and a patched or ablated one; two models on the same sentences).

Per layer: the PWCCA distance (weights from run ``a``, the reference; Morcos et al. 2018) and
the linear CKA distance (Kornblith et al. 2019) between the runs' states of the same
occurrences; the change in MI with the input token (k-means clusters, Voita et al. 2019, sec.
4) and in the same-token rate of the nearest neighbours (sec. 5), b minus a. Every number has a
percentile interval over resamples of whole sentences, the same resamples for both runs
(paired: a resample's change is b's value minus a's on the same sentences), placed around the
estimate (:func:`evolution.metrics.mi.centred_interval`: a resample repeats sentences, which
biases CCA and plug-in MI; the shift removes that bias, Efron & Tibshirani 1993, ch. 10). The
distances and MI draw sentences with replacement; the same-token change draws half of them
without (below).

MI's interval holds a second error: k-means finds another optimum when the data move a little,
so a change of states far too small to alter what they say about the token moves a single
restart's MI by several hundredths of a nat. The spread over ``restarts`` (standard error of the
difference of two means) is added in quadrature to the bootstrap's half-widths
(:func:`widened`); with it, states perturbed by noise at 1e-4 of their spread get an interval
that covers 0 (``tests/test_activations.py``).

The same-token rate is not an average of independent sentences' values: a row's state decides
whether it is among the neighbours of queries in other sentences, so under independent noise in
the two runs the per-query changes of different sentences move together, and a sentence
bootstrap of them with the whole data's neighbours held fixed misses that part. It did: under a
null of the same signal plus independent noise in each run (true change 0), that interval
covered 0 in 151 of 200 repetitions (Clopper-Pearson 95%: 0.69-0.81) at 0.60 of the spread of
the changes (half-width over 1.96 sd; ``tests/test_compare_calibration.py``). Each replicate
therefore keeps half of the S sentences (m = S // 2, without replacement: no row repeats) and
searches every kept row's neighbours again among the kept rows, for both runs; the changes'
spread over half-samples, times sqrt(m / (S - m)), is the delete-d jackknife's (d = S - m; Shao
& Wu 1989, Ann. Statist. 17, 1176-1197; Shao & Tu 1995, sec. 2.3: consistent for sample
quantiles and other statistics that are not smooth, where the delete-1 jackknife is not), and
its percentile interval is placed around the estimate (:func:`same_token_change`). On the same
null it covered 0 in 186 of 200 (0.89-0.96) at 0.94 of the spread; on the five set-ups of
``benchmarks/compare_calibration.py`` (``results/method-checks/compare_calibration.json``:
800-3,100 occurrences, d = 16 and 32, 5 and 10 neighbours, rates 0.31-0.59) 186-194 of 200 at
0.94-1.08, where the fixed neighbours gave 144-160 at 0.57-0.67. The delete-1 jackknife's
pseudo-values (each row's part as a neighbour of the other queries added to its own change) were
measured there too: 192-197 of 200, but 1.05-1.26 of the spread (the delete-1 jackknife
overstates a variance with pairwise terms, Efron & Stein 1981). A search per replicate would
cost one kNN search each; instead each row's 4 k + 16 nearest rows are ranked once by the
neighbours' rule (:func:`ranked_neighbors`) and a half-sample takes each kept query's first k
kept rows among them (a query with fewer than k kept among them is ranked again among every
row): the same neighbours as a search of the kept rows, by the same rule. On 5,000 occurrences x
64 features (10 neighbours, 200 replicates, one thread) the same-token part takes 1.1 s where the
fixed neighbours took 0.26 s, and :func:`compare_layer` 4.7 s where it took 3.8 s.

Identical states (a layer below the intervention) have distance 0 and change 0 by definition;
they are reported as exactly 0 with the interval [0, 0], without the SVD's rounding.
"""

from __future__ import annotations

import logging

import numpy as np

from evolution.metrics.mi import bootstrap_mi, centred_interval, kmeans_labels, mutual_information
from evolution.metrics.neighbors import knn, squared_distances
from evolution.metrics.resample import sentence_draws
from evolution.metrics.similarity import View, cka_distance, pwcca_distance

__all__ = ["compare_layer", "same_token_change", "ranked_neighbors", "half_samples", "MEASURES", "RANKED"]

logger = logging.getLogger(__name__)

#: the measures of :func:`compare_layer`, each with an interval
MEASURES = ("pwcca_distance", "cka_distance", "mi_change", "same_token_change")
#: (a, b): each query's a k + b nearest rows are ranked once for the half-samples, which keep
#: about half of them (fewer than k kept: P(Binomial(a k + b, 1/2) < k), 1e-6 at k = 5, 1e-7 at
#: k = 10, for rows of independent sentences); a query left with fewer than k is ranked again
RANKED = (4, 16)


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
    same-token rate (the query itself excluded); ``bootstrap``: the replicates of every interval
    (for the same-token change, half-samples: :func:`same_token_change`). Returns each measure of :data:`MEASURES` and,
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
    # same-token rate of the nearest neighbours: the change's interval from half-samples of the
    # sentences with the neighbours searched again in each (:func:`same_token_change`)
    st = same_token_change(
        xa,
        xb,
        token_id=token_id,
        sentence=sentence,
        neighbors=neighbors,
        replicates=bootstrap,
        level=level,
        seed=seed,
    )
    return {**out, **st}


def ranked_neighbors(x: np.ndarray, k: int) -> np.ndarray:
    """(n, min(k, n - 1)) each row's k nearest other rows of ``x`` (n, d), nearest first, in the
    order of the neighbours' stated rule (:func:`evolution.metrics.neighbors.exact_knn`: float64
    squared distance from the float32 rows, ties by the smaller index): its first j columns are
    the set of ``knn(x, k=j)``."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    nb = knn(x32, k=k)
    dist = np.empty(nb.shape)
    step = max(1, 2**21 // max(1, nb.shape[1] * x32.shape[1]))  # 16 MiB of float64 differences
    for a in range(0, len(nb), step):
        dist[a : a + step] = squared_distances(x32[a : a + step, None, :], x32[nb[a : a + step]])
    return np.take_along_axis(nb, np.lexsort((nb, dist), axis=1), axis=1)


def _ranking(x32: np.ndarray, i: int, length: int) -> np.ndarray:
    """The first ``length`` other rows of ``x32`` in row i's order of the rule (all rows: ``length`` >= n - 1)."""
    n, d = x32.shape
    dist = np.empty(n)
    step = max(1, 2**21 // max(1, d))
    for a in range(0, n, step):
        dist[a : a + step] = squared_distances(x32[i], x32[a : a + step])
    order = np.lexsort((np.arange(n), dist))
    return order[order != i][:length]


def half_samples(n_sentences: int, *, replicates: int, seed: int) -> np.ndarray:
    """(replicates, n_sentences) bool: the sentences half-sample r keeps, the first
    ``n_sentences // 2`` of ``np.random.default_rng([seed, r]).permutation(n_sentences)``."""
    keep = np.zeros((replicates, n_sentences), dtype=bool)
    for r in range(replicates):
        keep[r, np.random.default_rng([seed, r]).permutation(n_sentences)[: n_sentences // 2]] = True
    return keep


class _Rates:
    """One run's same-token rate on the rows of any set of sentences, its neighbours searched
    among those rows only (by the rule), from each row's ranked nearest rows of the whole."""

    def __init__(self, x: np.ndarray, token_id: np.ndarray, k: int):
        self.x32 = np.ascontiguousarray(x, dtype=np.float32)
        self.k, self.token_id = k, token_id
        n = len(self.x32)
        self.ranked = ranked_neighbors(self.x32, min(n - 1, RANKED[0] * k + RANKED[1]))
        self.match = token_id[self.ranked] == token_id[:, None]
        self.longer: dict[int, np.ndarray] = {}  # rows whose ranked rows ran short: longer rankings

    def whole(self) -> float:
        """The rate of every row: each row's share of its k nearest others with its token."""
        k = min(self.k, len(self.x32) - 1)
        return float(self.match[:, :k].mean())

    def of(self, kept: np.ndarray) -> float:
        """The rate of the rows ``kept`` (n,) bool among themselves; NaN with fewer than 2."""
        rows = np.flatnonzero(kept)
        k = min(self.k, len(rows) - 1)
        if k < 1:
            return float("nan")
        inside = kept[self.ranked[rows]]
        take = inside & (np.cumsum(inside, axis=1) <= k)
        hits = (take & self.match[rows]).sum(axis=1).astype(np.float64)
        for j in np.flatnonzero(take.sum(axis=1) < k):  # fewer than k of its ranked rows kept
            i = int(rows[j])
            if i not in self.longer:
                self.longer[i] = _ranking(self.x32, i, 8 * self.ranked.shape[1])
            order = self.longer[i][kept[self.longer[i]]][:k]
            if len(order) < k:  # beyond even those: every row
                order = _ranking(self.x32, i, len(self.x32))
                order = order[kept[order]][:k]
            hits[j] = np.count_nonzero(self.token_id[order] == self.token_id[i])
        return float(hits.sum() / (k * len(rows)))


def same_token_change(
    xa: np.ndarray,
    xb: np.ndarray,
    *,
    token_id: np.ndarray,
    sentence: np.ndarray,
    neighbors: int = 10,
    replicates: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float | list[float]]:
    """The same-token rate of the nearest neighbours in runs ``xa`` and ``xb`` (n, d) of the same
    occurrences (``token_id``, ``sentence`` (n,)): each occurrence's share of its ``neighbors``
    nearest others (by the rule of :func:`evolution.metrics.neighbors.exact_knn`) that are the
    same token, averaged; ``same_token_a``, ``same_token_b``, ``same_token_change`` (b minus a)
    and its ``level`` interval ``same_token_change_interval`` from ``replicates`` half-samples of
    the S sentences (:func:`half_samples`, the same for both runs), the neighbours searched again
    among each half's rows: the change on half-sample r, d_r, made mean(d) + sqrt(m / (S - m))
    (d_r - mean(d)) (m = S // 2 kept; the delete-d jackknife's scale, 1 at m = S / 2), and their
    central percentile interval placed around the estimate (:func:`evolution.metrics.mi.centred_interval`).
    Identical runs: change 0, interval [0, 0]."""
    token_id = np.asarray(token_id)
    a = _Rates(xa, token_id, neighbors)
    same = np.shape(xa) == np.shape(xb) and np.array_equal(xa, xb)
    b = a if same else _Rates(xb, token_id, neighbors)
    sa, sb = a.whole(), b.whole()
    out: dict[str, float | list[float]] = {"same_token_a": sa, "same_token_b": sb, "same_token_change": sb - sa}
    if same:
        out["same_token_change_interval"] = [0.0, 0.0]
        return out
    _, group = np.unique(np.asarray(sentence), return_inverse=True)
    n_sent = int(group.max()) + 1
    m = n_sent // 2
    if m < 1 or not replicates:
        out["same_token_change_interval"] = [float("nan"), float("nan")]
        return out
    diff = np.array(
        [b.of(keep[group]) - a.of(keep[group]) for keep in half_samples(n_sent, replicates=replicates, seed=seed)]
    )
    mean = float(np.nanmean(diff)) if np.isfinite(diff).any() else 0.0
    spread = mean + np.sqrt(m / (n_sent - m)) * (diff - mean)
    out["same_token_change_interval"] = centred_interval(spread, sb - sa, level)
    return out
