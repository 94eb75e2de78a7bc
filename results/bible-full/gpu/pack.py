"""Helper for .gpu/train_all.sh (not part of the project): strip, verify and return the checkpoints.

python3 .gpu/pack.py CONFIG strip        every finished run's checkpoint_last.pt without its optimizer
                                         state -> $STAGE/<run>.checkpoint_last.pt, checked with fairseq's
                                         load_checkpoint_to_cpu / load_model_ensemble and the project's
                                         adapter (one forward pass)
python3 .gpu/pack.py CONFIG emit OUTDIR  train_small.tar.gz (everything small of the train directory) and
                                         the next not yet returned big files, within the device tool's
                                         limits (8 files, 16 MiB each, 63 MiB together here)

WORKDIR overrides the config's workdir; STAGE (default /tmp/stage) keeps what was stripped / returned.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

STAGE = Path(os.environ.get("STAGE", "/tmp/stage"))
MIB = 1 << 20
MAX_FILES, MAX_FILE, MAX_TOTAL = 8, 16 * MIB - 4096, 63 * MIB


def context(config_path: str):
    from evolution.config import load_config
    from pipelines.stages import Context

    wd = os.environ.get("WORKDIR")
    config = load_config(config_path, overrides={"workdir": str(Path(wd).resolve())} if wd else None)
    return Context(config=config, progress=False)


def strip(config_path: str) -> int:
    import torch

    from evolution.models import load_adapter
    from evolution.nets.compat import import_fairseq, trusted_checkpoints
    from pipelines.stages import TrainStage

    ctx = context(config_path)
    stage = TrainStage()
    paths = stage.paths(ctx)
    runs = ctx.config.train.runs(ctx.config.seed)
    STAGE.mkdir(parents=True, exist_ok=True)
    import_fairseq()
    from evolution.nets.objectives import register

    register()
    from fairseq import checkpoint_utils

    report = {}
    bad = 0
    for name, spec in runs.items():
        src = paths.checkpoint(name)
        dst = STAGE / f"{name}.checkpoint_last.pt"
        if dst.is_file() or not (paths.run_dir(name) / "done.json").is_file():
            continue
        t0 = time.perf_counter()
        state = torch.load(str(src), map_location="cpu", weights_only=False)
        state["last_optimizer_state"] = None
        tmp = dst.with_suffix(".partial")
        torch.save(state, str(tmp))
        info = {"original_bytes": src.stat().st_size, "stripped_bytes": tmp.stat().st_size,
                "num_updates": int(state["optimizer_history"][-1]["num_updates"])}
        try:
            data = str(paths.data(spec["objective"]))
            with trusted_checkpoints():
                st = checkpoint_utils.load_checkpoint_to_cpu(str(tmp), {"data": data})
                models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(tmp)],
                                                                                 arg_overrides={"data": data})
            info["fairseq_load"] = f"ok ({type(models[0]).__name__}, task {cfg.task._name})"
            del st, models
            model_cfg = next(m for m in ctx.config.models if (m.run_name if m.kind == "trained" else None) == name)
            mspec = stage.model_spec(ctx, model_cfg)
            mspec["path"] = str(tmp)
            adapter = load_adapter(mspec)
            tok = adapter.tokenize("In the beginning God created the heavens and the earth.")
            hidden, _ = adapter.forward([tok.ids])
            info["adapter_forward"] = f"ok {list(hidden.shape)} finite={bool(__import__('numpy').isfinite(hidden).all())}"
            os.replace(tmp, dst)
        except Exception as exc:  # keep going: report every run
            info["error"] = f"{type(exc).__name__}: {exc}"
            bad += 1
        info["seconds"] = round(time.perf_counter() - t0, 1)
        report[name] = info
        print(name, json.dumps(info), flush=True)
    old = json.loads((STAGE / "strip.json").read_text()) if (STAGE / "strip.json").is_file() else {}
    old.update(report)
    (STAGE / "strip.json").write_text(json.dumps(old, indent=1))
    return 1 if bad else 0


def _small_filter(root: Path):
    def keep(info: tarfile.TarInfo):
        rel = Path(info.name).relative_to(root.name) if info.name != root.name else Path(".")
        parts = rel.parts
        if parts and parts[0] == "text":
            return None
        if parts and parts[0] == "init" and rel.suffix in (".pt", ".partial"):
            return None
        if parts and parts[0] == "runs" and rel.suffix in (".pt", ".partial", ".tmp"):
            return None
        if parts and parts[0] == "spm" and len(parts) == 2 and rel.name.split(".")[0] in ("train", "valid", "test"):
            return None
        if parts and parts[0] == "bin" and rel.suffix in (".bin", ".idx"):
            return None
        return info
    return keep


def emit(config_path: str, out: Path) -> int:
    from pipelines.stages import TrainStage

    ctx = context(config_path)
    stage = TrainStage()
    paths = stage.paths(ctx)
    root = paths.root
    out.mkdir(parents=True, exist_ok=True)
    STAGE.mkdir(parents=True, exist_ok=True)
    runs = ctx.config.train.runs(ctx.config.seed)
    # timings of this device's runs
    timings = {"key": stage.key(ctx), "root": str(root), "runs": {}}
    for f in ("gpu_prepare.json",):
        if (root / f).is_file():
            timings["prepare"] = json.loads((root / f).read_text())
    for name in runs:
        f = paths.run_dir(name) / "gpu_timing.json"
        if f.is_file():
            timings["runs"][name] = json.loads(f.read_text())
    for f in ("parallel.json", "strip.json"):
        if (STAGE / f).is_file():
            timings[f.split(".")[0]] = json.loads((STAGE / f).read_text())
    (STAGE / "timings.json").write_text(json.dumps(timings, indent=1))
    # the small tar: always sent (it reflects the current state)
    with tarfile.open(out / "train_small.tar.gz", "w:gz") as tar:
        tar.add(root, arcname=root.name, filter=_small_filter(root))
        tar.add(STAGE / "timings.json", arcname=f"{root.name}/gpu_timings.json")
    used_files = 2  # the log and the small tar
    used = (out / "train_small.tar.gz").stat().st_size + 2 * MIB  # room for the log
    data_tar = STAGE / "train_data.tar.xz"  # built by the `data` mode
    objective = {n: s["objective"] for n, s in runs.items()}
    order = ([STAGE / f"{n}.checkpoint_last.pt" for n in runs if objective[n] != "mt"]
             + [STAGE / f"{n}.checkpoint_last.pt" for n in runs if objective[n] == "mt"]
             + sorted((root / "init").glob("encoder-seed*.pt")) + [data_tar])
    sent_file = STAGE / "sent.txt"
    sent = set(sent_file.read_text().split()) if sent_file.is_file() else set()
    now = []
    pending = []
    for p in order:
        if not p.is_file() or p.name in sent:
            if not p.is_file():
                pending.append(p.name)
            continue
        size = p.stat().st_size
        if size > MAX_FILE:
            print(f"emit: {p.name} is {size / MIB:.1f} MiB, over the per-file limit", flush=True)
            pending.append(p.name)
            continue
        if used_files + 1 > MAX_FILES or used + size > MAX_TOTAL:
            pending.append(p.name)
            continue
        shutil.copy(p, out / p.name)
        used_files += 1
        used += size
        now.append(p.name)
    with open(sent_file, "a") as fh:
        fh.write("".join(n + "\n" for n in now))
    left = [n for n in (p.name for p in order) if n not in sent and n not in now]
    print(json.dumps({"emitted": now, "emitted_mib": round(used / MIB, 1), "still_to_send": left}), flush=True)
    return 0


def data(config_path: str) -> int:
    """train_data.tar.xz: the regenerable data (SentencePiece encodings, binarised data)."""
    from pipelines.stages import TrainStage

    ctx = context(config_path)
    root = TrainStage().paths(ctx).root
    STAGE.mkdir(parents=True, exist_ok=True)
    data_tar = STAGE / "train_data.tar.xz"
    t0 = time.perf_counter()
    if (root / "prep.json").is_file() and not data_tar.is_file():
        tmp = STAGE / "train_data.partial"
        with tarfile.open(tmp, "w:xz", preset=6) as tar:
            for p in sorted(root.rglob("*")):
                rel = p.relative_to(root)
                if p.is_file() and ((rel.parts[0] == "spm" and p.name.split(".")[0] in ("train", "valid", "test"))
                                    or (rel.parts[0] == "bin" and p.suffix in (".bin", ".idx"))
                                    or rel.parts[0] == "text"):
                    tar.add(p, arcname=f"{root.name}/{rel}")
        os.replace(tmp, data_tar)
    print(f"data: {data_tar} {data_tar.stat().st_size / MIB:.1f} MiB in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    cfg, mode = sys.argv[1], sys.argv[2]
    if mode == "strip":
        raise SystemExit(strip(cfg))
    if mode == "data":
        raise SystemExit(data(cfg))
    if mode == "emit":
        raise SystemExit(emit(cfg, Path(sys.argv[3])))
    raise SystemExit(f"unknown mode {mode!r}")
