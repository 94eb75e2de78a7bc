"""Wall time of the similarity analysis (PWCCA / CKA and their paired bootstrap over
sentences) on the default run's text and models' size, with the bootstrap as one task
(the layout before commit e578a3f) and in blocks of replicates (``BOOTSTRAP_BLOCK``), on
the same local Dask cluster (the pipeline's, ``cluster: local``); the intervals of the two
must be identical. Read the ratio: the machine sets the seconds.

The store is the extraction of ``configs/bible-heads.yaml``: the shipped base models of
bible-full (6 layers, d = 128, as the default run's) on the test books (2,656 verses, all
of which the default run's ``similarity: {sentences: 5000}`` takes) plus UD EWT test.
It is made first when missing (``--stage extract``: no training, a few minutes).

    python benchmarks/similarity.py [--replicates 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bible-heads.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20, help="similarity.bootstrap (the default run's: 20)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "scale" / "similarity.json",
                        help="where the measurements are written (JSON)")
    args = parser.parse_args(argv)

    import evolution.analyses.similarity as similarity
    import evolution.api as ev
    from evolution.config import load_config
    from pipelines.cluster import dask_client

    cfg = load_config(CONFIG)
    store = cfg.workdir / "reps.zarr"
    if not store.is_dir():
        subprocess.run([sys.executable, "-m", "pipelines.run", str(CONFIG), "--stage", "extract", "--no-progress"],
                       check=True, cwd=ROOT)
    default = load_config(ROOT / "evolution.yaml").metrics
    options = {**default.similarity.model_dump(), "bootstrap": args.replicates}
    tokens = default.tokens.model_dump()
    layouts = {"one task (before)": args.replicates, f"blocks of {similarity.BOOTSTRAP_BLOCK}": similarity.BOOTSTRAP_BLOCK}
    rows, got = [], {}
    with dask_client(cfg.cluster) as client:
        workers = len(client.scheduler_info()["workers"])
        for label, block in layouts.items():
            similarity.BOOTSTRAP_BLOCK = block
            reps = ev.open_store(store)
            reps.cache = Path(tempfile.mkdtemp(prefix="similarity-bench-"))  # nothing cached: every task runs
            t0 = time.perf_counter()
            got[label] = ev.analyse(reps, {"similarity": options}, tokens=tokens, client=client)
            seconds = time.perf_counter() - t0
            shutil.rmtree(reps.cache, ignore_errors=True)
            tasks = 1 + -(-args.replicates // block)
            rows.append({"layout": label, "tasks": tasks, "seconds": round(seconds, 1)})
            print(f"{label:>20}: {tasks:2d} task(s), {seconds:7.1f} s", flush=True)
    first, second = (got[k] for k in layouts)
    for group in ("similarity", "change", "change_equal"):
        np.testing.assert_array_equal(first[group].interval.values, second[group].interval.values, err_msg=group)
    ratio = rows[1]["seconds"] / rows[0]["seconds"]
    print(f"blocks / one task: {ratio:.2f} of the time on {workers} worker(s); intervals identical")
    record = {"date": time.strftime("%Y-%m-%d"), "workers": workers, "replicates": args.replicates,
              "models": list(reps.specs), "n_occurrences": int(first["similarity"].attrs["n_occurrences"]),
              "layouts": rows, "ratio": round(ratio, 3)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"-> {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
