"""Token influence (Voita, Sennrich & Titov 2019, section 5; ``docs/metrics.md``).

For an occurrence i and a layer n: run the model normally, and run it again
with position i hidden from the attention *keys* of block n only (no other
token can attend to it there; blocks below n are unchanged). The layer-n
states of every *other* position of the sentence, with and without the mask,
form two views; their PWCCA (or CKA) distance, pooled over many occurrences
whose token falls in one frequency-rank bin, is the influence of that bin's
tokens at layer n. The paper finds rare tokens influential at layer 1 in MT
and LM, and input token dropout removing that.

Uncertainty: a cluster bootstrap over the sentences of the masked occurrences
(one sentence's rows share its other tokens). Replicate r draws S sentences
with replacement from the S sentences of all samples
(``np.random.default_rng([seed, r]).integers(0, S, S)``, the protocol of
:func:`evolution.metrics.neighbors.sentence_draws`), the same for every bin and
layer (and every model masking the same occurrences); each bin's rows of a drawn
sentence count as often as it is drawn, and the distance is computed again on
them. The PWCCA / CKA of a replicate come from the views' (d, d) cross-products,
summed per sentence once (:func:`replicate_scatters`, :func:`similarity_from_moments`), so a replicate costs
two (d, d) eigendecompositions and one SVD per (layer, bin) instead of two SVDs of
the (rows, d) views.

Batching: the sentence runs once unmasked; then every (sampled position, layer n) pair of
that sentence and bin is a row that runs block n alone from the unmasked layer n - 1 states,
with its key hidden (:meth:`~evolution.models.base.Adapter.masked_key_states`: the blocks
below are unchanged by the mask and those above are not read), not the whole stack.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

__all__ = ["sample_influencers", "bin_occurrences", "token_influence", "similarity_from_moments",
           "replicate_scatters"]


def _eligible(sentence: np.ndarray, min_length: int) -> np.ndarray:
    return np.bincount(sentence)[sentence] >= min_length


def sample_influencers(*, sentence: np.ndarray, position: np.ndarray, freq_rank: np.ndarray,
                       bins: Sequence[tuple[int, int]], max_per_bin: int, min_length: int = 3,
                       seed: int = 0) -> list[tuple[int, int, int]]:
    """Up to ``max_per_bin`` occurrences per frequency-rank bin, from sentences of at
    least ``min_length`` tokens: ``[(sentence, position, bin), ...]`` sorted by sentence."""
    rng = np.random.default_rng(seed)
    ok = _eligible(sentence, min_length)
    out = []
    for b, (lo, hi) in enumerate(bins):
        rows = np.flatnonzero(ok & (freq_rank >= lo) & (freq_rank < hi))
        if len(rows) > max_per_bin:
            rows = np.sort(rng.choice(rows, size=max_per_bin, replace=False))
        out += [(int(sentence[r]), int(position[r]), b) for r in rows]
    return sorted(out)


def bin_occurrences(*, sentence: np.ndarray, freq_rank: np.ndarray, bins: Sequence[tuple[int, int]],
                    min_length: int = 3) -> list[int]:
    """Per bin, the occurrences :func:`sample_influencers` samples from (sentences of at
    least ``min_length`` tokens): a bin with fewer than ``max_per_bin`` is taken whole."""
    ok = _eligible(sentence, min_length)
    return [int((ok & (freq_rank >= lo) & (freq_rank < hi)).sum()) for lo, hi in bins]


def replicate_scatters(x: np.ndarray, y: np.ndarray, *, cluster: np.ndarray, weights: np.ndarray,
                       block: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centred scatter matrices of two views (n, d) when the rows of cluster c count
    ``weights[r, c]`` times in replicate r: returns n (R,), Sxx, Syy, Sxy (R, d, d).

    ``cluster`` (n,) each row's cluster in ``0..S-1``, ``weights`` (R, S). The per-cluster
    cross-products are formed ``block`` clusters at a time and contracted with the
    weights, so memory is O(R d^2 + block d^2) and the cost O(n d^2 + R S d^2), not the
    O(R n d^2) of weighting the rows of every replicate.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(0), y - y.mean(0)  # scatter is shift-invariant: centre once for accuracy
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    n_rep, n_clusters = weights.shape
    d = x.shape[1]
    count = np.bincount(cluster, minlength=n_clusters).astype(np.float64)
    sx, sy = np.zeros((n_clusters, d)), np.zeros((n_clusters, d))
    np.add.at(sx, cluster, x)
    np.add.at(sy, cluster, y)
    n = weights @ count
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = (weights @ sx) / n[:, None], (weights @ sy) / n[:, None]
    acc = {k: np.zeros((n_rep, d * d)) for k in ("xx", "yy", "xy")}
    order = np.argsort(cluster, kind="stable")
    bounds = np.searchsorted(cluster[order], np.arange(n_clusters + 1))
    filled = np.flatnonzero(count)
    for start in range(0, len(filled), block):
        cs = filled[start:start + block]
        parts = [(x[order[bounds[c]:bounds[c + 1]]], y[order[bounds[c]:bounds[c + 1]]]) for c in cs]
        for key, pick in (("xx", lambda a, b: a.T @ a), ("yy", lambda a, b: b.T @ b), ("xy", lambda a, b: a.T @ b)):
            acc[key] += weights[:, cs] @ np.stack([pick(a, b).ravel() for a, b in parts])
    outer = lambda u, v: np.einsum("ri,rj->rij", u, v) * n[:, None, None]  # noqa: E731
    return (n, acc["xx"].reshape(n_rep, d, d) - outer(mx, mx), acc["yy"].reshape(n_rep, d, d) - outer(my, my),
            acc["xy"].reshape(n_rep, d, d) - outer(mx, my))


def _whitening(s: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(W, C): W (d, r) = V L^-1/2 and C (r, d) = L^1/2 V^T on the eigen-directions of the
    scatter ``s`` with L > epsilon^2 max(L) (singular values above epsilon x the largest,
    as :class:`~evolution.metrics.similarity.View` keeps)."""
    lam, v = np.linalg.eigh(s)
    top = lam.max() if lam.size and lam.max() > 0 else 0.0
    if top <= 0:
        raise ValueError("the representations are constant over occurrences")
    keep = lam > epsilon ** 2 * top
    lam, v = lam[keep], v[:, keep]
    return v / np.sqrt(lam), np.sqrt(lam)[:, None] * v.T


def similarity_from_moments(sxx: np.ndarray, syy: np.ndarray, sxy: np.ndarray, *, method: str,
                            epsilon: float = 1e-6) -> float:
    """PWCCA(x, y) (weights from x) or linear CKA of two views from their centred scatter
    matrices Sxx = X^T X, Syy, Sxy = X^T Y (X, Y centred): equal to
    :func:`~evolution.metrics.similarity.pwcca` / :func:`~evolution.metrics.similarity.cka`
    of the views themselves. With Q_x = X W_x (orthonormal), Q_x^T Q_y = W_x^T Sxy W_y; its
    SVD U diag(rho) V^T gives the canonical correlations, and x's coordinates in Q_x are
    C_x = L^1/2 V^T, so the PWCCA weights are alpha = |U^T C_x| summed over dimensions."""
    if method == "cka":
        return float(np.clip(np.sum(sxy ** 2) / (np.linalg.norm(sxx) * np.linalg.norm(syy)), 0.0, 1.0))
    if method != "pwcca":
        raise ValueError(f"method must be 'pwcca' or 'cka', not {method!r}")
    wx, cx = _whitening(sxx, epsilon)
    wy, _ = _whitening(syy, epsilon)
    u, rho, _ = np.linalg.svd(wx.T @ sxy @ wy, full_matrices=False)
    m = len(rho)
    alpha = np.abs(u[:, :m].T @ cx).sum(axis=1)
    return float(np.clip((alpha * np.clip(rho, 0, 1)).sum() / alpha.sum(), 0.0, 1.0))


def token_influence(adapter, *, content_ids: dict[int, Sequence[int]], samples: list[tuple[int, int, int]],
                    n_bins: int, methods: Sequence[str] = ("pwcca",), epsilon: float = 1e-6,
                    min_ratio: float = 10.0, max_rows: int = 256, bootstrap: int = 0, seed: int = 0,
                    level: float = 0.95) -> dict:
    """Influence distance per (method, layer 1..L, bin), with a bootstrap over sentences.

    ``content_ids[s]`` are the content token ids of sentence ``s``; ``samples`` come from
    :func:`sample_influencers` (bin b of ``n_bins``). Returns

    * ``distance``: ``{method: (L, n_bins)}`` as nested lists, 1 - similarity of the other
      tokens' layer-n states without / with the key masked (NaN where a bin has fewer than
      ``min_ratio`` x d rows);
    * ``rows``, ``samples`` (L, n_bins): rows pooled, occurrences masked; ``sentences``
      (n_bins,): distinct sentences of each bin's occurrences (the bootstrap's clusters);
    * with ``bootstrap`` > 0, ``replicates``: ``{method: (bootstrap, L, n_bins)}`` (replicate r
      resamples sentences as the module docstring says, with ``seed``; NaN where a
      resample has fewer than ``min_ratio`` x d rows) and ``interval``:
      ``{method: (L, n_bins, 2)}``, their ``level`` percentile interval (low, high);
    * ``notes``.

    Bins are processed one at a time (their rows only in memory).
    """
    L, off, d = adapter.num_layers, adapter.content_offset, adapter.d_model
    count = np.zeros((L, n_bins), dtype=int)
    n_rows = np.zeros((L, n_bins), dtype=int)
    distance = {m: np.full((L, n_bins), np.nan) for m in methods}
    replicates = {m: np.full((bootstrap, L, n_bins), np.nan) for m in methods}
    universe = sorted({s for s, _, _ in samples})
    index = {s: i for i, s in enumerate(universe)}
    draws = None
    if bootstrap:
        from evolution.metrics.neighbors import sentence_draws

        draws = sentence_draws(len(universe), n_boot=bootstrap, seed=seed)  # (B, S)
    sentences = [len({s for s, _, b in samples if b == k}) for k in range(n_bins)]
    notes = []
    for b in range(n_bins):
        by_sentence: dict[int, list[int]] = defaultdict(list)
        for s, pos, k in samples:
            if k == b:
                by_sentence[s].append(pos)
        if not by_sentence:
            continue
        normal: dict[int, list] = defaultdict(list)
        masked: dict[int, list] = defaultdict(list)
        cluster: dict[int, list] = defaultdict(list)
        for s, positions in by_sentence.items():
            ids = list(content_ids[s])
            inp = adapter.build_input(ids)
            base = adapter.forward([inp])[0][:, 0]  # (L+1, T, d)
            rows = [(pos, n) for pos in positions for n in range(1, L + 1)]
            for start in range(0, len(rows), max_rows):
                chunk = rows[start:start + max_rows]
                hidden = adapter.masked_key_states(inp, base=base, masked=[(n - 1, off + pos) for pos, n in chunk])
                for r, (pos, n) in enumerate(chunk):
                    others = [off + j for j in range(len(ids)) if j != pos]
                    normal[n].append(base[n, others])
                    masked[n].append(hidden[r, others])
                    cluster[n].append(np.full(len(others), index[s]))
                    count[n - 1, b] += 1
        for n in range(1, L + 1):
            x, y, g = np.concatenate(normal.pop(n)), np.concatenate(masked.pop(n)), np.concatenate(cluster.pop(n))
            n_rows[n - 1, b] = len(x)
            if len(x) < min_ratio * d:
                if n == 1:
                    notes.append(f"influence bin {b}: {len(x)} rows < {min_ratio:g} x d = {min_ratio * d:g}; "
                                 "left as NaN")
                continue
            weights = np.ones((1, len(universe)))
            if draws is not None:
                weights = np.concatenate([weights, draws])
            size, sxx, syy, sxy = replicate_scatters(x, y, cluster=g, weights=weights)
            for m in methods:
                values = np.array([similarity_from_moments(sxx[r], syy[r], sxy[r], method=m, epsilon=epsilon)
                                   if size[r] >= min_ratio * d else np.nan for r in range(len(weights))])
                distance[m][n - 1, b] = 1.0 - values[0]
                if draws is not None:
                    replicates[m][:, n - 1, b] = 1.0 - values[1:]
            if draws is not None and n == 1 and (size[1:] < min_ratio * d).any():
                notes.append(f"influence bin {b}: {int((size[1:] < min_ratio * d).sum())} of {bootstrap} "
                             f"resamples have fewer than {min_ratio:g} x d rows (left out of the interval)")
    out = {"distance": {m: v.tolist() for m, v in distance.items()}, "rows": n_rows.tolist(),
           "samples": count.tolist(), "sentences": sentences, "notes": notes}
    if bootstrap:
        q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
        interval = {}
        for m, v in replicates.items():
            iv = np.full((L, n_bins, 2), np.nan)
            for n in range(L):
                for b in range(n_bins):
                    ok = np.isfinite(v[:, n, b])
                    if ok.sum() >= 2:
                        iv[n, b] = np.percentile(v[ok, n, b], q)
            interval[m] = iv.tolist()
        out.update(replicates={m: v.tolist() for m, v in replicates.items()}, interval=interval)
    return out
