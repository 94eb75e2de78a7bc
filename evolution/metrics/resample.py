"""Sentence resamples as weights: per-sentence cross-products contracted with replicate counts.

A bootstrap replicate that draws whole sentences with replacement is the original
occurrences with integer weights: how often each one's sentence was drawn. Statistics
that depend on the data only through weighted sums and cross-products (PWCCA, linear
CKA: :mod:`evolution.metrics.similarity_bootstrap`; influence's scatter matrices:
:mod:`evolution.metrics.influence`) then need, per replicate, the sum over sentences of
count x (that sentence's (p, q) cross-product). :class:`SentenceSums` forms the
per-sentence products once, a block of sentences at a time as one batched product, and
contracts each block with the counts of every replicate in one matrix product: the cost
is O(n p q) for the products plus O(R S p q) for R replicates of S sentences, not the
O(R n p q) of weighting the rows of every replicate (n rows; a sentence holds n / S of
them: 28 on the test books).

Replicate ``r`` draws with ``np.random.default_rng([seed, r]).integers(0, S, S)``, the
protocol of every sentence bootstrap of this project (:func:`sentence_counts`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sentence_draws", "sentence_counts", "SentenceSums", "BLOCK_BYTES", "PER_SENTENCE_ROWS"]

#: Memory of one block of per-sentence products (bytes): the block's sentences x p x q x 8.
BLOCK_BYTES = 16 << 20
#: Mean rows per sentence from which :meth:`SentenceSums.products` forms per-sentence products
#: (below, one product per replicate over the rows it draws is faster: ``benchmarks/similarity.py``)
PER_SENTENCE_ROWS = 12


def sentence_draws(n_sentences: int, *, replicates: range | int, seed: int) -> np.ndarray:
    """(R, n_sentences) int: the sentences replicate ``r`` (of ``replicates``, a range or a count
    from 0) draws, in the order drawn: ``default_rng([seed, r]).integers(0, S, S)``."""
    reps = range(replicates) if isinstance(replicates, int) else replicates
    return (
        np.stack([np.random.default_rng([seed, r]).integers(0, n_sentences, n_sentences) for r in reps])
        if len(reps)
        else np.zeros((0, n_sentences), dtype=np.int64)
    )


def sentence_counts(draws: np.ndarray, n_sentences: int | None = None) -> np.ndarray:
    """(R, n_sentences) float64: how often each replicate of ``draws`` (R, S) (:func:`sentence_draws`)
    draws each sentence."""
    draws = np.atleast_2d(draws)
    n = draws.shape[1] if n_sentences is None else n_sentences
    return np.stack([np.bincount(d, minlength=n) for d in draws]).astype(np.float64) if len(draws) else np.zeros((0, n))


class SentenceSums:
    """Rows grouped by sentence, for weighted sums over sentence resamples.

    Parameters
    ----------
    group : int array (n,)
        Each row's sentence as an index ``0 .. n_groups - 1`` (the columns of the counts;
        a sentence may have no rows here, e.g. none in a frequency bin).
    n_groups : int
        The number of sentences resampled (columns of ``counts``).
    block_bytes : int
        Memory of one block of per-sentence products.

    Methods take ``counts`` (R, n_groups): how often each sentence counts in each
    replicate (:func:`sentence_counts`; a row of ones is the original data).
    """

    def __init__(self, group: np.ndarray, *, n_groups: int, block_bytes: int = BLOCK_BYTES):
        group = np.asarray(group, dtype=np.int64)
        if group.size and (group.min() < 0 or group.max() >= n_groups):
            raise ValueError(f"SentenceSums: group indices must lie in 0..{n_groups - 1}")
        self.n_groups = n_groups
        self.block_bytes = block_bytes
        self.group = group
        self.size = np.bincount(group, minlength=n_groups).astype(np.float64)  # rows per sentence
        order = np.argsort(group, kind="stable")
        starts = np.searchsorted(group[order], np.arange(n_groups + 1))
        present = np.flatnonzero(self.size)
        by_size = present[np.argsort(self.size[present], kind="stable")]  # similar lengths share a block
        self._order, self._starts, self._by_size = order, starts, by_size

    @property
    def n(self) -> int:
        return len(self.group)

    def rows(self, counts: np.ndarray) -> np.ndarray:
        """(R,) rows in each replicate: sum over sentences of count x rows."""
        return np.atleast_2d(counts) @ self.size

    def resample_rows(self, draws: np.ndarray) -> np.ndarray:
        """Row indices (into the n rows) of one replicate that draws the sentences ``draws``
        (S,) in that order: each drawn sentence's rows, in order, one draw after another
        (the resampled data of the definition, row for row)."""
        parts = [self._order[self._starts[g] : self._starts[g + 1]] for g in np.asarray(draws, dtype=np.int64)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def sums(self, a: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(R, p): sum over rows of count(row's sentence) x a[row], for ``a`` (n, p)."""
        a = np.asarray(a, dtype=np.float64)
        per = np.zeros((self.n_groups, a.shape[1]))
        present = np.flatnonzero(self.size)
        if len(present):
            per[present] = np.add.reduceat(a[self._order], self._starts[present], axis=0)
        return np.atleast_2d(counts) @ per

    def _blocks(self, p: int, q: int):
        """Blocks of sentences (ids (m,), row index (m, T), padding mask (m, T))."""
        per_block = max(1, int(self.block_bytes // (8 * p * q)))
        ids = self._by_size
        for start in range(0, len(ids), per_block):
            block = ids[start : start + per_block]
            t = int(self.size[block].max())
            offset = np.arange(t)
            first, length = self._starts[block], self.size[block].astype(np.int64)
            pad = offset[None, :] >= length[:, None]
            where = np.minimum(first[:, None] + offset[None, :], len(self._order) - 1)
            yield block, self._order[where], pad

    def products(self, a: np.ndarray, b: np.ndarray | None, counts: np.ndarray) -> np.ndarray:
        """(R, p, q): sum over rows of count(row's sentence) x a[row]^T b[row] for ``a`` (n, p)
        and ``b`` (n, q) (None: ``a``), i.e. ``a^T diag(w_r) b`` with the replicate's row
        weights w_r. Where sentences hold at least :data:`PER_SENTENCE_ROWS` rows on average,
        formed per sentence once and contracted with every replicate; else (a frequency bin
        holds a few rows of each sentence, and per-sentence products would be mostly memory
        traffic) one product per replicate over the rows it draws."""
        a = np.asarray(a, dtype=np.float64)
        b = a if b is None else np.asarray(b, dtype=np.float64)
        counts = np.atleast_2d(np.asarray(counts, dtype=np.float64))
        present = int((self.size > 0).sum())
        if present and self.n >= PER_SENTENCE_ROWS * present:
            return self._per_sentence(a, b, counts)
        from evolution.metrics import backend

        out = np.empty((counts.shape[0], a.shape[1], b.shape[1]))
        for r, w in enumerate(counts[:, self.group]):
            drawn = np.flatnonzero(w)
            out[r] = backend.tmatmul(a[drawn] * w[drawn, None], b[drawn] if b is not a else a[drawn])
        return out

    def _per_sentence(self, a: np.ndarray, b: np.ndarray, counts: np.ndarray) -> np.ndarray:
        from evolution.metrics import backend

        p, q = a.shape[1], b.shape[1]
        out = np.zeros((counts.shape[0], p * q))
        for block, rows, pad in self._blocks(p, q):
            xa = a[rows]
            xa[pad] = 0.0
            xb = b[rows]
            xb[pad] = 0.0
            per = backend.batched_tmatmul(xa, xb)  # (m, p, q): one product per sentence
            out += counts[:, block] @ per.reshape(len(block), p * q)
        return out.reshape(-1, p, q)

    def centred(self, a: np.ndarray, b: np.ndarray | None, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The replicates' centred cross-products (R, p, q), each about its own weighted means
        (``a^T W b - N mean_a mean_b^T``), and their rows N (R,): one :meth:`products` of
        ``[a, 1]`` and ``[b, 1]``, whose last row and column are the weighted sums and N."""
        a = np.asarray(a, dtype=np.float64)
        ones = np.ones((len(a), 1))
        a1 = np.hstack([a, ones])
        b1 = a1 if b is None else np.hstack([np.asarray(b, dtype=np.float64), ones])
        full = self.products(a1, None if b is None else b1, counts)
        p, q = a1.shape[1] - 1, b1.shape[1] - 1
        n = full[:, p, q]
        with np.errstate(invalid="ignore", divide="ignore"):
            outer = np.einsum("ri,rj->rij", full[:, :p, q], full[:, p, :q]) / n[:, None, None]
        return full[:, :p, :q] - outer, n
