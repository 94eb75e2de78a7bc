"""Helper for .gpu/train_all.sh (not part of the project).

python3 .gpu/train_one.py CONFIG prepare      -> text copy, prepare_data, initial encoders (once)
python3 .gpu/train_one.py CONFIG runs         -> print the run names, one per line
python3 .gpu/train_one.py CONFIG key          -> print the train directory
python3 .gpu/train_one.py CONFIG train NAME   -> trainer.train_run for one run, as TrainStage.run calls it

WORKDIR in the environment overrides the config's workdir (local tests).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from evolution.config import load_config
from evolution.training import trainer
from pipelines.stages import Context, CorpusStage, TrainStage


def context(config_path: str) -> Context:
    wd = os.environ.get("WORKDIR")
    config = load_config(config_path, overrides={"workdir": str(Path(wd).resolve())} if wd else None)
    return Context(config=config, progress=False)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    config_path, mode = sys.argv[1], sys.argv[2]
    ctx = context(config_path)
    stage = TrainStage()
    cfg, languages = ctx.config.train, ctx.config.corpus.languages
    paths = stage.paths(ctx)
    runs = cfg.runs(ctx.config.seed)
    if mode == "runs":
        print("\n".join(runs))
        return 0
    if mode == "key":
        print(stage.directory(ctx))
        return 0
    if mode == "prepare":
        t0 = time.time()
        paths.root.mkdir(parents=True, exist_ok=True)
        if not paths.text.is_dir():
            shutil.copytree(CorpusStage().directory(ctx) / "text", paths.text)
        prep = trainer.prepare_data(paths, cfg)
        t1 = time.time()
        for seed in sorted({r["seed"] for r in runs.values()}):
            trainer.initial_encoder(paths, cfg, seed=seed, languages=languages)
        t2 = time.time()
        out = {"start": t0, "prepare_end": t1, "end": t2, "prepare_s": round(t1 - t0, 1),
               "init_s": round(t2 - t1, 1), "prep": prep}
        if not (paths.root / "gpu_prepare.json").is_file():  # keep the first call's timing
            (paths.root / "gpu_prepare.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
        print(json.dumps(out))
        return 0
    if mode == "train":
        name = sys.argv[3]
        start = time.time()
        result = trainer.train_run(paths, cfg, name, runs[name], languages=languages, progress=False)
        end = time.time()
        out = {"run": name, "start": start, "end": end, "wall_s": round(end - start, 1), "result": result}
        (paths.run_dir(name) / "gpu_timing.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
        print(json.dumps(out))
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    raise SystemExit(main())
