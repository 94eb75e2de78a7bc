"""Per-head attention statistics (Clark et al. 2019; Voita et al. ACL 2019; Kobayashi et al. 2020).

Everything here works on one sentence's maps, ``alpha`` (L, H, T, T) with rows
the queries and columns the keys (input positions, special tokens included),
and returns sums over queries so that a caller can pool sentences exactly
(statistic = sum of sums / sum of counts).

Definitions (docs/heads.md):

* entropy of a query's distribution in nats, against the uniform baseline
  log(n) over the n keys it may attend to (all T in an encoder, the first
  i + 1 in a causal LM);
* attention to the beginning special token(s) (BOS / [CLS]: the adapter's
  ``prefix``), the end special token(s) (EOS / [SEP]: its ``suffix``),
  punctuation, the query itself, the previous and the next token; NaN for a
  special token the model's input does not have (the MT encoder has no BOS,
  the LM no EOS), not 0;
* confidence (Voita et al. ACL 2019: "the average of its maximum attention
  weight excluding the end of sentence symbol"): per content query (special
  tokens are not queries) the largest weight on a content key, the weights
  on the special tokens (the sinks: BOS / EOS / [CLS] / [SEP]) left out and
  the row not renormalised; ``confidence_with_sink``: the maximum over every
  key, EOS queries excluded (this project's definition before; a BOS sink
  inflates it);
* where the maximum weight goes: relative offsets -1, 0, +1 (a positional
  head has >= 90% of its maxima on one offset).

Word-level maps (:func:`word_attention`): attention *to* a word is the sum over
its pieces; attention *from* a word is the mean over its pieces (Clark et al.
2019), or its first piece (``rule="first"``, what the released
attention-analysis code does).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = [
    "word_attention",
    "word_units",
    "is_punctuation",
    "head_sums",
    "cross_head_sums",
    "key_shares",
    "special_shares",
    "dependency_hits",
    "js_divergence_sums",
    "MEASURES",
    "COUNTS",
    "OFFSETS",
    "DIRECTIONS",
    "CLARK_PUNCTUATION",
]

#: the per-head statistics, in the order of :func:`head_sums`'s ``sums`` (last axis)
MEASURES = (
    "entropy",
    "uniform_entropy",
    "to_bos",
    "to_eos",
    "to_punct",
    "to_self",
    "to_prev",
    "to_next",
    "confidence",
    "max_prev",
    "max_self",
    "max_next",
    "confidence_with_sink",
)
#: the denominator of each measure in :func:`head_sums`'s ``counts``
COUNTS = {
    "entropy": "queries",
    "uniform_entropy": "queries",
    "to_bos": "queries",
    "to_eos": "queries",
    "to_punct": "queries",
    "to_self": "queries",
    "to_prev": "with_prev",
    "to_next": "with_next",
    "confidence": "content",
    "max_prev": "queries",
    "max_self": "queries",
    "max_next": "queries",
    "confidence_with_sink": "non_eos",
}


def word_attention(
    alpha: np.ndarray, units: Sequence[int] | np.ndarray, *, rule: Literal["mean", "first"] = "mean"
) -> np.ndarray:
    """Merge subword attention into word (unit) attention.

    ``alpha`` (..., T, T), rows queries; ``units`` (T,) the unit of each input
    position, 0..U-1 (a word's pieces share a unit; give each special token a
    unit of its own). Returns (..., U, U): the attention *to* a unit is the
    sum over its positions (columns), the attention *from* a unit the mean
    over its positions (``rule="mean"``, Clark et al. 2019) or its first
    position's row (``rule="first"``). Rows stay distributions.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    unit = np.asarray(units)
    n_units = int(unit.max()) + 1
    if alpha.shape[-1] != len(unit) or alpha.shape[-2] != len(unit):
        raise ValueError(f"alpha ends in {alpha.shape[-2:]}, units has {len(unit)} positions")
    onehot = np.zeros((len(unit), n_units))
    onehot[np.arange(len(unit)), unit] = 1.0
    to_units = alpha @ onehot  # (..., T, U): sum over each unit's keys
    if rule == "mean":
        rows = onehot / onehot.sum(axis=0, keepdims=True)  # (T, U): mean over each unit's queries
        return np.swapaxes(np.swapaxes(to_units, -1, -2) @ rows, -1, -2)
    if rule == "first":
        first = np.array([int(np.flatnonzero(unit == u)[0]) for u in range(n_units)])
        return to_units[..., first, :]
    raise ValueError(f"rule must be 'mean' or 'first', got {rule!r}")


_WORD_MARKERS = ("\u2581", "\u0120", "##")

#: the punctuation of Clark et al.'s released code (General_Analysis.ipynb: ``token == "." or token == ","``)
CLARK_PUNCTUATION = frozenset({".", ","})


def is_punctuation(piece: str, *, rule: Literal["clark", "unicode"] = "clark") -> bool:
    """Whether a token string counts as punctuation, its word marker (``▁``, ``Ġ``, ``##``) stripped.

    ``rule="clark"`` (default): the piece is ``.`` or ``,``, as Clark et al.'s released
    attention-analysis code counts it; ``rule="unicode"``: every character of the piece is
    Unicode punctuation (category P*: also ``!``, ``?``, ``;``, quotes, brackets, dashes).
    """
    for m in _WORD_MARKERS:
        if piece.startswith(m):
            piece = piece[len(m) :]
            break
    if rule == "clark":
        return piece in CLARK_PUNCTUATION
    if rule == "unicode":
        return bool(piece) and all(unicodedata.category(c).startswith("P") for c in piece)
    raise ValueError(f"rule must be 'clark' or 'unicode' (metrics.heads.punctuation), got {rule!r}")


def _to_keys(alpha: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per query the weight on the keys of ``mask`` (T_key,): (..., T_query); NaN where the
    input has no such key (attention to a token the model does not have is not 0)."""
    mask = np.asarray(mask, bool)
    if not mask.any():
        return np.full(alpha.shape[:-1], np.nan)
    return alpha[..., mask].sum(-1)


def _content_max(alpha: np.ndarray, sink: np.ndarray) -> np.ndarray:
    """Per query the largest weight on a key that is not a sink (special token): (..., T_query);
    NaN where every key is a sink."""
    sink = np.asarray(sink, bool)
    if sink.all():
        return np.full(alpha.shape[:-1], np.nan)
    return alpha[..., ~sink].max(-1)


def head_sums(
    alpha: np.ndarray,
    *,
    bos: np.ndarray,
    eos: np.ndarray,
    punct: np.ndarray,
    causal: bool,
    norm: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, int], np.ndarray | None]:
    """Sums over the queries of one sentence of every measure in :data:`MEASURES`.

    ``alpha`` (L, H, T, T) one sentence's maps (no padding); ``bos``, ``eos``,
    ``punct`` (T,) bool masks of the keys; ``causal``: queries see only keys
    <= themselves (for the uniform baseline). Returns ``sums`` (L, H,
    measures), ``counts`` (the denominators named in :data:`COUNTS`) and, with
    ``norm`` (L, H, T, T) = ||alpha_ij f_h(x_j)|| (Kobayashi et al. 2020),
    ``norm_sums`` (L, H, 3): the shares of each query's norm mass going to
    bos, eos and punctuation keys, summed over queries. ``to_bos`` / ``to_eos``
    (and their norm shares) are NaN when the mask is empty.

    ``confidence`` (Voita et al. ACL 2019): summed over the content queries
    (neither ``bos`` nor ``eos``), each query's largest weight on a content key;
    ``confidence_with_sink``: summed over the non-EOS queries, the largest weight
    on any key.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    bos, eos = np.asarray(bos, bool), np.asarray(eos, bool)
    L, H, T, _ = alpha.shape
    idx = np.arange(T)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(alpha > 0, alpha * np.log(alpha), 0.0).sum(-1)  # (L, H, T)
    n_keys = idx + 1 if causal else np.full(T, T)
    uniform = np.broadcast_to(np.log(n_keys), (L, H, T))
    amax = alpha.argmax(-1)  # (L, H, T)
    offset = amax - idx
    prev = np.zeros((L, H, T))
    prev[..., 1:] = alpha[..., idx[1:], idx[1:] - 1]
    nxt = np.zeros((L, H, T))
    nxt[..., :-1] = alpha[..., idx[:-1], idx[:-1] + 1]
    sink = bos | eos
    conf = np.where(sink, 0.0, _content_max(alpha, sink))  # sink queries add 0 and are not counted
    conf_sink = np.where(eos[None, None, :], 0.0, alpha.max(-1))
    per_query = [
        ent,
        uniform,
        _to_keys(alpha, bos),
        _to_keys(alpha, eos),
        alpha[..., np.asarray(punct, bool)].sum(-1),
        alpha[..., idx, idx],
        prev,
        nxt,
        conf,
        offset == -1,
        offset == 0,
        offset == 1,
        conf_sink,
    ]
    sums = np.stack([np.asarray(p, dtype=np.float64).sum(-1) for p in per_query], axis=-1)
    counts = {
        "queries": T,
        "with_prev": T - 1,
        "with_next": T - 1,
        "non_eos": int((~eos).sum()),
        "content": int((~sink).sum()),
    }
    norm_sums = None if norm is None else special_shares(norm, bos=bos, eos=eos, punct=punct)
    return sums, counts, norm_sums


def cross_head_sums(
    alpha: np.ndarray, *, bos: np.ndarray, eos: np.ndarray, punct: np.ndarray
) -> tuple[np.ndarray, dict[str, int]]:
    """:func:`head_sums` for attention between two sequences (a translation model's
    encoder-decoder attention): ``alpha`` (L, H, T_query, T_key), the masks over the
    keys (source positions). The measures that need a query's own position in the keys
    (to self / previous / next, the offsets of the maximum) are NaN; entropy's uniform
    baseline is log(T_key); every query counts; ``confidence`` is the largest weight on
    a source key that is neither ``bos`` nor ``eos``, ``confidence_with_sink`` on any
    key; ``to_bos`` / ``to_eos`` are NaN for a mask that is empty (the source has no BOS).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    bos, eos = np.asarray(bos, bool), np.asarray(eos, bool)
    L, H, Tq, Tk = alpha.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(alpha > 0, alpha * np.log(alpha), 0.0).sum(-1)
    applies = {
        "entropy": ent,
        "uniform_entropy": np.full((L, H, Tq), np.log(Tk)),
        "to_bos": _to_keys(alpha, bos),
        "to_eos": _to_keys(alpha, eos),
        "to_punct": alpha[..., np.asarray(punct, bool)].sum(-1),
        "confidence": _content_max(alpha, bos | eos),
        "confidence_with_sink": alpha.max(-1),
    }
    sums = np.stack([applies[m].sum(-1) if m in applies else np.full((L, H), np.nan) for m in MEASURES], axis=-1)
    return sums, {"queries": Tq, "with_prev": Tq, "with_next": Tq, "non_eos": Tq, "content": Tq}


def key_shares(weights: np.ndarray, masks: Sequence[np.ndarray]) -> np.ndarray:
    """Per query, the share of its row of ``weights`` (..., T, T) that goes to the keys of
    each mask (T,), summed over queries: (..., len(masks)). For attention weights the rows
    already sum to 1; for norms (Kobayashi et al. 2020) this makes them comparable shares."""
    w = np.asarray(weights, dtype=np.float64)
    share = w / np.maximum(w.sum(-1, keepdims=True), 1e-30)
    return np.stack([share[..., np.asarray(m, bool)].sum(-1).sum(-1) for m in masks], axis=-1)


def special_shares(weights: np.ndarray, *, bos: np.ndarray, eos: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """:func:`key_shares` for the key types bos, eos, punct: (..., 3), NaN for bos or eos when
    the input has no such token (the MT encoder's BOS, the LM's EOS); a sentence without
    punctuation gives 0."""
    out = key_shares(weights, [bos, eos, punct])
    for k, mask in enumerate((bos, eos)):
        if not np.asarray(mask, bool).any():
            out[..., k] = np.nan
    return out


#: relative offsets of the fixed-offset baseline (Clark et al. 2019: the best "predict the
#: word at offset k" rule per relation)
OFFSETS = tuple(k for k in range(-5, 6) if k != 0)


def word_units(word_ids: Sequence[int], *, n_prefix: int, n_suffix: int) -> np.ndarray:
    """The unit of every input position (T,) for :func:`word_attention`: each prefix special
    token its own unit first, then the words in order, then each suffix special token.
    ``word_ids`` (content tokens) must number words 0..n-1."""
    w = np.asarray(word_ids, dtype=np.int64)
    n_words = int(w.max()) + 1 if len(w) else 0
    return np.concatenate([np.arange(n_prefix), n_prefix + w, n_prefix + n_words + np.arange(n_suffix)])


#: the directions of :func:`dependency_hits`, in the order of its last axis
DIRECTIONS = ("dependent_to_head", "head_to_dependent", "head_to_dependent_clark")


def dependency_hits(
    word_alpha: np.ndarray, heads: Sequence[int], relations: Sequence[int], n_relations: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (layer, head, relation, direction) the number of dependency arcs that an attention
    head's maxima predict (Clark et al. 2019, section 4.2; Voita et al. ACL 2019, section 5.2).

    ``word_alpha`` (L, H, n, n) word-to-word attention of one sentence (special
    tokens removed), rows the attending words; ``heads`` (n,) CoNLL-U heads
    (1-based, 0 = root, whose arcs are skipped); ``relations`` (n,) relation
    codes. An arc (dependent d, head g) is a hit, by direction
    (:data:`DIRECTIONS`, the word's own weight always left out):

    0. ``dependent_to_head``: d's most attended other word is g (row d; Clark
       et al.'s "dep->head", the map as it is);
    1. ``head_to_dependent``: g's most attended other word is d (row g; the
       relation read from the head word, as Voita et al.'s syntactic heads);
    2. ``head_to_dependent_clark``: of all other words, g is the one that
       attends most to d (column d; Clark et al.'s released code, the map
       transposed, "head<-dep": it predicts d's head, so every dependent of a
       word can be a hit, where direction 1 gives each head word one guess).

    Returns ``hits`` (L, H, R, 3), ``arcs`` (R,) counted arcs and
    ``offset_hits`` (len(:data:`OFFSETS`), R, 3): the same for the rule "the
    word at offset k" (directions 0 and 2: g = d + k, Clark et al.'s baseline;
    direction 1: d = g + k); an offset past the sentence predicts nothing.
    """
    a = np.array(word_alpha, dtype=np.float64)
    L, H, n, _ = a.shape
    a[..., np.arange(n), np.arange(n)] = -np.inf  # another word
    pred = a.argmax(-1)  # (L, H, n): the most attended other word of each word
    attended_by = a.argmax(-2)  # (L, H, n): the other word that attends most to each word
    hits = np.zeros((L, H, n_relations, len(DIRECTIONS)), dtype=np.int64)
    arcs = np.zeros(n_relations, dtype=np.int64)
    offset_hits = np.zeros((len(OFFSETS), n_relations, len(DIRECTIONS)), dtype=np.int64)
    for dep, (head, rel) in enumerate(zip(heads, relations, strict=True)):
        if head == 0:
            continue
        g = head - 1
        arcs[rel] += 1
        hits[:, :, rel, 0] += pred[:, :, dep] == g
        hits[:, :, rel, 1] += pred[:, :, g] == dep
        hits[:, :, rel, 2] += attended_by[:, :, dep] == g
        for k, off in enumerate(OFFSETS):
            offset_hits[k, rel, 0] += dep + off == g
            offset_hits[k, rel, 1] += g + off == dep
            offset_hits[k, rel, 2] += dep + off == g
    return hits, arcs, offset_hits


def js_divergence_sums(p: np.ndarray, *, block_bytes: int = 1 << 26) -> np.ndarray:
    """Jensen-Shannon divergence (nats) between every two heads' rows, summed over queries.

    ``p`` (N, n, n): N heads' distributions for the same n queries over the same
    keys (rows sum to 1, strictly positive). Returns (N, N):
    sum_i JS(p_a[i], p_b[i]), with JS = H((p + q) / 2) - (H(p) + H(q)) / 2.

    The mixtures are formed for a block of heads ``a`` at a time, ``block_bytes`` (64 MiB) of
    float64 each: all at once they are (N, N, n, n), 5.8 GB for the 672 heads of BERT-base,
    GPT-2 small and a Pythia-410M shape on a 40-word sentence (and as much again for their
    logarithm). Each (a, b) entry is computed as it would be all at once: the same numbers.
    """
    p = np.asarray(p, dtype=np.float64)
    ent = -(p * np.log(p)).sum(-1)  # (N, n)
    heads = p.shape[0]
    out = np.empty((heads, heads))
    step = max(1, block_bytes // max(1, p[0].nbytes * heads))
    for a in range(0, heads, step):
        mix = (p[a : a + step, None] + p[None]) / 2  # (block, N, n, n)
        out[a : a + step] = (-(mix * np.log(mix)).sum(-1) - (ent[a : a + step, None] + ent[None]) / 2).sum(-1)
    return out
