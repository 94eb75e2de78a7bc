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
from collections.abc import Sequence

import numpy as np

__all__ = ["head_relevance", "normalize_over_heads"]


def normalize_over_heads(scores: np.ndarray) -> np.ndarray:
    """``(..., L, H)`` scores divided by their sum over the heads of each layer (a layer whose
    heads all have zero relevance stays zero)."""
    scores = np.asarray(scores, dtype=np.float64)
    total = scores.sum(axis=-1, keepdims=True)
    return np.divide(scores, total, out=np.zeros_like(scores), where=total > 0)


def head_relevance(
    adapter,
    items: Sequence,
    *,
    attentions: Sequence[str] = ("encoder_self",),
    max_batch_tokens: int = 4096,
    per_step: bool = False,
) -> dict:
    """Relevance of every head of every attention type for the top-1 logit of every step.

    Returns ``{"relevance": {attention: (L, H)}, "steps": S}`` (the mean over steps of the
    per-layer normalised relevance) and with ``per_step`` also ``"per_step": {attention: (S, L, H)}``.

    One forward pass per sentence under the rules, then one batched backward pass
    (``torch.autograd.grad(..., is_grads_batched=True)``) for a slice of its steps, each slot of
    the batch the gradient of one step's top-1 logit: the steps share the forward pass, which
    the rules make the same for every step. ``max_batch_tokens`` bounds a slice's steps x
    sentence tokens. Where the model's output projection is a linear layer over the final
    features (fairseq's decoders), the top-1 logit y_t = h_t . W[v_t] (+ b[v_t]) is taken from
    the features h, so the backward pass does not run through the (T, V) logits: the same y_t,
    the same gradients.
    """
    import torch

    from evolution.nets.lrp import conservative_rules, relevance

    order = [i for i, it in enumerate(items) if it is not None]
    first, n_steps = {}, 0
    for i in order:
        first[i], n_steps = n_steps, n_steps + len(items[i].positions)
    projections = {a: adapter.output_projections(a) for a in attentions}
    heads = {a: adapter.attention_modules(a)[0].num_heads for a in attentions}
    per = {a: np.zeros((n_steps, len(projections[a]), heads[a])) for a in attentions}
    model = adapter._model
    output = getattr(getattr(model, "decoder", None), "output_projection", None)
    output = output if isinstance(output, torch.nn.Linear) else None
    for i in order:
        item = items[i]
        if not len(item.positions):
            continue
        captured: dict[str, list] = {a: [] for a in attentions}
        features: list = []
        with contextlib.ExitStack() as stack:
            stack.enter_context(conservative_rules(model))
            for a in attentions:
                for proj in projections[a]:
                    stack.callback(
                        proj.register_forward_pre_hook(
                            lambda module, args, store=captured[a]: store.append(args[0])
                        ).remove
                    )
            if output is not None:
                stack.callback(
                    output.register_forward_pre_hook(lambda module, args, store=features: store.append(args[0])).remove
                )
            decoder = [item.decoder_inputs] if item.decoder_inputs is not None else None
            logits = adapter.logits([item.inputs], decoder)  # (1, T, V)
        at = torch.as_tensor([int(p) for p in item.positions])
        if output is not None and len(features) == 1:
            best = logits[0, at].detach().argmax(dim=-1)  # (P,) each step's top-1 token
            top = (features[0][0, at] * output.weight[best]).sum(-1)
            if output.bias is not None:
                top = top + output.bias[best]
        else:
            top = logits[0, at].max(dim=-1).values  # (P,) the top-1 logit of each step
        flat = [z for a in attentions for z in captured[a]]
        width = max(1, max_batch_tokens // max(1, item.length))
        for k0 in range(0, len(at), width):
            k1 = min(len(at), k0 + width)
            slots = torch.zeros(k1 - k0, len(at), dtype=top.dtype)
            slots[torch.arange(k1 - k0), torch.arange(k0, k1)] = 1.0
            rel = relevance(top, flat, steps=slots, retain_graph=k1 < len(at))
            k = 0
            for a in attentions:
                for layer in range(len(projections[a])):
                    r = rel[k].abs()  # (slots, T, 1, H * d_head): fairseq's layout
                    k += 1
                    c, t, b, d = r.shape
                    rows = slice(first[i] + k0, first[i] + k1)
                    per[a][rows, layer] = r.view(c, t, b, heads[a], d // heads[a]).sum(dim=(1, 2, 4)).double().numpy()
    out = {
        "relevance": {
            a: normalize_over_heads(per[a]).mean(axis=0) if n_steps else np.full(per[a].shape[1:], np.nan)
            for a in attentions
        },
        "steps": n_steps,
    }
    if per_step:
        out["per_step"] = {a: normalize_over_heads(per[a]) for a in attentions}
    return out
