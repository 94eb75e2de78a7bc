"""``extract.layers`` stores some layers only: the layer axis keeps 0..L, a layer left out has no
chunks on disk (NaN when read with xarray), the plan's bytes fall by the share left out and the
run writes what it plans, and MI and the neighbour rates of a stored layer equal those of a full
extraction exactly; whatever reads every layer (similarity, the change by part of speech, the
distance to the final model) refuses, naming the setting, before it computes anything."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import SENTENCES, write_config

METRICS = (
    "metrics:\n  tokens: {top: 100, min_count: 5}\n"
    "  mi: {k: 6, restarts: 2, bootstrap: 10}\n"
    "  neighbors: {k: 5, bootstrap: 10}\n  similarity: null\n"
    "  tsne: null\n  influence: null\n  heads: null\n"
    "report: {views: null}"
)


def _run(tmp: Path, model_specs, *, layers: str | None) -> Path:
    from pipelines.run import run

    tmp.mkdir(parents=True, exist_ok=True)
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    extra = (f"  layers: {layers}\n" if layers else "") + METRICS
    cfg = write_config(
        tmp / "c.yaml", corpus=corpus, models=[model_specs["bert"], model_specs["gpt2"]], workdir=tmp / "w", extra=extra
    )
    run(cfg, progress=False)
    return tmp / "w"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_specs):
    """The tiny BERT and GPT-2 (2 blocks: layers 0, 1, 2) extracted whole and with layers [-1, 0]."""
    tmp = tmp_path_factory.mktemp("layers")
    return {
        "full": _run(tmp / "full", model_specs, layers=None),
        "some": _run(tmp / "some", model_specs, layers="[-1, 0]"),
    }


def _chunk_bytes(store: Path, model: str, layer: int | None = None) -> int:
    """Bytes of the hidden array's chunk files (zarr v3: ``c/<layer>/<token>/<feature>``)."""
    root = store / model / "hidden" / "c"
    if layer is not None:
        root = root / str(layer)
    if not root.exists():
        return 0
    return sum(os.path.getsize(Path(d) / f) for d, _, fs in os.walk(root) for f in fs)


def test_the_stored_layers_equal_a_full_extraction_and_the_others_are_never_written(runs):
    from evolution.store import open_representations, stored_layers

    for name in ("bert", "gpt2"):
        full = open_representations(str(runs["full"] / "reps.zarr"), name)
        some = open_representations(str(runs["some"] / "reps.zarr"), name)
        assert some.hidden.shape == full.hidden.shape and list(some.layer.values) == [0, 1, 2]
        assert stored_layers(str(runs["some"] / "reps.zarr"), name) == [0, 2]
        assert stored_layers(str(runs["full"] / "reps.zarr"), name) == [0, 1, 2]
        for layer in (0, 2):
            np.testing.assert_array_equal(some.hidden.isel(layer=layer).values, full.hidden.isel(layer=layer).values)
        assert np.isnan(some.hidden.isel(layer=1).values).all()
        assert np.isfinite(full.hidden.isel(layer=1).values).all()
        assert _chunk_bytes(runs["some"] / "reps.zarr", name, 1) == 0
        for layer in (0, 2):  # each stored layer's chunks are those of the full extraction
            assert _chunk_bytes(runs["some"] / "reps.zarr", name, layer) == _chunk_bytes(
                runs["full"] / "reps.zarr", name, layer
            )


def test_the_plan_drops_the_layers_left_out_and_the_run_writes_what_it_plans(runs, model_specs):
    """The plan's states are stored layers x rows x d; the full plan's, all L + 1 layers: the
    ratio is 2/3 here. What the run wrote (the chunk files) is within 5% of each plan."""
    from evolution.config import load_config
    from evolution.corpus.text import Corpus
    from pipelines.plan import plan_extract

    for which in ("full", "some"):
        config = load_config(runs[which].parent / "c.yaml").extract
        corpus = Corpus(sentences=list(SENTENCES), lines=list(range(1, len(SENTENCES) + 1)), source="<sentences>")
        for name in ("bert", "gpt2"):
            plan = plan_extract(model_specs[name], corpus, config, name=name, workers=1)
            assert plan.layers == 3 and plan.stored_layers == (3 if which == "full" else 2)
            written = _chunk_bytes(runs[which] / "reps.zarr", name)
            assert abs(written - plan.hidden_bytes) <= 0.05 * plan.hidden_bytes, (which, name, written, plan)
    assert _chunk_bytes(runs["some"] / "reps.zarr", "bert") * 3 == _chunk_bytes(runs["full"] / "reps.zarr", "bert") * 2


def test_mi_and_neighbours_of_a_stored_layer_equal_a_full_extractions(runs):
    from evolution.metrics.results import open_metrics

    for group, variables in (
        ("mi", ("mi", "mi_shuffled", "mi_corrected", "mi_corrected_interval", "k", "n")),
        ("neighbors", ("value", "interval")),
    ):
        full = open_metrics(str(runs["full"] / "metrics.zarr"), group)
        some = open_metrics(str(runs["some"] / "metrics.zarr"), group)
        assert list(some.layer.values) == [0, 1, 2]
        for v in variables:
            if v not in full:
                continue
            for layer in (0, 2):
                np.testing.assert_array_equal(
                    some[v].sel(layer=layer).values, full[v].sel(layer=layer).values, err_msg=f"{group}/{v} {layer}"
                )
            assert np.isnan(some[v].sel(layer=1).values).all(), f"{group}/{v}: layer 1 was not stored"
            assert np.isfinite(full[v].sel(layer=1).values).any()


def test_a_layer_left_out_is_refused_by_name(runs):
    from evolution.store import read_rows

    store = str(runs["some"] / "reps.zarr")
    np.testing.assert_array_equal(
        read_rows(store, "bert", 2, np.array([3, 1])),
        read_rows(str(runs["full"] / "reps.zarr"), "bert", 2, np.array([3, 1])),
    )
    with pytest.raises(ValueError, match=r"layer 1 is not stored.*extract\.layers kept \[0, 2\]"):
        read_rows(store, "bert", 1, np.array([0, 1]))


def test_analyses_that_read_every_layer_refuse_a_store_of_some(runs):
    """Through the API (the pipeline's code path): MI runs on the stored layers, similarity
    refuses naming its setting, and ModelInputs says which layers are stored."""
    import evolution.api as ev
    from evolution.api.analyses import inputs_of

    some = ev.open_store(str(runs["some"] / "reps.zarr"))
    inputs = inputs_of(some, {"mi": {"k": 6}}, tokens={"top": 100, "min_count": 5})
    m = inputs.models["bert"]
    assert m.layers == [0, 2] and m.n_layers == 3
    with pytest.raises(ValueError, match=r"reads every layer of bert.*\[0, 2\] only.*extract\.layers: null"):
        ev.similarity(some, sentences=len(SENTENCES), bootstrap=0, min_ratio=0.1)
    mi = ev.mi(some, k=6, restarts=2, bootstrap=10, tokens={"top": 100, "min_count": 5})
    x = mi.mi.sel(target="input")  # (the output label is an LM's only)
    assert np.isfinite(x.sel(layer=[0, 2]).values).all() and np.isnan(x.sel(layer=1).values).all()
    full = ev.open_store(str(runs["full"] / "reps.zarr"))
    m = inputs_of(full, {"mi": {"k": 6}}, tokens={"top": 100, "min_count": 5}).models["bert"]
    assert m.layers == [0, 1, 2]
    m.require_every_layer("metrics.similarity")  # every layer stored: no error


def test_resolving_layers_counts_negatives_from_the_end_and_names_the_setting():
    from evolution.store import resolve_layers

    assert resolve_layers(None, 4) == [0, 1, 2, 3]
    assert resolve_layers([-1, 0, 3, 1], 4) == [0, 1, 3]
    assert resolve_layers([-4], 4) == [0]
    with pytest.raises(ValueError, match=r"extract\.layers: m has layers 0\.\.3.*not 4, -5"):
        resolve_layers([0, 4, -5], 4, model="m")


def test_a_config_that_compares_every_layer_is_refused_before_any_work(tmp_path, model_specs):
    from evolution.config import load_config

    (tmp_path / "c.txt").write_text("a b c\n", encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "workdir: w\ncorpus: {source: text, path: c.txt}\nextract: {layers: [0, -1]}\n"
        f"models:\n  - {{name: m, kind: huggingface, path: {model_specs['bert']['path']}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(Exception, match=r"metrics\.similarity compares every layer.*set metrics\.similarity: null"):
        load_config(cfg)
    cfg.write_text(cfg.read_text().replace("models:", "metrics: {similarity: null}\nmodels:"), encoding="utf-8")
    assert load_config(cfg).extract.layers == [0, -1]


@pytest.mark.parametrize("plan", [True, False], ids=["--plan", "a run"])
def test_a_layer_the_model_lacks_is_refused_before_its_weights_load(tmp_path, model_specs, monkeypatch, capsys, plan):
    """``extract.layers: [0, 99]`` on a Hugging Face model of 2 blocks: refused from its
    config.json, before the model is loaded (it was refused after, 35 s on a large model), exit 2,
    nothing extracted."""
    import evolution.models
    from pipelines.run import main

    def no_loading(spec, *a, **k):
        raise AssertionError(f"{spec['name']} was loaded")

    monkeypatch.setattr(evolution.models, "cached_adapter", no_loading)
    (tmp_path / "c.txt").write_text("a b c\n", encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "workdir: w\ncluster: synchronous\ncorpus: {source: text, path: c.txt}\nextract: {layers: [0, 99]}\n"
        "metrics: {similarity: null}\n"
        f"models:\n  - {{name: m, kind: huggingface, path: {model_specs['bert']['path']}}}\n",
        encoding="utf-8",
    )
    assert main([str(cfg), "--no-progress", *(["--plan"] if plan else [])]) == 2
    out = capsys.readouterr()
    assert "extract.layers: m has layers 0..2 (0: the embeddings; -1: the last), not 99" in out.out + out.err
    assert not (tmp_path / "w" / "reps.zarr").exists()
