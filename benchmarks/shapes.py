"""The extraction's plan against what it does, on the default config and on real model shapes
(random weights: evolution/fixtures/real_shapes.py), and the plan projected to a million tokens.

For each config: the extract stage in a fresh workdir (``--stage extract``), its plan
(``ctx.timings["plan.extract"]``: bytes, seconds, a worker's peak) beside what it wrote (bytes
on disk per model group), how long each model took (``stage_seconds``) and the peak summed RSS
of this process and its workers (sampled every 0.2 s). Then, per shape, a million tokens
projected from the measured forward rate (float16 states; seconds on this machine's workers).

    python -m evolution.fixtures.real_shapes data/shapes          # the four shapes (10 GB of weights)
    python benchmarks/shapes.py                                   # -> results/shapes/plan.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["evolution.yaml", "configs/shapes.yaml", "configs/shapes-1b.yaml"]


def _written(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


class PeakRSS:
    """The largest summed RSS of this process and its children, sampled every ``every`` seconds."""

    def __init__(self, every: float = 0.2):
        import psutil

        self.proc, self.every, self.peak, self._stop = psutil.Process(), every, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            total = 0
            for p in [self.proc, *self.proc.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except Exception:  # noqa: BLE001 - a worker gone between listing and reading
                    pass
            self.peak = max(self.peak, total)
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def measure(config: str) -> dict:
    from pipelines.plan import CONCURRENT_SLOWDOWN, OTHER_SECONDS_PER_TOKEN, WRITE_BYTES_PER_SECOND, gemm_rate
    from pipelines.run import run

    work = Path(tempfile.mkdtemp(prefix="shapes-", dir=ROOT / "runs"))
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        ctx = run(ROOT / config, stage="extract", workdir=work, progress=False)
        wall = time.perf_counter() - t0
    plan = ctx.timings["plan.extract"]
    workers = plan["workers"]
    rows = []
    for name, p in plan.items():
        if not isinstance(p, dict):
            continue
        done = ctx.timings[f"extract.{name}"]
        written = _written(work / "reps.zarr" / name)
        per_token_f16 = p["layers"] * p["d_model"] * 2
        rows.append(
            {
                "model": name,
                "tokens": p["tokens"],
                "layers x d": f"{p['layers']} x {p['d_model']}",
                "planned_bytes": p["bytes"],
                "written_bytes": written,
                "bytes_ratio": written / p["bytes"],
                "planned_seconds": p["seconds"],
                "measured_seconds": done["stage_seconds"],
                "seconds_ratio": done["stage_seconds"] / p["seconds"],
                "planned_worker_peak_bytes": p["worker_peak_bytes"],
                "forward_tokens_per_second": p["tokens_per_second"],
                "million_tokens_float16_bytes": per_token_f16 * 1_000_000,
                # the plan's cost model on a million tokens in float16: many tasks, evenly spread
                "million_tokens_seconds": 1_000_000
                * (
                    (CONCURRENT_SLOWDOWN if workers > 1 else 1.0) / p["tokens_per_second"]
                    + OTHER_SECONDS_PER_TOKEN
                    + per_token_f16 / WRITE_BYTES_PER_SECOND
                )
                / workers,
            }
        )
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {
        "config": config,
        "workers": workers,
        "gemm64_one_core": plan["gemm64_one_core"],
        "gemm64_one_core_1s": gemm_rate(1.0),
        "peak_summed_rss_bytes": rss.peak,
        "extract_wall_seconds": wall,
        "models": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=CONFIGS)
    parser.add_argument("--out", default=str(ROOT / "results" / "shapes" / "plan.json"))
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    (ROOT / "runs").mkdir(exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(out.read_text()) if out.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    for config in args.configs:
        result = measure(config)
        result.update(date=time.strftime("%Y-%m-%d"), commit=commit.strip())
        done[config] = result
        out.write_text(json.dumps(done, indent=1) + "\n")
        for r in result["models"]:
            print(
                f"{config} {r['model']}: {r['tokens']:,} tokens, bytes {r['planned_bytes'] / 1e9:.3f} planned / "
                f"{r['written_bytes'] / 1e9:.3f} written, seconds {r['planned_seconds']:.0f} planned / "
                f"{r['measured_seconds']:.0f} measured; a million tokens: "
                f"{r['million_tokens_float16_bytes'] / 1e9:.1f} GB float16, {r['million_tokens_seconds'] / 3600:.1f} h"
            )


if __name__ == "__main__":
    main()
