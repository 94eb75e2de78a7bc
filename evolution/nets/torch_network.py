"""The shipped architectures in plain PyTorch, for inference: no fairseq import.

The models that this project trains with fairseq (:mod:`evolution.nets.objectives`) are three
uses of one encoder: fairseq's Transformer encoder (token embedding scaled by sqrt(d), sinusoidal
positions counted from the padding index, post- or pre-norm blocks), causal for the LM, with
fairseq's Transformer decoder for MT and the transposed token embedding as every objective's
output layer. This module rebuilds them from the shipped ``model.json`` and loads
``model.safetensors`` as is: the modules carry fairseq's names (``layers.N.self_attn.q_proj``,
``self_attn_layer_norm``, ``fc1``, ``encoder_attn``, ...), so the state dict's keys fit, and
hooks on the attention output projections (head gates, :mod:`evolution.nets.gates`) see the
same (T, B, H * d_head) input as on fairseq's modules. Tensors run time-first (T, B, d), as
fairseq's. ``tests/test_plain.py`` checks every layer's states and attention map against
fairseq's classes on the shipped weights (1e-5) and the MT's greedy translations (identical).
The layers the encoder and decoder stack, and their attention, are in
:mod:`evolution.nets.torch_layers`.

Training stays with fairseq (``pip install 'evolution[train]'``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from evolution.nets.torch_layers import (
    Attention,
    DecoderLayer,
    EncoderLayer,
    make_positions,
    sinusoidal_positions,
)

__all__ = [
    "Dictionary",
    "Attention",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "Network",
    "sinusoidal_positions",
    "make_positions",
]


class Dictionary:
    """fairseq's dictionary format (``dict.txt``: ``symbol count`` per line) with its four special
    symbols first: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3. ``mask``: append ``<mask>`` as
    fairseq's ``masked_lm`` task does."""

    def __init__(self, path: str | Path, *, mask: bool = False):
        self.symbols = ["<s>", "<pad>", "</s>", "<unk>"]
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.rstrip().rsplit(" ", 1)
            if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
                raise ValueError(f"{path}, line {n}: expected '<symbol> <count>', got {line!r}")
            word = fields[0]
            if fields[1] == "#fairseq:overwrite" or word not in self.symbols:
                self.symbols.append(word)
        if mask and "<mask>" not in self.symbols:
            self.symbols.append("<mask>")
        self.indices = {s: i for i, s in enumerate(self.symbols)}
        self.nspecial = 4

    def bos(self) -> int:
        return 0

    def pad(self) -> int:
        return 1

    def eos(self) -> int:
        return 2

    def unk(self) -> int:
        return 3

    def index(self, symbol: str) -> int:
        return self.indices.get(symbol, self.unk())

    def __getitem__(self, i: int) -> str:
        return self.symbols[i] if 0 <= i < len(self.symbols) else self.symbols[self.unk()]

    def __len__(self) -> int:
        return len(self.symbols)


class Encoder(nn.Module):
    """:class:`~evolution.nets.encoder.SharedEncoder` for inference: ``forward`` returns every
    layer's states (the embedding output, then each block's output) and optionally each block's
    attention maps and its value input (for the norms of Kobayashi et al. 2020)."""

    positions: torch.Tensor  # the sinusoidal table, a buffer

    def __init__(
        self,
        *,
        vocab: int,
        dim: int,
        heads: int,
        ffn: int,
        layers: int,
        padding_idx: int,
        max_positions: int,
        normalize_before: bool,
        causal: bool,
        scale_embedding: bool = True,
        activation: str = "relu",
    ):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim, padding_idx=padding_idx)
        self.embed_scale = math.sqrt(dim) if scale_embedding else 1.0
        self.padding_idx, self.max_source_positions, self.causal = padding_idx, max_positions, causal
        self.register_buffer(
            "positions", sinusoidal_positions(max_positions + padding_idx + 1, dim, padding_idx), persistent=False
        )
        self.layers = nn.ModuleList(
            EncoderLayer(dim, heads, ffn, normalize_before=normalize_before, activation=activation)
            for _ in range(layers)
        )
        self.layer_norm = nn.LayerNorm(dim) if normalize_before else None

    def max_positions(self) -> int:
        return self.max_source_positions

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(T, B, d): scaled token embeddings plus positions, zero at padding."""
        x = self.embed_scale * self.embed_tokens(tokens) + self.positions[make_positions(tokens, self.padding_idx)]
        padding = tokens.eq(self.padding_idx)
        if padding.any():
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
        return x.transpose(0, 1)

    def future_mask(self, t: int, like: torch.Tensor) -> torch.Tensor | None:
        """1.0 above the diagonal for the LM (the layer adds -1e8 there), else None."""
        return torch.triu(torch.ones(t, t, dtype=like.dtype, device=like.device), diagonal=1) if self.causal else None

    def forward(
        self, tokens: torch.Tensor, *, attention: bool = False, values: bool = False, key_mask: dict | None = None
    ) -> dict:
        """``tokens`` (B, T). Returns ``states`` [(T, B, d)] (L + 1), ``attention`` [(B, H, T, T)]
        per block (``attention``), ``values`` [(T, B, d)] each block's attention value input
        (``values``) and ``padding`` (B, T). ``key_mask`` maps a 0-based block to a (B, T) bool
        of key positions hidden there (token influence)."""
        padding = tokens.eq(self.padding_idx)
        x = self.embed(tokens)
        future = self.future_mask(x.shape[0], x)
        out: dict[str, Any] = {"states": [x], "attention": [], "values": [], "padding": padding}
        for i, layer in enumerate(cast("Iterable[EncoderLayer]", self.layers)):
            mask = padding
            if key_mask is not None and i in key_mask:
                mask = padding | key_mask[i].to(torch.bool)
            if values:
                out["values"].append(layer.self_attn_layer_norm(x) if layer.normalize_before else x)
            x, probs = layer(x, key_padding_mask=mask if mask.any() else None, attn_mask=future, need_weights=attention)
            out["states"].append(x)
            if attention:
                out["attention"].append(probs)
        out["final"] = self.layer_norm(x) if self.layer_norm is not None else x
        return out


class Decoder(nn.Module):
    """fairseq's Transformer decoder (MT) with the shared token embedding as input and output."""

    positions: torch.Tensor  # the sinusoidal table, a buffer

    def __init__(
        self,
        embed_tokens: nn.Embedding,
        *,
        dim: int,
        heads: int,
        ffn: int,
        layers: int,
        padding_idx: int,
        max_positions: int,
        normalize_before: bool,
        scale_embedding: bool = True,
        activation: str = "relu",
    ):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(dim) if scale_embedding else 1.0
        self.padding_idx, self.max_target_positions = padding_idx, max_positions
        self.register_buffer(
            "positions", sinusoidal_positions(max_positions + padding_idx + 1, dim, padding_idx), persistent=False
        )
        self.layers = nn.ModuleList(
            DecoderLayer(dim, heads, ffn, normalize_before=normalize_before, activation=activation)
            for _ in range(layers)
        )
        self.layer_norm = nn.LayerNorm(dim) if normalize_before else None

    def max_positions(self) -> int:
        return self.max_target_positions

    def forward(
        self, prev: torch.Tensor, encoder_out: torch.Tensor, encoder_padding: torch.Tensor, *, attention: bool = False
    ) -> dict:
        """``prev`` (B, T) teacher-forced inputs (``</s> y1 ..``), ``encoder_out`` (S, B, d) and its
        padding (B, S). Returns ``features`` (B, T, d) and, with ``attention``, ``self`` and
        ``cross`` [(B, H, T, T or S)] per layer."""
        x = self.embed_scale * self.embed_tokens(prev) + self.positions[make_positions(prev, self.padding_idx)]
        x = x.transpose(0, 1)
        t = x.shape[0]
        future = torch.triu(torch.full((t, t), float("-inf"), device=x.device, dtype=x.dtype), diagonal=1)
        pad = prev.eq(self.padding_idx)
        out: dict[str, Any] = {"self": [], "cross": []}
        for layer in self.layers:
            x, own, cross = layer(
                x,
                encoder_out,
                encoder_padding_mask=encoder_padding if encoder_padding.any() else None,
                self_attn_mask=future,
                self_attn_padding_mask=pad if pad.any() else None,
                need_weights=attention,
            )
            if attention:
                out["self"].append(own)
                out["cross"].append(cross)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        out["features"] = x.transpose(0, 1)
        return out

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.embed_tokens.weight)


class Network(nn.Module):
    """One shipped model: ``encoder`` (:class:`Encoder`) and, for MT, ``decoder``; built from the
    fairseq arguments of ``model.json`` (``args``) for ``objective`` (mt, lm, mlm)."""

    #: where each objective's shared encoder sits in fairseq's state dict
    ENCODER_PREFIX = {"mt": "encoder.", "lm": "decoder.encoder.", "mlm": "encoder."}

    def __init__(self, args: dict, *, objective: str, vocab: int, padding_idx: int = 1):
        super().__init__()
        if objective not in self.ENCODER_PREFIX:
            raise ValueError(f"objective {objective!r} is not one of mt, lm, mlm")
        self.objective = objective
        dim = int(args["encoder_embed_dim"])
        positions = int(args.get("max_source_positions") or args.get("tokens_per_sample") or 1024)
        act = args.get("activation_fn", "relu")
        self.encoder = Encoder(
            vocab=vocab,
            dim=dim,
            heads=int(args["encoder_attention_heads"]),
            ffn=int(args["encoder_ffn_embed_dim"]),
            layers=int(args["encoder_layers"]),
            padding_idx=padding_idx,
            max_positions=positions,
            normalize_before=bool(args.get("encoder_normalize_before")),
            causal=objective == "lm",
            scale_embedding=not args.get("no_scale_embedding"),
            activation=act,
        )
        self.decoder = None
        if objective == "mt":
            self.decoder = Decoder(
                self.encoder.embed_tokens,
                dim=int(args["decoder_embed_dim"]),
                heads=int(args["decoder_attention_heads"]),
                ffn=int(args["decoder_ffn_embed_dim"]),
                layers=int(args["decoder_layers"]),
                padding_idx=padding_idx,
                max_positions=int(args.get("max_target_positions") or 1024),
                normalize_before=bool(args.get("decoder_normalize_before")),
                scale_embedding=not args.get("no_scale_embedding"),
                activation=act,
            )
        unsupported = [
            k
            for k in ("layernorm_embedding", "encoder_learned_pos", "no_token_positional_embeddings", "adaptive_input")
            if args.get(k)
        ]
        if unsupported or (objective == "mt" and not args.get("share_all_embeddings")):
            raise ValueError(
                f"a shipped model with {unsupported or ['unshared embeddings']} is not an architecture "
                "this project trains; load its fairseq checkpoint with kind: fairseq"
            )

    def load_fairseq_state(self, weights: dict[str, torch.Tensor]) -> None:
        """Load fairseq's state dict (the shipped safetensors): the encoder's keys under its prefix,
        the decoder's under ``decoder.``; version counters and tied copies are skipped. Every other
        key must be a weight of the network and every weight of the network must be there: else a
        ValueError naming the missing and unexpected keys as the file has them."""
        prefix = self.ENCODER_PREFIX[self.objective]
        own: dict[str, torch.Tensor] = {}
        file_key: dict[str, str] = {}  # the network's name of a weight -> its key in the file
        stray: list[str] = []  # keys under neither the encoder's prefix nor the decoder's
        for key, value in weights.items():
            if key.startswith(prefix):
                name = "encoder." + key[len(prefix) :]
            elif self.decoder is not None and key.startswith("decoder."):
                if key in ("decoder.embed_tokens.weight", "decoder.output_projection.weight"):
                    continue  # tied to the encoder's token embedding
                name = key
            else:
                stray.append(key)
                continue
            if key.endswith(".version") or key.endswith("_float_tensor"):
                continue
            own[name], file_key[name] = value, key
        missing, unexpected = self.load_state_dict(own, strict=False)
        missing = [self._file_key(k) for k in missing if not k.startswith("decoder.embed_tokens")]
        unexpected = stray + [file_key[k] for k in unexpected]
        if missing or unexpected:
            raise ValueError(
                f"the weights do not fit the architecture of model.json (missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
                + (f"; {len(missing) + len(unexpected)} keys in all" if max(len(missing), len(unexpected)) > 5 else "")
                + "): model.safetensors must hold the weights of the network that model.json describes, "
                "named as in fairseq's state dict, and no others; write both from the same checkpoint "
                "(evolution.models.shipped_format.pack), or load the checkpoint with kind: fairseq"
            )

    def _file_key(self, name: str) -> str:
        """The key in fairseq's state dict of the network's weight ``name``."""
        if name.startswith("encoder."):
            return self.ENCODER_PREFIX[self.objective] + name[len("encoder.") :]
        return name

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """The objective's output layer: the transposed token embedding."""
        return F.linear(features, self.encoder.embed_tokens.weight)

    def translate_greedy(
        self,
        tokens: torch.Tensor,
        *,
        eos: int,
        pad: int,
        unk: int | None = None,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
    ) -> list[list[int]]:
        """Greedy decoding (fairseq's ``SequenceGenerator`` with beam 1: ``</s>`` starts, pad never
        chosen, ``</s>`` not first and forced at ``max_len_a * source length + max_len_b``). Returns target ids
        without the final ``</s>``."""
        if self.decoder is None:
            raise ValueError("only a translation model translates")
        with torch.inference_mode():
            enc = self.encoder(tokens)
            src_len = tokens.ne(pad).sum(1)
            limit = int(min(max_len_a * src_len.max().item() + max_len_b, self.decoder.max_positions() - 1))
            b = tokens.shape[0]
            prev = torch.full((b, 1), eos, dtype=torch.long, device=tokens.device)
            done = torch.zeros(b, dtype=torch.bool, device=tokens.device)
            out: list[list[int]] = [[] for _ in range(b)]
            for step in range(limit + 1):
                dec = self.decoder(prev, enc["final"], enc["padding"])
                lprobs = F.log_softmax(self.decoder.output_layer(dec["features"][:, -1]).float(), dim=-1)
                lprobs[:, pad] = float("-inf")
                if step == 0:  # fairseq's min_len = 1: no empty translation
                    lprobs[:, eos] = float("-inf")
                if step >= limit:
                    lprobs[:, :eos] = float("-inf")
                    lprobs[:, eos + 1 :] = float("-inf")
                nxt = lprobs.argmax(-1)
                for i in range(b):
                    if not done[i]:
                        if int(nxt[i]) == eos:
                            done[i] = True
                        else:
                            out[i].append(int(nxt[i]))
                if bool(done.all()):
                    break
                prev = torch.cat([prev, nxt[:, None]], dim=1)
        return out


def build(meta: dict, weights: dict[str, torch.Tensor], *, vocab: int) -> Network:
    """A :class:`Network` from a shipped model's ``model.json`` (``meta``) and its weights."""
    net = Network(meta["model"], objective=meta["objective"], vocab=vocab)
    net.load_fairseq_state(weights)
    return net.eval()
