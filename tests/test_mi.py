"""MI's stored numbers against their definitions: the control-subtracted MI, the spread over
k-means restarts, the restarts' seeds, the interval over sentences, the fraction of H(X) and
the nested type subsets (Voita et al. 2019, sec. 4; ``docs/metrics.md``)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy
from sklearn.metrics import mutual_info_score

from evolution.analyses.base import Inputs, ModelInputs
from evolution.analyses.mi import MI
from evolution.config import MetricsConfig
from evolution.metrics.mi import bootstrap_mi, kmeans_labels, layer_mi
from evolution.metrics.plan import OccurrencePlan


def _h(labels) -> float:
    """H(X) in nats from the label counts (scipy)."""
    return float(scipy_entropy(np.unique(labels, return_counts=True)[1]))


def _inputs(n_layers: dict[str, int]) -> Inputs:
    """Inputs with one model per entry of ``n_layers`` (what MI.datasets reads of them)."""
    models = {
        name: ModelInputs(
            name=name,
            kind="fairseq",
            objective="mt",
            key=f"key-{name}",
            spec={"name": name},
            n_layers=L,
            d_model=4,
            coords={},
            primary=np.ones(1, bool),
            annotation=None,
            freq_rank=np.ones(1, np.int32),
            plan=OccurrencePlan(),
        )
        for name, L in n_layers.items()
    }
    return Inputs(store="unused", models=models, config=MetricsConfig(), seed=0, torch_threads=1, arrays_dir=".")


def _sentences(n: int, rng) -> np.ndarray:
    """Sentence ids (n,) for sentences of 1 to 12 occurrences (unequal groups), in order."""
    lengths = rng.integers(1, 13, size=n)
    return np.repeat(np.arange(n), lengths)[:n]


def _blobs(rng, *, types: int, n: int, d: int = 6, spread: float = 1.5):
    """Labels from a Zipf-like law and vectors = their type's centre + noise (clusters half-align)."""
    p = 1 / np.arange(1, types + 1)
    labels = rng.choice(types, size=n, p=p / p.sum())
    centres = rng.normal(size=(types, d)) * 2
    return (centres[labels] + spread * rng.normal(size=(n, d))).astype(np.float32), labels


# --- the control-subtracted MI and the restart spread ------------------------------------------------------


def test_corrected_mi_is_mean_minus_the_shuffled_control():
    """mi_corrected = mean over restarts of I(X; C_r) - the shuffled control, each recomputed with sklearn
    from the restarts' clusters (seed + r) and the control's permutation (default_rng(seed)); on vectors
    unrelated to the labels the MI is all estimator bias, so MI minus the control is near 0 while MI plus
    the control is twice the bias."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 20, size=1500)
    x = rng.normal(size=(1500, 4)).astype(np.float32)
    r = layer_mi(x, labels, k=40, restarts=3, seed=5)
    mis = [mutual_info_score(labels, kmeans_labels(x, k=40, seed=5 + q)) for q in range(3)]
    control = mutual_info_score(np.random.default_rng(5).permutation(labels), kmeans_labels(x, k=40, seed=5))
    np.testing.assert_allclose(r.mi, mis, rtol=1e-9)
    assert r.shuffled == pytest.approx(control, rel=1e-9)
    assert r.corrected == pytest.approx(np.mean(mis) - control, rel=1e-9)
    assert r.shuffled > 0.15  # a real bias: plus and minus differ by > 0.3 nats
    assert abs(r.corrected) < 0.25 * r.shuffled  # unrelated vectors: no information beyond the bias

    ds = MI().datasets(_inputs({"m": 1}), {"m-0": {"input": r.as_dict()}})["mi"]
    assert ds.mi_corrected.sel(model="m", layer=0, target="input").item() == pytest.approx(
        np.mean(mis) - control, rel=1e-9
    )


def test_mi_sd_is_the_sample_sd_over_restarts_and_fractions_use_the_same_models_entropy():
    """From given per-restart values: mi_mean, mi_sd (ddof = 1: sqrt(7/3) for 1, 2, 4, not the population
    sd sqrt(14/9)), mi_corrected = mean - control and mi_fraction = mean / H(X) of the same model and
    target (two models with different H)."""

    def result(mi, shuffled, h):
        return {
            "mi": list(mi),
            "shuffled": shuffled,
            "entropy": h,
            "k": 4,
            "n": 100,
            "saturated": False,
            "algorithm": "flat",
            "seeds": [0, 1, 2],
        }

    results = {
        "a-0": {"input": result([1.0, 2.0, 4.0], 0.5, 5.0)},
        "a-1": {"input": result([3.0, 3.0, 3.0], 0.25, 5.0)},
        "b-0": {"input": result([0.5, 0.7, 0.9], 0.1, 1.25)},
    }
    ds = MI().datasets(_inputs({"a": 2, "b": 1}), results)["mi"]
    a0 = ds.sel(model="a", layer=0, target="input")
    assert a0.mi_mean.item() == pytest.approx(7 / 3)
    assert a0.mi_sd.item() == pytest.approx(np.sqrt(7 / 3))
    assert a0.mi_corrected.item() == pytest.approx(7 / 3 - 0.5)
    assert a0.mi_fraction.item() == pytest.approx((7 / 3) / 5.0)
    assert a0.mi_corrected_fraction.item() == pytest.approx((7 / 3 - 0.5) / 5.0)
    assert ds.mi_sd.sel(model="a", layer=1, target="input").item() == 0.0
    b0 = ds.sel(model="b", layer=0, target="input")
    assert b0.mi_fraction.item() == pytest.approx(0.7 / 1.25)  # b's own H, not a's 5.0
    assert b0.mi_corrected_fraction.item() == pytest.approx(0.6 / 1.25)
    assert np.isnan(ds.mi_fraction.sel(model="b", layer=1, target="input").item())  # b has one layer


@pytest.mark.parametrize("algorithm", ["flat", "two_level"])
def test_each_restart_has_its_own_seed(algorithm):
    """Points spread uniformly over a square have many equally good k-means partitions: restarts
    with different seeds find different ones, so the restarts' MI with a fine label differ and
    mi_sd > 0 (every restart with one seed would give identical values and sd 0)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(3000, 2)).astype(np.float32)
    labels = (np.floor(x[:, 0] * 6) * 6 + np.floor(x[:, 1] * 6)).astype(int)  # 36 cells of the square
    r = layer_mi(x, labels, k=24 if algorithm == "flat" else 40, restarts=4, seed=11, algorithm=algorithm)
    assert len(set(np.round(r.mi, 12))) == 4
    assert len(set(r.seeds)) == 4
    ds = MI().datasets(_inputs({"m": 1}), {"m-0": {"input": r.as_dict()}})["mi"]
    assert ds.mi_sd.sel(model="m", layer=0, target="input").item() > 1e-3
    assert len(set(ds.kmeans_seed.sel(model="m", layer=0, target="input").values)) == 4


# --- the interval over sentences ----------------------------------------------------------------------------


def _loop_replicates(labels, clusterings, sentence, *, replicates, seed):
    """The sentence bootstrap by a plain loop: draw sentences with replacement, concatenate
    their occurrences, sklearn MI per restart; the control pairs the resample's labels after a
    permutation of all n labels with the first restart's clusters; H of the resample."""
    ids = np.unique(sentence)
    rows = {s: np.flatnonzero(sentence == s) for s in ids}
    mi, control, h = [], [], []
    for b in range(replicates):
        rng = np.random.default_rng([seed, b])
        idx = np.concatenate([rows[ids[j]] for j in rng.integers(0, len(ids), len(ids))])
        permuted = labels[rng.permutation(len(labels))]
        mi.append([mutual_info_score(labels[idx], c[idx]) for c in clusterings])
        control.append(mutual_info_score(permuted[idx], clusterings[0][idx]))
        h.append(_h(labels[idx]))
    return np.array(mi), np.array(control), np.array(h)


def test_bootstrap_over_sentences_against_a_plain_loop():
    rng = np.random.default_rng(7)
    n = 400
    labels = rng.integers(0, 9, size=n)
    sentence = _sentences(n, rng) + 1000  # ids need not start at 0
    clusterings = [(labels + rng.integers(0, 3, size=n)) % 7, rng.integers(0, 5, size=n)]
    out = bootstrap_mi(labels, clusterings, sentence, replicates=25, seed=3)
    mi, control, h = _loop_replicates(labels, clusterings, sentence, replicates=25, seed=3)
    np.testing.assert_allclose(out["mi"], mi, rtol=1e-9)
    np.testing.assert_allclose(out["shuffled"], control, rtol=1e-9)
    np.testing.assert_allclose(out["entropy"], h, rtol=1e-9)


def test_layer_mi_intervals_are_the_loops_percentiles_placed_around_the_estimates():
    """Each stored interval: the 2.5 / 97.5 percentiles of the loop's replicate values, moved by
    (estimate - mean of the replicates); for the mean MI, the control-subtracted MI and both over
    H(X) (per replicate: its own control and its own H)."""
    rng = np.random.default_rng(8)
    x, labels = _blobs(rng, types=12, n=900)
    sentence = _sentences(900, rng)
    r = layer_mi(x, labels, k=30, restarts=2, seed=4, sentence=sentence, bootstrap=40)
    clusterings = [kmeans_labels(x, k=30, seed=4 + q) for q in range(2)]
    mi, control, h = _loop_replicates(labels, clusterings, sentence, replicates=40, seed=4)
    est_mean = np.mean([mutual_info_score(labels, c) for c in clusterings])
    est_corrected = est_mean - mutual_info_score(np.random.default_rng(4).permutation(labels), clusterings[0])
    h0 = _h(labels)
    for name, values, estimate in (
        ("mi_mean", mi.mean(1), est_mean),
        ("mi_corrected", mi.mean(1) - control, est_corrected),
        ("mi_fraction", mi.mean(1) / h, est_mean / h0),
        ("mi_corrected_fraction", (mi.mean(1) - control) / h, est_corrected / h0),
    ):
        expected = np.percentile(values, [2.5, 97.5]) + (estimate - values.mean())
        np.testing.assert_allclose(r.interval[name], expected, rtol=1e-8, err_msg=name)
        assert r.interval[name][0] < estimate < r.interval[name][1]
    assert r.replicates == 40


def test_interval_resamples_sentences_not_occurrences():
    """A sentence that repeats one (label, cluster) pair m times carries the information of one
    occurrence: MI is unchanged when every count of the table is multiplied by m, so the replicates
    over sentences of m copies equal those over the same sentences of one occurrence each, and so
    does the interval of the mean MI; resampling occurrences would shrink the spread about sqrt(m)."""
    from evolution.metrics.mi import centred_interval

    rng = np.random.default_rng(9)
    labels = rng.integers(0, 10, size=300)
    clusters = (labels + rng.integers(0, 4, size=300)) % 12
    one = bootstrap_mi(labels, [clusters], np.arange(300), replicates=60, seed=1)
    m = 6
    copies = bootstrap_mi(
        np.repeat(labels, m), [np.repeat(clusters, m)], np.repeat(np.arange(300), m), replicates=60, seed=1
    )
    np.testing.assert_allclose(copies["mi"], one["mi"], rtol=1e-9)
    estimate = mutual_info_score(labels, clusters)
    np.testing.assert_allclose(
        centred_interval(copies["mi"][:, 0], estimate), centred_interval(one["mi"][:, 0], estimate), rtol=1e-9
    )
    by_occurrence = bootstrap_mi(
        np.repeat(labels, m), [np.repeat(clusters, m)], np.arange(300 * m), replicates=60, seed=1
    )
    assert by_occurrence["mi"].std() < 0.6 * one["mi"].std()  # what a bootstrap over occurrences would claim


def test_interval_bounds_are_stored_per_model_layer_and_target():
    rng = np.random.default_rng(10)
    x, labels = _blobs(rng, types=8, n=500)
    sentence = _sentences(500, rng)
    results = {
        f"m-{layer}": {
            "input": layer_mi(
                x * (layer + 1) + layer * rng.normal(size=x.shape),
                labels,
                k=16,
                restarts=2,
                seed=0,
                sentence=sentence,
                bootstrap=30,
            ).as_dict()
        }
        for layer in range(2)
    }
    ds = MI().datasets(_inputs({"m": 2}), results)["mi"]
    assert ds.attrs["bootstrap"] == 30
    for layer in range(2):
        iv = results[f"m-{layer}"]["input"]["interval"]
        for name in ("mi_mean", "mi_corrected", "mi_fraction", "mi_corrected_fraction"):
            stored = ds[f"{name}_interval"].sel(model="m", layer=layer, target="input")
            np.testing.assert_allclose(stored.sel(bound=["low", "high"]).values, iv[name])
            value = ds[name].sel(model="m", layer=layer, target="input").item()
            assert stored.sel(bound="low").item() < value < stored.sel(bound="high").item()


# --- the fraction of H(X) and the nested type subsets ------------------------------------------------------


def test_nested_type_subsets_against_a_direct_computation():
    """For each N: the occurrences of the N most frequent labels, MI of the full set's clusters restricted
    to them (sklearn) over their own H(X) (scipy); N at the number of labels gives the full set's MI."""
    rng = np.random.default_rng(12)
    x, labels = _blobs(rng, types=15, n=2000, spread=0.8)
    r = layer_mi(x, labels, k=40, restarts=2, seed=2, types=[3, 8, 15])
    clusterings = [kmeans_labels(x, k=40, seed=2 + q) for q in range(2)]
    uniq, counts = np.unique(labels, return_counts=True)
    ranked = uniq[np.lexsort((uniq, -counts))]
    ds = MI().datasets(_inputs({"m": 1}), {"m-0": {"input": r.as_dict()}})
    sub_ds = ds["mi_types"].sel(model="m", layer=0, target="input")
    fractions = []
    for size in (3, 8, 15):
        keep = np.isin(labels, ranked[:size])
        mean = np.mean([mutual_info_score(labels[keep], c[keep]) for c in clusterings])
        h = _h(labels[keep])
        got = sub_ds.sel(types=size)
        assert got.n.item() == keep.sum() and got.n_types.item() == size
        assert got.entropy.item() == pytest.approx(h, rel=1e-9)
        assert got.mi_mean.item() == pytest.approx(mean, rel=1e-9)
        assert got.mi_fraction.item() == pytest.approx(mean / h, rel=1e-9)
        fractions.append(mean / h)
    full = ds["mi"].sel(model="m", layer=0, target="input")
    assert sub_ds.sel(types=15).mi_mean.item() == pytest.approx(full.mi_mean.item(), rel=1e-12)
    assert sub_ds.sel(types=15).mi_fraction.item() == pytest.approx(full.mi_fraction.item(), rel=1e-12)
    assert len(set(np.round(fractions, 6))) == 3  # the subsets differ: the test can tell them apart


def test_no_type_subsets_no_group():
    rng = np.random.default_rng(13)
    x, labels = _blobs(rng, types=5, n=200)
    r = layer_mi(x, labels, k=10, restarts=1, seed=0)
    assert r.by_types is None and r.interval is None
    out = MI().datasets(_inputs({"m": 1}), {"m-0": {"input": r.as_dict()}})
    assert set(out) == {"mi"} and "mi_mean_interval" not in out["mi"]


# --- the sentences behind the intervals --------------------------------------------------------------------


def test_units_give_each_occurrence_its_sentence(tmp_path):
    """The arrays of the layer units hold, beside each target's rows and labels, the sentence of
    every row (the bootstrap's resampling unit), read from the token coordinates."""
    from evolution.analyses.base import load_arrays

    sentence = np.array([0, 0, 0, 1, 1, 4, 4, 4, 4, 7])
    ids = np.array([5, 6, 5, 6, 7, 5, 5, 6, 7, 5])
    rows = np.array([0, 2, 3, 5, 6, 9])
    plan = OccurrencePlan(mi={"input": (rows, ids[rows]), "output": (rows[1:], ids[rows[1:]] + 1)})
    model = ModelInputs(
        name="lm",
        kind="fairseq",
        objective="lm",
        key="k",
        spec={"name": "lm"},
        n_layers=2,
        d_model=4,
        coords={"sentence": sentence, "token_id": ids},
        primary=np.ones(10, bool),
        annotation=None,
        freq_rank=np.ones(10, np.int32),
        plan=plan,
    )
    inputs = Inputs(
        store="unused",
        models={"lm": model},
        config=MetricsConfig(mi={"k": 2}),
        seed=0,
        torch_threads=1,
        arrays_dir=str(tmp_path),
    )
    units = MI().units(inputs)
    assert [u.name for u in units] == ["lm-0", "lm-1"]
    a = load_arrays(units[0].kwargs["arrays"])
    np.testing.assert_array_equal(a["input/sentence"], [0, 0, 1, 4, 4, 7])
    np.testing.assert_array_equal(a["output/sentence"], [0, 1, 4, 4, 7])
    np.testing.assert_array_equal(a["input/rows"], rows)


def test_masked_positions_carry_their_sentence(model_specs):
    """``masked_states(..., return_sentences=True)``: the (sentence, original token) of every corrupted
    position, against the corruption redrawn per sentence and corruption with its documented generator."""
    from conftest import SENTENCES

    from evolution.metrics.masked import corrupt, masked_states
    from evolution.models import cached_adapter

    adapter = cached_adapter(model_specs["masked_lm"])
    content = {s + 10: adapter.tokenize(t).ids for s, t in enumerate(SENTENCES)}
    _, labels, fed, sentence = masked_states(
        adapter, content, seed=2, corruptions=3, return_inputs=True, return_sentences=True
    )
    low, high = adapter.ordinary_ids
    expected = []
    for s, ids in content.items():
        for r in range(3):
            new, changed = corrupt(
                ids,
                rng=np.random.default_rng([2, s] if r == 0 else [2, s, r]),
                mask_id=adapter.mask_id,
                low=low,
                high=high,
            )
            expected += [(s, ids[c], new[c]) for c in changed]
    assert len(expected) > 10
    assert sorted(zip(sentence.tolist(), labels.tolist(), fed.tolist(), strict=True)) == sorted(expected)


def test_the_bias_warning_fires_on_a_large_bias_not_on_a_true_zero(caplog):
    """States unrelated to the labels: MI is the plug-in bias, about (k - 1)(|X| - 1) / 2n nats
    (Miller 1955). With 10 occurrences per cluster that bias is a large share of H(X) = ln 20 and
    the estimate is mostly bias: one WARNING. With 1,000 per cluster the same true MI of 0 comes
    with a bias under a tenth of H(X): the near-zero MI is the measurement, and no warning."""
    import logging

    from evolution.analyses.mi import BIAS_FLOOR, _warn_bias
    from evolution.metrics.mi import layer_mi

    rng = np.random.default_rng(0)
    out = {}
    for n in (200, 20_000):
        labels = rng.integers(0, 20, size=n)
        x = rng.normal(size=(n, 8)).astype(np.float32)
        r = layer_mi(x, labels, k=20, restarts=1, seed=0).as_dict()
        miller = 19 * 19 / (2 * n)
        assert 0.3 * miller < r["shuffled"] < 3 * miller  # the textbook size of the bias
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="evolution.analyses.mi"):
            _warn_bias({("m", 0): {"input": r}})
        out[n] = [rec.getMessage() for rec in caplog.records]
        assert (r["shuffled"] >= BIAS_FLOOR * r["entropy"]) == (n == 200)
    assert len(out[200]) == 1 and "mostly the estimator's bias" in out[200][0]
    assert out[20_000] == []
