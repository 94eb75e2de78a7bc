"""Where the metrics stage spends its time: per analysis, the seconds of its units, their share
of the stage, and the ratio against the analysis's floor on this machine.

For each config (default: ``evolution.yaml`` and ``configs/minilm.yaml``) the script runs the
pipeline into ``<out>/<config name>`` with ``--force metrics`` (extraction is reused when
present), reads the units' wall and CPU times from ``metrics/profile.jsonl`` (the stage writes
it: :func:`evolution.analyses.runner.run_analyses`), and computes each analysis's floor from
its units' inputs (the occurrences, layers and settings they were given) and rates measured in
this run, one thread, as a worker runs:

* dense products: float64 / float32 GEMM multiply-adds per second (NumPy's BLAS);
* model passes: tokens per second of a bare forward loop of each model (with attention maps
  where the analysis takes them): the extraction's own loop, without the store.

==============  =========================================================================
analysis        floor
==============  =========================================================================
mi              Lloyd's iterations and the final assignment (restarts x (niter + 1) x n x
                k x d, float32) and the k-means++ seeding; the MLM output unit adds its
                forward passes (corruptions x tokens)
neighbors       exact kNN: n^2 d per layer (float32), the main and the annotated text
similarity      the estimates' products: every pair of views n d_a d_b and each view's SVD
                (about 2 n d^2, float64); the bootstrap: per replicate one weighted pass over
                the occurrences of each product it needs, or per-sentence sums once plus
                replicates x sentences x d^2 where that is less; and one (d, d) SVD per pair
                of views compared, in the estimates and in each replicate (at its measured time)
change_pos      one SVD (2 n d^2) per layer and POS group, and the adjacent products
influence       one block per (sample, layer) row (tokens / L of a full pass) plus one
                unmasked pass per sampled sentence; one (d, d) SVD per (layer, bin) and replicate
heads           forward passes with attention maps over every sentence (statistics,
                decoder, dependency units); the head map's Jensen-Shannon terms at the
                machine's measured rate of NumPy's log
tsne            openTSNE's own optimisation on the same points (the reference
                implementation), per unit
==============  =========================================================================

``ratio`` = seconds / floor: how far above the arithmetic it must do the analysis runs.

    python benchmarks/pipeline.py [CONFIG ...] [--out runs/profile] [--no-run] [--json results/scale/profile.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, as a worker
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "evolution.yaml", ROOT / "configs" / "minilm.yaml"]


def gemm_rate(dtype, n: int = 4096, d: int = 384) -> float:
    """Multiply-adds per second of one (d, n) x (n, d) product (best of 3)."""
    a = np.random.default_rng(0).normal(size=(n, d)).astype(dtype)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        a.T @ a
        best = min(best, time.perf_counter() - t0)
    return n * d * d / best


def svd_seconds(d: int) -> float:
    """Seconds of one (d, d) SVD with its vectors (the canonical correlations of a pair of views)."""
    m = np.random.default_rng(0).normal(size=(d, d))
    np.linalg.svd(m)
    t0 = time.perf_counter()
    for _ in range(20):
        np.linalg.svd(m)
    return (time.perf_counter() - t0) / 20


def log_rate() -> float:
    x = np.random.default_rng(0).random(4_000_000) + 0.5
    t0 = time.perf_counter()
    np.log(x * x)
    return len(x) / (time.perf_counter() - t0)


def forward_rate(spec: dict, sentences: list[list[int]], *, attention: bool) -> float:
    """Tokens per second of the model's forward loop over ``sentences`` (token ids, built inputs)."""
    import torch

    from evolution.extract_plan import batches
    from evolution.models import cached_adapter

    torch.set_num_threads(1)
    adapter = cached_adapter(spec)
    inputs = [adapter.build_input(ids) for ids in sentences]
    adapter.forward(inputs[:4], attention=attention)  # warm up
    t0 = time.perf_counter()
    for batch in batches([len(x) for x in inputs], max_batch_tokens=1024):
        adapter.forward([inputs[i] for i in batch], attention=attention)
    return sum(len(x) for x in inputs) / (time.perf_counter() - t0)


def floors(inputs, units: dict[str, list], rates: dict) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds of each analysis's floor (see the module docstring), from its units' inputs."""
    from evolution.analyses.base import load_arrays

    cfg = inputs.config
    out, basis = defaultdict(float), {}
    g64, g32 = rates["gemm64"], rates["gemm32"]
    for name, us in units.items():
        for u in us:
            kw = u.kwargs
            if name == "mi":
                mi = cfg.mi
                if u.fn.__name__ == "layer_task":
                    a = load_arrays(kw["arrays"])
                    d = inputs.models[kw["model"]].d_model
                    for t in {k.split("/")[0] for k in a}:
                        n = len(a[f"{t}/rows"])
                        k = min(mi.k, max(2, n // 10))
                        seeding = (2 + np.log(k)) * k * min(n, max(2000, 16 * k)) * d
                        out[name] += mi.restarts * ((mi.niter + 1) * n * k * d + seeding) / g32
                else:  # the MLM output: forward passes of the corrupted sentences, then 2 targets x layers
                    tokens = sum(len(v) for v in kw["content_ids"].values()) * mi.mlm_corruptions
                    m = inputs.models[kw["spec"]["name"]]
                    n = 0.15 * tokens  # the corrupted positions (about 15% of each copy)
                    k = min(mi.k, max(2, int(n) // 10))
                    out[name] += (
                        tokens / rates["forward"][m.name]
                        + 2 * m.n_layers * mi.restarts * ((mi.niter + 1) * n * k * m.d_model) / g32
                    )
                basis[name] = "Lloyd + k-means++ seeding (float32 GEMM); MLM output: + forward passes"
            elif name == "neighbors":
                a = load_arrays(kw["arrays"])
                d = inputs.models[kw["model"]].d_model
                for part in ("neighbors", "syntax"):
                    if f"{part}/rows" in a:
                        out[name] += len(a[f"{part}/rows"]) ** 2 * d / g32
                basis[name] = "exact kNN n^2 d (float32 GEMM)"
            elif name == "similarity":
                a = load_arrays(kw["arrays"])
                s = cfg.similarity
                R = s.bootstrap
                n_sent = len(np.unique(a["sentence"]))
                if "models" in kw:  # the estimates and the same-layer replicates
                    ds = [inputs.models[g].d_model for g in kw["models"] for _ in range(kw["n_layers"][g])]
                    n = len(a[f"rows/{kw['models'][0]}"])
                    pairs = n * (sum(ds) ** 2 + sum(x * x for x in ds)) / 2 + sum(2 * n * x * x for x in ds)
                    width = sum(inputs.models[g].d_model for g in kw["models"])
                    layers = max(kw["n_layers"].values())
                    boot = layers * min(R * n, n + R * n_sent) * width**2 / 2 if R else 0
                    m = len(kw["models"])
                    small = (len(ds) * (len(ds) + 1) / 2 + R * layers * m * (m - 1) / 2) * rates["svd"](max(ds))
                    out[name] += (pairs + boot) / g64 + small
                else:  # one model's change per bin: an SVD per (bin, layer), the adjacent products
                    d, L = inputs.models[kw["model"]].d_model, kw["n_layers"]
                    n = len(a[f"rows/{kw['model']}"])
                    kinds = 1 + bool(s.equal_bins)
                    bins = len(kw["bins"]) - 1 + (s.equal_bins or 0)
                    est = kinds * L * (2 * n * d * d) + kinds * (L - 1) * n * d * d
                    boot = kinds * (2 * L - 1) * min(R * n, n + R * n_sent) * d * d if R else 0
                    out[name] += (est + boot) / g64 + (1 + R) * (L - 1) * bins * rates["svd"](d)
                basis[name] = (
                    "view SVDs + pair products + one weighted pass per replicate (float64 GEMM) + one "
                    "(d, d) SVD per pair and replicate"
                )
            elif name == "change_pos":
                a = load_arrays(kw["arrays"])
                d = inputs.models[kw["model"]].d_model
                out[name] += kw["n_layers"] * 3 * len(a["rows"]) * d * d / g64
                basis[name] = "an SVD per layer and POS group (float64 GEMM)"
            elif name == "influence":
                m = inputs.models[kw["spec"]["name"]]
                lengths = {int(k): len(v) for k, v in kw["content_ids"].items()}
                rows = sum(lengths[s] for s, _, _ in kw["samples"])  # L rows of one block each = one full pass
                cfg_i = cfg.influence
                pools = m.n_layers * len(cfg_i.freq_bins) - m.n_layers  # (layer, bin) pools
                out[name] += (rows + sum(lengths.values())) / rates["forward"][m.name] + pools * (
                    1 + cfg_i.bootstrap
                ) * rates["svd"](m.d_model)
                basis[name] = (
                    "one block per masked row + one pass per sentence (forward rate) + one (d, d) SVD "
                    "per (layer, bin) and replicate"
                )
            elif name == "heads":
                fn = u.fn.__name__
                if fn in ("heads_task", "decoder_task"):
                    m = inputs.models[kw["model"]]
                    out[name] += len(m.coords["token_id"]) / rates["forward_attention"][m.name]
                elif fn == "head_map_task":
                    from evolution.store import open_attention

                    att = open_attention(inputs.store, kw["models"][0])
                    lengths = att["length"].values.astype(float)
                    heads = sum(inputs.models[g].n_layers - 1 for g in kw["models"]) * att.sizes["head"]
                    out[name] += heads**2 * (lengths**2).sum() / rates["log"]
                elif fn == "dependency_task":
                    from evolution.analyses.base import load_texts

                    words = sum(
                        1
                        for line in load_texts(kw["text"])["conllu"].splitlines()
                        if line and line[0].isdigit() and "\t" in line
                    )
                    m = inputs.models[kw["spec"]["name"]]
                    out[name] += 1.3 * words / rates["forward_attention"][m.name]  # ~1.3 pieces per word
                basis[name] = "forward passes with attention (forward rate); head map: JS terms (log rate)"
            elif name == "tsne":
                out[name] += rates["tsne"].get(u.fn.__name__, 0.0)
                basis[name] = "openTSNE's optimisation alone on the same points"
    return dict(out), basis


def tsne_reference(inputs, units) -> dict[str, float]:
    """openTSNE's own time on one layer unit's points (the same settings), per unit."""
    from openTSNE import TSNE

    from evolution.analyses.base import load_arrays
    from evolution.store import read_rows

    layer_units = [u for u in units if u.fn.__name__ == "layer_task"]
    if not layer_units:
        return {}
    u = layer_units[len(layer_units) // 2]
    a = load_arrays(u.kwargs["arrays"])
    total = 0.0
    for rows in a.values():
        x = np.asarray(read_rows(inputs.store, u.kwargs["model"], u.kwargs["layer"], rows), dtype=np.float32)
        t0 = time.perf_counter()
        TSNE(perplexity=min(u.kwargs["tsne"].perplexity, (len(x) - 1) / 3), n_jobs=1, random_state=0).fit(x)
        total += time.perf_counter() - t0
    return {"layer_task": total, "masked_task": total / max(1, len(a))}


def profile(config: Path, workdir: Path, *, run: bool) -> dict:
    from evolution import location
    from evolution.analyses import enabled
    from evolution.analyses.inputs import ModelSource, load_inputs
    from evolution.analyses.runner import read_profile
    from evolution.api import open_store
    from evolution.config import load_config

    if run:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.run",
                str(config),
                "--workdir",
                str(workdir),
                "--force",
                "metrics",
                "--no-progress",
            ],
            check=True,
            cwd=ROOT,
        )
    records = read_profile(workdir / "metrics" / "profile.jsonl")
    stage = max(r["end"] for r in records) - min(r["start"] for r in records)
    cfg = load_config(config)
    store = str(workdir / "reps.zarr")
    reps = open_store(store)
    names = [m.name for m in cfg.models]
    specs = {
        m.name: {
            "name": m.name,
            "kind": m.kind,
            "path": str(m.path),
            "objective": m.objective,
            "data": None if m.data is None else str(m.data),
            "sentencepiece": None if m.sentencepiece is None else str(m.sentencepiece),
        }
        for m in cfg.models
    }  # from the config: a store outside the repository records no usable path
    sources = [
        ModelSource(
            name=n,
            kind=specs[n]["kind"],
            key=reps.extract_keys[n],
            spec=specs[n],
            objective=reps.specs[n].get("objective"),
        )
        for n in names
    ]
    inputs = load_inputs(
        store=store,
        models=sources,
        config=cfg.metrics,
        seed=cfg.seed,
        torch_threads=1,
        arrays_dir=location.inputs_dir(store),
        attrs={},
    )
    units = {a.name: a.units(inputs) for a in enabled(cfg.metrics)}
    svd = {}
    rates = {
        "gemm64": gemm_rate(np.float64),
        "gemm32": gemm_rate(np.float32),
        "log": log_rate(),
        "svd": lambda d: svd.setdefault(d, svd_seconds(d)),
        "forward": {},
        "forward_attention": {},
    }
    for n in names:
        m = inputs.models[n]
        sent = np.unique(m.coords["sentence"])[:200]
        ids = [m.coords["token_id"][m.coords["sentence"] == s].tolist() for s in sent]
        rates["forward"][n] = forward_rate(specs[n], ids, attention=False)
        rates["forward_attention"][n] = forward_rate(specs[n], ids, attention=True)
    rates["tsne"] = tsne_reference(inputs, units.get("tsne", []))
    floor, basis = floors(inputs, units, rates)
    per = defaultdict(lambda: {"units": 0, "seconds": 0.0, "cpu": 0.0})
    for r in records:
        p = per[r["analysis"]]
        p["units"] += 1
        p["seconds"] += r["wall"]
        p["cpu"] += r["cpu"]
    total = sum(p["seconds"] for p in per.values())
    table = []
    for name, p in sorted(per.items(), key=lambda kv: -kv[1]["seconds"]):
        f = floor.get(name)
        table.append(
            {
                "analysis": name,
                "units": p["units"],
                "seconds": round(p["seconds"], 1),
                "cpu": round(p["cpu"], 1),
                "share": round(p["seconds"] / total, 3),
                "floor": None if f is None else round(f, 1),
                "ratio": None if not f else round(p["seconds"] / f, 2),
                "floor_basis": basis.get(name, ""),
            }
        )
    return {
        "config": config.name,
        "stage_s": round(stage, 1),
        "unit_s": round(total, 1),
        "rates": {
            "svd_ms": {d: round(1e3 * v, 2) for d, v in svd.items()},
            "gemm64_gmacs": round(rates["gemm64"] / 1e9, 1),
            "gemm32_gmacs": round(rates["gemm32"] / 1e9, 1),
            "log_per_s": round(rates["log"]),
            "forward_tokens_s": {k: round(v) for k, v in rates["forward"].items()},
            "forward_attention_tokens_s": {k: round(v) for k, v in rates["forward_attention"].items()},
        },
        "table": table,
    }


def aggregate(path: Path) -> dict[str, dict]:
    """Per analysis: units, seconds and CPU seconds of a ``profile.jsonl`` (every run in it; a unit
    recorded twice counts once, its last record), for ``--before``."""
    last = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        last[(r["analysis"], r["unit"])] = r
    out = defaultdict(lambda: {"units": 0, "seconds": 0.0, "cpu": 0.0})
    for (analysis, _), r in last.items():
        out[analysis]["units"] += 1
        out[analysis]["seconds"] += r["wall"]
        out[analysis]["cpu"] += r["cpu"]
    return dict(out)


def with_before(result: dict, before: dict[str, dict], *, stage_s: float | None) -> dict:
    """``result``'s table with the ``before`` seconds and ratio against the same floors."""
    for row in result["table"]:
        b = before.get(row["analysis"])
        if b is not None:
            row["before_seconds"] = round(b["seconds"], 1)
            row["before_ratio"] = round(b["seconds"] / row["floor"], 1) if row["floor"] else None
    result["before_stage_s"] = stage_s
    return result


def show(result: dict) -> None:
    print(
        f"\n{result['config']}: metrics stage {result['stage_s']} s wall, {result['unit_s']} s in units; "
        f"rates {result['rates']}"
    )
    before = any("before_seconds" in r for r in result["table"])
    print(
        f"{'analysis':>12} {'units':>5} {'seconds':>8} {'CPU s':>8} {'share':>6} {'floor s':>8} {'ratio':>6}"
        + (f" {'before':>8} {'b.ratio':>7}" if before else "")
        + "  floor"
    )
    if before:
        print(
            f"  before: metrics stage {result.get('before_stage_s')} s; columns 'before' and 'b.ratio': the same "
            "units at the earlier commit, against the same floors"
        )
    for r in result["table"]:
        floor = "" if r["floor"] is None else f"{r['floor']:8.1f}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:6.1f}"
        extra = (
            f" {r.get('before_seconds', float('nan')):8.1f} {r.get('before_ratio') or float('nan'):7.1f}"
            if before
            else ""
        )
        print(
            f"{r['analysis']:>12} {r['units']:>5} {r['seconds']:8.1f} {r['cpu']:8.1f} {100 * r['share']:5.1f}% "
            f"{floor:>8} {ratio:>6}{extra}  {r['floor_basis']}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path, default=CONFIGS)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "profile", help="workdirs, one per config")
    parser.add_argument("--no-run", action="store_true", help="read the last profile of each workdir only")
    parser.add_argument("--json", type=Path, default=None, help="write the tables here")
    parser.add_argument(
        "--before",
        type=Path,
        nargs="*",
        default=[],
        help="a profile.jsonl per config from an earlier commit, shown beside (same order)",
    )
    parser.add_argument("--before-stage", type=float, nargs="*", default=[], help="their stages' wall seconds")
    args = parser.parse_args(argv)
    results = []
    for i, config in enumerate(args.configs):
        result = profile(config.resolve(), args.out / config.stem, run=not args.no_run)
        if i < len(args.before):
            result = with_before(
                result, aggregate(args.before[i]), stage_s=args.before_stage[i] if i < len(args.before_stage) else None
            )
        show(result)
        results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results}, indent=1) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
