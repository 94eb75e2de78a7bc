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
them. The PWCCA / CKA of a replicate come from the views' weighted cross-products,
summed per sentence once, in the basis of each view's SVD
(:func:`~evolution.metrics.similarity_bootstrap.pair_with_replicates`, the similarity
bootstrap's route), so a replicate costs two small Cholesky factors and one SVD per
(layer, bin) instead of two SVDs of the (rows, d) views.

Batching: the sentence runs once unmasked; then every (sampled position, layer n) pair of
that sentence and bin is a row that runs block n alone from the unmasked layer n - 1 states,
with its key hidden (:meth:`~evolution.models.base.Adapter.masked_key_states`: the blocks
below are unchanged by the mask and those above are not read), not the whole stack.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from evolution.metrics.similarity_bootstrap import pair_with_replicates

__all__ = ["sample_influencers", "bin_occurrences", "token_influence"]


def _eligible(sentence: np.ndarray, min_length: int) -> np.ndarray:
    return np.bincount(sentence)[sentence] >= min_length


def sample_influencers(
    *,
    sentence: np.ndarray,
    position: np.ndarray,
    freq_rank: np.ndarray,
    bins: Sequence[tuple[int, int]],
    max_per_bin: int,
    min_length: int = 3,
    seed: int = 0,
) -> list[tuple[int, int, int]]:
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


def bin_occurrences(
    *, sentence: np.ndarray, freq_rank: np.ndarray, bins: Sequence[tuple[int, int]], min_length: int = 3
) -> list[int]:
    """Per bin, the occurrences :func:`sample_influencers` samples from (sentences of at
    least ``min_length`` tokens): a bin with fewer than ``max_per_bin`` is taken whole."""
    ok = _eligible(sentence, min_length)
    return [int((ok & (freq_rank >= lo) & (freq_rank < hi)).sum()) for lo, hi in bins]


def token_influence(
    adapter,
    *,
    content_ids: dict[int, Sequence[int]],
    samples: list[tuple[int, int, int]],
    n_bins: int,
    methods: Sequence[str] = ("pwcca",),
    epsilon: float = 1e-6,
    min_ratio: float = 10.0,
    max_rows: int = 256,
    bootstrap: int = 0,
    seed: int = 0,
    level: float = 0.95,
) -> dict:
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
        from evolution.metrics.resample import sentence_draws

        draws = sentence_draws(len(universe), replicates=bootstrap, seed=seed)  # (B, S)
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
                chunk = rows[start : start + max_rows]
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
                    notes.append(
                        f"influence bin {b}: {len(x)} rows < {min_ratio:g} x d = {min_ratio * d:g}; left as NaN"
                    )
                continue
            est, reps = pair_with_replicates(x, y, group=g, draws=draws, epsilon=epsilon, min_ratio=min_ratio)
            for m in methods:
                pick = 0 if m == "pwcca" else 2  # PWCCA weights from the unmasked view
                distance[m][n - 1, b] = 1.0 - est[pick]
                if reps is not None:  # (draws given)
                    replicates[m][:, n - 1, b] = 1.0 - reps[:, pick]
            short = 0 if reps is None else int(np.isnan(reps[:, 0]).sum())
            if n == 1 and short:
                notes.append(
                    f"influence bin {b}: {short} of {bootstrap} resamples have fewer than {min_ratio:g} x d "
                    "rows (left out of the interval)"
                )
    out = {
        "distance": {m: v.tolist() for m, v in distance.items()},
        "rows": n_rows.tolist(),
        "samples": count.tolist(),
        "sentences": sentences,
        "notes": notes,
    }
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
