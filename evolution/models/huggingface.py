"""Hugging Face models from a local directory.

Supported: BERT-like encoders (objective ``mlm``), GPT-2-like decoders
(``lm``) and the encoder of Marian/T5-like encoder-decoders (``mt``).
Attention is forced to the eager implementation so that per-head weights
exist. Hidden states are Hugging Face's ``hidden_states`` (for GPT-2 the last
entry has the final layer norm applied, as Hugging Face defines it).

Head-mask importance (Michel et al. 2019, :mod:`evolution.metrics.importance`)
needs head gates and the model's own pretraining loss: BERT-like encoders and
GPT-2 have both when their checkpoint holds the pretraining head (masked-LM
head; GPT-2's head is its tied input embedding), loaded as
:attr:`HuggingFaceAdapter.lm_model`. A bare encoder (a sentence-embedding
model such as MiniLM) has no head: :attr:`HuggingFaceAdapter.loss_unavailable`
says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evolution.models.base import (
    Adapter,
    ModelLoadError,
    Objective,
    Tokenized,
    whitespace_word_ids,
    word_ids_from_pieces,
)

logger = logging.getLogger(__name__)

__all__ = ["HuggingFaceAdapter", "blocks_in_config"]

_CAUSAL_TYPES = {"gpt2", "gpt_neo", "gptj", "gpt_neox", "llama", "mistral", "opt", "bloom", "qwen2"}


def ordinary_range(special_ids, vocab_size: int) -> tuple[int, int]:
    """The longest run [low, high) of ids below ``vocab_size`` holding no special id: what an
    MLM corruption's random replacements are drawn from (bert-base-uncased: [104, 30522),
    past [PAD] 0 and [UNK] [CLS] [SEP] [MASK] 100-103; RoBERTa: [4, 50264), before <mask>)."""
    cuts = sorted({-1, vocab_size, *(int(i) for i in special_ids if 0 <= int(i) < vocab_size)})
    low, high = max(((a + 1, b) for a, b in zip(cuts, cuts[1:], strict=False)), key=lambda r: r[1] - r[0])
    return low, high


def blocks_in_config(path: str | Path) -> int | None:
    """The blocks of the model in the local directory ``path`` read from its ``config.json`` alone
    (no weights, no transformers), as :class:`HuggingFaceAdapter` counts them (an encoder-decoder:
    its encoder's); None where there is no such file or it names none."""
    import json

    file = Path(path) / "config.json"
    if not file.is_file():
        return None
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = ["num_hidden_layers", "n_layer", "num_layers", "encoder_layers"]
    if cfg.get("is_encoder_decoder"):
        names = ["encoder_layers", "num_layers", "num_hidden_layers"]
    value = next((cfg[n] for n in names if isinstance(cfg.get(n), int)), None)
    return int(value) if value is not None else None


def _first_attr(config, names: Sequence[str]):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return None


class HuggingFaceAdapter(Adapter):
    """Adapter for a local Hugging Face model directory.

    The tokenizer is loaded at construction (cheap); the weights on the first
    :meth:`forward`, so a driver process can tokenize without holding a model.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        objective: Objective | None = None,
        device: str | None = None,
    ):
        from transformers import AutoConfig, AutoTokenizer

        from evolution.models.device import resolve_device

        self.device = resolve_device(device)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise ModelLoadError(
                f"{self.path} is not a Hugging Face model directory (no config.json); "
                "point models[].path at a directory written by save_pretrained()"
            )
        self.name = name or self.path.name
        weights = [
            f.name
            for f in self.path.iterdir()
            if f.suffix in (".safetensors", ".bin", ".pt", ".h5", ".msgpack") or f.name.endswith(".index.json")
        ]
        if not weights:
            raise ModelLoadError(
                f"{self.path}: a Hugging Face config but no weights (model.safetensors or "
                "pytorch_model.bin); save the model with save_pretrained() into that directory, "
                "or point models[].path at the directory that has them"
            )
        try:
            self.config = AutoConfig.from_pretrained(self.path, local_files_only=True)
            self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"{self.path}: cannot load the Hugging Face config or tokenizer: {exc}") from exc
        cfg = self.config
        self.is_encoder_decoder = bool(getattr(cfg, "is_encoder_decoder", False))
        inferred: Objective = (
            "mt"
            if self.is_encoder_decoder
            else "lm"
            if cfg.model_type in _CAUSAL_TYPES or getattr(cfg, "is_decoder", False)
            else "mlm"
        )
        self.objective = objective or inferred
        self.num_layers = int(_first_attr(cfg, ["num_hidden_layers", "n_layer", "num_layers", "encoder_layers"]))
        if self.is_encoder_decoder:
            self.num_layers = int(_first_attr(cfg, ["encoder_layers", "num_layers", "num_hidden_layers"]))
        self.num_heads = int(
            _first_attr(cfg, ["encoder_attention_heads", "num_attention_heads", "n_head", "num_heads"])
        )
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
        self.ordinary_ids = ordinary_range(
            self.special_ids, min(len(self.tokenizer), int(getattr(cfg, "vocab_size", None) or 1 << 62))
        )
        self._model = None
        # (model with its pretraining head, None) or (None, why there is none), once loaded
        self._lm: tuple[Any, str | None] | None = None

    def _special_template(self) -> tuple[list[int], list[int]]:
        """Special tokens the tokenizer puts around content (e.g. [CLS] ... [SEP])."""
        plain = self.tokenizer("a b", add_special_tokens=False)["input_ids"]
        full = self.tokenizer("a b", add_special_tokens=True)["input_ids"]
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                return list(full[:start]), list(full[start + len(plain) :])
        raise ModelLoadError(
            f"{self.path}: the tokenizer's special tokens do not wrap the content "
            "as prefix + content + suffix; this layout is not supported"
        )

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
        texts = [sentence[a:b] for a, b in enc["offset_mapping"]] if fast else None
        return Tokenized(ids=ids, pieces=[str(p) for p in pieces], word_ids=[int(w) for w in wids], texts=texts)

    @property
    def model(self):
        if self._model is None:
            import torch
            from transformers import AutoModel
            from transformers.utils import logging as hf_logging

            verbosity = hf_logging.get_verbosity()
            # transformers' load report lists a pretraining head's weights as unexpected and BERT's pooler
            # as missing when a *ForMaskedLM / *ForCausalLM checkpoint is loaded as the bare model: neither
            # enters the hidden states or attention, so one line of the log says it instead of a table
            hf_logging.set_verbosity_error()
            try:
                model, info = AutoModel.from_pretrained(
                    self.path,
                    attn_implementation="eager",
                    local_files_only=True,
                    dtype=torch.float32,
                    output_loading_info=True,
                )
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"{self.path}: cannot load the Hugging Face weights: {exc}") from exc
            finally:
                hf_logging.set_verbosity(verbosity)
            missing = sorted(k for k in info.get("missing_keys") or () if not k.startswith("pooler."))
            if missing:
                logger.warning(
                    "%s: %d weights are not in the checkpoint and were initialised at random (e.g. %s); "
                    "the hidden states are not the trained model's",
                    self.name,
                    len(missing),
                    missing[0],
                )
            unused = len(info.get("unexpected_keys") or ())
            if unused:
                logger.info(
                    "%s: %d weights of the checkpoint (its pretraining head) are not part of the bare model analysed",
                    self.name,
                    unused,
                )
            if self.is_encoder_decoder:
                model = model.get_encoder()
            self._model = model.eval().to(self.device)
        return self._model

    def forward(
        self, inputs: Sequence[Sequence[int]], *, attention: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        ids, mask, _ = self._pad(inputs)
        with torch.inference_mode():
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                output_hidden_states=True,
                output_attentions=attention,
                return_dict=True,
            )
        hidden = torch.stack(out.hidden_states).float().cpu().numpy()
        att = torch.stack(self._attentions(out)).float().cpu().numpy() if attention else None
        return hidden, att

    def _attentions(self, out) -> tuple:
        """Per-layer attention weights of a forward pass, or a clear error when the model gives none."""
        att = getattr(out, "attentions", None)
        if att is None or len(att) != self.num_layers or any(a is None for a in att):
            raise ModelLoadError(
                f"{self.name}: the model returned no attention weights (its attention "
                f"implementation is {getattr(self.model.config, '_attn_implementation', '?')!r}, "
                "or it has no attention); set extract.attention: null to extract hidden states "
                "only, or use a model whose eager attention returns weights"
            )
        return att

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [str(p) for p in self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])]

    @property
    def unk_id(self) -> int | None:
        unk = self.tokenizer.unk_token_id
        return None if unk is None else int(unk)

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
            qk.append(
                (
                    module.query(x).view(b, t, h, d // h).transpose(1, 2),
                    module.key(x).view(b, t, h, d // h).transpose(1, 2),
                )
            )

        ids, mask, _ = self._pad(inputs)
        with contextlib.ExitStack() as ctx, torch.inference_mode():
            for layer in layers:
                ctx.callback(layer.attention.self.register_forward_pre_hook(capture, with_kwargs=True).remove)
            self.model(input_ids=ids, attention_mask=mask, return_dict=True)
        return (
            torch.stack([q for q, _ in qk]).float().cpu().numpy(),
            torch.stack([k for _, k in qk]).float().cpu().numpy(),
        )

    def _bert_layers(self):
        """The BERT-like blocks (``attention.self.value``, ``attention.output.dense``), or None."""
        layers = getattr(getattr(self.model, "encoder", None), "layer", None)
        if layers is None or not all(
            hasattr(layer, "attention")
            and hasattr(layer.attention, "self")
            and hasattr(layer.attention.self, "value")
            and hasattr(layer.attention, "output")
            for layer in layers
        ):
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
            out = self.model(
                input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True, return_dict=True
            )
            per_layer = []
            for layer, alpha, x in zip(layers, self._attentions(out), values, strict=True):
                sa = layer.attention.self
                h = self.num_heads
                b, t, d = x.shape
                v = sa.value(x).view(b, t, h, d // h)  # value bias included
                w_o = layer.attention.output.dense.weight.view(d, h, d // h)
                per_layer.append(attention_norms(alpha, torch.einsum("bthe,dhe->bhtd", v, w_o)))
            norms = {k: torch.stack([p[k] for p in per_layer]).cpu().numpy() for k in per_layer[0]}
        hidden = torch.stack(out.hidden_states).float().cpu().numpy()
        att = torch.stack(self._attentions(out)).float().cpu().numpy()
        return hidden, att, norms

    # -- head-mask importance (Michel et al. 2019): head gates and the model's own pretraining loss --

    #: model types whose blocks are gated: BERT-like encoders (``attention.output.dense``) and GPT-2
    #: (``attn.c_proj``); both concatenate the heads in order before that projection
    GATE_TYPES = NORM_TYPES + ("gpt2",)
    #: the batch axis of the attention output ``(B, T, d)`` (per-sentence head gates)
    gate_batch_dim = 0

    @property
    def attention_types(self) -> tuple[str, ...]:
        """The analysed stack's self-attention (``encoder_self``, as for every adapter; for GPT-2 the
        decoder is the analysed stack, as for this project's LM)."""
        return ("encoder_self",)

    @property
    def loss_mask_id(self) -> int | None:
        """The ``[MASK]`` id the masked-LM loss corrupts with (None for other objectives). Kept apart
        from :attr:`mask_id`, which switches on the MLM-output analyses for this project's models."""
        return self.tokenizer.mask_token_id if self.objective == "mlm" else None

    def _load_lm(self) -> tuple[Any, str | None]:
        """The model with its pretraining head (masked LM / causal LM) and None, or None and the
        reason there is none."""
        import torch
        import transformers
        from transformers.utils import logging as hf_logging

        if self.objective == "mt":
            return (
                None,
                f"{self.name}: the adapter analyses a Hugging Face translation model's encoder only; "
                "head importance needs its decoder and the teacher-forced translation loss",
            )
        if self.config.model_type not in self.GATE_TYPES:
            return (
                None,
                f"{self.name}: head gates are implemented for BERT-like encoders "
                f"({', '.join(self.NORM_TYPES)}) and GPT-2; model type {self.config.model_type!r} "
                "is neither",
            )
        if self.objective == "mlm" and self.tokenizer.mask_token_id is None:
            return (None, f"{self.name}: the tokenizer has no mask token, so the masked-LM loss is undefined")
        auto = transformers.AutoModelForMaskedLM if self.objective == "mlm" else transformers.AutoModelForCausalLM
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the missing-weights table: reported below as one reason
        try:
            # output_loading_info=True returns (model, info), which transformers' annotation omits
            model, info = auto.from_pretrained(  # type: ignore[misc]  # with output_loading_info it returns (model, info)
                self.path,
                attn_implementation="eager",
                local_files_only=True,
                dtype=torch.float32,
                output_loading_info=True,
            )
        except (OSError, ValueError) as exc:
            return (
                None,
                f"{self.name}: no {auto.__name__[len('AutoModelFor') :]} class for this checkpoint ({exc})",
            )
        finally:
            hf_logging.set_verbosity(verbosity)
        missing = sorted(info.get("missing_keys") or ())
        if missing:
            head = "masked-LM" if self.objective == "mlm" else "language-model"
            return (
                None,
                f"{self.name}: the checkpoint has no {head} head ({len(missing)} of its weights, e.g. "
                f"{missing[0]}, are not in {self.path.name}; a bare encoder such as a sentence-embedding "
                "model), so the model's own pretraining loss, whose gradient Michel et al.'s importance "
                "is, cannot be computed",
            )
        return (model.eval().to(self.device), None)

    @property
    def loss_unavailable(self) -> str | None:
        """Why this model cannot compute its own pretraining loss (None when it can): a translation
        model (encoder only), a model type without gates, or a checkpoint without its LM head."""
        if self._lm is None:
            self._lm = self._load_lm()
        return self._lm[1]

    @property
    def lm_model(self):
        """The model with its pretraining head (``*ForMaskedLM`` / ``*ForCausalLM``, eager attention,
        eval mode), loaded on first use; a separate copy of the weights from :attr:`model`."""
        reason = self.loss_unavailable
        if reason is not None:
            raise ModelLoadError(f"{reason}; leave this model out of metrics.importance")
        return self._lm[0]

    def _gated_blocks(self) -> list:
        base = self.lm_model.base_model
        if self.config.model_type == "gpt2":
            return list(base.h)
        return list(base.encoder.layer)

    def attention_modules(self, attention: str = "encoder_self") -> list:
        """Each layer's attention module (``BertSelfAttention`` / ``GPT2Attention``) of :attr:`lm_model`."""
        if attention not in self.attention_types:
            raise ValueError(f"{self.name}: no {attention!r} attention; this model has {self.attention_types}")
        blocks = self._gated_blocks()
        return [b.attn if self.config.model_type == "gpt2" else b.attention.self for b in blocks]

    def output_projections(self, attention: str = "encoder_self") -> list:
        """Each layer's attention output projection of :attr:`lm_model`, whose input is the heads
        concatenated in order (BERT: ``attention.output.dense``; GPT-2: the ``Conv1D`` ``attn.c_proj``)."""
        if attention not in self.attention_types:
            raise ValueError(f"{self.name}: no {attention!r} attention; this model has {self.attention_types}")
        blocks = self._gated_blocks()
        return [b.attn.c_proj if self.config.model_type == "gpt2" else b.attention.output.dense for b in blocks]

    def logits(self, inputs: Sequence[Sequence[int]], decoder_inputs: Sequence[Sequence[int]] | None = None):
        """Output logits ``(B, T, V)`` of :attr:`lm_model` as a torch tensor with autograd on (masked
        LM: every position; causal LM: position t predicts t + 1); padded positions are masked."""
        if decoder_inputs is not None:
            raise ValueError(f"{self.name}: decoder inputs are for translation models")
        ids, mask, _ = self._pad(inputs)
        return self.lm_model(input_ids=ids, attention_mask=mask, return_dict=True).logits
