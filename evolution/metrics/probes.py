"""Attention-based dependency parsing probes (Clark et al. 2019, "What Does BERT Look At?", section 5).

A probe predicts, for every word of a sentence, its syntactic head (or ROOT)
from the word-level attention maps of every (layer, head) of a model. Three
probes and two baselines of the paper's Table 3:

* ``kind="attention"`` (Clark's ``attn_linear_combo``): the K maps and their
  transposes, 2K maps M_k, weighted by one free scalar each (no softmax over
  heads): ``logits[i, j] = sum_k w_k M_k[i, j]``;
* ``kind="attention_words"`` (``attn_and_words``): the weight of map k depends
  on the pair of words, ``logits[i, j] = sum_k (W_k . (v_i + v_j) + b_k) M_k[i, j]``
  (``+`` is concatenation here: one dense layer from 2d to 2K outputs);
* ``kind="distance_words"`` (``words_and_distances``, a baseline): an MLP
  (dense 256 tanh, dense 1) over :func:`distance_features` and v_i + v_j;
* :func:`right_branching`, the other baseline.

The candidates of word i are ROOT (column 0) and the n words (columns 1..n;
the diagonal is not masked), so gold heads use the CoNLL-U numbering (0 = ROOT,
j = the j-th word, 1-based). ROOT's score from attention is built from the
attention to the special tokens, with two scalars shared across maps:
``M_k[i, ROOT] = r_start M_k[i, first special] + r_end M_k[i, last special]``.
Training: summed cross-entropy over the words of one sentence per step, Adam
(lr 0.002), glorot-uniform initialisation (TensorFlow 1's default, also for the
scalars, whose fans are 1); prediction is the argmax. UAS leaves out words whose
gold relation is ``punct``. The paper trains one epoch; :func:`fit_probe` with
``held_out`` sentences trains until their loss stops falling (early stopping,
the weights of the best epoch kept) and records the learning curve.

Departures from the released code (clarkkev/attention-analysis b609cfc,
Syntax_Analysis.ipynb, raw lines 464-588, ``class Probe``):

* word vectors: ROOT is the *first* candidate, with a zero vector of its own,
  so its pair is v_i + 0; Clark appends an all-zero pair block *last* (line
  517; v_i zeroed too) while the attention and distance features put ROOT
  first, which misaligns every word pair by one column; the vectors are the
  caller's (the paper: frozen 100-d GloVe);
* the words-and-distances MLP gets no all-zero dummy attention channel (line
  500; it carries nothing);
* word-level maps use the paper's ``mean`` rule, not the released default
  ``first`` (bpe_utils.py:46).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

__all__ = [
    "ProbeSentence",
    "Probe",
    "word_level_attention",
    "word_level_embeddings",
    "distance_features",
    "fit_probe",
    "split_held_out",
    "right_branching",
    "uas",
    "KINDS",
    "N_DISTANCE_FEATURES",
]

ProbeKind = Literal["attention", "attention_words", "distance_words"]
KINDS: tuple[ProbeKind, ...] = ("attention", "attention_words", "distance_words")
N_DISTANCE_FEATURES = 8


def _word_matrix(word_ids: np.ndarray, n_words: int) -> np.ndarray:
    """(T, n+2) one-hot: leading special pieces -> 0, word w -> w + 1, trailing special pieces -> n + 1."""
    ids = np.asarray(word_ids, dtype=np.int64)
    words = np.flatnonzero(ids >= 0)
    if len(words) == 0 or not np.array_equal(np.unique(ids[words]), np.arange(n_words)):
        raise ValueError("word_ids must number the words 0..n-1 (and -1 for special tokens)")
    if np.any(np.diff(ids[words]) < 0) or np.any(ids[words[0] : words[-1] + 1] < 0) or np.any(ids < -1):
        raise ValueError("word_ids must be non-decreasing, with special tokens (-1) only before and after the words")
    units = np.where(ids >= 0, ids + 1, np.where(np.arange(len(ids)) < words[0], 0, n_words + 1))
    onehot = np.zeros((len(ids), n_words + 2))
    onehot[np.arange(len(ids)), units] = 1.0
    return onehot


def word_level_attention(attn: np.ndarray, word_ids: Sequence[int]) -> np.ndarray:
    """Piece-level attention maps to word-level maps, the paper's "mean" rule (Clark et al. 2019, 5).

    ``attn`` (..., T, T), rows the attending pieces; ``word_ids`` (T,) the word
    (0..n-1) of each piece, -1 for special tokens, which may only come before
    or after the words. Returns (..., n+2, n+2) float64: index 0 holds all
    leading special tokens ([CLS] / BOS) folded into one, 1..n the words, n+1
    all trailing ones ([SEP] / EOS). Attention *to* a word sums over its pieces,
    attention *from* a word is the mean over its pieces, so rows stay
    distributions. A side without special tokens gets a row and column of zeros
    (its ROOT evidence is then 0).
    """
    from evolution.metrics.heads import word_attention

    a = np.asarray(attn, dtype=np.float64)
    ids = np.asarray(word_ids, dtype=np.int64)
    if a.shape[-2:] != (len(ids), len(ids)):
        raise ValueError(f"attn ends in {a.shape[-2:]}, word_ids has {len(ids)} pieces")
    units = _word_matrix(ids, int(ids.max()) + 1 if len(ids) else 0).argmax(axis=1)  # 0, words 1..n, n+1
    present = np.unique(units)  # a side without special tokens has no unit
    merged = word_attention(a, np.searchsorted(present, units), rule="mean")  # the heads analyses' merge
    out = np.zeros((*a.shape[:-2], int(ids.max()) + 3, int(ids.max()) + 3))
    out[..., present[:, None], present[None, :]] = merged
    return out


def word_level_embeddings(emb: np.ndarray, word_ids: Sequence[int]) -> np.ndarray:
    """Piece vectors (T, d) to word vectors (n, d): the mean over each word's pieces; special tokens dropped."""
    ids = np.asarray(word_ids, dtype=np.int64)
    onehot = _word_matrix(ids, int(ids.max()) + 1)[:, 1:-1]
    return (onehot / onehot.sum(axis=0, keepdims=True)).T @ np.asarray(emb, dtype=np.float64)


@dataclass
class ProbeSentence:
    """One sentence for a probe.

    ``attention`` (K, n+2, n+2) word-level maps (:func:`word_level_attention`;
    leading axes such as (layer, head) are flattened into K), rows attending;
    ``heads`` (n,) gold heads, 0 = ROOT, j = the j-th word (1-based);
    ``punct`` (n,) True where the gold relation is ``punct`` (not scored);
    ``embeddings`` (n, d) word vectors (``*_words`` probes only).
    """

    attention: np.ndarray | None
    heads: np.ndarray
    punct: np.ndarray
    embeddings: np.ndarray | None = None

    def __post_init__(self):
        self.heads = np.asarray(self.heads, dtype=np.int64)
        n = len(self.heads)
        self.punct = np.zeros(n, bool) if self.punct is None else np.asarray(self.punct, dtype=bool)
        if self.attention is not None:
            a = np.asarray(self.attention, dtype=np.float32)
            self.attention = a.reshape(-1, *a.shape[-2:])
            if self.attention.shape[1:] != (n + 2, n + 2):
                raise ValueError(f"attention {a.shape} does not end in (n+2, n+2) = ({n + 2}, {n + 2})")
        if self.embeddings is not None:
            self.embeddings = np.asarray(self.embeddings, dtype=np.float32)
            if self.embeddings.ndim != 2 or len(self.embeddings) != n:
                raise ValueError(f"embeddings {self.embeddings.shape} are not (n, d) with n = {n}")
        if self.punct.shape != (n,) or n == 0 or self.heads.min() < 0 or self.heads.max() > n:
            raise ValueError("heads must be (n,) in 0..n, n >= 1, and punct (n,)")


def distance_features(n: int) -> np.ndarray:
    """Clark's ``make_distance_features`` (raw lines 418-440) as (n, n+1, 8); column 0 is ROOT.

    For word i and candidate word j (column j + 1), 0-based: (j - i) / n if
    i < j else 0; (i - j) / n if j < i else 0; indicators of j - i = 0, -1, +1,
    -2, +2; a ROOT indicator (0 for words). The ROOT column is 0 except that
    indicator.
    """
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    words = [np.where(i < j, (j - i) / n, 0.0), np.where(j < i, (i - j) / n, 0.0)]
    words += [(j - i == k).astype(float) for k in (0, -1, 1, -2, 2)] + [np.zeros((n, n))]
    f = np.zeros((n, n + 1, N_DISTANCE_FEATURES))
    f[:, 1:] = np.stack(words, axis=-1)
    f[:, 0, -1] = 1.0
    return f


def _glorot(gen: torch.Generator, fan_in: int, fan_out: int, shape: tuple[int, ...]) -> torch.nn.Parameter:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return torch.nn.Parameter((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * limit)


class _Net(torch.nn.Module):
    """The three probes of Clark's ``class Probe``; ``forward`` gives (n, n+1) logits."""

    def __init__(self, kind: str, n_maps: int, dim: int, transpose: bool, hidden: int, gen: torch.Generator):
        super().__init__()
        self.kind, self.transpose = kind, transpose
        m = 2 * n_maps if transpose else n_maps
        if kind != "distance_words":
            self.r_start, self.r_end = _glorot(gen, 1, 1, ()), _glorot(gen, 1, 1, ())
        if kind == "attention":
            self.map_weights = _glorot(gen, m, m, (m,))  # TF1 fans of a vector: both its length
        elif kind == "attention_words":  # dense(2d -> m): kernel rows 0..d-1 act on v_i, d..2d-1 on v_j
            self.kernel, self.bias = _glorot(gen, 2 * dim, m, (2 * dim, m)), torch.nn.Parameter(torch.zeros(m))
        else:
            n_in = N_DISTANCE_FEATURES + 2 * dim
            self.kernel = _glorot(gen, n_in, hidden, (n_in, hidden))
            self.bias = torch.nn.Parameter(torch.zeros(hidden))
            self.out_kernel = _glorot(gen, hidden, 1, (hidden,))
            self.out_bias = torch.nn.Parameter(torch.zeros(()))

    def maps(self, attention: torch.Tensor) -> torch.Tensor:
        """(K, n+2, n+2) -> (M, n, n+1): [A, A^T], ROOT column first, then the word-word block."""
        m = torch.cat([attention, attention.transpose(-1, -2)]) if self.transpose else attention
        root = self.r_start * m[:, 1:-1, 0] + self.r_end * m[:, 1:-1, -1]
        return torch.cat([root[..., None], m[:, 1:-1, 1:-1]], dim=-1)

    def pair_dense(self, emb: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        """(v_i + v_j) @ kernel for every (i, candidate j), ROOT's v = 0: (n, n+1, out), without the concatenation."""
        d = emb.shape[1]
        left, right = emb @ kernel[:d], emb @ kernel[d:]
        right = torch.cat([torch.zeros_like(right[:1]), right])
        return left[:, None, :] + right[None, :, :]

    def forward(self, attention: torch.Tensor | None, emb: torch.Tensor | None, dist: torch.Tensor | None):
        """The inputs of :func:`_inputs`: ``attention`` for the attention probes, ``emb`` for the
        word probes, ``dist`` for ``distance_words``; None where the kind reads none."""
        if self.kind == "attention":
            return torch.einsum("k,kij->ij", self.map_weights, self.maps(_needed(attention, self.kind, "attention")))
        if self.kind == "attention_words":
            weights = self.pair_dense(_needed(emb, self.kind, "embeddings"), self.kernel) + self.bias  # (n, n+1, M)
            return torch.einsum("ijk,kij->ij", weights, self.maps(_needed(attention, self.kind, "attention")))
        hidden = torch.tanh(
            _needed(dist, self.kind, "distance features") @ self.kernel[:N_DISTANCE_FEATURES]
            + self.pair_dense(_needed(emb, self.kind, "embeddings"), self.kernel[N_DISTANCE_FEATURES:])
            + self.bias
        )
        return hidden @ self.out_kernel + self.out_bias


def _needed(x: torch.Tensor | None, kind: str, what: str) -> torch.Tensor:
    """An input that a probe of ``kind`` reads, or a ValueError."""
    if x is None:
        raise ValueError(f"a {kind!r} probe needs the sentence's {what}")
    return x


def _inputs(s: ProbeSentence, kind: str):
    att = None if kind == "distance_words" else torch.from_numpy(s.attention).double()
    emb = None if kind == "attention" else torch.from_numpy(s.embeddings).double()
    dist = torch.from_numpy(distance_features(len(s.heads))) if kind == "distance_words" else None
    return att, emb, dist


@dataclass
class Probe:
    """A fitted probe (:func:`fit_probe`). ``params``: its weights as NumPy arrays: ``map_weights``
    (2K,), first the K maps A then their transposes A^T; ``r_start``, ``r_end``; ``kernel`` (2d, 2K)
    / (8 + 2d, hidden) and ``bias``; ``out_kernel``, ``out_bias`` (MLP). With held-out sentences:
    ``curve`` one ``(epoch, loss, uas)`` per epoch trained (held-out mean cross-entropy per word
    and UAS), ``best_epoch`` the epoch whose weights the probe keeps (the lowest loss)."""

    kind: str
    net: _Net
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    best_epoch: int | None = None

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.net.named_parameters()}

    def scores(self, sentence: ProbeSentence) -> np.ndarray:
        """(n, n+1) logits: row i = word i, column 0 = ROOT, column j = the j-th word."""
        with torch.no_grad():
            return self.net(*_inputs(sentence, self.kind)).numpy()

    def predict(self, sentence: ProbeSentence) -> np.ndarray:
        """(n,) predicted heads, 0 = ROOT, j = the j-th word (1-based): the argmax of :meth:`scores`."""
        return self.scores(sentence).argmax(axis=1)


def split_held_out(
    sentences: Sequence[ProbeSentence], fraction: float, *, seed: int = 0
) -> tuple[list[ProbeSentence], list[ProbeSentence]]:
    """(fit, held out): ``round(fraction * n)`` of the ``sentences`` (at least 1 when ``fraction``
    > 0), drawn at random given ``seed``, held out; the rest in their order. ``fraction`` 0: all fit."""
    sentences = list(sentences)
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1), got {fraction}")
    k = max(1, round(fraction * len(sentences))) if fraction > 0 else 0
    if k >= len(sentences):
        raise ValueError(f"holding out {k} of {len(sentences)} sentences leaves none to fit on")
    held = set(np.random.default_rng(seed).permutation(len(sentences))[:k].tolist())
    return ([s for i, s in enumerate(sentences) if i not in held], [s for i, s in enumerate(sentences) if i in held])


def _held_out_score(net: _Net, sentences: Sequence[ProbeSentence], kind: str) -> tuple[float, float]:
    """(mean cross-entropy per word, punctuation included as in training; UAS, punctuation excluded)."""
    total = words = 0.0
    preds = []
    with torch.no_grad():
        for s in sentences:
            logits = net(*_inputs(s, kind))
            total += float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(s.heads), reduction="sum"))
            words += len(s.heads)
            preds.append(logits.argmax(1).numpy())
    return total / words, uas(preds, sentences)


def fit_probe(
    sentences: Sequence[ProbeSentence],
    *,
    kind: ProbeKind = "attention",
    epochs: int = 1,
    lr: float = 0.002,
    transpose: bool = True,
    hidden: int = 256,
    shuffle: bool = False,
    seed: int = 0,
    held_out: Sequence[ProbeSentence] | None = None,
    patience: int = 3,
) -> Probe:
    """Train a probe of Clark et al. (2019, section 5) on ``sentences`` (:class:`ProbeSentence`).

    One sentence per Adam step (``lr``), loss the cross-entropy of every word's
    gold head (punctuation included, as in Clark's code) summed over the
    sentence; ``epochs`` passes (the paper: 1) in the given order, or permuted
    per epoch (``shuffle``). ``transpose=False`` drops the A^T maps (Clark's
    ``include_transpose``); ``hidden`` the MLP width of ``distance_words``.

    ``held_out`` (sentences not in ``sentences``; :func:`split_held_out`): early
    stopping. After each epoch their mean loss per word and UAS are recorded
    (:attr:`Probe.curve`); training stops after ``patience`` epochs without a
    lower loss, or after ``epochs``, and the probe keeps the weights of its
    lowest-loss epoch (:attr:`Probe.best_epoch`).
    Deterministic given ``seed`` (float64, one thread).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    sentences = list(sentences)
    if not sentences:
        raise ValueError("no sentences")
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    held_out = list(held_out) if held_out is not None else []
    needs_att, needs_emb = kind != "distance_words", kind != "attention"
    if needs_att and any(s.attention is None for s in sentences + held_out):
        raise ValueError(f"kind {kind!r} needs every sentence's attention")
    if needs_emb and any(s.embeddings is None for s in sentences + held_out):
        raise ValueError(f"kind {kind!r} needs every sentence's embeddings")
    # (every sentence has them where needed, checked above)
    n_maps = {s.attention.shape[0] for s in sentences + held_out if s.attention is not None} if needs_att else {0}
    dims = {s.embeddings.shape[1] for s in sentences + held_out if s.embeddings is not None} if needs_emb else {0}
    if len(n_maps) > 1 or len(dims) > 1:
        raise ValueError(f"sentences differ in the number of maps {n_maps} or the embedding size {dims}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    curve: list[tuple[int, float, float]] = []
    best_loss, best_epoch, best_state = float("inf"), None, None  # the held-out lowest loss, its epoch and weights
    try:
        gen = torch.Generator().manual_seed(seed)
        net = _Net(kind, n_maps.pop(), dims.pop(), transpose, hidden, gen)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        rng = np.random.default_rng(seed)
        for epoch in range(1, epochs + 1):
            for idx in rng.permutation(len(sentences)) if shuffle else range(len(sentences)):
                s = sentences[idx]
                logits = net(*_inputs(s, kind))
                loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(s.heads), reduction="sum")
                opt.zero_grad()
                loss.backward()
                opt.step()
            if held_out:
                held_loss, score = _held_out_score(net, held_out, kind)
                curve.append((epoch, held_loss, score))
                if held_loss < best_loss:
                    best_loss, best_epoch = held_loss, epoch
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                elif best_epoch is None:
                    raise ValueError(f"held-out loss {held_loss} after epoch {epoch}: the probe diverged")
                elif epoch - best_epoch >= patience:
                    break
        if held_out:
            if best_state is None:
                raise ValueError(f"epochs must be >= 1 to keep the best held-out weights, got {epochs}")
            net.load_state_dict(best_state)
    finally:
        torch.set_num_threads(threads)
    return Probe(kind=kind, net=net, curve=curve, best_epoch=best_epoch)


def right_branching(n: int) -> np.ndarray:
    """The right-branching baseline (Clark et al. 2019, Table 3): every word's head is the next word,
    the last word's head is ROOT. (n,) heads, 0 = ROOT, j = the j-th word (1-based): [2, 3, ..., n, 0]."""
    return np.append(np.arange(2, n + 1), 0).astype(np.int64)


def uas(predictions: Probe | Sequence[np.ndarray], sentences: Sequence[ProbeSentence]) -> float:
    """Unlabelled attachment score: the share of words, pooled over ``sentences``, whose predicted head
    is the gold one, words whose gold relation is ``punct`` left out (Clark's raw lines 580-588).
    ``predictions``: a :class:`Probe` or one (n,) array of heads per sentence. NaN when nothing is scored."""
    sentences = list(sentences)
    preds = [predictions.predict(s) for s in sentences] if isinstance(predictions, Probe) else list(predictions)
    if len(preds) != len(sentences):
        raise ValueError(f"{len(preds)} predictions for {len(sentences)} sentences")
    correct = total = 0
    for p, s in zip(preds, sentences, strict=True):
        p = np.asarray(p)
        if p.shape != s.heads.shape:
            raise ValueError(f"predictions {p.shape} for a sentence of {len(s.heads)} words")
        keep = ~s.punct
        correct += int(np.sum(p[keep] == s.heads[keep]))
        total += int(keep.sum())
    return correct / total if total else float("nan")
