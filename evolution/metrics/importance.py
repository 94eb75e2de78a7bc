"""Head importance from the gradient of the loss with respect to a head mask
(Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?", eq. 2).

A mask xi_h multiplies head h's output before the attention's output
projection (:func:`evolution.nets.gates.head_gates`). For a sentence x with
loss L(x) (its mean token negative log-likelihood under the model's own
training objective), the importance of head h is

    I_h = E_x | dL(x) / d xi_h |      at xi = 1,

the expected absolute change of the loss when the head is scaled (a
first-order estimate of what removing it costs). The absolute value is taken
per sentence, before averaging: a head whose removal helps some sentences and
hurts others is important. Michel et al. then normalise the scores of each
layer by their l2 norm (:func:`normalize_by_layer`).

Beside it, :func:`batch_importance` gives the per-batch estimator: the absolute
value of the gradient of a *batch's* loss, averaged over batches of
:data:`BATCH_SIZE` sentences, so that the signs of a batch's sentences cancel
before the absolute value. It is the rule of Hugging Face's BERTology example
(transformers, ``run_bertology.py``, ``compute_heads_importance``:
``head_importance += head_mask.grad.abs()`` once per batch, the mask shared by
the batch). Michel et al.'s own released code does not cancel across
sentences: its MT ``prune.py`` (pmichel31415/fairseq, launched by
``experiments/MT/prune_wmt.sh`` of pmichel31415/are-16-heads-really-better-than-1
with ``--batch-size 16``; ``batch_head_importance``) and its BERT
``calculate_head_importance`` (pmichel31415/pytorch-pretrained-BERT, branch
``paul``, ``examples/classifier_eval.py``) take the absolute value of
``context . dL/dcontext`` per sentence *and* query position before summing.

Per-sentence gradients come from one backward pass per batch: every sentence
gets its own copy of the mask (``(B, L, H)``), so the gradient of the summed
losses with respect to copy b is sentence b's own gradient.

The objectives (:func:`objective_items`):

=========  =========================================  ===============================
objective  input                                      predicted (positions, labels)
=========  =========================================  ===============================
lm         ``</s> x1..xn``                            every position: x1..xn ``</s>``
mlm        ``<s> x'1..x'n </s>``, x' corrupted as in  the corrupted positions: the
           training (15%; 80/10/10), seeded           original tokens
mt         source ``x1..xn </s>``, decoder input      every target position: y1..ym
           ``</s> y1..ym`` (teacher forcing)          ``</s>``
=========  =========================================  ===============================

Hugging Face models (:class:`evolution.models.huggingface.HuggingFaceAdapter`)
use the same rules on their own inputs: a BERT-like masked LM ``[CLS] x'1..x'n
[SEP]`` with the same corruption (``[MASK]``, random ids from the tokenizer's
ordinary range) and its masked-LM head; a GPT-2-like causal LM ``x1..xn``
(no start symbol) predicts x2..xn (its sentences have no end symbol: GPT-2
marks document ends only). A bare encoder without its pretraining head has no
loss: :func:`unavailable` says why.

Shapes: ``N`` sentences, ``L`` layers, ``H`` heads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Item",
    "objective_items",
    "sentence_losses",
    "mask_gradients",
    "importance",
    "batch_importance",
    "normalize_by_layer",
    "unavailable",
    "head_count",
    "BATCH_SIZE",
    "ESTIMATORS",
]

#: sentences per batch of :func:`batch_importance`: the ``--batch-size 16`` with which
#: ``experiments/MT/prune_wmt.sh`` (pmichel31415/are-16-heads-really-better-than-1) runs Michel
#: et al.'s MT pruning (whose own estimator takes the absolute value per sentence and position,
#: so that its batch size does not change its scores; see the module docstring)
BATCH_SIZE = 16

#: how reports name the two estimators, by the ``heads_importance`` variable that holds each
ESTIMATORS = {
    "importance": "mask importance per sentence (Michel et al. eq. 2)",
    "importance_batch": f"mask importance per batch of {BATCH_SIZE} (Hugging Face's run_bertology.py)",
}


def unavailable(adapter) -> str | None:
    """Why head-mask importance cannot be computed for ``adapter`` (None when it can): no head
    gates, or no own pretraining loss (a Hugging Face encoder without its LM head)."""
    if not hasattr(adapter, "output_projections"):
        return (
            f"{adapter.name}: {type(adapter).__name__} has no head gates; head importance is computed for "
            "fairseq models and Hugging Face BERT-like and GPT-2 models with their pretraining head"
        )
    return getattr(adapter, "loss_unavailable", None)


def head_count(adapter, attention: str) -> int:
    """The number of heads of one attention type (fairseq and GPT-2 modules: ``num_heads``;
    Hugging Face BERT-like: ``num_attention_heads``)."""
    module = adapter.attention_modules(attention)[0]
    return int(getattr(module, "num_heads", None) or module.num_attention_heads)


def _end_label(adapter) -> int | None:
    """The label after a sentence's last token for the next-token loss: ``</s>`` for fairseq LMs
    (their training data end every sentence with it); None for a Hugging Face causal LM."""
    dictionary = getattr(adapter, "dictionary", None)
    return None if dictionary is None else dictionary.eos()


@dataclass(frozen=True)
class Item:
    """One sentence as the objective sees it: model inputs, the decoder input (MT), and the
    positions of the output whose labels are predicted."""

    inputs: list[int]
    decoder_inputs: list[int] | None
    positions: np.ndarray
    labels: np.ndarray

    @property
    def length(self) -> int:
        return max(len(self.inputs), len(self.decoder_inputs or ()))


def objective_items(
    adapter, sentences: Sequence[Sequence[int]], *, targets: Sequence[Sequence[int]] | None = None, seed: int = 0
) -> list[Item | None]:
    """The :class:`Item` of each sentence (content ids, :meth:`Adapter.tokenize`) under the
    adapter's objective; None where nothing is predicted (an MLM corruption that changed no
    token, an empty target, a one-token sentence of a causal LM without a start symbol).
    ``targets``: target content ids, for MT. The MLM corruption of
    sentence s uses ``numpy.random.default_rng([seed, s])``, as the MLM output MI does."""
    from evolution.metrics.masked import corrupt

    out: list[Item | None] = []
    objective = adapter.objective
    if objective == "mt" and targets is None:
        raise ValueError(f"{adapter.name}: a translation model's loss needs the target sentences")
    end = _end_label(adapter) if objective == "lm" else None
    mask_id = adapter.mask_id if adapter.mask_id is not None else getattr(adapter, "loss_mask_id", None)
    if objective == "mlm" and mask_id is None:
        raise ValueError(f"{adapter.name}: a masked LM's loss needs a mask symbol, and this model has none")
    for s, ids in enumerate(sentences):
        ids = list(ids)
        if objective == "lm":
            inputs = adapter.build_input(ids)  # position t predicts input t + 1, the last one the end label
            labels = [*inputs[1:], *([end] if end is not None else [])]
            out.append(Item(inputs, None, np.arange(len(labels)), np.asarray(labels)) if labels else None)
        elif objective == "mlm":
            assert mask_id is not None  # checked above
            low, high = adapter.ordinary_ids
            new, changed = corrupt(ids, rng=np.random.default_rng([seed, s]), mask_id=mask_id, low=low, high=high)
            out.append(
                Item(adapter.build_input(new), None, adapter.content_offset + changed, np.asarray(ids)[changed])
                if len(changed)
                else None
            )
        else:
            assert targets is not None  # checked above
            target = list(targets[s])
            if not target:
                out.append(None)
                continue
            dec = adapter.build_decoder_input(target)
            out.append(
                Item(
                    adapter.build_input(ids), dec, np.arange(len(dec)), np.asarray([*target, adapter.dictionary.eos()])
                )
            )
    return out


def flat_positions(items: Sequence[Item], *, device=None):
    """``(rows, positions, labels)``: three ``(N,)`` long tensors over every predicted position of
    ``items`` (``rows[i]``: the item's index in the batch), for one gather over a ``(B, T, V)`` output."""
    import torch

    rows = np.concatenate([np.full(len(it.positions), b) for b, it in enumerate(items)])
    pos = np.concatenate([np.asarray(it.positions) for it in items])
    labels = np.concatenate([np.asarray(it.labels) for it in items])
    return tuple(torch.as_tensor(a.astype(np.int64), device=device) for a in (rows, pos, labels))


def sentence_losses(adapter, items: Sequence[Item]):
    """``(B,)`` torch tensor: each item's mean negative log-likelihood of its labels (autograd on)."""
    import torch

    decoder = [it.decoder_inputs for it in items] if items[0].decoder_inputs is not None else None
    logp = torch.log_softmax(adapter.logits([it.inputs for it in items], decoder), dim=-1)
    rows, pos, labels = flat_positions(items, device=logp.device)
    nll = -logp[rows, pos, labels]  # one gather: one per item would allocate a (B, T, V) gradient each
    counts = torch.bincount(rows, minlength=len(items)).to(nll.dtype)
    return torch.zeros(len(items), dtype=nll.dtype, device=nll.device).index_add(0, rows, nll) / counts


def mask_gradients(
    adapter, items: Sequence[Item], *, attentions: Sequence[str] = ("encoder_self",), max_batch_tokens: int = 4096
) -> dict[str, np.ndarray]:
    """Per-sentence dL(x)/dxi at xi = 1 for every head of every attention type.

    Returns ``attention -> (N, L, H)`` float64, rows in the order of ``items``.
    """
    import torch

    from evolution.extract import batches
    from evolution.nets.gates import head_gates

    items = list(items)
    projections = {a: adapter.output_projections(a) for a in attentions}
    out = {a: np.zeros((len(items), len(p), head_count(adapter, a))) for a, p in projections.items()}
    with _frozen(getattr(adapter, "_model", None)):
        for batch in batches([it.length for it in items], max_batch_tokens=max_batch_tokens):
            chosen = [items[i] for i in batch]
            gates = {
                a: torch.ones((len(batch), *out[a].shape[1:]), requires_grad=True, device=adapter.device)
                for a in attentions
            }
            with contextlib.ExitStack() as stack:
                calls = [
                    stack.enter_context(head_gates(projections[a], gates[a], batch_dim=adapter.gate_batch_dim))
                    for a in attentions
                ]
                losses = sentence_losses(adapter, chosen)
            for a, c in zip(attentions, calls, strict=True):
                if min(c) == 0:
                    raise RuntimeError(
                        f"{adapter.name}: the {a} output projections were not called; a fused "
                        "attention kernel bypassed the head gates"
                    )
            grads = torch.autograd.grad(losses.sum(), [gates[a] for a in attentions])
            for a, g in zip(attentions, grads, strict=True):
                out[a][batch] = g.double().cpu().numpy()
    return out


@contextlib.contextmanager
def _frozen(model):
    """The model's parameters without ``requires_grad`` within the block (restored after): only
    the masks' gradients are asked for, so the forward pass need not keep what the weights'
    gradients would need (the same numbers, in less time: benchmarks/importance.py)."""
    params = [p for p in model.parameters() if p.requires_grad and not p.is_inference()] if model is not None else []
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def importance(gradients: np.ndarray) -> np.ndarray:
    """``(..., L, H)`` importance I_h = mean over sentences (axis 0) of |dL/dxi_h|."""
    return np.abs(np.asarray(gradients, dtype=np.float64)).mean(axis=0)


def batch_importance(gradients: np.ndarray, tokens, *, batch_size: int = BATCH_SIZE) -> np.ndarray:
    """``(..., L, H)`` per-batch importance from per-sentence gradients.

    ``gradients``: ``(N, ..., L, H)`` per-sentence dL(x)/dxi (:func:`mask_gradients`), L(x)
    sentence x's mean token NLL; ``tokens``: ``(N,)`` each sentence's number of predicted tokens
    (``len(item.labels)``). The sentences form consecutive batches of ``batch_size`` in the
    given order (the last one shorter when ``batch_size`` does not divide N). A batch's loss is
    its mean token NLL over all of its tokens, so its gradient is the token-weighted mean of its
    sentences' gradients, g_b = sum_x n_x dL(x)/dxi / sum_x n_x; the importance is the mean over
    batches of |g_b|: the signs of a batch's sentences cancel before the absolute value.

    This is the rule of Hugging Face's BERTology example (transformers, ``run_bertology.py``,
    ``compute_heads_importance``: ``head_importance += head_mask.grad.abs()`` per batch, a
    masked or causal LM's loss being the batch's mean token NLL; its division by the total
    number of tokens is a constant factor, which :func:`normalize_by_layer` removes). Michel et
    al.'s own released code (``prune.py`` of pmichel31415/fairseq, launched by
    ``experiments/MT/prune_wmt.sh --batch-size 16``; ``classifier_eval.py`` of
    pmichel31415/pytorch-pretrained-BERT) takes the absolute value per sentence and position
    instead (module docstring). With ``batch_size=1`` this equals :func:`importance` (each
    batch's gradient is its one sentence's).
    """
    g = np.asarray(gradients, dtype=np.float64)
    n = np.asarray(tokens, dtype=np.float64)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if n.shape != (len(g),):
        raise ValueError(f"tokens must have shape ({len(g)},) (one count per sentence), not {n.shape}")
    if not len(g) or (n <= 0).any():
        raise ValueError("every sentence needs at least one predicted token, and there must be a sentence")
    starts = np.arange(0, len(g), batch_size)
    weights = n.reshape(-1, *([1] * (g.ndim - 1)))
    sums = np.add.reduceat(g * weights, starts, axis=0)  # (batches, ..., L, H): sum_x n_x g_x per batch
    counts = np.add.reduceat(n, starts).reshape(-1, *([1] * (g.ndim - 1)))
    return np.abs(sums / counts).mean(axis=0)


def normalize_by_layer(scores: np.ndarray) -> np.ndarray:
    """Michel et al.'s per-layer normalisation: each layer's scores divided by their l2 norm
    over heads (``(..., L, H)``; a layer of zeros stays zero). NaN (a head or layer the model
    does not have, in a padded store) counts as 0 in the norm and stays NaN."""
    scores = np.asarray(scores, dtype=np.float64)
    known = np.nan_to_num(scores)
    norm = np.sqrt((known**2).sum(axis=-1, keepdims=True))
    out = np.divide(known, norm, out=np.zeros_like(known), where=norm > 0)
    return np.where(np.isnan(scores), np.nan, out)
