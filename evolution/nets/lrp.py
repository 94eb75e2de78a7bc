"""Layer-wise relevance propagation through fairseq Transformers, as gradient x input
under conservative rules (Ali et al. 2022, "XAI for Transformers: Better Explanations
through Conservative Propagation", ICML).

LRP redistributes an output score R = y backwards so that, layer by layer, the
relevances of a layer's inputs add up to those of its outputs. For a network
that is linear in its input, the redistribution that does this is
R(z_i) = z_i * dy/dz_i (Euler's theorem for degree-1 homogeneous functions;
for linear layers it is the LRP-0 rule, for ReLU layers too). A Transformer is
not linear in its input in two places, and the rules chosen here make it so,
without changing any forward value:

* **softmax attention** (AH-rule): the attention probabilities are treated as
  constants, so relevance flows to the values only (the-story-of-heads at
  commit efaa0dd propagates through the softmax Jacobian as well, with
  ``consider_attn_constant=False``, ``lib/layers/lrp.py`` l. 27-32; Ali et al.
  show that this breaks conservation);
* **LayerNorm** (LN-rule): the standard deviation is treated as a constant,
  so (x - mean) / std * gamma + beta is linear in (x, beta) (the-story-of-heads
  uses the full LayerNorm Jacobian, ``lib/layers/basic.py`` l. 152-195, and
  restores conservation by rescaling, ``lib/layers/lrp.py`` l. 115-123);
* **the residual** needs no rule: relevance splits over the two summands in
  proportion to their contributions, which gradient x input does by itself
  (as the-story-of-heads' ``relprop_add``, ``lib/layers/lrp.py`` l. 126-147).

Biases are sources of relevance like inputs: with the rules on, the model's
output is jointly degree-1 homogeneous in (input embeddings, biases), so
sum R(inputs) + sum R(biases) = y exactly (tests/test_relevance.py checks it
layer by layer). Relevance is never rescaled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

__all__ = ["conservative_rules", "relevance"]


def _layer_norm_with_constant_std(module: nn.LayerNorm, args, output):
    x = args[0]
    dims = tuple(range(-len(module.normalized_shape), 0))
    centred = x - x.mean(dims, keepdim=True)
    std = torch.sqrt(centred.pow(2).mean(dims, keepdim=True) + module.eps).detach()
    y = centred / std
    if module.weight is not None:
        y = y * module.weight
    if module.bias is not None:
        y = y + module.bias
    return y


@contextlib.contextmanager
def conservative_rules(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s attention probabilities and LayerNorm standard
    deviations are constants for autograd (forward values unchanged).

    The attention rule replaces ``fairseq.utils.softmax``, which fairseq's
    ``MultiheadAttention`` calls for its probabilities (and nothing on the analysed path
    calls otherwise: the output scores are taken from logits); the modules must run
    fairseq's own attention path (:func:`evolution.nets.compat.enable_head_weights`).
    Not thread-safe: one model per process at a time, as the pipeline's workers run.
    """
    from fairseq import utils

    softmax = utils.softmax

    def constant_softmax(x, dim: int, onnx_trace: bool = False):
        return softmax(x, dim=dim, onnx_trace=onnx_trace).detach()

    handles = [
        m.register_forward_hook(_layer_norm_with_constant_std) for m in model.modules() if isinstance(m, nn.LayerNorm)
    ]
    utils.softmax = constant_softmax
    try:
        yield
    finally:
        utils.softmax = softmax
        for h in handles:
            h.remove()


def relevance(
    output: torch.Tensor,
    tensors: Sequence[torch.Tensor],
    *,
    retain_graph: bool = False,
    steps: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """R(z) = z * d(sum output)/dz for each tensor z of ``tensors`` (same shapes): the relevance
    of every element of z for the summed ``output``, under whatever rules were on while the
    graph was built. A tensor that does not influence the output gets zeros.

    With ``steps`` (S, *output.shape), the relevance for each of S scores at once, the s-th being
    ``(steps[s] * output).sum()`` (e.g. a one-hot row picks one output): one batched backward
    pass (``is_grads_batched``), each result of shape (S, *z.shape)."""
    if steps is None:
        grads = torch.autograd.grad(output.sum(), list(tensors), retain_graph=retain_graph, allow_unused=True)
        return [
            (z * g).detach() if g is not None else torch.zeros_like(z).detach()
            for z, g in zip(tensors, grads, strict=True)
        ]
    grads = torch.autograd.grad(
        output, list(tensors), grad_outputs=steps, is_grads_batched=True, retain_graph=retain_graph, allow_unused=True
    )
    return [
        (z.detach()[None] * g).detach() if g is not None else torch.zeros((len(steps), *z.shape), dtype=z.dtype)
        for z, g in zip(tensors, grads, strict=True)
    ]
