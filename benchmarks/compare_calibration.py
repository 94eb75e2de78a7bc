"""``ev.compare``'s same-token change interval under a known null, and what it costs.

Two runs whose states are the same signal (each occurrence's type centre plus its sentence's
offset, fixed) plus independent noise: the true change of the same-token rate is 0. Over R draws
of the two runs' noise (the same sentences, tokens and signal), per set-up:

* ``fixed``: the interval before (the whole data's neighbours held fixed, each query's change
  resampled with its sentence: ``bootstrap_replicates`` of qb - qa, centred);
* ``jackknife``: an alternative measured, the same resamples of each row's delete-1 jackknife
  pseudo-value (its query's change plus its part as a neighbour of the other queries);
* ``half``: :func:`evolution.metrics.compare.same_token_change` (half-samples of the sentences,
  the neighbours searched again in each, the delete-d jackknife's scale).

Each: how often the interval covers 0 (with its 95% Clopper-Pearson interval) and its mean
half-width over 1.96 sd of the R estimates (1: as wide as the spread it should cover).

``neighbors_analysis``: the pipeline's neighbours analysis gives one run's same-token rate the
fixed-neighbours interval (:func:`evolution.metrics.neighbors.bootstrap_interval`); over R fresh
data sets of one distribution (new sentences, tokens and noise; the type centres fixed), how
often it covers the rate's mean over the data sets, and its half-width over 1.96 sd, beside the
half-sample interval of the same rate.

``seconds``: one layer of 5,000 occurrences x 64 features (200 Zipf types, sentences of 20):
the same-token part before (two searches of 10 neighbours, 200 sentence resamples of the
per-query change) and after (:func:`same_token_change`, 200 half-samples), and the whole
:func:`evolution.metrics.compare.compare_layer` (k = 50, 5 restarts, 200 replicates); the best
of ``--timings`` runs, one thread.

    python benchmarks/compare_calibration.py [--reps 200] [--out results/method-checks/compare_calibration.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, as a worker
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "method-checks" / "compare_calibration.json"
LEVEL = 0.95
Z = 1.959963984540054
#: the null set-ups: sentences, their lengths (low, high), types (Zipf), features, neighbours,
#: the noise's sd (centres 2 sd, sentence offsets 0.7 sd per feature)
SETUPS = [
    {"sentences": 121, "lengths": [3, 10], "types": 20, "d": 16, "neighbors": 5, "noise": 2.5},
    {"sentences": 300, "lengths": [4, 16], "types": 30, "d": 16, "neighbors": 5, "noise": 2.5},
    {"sentences": 300, "lengths": [4, 16], "types": 30, "d": 16, "neighbors": 10, "noise": 2.5},
    {"sentences": 300, "lengths": [4, 16], "types": 30, "d": 16, "neighbors": 5, "noise": 4.0},
    {"sentences": 300, "lengths": [4, 16], "types": 30, "d": 32, "neighbors": 10, "noise": 3.5},
]
REPLICATES = 200


def signal(setup: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(signal (n, d), token_id (n,), sentence (n,)) of ``setup``."""
    rng = np.random.default_rng(seed)
    s, (lo, hi), t, d = setup["sentences"], setup["lengths"], setup["types"], setup["d"]
    sentence = np.repeat(np.arange(s), rng.integers(lo, hi + 1, s))
    p = 1 / np.arange(1, t + 1)
    token_id = rng.choice(t, size=len(sentence), p=p / p.sum())
    return 2.0 * rng.normal(size=(t, d))[token_id] + 0.7 * rng.normal(size=(s, d))[sentence], token_id, sentence


def fixed_and_jackknife(xa, xb, token_id, sentence, *, k: int, replicates: int, seed: int):
    """The interval before the half-samples, ``fixed``: each query's change with the whole data's
    neighbours (held fixed), resampled by sentence; and ``jackknife``: the same with each row's
    delete-1 pseudo-value q_i + psi_i in place of q_i, psi_i the change of the others' rates
    when row i is left out (each query whose k neighbours hold i takes its (k + 1)-th instead:
    (match(i) - match(k + 1)-th) / k). Each (estimate, [low, high]) around the estimate."""
    from evolution.metrics.compare import ranked_neighbors
    from evolution.metrics.mi import centred_interval
    from evolution.metrics.neighbors import bootstrap_replicates

    per = []
    for x in (xa, xb):
        ranked = ranked_neighbors(x, k + 1)
        match = (token_id[ranked] == token_id[:, None]).astype(np.float64)
        q = match[:, :k].mean(axis=1)
        psi = np.zeros(len(q))
        np.add.at(psi, ranked[:, :k].ravel(), ((match[:, :k] - match[:, k : k + 1]) / k).ravel())
        per.append((q, q + psi))
    (qa, va), (qb, vb) = per
    e = float(qb.mean() - qa.mean())
    out = {}
    for name, values in (("fixed", qb - qa), ("jackknife", vb - va)):
        reps = bootstrap_replicates(values, sentence=sentence, n_boot=replicates, seed=seed)
        out[name] = centred_interval(reps, e, LEVEL)
    return e, out


def half_interval(xa, xb, token_id, sentence, *, k: int, replicates: int, seed: int):
    from evolution.metrics.compare import same_token_change

    out = same_token_change(
        xa, xb, token_id=token_id, sentence=sentence, neighbors=k, replicates=replicates, level=LEVEL, seed=seed
    )
    return out["same_token_change"], out["same_token_change_interval"]


def _summary(est: list[float], intervals: list, truth: float = 0.0) -> dict:
    est_a, ci = np.array(est), np.array(intervals)
    covered = int(((ci[:, 0] <= truth) & (ci[:, 1] >= truth)).sum())
    cp = binomtest(covered, len(est_a)).proportion_ci(confidence_level=0.95)
    return {
        "covered": covered,
        "reps": len(est_a),
        "coverage_ci": [float(cp.low), float(cp.high)],
        "half_width_over_sd": float((ci[:, 1] - ci[:, 0]).mean() / 2 / (Z * est_a.std(ddof=1))),
    }


def null_coverage(setup: dict, *, reps: int, replicates: int = REPLICATES) -> dict:
    x, token_id, sentence = signal(setup)
    est: list[float] = []
    intervals: dict[str, list] = {"fixed": [], "jackknife": [], "half": []}
    t0 = time.perf_counter()
    for r in range(reps):
        rng = np.random.default_rng([11, r])
        xa = x + setup["noise"] * rng.normal(size=x.shape)
        xb = x + setup["noise"] * rng.normal(size=x.shape)
        kw = {"k": setup["neighbors"], "replicates": replicates, "seed": r}
        e, before = fixed_and_jackknife(xa, xb, token_id, sentence, **kw)
        e2, after = half_interval(xa, xb, token_id, sentence, **kw)
        assert abs(e - e2) < 1e-12
        est.append(e)
        for name, ci in (*before.items(), ("half", after)):
            intervals[name].append(ci)
    from evolution.metrics.neighbors import knn, same_label_per_query

    rate = float(same_label_per_query(knn(xa, k=setup["neighbors"]), token_id).mean())
    return {
        **setup,
        "rows": len(token_id),
        "rate": rate,
        "sd": float(np.std(est, ddof=1)),
        "mean": float(np.mean(est)),
        **{name: _summary(est, ci) for name, ci in intervals.items()},
        "seconds": time.perf_counter() - t0,
    }


def neighbors_analysis(*, reps: int, sentences: int = 150, k: int = 5, replicates: int = REPLICATES) -> dict:
    """One run's same-token rate over fresh data sets: the neighbours analysis's interval
    (fixed neighbours, percentile) and the half-sample one, against the mean over the data sets."""
    from evolution.metrics.compare import _Rates, half_samples
    from evolution.metrics.neighbors import bootstrap_interval, same_label_per_query

    setup = {**SETUPS[1], "sentences": sentences, "neighbors": k}
    centres = 2.0 * np.random.default_rng(0).normal(size=(setup["types"], setup["d"]))
    est, fixed, half = [], [], []
    for r in range(reps):
        _, token_id, sentence = signal(setup, seed=1000 + r)
        rng = np.random.default_rng([12, r])
        x = centres[token_id] + 0.7 * rng.normal(size=(sentences, setup["d"]))[sentence]
        x = x + setup["noise"] * rng.normal(size=x.shape)
        rates = _Rates(x, token_id, k)
        q = same_label_per_query(rates.ranked[:, :k], token_id)
        e = float(q.mean())
        est.append(e)
        fixed.append(bootstrap_interval(q, sentence=sentence, n_boot=replicates, seed=r, level=LEVEL))
        _, group = np.unique(sentence, return_inverse=True)
        h = np.array([rates.of(keep[group]) for keep in half_samples(sentences, replicates=replicates, seed=r)])
        m = sentences // 2
        h = h.mean() + np.sqrt(m / (sentences - m)) * (h - h.mean())
        half.append(np.percentile(h, [50 * (1 - LEVEL), 50 * (1 + LEVEL)]) + (e - h.mean()))
    truth = float(np.mean(est))
    return {
        "sentences": sentences,
        "neighbors": k,
        "rate": truth,
        "sd": float(np.std(est, ddof=1)),
        "fixed": _summary(est, fixed, truth),
        "half": _summary(est, half, truth),
    }


def seconds(*, n: int = 5000, d: int = 64, timings: int = 2) -> dict:
    from evolution.metrics.compare import compare_layer, same_token_change

    rng = np.random.default_rng(5)
    p = 1 / np.arange(1, 201)
    token_id = rng.choice(200, size=n, p=p / p.sum())
    sentence = np.arange(n) // 20
    xa = rng.normal(size=(200, d))[token_id] + 1.5 * rng.normal(size=(n, d))
    xb = xa + 0.5 * rng.normal(size=(n, d))

    def best(f) -> float:
        out = []
        for _ in range(timings):
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
        return min(out)

    def fixed() -> None:  # the code before: two searches, the per-query change resampled
        from evolution.metrics.mi import centred_interval
        from evolution.metrics.neighbors import bootstrap_replicates, knn, same_label_per_query

        qa = same_label_per_query(knn(xa, k=10), token_id)
        qb = same_label_per_query(knn(xb, k=10), token_id)
        reps = bootstrap_replicates(qb - qa, sentence=sentence, n_boot=200, seed=0)
        centred_interval(reps, float(qb.mean() - qa.mean()), LEVEL)

    before = best(fixed)
    after = best(lambda: same_token_change(xa, xb, token_id=token_id, sentence=sentence, neighbors=10, replicates=200))
    whole = best(
        lambda: compare_layer(
            xa, xb, token_id=token_id, sentence=sentence, mi_rows=np.ones(n, bool), k=50, neighbors=10, bootstrap=200
        )
    )
    return {
        "rows": n,
        "d": d,
        "same_token_before": before,
        "same_token_after": after,
        "compare_layer_after": whole,
        "compare_layer_before": whole - after + before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="draws of the noise (fresh data sets)")
    parser.add_argument("--timings", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result: dict = {"level": LEVEL, "replicates": REPLICATES, "null": []}
    for setup in SETUPS:
        result["null"].append(null_coverage(setup, reps=args.reps))
        print(json.dumps(result["null"][-1]), flush=True)
    result["neighbors_analysis"] = neighbors_analysis(reps=args.reps)
    print(json.dumps(result["neighbors_analysis"]), flush=True)
    result["seconds"] = seconds(timings=args.timings)
    print(json.dumps(result["seconds"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
