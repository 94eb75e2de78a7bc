"""Quality per minute of training on this machine: MT, LM and MLM trained under one wall-clock
budget with today's recipe (the ``train`` section of ``configs/from-scratch.yaml``) and with
candidate recipes, scored on the test books at a few points of the budget (issue 24, item 1).

    python benchmarks/training.py [--minutes 5] [--points 3] [--recipes today no-dropout prenorm-lr2e-3 lr2e-3]
    python benchmarks/training.py --config configs/bible-full-train.yaml --budget updates \
        --objectives lm --recipes prenorm-lr2e-3 --points 2 --work runs/bench-training-full --out results/training-full

* **Identical but for the objective.** A recipe changes the ``train`` section for all three
  objectives alike; each recipe gets its own vocabulary, binarised data and initial encoder
  (``evolution.training.trainer``, the pipeline's code), shared by its three runs.
* **The budget is training time.** fairseq's ``--stop-time-hours`` counts training time
  across resumes (``previous_training_time`` in the checkpoint), so a run stops at
  ``minutes * k / points`` for k = 1..points, is scored, and resumes. The x axis is that
  training time (fairseq's: with data loading, validation and checkpoint saves at each
  resume); the CPU time of the training processes (user + system, both torch threads) and
  their wall time are stored beside it.
* **Or the budget is the config's updates** (``--budget updates``): each objective trains for its
  ``train.updates`` and is scored at ``updates * k / points``: what a recipe gives at a longer
  run's budget (``configs/bible-full-train.yaml``), to set beside that run's own scores.
* **Vocabulary recipes** change what a perplexity is counted in (pieces): compare them by
  their ratio to their own unigram baseline (stored with every point), not by the raw number.
* **Scores** are the train stage's evaluation (``trainer.evaluate_runs``): sacrebleu BLEU and
  chrF of beam-4 translations of the 2,656 test verses (MT); fairseq perplexity on the test
  books (LM; MLM on its 15% masked positions), beside the unigram baseline.

Writes ``results/training/quality.json`` and ``results/training/quality.png`` (the curves in
docs/training.md). Resumable: a rerun continues from the last checkpoint of each run and keeps
the points already scored. Numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> changes to the ``train`` section, applied to every objective alike.
RECIPES: dict[str, dict] = {
    "today": {},
    "no-dropout": {"dropout": 0.0},  # an under-trained model gains nothing from dropout
    "prenorm-lr2e-3": {"normalize_before": True, "lr": 0.002},  # pre-norm tolerates a larger step (Xiong et al. 2020)
    "lr2e-3": {"lr": 0.002},
    "vocab4k": {"vocab_size": 4000},  # a cheaper output softmax
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _state(checkpoint: Path) -> tuple[int, float]:
    """(updates, fairseq's cumulative training seconds) of a checkpoint."""
    import torch

    state = torch.load(str(checkpoint), map_location="cpu", weights_only=False)
    return (
        int(state["optimizer_history"][-1]["num_updates"]),
        float(state["extra_state"].get("previous_training_time", 0.0)),
    )


def corpus_text(config: Path, work: Path) -> Path:
    """The corpus stage's ``text/`` directory for ``config`` (the pipeline's corpus stage, run once)."""
    found = sorted((work / "corpus").glob("*/text"))
    if len(found) > 1:
        raise SystemExit(f"{work / 'corpus'} holds {len(found)} corpora; delete it or pass another --work")
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.run",
                str(config),
                "--stage",
                "corpus",
                "--workdir",
                str(work),
                "--no-progress",
            ],
            check=True,
            cwd=ROOT,
        )
        found = sorted((work / "corpus").glob("*/text"))
    return found[0]


def run_recipe(
    name: str,
    changes: dict,
    *,
    config,
    text: Path,
    work: Path,
    minutes: float,
    points: int,
    threads: int,
    objectives: list[str],
    budget: str = "minutes",
) -> dict:
    """Train and score every objective of one recipe; returns ``{objective: [point, ...]}``.
    ``budget`` "minutes": ``minutes`` of training time per run; "updates": the config's
    ``train.updates`` of each objective."""
    from evolution.training import fairseq_cli, trainer

    cfg = config.train.model_copy(update={**changes, "threads": threads, "checkpoints": None})
    languages = config.corpus.languages
    paths = trainer.TrainingPaths(work / name, languages)
    settings = {
        "changes": changes,
        "minutes": minutes,
        "points": points,
        "threads": threads,
        "base": config.train.model_dump(mode="json", exclude={"checkpoints"}),
    }
    if budget != "minutes":  # recorded only when used: directories of the minutes budget stay valid
        settings["budget"] = budget
    recorded = paths.root / "settings.json"
    if recorded.is_file() and json.loads(recorded.read_text(encoding="utf-8")) != settings:
        raise SystemExit(
            f"{paths.root} was trained with other settings ({recorded}); its points would mix "
            f"them: delete that directory or pass another --work"
        )
    paths.root.mkdir(parents=True, exist_ok=True)
    recorded.write_text(json.dumps(settings, indent=1), encoding="utf-8")
    if not paths.text.is_dir():
        shutil.copytree(text, paths.text)
    trainer.prepare_data(paths, cfg)
    trainer.initial_encoder(paths, cfg, seed=config.seed, languages=languages)
    out: dict = {}
    for objective in objectives:
        spec = {"objective": objective, "seed": config.seed, "token_dropout": 0.0}
        run_dir = paths.run_dir(objective)
        run_dir.mkdir(parents=True, exist_ok=True)
        done, clock_file = run_dir / "points.json", run_dir / "clock.json"
        scored = json.loads(done.read_text(encoding="utf-8")) if done.is_file() else []
        # The process time of every segment, kept even when a segment's scoring was cut off (its
        # rerun then trains one more update, and the point still counts the whole segment's time).
        clock = (
            json.loads(clock_file.read_text(encoding="utf-8"))
            if clock_file.is_file()
            else {
                "cpu_minutes": scored[-1]["cpu_minutes"] if scored else 0.0,
                "process_minutes": scored[-1]["process_minutes"] if scored else 0.0,
            }
        )
        for k in range(len(scored) + 1, points + 1):
            if budget == "updates":
                total = getattr(cfg.updates, objective)
                args = trainer.run_args(
                    paths, cfg, objective, spec, languages=languages, updates=round(total * k / points)
                )
            else:
                stop = minutes * k / points
                args = trainer.run_args(paths, cfg, objective, spec, languages=languages, updates=10**7)
                args += ["--stop-time-hours", f"{stop / 60:.6f}"]
            t0, c0 = time.perf_counter(), _children_cpu()
            proc = fairseq_cli.run("train", args, threads=threads, what=f"training {name}/{objective}")
            wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
            with open(run_dir / "train.log", "a", encoding="utf-8") as log:
                log.write(proc.stdout + proc.stderr)
            clock = {
                "cpu_minutes": clock["cpu_minutes"] + cpu / 60,
                "process_minutes": clock["process_minutes"] + wall / 60,
            }
            clock_file.write_text(json.dumps(clock), encoding="utf-8")
            updates, seconds = _state(paths.checkpoint(objective))
            score = trainer.evaluate_runs(paths, cfg, {objective: spec}, languages=languages)
            point = {
                "minutes": round(seconds / 60, 3),
                "updates": updates,
                "cpu_minutes": round(clock["cpu_minutes"], 3),
                "process_minutes": round(clock["process_minutes"], 3),
                **{k2: v for k2, v in score[objective].items() if k2 != "seconds"},
                "unigram_ppl": round(score["unigram_ppl"], 2),
                "score_seconds": score[objective]["seconds"],
            }
            scored.append(point)
            done.write_text(json.dumps(scored, indent=1), encoding="utf-8")
            print(f"{name:16s} {objective:4s} {point}", flush=True)
        out[objective] = scored
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("mt", "bleu", "MT: test BLEU"),
        ("lm", "ppl", "LM: test perplexity"),
        ("mlm", "ppl", "MLM: test perplexity (masked tokens)"),
    ]
    panels = [p for p in panels if any(runs.get(p[0]) for runs in result["recipes"].values())]  # trained ones
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.8), squeeze=False)
    axes = axes[0]
    for ax, (objective, key, title) in zip(axes, panels, strict=True):
        baseline = None
        for name, runs in result["recipes"].items():
            pts = runs.get(objective, [])
            if pts:
                ax.plot([p["minutes"] for p in pts], [p[key] for p in pts], "o-", label=name)
                if key == "ppl":
                    baseline = pts[0]["unigram_ppl"]
        if baseline is not None:
            ax.axhline(baseline, color="grey", ls="--", lw=1, label="unigram baseline")
            ax.legend(fontsize=8)
        ax.set_xlim(left=0)
        ax.set_title(title)
        ax.set_xlabel(f"training minutes ({result['threads']} torch threads)")
        if key == "ppl":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    budget = (
        f"{result['minutes']:g} training minutes per run"
        if result.get("budget", "minutes") == "minutes"
        else "each objective's updates of " + result["config"]
    )
    title = f"{budget}, scored at {result['points']} points ({result['threads']} torch threads)"
    fig.suptitle("\n".join(textwrap.wrap(title, 45 * len(panels))), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from evolution.config import load_config
    from evolution.provenance import versions

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "from-scratch.yaml")
    p.add_argument("--minutes", type=float, default=5.0, help="training minutes per run")
    p.add_argument(
        "--budget",
        choices=["minutes", "updates"],
        default="minutes",
        help="train each run for --minutes, or for the config's train.updates of its objective",
    )
    p.add_argument("--points", type=int, default=3, help="scored points per run, evenly spaced in the budget")
    p.add_argument(
        "--recipes", nargs="+", default=["today", "no-dropout", "prenorm-lr2e-3", "lr2e-3"], choices=sorted(RECIPES)
    )
    p.add_argument("--objectives", nargs="+", default=["mt", "lm", "mlm"], choices=["mt", "lm", "mlm"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-training")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "training")
    p.add_argument("--replot", action="store_true", help="redraw quality.png from quality.json and stop")
    args = p.parse_args(argv)
    if args.replot:
        plot(json.loads((args.out / "quality.json").read_text(encoding="utf-8")), args.out / "quality.png")
        return 0
    config = load_config(args.config)
    if config.train is None:
        raise SystemExit(f"{args.config} has no train section; pass --config configs/from-scratch.yaml")
    args.work.mkdir(parents=True, exist_ok=True)
    text = corpus_text(args.config, args.work)
    minutes = args.minutes if args.budget == "minutes" else None
    result = {
        "config": str(args.config.resolve().relative_to(ROOT)),
        "budget": args.budget,
        "minutes": minutes,
        "points": args.points,
        "threads": args.threads,
        "base": config.train.model_dump(mode="json", exclude={"checkpoints"}),
        "changes": {n: RECIPES[n] for n in args.recipes},
        "recipes": {},
        "versions": versions(),
    }
    for name in args.recipes:
        result["recipes"][name] = run_recipe(
            name,
            RECIPES[name],
            config=config,
            text=text,
            work=args.work,
            minutes=minutes,
            points=args.points,
            threads=args.threads,
            objectives=args.objectives,
            budget=args.budget,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot(result, args.out / "quality.png")
    print(f"wrote {args.out / 'quality.json'} and quality.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
