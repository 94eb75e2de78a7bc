"""The bootstrap's bias and width on synthetic data: the measurements behind the centred
intervals of docs/metrics.md ("Similarity", "MI: the interval over sentences"). No true value is
computed: the checks are whether an interval holds the estimate, and how its width compares with
the estimate's spread over fresh data sets of the same distribution.

Four measurements, each seeded, written to ``results/method-checks/bootstrap_checks.json``:

* ``pwcca_bias``: PWCCA distance of two synthetic views (d = 32, sentences of 8 rows) at 12, 62
  and 312 occurrences per dimension, with the plain percentile interval of its resamples of
  whole sentences (the definition: rows resampled, every SVD redone) and the centred one
  (:func:`evolution.metrics.mi.centred_interval`). A resample repeats rows, and CCA fits
  repeated rows closer, so the replicates sit below the estimate, the more so the fewer rows
  per dimension.
* ``mi_coverage``: MI of k-means clusters (k = 300) with the labels of 200 Zipf-distributed
  types (sentences of 20 occurrences), at 10,000 and 60,000 occurrences: how far the plain
  percentile interval of :func:`evolution.metrics.mi.bootstrap_mi` sits from the estimate (in
  interval widths), and the interval's width against the spread (3.92 sd, a 95% normal
  interval's width) of the estimate over the bootstrapped data set and fresh ones from the same
  distribution, partitioned by the same clusters (:func:`mi_coverage`), for 5 seeds of the whole
  set-up. The occurrences of a sentence are independent here, so resampling sentences is
  resampling occurrences in groups of 20.
* ``pwcca_repeated``: where canonical correlations repeat (here: view b holds twelve of view
  a's directions exactly), PWCCA depends on the basis the SVD picks for the repeated
  directions: rotating view b's features, which leaves it unchanged where the correlations are
  distinct (the control), moves it.
* ``mi_replicate_seconds``: one MI bootstrap replicate at the paper configuration's size
  (822,374 occurrences, 1,000 types, k = 2,000, 3 restarts; random labels and clusters, whose
  cost is the same: a few bincounts), on the machine that runs it, one thread.

    python benchmarks/bootstrap_checks.py [--fresh 50] [--seeds 5] [--out results/method-checks/bootstrap_checks.json]
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

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "method-checks" / "bootstrap_checks.json"
LEVEL = 0.95
#: the set-ups, written into the result beside what they gave
SETTINGS = {
    "pwcca": {"d": 32, "rows_per_sentence": 8, "rows_per_dim": [12, 62, 312], "replicates": 200},
    "mi": {
        "types": 200,
        "k": 300,
        "d": 16,
        "sizes": [10_000, 60_000],
        "sentence": 20,
        "replicates": 200,
        "restarts": 5,
    },
    "repeated": {"d": 32, "shared": 12, "n": 2000},
    "replicate": {"n": 822_374, "types": 1000, "k": 2000, "restarts": 3},
}


def _views(
    rows_per_dim: int,
    *,
    d: int = SETTINGS["pwcca"]["d"],
    rows_per_sentence: int = SETTINGS["pwcca"]["rows_per_sentence"],
    seed: int = 0,
):
    """Two (n, d) views of one latent with a sentence effect, and each row's sentence."""
    rng = np.random.default_rng([seed, rows_per_dim])
    n = rows_per_dim * d
    sentence = np.arange(n) // rows_per_sentence
    latent = 0.5 * rng.standard_normal((sentence[-1] + 1, d))[sentence] + rng.standard_normal((n, d))
    a = latent @ rng.standard_normal((d, d)) + 3.0 * rng.standard_normal((n, d))
    b = latent @ rng.standard_normal((d, d)) + 3.0 * rng.standard_normal((n, d))
    return a, b, sentence


def pwcca_bias(
    rows_per_dim=tuple(SETTINGS["pwcca"]["rows_per_dim"]),
    *,
    replicates: int = SETTINGS["pwcca"]["replicates"],
    seed: int = 0,
) -> list[dict]:
    """Per ``rows_per_dim``: the PWCCA distance of :func:`_views` (``estimate``), the mean of its
    ``replicates`` resamples of whole sentences (rows resampled, every SVD redone), their plain
    95% percentile interval, the centred one, and whether the plain one holds the estimate."""
    from evolution.metrics.plan import rows_by_sentence
    from evolution.metrics.resample import sentence_draws
    from evolution.metrics.similarity import View, pwcca_distance

    out = []
    for r in rows_per_dim:
        a, b, sentence = _views(r, seed=seed)
        estimate = pwcca_distance(View(a), View(b))
        groups = list(rows_by_sentence(sentence).values())
        values = []
        for draw in sentence_draws(len(groups), replicates=replicates, seed=seed):
            rows = np.concatenate([groups[s] for s in draw])
            values.append(pwcca_distance(View(a[rows], min_ratio=0), View(b[rows], min_ratio=0)))
        row = _intervals(np.array(values), estimate)
        out.append({"rows_per_dim": r, **row, "plain_covers": bool(row["plain"][0] <= estimate <= row["plain"][1])})
    return out


def _intervals(values: np.ndarray, estimate: float) -> dict:
    """The replicates ``values`` (replicates,) of ``estimate``: the estimate, their mean, their plain
    :data:`LEVEL` percentile interval and the centred one (:func:`evolution.metrics.mi.centred_interval`)."""
    from evolution.metrics.mi import centred_interval

    plain = np.percentile(values, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return {
        "estimate": float(estimate),
        "replicate_mean": float(np.mean(values)),
        "plain": plain.tolist(),
        "centred": centred_interval(values, estimate, LEVEL),
    }


def _zipf_data(n: int, *, types: int, d: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vectors (n, d) float32, labels (n,), sentence (n,)): ``n`` occurrences of ``types`` Zipf(1)
    types, each its type's centre plus Gaussian noise (sd 1.2), in sentences of 20; the centres are
    drawn from ``default_rng(0)``, so that every data set comes from one distribution."""
    centres = np.random.default_rng(0).standard_normal((types, d))
    p = 1.0 / np.arange(1, types + 1)
    labels = rng.choice(types, size=n, p=p / p.sum())
    vectors = (centres[labels] + 1.2 * rng.standard_normal((n, d))).astype(np.float32)
    return vectors, labels, np.arange(n) // SETTINGS["mi"]["sentence"]


def miss_widths(plain, estimate: float) -> float:
    """How far the interval ``plain`` (low, high) lies from ``estimate``, in its widths; 0 when it
    holds it."""
    low, high = float(plain[0]), float(plain[1])
    return max(low - estimate, estimate - high, 0.0) / (high - low)


def mi_coverage(
    sizes=tuple(SETTINGS["mi"]["sizes"]),
    *,
    types: int = SETTINGS["mi"]["types"],
    k: int = SETTINGS["mi"]["k"],
    d: int = SETTINGS["mi"]["d"],
    fresh: int = 50,
    replicates: int = SETTINGS["mi"]["replicates"],
    restarts: int = SETTINGS["mi"]["restarts"],
    seed: int = 0,
) -> list[dict]:
    """The interval of :func:`bootstrap_mi` is the sampling variability of the sentences given
    the clusters, so its truth is the spread of the estimate over fresh data sets assigned to
    the same clusters: k-means runs once on data set 0, its centroids (each cluster's mean)
    partition every data set by the nearest one. The spread of k-means itself (``restarts``
    seeds on data set 0) is reported beside it, as the store keeps it (``mi_sd``).

    One row per size: ``n``, ``types``, ``k``, ``restart_sd``, and for ``mi`` and ``corrected``
    (MI minus its shuffled control): ``estimate``, ``replicate_mean``, ``plain`` and ``centred``
    intervals, ``width`` (the plain one's), ``miss_widths`` (how far the plain interval lies from
    the estimate, in widths; 0 when it holds it), ``side`` (where the plain interval lies),
    ``fresh_sd`` over the data sets (the bootstrapped one and ``fresh`` more) and ``fresh_width``
    = 3.92 ``fresh_sd``."""
    from evolution.metrics.mi import bootstrap_mi, kmeans_labels, mutual_information
    from evolution.metrics.search import nearest

    out = []
    for n in sizes:
        vectors, labels, sentence = _zipf_data(n, types=types, d=d, rng=np.random.default_rng([seed, n, 0]))
        first = kmeans_labels(vectors, k=k, seed=seed)
        centres = np.stack([vectors[first == c].mean(axis=0) for c in np.unique(first)]).astype(np.float64)
        restart_mi = [mutual_information(labels, kmeans_labels(vectors, k=k, seed=seed + r)) for r in range(restarts)]
        estimates = []
        for f in range(fresh + 1):  # data set 0 is bootstrapped; all give the estimate's spread
            if f:
                vectors, labels, sentence = _zipf_data(n, types=types, d=d, rng=np.random.default_rng([seed, n, f]))
            clusters = nearest(centres, vectors, 1)[1][:, 0]  # each occurrence's nearest centroid
            shuffled = mutual_information(np.random.default_rng([seed, n, f, 1]).permutation(labels), clusters)
            mi = mutual_information(labels, clusters)
            estimates.append((mi, mi - shuffled))
            if f == 0:
                boot = bootstrap_mi(labels, [clusters], sentence, replicates=replicates, seed=seed)
                first_set = {
                    "mi": (mi, boot["mi"][:, 0]),
                    "corrected": (mi - shuffled, boot["mi"][:, 0] - boot["shuffled"]),
                }
        row = {
            "seed": seed,
            "n": n,
            "types": types,
            "k": k,
            "occurrences_per_cluster": n / k,
            "restart_sd": float(np.std(restart_mi, ddof=1)),
        }
        for i, (name, (estimate, values)) in enumerate(first_set.items()):
            x = _intervals(values, estimate)
            low, high = x["plain"]
            spread = float(np.std([e[i] for e in estimates], ddof=1))
            row[name] = {
                **x,
                "miss_widths": miss_widths(x["plain"], estimate),
                "side": "above" if low > estimate else "below" if high < estimate else "covers",
                "width": high - low,
                "fresh_sd": spread,
                "fresh_width": 3.92 * spread,
            }
        out.append(row)
    return out


def pwcca_repeated(
    *,
    d: int = SETTINGS["repeated"]["d"],
    shared: int = SETTINGS["repeated"]["shared"],
    n: int = SETTINGS["repeated"]["n"],
    seed: int = 0,
) -> dict:
    """PWCCA (weights from view a) is unchanged when view b's features are rotated, as long as
    the canonical correlations are distinct: a's canonical variates do not move. Where
    correlations repeat (here view b holds ``shared`` of view a's directions exactly: that many
    correlations of 1) the variates within the repeated block are any basis of it, the SVD picks
    one, and the weights (sums of absolute loadings) follow that pick. Control: the same views
    without the shared block."""
    from evolution.metrics.similarity import View, pwcca

    rng = np.random.default_rng(seed)
    common = rng.standard_normal((n, shared))
    latent = rng.standard_normal((n, d))
    a = np.hstack([common, rng.standard_normal((n, d - shared))]) @ rng.standard_normal((d, d))
    b = np.hstack([common @ rng.standard_normal((shared, shared)), latent[:, shared:]])
    a_control = latent @ rng.standard_normal((d, d)) + rng.standard_normal((n, d))
    b_control = latent @ rng.standard_normal((d, d)) + rng.standard_normal((n, d))
    rotation = np.linalg.qr(rng.standard_normal((d, d)))[0]
    rho = np.linalg.svd(View(a).basis_.T @ View(b).basis_, compute_uv=False)
    return {
        "correlations_at_1": int((rho > 1 - 1e-9).sum()),
        "repeated": {"pwcca": pwcca(View(a), View(b)), "b_rotated": pwcca(View(a), View(b @ rotation))},
        "control": {
            "pwcca": pwcca(View(a_control), View(b_control)),
            "b_rotated": pwcca(View(a_control), View(b_control @ rotation)),
        },
    }


def mi_replicate_seconds(
    *,
    n: int = SETTINGS["replicate"]["n"],
    types: int = SETTINGS["replicate"]["types"],
    k: int = SETTINGS["replicate"]["k"],
    restarts: int = SETTINGS["replicate"]["restarts"],
    replicates: int = 5,
) -> float:
    """Seconds per replicate of :func:`evolution.metrics.mi.bootstrap_mi` at this size, after one
    warm-up replicate."""
    from evolution.metrics.mi import bootstrap_mi

    rng = np.random.default_rng(0)
    labels = rng.integers(0, types, n)
    clusterings = [rng.integers(0, k, n) for _ in range(restarts)]
    sentence = np.sort(rng.integers(0, n // 25, n))
    bootstrap_mi(labels, clusterings, sentence, replicates=1)  # warm-up
    t0 = time.perf_counter()
    bootstrap_mi(labels, clusterings, sentence, replicates=replicates)
    return (time.perf_counter() - t0) / replicates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", type=int, default=50, help="fresh data sets for the MI estimate's spread")
    parser.add_argument("--seeds", type=int, default=5, help="synthetic MI data sets (seeds 0, 1, ...)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = {
        "settings": {**SETTINGS, "mi": {**SETTINGS["mi"], "seeds": args.seeds}},
        "fresh": args.fresh,
        "pwcca_bias": pwcca_bias(),
        "mi_coverage": [row for s in range(args.seeds) for row in mi_coverage(fresh=args.fresh, seed=s)],
        "pwcca_repeated": pwcca_repeated(),
        "mi_replicate_seconds": mi_replicate_seconds(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
