"""The neighbour search by the stated tie rule (``exact_knn``: the float32 search's candidates,
near-ties re-ranked in float64, then the smaller index) against the float32 search alone, on
20,000 rows of 256 features around 300 "types" with a block of 2,000 identical rows (layer 0's
repeated tokens): the time ratio of each of ``--repeats`` runs and how many queries were
searched wider. ``python benchmarks/knn_ties.py``; quoted in docs/metrics.md ("Ties")."""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from evolution.metrics.neighbors import knn
from evolution.metrics.search import nearest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 300, args.rows)
    x = (rng.normal(size=(300, args.features))[tok] + 0.3 * rng.normal(size=(args.rows, args.features))).astype(
        np.float32
    )
    x[:2000] = x[0]
    wider: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: wider.append(r.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("evolution.metrics.neighbors")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    out = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        knn(x, k=args.k)
        ruled = time.perf_counter() - t
        t = time.perf_counter()
        nearest(x, x, args.k + 1)
        plain = time.perf_counter() - t
        out.append({"rule_s": round(ruled, 2), "float32_s": round(plain, 2), "ratio": round(ruled / plain, 2)})
    print(json.dumps({"rows": args.rows, "features": args.features, "k": args.k, "runs": out, "wider": wider[:3]}))


if __name__ == "__main__":
    main()
