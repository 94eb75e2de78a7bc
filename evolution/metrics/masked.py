"""MI with the MLM's output label (Voita, Sennrich & Titov 2019, sec. 4; ``docs/metrics.md``).

For the masked LM the output label of a position is defined only where the
input was corrupted: the text is corrupted as in training (each token chosen
with probability 0.15; of those 80% become ``<mask>``, 10% a random ordinary
token, 10% stay) and only positions whose input differs from the original
token are kept. The label X is the original token; the representations are
those of the corrupted input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["corrupt", "masked_states"]


def corrupt(
    ids: Sequence[int],
    *,
    rng: np.random.Generator,
    mask_id: int,
    low: int,
    high: int,
    p: float = 0.15,
    p_mask: float = 0.8,
    p_random: float = 0.1,
) -> tuple[list[int], np.ndarray]:
    """BERT-style corruption of ``ids``; returns the new ids and the positions whose id changed.

    Random replacements are drawn from ``[low, high)`` (the ordinary symbols).
    """
    original = np.asarray(ids, dtype=np.int64)
    out = original.copy()
    chosen = rng.random(len(original)) < p
    u = rng.random(len(original))
    out[chosen & (u < p_mask)] = mask_id
    rand = chosen & (u >= p_mask) & (u < p_mask + p_random)
    out[rand] = rng.integers(low, high, size=int(rand.sum()))
    return out.tolist(), np.flatnonzero(out != original)


def masked_states(
    adapter,
    content_ids: dict[int, Sequence[int]],
    *,
    seed: int,
    corruptions: int = 1,
    max_batch_tokens: int = 2048,
    return_inputs: bool = False,
    return_sentences: bool = False,
):
    """States ``(L + 1, n, d)`` at every corrupted position of every sentence, and the
    original token ids ``(n,)`` there. Deterministic in ``seed`` (one generator per sentence
    and corruption). ``corruptions`` independent corruptions of each sentence (each its
    own forward pass) multiply the occurrences: at 15% per corruption, 7 corrupt each
    position about once, which a small corpus needs for an MI estimate that is not
    mostly bias (the default run: 5,669 occurrences with 1). With ``return_inputs`` also
    the ids fed at those positions ``(n,)`` (``<mask>``, a random token or the original);
    with ``return_sentences`` also the sentence id of each position ``(n,)`` (last), for
    intervals over sentences."""
    if adapter.mask_id is None:
        raise ValueError(f"{type(adapter).__name__} has no <mask> symbol; MLM output MI needs a masked LM")
    low, high = adapter.ordinary_ids
    items = []
    for s in sorted(content_ids):
        ids = list(content_ids[s])
        for r in range(corruptions):
            rng = np.random.default_rng([seed, s] if r == 0 else [seed, s, r])  # r = 0: as with one corruption
            new, changed = corrupt(ids, rng=rng, mask_id=adapter.mask_id, low=low, high=high)
            if len(changed):
                items.append((adapter.build_input(new), changed, np.asarray(ids)[changed], np.asarray(new)[changed], s))
    items.sort(key=lambda it: len(it[0]))
    states, labels, fed, sentences = [], [], [], []
    batch: list = []

    def flush():
        if not batch:
            return
        hidden = adapter.forward([it[0] for it in batch])[0]  # (L+1, B, T, d)
        for b, (_, changed, original, given, s) in enumerate(batch):
            states.append(hidden[:, b, adapter.content_offset + changed])
            labels.append(original)
            fed.append(given)
            sentences.append(np.full(len(changed), s, dtype=np.int64))
        batch.clear()

    for it in items:
        if batch and len(it[0]) * (len(batch) + 1) > max_batch_tokens:
            flush()
        batch.append(it)
    flush()
    if not states:
        out = (
            np.empty((adapter.num_layers + 1, 0, adapter.d_model), np.float32),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
        )
    else:
        out = (
            np.concatenate(states, axis=1).astype(np.float32),
            np.concatenate(labels),
            np.concatenate(fed),
            np.concatenate(sentences),
        )
    return out[:2] + (out[2:3] if return_inputs else ()) + (out[3:] if return_sentences else ())
