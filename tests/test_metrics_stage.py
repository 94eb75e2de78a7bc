"""The metrics and report stages end to end on tiny models: every group, caching, values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from conftest import write_config

import evolution.analyses.mi
from evolution.metrics.mi import mutual_information
from evolution.metrics.results import open_metrics
from evolution.store import open_representations, read_rows
from pipelines.run import run

METRICS = """metrics:
  tokens: {top: 6, min_count: 3}
  mi: {k: 4, restarts: 2}
  neighbors: {k: 3}
  similarity: {min_ratio: 2, freq_bins: [1, 3, 10, 100]}
  tsne:
    perplexity: 3
    selections:
      - {name: animals, tokens: [cat, dog], color: token}
      - {name: the, tokens: [the], color: position}"""


@pytest.fixture()
def two_models(tmp_path, corpus_file, model_specs):
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        workdir=tmp_path / "w",
        extra=METRICS,
        models=[model_specs["translation"], model_specs["language_modeling"]],
    )
    run(cfg, progress=False)
    return cfg, tmp_path / "w"


def test_every_group_is_written_and_consistent(two_models):
    _, w = two_models
    path = w / "metrics.zarr"
    mi = open_metrics(path, "mi").load()
    assert mi.mi.dims == ("model", "layer", "target", "restart")
    assert list(mi.model.values) == ["translation", "language_modeling"]
    assert mi.sizes["layer"] == 3  # embeddings + 2 layers
    # output label only for the LM
    assert np.isnan(mi.mi.sel(model="translation", target="output")).all()
    assert not np.isnan(mi.mi.sel(model="language_modeling", target="output")).any()
    # MI is within [0, H(X)] and the entropy is that of the selected labels
    assert (mi.mi.values[~np.isnan(mi.mi.values)] <= mi.entropy.max().item() + 1e-9).all()
    nb = open_metrics(path, "neighbors").load()
    rate = nb.value.sel(measure="same_token").values
    assert ((rate >= 0) & (rate <= 1)).all()
    sim = open_metrics(path, "similarity").load()
    d = sim.distance.sel(metric="pwcca", model_a="translation", model_b="translation").values
    assert np.allclose(np.diag(d), 0, atol=1e-8)  # a view against itself
    cka = sim.distance.sel(metric="cka").values
    assert np.allclose(cka, np.transpose(cka, (2, 3, 0, 1)), atol=1e-10)  # symmetric
    change = open_metrics(path, "change").load()
    assert change.distance.dims == ("metric", "model", "layer_pair", "freq_bin")
    # the adjacent-layer change on all occurrences equals the similarity entry (same definition)
    t = open_metrics(path, "tsne_animals").load()
    assert t.xy.dims == ("model", "layer", "point", "component")
    assert set(t.token.values.ravel()) <= {"cat", "dog", ""}
    # the stage planned every unit it then computed (metrics/plan.json beside profile.jsonl)
    plan = json.loads((w / "metrics" / "plan.json").read_text())
    profile = [json.loads(line) for line in (w / "metrics" / "profile.jsonl").read_text().splitlines()]
    assert sorted((u["analysis"], u["unit"]) for u in plan["units"]) == sorted(
        (r["analysis"], r["unit"]) for r in profile
    )
    modelled = {u["analysis"] for u in plan["units"] if u["seconds"] is not None}
    assert modelled == {"mi", "neighbors", "similarity"} and plan["rate"] > 0 and plan["workers"] >= 1
    report = w / "report"
    assert (report / "report.html").is_file() and (report / "mi.png").is_file()
    assert (report / "tsne_the.png").is_file()
    assert "MI with the input" in (report / "report.md").read_text()


def test_mi_values_match_a_direct_computation(two_models):
    # recompute layer 1's input MI by hand from the store and the same k-means seed
    from evolution.metrics.mi import kmeans_labels, select_frequent

    _, w = two_models
    store = str(w / "reps.zarr")
    ds = open_representations(store, "translation")
    ids = ds.token_id.values
    rows = np.flatnonzero(select_frequent(ids, n_types=6, min_count=3))
    x = read_rows(store, "translation", 1, rows)
    np.testing.assert_array_equal(x, ds.hidden.sel(layer=1).values[rows])
    expected = mutual_information(ids[rows], kmeans_labels(x, k=4, seed=0))
    mi = open_metrics(w / "metrics.zarr", "mi").load()
    assert mi.mi.sel(model="translation", layer=1, target="input", restart=0).item() == pytest.approx(expected)


def test_added_model_reuses_cached_layers(two_models, corpus_file, model_specs, monkeypatch):
    cfg, w = two_models
    before = open_metrics(w / "metrics.zarr", "mi").load()
    calls = []
    real = evolution.analyses.mi.layer_task
    monkeypatch.setattr(evolution.analyses.mi, "layer_task", lambda **k: calls.append(k["model"]) or real(**k))
    cfg = write_config(
        cfg,
        corpus=corpus_file,
        workdir=w,
        extra=METRICS,
        models=[model_specs["translation"], model_specs["language_modeling"], model_specs["masked_lm"]],
    )
    run(cfg, progress=False)
    assert set(calls) == {"masked_lm"}  # only the new model's layers were computed
    after = open_metrics(w / "metrics.zarr", "mi").load()
    xr.testing.assert_equal(
        after.mi.sel(model=["translation", "language_modeling"], target=before.target.values), before.mi
    )  # the masked LM adds its targets (output, masked_input)
    calls.clear()
    run(cfg, progress=False)
    assert calls == []  # everything cached


def test_moving_the_stores_recomputes_nothing(two_models, corpus_file, model_specs, monkeypatch, tmp_path):
    """``metrics.store`` says where, not what: pointing it elsewhere rewrites the store from the
    cached units, computing none; the groups are equal."""
    cfg, w = two_models
    calls = []
    real = evolution.analyses.mi.layer_task
    monkeypatch.setattr(evolution.analyses.mi, "layer_task", lambda **k: calls.append(k["model"]) or real(**k))
    moved = tmp_path / "elsewhere" / "m.zarr"
    write_config(
        cfg,
        corpus=corpus_file,
        workdir=w,
        extra=METRICS + f"\n  store: {moved}",
        models=[model_specs["translation"], model_specs["language_modeling"]],
    )
    run(cfg, progress=False)
    assert calls == []
    for group in ("mi", "neighbors", "similarity"):
        xr.testing.assert_equal(open_metrics(moved, group).load(), open_metrics(w / "metrics.zarr", group).load())


def test_metrics_are_deterministic(two_models, tmp_path, corpus_file, model_specs):
    cfg2 = write_config(
        tmp_path / "c2.yaml",
        corpus=corpus_file,
        workdir=tmp_path / "w2",
        extra=METRICS,
        models=[model_specs["translation"], model_specs["language_modeling"]],
    )
    run(cfg2, progress=False)
    _, w = two_models
    for group in ("mi", "neighbors", "similarity", "change", "tsne_animals"):
        a = open_metrics(w / "metrics.zarr", group).load()
        b = open_metrics(tmp_path / "w2" / "metrics.zarr", group).load()
        xr.testing.assert_equal(a.drop_attrs(), b.drop_attrs())


def test_models_that_truncate_a_later_sentence_differently_are_still_compared(tmp_path, model_specs):
    """A sentence longer than the models' 32 positions, after the similarity sentences: the
    masked LM (beginning + end token) keeps one piece fewer of it than the translation encoder
    (end token only), so the stores' token axes differ; PWCCA between the models must still be
    computed, on the first sentences, and equal PWCCA of those rows read from each store."""
    from conftest import SENTENCES

    from evolution.metrics.similarity import View, pwcca

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES + [" ".join(SENTENCES * 3)]) + "\n", encoding="utf-8")
    extra = METRICS.replace("similarity: {min_ratio: 2,", f"similarity: {{sentences: {len(SENTENCES)}, min_ratio: 2,")
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus,
        workdir=tmp_path / "w",
        extra=extra,
        models=[model_specs["translation"], model_specs["masked_lm"]],
    )
    run(cfg, progress=False)
    stores = {m: open_representations(str(tmp_path / "w" / "reps.zarr"), m) for m in ("translation", "masked_lm")}
    assert stores["translation"].sizes["token"] != stores["masked_lm"].sizes["token"]  # the premise
    sim = open_metrics(tmp_path / "w" / "metrics.zarr", "similarity").load()
    d = sim.distance.sel(metric="pwcca", model_a="translation", model_b="masked_lm").values
    assert np.isfinite(d).all()
    rows = {m: np.flatnonzero(ds["sentence"].values < len(SENTENCES)) for m, ds in stores.items()}
    np.testing.assert_array_equal(
        stores["translation"]["token_id"].values[rows["translation"]],
        stores["masked_lm"]["token_id"].values[rows["masked_lm"]],
    )
    store = str(tmp_path / "w" / "reps.zarr")
    a = View(read_rows(store, "translation", 2, rows["translation"]), min_ratio=2)
    b = View(read_rows(store, "masked_lm", 1, rows["masked_lm"]), min_ratio=2)
    assert d[2, 1] == pytest.approx(1 - pwcca(a, b), abs=1e-9)  # stored as a distance


def test_bias_warning_names_the_biased_curves_only(caplog):
    """The control-vs-MI warning: with few occurrences per cluster the shuffled control
    (a real plug-in estimate on permuted labels) approaches the MI and is flagged; with
    many it stays near 0 and is not."""
    import logging

    from evolution.analyses.mi import _warn_bias
    from evolution.metrics.mi import layer_mi

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 20, size=400)
    x = rng.normal(size=(400, 4)).astype(np.float32)  # vectors unrelated to labels: MI is all bias
    few = layer_mi(x, labels, k=40, restarts=1, seed=0).as_dict()
    big_labels = rng.integers(0, 4, size=20000)
    y = (np.eye(4)[big_labels] * 5 + rng.normal(size=(20000, 4))).astype(np.float32)
    many = layer_mi(y, big_labels, k=8, restarts=1, seed=0).as_dict()
    assert few["shuffled"] >= 0.5 * np.mean(few["mi"]) and many["shuffled"] < 0.05 * np.mean(many["mi"])
    with caplog.at_level(logging.WARNING, logger="evolution.analyses.mi"):
        _warn_bias({("a", 0): {"output": few}, ("b", 0): {"input": many}})
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "MI(output) of a" in text and "of b" not in text


def _mlm_unit_keys(tmp_path, mi: dict) -> dict[str, str]:
    """Cache keys of the MI units of one masked LM under the MI config ``mi``."""
    from evolution.analyses.base import Inputs, ModelInputs, unit_key
    from evolution.analyses.mi import MI
    from evolution.config import MetricsConfig
    from evolution.metrics.plan import OccurrencePlan

    ids = np.array([5, 6, 5, 6, 7, 5], dtype=np.int64)
    plan = OccurrencePlan(mi={"input": (np.arange(6), ids)})
    model = ModelInputs(
        name="mlm",
        kind="fairseq",
        objective="mlm",
        key="extract-key",
        spec={"name": "mlm"},
        n_layers=2,
        d_model=4,
        coords={"sentence": np.zeros(6, np.int32), "token_id": ids},
        primary=np.ones(6, bool),
        annotation=None,
        freq_rank=np.ones(6, np.int32),
        plan=plan,
    )
    inputs = Inputs(
        store="unused", models={"mlm": model}, config=MetricsConfig(mi=mi), seed=0, torch_threads=1, arrays_dir=tmp_path
    )
    analysis = MI()
    return {u.name: unit_key(analysis, u) for u in analysis.units(inputs)}


def test_mlm_corruptions_do_not_invalidate_layer_results(tmp_path):
    one, seven = (_mlm_unit_keys(tmp_path, {"k": 4, "mlm_corruptions": n}) for n in (1, 7))
    assert set(one) == {"mlm-0", "mlm-1", "mlm-mlm-output"}
    assert one["mlm-0"] == seven["mlm-0"] and one["mlm-1"] == seven["mlm-1"]  # layer results kept
    assert one["mlm-mlm-output"] != seven["mlm-mlm-output"]  # the MLM-output unit redone
    five = _mlm_unit_keys(tmp_path, {"k": 5, "mlm_corruptions": 1})
    assert five["mlm-0"] != one["mlm-0"]  # k does count
