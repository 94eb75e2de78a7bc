"""The similarity and change-by-frequency groups against direct computations: bins of equal
size, the bins' sizes, the distances per bin, the same-layer distances by pair of models and
their intervals (Voita et al. 2019, sec. 4, figures 3-4; ``docs/metrics.md``)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import write_config

from evolution.analyses.base import Inputs, ModelInputs
from evolution.analyses.similarity import Similarity, pair_kind
from evolution.config import MetricsConfig
from evolution.metrics.plan import OccurrencePlan
from evolution.metrics.similarity import View, centre_intervals, equal_size_bins, pwcca


def test_equal_size_bins_against_a_plain_loop():
    """Occurrences sorted by (rank, position on the axis) by Python's sort, then cut at
    i * bins // m: sizes differ by at most one, bins follow rank order, rank 0 is left out."""
    rng = np.random.default_rng(0)
    ranks = rng.zipf(1.6, size=503).clip(max=60)
    ranks[rng.choice(503, 17, replace=False)] = 0  # no rank: unseen in the training split
    bins = equal_size_bins(ranks, bins=7)
    ranked = sorted((r, i) for i, r in enumerate(ranks) if r > 0)
    expected = np.full(503, -1)
    for position, (_, i) in enumerate(ranked):
        expected[i] = position * 7 // len(ranked)
    np.testing.assert_array_equal(bins, expected)
    sizes = np.bincount(bins[bins >= 0])
    assert len(sizes) == 7 and sizes.sum() == 486 and sizes.max() - sizes.min() <= 1
    for b in range(6):
        assert ranks[bins == b].max() <= ranks[bins == b + 1].min()
    # a type that straddles a cut: its earlier occurrences in the earlier bin
    straddle = [r for r in np.unique(ranks[ranks > 0]) if len(np.unique(bins[ranks == r])) > 1]
    assert straddle
    rows = np.flatnonzero(ranks == straddle[0])
    assert np.all(np.diff(bins[rows]) >= 0)


def test_pair_kinds_of_the_papers_design():
    """The 8 models of configs/bible-full.yaml: base MT / LM / MLM (seed 0, one initial encoder),
    their seed-1 replicates (another), MT and LM with token dropout (seed 0)."""
    runs = {
        "mt": ("mt", 0, 0.0),
        "mt-seed1": ("mt", 1, 0.0),
        "mt-tokdrop": ("mt", 0, 0.1),
        "lm": ("lm", 0, 0.0),
        "lm-seed1": ("lm", 1, 0.0),
        "lm-tokdrop": ("lm", 0, 0.1),
        "mlm": ("mlm", 0, 0.0),
        "mlm-seed1": ("mlm", 1, 0.0),
    }
    runs = {m: {"objective": o, "seed": s, "token_dropout": p} for m, (o, s, p) in runs.items()}
    objectives = {m: r["objective"] for m, r in runs.items()}
    expected = {
        ("mt", "mt"): "same model",
        ("mt", "mt-seed1"): "seeds",
        ("lm-seed1", "lm"): "seeds",
        ("mt", "lm"): "objectives, shared init",
        ("lm-seed1", "mlm-seed1"): "objectives, shared init",
        ("mt", "lm-seed1"): "objectives, different inits",
        ("mlm-seed1", "lm"): "objectives, different inits",
        ("mt", "mt-tokdrop"): "token dropout",
        ("lm-tokdrop", "lm"): "token dropout",
        ("mt-tokdrop", "lm"): "other",
        ("mt-tokdrop", "mt-seed1"): "other",
    }
    for (a, b), kind in expected.items():
        assert pair_kind(a, b, objectives=objectives, runs=runs) == kind, (a, b)
    assert pair_kind("bert", "gpt2", objectives={"bert": "mlm", "gpt2": "lm"}, runs={}) == "objectives"


def _inputs(models: dict[str, str], runs: dict) -> Inputs:
    mi = {
        name: ModelInputs(
            name=name,
            kind="trained",
            objective=o,
            key=name,
            spec={},
            n_layers=3,
            d_model=4,
            coords={},
            primary=np.ones(1, bool),
            annotation=None,
            freq_rank=np.ones(1, np.int32),
            plan=OccurrencePlan(),
            frequency="training split",
        )
        for name, o in models.items()
    }
    return Inputs(
        store="unused", models=mi, config=MetricsConfig(), seed=0, torch_threads=1, arrays_dir=".", attrs={"runs": runs}
    )


def test_same_layer_distances_by_pair_from_a_result():
    """``same_layer`` = 1 - the mean of both PWCCA directions (CKA: its one value) at the same layer,
    layer 0 included; ``pair`` names what two models differ in; the bins' sizes per model."""
    rng = np.random.default_rng(1)
    models = {"mt": "mt", "lm": "lm", "mt-seed1": "mt"}
    runs = {
        "mt": {"objective": "mt", "seed": 0, "token_dropout": 0.0},
        "lm": {"objective": "lm", "seed": 0, "token_dropout": 0.0},
        "mt-seed1": {"objective": "mt", "seed": 1, "token_dropout": 0.0},
    }
    views = [[m, layer] for m in models for layer in range(3)]
    pw = rng.uniform(0.3, 0.9, size=(9, 9))
    np.fill_diagonal(pw, 1.0)
    ck = rng.uniform(0.3, 0.9, size=(9, 9))
    ck = (ck + ck.T) / 2
    sizes = {"n": [40, 7], "types": [2, 5], "rank_lo": [1, 3], "rank_hi": [3, 10]}
    results = {"+".join(models): {"views": views, "similarity": {"pwcca": pw.tolist(), "cka": ck.tolist()}, "n": 47}}
    for m in models:  # one change unit per model and bin
        for k in range(2):
            results[f"+change-{m}[{k}]"] = {
                "subsets": [k, k + 1],
                "estimate": {meth: rng.uniform(size=(2, 1)).tolist() for meth in ("pwcca", "cka")},
                "bins": [[1, 3], [3, 10]],
                "n_bins": 2,
                "notes": [],
                "sizes": {key: v[k : k + 1] for key, v in sizes.items()},
            }
    out = Similarity().datasets(_inputs(models, runs), results)
    ds = out["similarity"]
    for a_i, a in enumerate(models):
        for b_i, b in enumerate(models):
            for layer in range(3):
                i, j = 3 * a_i + layer, 3 * b_i + layer
                assert ds.same_layer.sel(metric="pwcca", model_a=a, model_b=b, layer=layer).item() == pytest.approx(
                    1 - (pw[i, j] + pw[j, i]) / 2
                )
                assert ds.same_layer.sel(metric="cka", model_a=a, model_b=b, layer=layer).item() == pytest.approx(
                    1 - ck[i, j]
                )
    assert ds.pair.sel(model_a="mt", model_b="mt-seed1").item() == "seeds"
    assert ds.pair.sel(model_a="lm", model_b="mt").item() == "objectives, shared init"
    assert ds.pair.sel(model_a="lm", model_b="mt-seed1").item() == "objectives, different inits"
    change = out["change"]
    for m in models:
        np.testing.assert_array_equal(change.n_occurrences.sel(model=m).values, [40, 7])
        np.testing.assert_array_equal(change.n_types.sel(model=m).values, [2, 5])
    assert list(change.freq_bin.values) == ["1-3", "3-10"]
    assert list(change.rank_hi.values) == [3, 10]
    # the paper's layer pairs (figure 4: 1-2 .. 5-6) by coordinate
    assert list(change.layer_pair.where(change.layer_from >= 1, drop=True).values) == ["1-2"]
    assert list(change.layer_to.values) == [1, 2]


def test_centre_intervals_moves_the_percentiles_onto_the_estimate():
    bounds = np.array([[[0.10, 0.20], [0.5, 0.9]]])
    np.testing.assert_allclose(centre_intervals(bounds, [[0.15, 0.7]], [[0.18, 0.6]]), [[[0.13, 0.23], [0.4, 0.8]]])


# --- the groups of a run ----------------------------------------------------------------------------------------

METRICS = """metrics:
  tokens: {top: 6, min_count: 3}
  mi: null
  neighbors: null
  tsne: null
  heads: null
  similarity: {min_ratio: 2, freq_bins: [1, 3, 100], equal_bins: 3, bootstrap: 8}"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, model_specs):
    from conftest import SENTENCES

    from pipelines.run import run

    tmp = tmp_path_factory.mktemp("similarity")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    cfg = write_config(
        tmp / "c.yaml",
        corpus=corpus,
        workdir=tmp / "w",
        extra=METRICS,
        models=[model_specs["translation"], model_specs["language_modeling"]],
    )
    run(cfg, progress=False)
    return tmp / "w"


def _store(run_dir, model: str):
    from evolution.store import open_representations

    return open_representations(str(run_dir / "reps.zarr"), model)


def test_bins_sizes_and_distances_against_the_store(run_dir):
    """Each bin's occurrences and types counted on the store's ranks, and its adjacent-layer PWCCA
    distance recomputed on exactly those rows (the bins chosen by a plain loop), for rank bins and
    equal-size bins. (PWCCA itself is tested against the covariance route in test_metrics.py; here
    layer 0 of a bin of three types is nearly singular, where the two routes part in the 4th digit.)"""
    from evolution.metrics.results import open_metrics

    change = open_metrics(run_dir / "metrics.zarr", "change").load()
    equal = open_metrics(run_dir / "metrics.zarr", "change_equal").load()
    for model in ("translation", "language_modeling"):
        ds = _store(run_dir, model)
        ranks, hidden = ds.freq_rank.values, ds.hidden.values.astype(np.float64)  # (layer, token, feature)
        rank_masks = [(ranks >= lo) & (ranks < hi) for lo, hi in ((1, 3), (3, 100))]
        ranked = sorted((r, i) for i, r in enumerate(ranks) if r > 0)
        index = np.full(len(ranks), -1)
        for position, (_, i) in enumerate(ranked):
            index[i] = position * 3 // len(ranked)
        equal_masks = [index == b for b in range(3)]
        for group, masks in ((change, rank_masks), (equal, equal_masks)):
            np.testing.assert_array_equal(group.n_occurrences.sel(model=model).values, [m.sum() for m in masks])
            np.testing.assert_array_equal(
                group.n_types.sel(model=model).values, [len(np.unique(ranks[m])) for m in masks]
            )
            for b, mask in enumerate(masks):
                for layer in range(hidden.shape[0] - 1):
                    expected = 1 - pwcca(
                        View(hidden[layer][mask], min_ratio=2), View(hidden[layer + 1][mask], min_ratio=2)
                    )
                    got = group.distance.sel(metric="pwcca", model=model).isel(layer_pair=layer, freq_bin=b).item()
                    assert got == pytest.approx(expected, abs=1e-9)
        np.testing.assert_array_equal(equal.rank_lo.sel(model=model).values, [ranks[m].min() for m in equal_masks])
        np.testing.assert_array_equal(equal.rank_hi.sel(model=model).values, [ranks[m].max() + 1 for m in equal_masks])
        sizes = equal.n_occurrences.sel(model=model).values
        assert sizes.max() - sizes.min() <= 1
        rank_sizes = change.n_occurrences.sel(model=model).values
        assert len(set(rank_sizes)) == len(rank_sizes)  # unequal rank bins: a swap would show


def test_intervals_are_placed_around_the_estimates(run_dir):
    """A resample repeats sentences, which makes CCA fit closer (smaller distances) the fewer the
    occurrences per dimension; the stored intervals carry the replicates' spread around the estimate."""
    from evolution.metrics.results import open_metrics

    sim = open_metrics(run_dir / "metrics.zarr", "similarity").load()
    iv = sim.interval.sel(metric="pwcca", model_a="translation", model_b="language_modeling")
    value = sim.same_layer.sel(metric="pwcca", model_a="translation", model_b="language_modeling")
    assert np.isfinite(iv.values).all()
    assert (iv.sel(bound="low") <= value + 1e-12).all() and (value <= iv.sel(bound="high") + 1e-12).all()
    assert (iv.sel(bound="high") - iv.sel(bound="low") > 0).all()
    for group in ("change", "change_equal"):
        ds = open_metrics(run_dir / "metrics.zarr", group).load()
        low, high = ds.interval.sel(bound="low").values, ds.interval.sel(bound="high").values
        d = ds.distance.values
        ok = np.isfinite(low)
        assert ok.any()
        assert (low[ok] <= d[ok] + 1e-12).all() and (d[ok] <= high[ok] + 1e-12).all()


def _repeated_correlations(x: np.ndarray, y: np.ndarray, *, min_ratio: float) -> bool:
    """Whether two views' canonical correlations repeat a value (two within 1e-6): there PWCCA's
    weights depend on an arbitrary basis of the repeated directions, so the definition is not
    determined by the data to better than its rounding."""
    rho = np.linalg.svd(View(x, min_ratio=min_ratio).basis_.T @ View(y, min_ratio=min_ratio).basis_, compute_uv=False)
    return bool(len(rho) > 1 and np.min(-np.diff(rho)) < 1e-6)


def test_the_runs_intervals_equal_resampled_svds_of_its_states(run_dir):
    """On the states the run stored: the intervals of the same-layer distances and of the change
    by frequency equal those of the definition (resample whole sentences, redo every SVD:
    ``bootstrap_replicates``, 8 replicates with the run's seed), summarised and placed around the
    estimates by the same rule, within 1e-8, wherever the definition is well posed. The toy run
    compares few occurrences per dimension (min_ratio 2): in some resamples the canonical
    correlations are 1 repeated, where PWCCA depends on an arbitrary basis of the repeated
    directions (its weights are not invariant there): two float64 routes differ by up to 5e-4,
    and on layer 0 both differ from a 40-digit computation of the definition (docs/decisions.md).
    Such cells are found from the resamples' correlations and left out; half the cells or more
    are not."""
    from evolution.analyses.base import load_arrays
    from evolution.analyses.similarity_tasks import _subsets
    from evolution.config import SimilarityConfig
    from evolution.metrics.resample import SentenceSums, sentence_draws
    from evolution.metrics.results import open_metrics
    from evolution.metrics.similarity import bootstrap_replicates, summarise_replicates
    from evolution.store import read_rows

    models = ["translation", "language_modeling"]
    a = load_arrays(str(next((run_dir / "metrics-inputs").glob("similarity-*.npz"))))
    freq_rank = load_arrays(str(next((run_dir / "metrics-inputs").glob("change-*.npz"))))["freq_rank"]
    sim = open_metrics(run_dir / "metrics.zarr", "similarity").load()
    change = open_metrics(run_dir / "metrics.zarr", "change").load()
    equal = open_metrics(run_dir / "metrics.zarr", "change_equal").load()
    cfg = SimilarityConfig(min_ratio=2, freq_bins=[1, 3, 100], equal_bins=3, bootstrap=8)
    bins = list(zip(change.rank_lo.values.tolist(), change.rank_hi.values.tolist(), strict=True))
    every, split = _subsets(freq_rank, bins=bins, similarity=cfg)
    n_layers = {m: int(_store(run_dir, m).sizes["layer"]) for m in models}
    states = {
        (g, layer): read_rows(str(run_dir / "reps.zarr"), g, layer, a[f"rows/{g}"]).astype(np.float64)
        for g in models
        for layer in range(n_layers[g])
    }
    ref = bootstrap_replicates(
        read=lambda g, layer: states[(g, layer)],
        sentence=a["sentence"],
        masks=every,
        models=models,
        n_layers=n_layers,
        methods=["pwcca", "cka"],
        replicates=range(8),
        seed=0,
        epsilon=cfg.epsilon,
        min_ratio=cfg.min_ratio,
    )
    group = np.unique(a["sentence"], return_inverse=True)[1]
    sums = SentenceSums(group, n_groups=group.max() + 1)
    picks = [sums.resample_rows(d) for d in sentence_draws(group.max() + 1, replicates=8, seed=0)]
    L = max(n_layers.values())
    posed_between = np.array(
        [
            not any(
                _repeated_correlations(states[(models[0], layer)][idx], states[(models[1], layer)][idx], min_ratio=2)
                for idx in picks
            )
            for layer in range(L)
        ]
    )
    posed_change = {
        g: np.array(
            [
                [
                    not any(
                        len(sel) >= 2 * states[(g, 0)].shape[1]
                        and _repeated_correlations(states[(g, layer)][sel], states[(g, layer + 1)][sel], min_ratio=2)
                        for sel in (idx[mask[idx]] for idx in picks)
                    )
                    for mask in every.values()
                ]
                for layer in range(L - 1)
            ]
        )
        for g in models
    }
    s = summarise_replicates([ref])
    compared = posed = 0
    for m in ("pwcca", "cka"):
        bounds = np.asarray(s["between"][m])[:, 0]  # (layer, 2): the one pair
        est = sim.same_layer.sel(metric=m, model_a=models[0], model_b=models[1]).values
        expected = bounds + (est - np.asarray(s["between_mean"][m])[:, 0])[:, None]
        got = sim.interval.sel(metric=m, model_a=models[0], model_b=models[1]).values
        ok = posed_between if m == "pwcca" else np.ones(L, bool)  # CKA has no such basis
        np.testing.assert_allclose(got[ok], expected[ok], rtol=0, atol=1e-8)
        compared, posed = compared + len(ok), posed + ok.sum()
        for g in models:
            bounds, means = np.asarray(s["change"][m][g]), np.asarray(s["change_mean"][m][g])
            ok = posed_change[g] if m == "pwcca" else np.ones_like(posed_change[g])
            for group_ds, cols in ((change, slice(0, split[0])), (equal, slice(split[0], None))):
                est = group_ds.distance.sel(metric=m, model=g).values
                expected = bounds[:, cols] + (est - means[:, cols])[..., None]
                got = group_ds.interval.sel(metric=m, model=g).values
                np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
                np.testing.assert_allclose(got[ok[:, cols]], expected[ok[:, cols]], rtol=0, atol=1e-8)
                compared, posed = compared + ok[:, cols].size, posed + ok[:, cols].sum()
    assert posed >= 0.5 * compared, (posed, compared)


def test_the_change_split_by_bin_equals_the_whole_unit(run_dir):
    """The change by frequency runs as one unit per model and bin; the parts, each reading only
    its bin's rows, combine (in any order) into exactly the whole unit's numbers, replicates
    included, and the run's stored distances are those numbers. Parts that leave out or repeat
    a bin are refused."""
    from evolution.analyses.similarity_tasks import change_task, combine_change
    from evolution.config import SimilarityConfig
    from evolution.metrics.results import open_metrics

    store = str(run_dir / "reps.zarr")
    arrays = str(next((run_dir / "metrics-inputs").glob("change-*.npz")))
    cfg = SimilarityConfig(min_ratio=2, freq_bins=[1, 3, 100], equal_bins=3, bootstrap=8)
    change = open_metrics(run_dir / "metrics.zarr", "change").load()
    bins = list(zip(change.rank_lo.values.tolist(), change.rank_hi.values.tolist(), strict=True))
    model = next(m for m in ("translation", "language_modeling") if f"rows/{m}" in np.load(arrays).files)
    kw = dict(store=store, model=model, n_layers=int(_store(run_dir, model).sizes["layer"]), arrays=arrays)
    whole = combine_change([change_task(**kw, similarity=cfg, bins=bins, seed=0)])
    n = len(bins) + 3
    parts = [change_task(**kw, similarity=cfg, bins=bins, seed=0, subsets=(k, k + 1)) for k in range(n)]
    split = combine_change(parts[::-1])
    for key in ("change", "change_equal", "replicates"):
        for m in ("pwcca", "cka"):
            np.testing.assert_array_equal(np.asarray(split[key][m]), np.asarray(whole[key][m]))
    assert split["sizes"] == whole["sizes"] and split["equal_sizes"] == whole["equal_sizes"]
    assert np.isfinite(np.asarray(whole["replicates"]["pwcca"])).any()
    stored = change.distance.sel(metric="pwcca", model=model).values
    np.testing.assert_array_equal(stored[: len(whole["change"]["pwcca"])], np.asarray(whole["change"]["pwcca"]))
    two = change_task(**kw, similarity=cfg, bins=bins, seed=0, subsets=(1, 3))  # a rank bin and an equal one
    both = np.hstack([np.asarray(whole["change"]["pwcca"]), np.asarray(whole["change_equal"]["pwcca"])])
    np.testing.assert_array_equal(np.asarray(two["estimate"]["pwcca"]), both[:, 1:3])
    with pytest.raises(ValueError, match="not each of"):
        combine_change(parts[:2] + parts[3:])
    with pytest.raises(ValueError, match="not each of"):
        combine_change(parts + parts[:1])
