"""Decoder heads of a translation model (:mod:`evolution.analyses.heads`): the per-head
statistics of the decoder self-attention and the encoder-decoder attention,
teacher-forced on the reference translations."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from evolution.analyses.base import Inputs, load_texts, save_texts
from evolution.analyses.heads.statistics import rare_token_hit, rarest_positions
from evolution.metrics.plan import rows_by_sentence

ATTENTIONS = ("decoder_self", "encoder_decoder")


def decoder_text(inputs: Inputs) -> str:
    """Save the analysed sentences' reference translations and the training split's target
    side with :func:`~evolution.analyses.base.save_texts` (beside the representation store,
    where every worker reads) and return the file's path."""
    from pathlib import Path

    return save_texts(
        inputs.arrays_dir,
        "heads-decoder",
        {
            "targets": "\n".join(inputs.targets.sentences),
            "training": Path(inputs.targets.training_text).read_text(encoding="utf-8"),
        },
    )


def decoder_task(
    *,
    store: str,
    model: str,
    spec: dict,
    text: str,
    max_batch_tokens: int,
    punctuation: Literal["clark", "unicode"] = "clark",
    torch_threads: int = 1,
) -> dict[str, Any]:
    """The decoder heads of a translation model (Voita et al. ACL 2019 measured the roles of
    encoder heads; here the same statistics where they apply to the decoder): teacher-forced
    on the reference translation ``targets[s]`` of every analysed sentence ``s`` (``text``:
    the arrays of :func:`decoder_text`, beside the store so that any worker reads them; the
    store's source token ids, truncation included), per-head sums of :data:`MEASURES`
    for the decoder self-attention (causal; queries ``</s> y1..ym``) and the
    encoder-decoder attention (keys: the source ``x1..xn </s>``), pooled as in
    :func:`~evolution.analyses.heads.statistics.heads_task`, and the rare-token hits: the
    least frequent target token(s) (counts on the training split's target side; the queries
    that can see the first of them, the start symbol never) and the least frequent source
    token(s) (the store's ``train_count``; every decoder query), with the tie rule of
    :func:`~evolution.analyses.heads.statistics.rare_token_hit`; main-text sentences only.
    ``punctuation``: the rule of :func:`~evolution.metrics.heads.is_punctuation`."""
    from collections import Counter

    import torch

    from evolution.extract import batches
    from evolution.metrics.heads import MEASURES, cross_head_sums, head_sums, is_punctuation
    from evolution.models import cached_adapter
    from evolution.store import open_representations

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if not adapter.supports_decoder:
        return {
            "unsupported": f"{model}: {type(adapter).__name__} cannot return decoder attention; decoder heads "
            "are measured for fairseq translation models"
        }
    texts = load_texts(text)
    targets = texts["targets"].split("\n")
    reps = open_representations(store, model)
    rows_of = rows_by_sentence(reps["sentence"].values)
    token_id = reps["token_id"].values
    # punctuation is the text's (an apostrophe the model saw as <unk> is still punctuation)
    token_str = reps["token_text" if "token_text" in reps.coords else "token_str"].values
    source_count = reps["train_count"].values if "train_count" in reps.coords else None
    annotated_from = int(reps.attrs.get("annotated_from", -1))
    sentences = [
        s
        for s in sorted(rows_of)
        if s < len(targets) and targets[s].strip() and (annotated_from < 0 or s < annotated_from)
    ]
    target_counts: Counter = Counter()
    for line in texts["training"].splitlines():
        if line.strip():
            target_counts.update(adapter.tokenize_target(line.strip()).ids)
    limit, truncated = adapter.max_target_tokens, 0
    pairs = []
    for s in sentences:
        tok = adapter.tokenize_target(targets[s])
        truncated += len(tok) > limit
        ids, pieces = tok.ids[:limit], tok.pieces[:limit]
        pairs.append(
            (adapter.build_input(token_id[rows_of[s]].tolist()), adapter.build_decoder_input(ids), ids, pieces)
        )
    n_prefix = adapter.content_offset
    src_suffix = len(adapter.suffix)
    sums: dict[str, float | np.ndarray] = {a: 0.0 for a in ATTENTIONS}
    counts: dict[str, Counter] = {a: Counter() for a in ATTENTIONS}
    rare_hits: dict[str, float | np.ndarray] = {a: 0.0 for a in ATTENTIONS}
    rare_sentences = {a: 0 for a in ATTENTIONS}
    for batch in batches([max(len(p[0]), len(p[1])) for p in pairs], max_batch_tokens=max_batch_tokens):
        own, cross = adapter.forward_decoder([pairs[i][0] for i in batch], [pairs[i][1] for i in batch])
        for b, i in enumerate(batch):
            src, dec, ids, pieces = pairs[i]
            rows = rows_of[sentences[i]]
            ts, tt = len(src), len(dec)
            dec_punct = np.array([False] + [is_punctuation(p, rule=punctuation) for p in pieces])
            first = np.arange(tt) == 0
            a_own = np.asarray(own[:, b, :, :tt, :tt], dtype=np.float64)
            s_own, c_own, _ = head_sums(a_own, bos=first, eos=np.zeros(tt, bool), punct=dec_punct, causal=True)
            src_punct = np.zeros(ts, bool)
            src_punct[n_prefix : ts - src_suffix] = [is_punctuation(str(p), rule=punctuation) for p in token_str[rows]]
            a_cross = np.asarray(cross[:, b, :, :tt, :ts], dtype=np.float64)
            s_cross, c_cross = cross_head_sums(
                a_cross, bos=np.arange(ts) < n_prefix, eos=np.arange(ts) >= ts - src_suffix, punct=src_punct
            )
            for a, sm, c in (("decoder_self", s_own, c_own), ("encoder_decoder", s_cross, c_cross)):
                sums[a] = sums[a] + sm
                counts[a].update(c)
            rarest = rarest_positions([target_counts.get(t, 0) for t in ids])
            if rarest is not None:  # the least frequent target token(s), for the queries that can see one
                rare = np.concatenate([[False], rarest])  # decoder input: </s> y1..ym
                first_rare = int(np.flatnonzero(rare)[0])
                rare_hits["decoder_self"] += rare_token_hit(a_own, rare=rare, queries=np.arange(tt) >= first_rare)
                rare_sentences["decoder_self"] += 1
            rarest = None if source_count is None else rarest_positions(source_count[rows])
            if rarest is not None:
                rare = np.zeros(ts, bool)
                rare[n_prefix : ts - src_suffix] = rarest
                rare_hits["encoder_decoder"] += rare_token_hit(a_cross, rare=rare, queries=np.ones(tt, bool))
                rare_sentences["encoder_decoder"] += 1
    if not pairs:
        return {"sentences": 0, "notes": [f"{model}: no analysed sentence has a target side; no decoder heads"]}
    notes = []
    if truncated:
        notes.append(
            f"{model}: {truncated} target sentence(s) longer than the decoder's {limit} positions were "
            "truncated for the decoder heads"
        )
    return {
        "sums": np.stack([np.asarray(sums[a]) for a in ATTENTIONS]),
        "counts": {a: dict(counts[a]) for a in ATTENTIONS},
        "rare_hits": np.stack([np.zeros(np.shape(sums[a])[:2]) + rare_hits[a] for a in ATTENTIONS]),
        "rare_sentences": [rare_sentences[a] for a in ATTENTIONS],
        "sentences": len(pairs),
        "target_tokens": int(sum(len(p[2]) for p in pairs)),
        "notes": notes,
        "measures": list(MEASURES),
    }
