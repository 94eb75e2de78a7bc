"""The adapter interface every model family implements.

An adapter answers two questions with one alignment convention:

* :meth:`Adapter.tokenize` turns a sentence into *content* tokens (no special
  tokens) with their subword strings and word indices;
* :meth:`Adapter.forward` runs the network on *model inputs* (content plus the
  special tokens the objective was trained with, see :meth:`Adapter.build_input`)
  and returns hidden states of layers 0..L and, on request, per-head attention.

Content token ``i`` of a sentence sits at input position
``content_offset + i`` for every objective, so token position ``i`` means the
same input token in an MT encoder (``x1..xn </s>``), a causal LM
(``<bos> x1..xn``: the state at ``x_i`` has read ``x_1..x_i`` and predicts
``x_(i+1)``) and a masked LM (``<s> x1..xn </s>``). Hidden states stored for
analysis are those of content tokens only; attention maps keep every input
position, special tokens included, because attention *to* them is itself a
finding (Clark et al., 2019).

Shapes (``B`` sentences, ``T`` padded input length, ``L`` layers, ``H`` heads,
``d`` model width)::

    hidden     (L + 1, B, T, d)   float32, layer 0 = embedding output
    attention  (L, B, H, T, T)    float32, rows are queries, columns keys

and, from :meth:`Adapter.forward_norms`, the vector norms of Kobayashi et al.
(2020), with f_h(x) = (x W_V^h + b_V^h) W_O^h (value bias included; output
bias, residual and LayerNorm excluded)::

    value_norm     (L, B, H, T)      ||f_h(x_j)||, per key j
    weighted_norm  (L, B, H, T, T)   ||alpha_hij f_h(x_j)|| = alpha_hij ||f_h(x_j)||
    summed_norm    (L, B, T, T)      ||sum_h alpha_hij f_h(x_j)||, the norm of the sum over heads
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args

import numpy as np

logger = logging.getLogger(__name__)

Objective = Literal["mt", "lm", "mlm"]

__all__ = [
    "Adapter",
    "Tokenized",
    "ModelLoadError",
    "Objective",
    "word_ids_from_pieces",
    "attention_norms",
    "FairseqLayoutHeads",
    "is_objective",
]


def is_objective(value: object) -> TypeGuard[Objective]:
    """Whether ``value`` is one of the objectives ``mt``, ``lm``, ``mlm``."""
    return value in get_args(Objective)


class ModelLoadError(RuntimeError):
    """A path that is not a loadable model; the message says what was expected."""


@dataclass(frozen=True)
class Tokenized:
    """One sentence's content tokens (no special tokens)."""

    ids: list[int]
    pieces: list[str]
    word_ids: list[int]
    #: the text of each piece where the tokenizer knows it (a fast Hugging Face tokenizer's
    #: offsets: ``[UNK]`` -> the characters it stands for); None: the pieces themselves
    texts: list[str] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def truncated(self, n: int) -> Tokenized:
        texts = None if self.texts is None else self.texts[:n]
        return Tokenized(self.ids[:n], self.pieces[:n], self.word_ids[:n], texts)


ASCII_APOSTROPHE, TYPESET_APOSTROPHE = "'", "\u2019"


def apostrophe_for(vocabulary: Container[str]) -> str | None:
    """What the ASCII apostrophe becomes before a SentencePiece vocabulary tokenizes a text:
    ``\u2019`` (U+2019) where the vocabulary holds that piece and not ``'``, as this project's
    models, trained on typeset text (the World English Bible writes "don\u2019t"), do; otherwise
    None (unchanged: an apostrophe the vocabulary lacks is then counted and warned about as an
    unknown piece, :func:`evolution.tokens.unknown_pieces`)."""
    if ASCII_APOSTROPHE not in vocabulary and TYPESET_APOSTROPHE in vocabulary:
        return TYPESET_APOSTROPHE
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


def word_ids_from_pieces(pieces: Sequence[str]) -> list[int]:
    """Word index of each subword piece.

    Understands SentencePiece (a piece starting with ``▁`` opens a word),
    subword-nmt (a piece ending in ``@@`` continues into the next) and GPT-2
    byte-level BPE (``Ġ`` opens a word); a plain whitespace token is one word.
    """
    out: list[int] = []
    word = -1
    continues = False
    sp_style = any(p.startswith(("▁", "Ġ")) for p in pieces)
    for i, p in enumerate(pieces):
        if sp_style:
            opens = i == 0 or p.startswith(("▁", "Ġ"))
        else:
            opens = not continues
        if opens:
            word += 1
        out.append(word)
        continues = p.endswith("@@")
    return out


def attention_norms(alpha, f) -> dict:
    """Kobayashi et al. (2020) norms of one layer, without a (T x T x d) tensor.

    ``alpha`` (B, H, Tq, Tk) attention weights and ``f`` (B, H, Tk, d) the
    transformed values f_h(x_j) (torch tensors). ``summed_norm`` uses
    ||sum_h a_h f_h||^2 = sum_{h,g} a_h a_g <f_h, f_g>: a (Tk, H, H) Gram
    matrix per sentence instead of the (Tq, Tk, d) sum. Returns float32 torch
    tensors ``value_norm`` (B, H, Tk), ``weighted_norm`` (B, H, Tq, Tk) and
    ``summed_norm`` (B, Tq, Tk).
    """
    import torch

    f = f.double()
    a = alpha.double()
    value_norm = torch.linalg.vector_norm(f, dim=-1)  # (B, H, Tk)
    gram = torch.einsum("bhkd,bgkd->bkhg", f, f)  # (B, Tk, H, H)
    sq = torch.einsum("bhqk,bgqk,bkhg->bqk", a, a, gram).clamp_min(0)
    return {
        "value_norm": value_norm.float(),
        "weighted_norm": (a * value_norm[:, :, None, :]).float(),
        "summed_norm": sq.sqrt().float(),
    }


class Adapter(abc.ABC):
    """A model seen as ``tokenize`` + ``forward`` with the alignment above.

    Subclasses set: ``name``, ``objective``, ``num_layers`` (L),
    ``num_heads``, ``d_model``, ``max_positions`` (model inputs, special
    tokens included), ``prefix`` and ``suffix`` (special token ids around the
    content), ``pad_id`` and ``special_ids``.
    """

    name: str
    objective: Objective
    num_layers: int
    num_heads: int
    d_model: int
    max_positions: int
    prefix: list[int]
    suffix: list[int]
    pad_id: int
    special_ids: frozenset[int]

    @property
    def content_offset(self) -> int:
        """Input position of content token 0."""
        return len(self.prefix)

    @property
    def max_content_tokens(self) -> int:
        """The longest content the model accepts once special tokens are added."""
        return self.max_positions - len(self.prefix) - len(self.suffix)

    def build_input(self, ids: Sequence[int]) -> list[int]:
        """Content ids -> model input ids (special tokens added as in training)."""
        return [*self.prefix, *ids, *self.suffix]

    @abc.abstractmethod
    def tokenize(self, sentence: str) -> Tokenized:
        """Content tokens of one sentence."""

    @abc.abstractmethod
    def forward(
        self, inputs: Sequence[Sequence[int]], *, attention: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Run a batch of model inputs (right-padded internally).

        Returns ``hidden`` of shape ``(L + 1, B, T, d)`` and, when
        ``attention`` is true, ``attention`` of shape ``(L, B, H, T, T)``;
        values at padded positions are unspecified.
        """

    @property
    def supports_norms(self) -> bool:
        """Whether :meth:`forward_norms` and :meth:`forward_qk` are available."""
        return False

    def forward_qk(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Per-head queries and keys ``(L, B, H, T, d_head)`` each, before scaling (Vig 2019's
        neuron view: attention = softmax(q . k / sqrt(d_head)))."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot return per-head queries and keys; they are "
            "available for fairseq Transformers and BERT-like Hugging Face encoders"
        )

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The strings of input ids, special tokens included."""
        raise NotImplementedError

    @property
    def unk_id(self) -> int | None:
        """The id of the unknown piece, which stands for text outside the vocabulary (None: none)."""
        return None

    def forward_norms(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``hidden``, ``attention`` and the norms of the module docstring (numpy, stacked over layers)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot compute value-vector norms (Kobayashi et al. 2020); "
            "they are available for fairseq Transformers and BERT-like Hugging Face encoders"
        )

    @property
    def supports_decoder(self) -> bool:
        """Whether :meth:`forward_decoder` is available (translation models with a Transformer decoder)."""
        return False

    def tokenize_target(self, sentence: str) -> Tokenized:
        """Content tokens of one target-language sentence (translation models)."""
        raise NotImplementedError(f"{type(self).__name__} has no decoder")

    def build_decoder_input(self, ids: Sequence[int]) -> list[int]:
        """Target content ids -> the teacher-forced decoder input (translation models)."""
        raise NotImplementedError(f"{type(self).__name__} has no decoder")

    @property
    def max_target_tokens(self) -> int:
        """The longest target the decoder accepts after its start symbol (translation models)."""
        raise NotImplementedError(f"{type(self).__name__} has no decoder")

    @property
    def attention_types(self) -> tuple[str, ...]:
        """The attention types whose heads the head analyses read: ``encoder_self`` (the analysed
        stack), and for translation models with a decoder also ``decoder_self`` and ``encoder_decoder``."""
        return ("encoder_self",)

    def forward_decoder(
        self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Teacher-forced decoder attention of a translation model: ``sources`` model inputs
        (:meth:`build_input`), ``targets`` decoder inputs (:meth:`build_decoder_input`).
        Returns the decoder self-attention ``(L, B, H, T_target, T_target)`` and the
        encoder-decoder attention ``(L, B, H, T_target, T_source)``; values at padded
        positions are unspecified."""
        raise NotImplementedError(
            f"{type(self).__name__} has no decoder whose attention can be read; decoder heads "
            "are available for fairseq translation models"
        )

    #: the ``<mask>`` id of a masked LM (None otherwise), and the [low, high) range of ordinary
    #: symbols that random replacements are drawn from (MLM output MI, evolution.metrics.masked)
    mask_id: int | None = None
    ordinary_ids: tuple[int, int] = (0, 0)

    @property
    def supports_key_masking(self) -> bool:
        """Whether :meth:`forward_masked_keys` is available (this project's trained models)."""
        return False

    def forward_masked_keys(self, inputs: Sequence[Sequence[int]], *, masked: Sequence[tuple[int, int]]) -> np.ndarray:
        """Hidden states ``(L + 1, B, T, d)`` when row ``b`` hides input position
        ``masked[b][1]`` from the attention keys of block ``masked[b][0]`` (0-based)
        only: the token influence analysis (Voita et al. 2019, section 5)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot mask attention keys per layer; token influence "
            "needs this project's trained models (models[].kind: trained)"
        )

    def masked_key_states(
        self, inputs: Sequence[int], *, base: np.ndarray, masked: Sequence[tuple[int, int]]
    ) -> np.ndarray:
        """The states ``(B, T, d)`` of layer ``block + 1`` for row ``b`` with ``masked[b] = (block,
        position)``: the output of block ``block`` (0-based) when ``position`` is hidden from its
        attention keys, for one input sentence ``inputs``; ``base`` ``(L + 1, T, d)`` its unmasked
        states. What token influence reads of :meth:`forward_masked_keys` (the blocks below are
        unchanged by the mask, those above are not read); adapters that can run one block from its
        input states do only that."""
        hidden = self.forward_masked_keys([inputs] * len(masked), masked=masked)
        return np.stack([hidden[block + 1, b] for b, (block, _) in enumerate(masked)])

    def describe(self) -> dict:
        """Attributes recorded with every extracted array."""
        return {
            "objective": self.objective,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "max_positions": self.max_positions,
            "content_offset": self.content_offset,
            "prefix_ids": list(self.prefix),
            "suffix_ids": list(self.suffix),
            **({"apostrophe": self.apostrophe} if self.apostrophe is not None else {}),
        }

    #: where the model runs (:mod:`evolution.models.device`); inputs go there, outputs come back
    device: str = "cpu"

    #: what the ASCII apostrophe becomes before tokenizing (:func:`apostrophe_for`); None: unchanged
    apostrophe: str | None = None

    def normalised(self, sentence: str) -> str:
        """``sentence`` as the tokenizer reads it: the ASCII apostrophe replaced by :attr:`apostrophe`."""
        return sentence if self.apostrophe is None else sentence.replace(ASCII_APOSTROPHE, self.apostrophe)

    def _pad(self, inputs: Sequence[Sequence[int]]):
        """Right-padded ``ids`` and attention ``mask`` (B, T) on :attr:`device`, and the lengths."""
        import torch

        lengths = [len(x) for x in inputs]
        t = max(lengths)
        ids = torch.full((len(inputs), t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(inputs), t), dtype=torch.long)
        for b, x in enumerate(inputs):
            ids[b, : len(x)] = torch.as_tensor(list(x), dtype=torch.long)
            mask[b, : len(x)] = 1
        return ids.to(self.device), mask.to(self.device), lengths


class FairseqLayoutHeads(Adapter):
    """Head gates of a network laid out as fairseq's Transformer (each layer's ``self_attn``,
    the decoder's ``encoder_attn``, each attention's ``out_proj``): fairseq's own classes
    (:class:`~evolution.models.fairseq.FairseqAdapter`) and their plain PyTorch mirror
    (:class:`~evolution.models.shipped_torch.PlainAdapter`). A subclass gives ``_encoder_layers()`` and
    ``_decoder_layers()``, and ``supports_decoder``."""

    #: the attention types a model may have (Voita et al. ACL 2019 prune all three)
    ATTENTIONS = ("encoder_self", "decoder_self", "encoder_decoder")
    #: the batch axis of the attention output projections' input (T, B, H * d_head), for per-sentence head gates
    gate_batch_dim = 1

    def _encoder_layers(self) -> list:
        """The encoder's (the analysed stack's) layers."""
        raise NotImplementedError

    def _decoder_layers(self) -> list:
        """The decoder's layers (translation models)."""
        raise NotImplementedError

    @property
    def attention_types(self) -> tuple[str, ...]:
        """``encoder_self`` (the analysed stack), and for translation models the decoder's two."""
        return self.ATTENTIONS if self.supports_decoder else self.ATTENTIONS[:1]

    def attention_modules(self, attention: str = "encoder_self") -> list:
        """The attention module of each layer of one attention type."""
        if attention not in self.attention_types:
            raise ValueError(f"{self.name}: no {attention!r} attention; this model has {self.attention_types}")
        if attention == "encoder_self":
            return [layer.self_attn for layer in self._encoder_layers()]
        return [
            layer.self_attn if attention == "decoder_self" else layer.encoder_attn for layer in self._decoder_layers()
        ]

    def output_projections(self, attention: str = "encoder_self") -> list:
        """Each layer's attention output projection, whose input is the concatenated heads
        (:func:`evolution.nets.gates.head_gates`)."""
        return [m.out_proj for m in self.attention_modules(attention)]
