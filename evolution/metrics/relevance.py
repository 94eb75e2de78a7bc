"""Head relevance by layer-wise relevance propagation (Voita, Talbot, Moiseev, Sennrich &
Titov, ACL 2019, sec. 4.2; rules in :mod:`evolution.nets.lrp`).

For each predicted position ("decoding step") t of a sentence, the relevance
of the top-1 logit y_t = max_v logit_t(v) is propagated back to the output
of every head (before the attention's output projection). A head's relevance
at that step is the sum over its units (every query position and feature of
its output) of |R|; it is normalised over the heads of its layer (the heads
of a layer sum to 1), and averaged over every step of every sentence.

Steps are the :class:`~evolution.metrics.importance.Item` positions: the
target positions of a translation (teacher-forced on the reference: the
model's own top-1 prediction at each step of the reference prefix), every
position of the LM, the corrupted positions of the MLM.

Shapes: ``L`` layers, ``H`` heads, ``S`` steps in all.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np

__all__ = ["head_relevance", "normalize_over_heads"]


def normalize_over_heads(scores: np.ndarray) -> np.ndarray:
    """``(..., L, H)`` scores divided by their sum over the heads of each layer (a layer whose
    heads all have zero relevance stays zero)."""
    scores = np.asarray(scores, dtype=np.float64)
    total = scores.sum(axis=-1, keepdims=True)
    return np.divide(scores, total, out=np.zeros_like(scores), where=total > 0)


def head_relevance(adapter, items: Sequence, *, attentions: Sequence[str] = ("encoder_self",),
                   max_batch_tokens: int = 4096, per_step: bool = False) -> dict:
    """Relevance of every head of every attention type for the top-1 logit of every step.

    Returns ``{"relevance": {attention: (L, H)}, "steps": S}`` (the mean over steps of the
    per-layer normalised relevance) and with ``per_step`` also ``"per_step": {attention: (S, L, H)}``.
    Each step is its own copy of the sentence in a batch (one backward pass per batch gives
    every copy's own gradient).
    """
    import torch

    from evolution.extract import batches
    from evolution.nets.lrp import conservative_rules, relevance

    steps = [(i, int(p)) for i, it in enumerate(items) if it is not None for p in it.positions]
    projections = {a: adapter.output_projections(a) for a in attentions}
    heads = {a: adapter.attention_modules(a)[0].num_heads for a in attentions}
    per = {a: np.zeros((len(steps), len(projections[a]), heads[a])) for a in attentions}
    model = adapter._model
    for batch in batches([items[i].length for i, _ in steps], max_batch_tokens=max_batch_tokens):
        chosen = [items[steps[k][0]] for k in batch]
        captured: dict[str, list] = {a: [] for a in attentions}
        with contextlib.ExitStack() as stack:
            stack.enter_context(conservative_rules(model))
            for a in attentions:
                for proj in projections[a]:
                    stack.callback(proj.register_forward_pre_hook(
                        lambda module, args, store=captured[a]: store.append(args[0])).remove)
            decoder = [it.decoder_inputs for it in chosen] if chosen[0].decoder_inputs is not None else None
            logits = adapter.logits([it.inputs for it in chosen], decoder)  # (B, T, V)
        rows = torch.arange(len(batch))
        at = torch.as_tensor([steps[k][1] for k in batch])
        top = logits[rows, at].max(dim=-1).values  # (B,) the top-1 logit of each copy's step
        flat = [z for a in attentions for z in captured[a]]
        rel = relevance(top, flat)
        k = 0
        for a in attentions:
            for layer in range(len(projections[a])):
                r = rel[k].abs()  # (T, B, H * d_head): fairseq's layout
                k += 1
                t, b, d = r.shape
                per[a][batch, layer] = r.view(t, b, heads[a], d // heads[a]).sum(dim=(0, 3)).double().numpy()
    out = {"relevance": {a: normalize_over_heads(per[a]).mean(axis=0) if len(steps) else
                         np.full(per[a].shape[1:], np.nan) for a in attentions}, "steps": len(steps)}
    if per_step:
        out["per_step"] = {a: normalize_over_heads(per[a]) for a in attentions}
    return out
