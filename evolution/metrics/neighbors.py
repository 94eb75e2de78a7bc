"""Who are your neighbours? (Voita, Sennrich & Titov 2019, section 5; METHODS.md 3).

For occurrences pooled from many token types: the share of each query's k
nearest neighbours (itself excluded) that are the same token. Within the
occurrences of one token type: the mean position distance to the neighbours,
and the share of neighbours with the same left / right neighbour token (or
any other per-occurrence annotation, such as POS).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["knn", "same_label_rate", "same_label_per_query", "within_type_measures", "bootstrap_interval"]

Metric = Literal["euclidean", "cosine"]


def _prepare(vectors: np.ndarray, metric: Metric) -> np.ndarray:
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.where(norms > 0, norms, 1)
    elif metric != "euclidean":
        raise ValueError(f"metric must be 'euclidean' or 'cosine', not {metric!r}")
    return x


def knn(vectors: np.ndarray, *, k: int, metric: Metric = "euclidean", index: str = "exact",
        nprobe: int = 64) -> np.ndarray:
    """Indices (n, k) of each row's k nearest other rows of ``vectors`` (n, d).

    ``index="exact"`` is a flat faiss index (brute force, the same neighbours
    as sklearn's ``NearestNeighbors(algorithm="brute")`` up to ties);
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
    import faiss

    x = _prepare(vectors, metric)
    n, d = x.shape
    if n < 2:
        raise ValueError("need at least 2 occurrences for nearest neighbours")
    k = min(k, n - 1)
    if index == "exact":
        idx = faiss.IndexFlatL2(d)
    elif index == "ivf":
        nlist = max(1, int(np.sqrt(n)))
        idx = faiss.IndexIVFFlat(faiss.IndexFlatL2(d), d, nlist)
        idx.train(x)
        idx.nprobe = min(nprobe, nlist)
    else:
        raise ValueError(f"index must be 'exact' or 'ivf', not {index!r}")
    idx.add(x)
    _, found = idx.search(x, k + 1)
    return _drop_self(found, k)


def _drop_self(found: np.ndarray, k: int) -> np.ndarray:
    """Remove each row's own index (or, if a duplicate point pushed it out, the last hit)."""
    n = len(found)
    is_self = found == np.arange(n)[:, None]
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


def same_label_per_query(neighbors: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n,) each query's share of neighbours with its label; NaN for a query without neighbours."""
    labels = np.asarray(labels)
    valid = neighbors >= 0
    same = (labels[np.where(valid, neighbors, 0)] == labels[:, None]) & valid
    per_query = same.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
    return np.where(valid.any(axis=1), per_query, np.nan)


def bootstrap_interval(values: np.ndarray, *, sentence: np.ndarray, groups: np.ndarray | None = None,
                       n_boot: int = 200, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of a mean over queries when whole sentences are resampled with
    replacement (a cluster bootstrap: the occurrences of one sentence are not independent).

    ``values`` (n,) per query (NaN: not counted), ``sentence`` (n,) each query's sentence.
    The statistic is the mean over queries, or with ``groups`` (n,) the mean over groups of
    each group's mean (as :func:`within_type_measures` averages over types). The
    neighbours are not searched again: the interval is the sampling variability of the
    average over the queries, given the representation.
    """
    values = np.asarray(values, dtype=np.float64)
    ok = ~np.isnan(values)
    values, sentence = values[ok], np.asarray(sentence)[ok]
    _, sent_idx = np.unique(sentence, return_inverse=True)
    n_sent = int(sent_idx.max()) + 1
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_sent, np.full(n_sent, 1.0 / n_sent), size=n_boot).astype(np.float64)  # (B, S)
    w = counts[:, sent_idx]  # (B, n): each query weighted by how often its sentence was drawn
    if groups is None:
        stats = (w * values).sum(1) / np.maximum(w.sum(1), 1e-300)
    else:
        _, g = np.unique(np.asarray(groups)[ok], return_inverse=True)
        onehot = np.zeros((len(g), int(g.max()) + 1))
        onehot[np.arange(len(g)), g] = 1.0
        sums, weights = (w * values) @ onehot, w @ onehot  # (B, G)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = np.nanmean(np.where(weights > 0, sums / weights, np.nan), axis=1)
    lo, hi = np.percentile(stats, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def within_type_measures(vectors: np.ndarray, *, types: np.ndarray, position: np.ndarray,
                         annotations: dict[str, np.ndarray], k: int, metric: Metric = "euclidean",
                         min_occurrences: int = 2, chance: bool = False, per_query: bool = False
                         ) -> dict[str, float] | tuple[dict[str, float], dict[str, np.ndarray]]:
    """Neighbour statistics among the occurrences of each token type.

    For each type with at least ``min_occurrences`` occurrences, neighbours
    are searched among that type's occurrences only (k capped at count - 1).
    Returns ``position_distance`` (mean |pos(q) - pos(n)|, averaged over
    queries, then types) and ``same_<name>`` for each annotation (share of
    neighbours with the query's value, averaged the same way). Values of -1
    in an annotation (no left neighbour at sentence start, ...) never match.

    With ``chance=True`` also ``same_<name>_chance``: the same average if the
    neighbours were drawn at random from the type's other occurrences, i.e.
    ``(count of the query's value in the type - 1) / (occurrences - 1)`` per
    query. It does not depend on the representation: the floor against which
    a layer's rate says that the representation groups by ``name`` (a type
    with one POS has rate = chance = 1 at every layer).

    With ``per_query=True`` also each query's value (n,) per measure (NaN for
    queries of types left out), whose mean per type, averaged over types, is
    the returned value (:func:`bootstrap_interval` with ``groups=types``).
    """
    types = np.asarray(types)
    position = np.asarray(position)
    out: dict[str, list[float]] = {"position_distance": [], **{f"same_{a}": [] for a in annotations}}
    if chance:
        out.update({f"same_{a}_chance": [] for a in annotations})
    queries = {name: np.full(len(types), np.nan) for name in out}
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        if len(rows) < max(2, min_occurrences):
            continue
        nb = rows[knn(vectors[rows], k=k, metric=metric)]  # global indices (m, k')
        queries["position_distance"][rows] = np.abs(position[nb] - position[rows][:, None]).mean(1)
        for name, values in annotations.items():
            values = np.asarray(values)
            q = values[rows][:, None]
            queries[f"same_{name}"][rows] = ((values[nb] == q) & (q >= 0)).mean(1)
            if chance:
                _, inverse, counts = np.unique(values[rows], return_inverse=True, return_counts=True)
                queries[f"same_{name}_chance"][rows] = np.where(values[rows] >= 0,
                                                                (counts[inverse] - 1) / (len(rows) - 1), 0.0)
        for name in out:
            out[name].append(float(queries[name][rows].mean()))
    if not out["position_distance"]:
        raise ValueError(f"no token type has {max(2, min_occurrences)} occurrences")
    values = {name: float(np.mean(v)) for name, v in out.items()}
    return (values, queries) if per_query else values
