"""Integer codes of annotation labels: the form in which the analyses read the store's
annotation strings (``upos``, ``xpos``, ``deprel``; ``""`` on tokens of the main text).

A leaf module: the corpus reader (:mod:`evolution.corpus.conllu`) and the numerics
(:mod:`evolution.metrics.plan`) both use it, so that the numerics read the store alone.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NO_LABEL", "label_codes"]

#: Code of "no annotation" (tokens of the main text); never equal to a label.
NO_LABEL = -1


def label_codes(labels: np.ndarray) -> np.ndarray:
    """Int codes (n,) of string labels: the index in their sorted set, :data:`NO_LABEL` for ``""``."""
    labels = np.asarray(labels, dtype=object)
    present = labels != ""
    vocab = {v: i for i, v in enumerate(sorted(set(labels[present].tolist())))}
    out = np.full(len(labels), NO_LABEL, dtype=np.int64)
    out[present] = [vocab[v] for v in labels[present]]
    return out
