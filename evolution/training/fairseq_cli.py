"""fairseq's command-line tools with this project's compat patches and plugin.

``python -m evolution.training.fairseq_cli {preprocess,train,validate,generate} ARGS``
is ``fairseq-preprocess`` / ``fairseq-train`` / ... after
:func:`evolution.nets.compat.import_fairseq` (NumPy 2 patch) and
:func:`evolution.nets.objectives.register` (the three objectives), and
with full unpickling of the checkpoints this run itself writes (torch >= 2.6
defaults to ``weights_only``; fairseq resumes from ``checkpoint_last.pt``).

``init-encoder OUT TRAIN_ARGS`` builds the model that ``fairseq-train
TRAIN_ARGS`` would start from (seeded with its ``--seed``) and saves the state
dict of its shared encoder to ``OUT``: the common initial weights.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["command", "environment", "run", "main"]


def command(tool: str, args: list[str]) -> list[str]:
    """The argv that runs fairseq ``tool`` through this module in a fresh interpreter."""
    return [sys.executable, "-m", "evolution.training.fairseq_cli", tool, *args]


def environment(threads: int | None = None) -> dict:
    """This process's environment, with torch's thread count set when ``threads`` is given."""
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run(
    tool: str, args: list[str], *, threads: int | None = None, what: str | None = None
) -> subprocess.CompletedProcess:
    """Run ``tool`` to completion; a failure raises with the end of its stderr."""
    proc = subprocess.run(command(tool, args), capture_output=True, text=True, env=environment(threads))
    if proc.returncode != 0:
        raise RuntimeError(f"{what or 'fairseq-' + tool} failed:\n{proc.stderr[-3000:]}")
    return proc


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tools = ("preprocess", "train", "validate", "generate", "init-encoder")
    if not argv or argv[0] not in tools:
        print(f"usage: python -m evolution.training.fairseq_cli {{{','.join(tools)}}} ARGS", file=sys.stderr)
        return 2
    tool, rest = argv[0], argv[1:]
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # our own checkpoints (compat trap 2)
    from evolution.nets.compat import import_fairseq

    import_fairseq()
    from evolution.nets.objectives import register

    register()
    import importlib
    import logging

    if tool == "init-encoder":
        return _init_encoder(rest[0], rest[1:])

    logging.getLogger("fairseq").setLevel(logging.INFO)
    module = importlib.import_module(f"fairseq_cli.{tool}")
    sys.argv = [f"fairseq-{tool}", *rest]
    module.cli_main()
    return 0


def _init_encoder(out: str, train_args: list[str]) -> int:
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from evolution.nets.compat import quiet
    from evolution.nets.encoder import write_initial_encoder
    from evolution.nets.objectives import encoder_of

    with quiet():
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=train_args)
        cfg = convert_namespace_to_omegaconf(args)
        task = tasks.setup_task(cfg.task)
    if getattr(args, "init_encoder", None):
        raise SystemExit("init-encoder: the training arguments must not contain --init-encoder")
    torch.manual_seed(args.seed)
    model = task.build_model(cfg.model)
    write_initial_encoder(out, encoder_of(model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
