"""Each metrics unit's planned working set (:func:`evolution.analyses.cost.unit_memory`) against
its measured peak, one unit at a time in a fresh process, and its result against the run's cache.

    python benchmarks/unit_memory.py CONFIG [--workdir DIR] --units "mi minilm-3" "similarity minilm" [--out FILE]

CONFIG is a run whose metrics stage finished (its ``metrics/cache`` holds every unit named). Each
unit runs alone in a spawned process with a local worker's environment (one BLAS thread, so its
sums run in the worker's order) that samples its own resident memory every 50 ms: ``base``
once the unit's code is imported, ``peak`` while it runs; ``held`` = peak - base is what the
plan's working set forecasts (a worker adds ``WORKER_BASE``). ``equal`` says whether the result
equals the cached one (``==`` on the JSON: the same numbers to the last bit). A long run's worker
reports more than ``peak`` (glibc keeps what earlier units freed), so the profile's ``rss_peak``
cannot check the plan; this can (docs/decisions.md #30).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


#: what a metrics worker has imported once it ran a unit or two: the base that
#: ``evolution.analyses.cost.WORKER_BASE`` stands for (0.42 GiB measured with these, 2026-11-29)
WORKER_MODULES = (
    "numpy",
    "scipy.sparse",
    "sklearn.cluster",
    "torch",
    "distributed",
    "zarr",
    "evolution.store",
    "evolution.analyses.mi",
    "evolution.analyses.neighbors",
    "evolution.analyses.similarity_tasks",
    "evolution.metrics.similarity_bootstrap",
)


def _measure(fn, kwargs: dict, out) -> None:
    """Run ``fn(**kwargs)`` in this (spawned) process; put (result as JSON, base, peak) on ``out``."""
    import psutil

    proc, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.05)

    import importlib

    for module in WORKER_MODULES:  # a worker's imports are its base, not the unit's
        importlib.import_module(module)
    from evolution.metrics.search import faiss_or_none

    faiss_or_none()
    base = proc.memory_info().rss
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    result = fn(**kwargs)
    done.set()
    thread.join()
    from evolution.analyses.runner import _jsonable

    out.put((json.dumps(result, default=_jsonable), base, max(peak[0], proc.memory_info().rss)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path)
    p.add_argument(
        "--units", nargs="+", default=[], help='"<analysis> <unit>", as the profile names them (none: --plan-out only)'
    )
    p.add_argument("--workdir", type=Path, help="the run's workdir, where the config names another")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--plan-out",
        type=Path,
        help="also write the plan of all the run's units with their memory (plan.json's form, at the "
        "rate of the run's metrics/plan.json) for benchmarks/metrics_plan.py --project",
    )
    args = p.parse_args()
    if not args.units and not args.plan_out:
        p.error("give --units to measure, or --plan-out for the plan alone")

    from evolution.analyses import enabled
    from evolution.analyses.cost import WORKER_BASE, plan_record, plan_units, unit_memory, unit_work
    from evolution.analyses.runner import unit_file
    from evolution.config import load_config
    from pipelines.stages.base import Context
    from pipelines.stages.metrics import MetricsStage

    cfg = load_config(args.config, overrides={"workdir": str(args.workdir.resolve())} if args.workdir else None)
    ctx = Context(config=cfg, progress=False)
    stage = MetricsStage()
    inputs = stage.inputs(ctx, models=cfg.models, metrics=cfg.metrics)
    units = {f"{a.name} {u.name}": (a, u) for a in enabled(cfg.metrics) for u in a.units(inputs)}
    if args.plan_out:
        run_plan = json.loads((ctx.workdir / "metrics" / "plan.json").read_text(encoding="utf-8"))
        rate, workers = run_plan["rate"], run_plan["workers"]
        record = plan_record(plan_units(list(units.values()), inputs, rate=rate), rate=rate, workers=workers)
        args.plan_out.parent.mkdir(parents=True, exist_ok=True)
        args.plan_out.write_text(json.dumps(record) + "\n", encoding="utf-8")
        print(f"plan of {len(units)} units -> {args.plan_out}")
    missing = [name for name in args.units if name not in units]
    if missing:
        raise SystemExit(f"no unit {missing}; this run's units: {', '.join(sorted(units))}")
    from pipelines.cluster import worker_environ

    os.environ.update(worker_environ(1))  # the spawned units see a worker's one BLAS thread (and its sums' order)
    gib, rows = 2.0**30, []
    for name in args.units:
        a, u = units[name]
        family, _ = unit_work(a.name, u, inputs)
        planned = unit_memory(family, u, inputs)
        cached = unit_file(stage.cache(ctx), a, u)
        q = mp.get_context("spawn").Queue()
        child = mp.get_context("spawn").Process(target=_measure, args=(u.fn, u.kwargs, q))
        t0 = time.perf_counter()
        child.start()
        while True:  # the child's result, or its failure (its traceback is on stderr)
            try:
                result, base, peak = q.get(timeout=1.0)
                break
            except queue.Empty:
                if not child.is_alive():
                    raise SystemExit(f"{name} failed in its process (exit {child.exitcode})") from None
        child.join()
        row = {
            "unit": name,
            "family": family,
            "seconds": round(time.perf_counter() - t0, 1),
            "base_gib": round(base / gib, 3),
            "peak_gib": round(peak / gib, 3),
            "held_gib": round((peak - base) / gib, 3),
            "planned_gib": None if planned is None else round(planned / gib, 3),
            "equal": cached.is_file() and json.loads(result) == json.loads(cached.read_text(encoding="utf-8")),
        }
        if planned:
            row["held_over_planned"] = round((peak - base) / planned, 3)
        rows.append(row)
        print(
            f"{name:32s} held {row['held_gib']:6.2f} GiB  planned {row['planned_gib'] or float('nan'):6.2f}  "
            f"peak {row['peak_gib']:6.2f}  {row['seconds']:7.1f} s  equal to the cache: {row['equal']}",
            flush=True,
        )
    record = {"worker_base_gib": round(WORKER_BASE / gib, 3), "units": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
