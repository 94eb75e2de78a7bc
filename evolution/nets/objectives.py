"""The three fairseq models (MT, LM, MLM) built on one :class:`SharedEncoder`.

=============  ===================  =================================  =======================
fairseq model  task                 encoder input                      output
=============  ===================  =================================  =======================
evolution_mt   translation          ``x1..xn </s>``                    fairseq Transformer decoder
evolution_lm   language_modeling    ``</s> x1..xn`` (causal)           tied embedding, next token
evolution_mlm  masked_lm            ``<s> x1..xn </s>`` (15% masked)   tied embedding, masked tokens
=============  ===================  =================================  =======================

Every model takes the same ``--encoder-*`` arguments (fairseq's
``TransformerConfig``) and builds the same :class:`SharedEncoder`; only the
LM's is causal. With ``--init-encoder FILE`` all three load one set of
initial encoder weights (token embeddings included: the vocabulary is
shared). LM and MLM predict with the transposed token embedding, as MT does
with ``--share-all-embeddings``, so no objective has an output layer the
others lack. The MLM masking (15% chosen; 80% ``<mask>``, 10% random, 10%
kept) is fairseq's ``masked_lm`` task with its defaults.

:func:`register` adds the models to fairseq's registry; it is idempotent, and
``evolution/fairseq_plugin`` calls it so that ``fairseq-train --user-dir
evolution/fairseq_plugin`` works as well.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["register", "OBJECTIVES", "encoder_of"]

#: objective -> (fairseq task, fairseq model/arch name)
OBJECTIVES = {
    "mt": ("translation", "evolution_mt"),
    "lm": ("language_modeling", "evolution_lm"),
    "mlm": ("masked_lm", "evolution_mlm"),
}


def encoder_of(model):
    """The :class:`SharedEncoder` of any of the three models."""
    return model.shared_encoder


def register() -> None:
    """Register ``evolution_mt``, ``evolution_lm`` and ``evolution_mlm`` with fairseq (once)."""
    from fairseq.models import MODEL_REGISTRY

    if "evolution_mt" in MODEL_REGISTRY:
        return
    _define()


def _define() -> None:  # noqa: C901 - the three models read best side by side
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.models import (
        BaseFairseqModel,
        FairseqDecoder,
        FairseqLanguageModel,
        register_model,
        register_model_architecture,
    )
    from fairseq.models.transformer import TransformerConfig, TransformerModel
    from fairseq.models.transformer import base_architecture as transformer_base_architecture

    from evolution.nets.encoder import SharedEncoder, load_initial_encoder

    def add_shared_args(parser):
        parser.add_argument(
            "--init-encoder",
            type=str,
            default=None,
            metavar="FILE",
            help="state dict of the shared encoder to start from (identical across objectives)",
        )
        parser.add_argument(
            "--input-token-dropout",
            type=float,
            default=0.0,
            metavar="P",
            help="replace each input token by a random one with probability P while training",
        )

    def build_shared_encoder(args, dictionary, embed_tokens, *, causal: bool) -> SharedEncoder:
        cfg = TransformerConfig.from_namespace(args)
        encoder = SharedEncoder(
            cfg, dictionary, embed_tokens, causal=causal, input_token_dropout=getattr(args, "input_token_dropout", 0.0)
        )
        init = getattr(args, "init_encoder", None)
        if init:
            load_initial_encoder(encoder, init)
        return encoder

    def add_encoder_only_args(parser):
        gen_parser_from_dataclass(parser, TransformerConfig(), delete_default=True, with_prefix="")
        add_shared_args(parser)

    def encoder_with_own_embedding(args, task, *, causal: bool) -> SharedEncoder:
        dictionary = task.source_dictionary
        embed = TransformerModel.build_embedding(args, dictionary, args.encoder_embed_dim)
        return build_shared_encoder(args, dictionary, embed, causal=causal)

    def tied_logits(features: torch.Tensor, encoder: SharedEncoder) -> torch.Tensor:
        return F.linear(features, encoder.embed_tokens.weight)

    # --- MT: fairseq's Transformer with the shared encoder -----------------------------------
    @register_model("evolution_mt")
    class EvolutionMT(TransformerModel):
        objective = "mt"

        @classmethod
        def add_args(cls, parser):
            super().add_args(parser)
            add_shared_args(parser)

        @classmethod
        def build_model(cls, args, task):
            model = super().build_model(args, task)
            model.encoder = build_shared_encoder(args, task.source_dictionary, model.encoder.embed_tokens, causal=False)
            if args.share_all_embeddings:
                assert model.decoder.embed_tokens is model.encoder.embed_tokens
            return model

        @property
        def shared_encoder(self):
            return self.encoder

    # --- LM: the shared encoder with a causal mask ---------------------------------------------
    class CausalDecoder(FairseqDecoder):
        """fairseq's decoder interface around a causal :class:`SharedEncoder`."""

        def __init__(self, dictionary, encoder: SharedEncoder):
            super().__init__(dictionary)
            self.encoder = encoder

        def extract_features(self, prev_output_tokens, **kwargs):
            out = self.encoder(prev_output_tokens)
            return out["encoder_out"][0].transpose(0, 1), {"attn": [None], "inner_states": None}

        def output_layer(self, features, **kwargs):
            return tied_logits(features, self.encoder)

        def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
            x, extra = self.extract_features(prev_output_tokens)
            return self.output_layer(x), extra

        def max_positions(self):
            return self.encoder.max_positions()

    @register_model("evolution_lm")
    class EvolutionLM(FairseqLanguageModel):
        objective = "lm"

        @classmethod
        def add_args(cls, parser):
            add_encoder_only_args(parser)

        @classmethod
        def build_model(cls, args, task):
            return cls(CausalDecoder(task.source_dictionary, encoder_with_own_embedding(args, task, causal=True)))

        @property
        def shared_encoder(self):
            return self.decoder.encoder

    # --- MLM: the shared encoder predicting masked tokens --------------------------------------
    @register_model("evolution_mlm")
    class EvolutionMLM(BaseFairseqModel):
        objective = "mlm"

        def __init__(self, encoder: SharedEncoder):
            super().__init__()
            self.encoder = encoder

        @classmethod
        def add_args(cls, parser):
            add_encoder_only_args(parser)

        @classmethod
        def build_model(cls, args, task):
            return cls(encoder_with_own_embedding(args, task, causal=False))

        def forward(self, src_tokens, src_lengths=None, masked_tokens: torch.Tensor | None = None, **kwargs):
            x = self.encoder(src_tokens)["encoder_out"][0].transpose(0, 1)  # B x T x C
            if masked_tokens is not None:
                x = x[masked_tokens]  # only the predicted positions reach the softmax
            return tied_logits(x, self.encoder), {}

        def max_positions(self):
            return self.encoder.max_positions()

        @property
        def shared_encoder(self):
            return self.encoder

    # --- one architecture default for the encoder of all three ---------------------------------
    def shared_defaults(args):
        # fairseq's Transformer defaults (Vaswani et al. 2017 base; Voita et al. 2019 use it),
        # applied identically to every objective so that their encoders cannot differ.
        transformer_base_architecture(args)

    register_model_architecture("evolution_mt", "evolution_mt")(shared_defaults)
    register_model_architecture("evolution_lm", "evolution_lm")(shared_defaults)
    register_model_architecture("evolution_mlm", "evolution_mlm")(shared_defaults)
