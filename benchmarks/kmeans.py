"""The MI analysis's k-means against scikit-learn's Lloyd k-means on a run's own occurrences.

For every (model, layer, target) of a run's MI (the occurrences and labels its ``mi`` units
read from ``<workdir>/metrics-inputs``), this project's k-means
(:func:`evolution.metrics.search.kmeans`: k-means++ seeds on a sample, then faiss's Lloyd
iterations) and scikit-learn's ``KMeans(algorithm="lloyd")`` (greedy k-means++ on every row,
run to convergence) with the same k and the run's restarts (seeds 0 .. restarts - 1): the mean
MI over restarts with the label (what the analysis reports as ``mi_mean``) and the time.
Target: within 1% of Lloyd's MI on every layer. ``--before`` adds faiss from its own random
initial centroids (the k-means before commit 2026-11-26).

    python benchmarks/kmeans.py runs/default [--out results/scale/kmeans.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, as a worker
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, help="a run's workdir (its reps.zarr, metrics-inputs and config)")
    parser.add_argument("--before", action="store_true", help="also faiss from random initial centroids")
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    args = parser.parse_args(argv)

    import yaml
    from sklearn.cluster import KMeans

    from evolution.metrics.mi import mutual_information
    from evolution.metrics.search import faiss_or_none, kmeans
    from evolution.store import n_layers, read_rows

    resolved = yaml.safe_load((args.workdir / "config.resolved.yaml").read_text(encoding="utf-8"))
    mi = resolved["metrics"]["mi"]
    store = str(args.workdir / "reps.zarr")
    rows = []
    print(
        f"{'model':>8} {'layer':>5} {'target':>7} {'n':>7} {'k':>5} {'Lloyd MI':>9} {'ours':>8} {'diff %':>7}"
        f" {'Lloyd s':>8} {'ours s':>7}" + ("  before  diff %" if args.before else ""),
        flush=True,
    )
    for path in sorted(glob.glob(str(args.workdir / "metrics-inputs" / "mi-*.npz"))):
        model = Path(path).name[3:].rsplit("-", 1)[0]
        arrays = np.load(path)
        targets = sorted({k.split("/")[0] for k in arrays.files})
        layers = n_layers(store, model)
        for target in targets:
            labels = arrays[f"{target}/labels"]
            k = min(mi["k"], max(2, len(labels) // 10))
            for layer in range(layers):
                x = np.ascontiguousarray(read_rows(store, model, layer, arrays[f"{target}/rows"]), dtype=np.float32)
                seeds = range(mi["restarts"])
                t0 = time.perf_counter()
                got = np.mean([mutual_information(labels, kmeans(x, k=k, niter=mi["niter"], seed=s)) for s in seeds])
                t_ours = time.perf_counter() - t0
                t0 = time.perf_counter()
                ref = np.mean(
                    [
                        mutual_information(
                            labels, KMeans(n_clusters=k, n_init=1, random_state=s, algorithm="lloyd").fit(x).labels_
                        )
                        for s in seeds
                    ]
                )
                t_lloyd = time.perf_counter() - t0
                row = {
                    "model": model,
                    "layer": layer,
                    "target": target,
                    "n": len(x),
                    "k": k,
                    "lloyd_mi": float(ref),
                    "mi": float(got),
                    "diff_percent": 100 * (got - ref) / ref,
                    "lloyd_s": t_lloyd,
                    "s": t_ours,
                }
                line = (
                    f"{model:>8} {layer:>5} {target:>7} {len(x):>7} {k:>5} {ref:9.4f} {got:8.4f} "
                    f"{row['diff_percent']:+7.2f} {t_lloyd:8.1f} {t_ours:7.1f}"
                )
                if args.before and faiss_or_none() is not None:
                    faiss, before = faiss_or_none(), []
                    for s in seeds:
                        km = faiss.Kmeans(
                            x.shape[1],
                            k,
                            niter=mi["niter"],
                            seed=s,
                            max_points_per_centroid=256,
                            min_points_per_centroid=1,
                        )
                        km.train(x)
                        before.append(mutual_information(labels, km.index.search(x, 1)[1].ravel()))
                    before = float(np.mean(before))
                    row.update(before_mi=before, before_diff_percent=100 * (before - ref) / ref)
                    line += f"  {before:6.4f} {row['before_diff_percent']:+7.2f}"
                print(line, flush=True)
                rows.append(row)
    worst = min(rows, key=lambda r: r["diff_percent"])
    print(
        f"largest shortfall against Lloyd: {worst['diff_percent']:+.2f}% ({worst['model']} layer {worst['layer']} "
        f"{worst['target']}); time {sum(r['s'] for r in rows):.0f} s against Lloyd's "
        f"{sum(r['lloyd_s'] for r in rows):.0f} s"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"date": time.strftime("%Y-%m-%d"), "workdir": args.workdir.name, "rows": rows}, indent=1)
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
