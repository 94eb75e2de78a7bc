"""The building blocks of :mod:`evolution.nets.torch_network`, fairseq's Transformer layers in
plain PyTorch for inference: sinusoidal positions (:func:`sinusoidal_positions`,
:func:`make_positions`), multi-head attention with fairseq's parameter names
(:class:`Attention`), and the encoder and decoder layers (:class:`EncoderLayer`,
:class:`DecoderLayer`). Tensors run time-first (T, B, d), as fairseq's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["sinusoidal_positions", "make_positions", "Attention", "EncoderLayer", "DecoderLayer"]


def sinusoidal_positions(num: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` (tensor2tensor's layout: sines,
    then cosines; the padding row zero)."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -scale)
    emb = torch.arange(num, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num, -1)
    if dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num, 1)], dim=1)
    emb[padding_idx, :] = 0
    return emb


def make_positions(tokens: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """Positions ``padding_idx + 1, + 2, ...`` of the non-padding tokens (padding keeps ``padding_idx``)."""
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class Attention(nn.Module):
    """Multi-head attention with fairseq's parameters (``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``). Inputs and output (T, B, d). ``attn_mask`` (Tq, Tk) is added to the scores;
    ``key_padding_mask`` (B, Tk) true where a key is hidden."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.embed_dim, self.num_heads, self.head_dim = dim, heads, dim // heads
        self.scaling = self.head_dim**-0.5
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.out_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, query, key, value, *, key_padding_mask=None, attn_mask=None, need_weights: bool = False):
        tq, b, d = query.shape
        tk = key.shape[0]
        h, hd = self.num_heads, self.head_dim
        q = (self.q_proj(query) * self.scaling).contiguous().view(tq, b * h, hd).transpose(0, 1)
        k = self.k_proj(key).contiguous().view(tk, b * h, hd).transpose(0, 1)
        v = self.v_proj(value).contiguous().view(tk, b * h, hd).transpose(0, 1)
        scores = torch.bmm(q, k.transpose(1, 2))  # (B*H, Tq, Tk)
        if attn_mask is not None:
            scores = scores + attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            scores = (
                scores.view(b, h, tq, tk)
                .masked_fill(key_padding_mask[:, None, None, :].to(torch.bool), float("-inf"))
                .view(b * h, tq, tk)
            )
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
        out = torch.bmm(probs, v).transpose(0, 1).contiguous().view(tq, b, d)
        return self.out_proj(out), (probs.view(b, h, tq, tk) if need_weights else None)


def _activation(name: str):
    if name == "relu":
        return F.relu
    if name == "gelu":
        return F.gelu
    raise ValueError(f"activation {name!r} is not one of relu, gelu")


class EncoderLayer(nn.Module):
    """fairseq's ``TransformerEncoderLayer`` (dropout off: inference)."""

    def __init__(self, dim: int, heads: int, ffn: int, *, normalize_before: bool, activation: str = "relu"):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.final_layer_norm = nn.LayerNorm(dim)
        self.normalize_before = normalize_before
        self.activation = _activation(activation)

    def forward(self, x, *, key_padding_mask=None, attn_mask=None, need_weights: bool = False):
        if attn_mask is not None:  # fairseq: non-zero entries become -1e8 added to the scores
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, probs = self.self_attn(
            x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=need_weights
        )
        x = residual + x
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = residual + self.fc2(self.activation(self.fc1(x)))
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, probs


class DecoderLayer(nn.Module):
    """fairseq's ``TransformerDecoderLayer``: causal self-attention, attention over the encoder
    output (``encoder_attn``), feed-forward."""

    def __init__(self, dim: int, heads: int, ffn: int, *, normalize_before: bool, activation: str = "relu"):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.encoder_attn = Attention(dim, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.final_layer_norm = nn.LayerNorm(dim)
        self.normalize_before = normalize_before
        self.activation = _activation(activation)

    def _block(self, x, norm, fn):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x, probs = fn(x)
        x = residual + x
        if not self.normalize_before:
            x = norm(x)
        return x, probs

    def forward(
        self,
        x,
        encoder_out,
        *,
        encoder_padding_mask=None,
        self_attn_mask=None,
        self_attn_padding_mask=None,
        need_weights: bool = False,
    ):
        x, own = self._block(
            x,
            self.self_attn_layer_norm,
            lambda y: self.self_attn(
                y, y, y, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask, need_weights=need_weights
            ),
        )
        x, cross = self._block(
            x,
            self.encoder_attn_layer_norm,
            lambda y: self.encoder_attn(
                y, encoder_out, encoder_out, key_padding_mask=encoder_padding_mask, need_weights=need_weights
            ),
        )
        x, _ = self._block(x, self.final_layer_norm, lambda y: (self.fc2(self.activation(self.fc1(y))), None))
        return x, own, cross
