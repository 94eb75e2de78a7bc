"""The one encoder class that the MT, LM and MLM objectives share.

Voita et al. (2019) compare objectives with *everything else fixed*: data,
vocabulary, encoder architecture and the initial encoder weights. Here the
three fairseq models of :mod:`evolution.nets.objectives` all build a
:class:`SharedEncoder` from the same ``--encoder-*`` arguments; it is
fairseq's own ``TransformerEncoderBase`` (token embedding scaled by sqrt(d),
sinusoidal positions, post- or pre-norm blocks) with three additions:

* ``causal``: a left-to-right attention mask, which turns the encoder stack
  into the LM (position t sees positions <= t only);
* ``input_token_dropout``: during training, each input token is replaced by a
  uniformly random vocabulary token with this probability (the paper's
  control for MT and LM; special symbols are never replaced or drawn);
* ``key_mask``: a per-layer mask of attention *keys*, used by the token
  influence analysis (mask position i out of the keys at layer n only).

``--init-encoder FILE`` loads a state dict written by
:func:`write_initial_encoder`, which is how the three objectives start from
identical encoder weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase

__all__ = ["SharedEncoder", "write_initial_encoder", "load_initial_encoder"]


class SharedEncoder(TransformerEncoderBase):
    """fairseq's Transformer encoder, optionally causal, with input token dropout.

    Parameters
    ----------
    cfg
        A fairseq ``TransformerConfig`` (its ``encoder`` group and dropout settings are used).
    dictionary, embed_tokens
        As for ``TransformerEncoderBase``.
    causal
        Mask future positions (the LM objective).
    input_token_dropout
        Probability of replacing an input token by a random one while training.
    """

    def __init__(
        self,
        cfg: TransformerConfig,
        dictionary,
        embed_tokens,
        *,
        causal: bool = False,
        input_token_dropout: float = 0.0,
    ):
        super().__init__(cfg, dictionary, embed_tokens)
        self.causal = causal
        self.input_token_dropout = float(input_token_dropout)
        self.nspecial = dictionary.nspecial
        # Random replacements come from the ordinary symbols: not <s>/<pad>/</s>/<unk>, not <mask>.
        mask = dictionary.indices.get("<mask>")
        self.n_ordinary = mask if mask is not None and mask == len(dictionary) - 1 else len(dictionary)

    def _drop_input_tokens(self, src_tokens: torch.Tensor) -> torch.Tensor:
        p = self.input_token_dropout
        if not self.training or p <= 0:
            return src_tokens
        ordinary = src_tokens.ge(self.nspecial) & src_tokens.lt(self.n_ordinary)
        replace = ordinary & (torch.rand(src_tokens.shape, device=src_tokens.device) < p)
        random = torch.randint(self.nspecial, self.n_ordinary, src_tokens.shape, device=src_tokens.device)
        return torch.where(replace, random, src_tokens)

    def forward(
        self,
        src_tokens,
        src_lengths: torch.Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: torch.Tensor | None = None,
        key_mask: dict | None = None,
    ):
        return self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings, key_mask=key_mask)

    def forward_scriptable(
        self,
        src_tokens,
        src_lengths: torch.Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: torch.Tensor | None = None,
        key_mask: dict | None = None,
    ):
        """As ``TransformerEncoderBase.forward_scriptable``; ``key_mask`` maps a 0-based
        block index to a boolean ``(B, T)`` tensor of key positions hidden at that block."""
        src_tokens = self._drop_input_tokens(src_tokens)
        padding = src_tokens.eq(self.padding_idx)
        has_pads = bool(padding.any())
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        if has_pads:
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # T x B x C
        T = x.size(0)
        # 1.0 above the diagonal: the layer turns non-zero entries into -1e8 *added* to the scores.
        # (A bool mask would be added as +1 on fairseq's own attention path, which per-head weights use.)
        future = torch.triu(torch.ones(T, T, dtype=x.dtype, device=x.device), diagonal=1) if self.causal else None
        states = [x] if return_all_hiddens else []
        for i, layer in enumerate(self.layers):
            pad_mask = padding
            if key_mask is not None and i in key_mask:
                pad_mask = padding | key_mask[i].to(torch.bool)
            out = layer(
                x, encoder_padding_mask=pad_mask if (has_pads or pad_mask is not padding) else None, attn_mask=future
            )
            x = out[0] if isinstance(out, tuple) else out
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],
            "encoder_padding_mask": [padding],
            "encoder_embedding": [encoder_embedding],
            "encoder_states": states,
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [lengths],
        }


def write_initial_encoder(path: str | Path, encoder: SharedEncoder) -> Path:
    """Save ``encoder``'s state dict as the common starting point of every objective."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.clone() for k, v in encoder.state_dict().items()}, path)
    return path


def load_initial_encoder(encoder: SharedEncoder, path: str | Path) -> None:
    """Load the common initial weights; every key and shape must match (strict)."""
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    wrong = [k for k in state if k in encoder.state_dict() and state[k].shape != encoder.state_dict()[k].shape]
    if missing or unexpected or wrong:
        raise ValueError(
            f"{path}: initial encoder does not fit this model (missing {missing}, unexpected "
            f"{unexpected}, wrong shape {wrong}); it was written for a different "
            "architecture or dictionary: delete it and train again"
        )
