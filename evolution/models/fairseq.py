"""fairseq checkpoints of the ``translation``, ``language_modeling`` and
``masked_lm`` tasks (and of this project's plugin, which registers the same
three objectives on one encoder class).

Model inputs follow what each task feeds in training:

=========  ======================  ====================
objective  model input             analysed stack
=========  ======================  ====================
mt         ``x1..xn </s>``         encoder
lm         ``</s> x1..xn``         decoder (causal)
mlm        ``<s> x1..xn </s>``     sentence encoder
=========  ======================  ====================

(fairseq's language-modelling data start every sentence with ``</s>`` as
beginning-of-sentence unless ``--add-bos-token`` was used, in which case
``<s>``.) Hidden states are captured with hooks: layer 0 is the input of the
first block (embeddings, positions, embedding layer norm if any), layer ``i``
the output of block ``i``; a final encoder layer norm of pre-norm models is
*not* applied, so every layer is a block output.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evolution.models.base import (
    Adapter,
    FairseqLayoutHeads,
    ModelLoadError,
    Tokenized,
    apostrophe_for,
    is_objective,
    word_ids_from_pieces,
)
from evolution.nets.compat import capture_attention, enable_head_weights, import_fairseq, quiet, trusted_checkpoints

logger = logging.getLogger(__name__)

__all__ = ["FairseqAdapter"]

_TASK_OBJECTIVE = {"translation": "mt", "language_modeling": "lm", "masked_lm": "mlm"}


class FairseqAdapter(FairseqLayoutHeads, Adapter):
    """Adapter for one fairseq checkpoint file.

    Parameters
    ----------
    path
        The checkpoint (``checkpoint_best.pt``).
    data
        Directory with the dictionary the model was trained with.
    sentencepiece
        Optional SentencePiece model applied to raw text; without it, text is
        taken as already segmented and split on spaces.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        data: str | Path,
        sentencepiece: str | Path | None = None,
        name: str | None = None,
        objective: str | None = None,
        device: str | None = None,
    ):
        from evolution.models.device import resolve_device

        self.device = resolve_device(device)
        import_fairseq()
        from evolution.nets.objectives import register

        register()  # this project's evolution_mt / evolution_lm / evolution_mlm
        self.path = Path(path)
        self.data = Path(data)
        self.name = name or self.path.stem
        self._spm = None
        if sentencepiece is not None:
            import sentencepiece as spm

            self._spm = spm.SentencePieceProcessor(model_file=str(sentencepiece))
        self._load()
        task_name = self.cfg.task._name
        objective = objective or getattr(self._model, "objective", None) or _TASK_OBJECTIVE.get(task_name)
        if not is_objective(objective):
            raise ModelLoadError(
                f"{self.path}: fairseq task {task_name!r} is not one of "
                f"{sorted(_TASK_OBJECTIVE)}; set models[].objective to mt, lm or mlm"
            )
        self.objective = objective
        d = self.dictionary
        if self.objective == "mt":
            self.prefix, self.suffix = [], [d.eos()]
        elif self.objective == "lm":
            self.prefix = [d.bos() if getattr(self.cfg.task, "add_bos_token", False) else d.eos()]
            self.suffix = []
        else:
            self.prefix, self.suffix = [d.bos()], [d.eos()]
        self.pad_id = d.pad()
        if self.objective == "mlm" and "<mask>" in d.indices:
            self.mask_id = d.index("<mask>")
            self.ordinary_ids = (d.nspecial, self.mask_id if self.mask_id == len(d) - 1 else len(d))
        self.special_ids = frozenset(range(d.nspecial)) | ({d.index("<mask>")} if "<mask>" in d.indices else set())
        self.apostrophe = apostrophe_for(d.indices) if self._spm is not None else None
        layers = self._layers
        self.num_layers = len(layers)
        self.num_heads = layers[0].self_attn.num_heads
        self.d_model = layers[0].self_attn.embed_dim
        self.max_positions = int(self._stack.max_positions())

    def _load(self) -> None:
        from fairseq import checkpoint_utils, tasks

        if not self.path.is_file():
            raise ModelLoadError(f"fairseq checkpoint {self.path} does not exist")
        try:
            with trusted_checkpoints(), quiet():
                state = checkpoint_utils.load_checkpoint_to_cpu(str(self.path), {"data": str(self.data)})
        except Exception as exc:  # torch raises many types for a non-checkpoint file
            raise ModelLoadError(
                f"{self.path} is not a fairseq checkpoint ({type(exc).__name__}: {exc}); "
                "point models[].path at a checkpoint_*.pt written by fairseq-train"
            ) from exc
        if "cfg" not in state or state["cfg"] is None or "model" not in state:
            raise ModelLoadError(f"{self.path} has no fairseq config/model; it is not a fairseq-train checkpoint")
        self.cfg = state["cfg"]
        try:
            with quiet():
                self._task = tasks.setup_task(self.cfg.task)
        except FileNotFoundError as exc:
            raise ModelLoadError(
                f"{self.data}: the dictionary for {self.path.name} is missing ({exc}); "
                "models[].data must be the fairseq data directory used in training"
            ) from exc
        model = self._task.build_model(self.cfg.model)
        model.load_state_dict(state["model"], strict=True, model_cfg=self.cfg.model)
        enable_head_weights(model)
        self._model = model.eval().to(self.device)

    @property
    def dictionary(self):
        return self._task.source_dictionary

    @property
    def _stack(self):
        """The module whose blocks are analysed."""
        m = self._model
        if hasattr(m, "shared_encoder"):  # the plugin's models: one encoder class for all objectives
            return m.shared_encoder
        if self.objective == "mt":
            return m.encoder
        if self.objective == "lm":
            return m.decoder
        return m.encoder.sentence_encoder if hasattr(m.encoder, "sentence_encoder") else m.encoder

    @property
    def _layers(self):
        return list(self._stack.layers)

    @property
    def supports_key_masking(self) -> bool:
        return hasattr(self._model, "shared_encoder")

    def forward_masked_keys(self, inputs: Sequence[Sequence[int]], *, masked: Sequence[tuple[int, int]]) -> np.ndarray:
        import torch

        if not self.supports_key_masking:
            return super().forward_masked_keys(inputs, masked=masked)
        ids, _, _ = self._pad(inputs)
        key_mask: dict[int, torch.Tensor] = {}
        for b, (block, position) in enumerate(masked):
            key_mask.setdefault(block, torch.zeros(ids.shape, dtype=torch.bool, device=ids.device))[b, position] = True
        return self.forward(inputs, key_mask=key_mask)[0]

    def masked_key_states(
        self, inputs: Sequence[int], *, base: np.ndarray, masked: Sequence[tuple[int, int]]
    ) -> np.ndarray:
        """One block per row, from the unmasked input states of that block (``base``): the
        stack's own loop (:class:`~evolution.nets.encoder.SharedEncoder`) below the block gives
        those states unchanged, so running it again is not needed."""
        import torch

        if not self.supports_key_masking:
            return super().masked_key_states(inputs, base=base, masked=masked)
        stack, t = self._stack, len(inputs)
        out = np.empty((len(masked), t, base.shape[-1]), dtype=np.float32)
        future = torch.triu(torch.ones(t, t, device=self.device), diagonal=1) if stack.causal else None
        with torch.inference_mode():
            for block in sorted({b for b, _ in masked}):
                rows = [r for r, (b, _) in enumerate(masked) if b == block]
                keys = torch.zeros((len(rows), t), dtype=torch.bool, device=self.device)
                for k, r in enumerate(rows):
                    keys[k, masked[r][1]] = True
                x = torch.as_tensor(base[block], device=self.device)[:, None, :].expand(t, len(rows), -1)
                y = stack.layers[block](x.contiguous(), encoder_padding_mask=keys, attn_mask=future)
                y = y[0] if isinstance(y, tuple) else y
                out[rows] = y.transpose(0, 1).float().cpu().numpy()
        return out

    def _split(self, sentence: str) -> list[str]:
        """SentencePiece pieces of the normalised sentence (whitespace words without a model)."""
        if self._spm is None:
            return sentence.split()
        return list(self._spm.encode(self.normalised(sentence), out_type=str))

    def tokenize(self, sentence: str) -> Tokenized:
        pieces = self._split(sentence)
        ids = [self.dictionary.index(p) for p in pieces]
        return Tokenized(ids=ids, pieces=list(pieces), word_ids=word_ids_from_pieces(pieces))

    def forward(
        self, inputs: Sequence[Sequence[int]], *, attention: bool = False, key_mask: dict | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        hidden, att, _ = self._run(inputs, attention=attention, norms=False, key_mask=key_mask)
        return hidden, att

    supports_norms = True

    def forward_norms(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        return self._run(inputs, attention=True, norms=True, key_mask=None)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.dictionary[int(i)] for i in ids]

    @property
    def unk_id(self) -> int | None:
        return int(self.dictionary.unk())

    def forward_qk(self, inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        import torch

        layers = self._layers
        qk: list[tuple] = []

        def capture(module, args, kwargs):
            query = kwargs["query"] if "query" in kwargs else args[0]
            key = kwargs["key"] if "key" in kwargs else args[1]
            t, b, d = query.shape
            h = module.num_heads
            q = module.q_proj(query).view(t, b, h, d // h).permute(1, 2, 0, 3)  # (B, H, T, dh), unscaled
            k = module.k_proj(key).view(key.shape[0], b, h, d // h).permute(1, 2, 0, 3)
            qk.append((q, k))

        with contextlib.ExitStack() as ctx, torch.inference_mode():
            for layer in layers:
                ctx.callback(layer.self_attn.register_forward_pre_hook(capture, with_kwargs=True).remove)
            self._run(inputs, attention=False, norms=False, key_mask=None)
        return (
            torch.stack([q for q, _ in qk]).float().cpu().numpy(),
            torch.stack([k for _, k in qk]).float().cpu().numpy(),
        )

    def _encoder_layers(self) -> list:
        return list(self._layers)

    def _decoder_layers(self) -> list:
        return list(self._model.decoder.layers)

    def logits(self, inputs: Sequence[Sequence[int]], decoder_inputs: Sequence[Sequence[int]] | None = None):
        """Output logits ``(B, T, V)`` as a torch tensor with autograd on (the training objective's
        output: next token for the LM, every position for the MLM, the target positions of
        ``decoder_inputs`` for MT); the model stays in eval mode (no dropout)."""
        import torch

        ids, _, lengths = self._pad(inputs)
        if self.objective != "mt":
            return self._model(ids)[0]
        if decoder_inputs is None:
            raise ValueError("a translation model's logits need decoder_inputs (build_decoder_input)")
        tgt = torch.full(
            (len(decoder_inputs), max(len(t) for t in decoder_inputs)),
            self._task.target_dictionary.pad(),
            dtype=torch.long,
        )
        for b, t in enumerate(decoder_inputs):
            tgt[b, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        return self._model(
            ids, src_lengths=torch.as_tensor(lengths, device=ids.device), prev_output_tokens=tgt.to(ids.device)
        )[0]

    @property
    def supports_decoder(self) -> bool:
        layers = getattr(getattr(self._model, "decoder", None), "layers", None)
        if self.objective != "mt" or not layers:
            return False
        return getattr(layers[0], "encoder_attn", None) is not None

    @property
    def max_target_tokens(self) -> int:
        """The longest target the decoder accepts after its ``</s>`` start symbol."""
        return int(self._model.decoder.max_positions()) - 1

    def tokenize_target(self, sentence: str) -> Tokenized:
        """Target pieces (the same SentencePiece model: this project's vocabulary is joint)
        mapped through the task's target dictionary."""
        pieces = self._split(sentence)
        d = self._task.target_dictionary
        return Tokenized(ids=[d.index(p) for p in pieces], pieces=list(pieces), word_ids=word_ids_from_pieces(pieces))

    def build_decoder_input(self, ids: Sequence[int]) -> list[int]:
        """Target content ids -> the teacher-forced decoder input ``</s> y1..ym`` (fairseq's
        ``prev_output_tokens``: the output at position i predicts y_{i+1}, the last one ``</s>``)."""
        return [self._task.target_dictionary.eos(), *ids]

    def translate(
        self, sources: Sequence[Sequence[int]], *, max_len_a: float = 0.0, max_len_b: int = 200
    ) -> list[list[int]]:
        """Greedy translations (target ids without ``</s>``) of model inputs ``sources``: fairseq's
        ``SequenceGenerator`` with beam 1."""
        import torch
        from fairseq.sequence_generator import SequenceGenerator

        if not self.supports_decoder:
            raise ValueError(f"{self.name}: only a translation model translates")
        ids, _, lengths = self._pad(sources)
        generator = SequenceGenerator(
            [self._model], self._task.target_dictionary, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b
        )
        sample = {"net_input": {"src_tokens": ids, "src_lengths": torch.as_tensor(lengths, device=ids.device)}}
        with torch.inference_mode():
            hyps = generator.generate([self._model], sample)
        return [h[0]["tokens"].tolist()[:-1] for h in hyps]

    def forward_decoder(
        self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        import torch

        if not self.supports_decoder:
            return super().forward_decoder(sources, targets)
        src, _, src_lengths = self._pad(sources)
        tgt = torch.full(
            (len(targets), max(len(t) for t in targets)), self._task.target_dictionary.pad(), dtype=torch.long
        )
        for b, t in enumerate(targets):
            tgt[b, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        tgt = tgt.to(src.device)
        layers = list(self._model.decoder.layers)
        with contextlib.ExitStack() as ctx, torch.inference_mode():
            own = ctx.enter_context(capture_attention([layer.self_attn for layer in layers]))
            cross = ctx.enter_context(capture_attention([layer.encoder_attn for layer in layers]))
            encoder_out = self._model.encoder(src, src_lengths=torch.as_tensor(src_lengths, device=src.device))
            self._model.decoder(tgt, encoder_out=encoder_out)
        return torch.stack(own).float().cpu().numpy(), torch.stack(cross).float().cpu().numpy()

    def _run(self, inputs, *, attention: bool, norms: bool, key_mask: dict | None):
        import torch

        from evolution.models.base import attention_norms

        ids, _, lengths = self._pad(inputs)
        layers = self._layers
        states: list[torch.Tensor] = []
        values: list[torch.Tensor] = []  # per layer, the self-attention's value input (T, B, d)

        def first_input(module, args, kwargs):
            states.append(args[0] if args else kwargs["x"])

        def block_output(module, args, output):
            states.append(output[0] if isinstance(output, tuple) else output)

        def value_input(module, args, kwargs):
            values.append(kwargs["value"] if "value" in kwargs else args[2])

        with contextlib.ExitStack() as ctx, torch.inference_mode():
            handles = [layers[0].register_forward_pre_hook(first_input, with_kwargs=True)]
            handles += [layer.register_forward_hook(block_output) for layer in layers]
            if norms:
                handles += [
                    layer.self_attn.register_forward_pre_hook(value_input, with_kwargs=True) for layer in layers
                ]
            for h in handles:
                ctx.callback(h.remove)
            captured: list = (
                ctx.enter_context(capture_attention([layer.self_attn for layer in layers])) if attention else []
            )
            stack = self._stack
            if hasattr(self._model, "shared_encoder"):
                stack(ids, key_mask=key_mask)  # causal for the LM by construction
            elif self.objective == "mt":
                stack(ids, src_lengths=torch.as_tensor(lengths, device=ids.device))
            elif self.objective == "lm":
                stack.extract_features(ids, encoder_out=None)
            else:
                stack(ids)
            out = {}
            if norms:
                per_layer = [
                    attention_norms(alpha, _transformed_values(layer.self_attn, value))
                    for layer, alpha, value in zip(layers, captured, values, strict=True)
                ]
                out = {k: torch.stack([p[k] for p in per_layer]).cpu().numpy() for k in per_layer[0]}
        hidden = torch.stack([s.transpose(0, 1) for s in states]).float().cpu().numpy()  # (L+1, B, T, d)
        att = torch.stack(captured).float().cpu().numpy() if attention else None
        return hidden, att, out


def _transformed_values(attn, value):
    """f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h of a fairseq ``MultiheadAttention``: (B, H, T, d)
    from its value input ``value`` (T, B, d)."""
    import torch

    t, b, d = value.shape
    h = attn.num_heads
    v = attn.v_proj(value).view(t, b, h, d // h)  # value bias included
    w_o = attn.out_proj.weight.view(d, h, d // h)  # out_proj(z) = z W_O^T + b_O; column block h is head h
    return torch.einsum("tbhe,dhe->bhtd", v, w_o)
