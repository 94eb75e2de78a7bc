"""``extract.rows: needed`` against a full extraction of the same config: every metrics group's
variables compared (``==``, NaN where NaN), and per model the kept rows' states against the full
store's (bit for bit), the rows kept, the bytes the hidden array's chunks take against the full
store's, and the plan's bytes (:func:`pipelines.plan.plan_extract`).

    python -m pipelines.run evolution.yaml --workdir runs/rows-full --set metrics.similarity.sentences=1000
    python -m pipelines.run evolution.yaml --workdir runs/rows-needed --set metrics.similarity.sentences=1000 \\
        --set extract.rows=needed
    python benchmarks/rows_needed.py evolution.yaml runs/rows-full runs/rows-needed \\
        --set metrics.similarity.sentences=1000 --out results/rows/compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import yaml


def chunk_bytes(store: Path, model: str) -> int:
    """Bytes of ``model``'s hidden chunk files (zarr v3: ``<model>/hidden/c/...``)."""
    root = store / model / "hidden" / "c"
    return sum(os.path.getsize(Path(d) / f) for d, _, fs in os.walk(root) for f in fs)


def same_states(full: Path, needed: Path, model: str) -> bool:
    """Whether every kept row's states, at every layer, equal the full store's bit for bit."""
    from evolution.store import open_hidden, stored_rows

    kept = stored_rows(str(needed), model)
    a, b = open_hidden(str(full), model), open_hidden(str(needed), model)
    return all(np.array_equal(np.asarray(a[layer])[kept], np.asarray(b[layer])) for layer in range(a.shape[0]))


def compare_groups(full: Path, needed: Path) -> dict:
    """Every variable of every group of the two metrics stores: equal (``==``, NaN where NaN)?"""
    from evolution.metrics.results import metrics_groups, open_metrics

    groups = metrics_groups(full)
    if set(groups) != set(metrics_groups(needed)):
        raise SystemExit(f"the groups differ: {sorted(groups)} against {sorted(metrics_groups(needed))}")
    out = {}
    for g in groups:
        a, b = open_metrics(full, g), open_metrics(needed, g)
        differ = []
        for v in a.data_vars:
            x, y = a[v].values, b[v].values
            same = x.shape == y.shape and (
                np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else bool((x == y).all())
            )
            if not same:
                differ.append(v)
        out[g] = {"variables": len(a.data_vars), "differ": differ}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path)
    p.add_argument("full", type=Path, help="the workdir of the full extraction's run")
    p.add_argument("needed", type=Path, help="the workdir of the run with extract.rows: needed")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE, as the runs were given")
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    from evolution.config import load_config
    from pipelines.plan import plan_extract
    from pipelines.stages import Context, CorpusStage, ExtractStage

    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    groups = compare_groups(args.full / "metrics.zarr", args.needed / "metrics.zarr")
    cfg = load_config(args.config, overrides={**overrides, "extract.rows": "needed", "workdir": str(args.needed)})
    ctx = Context(config=cfg, progress=False)
    corpus, annotation = CorpusStage().load(ctx), CorpusStage().annotation(ctx)
    models = {}
    for m in cfg.models:
        stage = ExtractStage()
        plan = plan_extract(
            stage.spec(ctx, m),
            corpus,
            cfg.extract,
            name=m.name,
            workers=1,
            training_text=stage.training_text(ctx, m),
            annotation=annotation,
            select_rows=stage.select_rows(ctx, m),
        )
        states = same_states(args.full / "reps.zarr", args.needed / "reps.zarr", m.name)
        written = chunk_bytes(args.needed / "reps.zarr", m.name)
        full = chunk_bytes(args.full / "reps.zarr", m.name)
        models[m.name] = {
            "tokens": plan.tokens,
            "kept_rows": plan.stored_tokens,
            "kept_share": round(plan.stored_tokens / plan.tokens, 4),
            "rows_by_analysis": plan.row_sources,
            "planned_bytes": plan.hidden_bytes,
            "written_bytes": written,
            "written_over_planned": round(written / plan.hidden_bytes, 4),
            "full_bytes": full,
            "states_equal": states,
            "written_over_full": round(written / full, 4),
        }
    out = {"date": time.strftime("%Y-%m-%d"), "overrides": overrides, "models": models, "groups": groups}
    same = all(not g["differ"] for g in groups.values())
    n = sum(g["variables"] for g in groups.values())
    print(f"{len(groups)} groups, {n} variables: {'all equal' if same else 'SOME DIFFER'}")
    for name, r in models.items():
        print(
            f"{name}: {r['kept_rows']:,} of {r['tokens']:,} rows ({r['kept_share']:.1%}); wrote {r['written_bytes']:,} "
            f"bytes, {r['written_over_planned']:.4f} of the plan, {r['written_over_full']:.4f} of the full store; "
            f"states equal to the full store's: {r['states_equal']}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
