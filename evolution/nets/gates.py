"""One multiplier per attention head, on the head's output before the output projection.

Both head-importance methods of the head papers act there:

* Michel, Levy & Neubig (2019), "Are sixteen heads really better than one?":
  a head mask xi_h multiplies head h's output; the importance of h is the
  expected |dL/dxi_h| at xi = 1 (:mod:`evolution.metrics.importance`);
* Voita, Talbot, Moiseev, Sennrich & Titov (ACL 2019): a stochastic
  Hard-Concrete gate g_h multiplies head h's output (the-story-of-heads,
  ``lib/layers/concrete_gate.py``), trained with an L0 penalty
  (:class:`HardConcreteGate`).

A multi-head attention block computes ``out_proj(concat_h head_h)``; the
concatenation puts head h at features ``h * d_head : (h + 1) * d_head`` in
fairseq's ``MultiheadAttention``, Hugging Face BERT-like encoders
(``attention.output.dense``) and GPT-2 (``attn.c_proj``, a ``Conv1D``) alike,
so :func:`head_gates` multiplies the *input* of each output projection (any
module called on the concatenated heads) by the gate of the head each feature
belongs to. A forward pre-hook, not the library's own head mask: transformers
5 has dropped ``head_mask`` from BERT and GPT-2, and one hook serves fairseq
and Hugging Face models the same way. Gating
with 0 is exactly removing the head (:func:`remove_heads` checks it the other
way: a model with the heads physically cut out).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

__all__ = ["head_gates", "HardConcreteGate", "remove_heads"]


@contextlib.contextmanager
def head_gates(
    projections: Sequence[nn.Module], gates: torch.Tensor, *, batch_dim: int | None = None
) -> Iterator[list[int]]:
    """Within the block, multiply the input of ``projections[l]`` by the gates of layer ``l``.

    Parameters
    ----------
    projections
        The output projection of each layer's attention, ``L`` modules (``nn.Linear``, GPT-2's
        ``Conv1D``) whose first input is the concatenation of ``H`` heads of ``d_head`` features each.
    gates
        ``(L, H)``: one gate per head, shared by every sentence; or ``(B, L, H)``: one per
        sentence, which makes ``d(sum_b loss_b) / d gates[b]`` sentence ``b``'s own gradient
        (one backward pass for a batch of per-sentence gradients).
    batch_dim
        With per-sentence gates: the batch axis of the projections' input (fairseq: 1, its
        tensors are ``(T, B, d)``; Hugging Face: 0).

    Yields a list counting the calls of each projection, so that a caller can check that
    the model really went through them (a fused attention kernel would not).
    """
    if gates.dim() not in (2, 3) or gates.shape[-2] != len(projections):
        raise ValueError(
            f"gates must be (L, H) or (B, L, H) with L = {len(projections)} layers, got {tuple(gates.shape)}"
        )
    if gates.dim() == 3 and batch_dim is None:
        raise ValueError("per-sentence gates (B, L, H) need batch_dim, the batch axis of the attention output")
    calls = [0] * len(projections)

    def hook_for(layer: int):
        def pre(module, args):
            x = args[0]
            g = gates[..., layer, :]  # (H,) or (B, H)
            heads = g.shape[-1]
            if x.shape[-1] % heads:
                raise ValueError(f"layer {layer}: {x.shape[-1]} features do not split into {heads} heads")
            g = g.repeat_interleave(x.shape[-1] // heads, dim=-1).to(x.dtype)
            if g.dim() == 2:  # (B, d) -> broadcast along the batch axis of x
                shape = [1] * x.dim()
                shape[batch_dim % x.dim()] = g.shape[0]
                shape[-1] = g.shape[1]
                g = g.reshape(shape)
            calls[layer] += 1
            return (x * g, *args[1:])

        return pre

    handles = [p.register_forward_pre_hook(hook_for(i)) for i, p in enumerate(projections)]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


class HardConcreteGate(nn.Module):
    """``n`` stochastic gates in [0, 1] with an L0 penalty (Louizos, Welling & Kingma 2018).

    As the-story-of-heads implements it (``lib/layers/concrete_gate.py``): a gate is
    ``clip(sigmoid((log u - log(1 - u) + log_a) / temperature) * (r - l) + l, 0, 1)`` with
    ``u ~ U(0, 1)`` in training and ``clip(sigmoid(log_a) * (r - l) + l, 0, 1)`` at test
    time; the penalty is the expected number of non-zero gates,
    ``sum_h sigmoid(log_a_h - temperature * log(-l / r))``.

    Parameters
    ----------
    n
        Number of gates (heads).
    temperature, stretch
        ``temperature`` (beta) and the stretch interval ``(l, r) = (-stretch, 1 + stretch)``;
        defaults 0.33 and 0.1 as in the released code.
    init_open
        Initial probability-like value sigmoid(log_a) (0.5 in the released code: log_a = 0).
    """

    def __init__(
        self, n: int, *, temperature: float = 0.33, stretch: float = 0.1, init_open: float = 0.5, eps: float = 1e-6
    ):
        super().__init__()
        self.temperature, self.eps = float(temperature), float(eps)
        self.low, self.high = -float(stretch), 1.0 + float(stretch)
        self.log_a = nn.Parameter(torch.full((n,), math.log(init_open / (1 - init_open))))

    def forward(self) -> torch.Tensor:
        """``(n,)`` gate values: a sample in training mode, the deterministic value in eval mode."""
        if self.training:
            u = torch.rand_like(self.log_a).clamp(self.eps, 1 - self.eps)
            s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + self.log_a) / self.temperature)
        else:
            s = torch.sigmoid(self.log_a)
        return (s * (self.high - self.low) + self.low).clamp(0.0, 1.0)

    def prob_open(self) -> torch.Tensor:
        """``(n,)`` P(gate != 0) = sigmoid(log_a - temperature * log(-l / r)): the L0 penalty's terms."""
        return torch.sigmoid(self.log_a - self.temperature * math.log(-self.low / self.high))

    def prob_closed(self) -> torch.Tensor:
        """``(n,)`` P(gate == 0) = 1 - :meth:`prob_open`."""
        return 1.0 - self.prob_open()

    def penalty(self) -> torch.Tensor:
        """The expected number of open gates (scalar): what lambda multiplies."""
        return self.prob_open().sum()

    def kept(self) -> torch.Tensor:
        """``(n,)`` bool: the heads a pruned model keeps, P(open) > P(closed) (Voita et al. 2019, sec. 6)."""
        return self.prob_open() > self.prob_closed()


def remove_heads(attention, keep: Sequence[bool]) -> None:
    """Cut the heads where ``keep`` is false out of a fairseq ``MultiheadAttention`` in place:
    the rows of the query, key and value projections and the columns of the output
    projection that belong to them. Independent of :func:`head_gates`, so that a test can
    check that gating a head with 0 equals removing it."""
    kept = torch.as_tensor(list(keep), dtype=torch.bool)
    heads, d_head = attention.num_heads, attention.head_dim
    if kept.numel() != heads:
        raise ValueError(f"keep has {kept.numel()} entries for {heads} heads")
    if not kept.any():
        raise ValueError("cannot remove every head of a layer with fairseq's MultiheadAttention; gate it with 0")
    idx = torch.arange(heads * d_head).view(heads, d_head)[kept].reshape(-1)
    with torch.no_grad():
        for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
            proj.weight = nn.Parameter(proj.weight[idx].clone())
            if proj.bias is not None:
                proj.bias = nn.Parameter(proj.bias[idx].clone())
            proj.out_features = len(idx)
        attention.out_proj.weight = nn.Parameter(attention.out_proj.weight[:, idx].clone())
        attention.out_proj.in_features = len(idx)
    attention.num_heads = int(kept.sum())
    attention.embed_dim = attention.num_heads * d_head  # fairseq reshapes with embed_dim ...
    attention.skip_embed_dim_check = True  # ... while its input keeps the model's width
