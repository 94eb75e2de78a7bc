"""The metrics stage's wall time on 1, 2, 8 and 32 workers, simulated from a run's measured
units (``<workdir>/metrics/profile.jsonl``: each unit's wall seconds and start), beside the
wall time the run itself took on its own workers.

Each worker count gets Graham's list scheduling of the units in the order the run started
them (what Dask does with independent tasks), its longest-first variant, and the lower bound
no schedule beats (the longest unit: the critical path of independent units; or the summed
time shared evenly) (:mod:`evolution.schedule`). The unit times were measured with the run's
workers sharing the machine's cores, so the simulation holds for workers that each have what
one of the run's workers had.

    python benchmarks/scaling.py results/minilm-paper/profile.jsonl --out results/minilm-paper/scaling.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from evolution.analyses import runner
from evolution.schedule import list_schedule, longest_first, lower_bound

WORKERS = (1, 2, 8, 32)


def read_profile(path: Path) -> list[dict]:
    """The units of the profile's last run, in the order they started (the runner's reader)."""
    units = runner.read_profile(path)
    if not units:
        raise SystemExit(f"{path}: no units; run the metrics stage first (python -m pipelines.run CONFIG)")
    return units


def scaling(units: list[dict]) -> dict:
    seconds = [float(u["wall"]) for u in units]
    total = sum(seconds)
    longest = max(units, key=lambda u: u["wall"])
    share = Counter()
    for u in units:
        share[u["analysis"]] += u["wall"]
    workers = len({u["worker"] for u in units})
    measured = max(u["end"] for u in units) - min(u["start"] for u in units)
    memory = {}
    if all("rss_peak" in u for u in units):  # recorded since 2026-11-28
        top = max(units, key=lambda u: u["rss_peak"])
        memory = {"largest_rss_unit": f"{top['analysis']} {top['unit']}", "largest_rss_gib": top["rss_peak"] / 2**30}
    return {
        **memory,
        "units": len(units),
        "summed_unit_s": round(total, 1),
        "largest_unit": f"{longest['analysis']} {longest['unit']}",
        "largest_unit_s": round(longest["wall"], 1),
        "largest_unit_share": round(longest["wall"] / total, 3),
        "by_analysis_s": {k: round(v, 1) for k, v in share.most_common()},
        "measured": {"workers": workers, "wall_s": round(measured, 1)},
        "simulated": [
            {
                "workers": w,
                "list_s": round(list_schedule(seconds, workers=w), 1),
                "longest_first_s": round(longest_first(seconds, workers=w), 1),
                "bound_s": round(lower_bound(seconds, workers=w), 1),
            }
            for w in WORKERS
        ],
    }


def against(seconds: list[float], path: Path) -> dict:
    """Another run of the same units (``path``, its profile) against this simulation: its measured
    wall (first unit's start to last unit's end) on its workers, and this profile's list
    scheduling on as many workers."""
    other = scaling(read_profile(path))
    w = other["measured"]["workers"]
    simulated = list_schedule(seconds, workers=w)
    measured = other["measured"]["wall_s"]
    return {
        "profile": str(path),
        "workers": w,
        "units": other["units"],
        "measured_s": measured,
        "simulated_s": round(simulated, 1),
        "ratio": round(measured / simulated, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path, help="a run's metrics/profile.jsonl")
    parser.add_argument("--out", type=Path, help="write the table as JSON")
    parser.add_argument(
        "--against",
        type=Path,
        nargs="+",
        default=[],
        help="profiles of the same units run on other numbers of workers: each one's measured wall "
        "against this profile's simulation on its workers (list scheduling)",
    )
    args = parser.parse_args()
    units = read_profile(args.profile)
    out = {"date": time.strftime("%Y-%m-%d"), "profile": str(args.profile), **scaling(units)}
    if args.against:
        out["checks"] = [against([float(u["wall"]) for u in units], path) for path in args.against]
    m = out["measured"]
    print(
        f"{out['units']} units, {out['summed_unit_s']} s summed; largest {out['largest_unit']} "
        f"{out['largest_unit_s']} s = {100 * out['largest_unit_share']:.1f}%"
    )
    print(f"measured: {m['wall_s']} s on {m['workers']} worker(s)")
    if "largest_rss_unit" in out:
        print(f"largest worker memory: {out['largest_rss_gib']:.2f} GiB RSS during {out['largest_rss_unit']}")
    print("workers  list (s)  longest-first (s)  bound (s)")
    for r in out["simulated"]:
        print(f"{r['workers']:>7}  {r['list_s']:>8}  {r['longest_first_s']:>17}  {r['bound_s']:>9}")
    for c in out.get("checks", []):
        print(
            f"{c['profile']}: measured {c['measured_s']} s on {c['workers']} worker(s), simulated "
            f"{c['simulated_s']} s: measured / simulated {c['ratio']}"
        )
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
