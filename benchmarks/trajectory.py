"""The cost of the trajectory over training: the time one kept checkpoint (or one step of
checkpoint series) adds, as a ratio against one pass over the final models (their extraction and
metrics stage).

    python benchmarks/trajectory.py [CONFIG] [--train DIR] [--sentences N] [--out DIR]

Runs ``python -m pipelines.run`` stage by stage on CONFIG (default
``configs/from-scratch.yaml``, which keeps checkpoints and analyses them) in a fresh workdir
under ``--out``, with the train directory ``--train`` linked in (a run of the same config
that trained with ``train.checkpoints``: nothing is trained here), so that nothing but the
training is cached. The final pass is the ``extract`` and ``metrics`` stages (the final
models, with the config's bootstrap intervals); each checkpoint's cost is the time the
``trajectory`` stage logs for it (extraction of that update's models and their analyses
without intervals, plus the distance of each layer to the final model); the stage's own
wall time adds the final collection into ``trajectory.zarr``. Read the ratios: the machine
sets the seconds. Writes ``<out>/full/trajectory.json`` (``<out>/n<N>/`` with ``--sentences N``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import run_stage, sized_config  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = re.compile(r"trajectory: (?:update|step) (\d+) \(([^)]*)\) in ([0-9.]+) s")


def snapshot_seconds(log: Path) -> dict[int, dict]:
    """``update -> {models, seconds}`` from the trajectory stage's log lines (a later line for the same update wins)."""
    out = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        m = SNAPSHOT.search(line)
        if m:
            out[int(m.group(1))] = {"models": m.group(2).split(", "), "seconds": float(m.group(3))}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path, nargs="?", default=REPO / "configs" / "from-scratch.yaml")
    p.add_argument(
        "--train",
        type=Path,
        help="the train directory of a run of CONFIG (<workdir>/train), with its kept checkpoints "
        "(a config whose trajectory is over checkpoint series needs none)",
    )
    p.add_argument("--sentences", type=int, help="analyse only the first N sentences (default: the config's)")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench-trajectory")
    args = p.parse_args(argv)
    train = args.train.resolve() if args.train is not None else None
    if train is not None and not train.is_dir():
        raise SystemExit(
            f"--train {train}: no such directory; run `python -m pipelines.run {args.config} "
            "--stage train` first (with train.checkpoints set)"
        )
    workdir = (args.out / (f"n{args.sentences}" if args.sentences else "full")).resolve()
    if (workdir / "metrics.zarr").exists():
        raise SystemExit(f"{workdir} holds an earlier measurement (its metrics are cached); remove it first")
    config = sized_config(args.config, sentences=args.sentences, workdir=workdir)  # None: every sentence
    if train is not None and not (workdir / "train").exists():
        os.symlink(train, workdir / "train")
    log = workdir / "bench.log"
    stages = {}
    for stage in ("corpus", *(("train",) if train is not None else ()), "extract", "metrics", "trajectory"):
        stages[stage] = run_stage(config, stage, log)
        print(
            f"{stage:10s} {stages[stage]['seconds']:8.1f} s  peak {stages[stage]['peak_rss_gib']:6.2f} GiB", flush=True
        )
    final = stages["extract"]["seconds"] + stages["metrics"]["seconds"]
    snapshots = snapshot_seconds(log)
    if not snapshots:
        raise SystemExit(
            f"no trajectory snapshot was logged in {log}: does {args.config} set metrics.trajectory, "
            "and train.checkpoints or a checkpoint series?"
        )
    widest = max(len(s["models"]) for s in snapshots.values())  # a checkpoint of every objective
    full = [s["seconds"] for s in snapshots.values() if len(s["models"]) == widest]
    result = {
        "config": str(args.config),
        "sentences": args.sentences,
        "stages": stages,
        "final_pass_seconds": round(final, 1),
        "snapshots": snapshots,
        "per_checkpoint_ratio": round(sum(full) / len(full) / final, 3),
        "trajectory_ratio": round(stages["trajectory"]["seconds"] / final, 3),
    }
    for update, s in sorted(snapshots.items()):
        print(
            f"step {update:6d} ({', '.join(s['models'])}): {s['seconds']:7.1f} s = "
            f"{s['seconds'] / final:.3f} x the final pass ({final:.1f} s)"
        )
    print(
        f"one step of every series: {result['per_checkpoint_ratio']:.3f} x the final pass; "
        f"the whole trajectory stage ({len(snapshots)} checkpoints): {result['trajectory_ratio']:.2f} x"
    )
    (workdir / "trajectory.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"-> {workdir / 'trajectory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
