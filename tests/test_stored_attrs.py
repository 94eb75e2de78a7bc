"""What is stored is what was used: the attributes and coordinates a result carries (seed, k,
restarts, bootstrap replicates, token selection, estimator, layers) equal the settings its
computation ran with, from the notebook API and from a pipeline run. Every setting passed is
a non-default value (seed 3, k 7, 2 restarts, ...), so that a constant default written in
place of the value used would be caught."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SENTENCES, WORDS, write_config

import evolution.api as ev
from evolution.fixtures.random_init import make_hf_model

SEED = 3
TOKENS = {"top": 20, "min_count": 3}  # defaults here: 100 and 5 (API_TOKENS)
MI = {"k": 7, "restarts": 2, "bootstrap": 4}  # defaults: 10,000 (the API: 100), 3, 200
NEIGHBORS = {"k": 4, "bootstrap": 3}  # defaults: 50, 200


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stored-attrs")
    return {
        a: make_hf_model(tmp / a, arch=a, words=WORDS, layers=2, d_model=16, heads=2, max_positions=32, seed=1)
        for a in ("bert", "gpt2")
    }


@pytest.fixture(scope="module")
def reps(models):
    return ev.represent([ev.load(str(p), name=a) for a, p in models.items()], SENTENCES, attention=5)


def _check_mi(ds, *, restarts: int, bootstrap: int, k: int, seed: int) -> None:
    assert ds.attrs["seed"] == seed
    assert ds.attrs["bootstrap"] == bootstrap
    assert list(ds.restart.values) == list(range(restarts))
    n = ds.n.values
    ok = np.isfinite(n)
    assert ok.any() and (ds.k.values[ok] == k).any()  # the k passed ran somewhere (not capped everywhere)
    # k capped at n // 10 (layer_mi), the one that ran stored per (model, layer, target)
    np.testing.assert_array_equal(ds.k.values[ok], np.minimum(k, np.maximum(2, n[ok] // 10)))
    seeds = ds.kmeans_seed.values
    want = np.broadcast_to(seed + np.arange(restarts), seeds.shape)
    np.testing.assert_array_equal(seeds[np.isfinite(seeds)], want[np.isfinite(seeds)])
    assert f"({bootstrap} bootstrap replicates" in ds.mi_mean_interval.attrs["long_name"]


def test_api_mi_stores_the_seed_restarts_replicates_and_k_it_ran(reps):
    ds = ev.mi(reps, tokens=TOKENS, seed=SEED, **MI)
    _check_mi(ds, seed=SEED, **MI)
    assert list(ds.layer.values) == [0, 1, 2] and list(ds.model.values) == ["bert", "gpt2"]
    assert list(ev.mi(reps, tokens=TOKENS, seed=SEED, layers=[1], models=["gpt2"], **MI).layer.values) == [1]


def test_api_mi_counts_the_token_selection_it_used(reps):
    """The occurrences MI ran on (``n``) are those of the selection passed: the ``top`` most
    frequent types with at least ``min_count`` occurrences."""
    from evolution.api.analyses import inputs_of

    ds = ev.mi(reps, tokens=TOKENS, seed=SEED, **MI)
    inputs = inputs_of(reps, {"mi": MI}, tokens=TOKENS, seed=SEED)
    for name, m in inputs.models.items():
        rows, labels = m.plan.mi["input"]
        assert ds.n.sel(model=name, target="input").values.tolist() == [len(rows)] * 3
        counts = np.unique(labels, return_counts=True)[1]
        assert counts.min() >= TOKENS["min_count"] and len(counts) <= TOKENS["top"]


def test_api_neighbors_and_similarity_store_their_seed_replicates_and_estimator(reps):
    nb = ev.neighbors(reps, tokens=TOKENS, seed=SEED, **NEIGHBORS)
    assert nb.attrs["seed"] == SEED
    assert f"({NEIGHBORS['bootstrap']} replicates" in nb.interval.attrs["long_name"]
    assert list(nb.layer.values) == [0, 1, 2]
    sim = ev.similarity(reps, seed=SEED, sentences=20, bootstrap=2, methods=["cka"])
    assert sim.attrs["seed"] == SEED
    assert list(sim.metric.values) == ["cka"]  # default: pwcca and cka
    from evolution.api.analyses import inputs_of

    rows = inputs_of(reps, {"similarity": {"sentences": 20, "min_ratio": 1.0}}, seed=SEED).models["bert"]
    assert sim.attrs["n_occurrences"] == len(rows.plan.similarity_rows)
    heads = ev.heads(reps, punctuation="unicode")  # default: clark
    assert heads.attrs["punctuation"] == "unicode"


def test_api_groups_record_the_config_they_ran_with(reps):
    nb = ev.neighbors(reps, tokens=TOKENS, seed=SEED, **NEIGHBORS)
    config = nb.attrs["config"]
    assert config["neighbors"]["k"] == NEIGHBORS["k"] and config["tokens"] == TOKENS


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, models):
    from pipelines.run import main

    tmp = tmp_path_factory.mktemp("stored-attrs-run")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    spec = {"name": "bert", "kind": "huggingface", "path": str(models["bert"])}
    cfg = write_config(
        tmp / "c.yaml",
        corpus=corpus,
        models=[spec],
        workdir=tmp / "w",
        extra=(
            f"seed: {SEED}\n"
            "metrics:\n"
            f"  tokens: {{top: {TOKENS['top']}, min_count: {TOKENS['min_count']}}}\n"
            f"  mi: {{k: {MI['k']}, restarts: {MI['restarts']}, bootstrap: {MI['bootstrap']}}}\n"
            f"  neighbors: {{k: {NEIGHBORS['k']}, bootstrap: {NEIGHBORS['bootstrap']}}}\n"
            "  similarity: {sentences: 20, min_ratio: 1.0, bootstrap: 2, methods: [cka], equal_bins: 0}\n"
            "  tsne: null\n  influence: null\n  heads: {punctuation: unicode}\n"
            "report: {views: null}"
        ),
    )
    assert main([str(cfg)]) == 0
    return tmp / "w"


def test_a_pipeline_runs_groups_store_what_they_ran_with(run_dir):
    from evolution.metrics.results import open_metrics

    store = str(run_dir / "metrics.zarr")
    mi = open_metrics(store, "mi")
    _check_mi(mi, seed=SEED, **MI)
    for group in ("mi", "neighbors", "similarity", "heads"):
        ds = open_metrics(store, group)
        assert ds.attrs["seed"] == SEED, group
        config = ds.attrs["config"]
        assert config["tokens"] == TOKENS, group
        assert {k: config["mi"][k] for k in MI} == MI, group
        assert {k: config["neighbors"][k] for k in NEIGHBORS} == NEIGHBORS, group
        assert config["similarity"]["methods"] == ["cka"] and config["similarity"]["bootstrap"] == 2, group
        assert config["heads"]["punctuation"] == "unicode", group
    nb = open_metrics(store, "neighbors")
    assert f"({NEIGHBORS['bootstrap']} replicates" in nb.interval.attrs["long_name"]
    assert list(nb.layer.values) == [0, 1, 2]
    sim = open_metrics(store, "similarity")
    assert list(sim.metric.values) == ["cka"]
    assert open_metrics(store, "heads").attrs["punctuation"] == "unicode"
