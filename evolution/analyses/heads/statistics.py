"""The per-head statistics unit of the heads analysis (:mod:`evolution.analyses.heads`):
every sentence of the analysis set re-run, per-head sums pooled over every query
(Clark et al. 2019, Voita et al. ACL 2019, Kobayashi et al. 2020), rare-token hits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evolution.metrics.plan import rows_by_sentence

KEY_TYPES = ("bos", "eos", "punct")


def rarest_positions(counts: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """The sentence's rarest tokens: a bool mask (n,) over its content tokens of those whose
    training-split count is the sentence's minimum, every tied position included (a rare word
    repeated, or two types seen equally rarely); None when the sentence has fewer than two
    tokens or every token ties (no token is rarer than the others: the sentence is skipped)."""
    counts = np.asarray(counts)
    if len(counts) < 2:
        return None
    rare = counts == counts.min()
    return None if rare.all() else rare


def rare_token_hit(alpha: np.ndarray, *, rare: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(L, H): how far each head of one sentence points to its rarest token (Voita et al. ACL
    2019, rare-token heads).

    ``alpha`` (L, H, T_query, T_key); ``rare`` (T_key,) bool, the rarest token(s)
    (:func:`rarest_positions`, in input positions); ``queries`` (T_query,) bool, the
    queries that count: content tokens only, so never an EOS (or BOS) query. The head
    points to the key holding the most of these queries' maxima (argmax over every key);
    a hit is 1 when that key is a rarest token. Tie rule: when k keys hold equally many
    maxima, the hit is the share of them that are rarest tokens (order-free, in [0, 1]).
    """
    alpha = np.asarray(alpha)
    rare, queries = np.asarray(rare, bool), np.asarray(queries, bool)
    if not queries.any() or not rare.any():
        return np.zeros(alpha.shape[:2])
    tally = maxima_per_key(alpha, queries=queries)
    modal = tally == tally.max(-1, keepdims=True)
    return (modal & rare).sum(-1) / modal.sum(-1)


def maxima_per_key(alpha: np.ndarray, *, queries: np.ndarray) -> np.ndarray:
    """(L, H, T_key): for each key, how many of the ``queries`` (T_query,) bool give it their
    largest weight in ``alpha`` (L, H, T_query, T_key)."""
    amax = np.asarray(alpha)[..., np.asarray(queries, bool), :].argmax(-1)  # (L, H, queries)
    return (amax[..., None] == np.arange(np.shape(alpha)[-1])).sum(-2)


def heads_task(
    *,
    store: str,
    model: str,
    spec: dict,
    causal: bool,
    max_batch_tokens: int,
    punctuation: Literal["clark", "unicode"] = "clark",
    torch_threads: int = 1,
    sentences: int | None = None,
) -> dict[str, Any]:
    """Per-head sums over every sentence of the analysis set, streamed: the model re-runs on
    the stored token ids (truncation included) in batches and no map is kept. Also the
    Spearman correlation of ||f(x)|| and of the attention a token receives with its
    frequency (Kobayashi et al. 2020, section 5; both averaged over heads, per layer; a
    positive value: rarer tokens score higher), and the rare-token hits (Voita et al. ACL
    2019; :func:`rare_token_hit`) over the main text's sentences only (those before the
    store's ``annotated_from``: the annotated treebank analysed beside it is another
    domain). Frequency: the training-split counts (``train_count``) where the store has
    them, else the store's ``freq_rank``. ``punctuation``: the rule of
    :func:`~evolution.metrics.heads.is_punctuation` (``metrics.heads.punctuation``);
    ``sentences``: the first N sentences of the store only (``metrics.heads.sentences``)."""
    import torch
    from scipy.stats import spearmanr

    from evolution.extract import batches
    from evolution.metrics.heads import COUNTS, MEASURES, head_sums, is_punctuation, special_shares
    from evolution.models import cached_adapter
    from evolution.store import open_representations

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    reps = open_representations(store, model)
    rows_of = rows_by_sentence(reps["sentence"].values)
    token_id = reps["token_id"].values
    # punctuation is the text's (an apostrophe the model saw as <unk> is still punctuation)
    token_str = reps["token_text" if "token_text" in reps.coords else "token_str"].values
    train_count = reps["train_count"].values if "train_count" in reps.coords else None
    # Spearman needs a rank that grows with rarity: minus the count, or freq_rank (1 = most frequent)
    rank = -train_count if train_count is not None else reps["freq_rank"].values
    annotated_from = int(reps.attrs.get("annotated_from", -1))
    analysed = sorted(rows_of)[:sentences]  # None: all
    inputs = [adapter.build_input(token_id[rows_of[s]].tolist()) for s in analysed]
    n_prefix, n_suffix = adapter.content_offset, len(adapter.suffix)
    has_norms = adapter.supports_norms
    L, H = adapter.num_layers, adapter.num_heads
    sums, norm_sums = np.zeros((L, H, len(MEASURES))), np.zeros((L, H, len(KEY_TYPES)))
    layer_norm_sums = np.zeros((L, len(KEY_TYPES)))
    counts = dict.fromkeys(set(COUNTS.values()), 0)
    ranks, received, value_norm = [], [], []  # per content token: frequency, (L,) means over heads
    rare_hits, rare_sentences = np.zeros((L, H)), 0
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        xs = [inputs[i] for i in batch]
        norms: dict[str, np.ndarray] | None = None  # (with has_norms)
        if has_norms:
            _, att, norms = adapter.forward_norms(xs)
        else:
            _, maybe_att = adapter.forward(xs, attention=True)
            assert maybe_att is not None  # attention=True
            att = maybe_att
        for b, i in enumerate(batch):
            t, rows = len(inputs[i]), rows_of[analysed[i]]
            bos = np.arange(t) < n_prefix
            eos = np.arange(t) >= t - n_suffix
            punct = np.zeros(t, bool)
            punct[n_prefix : t - n_suffix] = [is_punctuation(str(p), rule=punctuation) for p in token_str[rows]]
            alpha = np.asarray(att[:, b, :, :t, :t], dtype=np.float64)
            norm = np.asarray(norms["weighted_norm"][:, b, :, :t, :t], dtype=np.float64) if norms is not None else None
            s, c, ns = head_sums(alpha, bos=bos, eos=eos, punct=punct, causal=causal, norm=norm)
            content = slice(n_prefix, t - n_suffix)
            sums += s
            for name, v in c.items():
                counts[name] += v
            rarest = None
            if train_count is not None and (annotated_from < 0 or analysed[i] < annotated_from):
                rarest = rarest_positions(train_count[rows])
            if rarest is not None:  # the sentence's least frequent token(s), content queries only
                rare = np.zeros(t, bool)
                rare[content] = rarest
                rare_hits += rare_token_hit(alpha, rare=rare, queries=~(bos | eos))
                rare_sentences += 1
            ranks.append(rank[rows])
            received.append(alpha.mean(axis=(1, 2))[:, content])  # (L, n): per key, mean over heads and queries
            if norms is not None and ns is not None:  # (has_norms: head_sums summed the norms too)
                norm_sums += ns
                value_norm.append(np.asarray(norms["value_norm"][:, b, :, :t], dtype=np.float64).mean(1)[:, content])
                layer_norm_sums += special_shares(
                    np.asarray(norms["summed_norm"][:, b, :t, :t], dtype=np.float64), bos=bos, eos=eos, punct=punct
                )
    out: dict[str, Any] = {
        "sums": sums,
        "counts": counts,
        "sentences": len(analysed),
        "frequency": "train_count" if train_count is not None else "freq_rank",
    }
    spearman = np.full((L, 2), np.nan)
    r = np.concatenate(ranks)
    for j, values in enumerate((value_norm, received)):
        if values:
            per_layer = np.concatenate(values, axis=1)
            spearman[:, j] = [spearmanr(per_layer[layer], r).statistic for layer in range(L)]
    out["spearman"] = spearman
    if rare_sentences:
        out.update(rare_hits=rare_hits, rare_sentences=rare_sentences)
    if has_norms:
        out.update(norm_sums=norm_sums, layer_norm_sums=layer_norm_sums)
    return out
