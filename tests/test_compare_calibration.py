"""``ev.compare``'s same-token change interval under a known null: two runs whose states are the
same signal (a token's centre plus a sentence's offset, fixed) plus independent noise, so the
true change is 0. Over R fresh draws of the two runs' noise (the same sentences, tokens and
signal) the interval must cover 0 at its stated level, and its half-width must match the spread
of the estimates it should cover (the half-width over 1.96 sd of the R changes).

Measured (this file's set-up: 121 sentences of 3 to 10 tokens, 802 occurrences of 20 Zipf
types, d = 16, 5 neighbours, same-token rate about 0.5, 200 replicates, R = 200; the coverage's
95% Clopper-Pearson interval; half-width over 1.96 sd of the R changes):

=========================================  ==========================  ===============
interval                                   covers 0                    half-width / sd
=========================================  ==========================  ===============
before: fixed neighbours, bootstrap        151 of 200 (0.689-0.813)    0.60
half-samples, neighbours searched again    186 of 200 (0.885-0.961)    0.94
=========================================  ==========================  ===============

The two calibrations take about 35 s of one core (``slow``). A wrong level, sign, scale or
half, or neighbours not searched again, fails the fast exact test in ``tests/test_activations.py``
(the interval against a plain sklearn definition); the rule tests below hold each half's rate
to a plain loop (copies, ties, rankings too short for a half).
The longer calibration (several set-ups, 200 replicates) is ``benchmarks/compare_calibration.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

R = 200
LEVEL = 0.95
Z = 1.959963984540054  # normal quantile of 0.975


def _signal(seed: int = 0, sentences: int = 121, types: int = 20, d: int = 16):
    """The fixed part of both runs: each occurrence's type centre plus its sentence's offset;
    Zipf-distributed types, sentences of 3 to 10 occurrences."""
    rng = np.random.default_rng(seed)
    sentence = np.repeat(np.arange(sentences), rng.integers(3, 11, sentences))
    p = 1 / np.arange(1, types + 1)
    token_id = rng.choice(types, size=len(sentence), p=p / p.sum())
    signal = 2.0 * rng.normal(size=(types, d))[token_id] + 0.7 * rng.normal(size=(sentences, d))[sentence]
    return signal, token_id, sentence


def _calibrate(interval, *, sigma: float = 2.5) -> tuple[int, float, np.ndarray]:
    """Over R draws of two runs' independent noise: how often ``interval(xa, xb, ...)`` (returning
    (estimate, [low, high])) covers 0, and its mean half-width over 1.96 sd of the estimates."""
    signal, token_id, sentence = _signal()
    est, width, covered = [], [], 0
    for r in range(R):
        rng = np.random.default_rng([11, r])
        xa = signal + sigma * rng.normal(size=signal.shape)
        xb = signal + sigma * rng.normal(size=signal.shape)
        e, (lo, hi) = interval(xa, xb, token_id=token_id, sentence=sentence, seed=r)
        est.append(e)
        width.append((hi - lo) / 2)
        covered += lo <= 0.0 <= hi
    est = np.array(est)
    return covered, float(np.mean(width) / (Z * est.std(ddof=1))), est


def _compare(xa, xb, *, token_id, sentence, seed):
    from evolution.metrics.compare import same_token_change

    out = same_token_change(
        xa, xb, token_id=token_id, sentence=sentence, neighbors=5, replicates=200, level=LEVEL, seed=seed
    )
    return out["same_token_change"], out["same_token_change_interval"]


def _fixed_neighbours(xa, xb, *, token_id, sentence, seed):
    """The interval before: the per-query changes of the whole data's neighbours, resampled by
    sentence (the neighbours held fixed), placed around the estimate."""
    from evolution.metrics.neighbors import bootstrap_replicates, knn, same_label_per_query

    qa = same_label_per_query(knn(xa, k=5), token_id)
    qb = same_label_per_query(knn(xb, k=5), token_id)
    reps = bootstrap_replicates(qb - qa, sentence=sentence, n_boot=200, seed=seed)
    e = float(qb.mean() - qa.mean())
    lo, hi = np.percentile(reps, [50 * (1 - LEVEL), 50 * (1 + LEVEL)]) + (e - reps.mean())
    return e, [lo, hi]


@pytest.mark.slow
def test_the_same_token_change_interval_covers_a_null_change_at_its_level():
    covered, ratio, est = _calibrate(_compare)
    ci = binomtest(covered, R).proportion_ci(confidence_level=0.95)
    print(f"half-samples: covers 0 in {covered} of {R} ({ci.low:.3f}-{ci.high:.3f}), half-width / sd {ratio:.3f}")
    assert abs(est.mean()) < 3 * est.std(ddof=1) / np.sqrt(R)  # the null holds: no change on average
    assert ci.low > 0.85  # tells the stated 0.95 from 0.85
    assert covered <= R - 1  # and not an interval so wide that it always covers
    assert 0.85 < ratio < 1.25


@pytest.mark.slow
def test_the_fixed_neighbours_bootstrap_misses_the_same_null():
    """The set-up tells a right interval from the one it replaced: neighbours held fixed in the
    bootstrap leave out each row's part as a neighbour of queries in other sentences."""
    covered, ratio, _ = _calibrate(_fixed_neighbours)
    ci = binomtest(covered, R).proportion_ci(confidence_level=0.95)
    print(f"fixed neighbours: covers 0 in {covered} of {R} ({ci.low:.3f}-{ci.high:.3f}), half-width / sd {ratio:.3f}")
    assert ci.high < LEVEL
    assert ratio < 0.8


def _plain_rate(x: np.ndarray, token_id: np.ndarray, kept: np.ndarray, k: int) -> float:
    """The same-token rate of the rows ``kept`` among themselves by the stated rule, one query at a
    time: the k kept others of smallest float64 squared distance (from the float32 rows), ties by
    the smaller row index."""
    x32 = x.astype(np.float32).astype(np.float64)
    rows = np.flatnonzero(kept)
    shares = []
    for i in rows:
        others = [j for j in rows if j != i]
        order = sorted(others, key=lambda j: (float(((x32[i] - x32[j]) ** 2).sum()), j))[:k]
        shares.append(np.mean([token_id[j] == token_id[i] for j in order]))
    return float(np.mean(shares))


@pytest.mark.parametrize("ranked", [(4, 16), (1, 0)])  # (1, 0): most queries run short of kept ranked rows
def test_half_sample_rates_follow_the_rule_with_copies_and_ties(monkeypatch, ranked):
    """Each half's rate equals a plain loop over its rows, on rows with copies across sentences
    (more copies than k), exact ties of distance, and ranked lists too short for a half (a
    sentence of 40 rows crowding one row's neighbourhood: that row, kept without them, is ranked
    among every row)."""
    import evolution.metrics.compare as compare

    monkeypatch.setattr(compare, "RANKED", ranked)
    rng = np.random.default_rng(3)
    sentence = np.concatenate([np.repeat(np.arange(30), rng.integers(2, 9, 30)), np.full(40, 30)])
    n = len(sentence)
    token_id = rng.integers(0, 6, n)
    x = np.round(rng.normal(size=(6, 3))[token_id] + rng.normal(size=(n, 3)), 1)  # a coarse grid: ties
    x[rng.choice(n - 40, 12, replace=False)] = x[5]  # 13 copies of one row, in several sentences
    x[-40:] = x[0] + np.round(rng.normal(size=(40, 3)) * 0.01, 3)  # the crowd around row 0
    rates = compare._Rates(x, token_id, 4)
    assert rates.whole() == pytest.approx(_plain_rate(x, token_id, np.ones(n, bool), 4), abs=1e-12)
    _, group = np.unique(sentence, return_inverse=True)
    alone = 0
    for keep in compare.half_samples(31, replicates=8, seed=2):
        kept = keep[group]
        alone += kept[0] and not kept[-1]
        assert rates.of(kept) == pytest.approx(_plain_rate(x, token_id, kept, 4), abs=1e-12)
    assert alone  # row 0 kept without its crowd
    if ranked == (1, 0):
        assert rates.longer  # the longer rankings were used


def _benchmark():
    """The module benchmarks/compare_calibration.py (benchmarks/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_calibration.py"
    spec = importlib.util.spec_from_file_location("compare_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_calibration_is_what_the_docs_quote():
    """results/method-checks/compare_calibration.json: every set-up's half-sample interval within
    the bounds above and the fixed neighbours' below them; its first set-up is this file's; the
    ranges docs/interop.md and evolution/metrics/compare.py quote are the result's."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bench = _benchmark()
    result = json.loads((root / "results" / "method-checks" / "compare_calibration.json").read_text())
    for got, want in zip(bench.signal(bench.SETUPS[0]), _signal(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert [{k: r[k] for k in bench.SETUPS[0]} for r in result["null"]] == bench.SETUPS
    for row in result["null"]:
        half, fixed = row["half"], row["fixed"]
        assert half["coverage_ci"][0] > 0.85 and 0.85 < half["half_width_over_sd"] < 1.25, row
        assert fixed["coverage_ci"][1] < LEVEL and fixed["half_width_over_sd"] < 0.8, row

    def span(name, key, fmt):
        values = [row[name][key] for row in result["null"]]
        return f"{fmt(min(values))}-{fmt(max(values))}"

    covered = span("half", "covered", str) + " of 200 at " + span("half", "half_width_over_sd", "{:.2f}".format)
    first = result["null"][0]
    quoted = (
        f"{first['fixed']['covered']} of 200",
        f"{first['half']['covered']} of 200",
        f"{first['half']['half_width_over_sd']:.2f} of the spread",
        covered,
    )
    for doc in ("docs/interop.md", "evolution/metrics/compare.py"):
        text = " ".join((root / doc).read_text(encoding="utf-8").split())
        for q in quoted:
            assert q in text, (doc, q)
    analysis = result["neighbors_analysis"]
    text = " ".join((root / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    assert f"covered the rate's mean in {analysis['fixed']['covered']}" in text
    assert f"at {analysis['fixed']['half_width_over_sd']:.2f} of its spread" in text
