"""Token influence (Voita, Sennrich & Titov 2019, section 5; METHODS.md 5).

For an occurrence i and a layer n: run the model normally, and run it again
with position i hidden from the attention *keys* of block n only (no other
token can attend to it there; blocks below n are unchanged). The layer-n
states of every *other* position of the sentence, with and without the mask,
form two views; their PWCCA (or CKA) distance, pooled over many occurrences
whose token falls in one frequency-rank bin, is the influence of that bin's
tokens at layer n. The paper finds rare tokens influential at layer 1 in MT
and LM, and input token dropout removing that.

Batching: one forward pass per sentence holds every (sampled position,
layer) pair of that sentence as a row, each row masking one key at one block.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

__all__ = ["sample_influencers", "token_influence"]


def sample_influencers(*, sentence: np.ndarray, position: np.ndarray, freq_rank: np.ndarray,
                       bins: Sequence[tuple[int, int]], max_per_bin: int, min_length: int = 3,
                       seed: int = 0) -> list[tuple[int, int, int]]:
    """Up to ``max_per_bin`` occurrences per frequency-rank bin, from sentences of at
    least ``min_length`` tokens: ``[(sentence, position, bin), ...]`` sorted by sentence."""
    rng = np.random.default_rng(seed)
    lengths = np.bincount(sentence)
    ok = lengths[sentence] >= min_length
    out = []
    for b, (lo, hi) in enumerate(bins):
        rows = np.flatnonzero(ok & (freq_rank >= lo) & (freq_rank < hi))
        if len(rows) > max_per_bin:
            rows = np.sort(rng.choice(rows, size=max_per_bin, replace=False))
        out += [(int(sentence[r]), int(position[r]), b) for r in rows]
    return sorted(out)


def token_influence(adapter, *, content_ids: dict[int, Sequence[int]], samples: list[tuple[int, int, int]],
                    n_bins: int, methods: Sequence[str] = ("pwcca",), epsilon: float = 1e-6,
                    min_ratio: float = 10.0, max_rows: int = 256) -> dict:
    """Influence distance per (method, layer 1..L, bin).

    ``content_ids[s]`` are the content token ids of sentence ``s``;
    ``samples`` come from :func:`sample_influencers`. Returns ``distance``
    as ``{method: [[layer 1 bins], ..., [layer L bins]]}`` (NaN where a bin
    has fewer than ``min_ratio`` x d rows), ``rows`` and ``samples`` per
    (layer, bin), and ``notes``.
    """
    from evolution.metrics.similarity import View, cka, pwcca

    fns = {"pwcca": pwcca, "cka": cka}
    L, off = adapter.num_layers, adapter.content_offset
    normal: dict[tuple[int, int], list] = defaultdict(list)
    masked: dict[tuple[int, int], list] = defaultdict(list)
    count = np.zeros((L, n_bins), dtype=int)
    by_sentence: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for s, pos, b in samples:
        by_sentence[s].append((pos, b))
    for s, items in by_sentence.items():
        ids = list(content_ids[s])
        inp = adapter.build_input(ids)
        base = adapter.forward([inp])[0][:, 0]  # (L+1, T, d)
        rows = [(pos, b, n) for pos, b in items for n in range(1, L + 1)]
        for start in range(0, len(rows), max_rows):
            chunk = rows[start:start + max_rows]
            hidden = adapter.forward_masked_keys([inp] * len(chunk),
                                                 masked=[(n - 1, off + pos) for pos, _, n in chunk])
            for r, (pos, b, n) in enumerate(chunk):
                others = [off + j for j in range(len(ids)) if j != pos]
                normal[(n, b)].append(base[n, others])
                masked[(n, b)].append(hidden[n, r, others])
                count[n - 1, b] += 1
    distance = {m: np.full((L, n_bins), np.nan) for m in methods}
    n_rows = np.zeros((L, n_bins), dtype=int)
    notes = []
    d = adapter.d_model
    for (n, b), parts in normal.items():
        a = np.concatenate(parts).astype(np.float64)
        n_rows[n - 1, b] = len(a)
        if len(a) < min_ratio * d:
            if n == 1:
                notes.append(f"influence bin {b}: {len(a)} rows < {min_ratio:g} x d = {min_ratio * d:g}; left as NaN")
            continue
        va = View(a, epsilon=epsilon, min_ratio=min_ratio, name=f"layer {n} bin {b} normal")
        vb = View(np.concatenate(masked[(n, b)]).astype(np.float64), epsilon=epsilon, min_ratio=min_ratio,
                  name=f"layer {n} bin {b} masked")
        for m in methods:
            distance[m][n - 1, b] = 1.0 - fns[m](va, vb)
    return {"distance": {m: v.tolist() for m, v in distance.items()}, "rows": n_rows.tolist(),
            "samples": count.tolist(), "notes": notes}
