"""The batches of the head-pruning and from-scratch training loops (:mod:`evolution.training.pruning`):
new groups of similar length every epoch (:func:`_batches`), or fairseq-train's own batches, cut
once and reordered each epoch (:func:`fixed_batches`); :data:`BATCHINGS` names them. Either way
the n-th batch is a function of (seed, n) alone, so a resumed run sees an uninterrupted one's.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fixed_batches", "BATCHINGS"]


def _batches(items, *, max_tokens: int, seed: int):
    """Batches of similar length within ``max_tokens`` padded tokens, epoch after epoch, each
    epoch shuffled by ``numpy.random.default_rng([seed, epoch])``: the n-th batch is a function of
    (seed, n) alone, so a resumed run sees the batches an uninterrupted one would."""
    epoch = 0
    while True:
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(len(items))
        cut: list[list[int]] = []
        for start in range(0, len(order), 2000):
            batch: list[int] = []
            for i in sorted(order[start : start + 2000], key=lambda i: items[i].length):
                if batch and items[i].length * (len(batch) + 1) > max_tokens:
                    cut.append(batch)
                    batch = []
                batch.append(int(i))
            if batch:
                cut.append(batch)
        for k in rng.permutation(len(cut)):
            yield [items[i] for i in cut[k]]
        epoch += 1


def fixed_batches(items, *, max_tokens: int, seed: int, multiple: int = 1):
    """fairseq-train's batches (fairseq 0.12 ``FairseqTask.get_batch_iterator``): the items ordered
    once, by a permutation seeded by ``seed + 1`` (the epoch they are built in) then stably by
    target and then by source length (``LanguagePairDataset.ordered_indices``), cut once by
    ``data_utils.batch_by_size`` (padded max(source, target) tokens within ``max_tokens``, sizes a
    multiple of ``multiple``: 1, as the base recipe passes ``--required-batch-size-multiple 1``,
    ``compat.exact_batching_args``), and only the batches' order drawn anew each epoch
    (``numpy_seed(seed + epoch)``, epochs from 1, ``iterators.shuffle_batches``): the same
    sentences meet in the same batch every epoch. The n-th batch is a function of (seed, n) alone,
    so a resumed run sees an uninterrupted one's."""
    from evolution.nets.compat import import_fairseq

    import_fairseq()
    from fairseq.data import data_utils

    src = np.array([len(it.inputs) for it in items], dtype=np.int64)
    tgt = np.array([len(it.labels) for it in items], dtype=np.int64)
    with data_utils.numpy_seed(seed + 1):
        order = np.random.permutation(len(items)).astype(np.int64)
    order = order[np.argsort(tgt[order], kind="mergesort")]
    order = order[np.argsort(src[order], kind="mergesort")]
    # the token counts aligned with ``order``, as LanguagePairDataset.num_tokens_vec(indices) gives them
    # (with them batch_by_size calls no num_tokens_fn)
    cut = data_utils.batch_by_size(
        order,
        None,
        num_tokens_vec=np.maximum(src, tgt)[order],
        max_tokens=max_tokens,
        required_batch_size_multiple=multiple,
    )
    epoch = 1
    while True:
        batches = list(cut)
        with data_utils.numpy_seed(seed + epoch):
            np.random.shuffle(batches)
        for b in batches:
            yield [items[int(i)] for i in b]
        epoch += 1


#: how the loop batches: "regrouped", new groups of similar length every epoch (:func:`_batches`);
#: "fixed", fairseq-train's groups, cut once and reordered each epoch (:func:`fixed_batches`)
BATCHINGS = {"regrouped": _batches, "fixed": fixed_batches}
