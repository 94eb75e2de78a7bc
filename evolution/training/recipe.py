"""The ``fairseq-train`` arguments of every run, from the ``train`` config section.

One function builds them all so that what the objectives share is visibly
shared: :func:`encoder_args` is identical for MT, LM and MLM; only the task,
criterion and (for MT) decoder arguments differ.
"""

from __future__ import annotations

from pathlib import Path

from evolution.config import TrainConfig
from evolution.nets.compat import exact_batching_args

__all__ = ["encoder_args", "data_args", "model_args", "task_args", "optimisation_args", "train_args"]


def encoder_args(cfg: TrainConfig) -> list[str]:
    """The shared encoder: identical for every objective."""
    args = [
        "--encoder-layers",
        str(cfg.layers),
        "--encoder-embed-dim",
        str(cfg.embed_dim),
        "--encoder-ffn-embed-dim",
        str(cfg.ffn_dim),
        "--encoder-attention-heads",
        str(cfg.heads),
        "--dropout",
        str(cfg.dropout),
        "--max-source-positions",
        str(cfg.max_positions),
    ]
    if cfg.normalize_before:
        args.append("--encoder-normalize-before")
    return args


def data_args(cfg: TrainConfig, objective: str, *, data: Path, languages: tuple[str, str]) -> list[str]:
    """Data and task of one objective: what ``fairseq-validate`` needs to read the test split too."""
    if objective == "mt":
        src, tgt = languages
        return [str(data), "--task", "translation", "--source-lang", src, "--target-lang", tgt]
    # One sentence per sample (break mode eos), as MT sees them; LM input </s> x1..xn,
    # MLM input <s> x1..xn </s>.
    block = ["--sample-break-mode", "eos", "--tokens-per-sample", str(cfg.max_positions)]
    if objective == "lm":
        return [str(data), "--task", "language_modeling", *block]
    if objective == "mlm":
        return [str(data), "--task", "masked_lm", *block]
    raise ValueError(f"unknown objective {objective!r}; use mt, lm or mlm")


def model_args(cfg: TrainConfig, objective: str) -> list[str]:
    """Model (besides the shared encoder), training masking and criterion of one objective."""
    if objective == "mt":
        return [
            "--arch",
            "evolution_mt",
            "--share-all-embeddings",
            "--decoder-layers",
            str(cfg.decoder_layers),
            "--decoder-embed-dim",
            str(cfg.embed_dim),
            "--decoder-ffn-embed-dim",
            str(cfg.ffn_dim),
            "--decoder-attention-heads",
            str(cfg.heads),
            "--max-target-positions",
            str(cfg.max_positions),
            *(["--decoder-normalize-before"] if cfg.normalize_before else []),
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
        ]
    if objective == "lm":
        return ["--arch", "evolution_lm", "--criterion", "cross_entropy"]
    if objective == "mlm":  # fairseq's 15% / 80-10-10 masking
        return [
            "--arch",
            "evolution_mlm",
            "--mask-prob",
            "0.15",
            "--leave-unmasked-prob",
            "0.1",
            "--random-token-prob",
            "0.1",
            "--criterion",
            "masked_lm",
        ]
    raise ValueError(f"unknown objective {objective!r}; use mt, lm or mlm")


def task_args(cfg: TrainConfig, objective: str, *, data: Path, languages: tuple[str, str]) -> list[str]:
    """Data, task, model and criterion of one objective (Voita et al. 2019, sec. 2; docs/training.md)."""
    return [*data_args(cfg, objective, data=data, languages=languages), *model_args(cfg, objective)]


def optimisation_args(cfg: TrainConfig, *, updates: int, seed: int, save_dir: Path) -> list[str]:
    """Adam with inverse-sqrt warm-up (Vaswani et al. 2017), a fixed number of updates."""
    return [
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        str(cfg.lr),
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(cfg.warmup_updates),
        "--warmup-init-lr",
        "1e-07",
        "--max-tokens",
        str(cfg.max_tokens),
        "--max-update",
        str(updates),
        "--seed",
        str(seed),
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--save-interval-updates",
        str(cfg.save_interval_updates),
        "--keep-interval-updates",
        "1",
        "--log-format",
        "json",
        "--log-interval",
        "10",
        "--num-workers",
        "0",
        *exact_batching_args(),
    ]


def train_args(
    cfg: TrainConfig,
    *,
    objective: str,
    data: Path,
    languages: tuple[str, str],
    updates: int,
    seed: int,
    save_dir: Path,
    init_encoder: Path | None,
    token_dropout: float,
    cpu: bool,
) -> list[str]:
    """Everything ``fairseq-train`` needs for one run."""
    args = [
        *task_args(cfg, objective, data=data, languages=languages),
        *encoder_args(cfg),
        *optimisation_args(cfg, updates=updates, seed=seed, save_dir=save_dir),
    ]
    if init_encoder is not None:
        args += ["--init-encoder", str(init_encoder)]
    if token_dropout:
        args += ["--input-token-dropout", str(token_dropout)]
    if cpu:
        args.append("--cpu")
    return args
