"""``train``: the models this project trains on the corpus."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from evolution.config.base import _Section

#: a training objective (Voita et al. 2019: MT, causal LM, masked LM)
Objective = Literal["mt", "lm", "mlm"]


def _every_objective() -> list[Objective]:
    return ["mt", "lm", "mlm"]


class ObjectiveBudget(_Section):
    """Training updates per objective (a fixed count, so that a run is reproducible;
    the defaults were measured to fit the budget in docs/training.md)."""

    mt: int = Field(500, ge=1)
    lm: int = Field(800, ge=1)
    mlm: int = Field(1300, ge=1)


class CheckpointSchedule(_Section):
    """Checkpoints kept during training, at log-spaced updates ``first``, ``first x factor``, ...
    below each run's total (the trajectory over training, ``docs/trajectory.md``; Raghu et al.
    (2017) tracked SVCCA over training the same way). The final model is the run itself."""

    first: int = Field(25, ge=1, description="the first kept update")
    factor: float = Field(2.0, gt=1, description="ratio of successive kept updates (2: one per doubling)")

    def updates(self, total: int) -> list[int]:
        """The kept updates of a run of ``total`` updates (ascending, each below ``total``)."""
        out: list[int] = []
        u = float(self.first)
        while round(u) < total:
            if not out or round(u) > out[-1]:
                out.append(int(round(u)))
            u *= self.factor
        return out


class TrainConfig(_Section):
    """Training MT, LM and MLM on the corpus with fairseq (Voita et al. 2019, sec. 2; docs/training.md).

    All three share one encoder class, the vocabulary (a joint SentencePiece
    BPE of ``vocab_size`` pieces trained on both sides of the training split)
    and the initial encoder weights of their seed. Runs are named ``mt``,
    ``lm``, ``mlm``; extra ``seeds`` add ``mt-seed1`` ...; ``token_dropout``
    adds ``mt-tokdrop`` ... trained with ``token_dropout_p`` random input
    token replacement (the paper's controls).
    """

    added_later = ("checkpoints",)

    objectives: list[Objective] = Field(default_factory=_every_objective, min_length=1)
    seeds: list[int] = Field(default_factory=list, description="extra seeds per objective (the 'init' baselines)")
    token_dropout: list[Literal["mt", "lm", "mlm"]] = Field(
        default_factory=list, description="objectives also trained with input token dropout"
    )
    token_dropout_p: float = Field(0.1, ge=0, lt=1)
    vocab_size: int = Field(8000, ge=16, description="joint SentencePiece BPE pieces")
    layers: int = Field(6, ge=1, description="encoder blocks (Voita et al.: 6)")
    embed_dim: int = Field(128, ge=8)
    ffn_dim: int = Field(512, ge=8)
    heads: int = Field(4, ge=1)
    normalize_before: bool = Field(False, description="pre-norm blocks (fairseq's Transformer default is post-norm)")
    dropout: float = Field(0.1, ge=0, lt=1)
    decoder_layers: int = Field(3, ge=1, description="MT decoder blocks")
    max_positions: int = Field(256, ge=8)
    max_tokens: int = Field(4096, ge=64, description="tokens per batch")
    lr: float = Field(1e-3, gt=0)
    warmup_updates: int = Field(400, ge=0)
    updates: Annotated[ObjectiveBudget, Field(default_factory=ObjectiveBudget)]
    save_interval_updates: int = Field(200, ge=1, description="checkpoint_last.pt every N updates (resume point)")
    checkpoints: CheckpointSchedule | None = Field(
        None, description="keep checkpoints at log-spaced updates for the trajectory over training (null: none)"
    )
    threads: int = Field(2, ge=1, description="torch threads per training process")
    beam: int = Field(4, ge=1, description="beam size for the MT test translation (BLEU/chrF)")

    @model_validator(mode="after")
    def _divisible(self) -> TrainConfig:
        if self.embed_dim % self.heads:
            raise ValueError(f"train.embed_dim ({self.embed_dim}) must be divisible by train.heads ({self.heads})")
        bad = [o for o in self.token_dropout if o not in self.objectives]
        if bad:
            raise ValueError(f"train.token_dropout names {bad}, which are not in train.objectives")
        return self

    def kept_updates(self, objective: str) -> list[int]:
        """The updates at which a run of ``objective`` keeps a checkpoint (none without ``checkpoints``)."""
        return self.checkpoints.updates(getattr(self.updates, objective)) if self.checkpoints is not None else []

    def runs(self, base_seed: int) -> dict[str, dict]:
        """Every training run: ``name -> {objective, seed, token_dropout}``."""
        out: dict[str, dict] = {}
        for objective in self.objectives:
            out[objective] = {"objective": objective, "seed": base_seed, "token_dropout": 0.0}
            for seed in self.seeds:
                if seed != base_seed:
                    out[f"{objective}-seed{seed}"] = {"objective": objective, "seed": seed, "token_dropout": 0.0}
            if objective in self.token_dropout:
                out[f"{objective}-tokdrop"] = {
                    "objective": objective,
                    "seed": base_seed,
                    "token_dropout": self.token_dropout_p,
                }
        return out
