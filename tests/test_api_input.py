"""The notebook API at the door: bad input names the argument, the item and the fix; every
analysis takes models= and layers=; plots refuse unknown models and draw each model's own heads;
represent() leaves no memory or temporary folder behind once its result is closed or deleted."""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from conftest import SENTENCES

import evolution.api as ev


@pytest.fixture(scope="module")
def bert(model_specs):
    return ev.load(model_specs["bert"]["path"], name="bert")


@pytest.fixture(scope="module")
def gpt2(model_specs):
    return ev.load(model_specs["gpt2"]["path"], name="gpt2")


@pytest.mark.parametrize(
    "sentences, error, message",
    [
        ([1, None], TypeError, r"sentences\[0\] is int 1, not a string"),
        (["the cat", None], TypeError, r"sentences\[1\] is NoneType"),
        ([], ValueError, "sentences is empty"),
        (["the cat", "   "], ValueError, r"sentences\[1\] is empty"),
        ([["the", "big cat"]], TypeError, r"sentences\[0\] is a list, read as words.*'big cat'"),
        ([[]], TypeError, r"sentences\[0\] is a list"),
    ],
)
def test_bad_sentences_are_refused_naming_the_item(bert, sentences, error, message):
    with pytest.raises(error, match=message):
        ev.represent(bert, sentences)


def test_a_pretokenised_sentence_is_its_words(bert):
    with (
        ev.represent(bert, [["the", "cat", "sat"]], attention=False) as words,
        ev.represent(bert, ["the cat sat"], attention=False) as text,
    ):
        np.testing.assert_array_equal(words["bert"].hidden.values, text["bert"].hidden.values)
        assert list(words["bert"].token_str.values) == list(text["bert"].token_str.values)


@pytest.mark.parametrize(
    "models, error, message",
    [
        ("bert-base-uncased", TypeError, r"models\[0\] is str 'bert-base-uncased', not a loaded model.*ev.load"),
        ([], ValueError, "models is empty"),
        ({"a": "some/dir"}, TypeError, r"models\['a'\] is str"),
    ],
)
def test_an_id_where_a_model_is_expected_is_refused(models, error, message):
    with pytest.raises(error, match=message):
        ev.represent(models, ["the cat"])


def test_too_few_occurrences_for_similarity_name_the_model(bert, gpt2):
    with ev.represent([bert, gpt2], SENTENCES[:3], attention=False) as reps:
        with pytest.raises(ValueError, match=r"similarity: bert has \d+ occurrences .* 16 features.*min_ratio x d"):
            ev.similarity(reps, min_ratio=100)


def test_every_analysis_takes_models_and_layers(bert, gpt2):
    with ev.represent([bert, gpt2], SENTENCES, attention=False) as reps:
        full = ev.mi(reps, k=4, restarts=1, bootstrap=0)
        part = ev.mi(reps, models=["gpt2"], layers=[0, 2], k=4, restarts=1, bootstrap=0)
        assert list(part.model.values) == ["gpt2"] and list(part.layer.values) == [0, 2]
        xr.testing.assert_allclose(part.mi_mean.sel(model="gpt2"), full.mi_mean.sel(model="gpt2", layer=[0, 2]))
        sim = ev.similarity(reps, layers=[1, 2], bootstrap=0)
        assert list(sim.layer_a.values) == [1, 2] and list(sim.layer.values) == [1, 2]
        change = ev.change(reps, layers=[1, 2], bootstrap=0)
        assert list(change.layer_pair.values) == ["1-2"]
        with pytest.raises(KeyError, match=r"\['roberta'\] not in these representations; they hold \['bert', 'gpt2'\]"):
            ev.mi(reps, models=["roberta"])
        with pytest.raises(KeyError, match=r"layers \[9\] are not in this group"):
            ev.neighbors(reps, layers=[9], k=3, bootstrap=0)


def test_plots_refuse_an_unknown_model_and_draw_each_models_own_heads():
    value = np.full((2, 3, 4, 1), np.nan)  # (model, layer, head, measure): model b has 2 heads, a 4
    value[0] = np.arange(12).reshape(3, 4, 1)
    value[1, :, :2] = np.arange(6).reshape(3, 2, 1)
    ds = xr.Dataset(
        {"value": (("model", "layer", "head", "measure"), value)},
        coords={"model": ["a", "b"], "layer": [1, 2, 3], "head": range(4), "measure": ["confidence"]},
    )
    fig = ev.plot.heads(ds, model="b")
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (3, 2)  # b's own 2 heads, not 4 columns with 2 empty
    assert ev.plot.heads(ds, model="a").axes[0].images[0].get_array().shape == (3, 4)
    with pytest.raises(KeyError, match=r"no model \['c'\] in this group; it has \['a', 'b'\]"):
        ev.plot.heads(ds, model="c")


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def test_represent_releases_its_memory_and_folders(bert):
    """Five calls, each deleted: the resident memory stays within 10% of one call's, and no cache
    folder or in-memory store is left; close() (or the with-block) frees them at once."""
    import fsspec

    sentences = SENTENCES * 20
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("evolution-cache-*"))
    memory = fsspec.filesystem("memory")
    stores = lambda: {p for p in memory.ls("/", detail=False) if "evolution-" in p}  # noqa: E731
    known = stores()
    reps = ev.represent(bert, sentences)
    ev.mi(reps, k=4, restarts=1, bootstrap=0)
    del reps
    gc.collect()
    one = _rss()
    for _ in range(5):
        reps = ev.represent(bert, sentences)
        ev.mi(reps, k=4, restarts=1, bootstrap=0)
        del reps
        gc.collect()
    assert _rss() <= 1.10 * one, (one, _rss())
    assert set(temp.glob("evolution-cache-*")) == before
    assert stores() == known
    with ev.represent(bert, sentences[:3]) as reps:
        cache = reps.cache
        assert cache.is_dir() and stores() != known
    assert not cache.exists() and stores() == known


@pytest.mark.parametrize(
    "tokens, words",
    [
        ({"top": 3, "min_count": 2}, ["the", "on", "red"]),  # the 3 most frequent: 27, 15 and 15 occurrences
        ({"top": 100, "min_count": 10}, ["the", "on", "red", "cat", "mat", "dog", "blue"]),  # >= 10 occurrences
    ],
)
def test_tokens_selects_the_types_that_mi_and_neighbours_analyse(bert, tokens, words):
    """``tokens=`` is the config's token selection, not the API's default (the 100 most frequent
    types with >= 5 occurrences: all 13 words of the test sentences, 150 occurrences). Counted by
    hand on the sentences (3 copies of 8): the 27, on 15, red 15, cat / mat / dog / blue 12 each,
    sat / a / and 9, ran / to / was 6. MI's occurrences and H(X), and the neighbour queries, must
    be those of the selected words only."""
    from collections import Counter

    words_count = Counter(w for s in SENTENCES for w in s.split())
    assert sorted(words_count.values(), reverse=True) == [27, 15, 15, 12, 12, 12, 12, 9, 9, 9, 6, 6, 6]
    with ev.represent(bert, SENTENCES) as reps:
        pieces = Counter(reps["bert"].token_str.values.tolist())
        assert pieces == words_count  # the tiny BERT's vocabulary is the words: one piece per word
        counts = np.array([words_count[w] for w in words], dtype=float)
        p = counts / counts.sum()
        mi = ev.mi(reps, tokens=tokens, k=4, restarts=1, bootstrap=0)
        n = mi.n.sel(model="bert", target="input").values
        assert n.tolist() == [counts.sum()] * len(n), n  # every layer: the selected words' occurrences
        assert float(mi.entropy.sel(model="bert", target="input")) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-9)
        nb = ev.neighbors(reps, tokens=tokens, k=3, bootstrap=0)
        assert int(nb.queries.sel(model="bert", measure="same_token")) == counts.sum()
