"""The metrics stage's plan against what it measured: per family of units (neighbours, MI,
similarity, change by frequency: :mod:`evolution.analyses.cost`), the planned and the measured
seconds, and the stage's planned wall time against the run's.

A run writes ``metrics/plan.json`` (each unit's multiply-adds and planned seconds, the rate it
measured at start) beside ``metrics/profile.jsonl`` (each unit's measured seconds). ``--fit``
prints each family's efficiency, measured seconds x rate / multiply-adds, the constants of
:data:`evolution.analyses.cost.EFFICIENCY`; ``--efficiency`` replans the units with other
constants (those fitted on another run: the check that they carry over).

    python benchmarks/metrics_plan.py runs/minilm-paper-scale/30460/metrics [--fit] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from evolution.analyses.cost import EFFICIENCY
from evolution.analyses.runner import read_profile
from evolution.schedule import list_schedule


def family_of(analysis: str, unit: str) -> str:
    """The family of a measured unit (a key of ``EFFICIENCY``), or ``"<analysis> (not modelled)"``:
    by name, so that a profile from before a unit was split (one neighbour unit per layer)
    compares with a plan of its parts."""
    if analysis == "neighbors":
        return "neighbors"
    if analysis == "mi":
        return "mlm_output" if unit.endswith("-mlm-output") else "mi"
    if analysis == "similarity":
        return "change" if "change-" in unit else "similarity"
    return f"{analysis} (not modelled)"


def compare(plan: dict, profile: list[dict], *, efficiency: dict[str, float] | None = None) -> dict:
    """Per family: units planned and measured, multiply-adds, planned and measured seconds, their
    ratio and the efficiency the measured seconds give; the stage: planned wall (list scheduling
    of the planned units, an unmodelled one at its measured time) against the measured wall."""
    rate, workers = plan["rate"], plan["workers"]
    eff = efficiency or plan["efficiency"]
    empty = {"units": 0, "measured_units": 0, "work": 0.0, "planned_s": 0.0, "measured_s": 0.0}
    fam: dict[str, dict] = defaultdict(lambda: dict(empty))
    planned_family = {(u["analysis"], u["unit"]): u["family"] for u in plan["units"] if u["family"] is not None}
    for r in profile:  # a measured unit in its planned family (MI: by its k-means), else by name
        f = fam[planned_family.get((r["analysis"], r["unit"])) or family_of(r["analysis"], r["unit"])]
        f["measured_units"] += 1
        f["measured_s"] += r["wall"]
    measured = {(r["analysis"], r["unit"]): r["wall"] for r in profile}
    seconds = []
    for u in plan["units"]:
        if u["family"] is None:
            seconds.append(measured.get((u["analysis"], u["unit"]), 0.0))
            continue
        f = fam[u["family"]]
        planned = u["work"] / (rate * eff[u["family"]])
        f["units"] += 1
        f["work"] += u["work"]
        f["planned_s"] += planned
        seconds.append(planned)
    for f in fam.values():
        if f["work"] and f["measured_s"]:
            f["ratio"] = f["measured_s"] / f["planned_s"]
            f["efficiency"] = f["work"] / (f["measured_s"] * rate)
    wall = max(r["end"] for r in profile) - min(r["start"] for r in profile)
    planned_wall = list_schedule(seconds, workers=workers)
    return {
        "rate": rate,
        "workers": workers,
        "efficiency": eff,
        "families": dict(fam),
        "stage": {"planned_s": planned_wall, "measured_s": wall, "ratio": wall / planned_wall},
    }


#: stored layers (L + 1) and width of the real shapes of configs/shapes.yaml and shapes-1b.yaml
SHAPES = {"bert-base": (13, 768), "gpt2-small": (13, 768), "pythia-410m": (25, 1024), "pythia-1b": (17, 2048)}


def project(
    plan: dict, *, layers: int, d: int, to_layers: int, to_d: int, efficiency: dict[str, float]
) -> dict[str, float]:
    """Planned seconds of each modelled family for a model of ``to_layers`` stored layers and
    width ``to_d`` on the same occurrences, from a plan of one of ``layers`` and ``d`` (the unit
    counts of :mod:`evolution.analyses.cost`: neighbours and MI per layer and linear in d, the
    change by frequency per adjacent pair and the similarity estimate per view and pair of views,
    both in d^2), at the plan's rate and ``efficiency``."""

    def views(v: int) -> float:
        return 2 * v + v * (v + 1) / 2

    scale = {
        "neighbors": to_layers / layers * to_d / d,
        "mi": to_layers / layers * to_d / d,
        "mi_flat": to_layers / layers * to_d / d,
        "change": (to_layers - 1) / (layers - 1) * (to_d / d) ** 2,
        "similarity": views(to_layers) / views(layers) * (to_d / d) ** 2,
    }
    out: dict[str, float] = defaultdict(float)
    for u in plan["units"]:
        if u["family"] is not None:
            out[u["family"]] += u["work"] * scale[u["family"]] / (plan["rate"] * efficiency[u["family"]])
    return dict(out)


def project_memory(plan: dict, *, layers: int, d: int, to_layers: int, to_d: int) -> dict[str, float]:
    """Bytes of the largest unit of each modelled family for a model of ``to_layers`` stored layers
    and width ``to_d`` on the same occurrences, from a plan whose units carry ``memory``
    (:func:`evolution.analyses.cost.unit_memory`, less its fixed part, scaled as its terms:
    neighbours and MI linear in d; the similarity estimate 8 n d (V + 2) + 4 n d in d and its
    views V; a change part, one bin of n_b rows, n_b d (4 L + 96) in d and the stored layers L).
    For a plan of one model: the similarity estimate of several (named ``a+b``) has V summed over
    them and a bootstrap term between them, which this does not scale, so it is refused."""
    several = [u["unit"] for u in plan["units"] if u["family"] == "similarity" and "+" in u["unit"]]
    if several:
        raise ValueError(f"project_memory projects a plan of one model; {several[0]} compares several")
    fixed = plan.get("unit_fixed", 0)
    scale = {
        "neighbors": to_d / d,
        "mi": to_d / d,
        "mi_flat": to_d / d,
        "similarity": to_d / d * (8 * (to_layers + 2) + 4) / (8 * (layers + 2) + 4),
        "change": to_d / d * (4 * to_layers + 96) / (4 * layers + 96),
    }
    out: dict[str, float] = {}
    for u in plan["units"]:
        if u["family"] is not None and u.get("memory") is not None:
            m = fixed + (u["memory"] - fixed) * scale[u["family"]]
            out[u["family"]] = max(out.get(u["family"], 0.0), m)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", type=Path, help="a run's metrics directory (plan.json, profile.jsonl)")
    parser.add_argument("--efficiency", type=json.loads, help="replan with these, e.g. '{\"mi\": 0.5, ...}'")
    parser.add_argument("--fit", action="store_true", help="print the efficiencies this run measured")
    parser.add_argument("--profile", type=Path, help="the measured units (default: profile.jsonl beside plan.json)")
    parser.add_argument("--rate", type=float, help="the measured run's GEMM rate (default: the plan's)")
    parser.add_argument(
        "--project",
        nargs=2,
        type=int,
        metavar=("LAYERS", "D"),
        help="also project the plan (of a model of "
        "LAYERS stored layers and width D) onto the real shapes of SHAPES, on the same occurrences",
    )
    parser.add_argument("--out", type=Path, help="write the comparison as JSON")
    parser.add_argument("--plan", type=Path, help="the plan (default: plan.json in METRICS)")
    args = parser.parse_args()
    plan = json.loads((args.plan or args.metrics / "plan.json").read_text(encoding="utf-8"))
    if args.rate:
        plan["rate"] = args.rate
    out = compare(plan, read_profile(args.profile or args.metrics / "profile.jsonl"), efficiency=args.efficiency)
    print(f"rate {out['rate'] / 1e9:.1f} G float64 multiply-adds/s on one core, {out['workers']} worker(s)")
    print(
        f"{'family':<28} {'units (plan/run)':>16} {'multiply-adds':>13} {'planned s':>10} "
        f"{'measured s':>10} {'ratio':>6}"
    )
    for name, f in sorted(out["families"].items(), key=lambda kv: -kv[1]["measured_s"]):
        planned = f"{f['planned_s']:10,.0f}" if f["work"] else f"{'-':>10}"
        ratio = f"{f['ratio']:6.2f}" if "ratio" in f else f"{'-':>6}"
        units = f"{f['units']}/{f['measured_units']}"
        print(f"{name:<28} {units:>16} {f['work']:13.3e} {planned} {f['measured_s']:10,.0f} {ratio}")
    s = out["stage"]
    print(f"stage: planned {s['planned_s']:,.0f} s, measured {s['measured_s']:,.0f} s (ratio {s['ratio']:.2f})")
    if args.fit:
        fitted = {k: round(f["efficiency"], 3) for k, f in out["families"].items() if "efficiency" in f}
        print("fitted efficiencies:", json.dumps(fitted))
    if args.project:
        layers, d = args.project
        out["projection"] = {
            name: project(plan, layers=layers, d=d, to_layers=lt, to_d=dt, efficiency=out["efficiency"])
            for name, (lt, dt) in SHAPES.items()
        }
        print(f"projected onto the same occurrences (planned seconds at {plan['rate'] / 1e9:.1f} G/s):")
        print(f"{'shape':<12} {'layers x d':>10} " + " ".join(f"{f:>10}" for f in EFFICIENCY) + f" {'summed':>10}")
        for name, fam in out["projection"].items():
            lt, dt = SHAPES[name]
            cells = " ".join(f"{fam.get(f, 0.0):10,.0f}" for f in EFFICIENCY)
            print(f"{name:<12} {f'{lt} x {dt}':>10} {cells} {sum(fam.values()):10,.0f}")
        if any(u.get("memory") is not None for u in plan["units"]):
            out["memory_projection"] = {
                name: project_memory(plan, layers=layers, d=d, to_layers=lt, to_d=dt)
                for name, (lt, dt) in SHAPES.items()
            }
            base = plan.get("worker_base", 0)
            print(f"largest unit of each family, GiB held above a worker's {base / 2**30:.2f} GiB base:")
            print(f"{'shape':<12} {'layers x d':>10} " + " ".join(f"{f:>10}" for f in EFFICIENCY))
            for name, fam in out["memory_projection"].items():
                lt, dt = SHAPES[name]
                print(
                    f"{name:<12} {f'{lt} x {dt}':>10} "
                    + " ".join(f"{fam.get(f, 0.0) / 2**30:10.2f}" for f in EFFICIENCY)
                )
    if args.out:
        out["date"] = time.strftime("%Y-%m-%d")
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
