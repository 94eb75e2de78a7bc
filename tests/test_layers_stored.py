"""The notebook API on a store of some layers (``ev.represent(..., layers=[...])``, a run's
``extract.layers``; docs/decisions.md #31): every analysis and ``ev.compare`` refuse a layer that
was not stored, naming the stored layers and the fix; without ``layers=`` MI, the neighbours,
t-SNE and ``ev.compare`` compute the stored layers only (as the pipeline does), and those equal
the same analysis of a store of every layer; the similarity and the change, which compare the
layers with each other, refuse the model."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from conftest import SENTENCES, WORDS

import evolution.api as ev
from evolution.fixtures.random_init import make_hf_model

TOKENS = {"top": 100, "min_count": 5}
MI = {"k": 4, "restarts": 1, "bootstrap": 5}
COMPARE = {"k": 4, "bootstrap": 5, "restarts": 2, "tokens": {"top": 10, "min_count": 5}}


def _model(tmp, arch: str, seed: int):
    path = make_hf_model(
        tmp / f"{arch}-{seed}", arch=arch, words=WORDS, layers=2, d_model=16, heads=2, max_positions=32, seed=seed
    )
    return ev.load(path, name=arch)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The tiny GPT-2 (2 blocks: layers 0, 1, 2) on the shared sentences: every layer (``full``),
    layers [0, -1] (``some``: 0 and 2), and a second GPT-2 (other weights, the same vocabulary)
    whole (``other``) and with layer 0 only (``first``); a store holding a whole BERT beside the
    GPT-2 of layers [0, 2] (``mixed``)."""
    tmp = tmp_path_factory.mktemp("layers-api")
    gpt2, other = _model(tmp, "gpt2", 1), _model(tmp, "gpt2", 2)
    bert = _model(tmp, "bert", 1)
    ev.represent(bert, SENTENCES, attention=False, store=tmp / "mixed.zarr")
    ev.represent(gpt2, SENTENCES, attention=False, store=tmp / "mixed.zarr", layers=[0, -1])
    out = {
        "full": ev.represent(gpt2, SENTENCES, attention=False),
        "some": ev.represent(gpt2, SENTENCES, attention=False, layers=[0, -1]),
        "other": ev.represent(other, SENTENCES, attention=False),
        "first": ev.represent(other, SENTENCES, attention=False, layers=[0]),
        "mixed": ev.open_store(tmp / "mixed.zarr"),
    }
    yield out
    for reps in out.values():
        reps.close()


def test_the_stores_hold_the_layers_asked_for(stores):
    from evolution.api.analyses import partial_layers

    assert partial_layers(stores["some"]) == {"gpt2": [0, 2]}
    assert partial_layers(stores["first"]) == {"gpt2": [0]}
    assert partial_layers(stores["full"]) == {}
    assert partial_layers(stores["mixed"]) == {"gpt2": [0, 2]}
    hidden = stores["some"]["gpt2"].hidden.values
    assert np.isnan(hidden[1]).all() and np.isfinite(hidden[[0, 2]]).all()


@pytest.mark.parametrize("analysis", ["mi", "neighbors"])
@pytest.mark.parametrize("layers", [[1], [-2], [0, 1], [2, 1]])
def test_a_layer_not_stored_is_refused_naming_the_stored_ones(stores, analysis, layers):
    """Layer 1 (also as -2, counted from the top) is refused before any work, with the stored
    layers and both fixes named; MI used to return NaN there."""
    fn, options = (ev.mi, MI) if analysis == "mi" else (ev.neighbors, {"k": 3, "bootstrap": 5})
    with pytest.raises(ValueError) as err:
        fn(stores["some"], layers=layers, tokens=TOKENS, **options)
    message = str(err.value)
    wanted = [x if x >= 0 else 3 + x for x in layers]
    assert message.startswith(f"{analysis}: layers={wanted}: gpt2's store holds layers [0, 2] only, not 1 ")
    assert "pass layers= among [0, 2]" in message and "leave layers= out" in message
    assert "ev.represent(..., layers=None)" in message and "extract.layers: null" in message


@pytest.mark.parametrize("analysis", ["mi", "neighbors"])
def test_stored_layers_equal_the_analysis_of_every_layer(stores, analysis):
    """layers= among the stored ones (and by default, the stored ones) give the numbers of the
    store of every layer at those layers; the layer not stored stays NaN in the default group,
    as in the pipeline's."""
    fn, options = (ev.mi, MI) if analysis == "mi" else (ev.neighbors, {"k": 3, "bootstrap": 5})
    full = fn(stores["full"], tokens=TOKENS, **options)
    variables = ["mi", "mi_corrected"] if analysis == "mi" else ["value", "interval"]
    for layers, expect in (([2], [2]), ([-1], [2]), ([0, 2], [0, 2]), ([2, 0], [2, 0])):
        got = fn(stores["some"], layers=layers, tokens=TOKENS, **options)
        assert list(got.layer.values) == expect
        for v in variables:
            np.testing.assert_array_equal(got[v].values, full[v].sel(layer=expect).values, err_msg=f"{v} {layers}")
            assert np.isfinite(got[v].values).any()
    default = fn(stores["some"], tokens=TOKENS, **options)
    assert list(default.layer.values) == [0, 1, 2]
    for v in variables:
        np.testing.assert_array_equal(default[v].sel(layer=[0, 2]).values, full[v].sel(layer=[0, 2]).values)
        assert np.isnan(default[v].sel(layer=1).values).all()
        assert np.isfinite(full[v].sel(layer=1).values).any()


def test_tsne_lays_out_the_stored_layers_only(stores):
    sections = {"tsne": {"selections": [{"name": "cat", "tokens": ["cat"]}], "perplexity": 2}}
    full = ev.analyse(stores["full"], sections)["tsne_cat"].xy
    some = ev.analyse(stores["some"], sections)["tsne_cat"].xy
    np.testing.assert_array_equal(some.sel(layer=[0, 2]).values, full.sel(layer=[0, 2]).values)
    assert np.isnan(some.sel(layer=1).values).all() and np.isfinite(full.sel(layer=1).values).all()


@pytest.mark.parametrize(
    "call",
    [
        lambda reps: ev.similarity(reps, bootstrap=0),
        lambda reps: ev.change(reps, bootstrap=0),
        lambda reps: ev.change(reps, layers=[0, 2], bootstrap=0),
        lambda reps: ev.analyse(reps, {"similarity": {"bootstrap": 0, "min_ratio": 1.0}}),
    ],
)
def test_the_similarity_and_the_change_refuse_a_store_of_some_layers(stores, call):
    with pytest.raises(ValueError) as err:
        call(stores["some"])
    message = str(err.value)
    assert message.startswith("similarity (ev.similarity, ev.change) reads every layer of gpt2: ")
    assert "gpt2's store holds layers [0, 2] only" in message
    assert "ev.represent(..., layers=None)" in message and "extract.layers: null" in message
    assert "models=" not in message  # no other model to analyse instead


def test_beside_a_model_of_every_layer_the_refusal_names_it_and_it_runs_alone(stores):
    mixed = stores["mixed"]
    with pytest.raises(ValueError, match=r"reads every layer of gpt2: .*analyse the others only \(models=\['bert'\]\)"):
        ev.similarity(mixed, bootstrap=0)
    sim = ev.similarity(mixed, models=["bert"], bootstrap=0)
    assert list(sim.model_a.values) == ["bert"] and np.isfinite(sim.distance.sel(metric="pwcca").values).any()
    with pytest.raises(ValueError, match=r"mi: layers=\[1\]: gpt2's store holds layers \[0, 2\] only, not 1 "):
        ev.mi(mixed, layers=[1], tokens=TOKENS, **MI)
    got = ev.mi(mixed, models=["bert"], layers=[1], tokens=TOKENS, **MI)  # bert stores every layer
    assert list(got.layer.values) == [1] and np.isfinite(got.mi.values).any()


def test_compare_runs_on_the_layers_stored_in_both_and_refuses_the_others(stores):
    """By default the layers both runs stored, each equal to the comparison of the stores of every
    layer; layers= naming another is refused (it used to end in numpy's LinAlgError)."""
    full, some, other, first = stores["full"], stores["some"], stores["other"], stores["first"]
    whole = ev.compare(other, full, **COMPARE)
    assert list(whole.layer.values) == [0, 1, 2]
    for a, b, expect in ((other, some, [0, 2]), (first, full, [0]), (first, some, [0])):
        got = ev.compare(a, b, **COMPARE)
        assert list(got.layer.values) == expect
        reference = whole.sel(layer=expect)
        for v in ("pwcca_distance", "cka_distance", "mi_change", "same_token_change", "same_token_change_interval"):
            np.testing.assert_array_equal(got[v].values, reference[v].values, err_msg=v)
        assert np.isfinite(got.pwcca_distance.values).all()
    got = ev.compare(other, some, layers=[-1], **COMPARE)
    xr.testing.assert_equal(got.pwcca_distance, whole.pwcca_distance.sel(layer=[2]))
    for a, b, layers, missing, held, both in (
        (other, some, [1], [1], "b['gpt2']'s store holds layers [0, 2] only", [0, 2]),
        (other, some, [-2], [1], "b['gpt2']'s store holds layers [0, 2] only", [0, 2]),
        (some, other, [0, 1], [1], "a['gpt2']'s store holds layers [0, 2] only", [0, 2]),
        (
            first,
            some,
            [2],
            [2],
            "a['gpt2']'s store holds layers [0] only; b['gpt2']'s store holds layers [0, 2] only",
            [0],
        ),
    ):
        with pytest.raises(ValueError) as err:
            ev.compare(a, b, layers=layers, **COMPARE)
        message = str(err.value)
        assert message.startswith(f"compare: layers {missing} are not stored in both runs: {held} ")
        assert f"pass layers= among {both}, the layers stored in both" in message
        assert "ev.represent(..., layers=None)" in message and "extract.layers: null" in message


def test_compare_refuses_runs_without_a_layer_in_common(stores, tmp_path):
    gpt2 = _model(tmp_path, "gpt2", 1)
    with ev.represent(gpt2, SENTENCES, attention=False, layers=[1]) as middle:
        with pytest.raises(ValueError, match=r"compare: no layer is stored in both runs: a\['gpt2'\]'s store holds "):
            ev.compare(middle, stores["first"], **COMPARE)
