"""results/method-checks: benchmarks/bootstrap_checks.py (the synthetic measurements behind the
centred bootstrap intervals) and benchmarks/type_counts.py (the corpus's type counts, the MI control
of a proportional split by k): what their committed results say, and docs/metrics.md quoting them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "results" / "method-checks" / "bootstrap_checks.json"
_words = {12: "twelve"}


def _result() -> dict:
    return json.loads(RESULT.read_text(encoding="utf-8"))


def _script(name: str = "bootstrap_checks"):
    """The module benchmarks/<name>.py (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pwcca_parts_of_the_committed_result_are_what_the_script_computes():
    script, committed = _script(), _result()
    assert committed["settings"]["pwcca"]["rows_per_dim"][:2] == [12, 62]
    for new, old in zip(script.pwcca_bias(rows_per_dim=(12, 62)), committed["pwcca_bias"][:2], strict=True):
        assert new["rows_per_dim"] == old["rows_per_dim"]
        np.testing.assert_allclose(
            [new["estimate"], *new["plain"], *new["centred"]],
            [old["estimate"], *old["plain"], *old["centred"]],
            rtol=0,
            atol=1e-9,
        )
    new, old_rep = script.pwcca_repeated(), committed["pwcca_repeated"]
    assert new["correlations_at_1"] == old_rep["correlations_at_1"]
    np.testing.assert_allclose(
        [new["control"][v] for v in ("pwcca", "b_rotated")],
        [old_rep["control"][v] for v in ("pwcca", "b_rotated")],
        rtol=0,
        atol=1e-9,
    )
    # where correlations repeat, PWCCA follows the basis of the repeated block that the SVD picks, and
    # that pick follows the BLAS kernel's rounding: another processor gives values within a few 1e-3
    np.testing.assert_allclose(
        [new["repeated"][v] for v in ("pwcca", "b_rotated")],
        [old_rep["repeated"][v] for v in ("pwcca", "b_rotated")],
        rtol=0,
        atol=5e-3,
    )


def test_pwcca_moves_with_a_rotation_of_b_only_where_correlations_repeat():
    """With distinct canonical correlations, a's canonical variates (and so PWCCA's weights from a)
    do not depend on b's basis; with twelve correlations of 1 they do."""
    r = _result()["pwcca_repeated"]
    assert r["correlations_at_1"] == 12
    assert abs(r["control"]["pwcca"] - r["control"]["b_rotated"]) < 1e-12
    assert abs(r["repeated"]["pwcca"] - r["repeated"]["b_rotated"]) > 1e-4


def test_the_bootstrap_bias_the_centring_removes_is_in_the_committed_result():
    """Resampling repeats rows: the replicates' PWCCA distances sit below the estimate, most at the
    fewest rows per dimension, so the plain interval can exclude the estimate and the centred one
    holds it; the MI replicates sit above the estimate and the control-subtracted ones below."""
    r = _result()
    bias = [x["estimate"] - x["replicate_mean"] for x in r["pwcca_bias"]]
    assert all(b > 0 for b in bias) and bias == sorted(bias, reverse=True)
    assert not r["pwcca_bias"][0]["plain_covers"]
    for x in [*r["pwcca_bias"], *(row[k] for row in r["mi_coverage"] for k in ("mi", "corrected"))]:
        # centred: the plain interval moved by (estimate - mean of the replicates)
        shift = x["estimate"] - x["replicate_mean"]
        np.testing.assert_allclose(x["centred"], [x["plain"][0] + shift, x["plain"][1] + shift], rtol=0, atol=1e-12)
    for row in r["mi_coverage"]:
        assert row["mi"]["side"] == "above" and row["corrected"]["side"] == "below"


def test_miss_widths_and_a_small_mi_coverage_run_agree_with_their_definitions():
    """An interval [1, 3] lies 0.5 widths below 4 and 0.25 widths above 0.5, and holds 2; on a small
    run every row's fields agree with each other (side, miss, width, centring, 3.92 sd)."""
    script = _script()
    assert script.miss_widths([1.0, 3.0], 4.0) == pytest.approx(0.5)
    assert script.miss_widths([1.0, 3.0], 0.5) == pytest.approx(0.25)
    assert script.miss_widths([1.0, 3.0], 2.0) == 0.0
    rows = script.mi_coverage(sizes=(3000,), types=20, k=30, d=8, fresh=3, replicates=40, restarts=2)
    for name in ("mi", "corrected"):
        x = rows[0][name]
        low, high = x["plain"]
        assert x["width"] == pytest.approx(high - low)
        assert x["side"] == ("above" if low > x["estimate"] else "below" if high < x["estimate"] else "covers")
        assert x["miss_widths"] == pytest.approx(script.miss_widths(x["plain"], x["estimate"]))
        assert x["fresh_width"] == pytest.approx(3.92 * x["fresh_sd"])
        shift = x["estimate"] - x["replicate_mean"]
        np.testing.assert_allclose(x["centred"], [low + shift, high + shift])


def test_docs_metrics_quotes_the_bootstrap_checks():
    r = _result()
    text = " ".join((REPO / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    f3 = "{:.3f}".format
    rows = {x["rows_per_dim"]: x for x in r["pwcca_bias"]}
    low = rows[12]
    assert (
        f"an estimate of {f3(low['estimate'])} at 12 occurrences per dimension, plain percentile interval "
        f"[{f3(low['plain'][0])}, {f3(low['plain'][1])}], excluding it;"
    ) in text
    for n in (62, 312):
        x = rows[n]
        assert f"{f3(x['estimate'])} in [{f3(x['plain'][0])}, {f3(x['plain'][1])}]" in text
    rep = r["pwcca_repeated"]
    control = abs(rep["control"]["pwcca"] - rep["control"]["b_rotated"])
    assert (
        f"moves PWCCA from {rep['repeated']['pwcca']:.4f} to {rep['repeated']['b_rotated']:.4f}, where with "
        f"distinct correlations (the control) it moves by {control:.0e}"
    ) in text
    s = r["settings"]
    assert f"synthetic views, d = {s['pwcca']['d']}, `benchmarks/bootstrap_checks.py`" in text
    assert f"views that share {_words[s['repeated']['shared']]} directions exactly" in text
    assert (
        f"{s['mi']['types']} Zipf types, k = {s['mi']['k']}, "
        f"{' and '.join(f'{n:,}' for n in s['mi']['sizes'])} occurrences, {s['mi']['seeds']} seeds"
    ) in text
    rep = s["replicate"]
    assert (
        f"at {rep['n']:,} occurrences, {rep['types']:,} types, k = {rep['k']:,} and {rep['restarts']} restarts" in text
    )
    seconds = r["mi_replicate_seconds"]
    assert (
        f"{seconds:.2f} s at 822,374 occurrences, 1,000 types, k = 2,000 and 3 restarts on one core "
        f"(`benchmarks/bootstrap_checks.py`; 200 replicates: ~{200 * seconds:.0f} s per layer and target)"
    ) in text
    cov = r["mi_coverage"]
    seeds = len({x["seed"] for x in cov})
    miss = [x[k]["miss_widths"] for x in cov for k in ("mi", "corrected")]
    assert (
        f"60,000 occurrences, {seeds} seeds) the plain percentile intervals missed the estimate by "
        f"{min(miss):.1f}-{max(miss):.1f} of their widths at every seed" in text
    )

    assert f"over the bootstrapped data set and {r['fresh']} fresh ones, partitioned by the same clusters" in text
    restart = [x["restart_sd"] for x in cov]
    fresh = [x["mi"]["fresh_sd"] for x in cov]
    assert (
        f"{min(restart):.3f}-{max(restart):.3f} nats over {s['mi']['restarts']} restarts, as over the data "
        f"sets ({min(fresh):.3f}-{max(fresh):.3f})"
    ) in text
    sizes = s["mi"]["sizes"]
    docstring = " ".join((REPO / "evolution" / "metrics" / "mi.py").read_text(encoding="utf-8").split())
    assert (
        f"missed the estimate by {min(miss):.1f}-{max(miss):.1f} widths at {sizes[0] / s['mi']['k']:.0f}-"
        f"{sizes[-1] / s['mi']['k']:.0f} occurrences per cluster"
    ) in docstring

    def ratios(n, k):
        return [x[k]["width"] / x[k]["fresh_width"] for x in cov if x["n"] == n]

    big = {k: ratios(60_000, k) for k in ("mi", "corrected")}
    assert (
        f"at 60,000, {min(big['mi']):.2f}-{max(big['mi']):.2f} of it for the MI (mean {np.mean(big['mi']):.2f}) "
        f"and {min(big['corrected']):.2f}-{max(big['corrected']):.2f} for MI minus the control (mean "
        f"{np.mean(big['corrected']):.2f}); at 10,000 wider (means {np.mean(ratios(10_000, 'mi')):.2f} and "
        f"{np.mean(ratios(10_000, 'corrected')):.2f})"
    ) in text
    assert all(np.mean(ratios(10_000, k)) > 1 for k in ("mi", "corrected"))


def _type_counts() -> dict:
    return json.loads((REPO / "results" / "method-checks" / "type_counts.json").read_text(encoding="utf-8"))


def test_the_proportional_split_is_what_its_definition_says():
    """benchmarks/type_counts.py's clustering on a small case worked by hand: counts 6, 3, 1 and
    k = 4 (N = 10): the first type gets round(2.4) = 2 clusters, the second round(1.2) = 1, the third
    (0.4 < 1) the one cluster left; then the MI is H(X) and the control is a plain loop's MI."""
    from evolution.metrics.mi import entropy, mutual_information

    module = _script("type_counts")
    clusters = module.proportional_clusters(np.array([6, 3, 1]), 4)
    assert clusters.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    labels = np.repeat([0, 1, 2], [6, 3, 1])
    assert mutual_information(labels, clusters) == pytest.approx(entropy(labels))
    # three rare types sharing a cluster lose their identity there: counts 5, 1, 1, 1 at k = 2
    # (5 x 2 / 8 = 1.25: one cluster; the rest share the other), H(X | C) = 3/8 log 3
    shared = module.proportional_clusters(np.array([5, 1, 1, 1]), 2)
    assert shared.tolist() == [0] * 5 + [1] * 3
    labels = np.repeat([0, 1, 2, 3], [5, 1, 1, 1])
    assert mutual_information(labels, shared) == pytest.approx(entropy(labels) - 3 / 8 * np.log(3))
    # rounded, not floored: counts 7, 2, 1 at k = 4 give the first type round(2.8) = 3 clusters
    assert module.proportional_clusters(np.array([7, 2, 1]), 4).tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]


def test_docs_metrics_quotes_the_type_counts():
    r, store = _type_counts(), REPO / "results" / "bible-paper" / "metrics.zarr"
    from evolution.metrics.results import open_metrics

    ds = open_metrics(store, "mi_types").sel(model="mt", target="input")
    sel = r["selection"]
    assert sel["occurrences"] == int(ds.n.sel(types=1000)) and sel["entropy"] == pytest.approx(
        float(ds.entropy.sel(types=1000)), abs=1e-9
    )  # the script counts the store's own occurrences
    text = " ".join((REPO / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    c, tr = r["types"]["corpus"], r["types"]["train"]
    assert (
        f"{c['1000']} types with >= 1,000 occurrences (training split: {tr['1000']}), {c['200']} with >= 200 "
        f"({tr['200']}), {c['100']:,} with >= 100 ({tr['100']})"
    ) in text
    prop = r["proportional"]
    ks = ", ".join(f"{p['k']:,}" for p in prop[:-1]) + f" and {prop[-1]['k']:,}"
    controls = ", ".join(f"{p['control']:.2f}" for p in prop[:-1]) + f" and {prop[-1]['control']:.2f}"
    assert (
        f"the shuffled control is {controls} nats for k = {ks} ({prop[-1]['control'] / sel['entropy']:.0%} of H(X)"
        in text
    )

    reach = ", ".join(f"{p['mi_fraction']:.1%}" for p in prop[:-1]) + f" and {prop[-1]['mi_fraction']:.1%}"
    assert f"the MI such a clustering can reach {reach} of H(X)" in text
    at_2000 = next(p for p in prop if p["k"] == 2000)
    assert f"than the proportional split's {at_2000['mi_fraction']:.0%} where the types" in text
