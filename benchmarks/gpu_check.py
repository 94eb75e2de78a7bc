"""The checks that need a GPU, as one script of at most 8 minutes (``make gpu-check``).

On a machine where torch sees a CUDA device it runs, each step under its own time limit:

1. ``tests/test_device.py``: models and the metrics' products (``metrics.device``) give the
   CPU's numbers on the GPU, within the tolerances that file states;
2. ``benchmarks/extract.py --device cuda``: the extraction task graph against a bare forward
   loop on the same GPU (throughput ratio);
3. ``configs/minilm-paper.yaml`` (MiniLM-L6 on every English verse, every representation
   metric with its intervals) with the models and the metrics on the GPU
   (``extract.device`` and ``metrics.device``: cuda): seconds per stage.

and writes what it measured to ``gpu-check.json`` in ``results/gpu/`` (device, each step's seconds,
exit status and the last lines it printed). Without a GPU it says so and exits with 2.

    python benchmarks/gpu_check.py [--budget 480] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def step(name: str, command: list[str], *, limit: float) -> dict:
    print(f"== {name}: {' '.join(command)} (at most {limit:.0f} s)", flush=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, limit))
        status, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, out = (
            "timeout",
            (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace"),
        )
    seconds = time.perf_counter() - t0
    tail = out.strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    return {"command": " ".join(command), "status": status, "seconds": round(seconds, 1), "tail": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=480, help="seconds for all steps together")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu" / "gpu-check.json")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible to torch here (a CPU build or no GPU): nothing to check")
        return 2
    start = time.perf_counter()
    left = lambda: args.budget - (time.perf_counter() - start)  # noqa: E731
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "steps": {},
    }
    py = sys.executable
    record["steps"]["tests"] = step(
        "device tests", [py, "-m", "pytest", "-q", "tests/test_device.py"], limit=min(120, left())
    )
    record["steps"]["extract"] = step(
        "extraction against a bare GPU loop",
        [py, "benchmarks/extract.py", "--device", "cuda", "--repeat", "1"],
        limit=min(120, left()),
    )
    workdir = ROOT / "runs" / "gpu-check" / "minilm-paper"
    paper = step(
        "configs/minilm-paper.yaml on the GPU",
        [
            py,
            "-m",
            "pipelines.run",
            "configs/minilm-paper.yaml",
            "--workdir",
            str(workdir),
            "--no-progress",
            "--set",
            "extract.device=cuda",
            "--set",
            "metrics.device=cuda",
        ],
        limit=left() - 5,
    )
    logs = sorted((workdir / "logs").glob("run-*.log")) if (workdir / "logs").is_dir() else []
    if logs:
        text = logs[-1].read_text(encoding="utf-8", errors="replace")
        paper["stages"] = {
            m.group(1): float(m.group(2)) for m in re.finditer(r"(extract|metrics): [^\n]*? in ([0-9.]+) s", text)
        }
    record["steps"]["minilm_paper"] = paper
    record["seconds"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"-> {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0 if all(s["status"] == 0 for s in record["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
