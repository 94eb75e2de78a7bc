"""The notebook API runs the pipeline's own code: a model's representations from
``represent`` equal a pipeline run's ``reps.zarr`` group (values, dims, coordinates,
attributes), an analysis from the API equals the run's ``metrics.zarr`` group, views come
as one self-contained page, and on Hugging Face models nothing imports fairseq or faiss."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import SENTENCES, write_config

import evolution.api as ev

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, model_specs):
    """A pipeline run of the tiny BERT and GPT-2 on the test sentences, with MI and neighbours."""
    from pipelines.run import run

    tmp = tmp_path_factory.mktemp("api-run")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    cfg = write_config(
        tmp / "c.yaml",
        corpus=corpus,
        models=[model_specs["bert"], model_specs["gpt2"]],
        workdir=tmp / "w",
        extra=(
            "metrics:\n  tokens: {top: 100, min_count: 5}\n"
            "  mi: {k: 6, restarts: 2, bootstrap: 10}\n"
            "  neighbors: {k: 5, bootstrap: 10}\n  similarity: null\n"
            "  tsne: null\n  influence: null\n  heads: null\n"
            "report: {views: null}"
        ),
    )
    run(cfg, progress=False)
    return tmp / "w"


@pytest.fixture(scope="module")
def reps(model_specs):
    models = [ev.load(model_specs[n]["path"], name=n) for n in ("bert", "gpt2")]
    return ev.represent(models, SENTENCES, attention=5)


def test_representations_equal_a_pipeline_runs_store(reps, run_dir):
    from evolution.store import open_attention, open_representations

    for name in ("bert", "gpt2"):
        ours, theirs = reps[name], open_representations(str(run_dir / "reps.zarr"), name)
        assert ours.hidden.dims == theirs.hidden.dims == ("layer", "token", "feature")
        assert set(ours.coords) == set(theirs.coords)
        for c in theirs.coords:
            np.testing.assert_array_equal(ours[c].values, theirs[c].values, err_msg=c)
        # batches differ (the run's config cuts tasks of 64 tokens): equal up to float32 rounding
        np.testing.assert_allclose(ours.hidden.values, theirs.hidden.values, rtol=1e-5, atol=1e-5)
        assert set(theirs.attrs) - {"corpus_key", "seed"} <= set(ours.attrs)
        a, b = reps.attention(name), open_attention(str(run_dir / "reps.zarr"), name)
        assert set(a.data_vars) == set(b.data_vars)
        np.testing.assert_allclose(a.attention.values, b.attention.values.astype(np.float32), atol=1e-3)


def test_an_api_analysis_equals_the_pipelines_group(run_dir):
    """On the run's own store (the same states), the API's MI and neighbours are the run's."""
    from evolution.metrics.results import open_metrics

    reps = ev.open_store(str(run_dir / "reps.zarr"))
    mi = ev.mi(reps, k=6, restarts=2, bootstrap=10)
    theirs = open_metrics(str(run_dir / "metrics.zarr"), "mi")
    for v in ("mi", "mi_shuffled", "mi_corrected", "entropy", "mi_corrected_interval"):
        np.testing.assert_allclose(mi[v].values, theirs[v].sel(model=list(mi.model.values)).values, err_msg=v)
    nb = ev.neighbors(reps, k=5, bootstrap=10)
    theirs = open_metrics(str(run_dir / "metrics.zarr"), "neighbors")
    np.testing.assert_allclose(nb.value.values, theirs.value.sel(model=list(nb.model.values)).values)


def test_representations_are_a_mapping_of_models(reps):
    """``Representations`` is a ``Mapping``: ``keys()``, ``dict(reps)`` and ``in`` work (an attribute
    named ``keys`` once shadowed the method, so ``dict(reps)`` failed)."""
    assert list(reps.keys()) == ["bert", "gpt2"] == list(reps)
    assert set(dict(reps)) == {"bert", "gpt2"} and "bert" in reps
    assert dict(reps)["bert"].sizes == reps["bert"].sizes
    assert set(reps.extract_keys) == {"bert", "gpt2"}


def test_in_memory_representations_feed_every_analysis(reps):
    mi = ev.mi(reps, k=6, restarts=2, bootstrap=10)
    assert list(mi.model.values) == ["bert", "gpt2"] and np.isfinite(mi.mi_corrected.values).any()
    assert mi.attrs["representations"].startswith("memory://")
    heads = ev.heads(reps)
    assert heads.sizes["model"] == 2 and "confidence" in heads.measure.values
    sim = ev.similarity(reps, sentences=len(SENTENCES), bootstrap=0)
    d = sim.distance.sel(metric="pwcca", model_a="bert", model_b="bert")
    assert np.allclose(np.diag(d.values), 0, atol=1e-6)  # a layer against itself


def test_views_are_one_self_contained_page(model_specs, tmp_path):
    bert = ev.load(model_specs["bert"]["path"], name="bert")
    page = ev.head_view(bert, "the cat sat on the mat")
    assert "<script src" not in page.html and "<link" not in page.html  # nothing fetched from elsewhere
    assert "#panel-model,#panel-neuron{display:none}" in page.html
    assert '"cat"' in page.html or "cat" in page.html
    frame = page._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and "sandbox" in frame
    full = ev.views(bert, ["the cat sat on the mat", "a dog ran"])
    assert "display:none" not in full.html
    out = full.save(tmp_path / "v.html")
    assert out.read_text(encoding="utf-8") == full.html


def test_load_infers_the_kind(model_specs, tmp_path):
    assert ev.load(model_specs["bert"]["path"]).spec["kind"] == "huggingface"
    ft = ev.load(model_specs["translation"]["path"], data=model_specs["translation"]["data"], name="mt")
    assert ft.spec["kind"] == "fairseq" and ft.name == "mt"
    with pytest.raises(FileNotFoundError, match="not a Hugging Face hub id"):
        ev.load(str(tmp_path / "no such" / "model"))


def test_hugging_face_use_imports_neither_fairseq_nor_faiss(model_specs, tmp_path):
    """Loading, representing, MI, neighbours, head statistics, views, opening stored results and
    drawing a figure, with fairseq and faiss made unimportable."""
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("fairseq", "faiss"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import evolution.api as ev
        from evolution.metrics.results import open_metrics
        from evolution.analyses.mi_figures import mi_by_layer
        bert = ev.load({model_specs["bert"]["path"]!r}, name="bert")
        reps = ev.represent(bert, {SENTENCES!r}, attention=3)
        mi = ev.mi(reps, k=6, restarts=2, bootstrap=5)
        nb = ev.neighbors(reps, k=5, bootstrap=5)
        heads = ev.heads(reps)
        page = ev.head_view(bert, "the cat sat on the mat")
        assert mi.attrs["kmeans"]["bert"]["input"].endswith("(sklearn)"), mi.attrs["kmeans"]
        from evolution.metrics.results import write_metrics
        write_metrics({str(tmp_path / "m.zarr")!r}, {{"mi": mi}}, fingerprint="x")
        fig = mi_by_layer({str(tmp_path / "m.zarr")!r})
        assert fig is not None
        bad = [m for m in sys.modules if m.split(".")[0] in ("fairseq", "faiss")]
        assert not bad, bad
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_drawing_keeps_a_backend_the_user_chose():
    """A notebook's inline backend (here: svg, chosen before) survives the first figure; a script
    with no backend chosen draws on Agg."""
    import os
    import subprocess
    import sys

    code = (
        "import matplotlib; {pre}from evolution.analyses.plotting import plt; plt().figure(); "
        "print(matplotlib.get_backend().lower())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    out = [
        subprocess.run(
            [sys.executable, "-c", code.format(pre=pre)], capture_output=True, text=True, env=env, check=True
        ).stdout.strip()
        for pre in ("matplotlib.use('svg'); ", "")
    ]
    assert out == ["svg", "agg"]


def test_an_analysis_records_the_seed_it_ran_with(reps):
    """The seed in an analysis' attributes is the one its numbers came from: MI's k-means restarts
    and bootstrap depend on it (seeds 7 and 0 give different numbers), and running again with the
    recorded seed gives the same numbers."""
    import xarray as xr

    kw = dict(k=6, restarts=2, bootstrap=10)
    seven, zero = ev.mi(reps, seed=7, **kw), ev.mi(reps, seed=0, **kw)
    assert not np.allclose(seven.mi_corrected_interval.values, zero.mi_corrected_interval.values, equal_nan=True)
    for ds in (seven, zero):
        again = ev.mi(reps, seed=int(ds.attrs["seed"]), **kw)
        xr.testing.assert_allclose(again.mi_corrected_interval, ds.mi_corrected_interval)
    assert (seven.attrs["seed"], zero.attrs["seed"]) == (7, 0)
