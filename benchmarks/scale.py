"""Time and peak memory of each stage of a real run, at two corpus sizes.

    python benchmarks/scale.py CONFIG --sentences N1 N2 [--out DIR] [--train DIR]

Runs ``python -m pipelines.run`` stage by stage (corpus, train, extract,
metrics, report) on CONFIG with ``corpus.max_sentences`` set to each size,
each size in its own workdir under ``--out``, and samples the resident memory
of the whole process tree (the pipeline and its LocalCluster's worker
processes, summed) every 0.5 s. ``--train`` links an existing ``train``
directory into each workdir so that trained models are reused (the
analysed-sentence count is not part of the training key).

Prints, and writes to ``<out>/scale.json``: per size and stage the wall time
and the peak summed RSS, and the analysed token count. The question it
answers (issue 14): does the whole-corpus analysis fit in 24 GiB of
memory, and does peak memory stay flat as the analysed tokens grow? A summed
RSS overcounts pages shared between processes, so it is an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
STAGES = ("corpus", "train", "extract", "metrics", "report")


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of ``proc`` and all its descendants (0 for those gone meanwhile)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_stage(config: Path, stage: str, log: Path, *, interval: float = 0.5) -> dict:
    """One ``--stage`` run: wall seconds and peak summed RSS (GiB); raises on failure."""
    cmd = [sys.executable, "-m", "pipelines.run", str(config), "--stage", stage, "--no-progress"]
    t0, peak = time.perf_counter(), 0
    with log.open("a", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            peak = max(peak, tree_rss(ps))
            time.sleep(interval)
    if proc.returncode != 0:
        raise SystemExit(f"{stage} failed (exit {proc.returncode}); see {log}")
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_rss_gib": round(peak / 2**30, 2)}


def sized_config(config: Path, *, sentences: int, workdir: Path) -> Path:
    """A copy of ``config`` with ``corpus.max_sentences`` and ``workdir`` set, its relative
    paths made absolute (they are relative to the config's directory)."""
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    base = config.resolve().parent
    raw["workdir"] = str(workdir)
    corpus = raw["corpus"]
    for key in ("path", "sword_root", "target_path", "annotated"):
        value = corpus.get(key)
        if isinstance(value, str) and (base / value).exists():
            corpus[key] = str((base / value).resolve())
    for model in raw.get("models") or []:  # a model's files, too
        for key in ("path", "data", "sentencepiece"):
            value = model.get(key)
            if isinstance(value, str) and (base / value).exists():
                model[key] = str((base / value).resolve())
        if isinstance(model.get("checkpoints"), str):  # a series' glob
            model["checkpoints"] = str(base / model["checkpoints"])
    metrics = raw.get("metrics") or {}
    if metrics.get("reuse"):
        metrics["reuse"] = [str((base / r).resolve()) for r in metrics["reuse"]]
    corpus["max_sentences"] = sentences
    out = workdir / "scale.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return out


def analysed_tokens(workdir: Path) -> int | None:
    import zarr

    try:
        root = zarr.open_group(str(workdir / "reps.zarr"), mode="r", zarr_format=3)
        first = sorted(name for name, _ in root.groups())[0]
        return int(root[f"{first}/hidden"].shape[1])
    except Exception:  # noqa: BLE001 - no store: nothing extracted
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path)
    p.add_argument("--sentences", type=int, nargs="+", required=True, help="analysed sentences per size")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "scale")
    p.add_argument("--train", type=Path, help="an existing train directory to link into each workdir")
    args = p.parse_args()
    results = {}
    for n in args.sentences:
        workdir = (args.out / f"n{n}").resolve()
        config = sized_config(args.config, sentences=n, workdir=workdir)
        if args.train is not None and not (workdir / "train").exists():
            os.symlink(args.train.resolve(), workdir / "train")
        stages = {}
        for stage in STAGES:
            stages[stage] = run_stage(config, stage, workdir / "scale.log")
            print(
                f"{n} sentences  {stage:8s} {stages[stage]['seconds']:8.1f} s  "
                f"peak {stages[stage]['peak_rss_gib']:6.2f} GiB",
                flush=True,
            )
        results[n] = {"tokens_per_model": analysed_tokens(workdir), "stages": stages}
        print(f"{n} sentences: {results[n]['tokens_per_model']} tokens per model", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    if len(results) >= 2:
        a, b = (results[n] for n in args.sentences[:2])
        for stage in STAGES:
            ra, rb = a["stages"][stage]["peak_rss_gib"], b["stages"][stage]["peak_rss_gib"]
            print(
                f"{stage:8s} peak RSS x{rb / ra if ra else float('nan'):.2f} for x"
                f"{(b['tokens_per_model'] or 0) / (a['tokens_per_model'] or 1):.2f} tokens"
            )
    print(f"-> {args.out / 'scale.json'}")


if __name__ == "__main__":
    main()
