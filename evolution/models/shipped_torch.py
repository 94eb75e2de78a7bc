"""The shipped models in plain PyTorch (``kind: shipped``): no fairseq import.

:class:`PlainAdapter` reads a shipped model directory (``model.json`` + ``model.safetensors``,
:mod:`evolution.models.shipped_format`) into :class:`evolution.nets.torch_network.Network` and serves every
inference the analyses ask of a model: hidden states, attention maps, the norms of Kobayashi et
al. (2020), per-head queries and keys, keys hidden per block (token influence), the MT
decoder's self- and cross-attention, output logits with autograd (head-mask importance through
the same head gates as fairseq's modules) and greedy translation. Two analyses still need
fairseq's classes, through :func:`evolution.models.fairseq_adapter`: LRP relevance (its rules
patch fairseq's attention) and L0 pruning (it trains).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolution.models.base import (
    Adapter,
    FairseqLayoutHeads,
    ModelLoadError,
    Tokenized,
    apostrophe_for,
    attention_norms,
    is_objective,
    word_ids_from_pieces,
)

if TYPE_CHECKING:
    from evolution.nets.torch_network import Decoder

__all__ = ["PlainAdapter"]


class PlainAdapter(FairseqLayoutHeads, Adapter):
    """A shipped model directory, run by :mod:`evolution.nets.torch_network`.

    Parameters
    ----------
    path
        The model directory (``model.json``, ``model.safetensors``; the vocabulary it names).
    name, objective
        Default: the directory's name and the objective recorded in ``model.json``.
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (:mod:`evolution.models.device`).
    """

    supports_norms = True
    supports_key_masking = True

    def __init__(
        self, path: str | Path, *, name: str | None = None, objective: str | None = None, device: str | None = None
    ):
        import sentencepiece as spm
        import torch
        from safetensors.torch import load_file

        from evolution.models.device import resolve_device
        from evolution.models.shipped_format import META, WEIGHTS, read_shipped
        from evolution.nets.torch_network import Dictionary, build

        self.path = Path(path)
        self.meta, vocab = read_shipped(self.path)
        self.device = resolve_device(device)
        self.name = name or self.path.name
        objective = objective or self.meta.get("objective")
        if not is_objective(objective):
            raise ModelLoadError(f"{self.path / META}: objective {objective!r} is not one of mt, lm, mlm")
        self.objective = objective
        self.dictionary = d = Dictionary(vocab / "dict.txt", mask=self.objective == "mlm")
        self._spm = spm.SentencePieceProcessor(model_file=str(vocab / "spm.model"))
        self.apostrophe = apostrophe_for(d.indices)
        weights = load_file(str(self.path / WEIGHTS))
        rows = next(v.shape[0] for k, v in weights.items() if k.endswith("embed_tokens.weight"))
        if rows != len(d):
            raise ModelLoadError(f"{self.path}: {rows} token embeddings for a dictionary of {len(d)} symbols")
        try:
            self.net = build(self.meta, {k: v.float() for k, v in weights.items()}, vocab=len(d)).to(self.device)
        except ValueError as exc:
            raise ModelLoadError(f"{self.path}: {exc}") from exc
        self._torch = torch
        enc = self.net.encoder
        self.num_layers, self.num_heads = len(enc.layers), self._encoder_layers()[0].self_attn.num_heads
        self.d_model, self.max_positions = enc.embed_tokens.embedding_dim, enc.max_positions()
        if self.objective == "mt":
            self.prefix, self.suffix = [], [d.eos()]
        elif self.objective == "lm":
            self.prefix, self.suffix = [d.bos() if self.meta.get("task", {}).get("add_bos_token") else d.eos()], []
        else:
            self.prefix, self.suffix = [d.bos()], [d.eos()]
        self.pad_id = d.pad()
        if self.objective == "mlm":
            self.mask_id = d.index("<mask>")
            self.ordinary_ids = (d.nspecial, self.mask_id)
        self.special_ids = frozenset(range(d.nspecial)) | ({d.index("<mask>")} if "<mask>" in d.indices else set())

    # --- text ------------------------------------------------------------------------------------------
    def tokenize(self, sentence: str) -> Tokenized:
        pieces = self._spm.encode(self.normalised(sentence), out_type=str)
        return Tokenized(
            ids=[self.dictionary.index(p) for p in pieces], pieces=list(pieces), word_ids=word_ids_from_pieces(pieces)
        )

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.dictionary[int(i)] for i in ids]

    @property
    def unk_id(self) -> int | None:
        return int(self.dictionary.unk())

    @property
    def supports_decoder(self) -> bool:
        return self.net.decoder is not None

    @property
    def _decoder(self) -> Decoder:
        """The translation model's decoder (no other model has one)."""
        if self.net.decoder is None:
            raise NotImplementedError(f"{type(self).__name__} {self.name} has no decoder")
        return self.net.decoder

    def tokenize_target(self, sentence: str) -> Tokenized:
        if not self.supports_decoder:
            return super().tokenize_target(sentence)
        return self.tokenize(sentence)  # the vocabulary is joint

    def build_decoder_input(self, ids: Sequence[int]) -> list[int]:
        """Target content ids -> the teacher-forced decoder input ``</s> y1..ym``."""
        return [self.dictionary.eos(), *ids]

    @property
    def max_target_tokens(self) -> int:
        return int(self._decoder.max_positions()) - 1

    # --- forward passes ----------------------------------------------------------------------------------
    def _ids(self, rows: Sequence[Sequence[int]]):
        t = max(len(x) for x in rows)
        ids = self._torch.full((len(rows), t), self.pad_id, dtype=self._torch.long)
        for b, x in enumerate(rows):
            ids[b, : len(x)] = self._torch.as_tensor(list(x), dtype=self._torch.long)
        return ids.to(self.device)

    def _run(self, inputs, *, attention: bool, values: bool = False, key_mask: dict | None = None) -> dict:
        with self._torch.inference_mode():
            return self.net.encoder(self._ids(inputs), attention=attention, values=values, key_mask=key_mask)

    @staticmethod
    def _hidden(out: dict) -> np.ndarray:
        return np.stack([s.transpose(0, 1).float().cpu().numpy() for s in out["states"]])  # (L+1, B, T, d)

    def forward(
        self, inputs: Sequence[Sequence[int]], *, attention: bool = False, key_mask: dict | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        out = self._run(inputs, attention=attention, key_mask=key_mask)
        att = np.stack([a.float().cpu().numpy() for a in out["attention"]]) if attention else None
        return self._hidden(out), att

    def forward_norms(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        out = self._run(inputs, attention=True, values=True)
        with self._torch.inference_mode():
            per = [
                attention_norms(alpha, _transformed_values(layer.self_attn, value))
                for layer, alpha, value in zip(self._encoder_layers(), out["attention"], out["values"], strict=True)
            ]
        norms = {k: np.stack([p[k].cpu().numpy() for p in per]) for k in per[0]}
        return self._hidden(out), np.stack([a.float().cpu().numpy() for a in out["attention"]]), norms

    def forward_qk(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        out = self._run(inputs, attention=False, values=True)
        qs, ks = [], []
        with self._torch.inference_mode():
            for layer, x in zip(self._encoder_layers(), out["values"], strict=True):  # each block's attention input
                a = layer.self_attn
                t, b, d = x.shape
                qs.append(a.q_proj(x).view(t, b, a.num_heads, a.head_dim).permute(1, 2, 0, 3))
                ks.append(a.k_proj(x).view(t, b, a.num_heads, a.head_dim).permute(1, 2, 0, 3))
        return (self._torch.stack(qs).float().cpu().numpy(), self._torch.stack(ks).float().cpu().numpy())

    def forward_masked_keys(self, inputs: Sequence[Sequence[int]], *, masked: Sequence[tuple[int, int]]) -> np.ndarray:
        ids = self._ids(inputs)
        key_mask: dict = {}
        for b, (block, position) in enumerate(masked):
            key_mask.setdefault(block, self._torch.zeros(ids.shape, dtype=self._torch.bool, device=ids.device))[
                b, position
            ] = True
        return self.forward(inputs, key_mask=key_mask)[0]

    def masked_key_states(
        self, inputs: Sequence[int], *, base: np.ndarray, masked: Sequence[tuple[int, int]]
    ) -> np.ndarray:
        """One block per row, from the unmasked input states of that block (``base``)."""
        torch = self._torch
        enc, t = self.net.encoder, len(inputs)
        out = np.empty((len(masked), t, base.shape[-1]), dtype=np.float32)
        with torch.inference_mode():
            ref = torch.as_tensor(base[0], device=self.device)
            future = enc.future_mask(t, ref)
            for block in sorted({b for b, _ in masked}):
                rows = [r for r, (b, _) in enumerate(masked) if b == block]
                keys = torch.zeros((len(rows), t), dtype=torch.bool, device=self.device)
                for k, r in enumerate(rows):
                    keys[k, masked[r][1]] = True
                x = torch.as_tensor(base[block], device=self.device)[:, None, :].expand(t, len(rows), -1).contiguous()
                y, _ = enc.layers[block](x, key_padding_mask=keys, attn_mask=future)
                out[rows] = y.transpose(0, 1).float().cpu().numpy()
        return out

    def forward_decoder(
        self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        if not self.supports_decoder:
            return super().forward_decoder(sources, targets)
        with self._torch.inference_mode():
            enc = self.net.encoder(self._ids(sources))
            dec = self._decoder(self._ids(targets), enc["final"], enc["padding"], attention=True)
        return (
            self._torch.stack(dec["self"]).float().cpu().numpy(),
            self._torch.stack(dec["cross"]).float().cpu().numpy(),
        )

    # --- heads: gates and logits (head-mask importance) --------------------------------------------------
    def _encoder_layers(self) -> list:
        return list(self.net.encoder.layers)

    def _decoder_layers(self) -> list:
        return list(self._decoder.layers)

    def logits(self, inputs: Sequence[Sequence[int]], decoder_inputs: Sequence[Sequence[int]] | None = None):
        """Output logits ``(B, T, V)`` with autograd on (the model stays in eval mode)."""
        ids = self._ids(inputs)
        enc = self.net.encoder(ids)
        if self.objective != "mt":
            return self.net.logits(enc["final"].transpose(0, 1))
        if decoder_inputs is None:
            raise ValueError("a translation model's logits need decoder_inputs (build_decoder_input)")
        decoder = self._decoder
        dec = decoder(self._ids(decoder_inputs), enc["final"], enc["padding"])
        return decoder.output_layer(dec["features"])

    def translate(
        self, sources: Sequence[Sequence[int]], *, max_len_a: float = 0.0, max_len_b: int = 200
    ) -> list[list[int]]:
        """Greedy translations (target ids, without ``</s>``) of model inputs ``sources``."""
        if not self.supports_decoder:
            raise ValueError(f"{self.name}: only a translation model translates")
        d = self.dictionary
        return self.net.translate_greedy(
            self._ids(sources), eos=d.eos(), pad=d.pad(), max_len_a=max_len_a, max_len_b=max_len_b
        )


def _transformed_values(attn, value):
    """f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h: (B, H, T, d) from the value input ``value`` (T, B, d)."""
    import torch

    t, b, d = value.shape
    h = attn.num_heads
    v = attn.v_proj(value).view(t, b, h, d // h)
    w_o = attn.out_proj.weight.view(d, h, d // h)
    return torch.einsum("tbhe,dhe->bhtd", v, w_o)
