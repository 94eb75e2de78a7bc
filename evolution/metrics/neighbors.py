"""Who are your neighbours? (Voita, Sennrich & Titov 2019, section 5; ``docs/metrics.md``).

For occurrences pooled from many token types: the share of each query's k
nearest neighbours (itself excluded) that are the same token. Within the
occurrences of one token type: the mean position distance to the neighbours,
and the share of neighbours with the same left / right neighbour token (or
any other per-occurrence annotation, such as POS), read between two bounds
that do not depend on the representation: the *chance* level (neighbours
drawn at random among the type's other occurrences) and the *ceiling* (a
representation that orders the type's occurrences perfectly by the
annotation). A query without a value (no left token at the start of a
sentence, no right token at its end: annotation < 0) is left out, not
counted as a miss.

Intervals: :func:`bootstrap_interval`, a cluster bootstrap over sentences.
"""

from __future__ import annotations

import logging
from typing import Literal, overload

import numpy as np

__all__ = [
    "knn",
    "exact_knn",
    "squared_distances",
    "same_label_rate",
    "same_label_per_query",
    "within_type_measures",
    "bootstrap_interval",
    "bootstrap_replicates",
    "sentence_draws",
    "percentile_interval",
    "normalized",
    "query_parts",
    "BOUNDS",
    "SPLIT_ALIGN",
    "MIN_SPLIT_WIDTH",
]

logger = logging.getLogger(__name__)

#: the representation-free bounds stored beside each within-type annotation rate
BOUNDS = ("chance", "ceiling")

Metric = Literal["euclidean", "cosine"]

#: a split exact search starts each part at a multiple of this many queries: the query block
#: of every exact route (faiss's flat search computes 4,096 queries at a time,
#: ``distance_compute_blas_query_bs`` in faiss/utils/distances.cpp; :func:`nearest`'s NumPy
#: block is 4,096, the torch route's 8,192), so each query's distances, hence its neighbours,
#: come from the same products as in one whole search
SPLIT_ALIGN = 8192
#: the narrowest rows whose split search equals the whole: faiss searches fewer than
#: ``distance_compute_blas_threshold`` / d queries (128,000 / d in faiss 1.15.1) without BLAS, whose
#: distances can differ in the last bit; a part of at least SPLIT_ALIGN queries of width >= 16 is
#: above it
MIN_SPLIT_WIDTH = 16


def _prepare(vectors: np.ndarray, metric: Metric) -> np.ndarray:
    x: np.ndarray = np.ascontiguousarray(vectors, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.where(norms > 0, norms, 1)
    elif metric != "euclidean":
        raise ValueError(f"metric must be 'euclidean' or 'cosine', not {metric!r}")
    return x


def knn(
    vectors: np.ndarray,
    *,
    k: int,
    metric: Metric = "euclidean",
    index: str = "exact",
    nprobe: int = 64,
    queries: tuple[int, int] | None = None,
) -> np.ndarray:
    """Indices (n, k) of each row's k nearest other rows of ``vectors`` (n, d); with ``queries``
    = (a, b) (exact only), those of rows a..b-1 among all rows, (b - a, k): the parts of
    :func:`query_parts` give the rows of one whole search.

    ``index="exact"`` is brute force (faiss's flat index, or NumPy without faiss:
    :func:`evolution.metrics.search.nearest`; the same neighbours as sklearn's
    ``NearestNeighbors(algorithm="brute")`` up to ties);
    ``index="ivf"`` an inverted-file index with ``sqrt(n)`` lists searched
    ``nprobe`` at a time (approximate; for large n). ``nprobe = 64`` is the
    smallest that reached recall 0.95 in ``benchmarks/metrics.py`` (100k x 256:
    recall 0.974, same-token rate within 0.0025 of exact; nprobe 32: 0.928),
    and there it was 2.4-3.4x *slower* than the exact flat index on 2 cores (two runs): keep
    ``exact`` unless n is far larger. A graph index was measured too (faiss
    HNSW, M = 32, same data): recall 0.957 needs efSearch 256 and then takes
    1.6x the exact time (build 14 s + search 41 s against 35.5 s), so it is
    not offered. Cosine distance is
    Euclidean distance between unit-normalised rows (same order).
    """
    from evolution.metrics.search import faiss_or_none

    x = _prepare(vectors, metric)
    n, d = x.shape
    if n < 2:
        raise ValueError("need at least 2 occurrences for nearest neighbours")
    k = min(k, n - 1)
    if index == "exact":
        lo, hi = (0, n) if queries is None else queries
        return exact_knn(x, lo=lo, hi=hi, k=k)
    if queries is not None:
        raise ValueError("knn: queries= (a part of the search) needs index='exact'")
    faiss = faiss_or_none()
    if faiss is None:
        raise ValueError("metrics.neighbors.index: ivf needs faiss (pip install faiss-cpu); use index: exact")
    if index == "ivf":
        nlist = max(1, int(np.sqrt(n)))
        idx = faiss.IndexIVFFlat(faiss.IndexFlatL2(d), d, nlist)
        idx.train(x)
        idx.nprobe = min(nprobe, nlist)
    else:
        raise ValueError(f"index must be 'exact' or 'ivf', not {index!r}")
    idx.add(x)
    _, found = idx.search(x, k + 1)
    return _drop_self(found, k)


#: candidates the fast float32 search returns beyond k + 1, for the exact distances to choose
#: among; enough that the k-th neighbour is certified for all but a few queries
CANDIDATE_MARGIN = 16


def squared_distances(queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The definition the neighbours follow: sum over features of (q - b)^2 in float64, of
    ``queries`` (..., d) and ``rows`` broadcast against them (..., d) -> (...). NumPy sums the last,
    contiguous axis pairwise in a fixed order: the same pair gives the same bits in any call."""
    diff = np.asarray(queries, dtype=np.float64) - np.asarray(rows, dtype=np.float64)
    return np.ascontiguousarray(np.square(diff)).sum(axis=-1)


def _duplicate_groups(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``x`` (n, d) with the same values: each row's group (n,), the rows sorted by group
    then index (n,), and each group's first place in that order and size ((g,), (g,))."""
    rows = np.ascontiguousarray(x + np.float32(0.0))  # -0.0 as 0.0: equal values, equal bytes
    _, group, size = np.unique(
        rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel(),
        return_inverse=True,
        return_counts=True,
    )
    group = group.ravel()
    order = np.argsort(group, kind="stable")
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    return group, order, np.stack([start, size])


def exact_knn(x: np.ndarray, *, lo: int, hi: int, k: int) -> np.ndarray:
    """Indices (hi - lo, k) of the k nearest other rows of ``x`` (n, d) float32 for rows lo..hi-1,
    each row's k in ascending index order, by the stated rule: the k other rows of smallest
    :func:`squared_distances` (float64, from the stored float32 values), ties by the smaller row
    index. The set is a function of ``x`` alone: not of the chunking of the queries, the batch, the
    process, the BLAS or its thread count, faiss or not (``docs/metrics.md``, "Ties").

    How: a row whose identical copies number k or more takes the k of smallest index (every other
    row is farther, at a distance > 0). The others take k + 1 + :data:`CANDIDATE_MARGIN`
    candidates from the fast float32 search (:func:`evolution.metrics.search.nearest`). With t the
    k-th smallest float32 distance and e the float32 route's rounding bound (:func:`_rounding`),
    a candidate below t - 2e is in, one above t + 2e out, and those between (the near-ties) are
    ranked by the rule; a query is settled when its candidates reach beyond t + 2e, otherwise its
    search is widened (4x the candidates, up to every row). ``tests/test_neighbors.py`` holds the
    result equal to a plain loop on rows with duplicates, exact and near ties, across query parts,
    thread counts and backends."""
    from evolution.metrics.search import nearest

    n, d = x.shape
    m = hi - lo
    out = np.empty((m, k), dtype=np.int64)
    if m == 0 or k == 0:
        return out
    group, order, (start, size) = _duplicate_groups(x)
    mine = group[lo:hi]
    copies = size[mine] - 1 >= k
    for i in np.flatnonzero(copies):
        members = order[start[mine[i]] : start[mine[i]] + k + 1]
        out[i] = members[members != lo + i][:k]
    norms = np.einsum("ij,ij->i", x, x).astype(np.float64)
    todo = np.flatnonzero(~copies)
    c = min(n, k + 1 + CANDIDATE_MARGIN)
    while len(todo):
        rows = lo + todo
        d32, cand = nearest(x, x[rows], c)
        is_self = cand == rows[:, None]
        other = np.where(is_self, np.inf, d32.astype(np.float64))
        t = np.partition(other, k - 1, axis=1)[:, k - 1]  # the k-th other row's float32 distance
        e = _rounding(norms[rows], norms.max(), d)
        settled = (c == n) | (np.where(is_self, -np.inf, other).max(axis=1) > t + 2 * e)
        sure = other < (t - 2 * e)[:, None]
        band = (np.abs(other - t[:, None]) <= (2 * e)[:, None]) & settled[:, None]
        exact = np.zeros(d32.shape)
        qi, ci = np.nonzero(band)
        step = max(1, 2**21 // d)  # pairs at a time: 16 MiB of float64 differences
        for a in range(0, len(qi), step):
            q, r = qi[a : a + step], ci[a : a + step]
            exact[q, r] = squared_distances(x[rows[q]], x[cand[q, r]])
        tier = np.where(sure, 0, np.where(band, 1, 2))  # in; ranked by the rule; out (and the query itself)
        pick = np.lexsort((cand, exact, tier), axis=1)[:, :k]
        done = todo[settled]
        out[done] = np.sort(np.take_along_axis(cand, pick, 1)[settled], axis=1)
        todo = todo[~settled]
        if len(todo):
            logger.debug("exact_knn: %d queries with near-ties beyond %d candidates: searched wider", len(todo), c)
            c = min(n, 4 * c)
    return out


def _rounding(q_norms: np.ndarray, b_norm: float, d: int) -> np.ndarray:
    """A bound on |float32 squared distance - :func:`squared_distances`| for queries of squared
    norms ``q_norms`` against rows of squared norm at most ``b_norm``, d features: the float32 route
    sums q.q - 2 q.b + b.b in blocks of any order, a random walk of about sqrt(d) roundings of
    2^-24 (|q|^2 + |b|^2) each; 16 times that."""
    return 16 * np.sqrt(d + 8) * 2.0**-24 * (q_norms + b_norm)


def query_parts(n: int, *, per_part: int) -> list[tuple[int, int]]:
    """[a, b) of the queries each part of a split exact search takes: ``per_part`` rows (a
    multiple of :data:`SPLIT_ALIGN`) at a time, a last part shorter than :data:`SPLIT_ALIGN`
    joined to the one before (each part a whole number of search blocks, and at least
    :data:`SPLIT_ALIGN` queries, so that for rows of :data:`MIN_SPLIT_WIDTH` features or more
    faiss searches it on its BLAS route, as the whole); one part when ``n <= per_part``."""
    if per_part <= 0 or per_part % SPLIT_ALIGN:
        raise ValueError(f"per_part must be a positive multiple of {SPLIT_ALIGN}, not {per_part}")
    starts = list(range(0, n, per_part)) or [0]
    if len(starts) > 1 and n - starts[-1] < SPLIT_ALIGN:
        starts.pop()
    return [(a, b) for a, b in zip(starts, [*starts[1:], n], strict=True)]


def _drop_self(found: np.ndarray, k: int, *, first: int = 0) -> np.ndarray:
    """Remove each row's own index (row i of ``found`` is row ``first + i`` of the search; or,
    if a duplicate point pushed it out, the last hit)."""
    n = len(found)
    is_self = found == (first + np.arange(n))[:, None]
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True  # self not among the k + 1: drop the farthest instead
    is_self[np.cumsum(is_self, axis=1) > 1] = False  # at most one per row
    return found[~is_self].reshape(n, k)


def same_label_rate(neighbors: np.ndarray, labels: np.ndarray) -> float:
    """Mean over queries of the share of neighbours with the query's label.

    ``neighbors`` (n, k) indices (-1 = none, ignored), ``labels`` (n,).
    """
    per_query = same_label_per_query(neighbors, labels)
    return float(np.nanmean(per_query))


def same_label_per_query(neighbors: np.ndarray, labels: np.ndarray, *, first: int = 0) -> np.ndarray:
    """(n,) each query's share of neighbours with its label; NaN for a query without neighbours.
    ``labels`` of every row searched; query i is row ``first + i`` (a part of the search)."""
    labels = np.asarray(labels)
    valid = neighbors >= 0
    own = labels[first : first + len(neighbors)]
    same = (labels[np.where(valid, neighbors, 0)] == own[:, None]) & valid
    per_query = same.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
    return np.where(valid.any(axis=1), per_query, np.nan)


def sentence_draws(n_sentences: int, *, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_sentences) how often each sentence is drawn in each bootstrap replicate:
    replicate ``r`` draws ``n_sentences`` sentences with replacement by
    ``np.random.default_rng([seed, r]).integers(0, n_sentences, n_sentences)`` (the
    protocol of every sentence bootstrap of this project, so that a loop can redo it)."""
    return np.stack(
        [
            np.bincount(np.random.default_rng([seed, r]).integers(0, n_sentences, n_sentences), minlength=n_sentences)
            for r in range(n_boot)
        ]
    ).astype(np.float64)


def bootstrap_replicates(
    values: np.ndarray, *, sentence: np.ndarray, groups: np.ndarray | None = None, n_boot: int = 200, seed: int = 0
) -> np.ndarray:
    """(n_boot,) the statistic of :func:`bootstrap_interval` on each resample of whole sentences.

    ``values`` (n,) per query, NaN for a query that is not counted; ``sentence`` (n,)
    each query's sentence. The sentences resampled are every sentence in ``sentence``
    (those whose queries are all NaN included: empty clusters), so that two measures
    over the same queries (a rate and its chance level) get the same resamples for the
    same ``seed`` (:func:`sentence_draws`). A sentence drawn c times counts each of its
    queries c times: sentences with more queries weigh more, as in the point estimate.
    The statistic is the mean over the counted queries, or with ``groups`` (n,) the mean
    over groups of each group's mean (as :func:`within_type_measures` averages over
    types; a group absent from a resample is left out of that resample's mean).
    """
    values = np.asarray(values, dtype=np.float64)
    _, sent_idx = np.unique(np.asarray(sentence), return_inverse=True)
    n_sent = int(sent_idx.max()) + 1 if len(sent_idx) else 0
    ok = ~np.isnan(values)
    g_idx = (
        np.zeros(len(values), dtype=np.int64)
        if groups is None
        else np.unique(np.asarray(groups), return_inverse=True)[1].astype(np.int64)
    )
    n_groups = int(g_idx.max()) + 1 if len(g_idx) else 1
    # per (sentence, group): the sum of the counted values and their number
    cell = sent_idx[ok] * n_groups + g_idx[ok]
    sums = np.bincount(cell, weights=values[ok], minlength=n_sent * n_groups).reshape(n_sent, n_groups)
    counts = np.bincount(cell, minlength=n_sent * n_groups).reshape(n_sent, n_groups).astype(np.float64)
    draws = sentence_draws(n_sent, n_boot=n_boot, seed=seed)  # (B, S)
    s, c = draws @ sums, draws @ counts  # (B, G)
    with np.errstate(invalid="ignore", divide="ignore"):
        if groups is None:
            return np.where(c[:, 0] > 0, s[:, 0] / c[:, 0], np.nan)
        means = np.where(c > 0, s / c, np.nan)
        filled = (c > 0).sum(axis=1)
        return np.where(filled > 0, np.nansum(means, axis=1) / np.maximum(filled, 1), np.nan)


def bootstrap_interval(
    values: np.ndarray,
    *,
    sentence: np.ndarray,
    groups: np.ndarray | None = None,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of a mean over queries when whole sentences are resampled with
    replacement (a cluster bootstrap: the occurrences of one sentence are not independent).

    ``values`` (n,) per query (NaN: not counted), ``sentence`` (n,) each query's sentence.
    The statistic is the mean over queries, or with ``groups`` (n,) the mean over groups of
    each group's mean (as :func:`within_type_measures` averages over types); see
    :func:`bootstrap_replicates`. The neighbours are not searched again: the interval is
    the sampling variability of the average over the queries, given the representation.
    """
    return percentile_interval(
        bootstrap_replicates(values, sentence=sentence, groups=groups, n_boot=n_boot, seed=seed), level
    )


def percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return float("nan"), float("nan")
    lo, hi = np.percentile(stats, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def normalized(rate, chance, ceiling):
    """Where a rate lies between its chance level (0) and its ceiling (1):
    ``(rate - chance) / (ceiling - chance)``; NaN where the ceiling equals chance.
    Works on floats and on arrays of bootstrap replicates alike."""
    rate, chance, ceiling = (np.asarray(v, dtype=np.float64) for v in (rate, chance, ceiling))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(ceiling - chance > 0, (rate - chance) / (ceiling - chance), np.nan)
    return float(out) if out.ndim == 0 else out


@overload
def within_type_measures(
    vectors: np.ndarray,
    *,
    types: np.ndarray,
    position: np.ndarray,
    annotations: dict[str, np.ndarray],
    k: int,
    metric: Metric = ...,
    min_occurrences: int = ...,
    chance: bool = ...,
    per_query: Literal[False] = ...,
) -> dict[str, float]: ...


@overload
def within_type_measures(
    vectors: np.ndarray,
    *,
    types: np.ndarray,
    position: np.ndarray,
    annotations: dict[str, np.ndarray],
    k: int,
    metric: Metric = ...,
    min_occurrences: int = ...,
    chance: bool = ...,
    per_query: Literal[True],
) -> tuple[dict[str, float], dict[str, np.ndarray]]: ...


def within_type_measures(
    vectors: np.ndarray,
    *,
    types: np.ndarray,
    position: np.ndarray,
    annotations: dict[str, np.ndarray],
    k: int,
    metric: Metric = "euclidean",
    min_occurrences: int = 2,
    chance: bool = False,
    per_query: bool = False,
) -> dict[str, float] | tuple[dict[str, float], dict[str, np.ndarray]]:
    """Neighbour statistics among the occurrences of each token type.

    For each type with at least ``min_occurrences`` occurrences (m of them), neighbours
    are searched among that type's occurrences only (k' = min(k, m - 1)). Returns
    ``position_distance`` (mean |pos(q) - pos(n)|, averaged over queries, then types) and
    ``same_<name>`` for each annotation (n,): the share of the k' neighbours whose value
    is the query's, averaged the same way. A query whose own value is negative (-1: no
    left neighbour at the start of a sentence, no right one at its end) has no such share
    and is left out of the average (not counted as a miss); it stays a candidate
    neighbour of the others (it never matches them). A type none of whose queries has a
    value is left out of that annotation's average over types.

    With ``chance=True`` also, for each annotation, with c_q the number of the type's
    occurrences whose value is the query's (the query included), averaged the same way:

    * ``same_<name>_chance`` = (c_q - 1) / (m - 1): the rate if the k' neighbours were
      drawn at random from the type's other occurrences (the query is not its own
      candidate); the floor above which a layer groups occurrences by ``name``;
    * ``same_<name>_ceiling`` = min(c_q - 1, k') / k': the rate of a representation
      that puts every occurrence with the query's value nearer than any other (ordered
      perfectly by ``name``), the most any representation can score with this k and
      these occurrences.

    Neither depends on the vectors. With ``per_query=True`` also each query's value
    (n,) per measure (NaN for queries left out), whose mean per type, averaged over
    types, is the returned value (:func:`bootstrap_interval` with ``groups=types``).
    """
    types = np.asarray(types)
    position = np.asarray(position)
    names = ["position_distance"]
    for a in annotations:
        names += [f"same_{a}"] + ([f"same_{a}_{b}" for b in BOUNDS] if chance else [])
    queries = {name: np.full(len(types), np.nan) for name in names}
    counted = 0
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        m = len(rows)
        if m < max(2, min_occurrences):
            continue
        counted += 1
        nb = rows[knn(vectors[rows], k=k, metric=metric)]  # global indices (m, k')
        k_eff = nb.shape[1]
        queries["position_distance"][rows] = np.abs(position[nb] - position[rows][:, None]).mean(1)
        for name, values in annotations.items():
            values = np.asarray(values)
            q = values[rows]
            has = q >= 0
            queries[f"same_{name}"][rows] = np.where(has, (values[nb] == q[:, None]).mean(1), np.nan)
            if chance:
                _, inverse, counts = np.unique(q, return_inverse=True, return_counts=True)
                same = counts[inverse.ravel()] - 1  # the type's other occurrences with the query's value
                queries[f"same_{name}_chance"][rows] = np.where(has, same / (m - 1), np.nan)
                queries[f"same_{name}_ceiling"][rows] = np.where(has, np.minimum(same, k_eff) / k_eff, np.nan)
    if not counted:
        raise ValueError(f"no token type has {max(2, min_occurrences)} occurrences")
    means = {name: _mean_of_type_means(v, types) for name, v in queries.items()}
    return (means, queries) if per_query else means


def _mean_of_type_means(per_query: np.ndarray, types: np.ndarray) -> float:
    """Mean over types of each type's mean over its counted (non-NaN) queries; NaN if none."""
    ok = ~np.isnan(per_query)
    if not ok.any():
        return float("nan")
    _, g = np.unique(types[ok], return_inverse=True)
    sums, counts = np.bincount(g, weights=per_query[ok]), np.bincount(g)
    return float(np.mean(sums / counts))
