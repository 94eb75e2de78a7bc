"""The similarity analysis's paired bootstrap against its point estimates, and against its
definition, on the default run's text and models' size.

The store is the extraction of ``configs/bible-heads.yaml``: the shipped base models of
bible-full (6 layers, d = 128, as the default run's) on the test books (2,656 verses, all of
which the default run's ``similarity: {sentences: 5000}`` takes) plus UD EWT test. It is made
first when missing (``--stage extract``: no training, a minute or two).

Three measurements, each in this process on one core (the pipeline runs one unit per worker):

* the analysis's units (``similarity_task`` and one ``change_task`` per model) without
  replicates: the point estimates;
* the same with ``--replicates`` (the default run's 20): the ratio to the estimates is the
  bootstrap's cost (target: at most 3);
* the definition, :func:`evolution.metrics.similarity.bootstrap_replicates` (resample the rows,
  redo every SVD), for ``--check`` replicates: its seconds per replicate, and the largest
  difference from the fast replicates of the same draws (target: 1e-8).

    python benchmarks/similarity.py [--replicates 20] [--check 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, as a worker
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bible-heads.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20, help="similarity.bootstrap (the default run's: 20)")
    parser.add_argument("--check", type=int, default=2, help="replicates computed by the definition too")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / "scale" / "similarity.json",
        help="where the measurements are written (JSON)",
    )
    args = parser.parse_args(argv)

    from evolution import location
    from evolution.analyses.base import save_arrays
    from evolution.analyses.inputs import ModelSource, load_inputs
    from evolution.analyses.similarity_tasks import _subsets, change_task, similarity_task
    from evolution.api import open_store
    from evolution.config import load_config
    from evolution.metrics.plan import frequency_bins
    from evolution.metrics.similarity import bootstrap_replicates
    from evolution.store import read_rows

    cfg = load_config(CONFIG)
    store = str(cfg.workdir / "reps.zarr")
    if not Path(store).is_dir():
        subprocess.run(
            [sys.executable, "-m", "pipelines.run", str(CONFIG), "--stage", "extract", "--no-progress"],
            check=True,
            cwd=ROOT,
        )
    default = load_config(ROOT / "evolution.yaml").metrics
    reps = open_store(store)
    names = list(reps.specs)
    sources = [
        ModelSource(
            name=n,
            kind=reps.specs[n]["kind"],
            key=reps.extract_keys[n],
            spec=reps.specs[n],
            objective=reps.specs[n].get("objective"),
        )
        for n in names
    ]
    inputs = load_inputs(
        store=store,
        models=sources,
        config=default,
        seed=0,
        torch_threads=1,
        arrays_dir=location.inputs_dir(store),
        attrs={},
    )
    models = [inputs.models[n] for n in names]
    first = models[0].plan.similarity_rows
    shared = {"freq_rank": models[0].freq_rank[first], "sentence": models[0].coords["sentence"][first]}
    arrays = save_arrays(
        inputs.arrays_dir, "similarity", {**{f"rows/{m.name}": m.plan.similarity_rows for m in models}, **shared}
    )
    bins, _ = frequency_bins(
        default.similarity.freq_bins, ranked_types=models[0].ranked_types, basis=models[0].frequency
    )
    n_layers = {m.name: m.n_layers for m in models}

    def analysis(replicates: int) -> tuple[float, dict, dict]:
        scfg = default.similarity.model_copy(update={"bootstrap": replicates})
        t0 = time.perf_counter()
        est = similarity_task(store=store, models=names, n_layers=n_layers, arrays=arrays, similarity=scfg, seed=0)
        change = {
            g: change_task(
                store=store, model=g, n_layers=n_layers[g], arrays=arrays, similarity=scfg, bins=bins, seed=0
            )
            for g in names
        }
        return time.perf_counter() - t0, est, change

    t_est, _, _ = analysis(0)
    print(f"point estimates: {t_est:.1f} s", flush=True)
    t_boot, est, change = analysis(args.replicates)
    print(f"with {args.replicates} replicates: {t_boot:.1f} s = {t_boot / t_est:.2f} x the estimates", flush=True)
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "models": names,
        "n_occurrences": int(len(first)),
        "replicates": args.replicates,
        "estimates_s": round(t_est, 1),
        "with_replicates_s": round(t_boot, 1),
        "ratio": round(t_boot / t_est, 2),
    }
    if args.check:
        every, _ = _subsets(shared["freq_rank"], bins=bins, similarity=default.similarity)
        t0 = time.perf_counter()
        ref = bootstrap_replicates(
            read=lambda g, layer: np.asarray(
                read_rows(store, g, layer, inputs.models[g].plan.similarity_rows), dtype=np.float64
            ),
            models=names,
            n_layers=n_layers,
            sentence=shared["sentence"],
            masks=every,
            methods=default.similarity.methods,
            replicates=range(args.check),
            seed=0,
            epsilon=default.similarity.epsilon,
            min_ratio=default.similarity.min_ratio,
        )
        per = (time.perf_counter() - t0) / args.check
        diff = 0.0
        for m in default.similarity.methods:
            fast = np.asarray(est["replicates"]["between"][m])[: args.check]
            diff = max(diff, float(np.nanmax(np.abs(fast - np.asarray(ref["between"][m])))))
            for g in names:
                fast = np.asarray(change[g]["replicates"][m])[: args.check]
                slow = np.asarray(ref["change"][m][g])[:, : fast.shape[1]]
                assert np.array_equal(np.isnan(fast), np.isnan(slow)), f"change {m} {g}: NaN pattern"
                diff = max(diff, float(np.nanmax(np.abs(fast - slow))))
        print(
            f"definition (resampled SVDs): {per:.1f} s per replicate, {per * args.replicates / t_est:.1f} x the "
            f"estimates for {args.replicates}; largest difference from the fast replicates {diff:.2e}"
        )
        record.update(definition_s_per_replicate=round(per, 1), checked_replicates=args.check, max_difference=diff)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"-> {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
