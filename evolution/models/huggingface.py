"""Hugging Face models from a local directory.

Supported: BERT-like encoders (objective ``mlm``), GPT-2-like decoders
(``lm``) and the encoder of Marian/T5-like encoder-decoders (``mt``).
Attention is forced to the eager implementation so that per-head weights
exist. Hidden states are Hugging Face's ``hidden_states`` (for GPT-2 the last
entry has the final layer norm applied, as Hugging Face defines it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from evolution.models.base import Adapter, ModelLoadError, Tokenized, word_ids_from_pieces

logger = logging.getLogger(__name__)

__all__ = ["HuggingFaceAdapter"]

_CAUSAL_TYPES = {"gpt2", "gpt_neo", "gptj", "gpt_neox", "llama", "mistral", "opt", "bloom", "qwen2"}


def _first_attr(config, names: Sequence[str]):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return None


def whitespace_word_ids(sentence: str, offsets) -> list[int] | None:
    """Index of the whitespace word holding each token's first non-space character
    (``offsets``: the tokenizer's (start, end) character spans); None if a span is empty."""
    import bisect
    import re

    starts = [m.start() for m in re.finditer(r"\S+", sentence)]
    out = []
    for a, b in offsets:
        while a < b and sentence[a].isspace():  # byte-level BPE spans may include the leading space
            a += 1
        if a >= b:
            return None
        out.append(max(0, bisect.bisect_right(starts, a) - 1))
    return out


class HuggingFaceAdapter(Adapter):
    """Adapter for a local Hugging Face model directory.

    The tokenizer is loaded at construction (cheap); the weights on the first
    :meth:`forward`, so a driver process can tokenize without holding a model.
    """

    def __init__(self, path: str | Path, *, name: str | None = None, objective: str | None = None):
        from transformers import AutoConfig, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise ModelLoadError(f"{self.path} is not a Hugging Face model directory (no config.json); "
                                 "point models[].path at a directory written by save_pretrained()")
        self.name = name or self.path.name
        weights = [f.name for f in self.path.iterdir()
                   if f.suffix in (".safetensors", ".bin", ".pt", ".h5", ".msgpack") or f.name.endswith(".index.json")]
        if not weights:
            raise ModelLoadError(f"{self.path}: a Hugging Face config but no weights (model.safetensors or "
                                 "pytorch_model.bin); save the model with save_pretrained() into that directory, "
                                 "or point models[].path at the directory that has them")
        try:
            self.config = AutoConfig.from_pretrained(self.path, local_files_only=True)
            self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"{self.path}: cannot load the Hugging Face config or tokenizer: {exc}") from exc
        cfg = self.config
        self.is_encoder_decoder = bool(getattr(cfg, "is_encoder_decoder", False))
        inferred = ("mt" if self.is_encoder_decoder
                    else "lm" if cfg.model_type in _CAUSAL_TYPES or getattr(cfg, "is_decoder", False)
                    else "mlm")
        self.objective = objective or inferred
        self.num_layers = int(_first_attr(cfg, ["num_hidden_layers", "n_layer", "num_layers", "encoder_layers"]))
        if self.is_encoder_decoder:
            self.num_layers = int(_first_attr(cfg, ["encoder_layers", "num_layers", "num_hidden_layers"]))
        self.num_heads = int(_first_attr(cfg, ["encoder_attention_heads", "num_attention_heads", "n_head",
                                               "num_heads"]))
        self.d_model = int(_first_attr(cfg, ["hidden_size", "d_model", "n_embd"]))
        max_pos = _first_attr(cfg, ["max_position_embeddings", "n_positions"])
        if max_pos is None:  # relative positions (T5): the tokenizer's limit, else 512
            tok_max = getattr(self.tokenizer, "model_max_length", None)
            max_pos = tok_max if tok_max and tok_max < 1_000_000 else 512
            logger.info("%s: no absolute position limit; using max_positions=%d", self.name, max_pos)
        self.max_positions = int(max_pos)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.special_ids = frozenset(int(i) for i in self.tokenizer.all_special_ids)
        self.prefix, self.suffix = self._special_template()
        self._model = None

    def _special_template(self) -> tuple[list[int], list[int]]:
        """Special tokens the tokenizer puts around content (e.g. [CLS] ... [SEP])."""
        plain = self.tokenizer("a b", add_special_tokens=False)["input_ids"]
        full = self.tokenizer("a b", add_special_tokens=True)["input_ids"]
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return list(full[:start]), list(full[start + len(plain):])
        raise ModelLoadError(f"{self.path}: the tokenizer's special tokens do not wrap the content "
                             "as prefix + content + suffix; this layout is not supported")

    def tokenize(self, sentence: str) -> Tokenized:
        fast = getattr(self.tokenizer, "is_fast", False)
        enc = self.tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=fast)
        ids = [int(i) for i in enc["input_ids"]]
        pieces = self.tokenizer.convert_ids_to_tokens(ids)
        # The token table's word_id is the *whitespace* word (what CoNLL-U annotation aligns to);
        # a fast tokenizer's own word_ids() count its pre-tokenizer's words, which split
        # punctuation ("don't" -> 3), so character offsets are mapped to whitespace words instead.
        wids = whitespace_word_ids(sentence, enc["offset_mapping"]) if fast else None
        if wids is None:
            wids = word_ids_from_pieces(pieces)
        return Tokenized(ids=ids, pieces=[str(p) for p in pieces], word_ids=[int(w) for w in wids])

    @property
    def model(self):
        if self._model is None:
            import torch
            from transformers import AutoModel

            try:
                model = AutoModel.from_pretrained(self.path, attn_implementation="eager", local_files_only=True,
                                                  dtype=torch.float32)
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"{self.path}: cannot load the Hugging Face weights: {exc}") from exc
            if self.is_encoder_decoder:
                model = model.get_encoder()
            self._model = model.eval()
        return self._model

    def forward(self, inputs: Sequence[Sequence[int]], *, attention: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        ids, mask, _ = self._pad(inputs)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             output_attentions=attention, return_dict=True)
        hidden = torch.stack(out.hidden_states).float().numpy()
        att = torch.stack(self._attentions(out)).float().numpy() if attention else None
        return hidden, att

    def _attentions(self, out) -> tuple:
        """Per-layer attention weights of a forward pass, or a clear error when the model gives none."""
        att = getattr(out, "attentions", None)
        if att is None or len(att) != self.num_layers or any(a is None for a in att):
            raise ModelLoadError(f"{self.name}: the model returned no attention weights (its attention "
                                 f"implementation is {getattr(self.model.config, '_attn_implementation', '?')!r}, "
                                 "or it has no attention); set extract.attention: null to extract hidden states "
                                 "only, or use a model whose eager attention returns weights")
        return att

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [str(p) for p in self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])]

    def forward_qk(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        import contextlib

        import torch

        layers = self._bert_layers() if self.supports_norms else None
        if layers is None:
            return super().forward_qk(inputs)
        qk: list[tuple] = []

        def capture(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            b, t, d = x.shape
            h = self.num_heads
            qk.append((module.query(x).view(b, t, h, d // h).transpose(1, 2),
                       module.key(x).view(b, t, h, d // h).transpose(1, 2)))

        ids, mask, _ = self._pad(inputs)
        with contextlib.ExitStack() as ctx, torch.inference_mode():
            for layer in layers:
                ctx.callback(layer.attention.self.register_forward_pre_hook(capture, with_kwargs=True).remove)
            self.model(input_ids=ids, attention_mask=mask, return_dict=True)
        return (torch.stack([q for q, _ in qk]).float().numpy(), torch.stack([k for _, k in qk]).float().numpy())

    def _bert_layers(self):
        """The BERT-like blocks (``attention.self.value``, ``attention.output.dense``), or None."""
        layers = getattr(getattr(self.model, "encoder", None), "layer", None)
        if layers is None or not all(hasattr(layer, "attention") and hasattr(layer.attention, "self")
                                     and hasattr(layer.attention.self, "value")
                                     and hasattr(layer.attention, "output") for layer in layers):
            return None
        return list(layers)

    #: model types whose blocks have BERT's layout (``attention.self.value``, ``attention.output.dense``)
    NORM_TYPES = ("bert", "roberta", "xlm-roberta", "electra")

    @property
    def supports_norms(self) -> bool:
        return self.config.model_type in self.NORM_TYPES

    def forward_norms(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        import contextlib

        import torch

        from evolution.models.base import attention_norms

        layers = self._bert_layers() if self.supports_norms else None
        if layers is None:
            return super().forward_norms(inputs)
        values: list[torch.Tensor] = []

        def value_input(module, args, kwargs):
            values.append(args[0] if args else kwargs["hidden_states"])

        ids, mask, _ = self._pad(inputs)
        with contextlib.ExitStack() as ctx, torch.inference_mode():
            for layer in layers:
                ctx.callback(layer.attention.self.register_forward_pre_hook(value_input, with_kwargs=True).remove)
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True,
                             return_dict=True)
            per_layer = []
            for layer, alpha, x in zip(layers, self._attentions(out), values):
                sa = layer.attention.self
                h = self.num_heads
                b, t, d = x.shape
                v = sa.value(x).view(b, t, h, d // h)  # value bias included
                w_o = layer.attention.output.dense.weight.view(d, h, d // h)
                per_layer.append(attention_norms(alpha, torch.einsum("bthe,dhe->bhtd", v, w_o)))
            norms = {k: torch.stack([p[k] for p in per_layer]).numpy() for k in per_layer[0]}
        hidden = torch.stack(out.hidden_states).float().numpy()
        att = torch.stack(self._attentions(out)).float().numpy()
        return hidden, att, norms
