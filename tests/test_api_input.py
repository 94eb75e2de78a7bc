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
        with pytest.raises(KeyError, match=r"layers \[9\] are not layers of bert, gpt2: valid are 0..2"):
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


def test_a_misspelt_plot_gets_the_closest_names():
    """``ev.plot.compare`` (the plot is ``compared``) was a plain AttributeError: now an
    AttributeError subclass naming the close matches and the plots there are; dunder probes
    (copy, pickle, inspect) get the plain AttributeError, and ``hasattr`` still answers False."""
    from evolution.api.plot import PlotNameError

    with pytest.raises(
        PlotNameError, match=r"^ev\.plot has no 'compare'; did you mean ev\.plot\.compared\? its plots are mi, "
    ):
        ev.plot.compare  # noqa: B018
    with pytest.raises(AttributeError, match=r"did you mean ev\.plot\.neighbors\?"):
        ev.plot.neighbours  # noqa: B018
    with pytest.raises(AttributeError, match=r"did you mean ev\.plot\.distances\?"):
        ev.plot.similarity  # noqa: B018
    with pytest.raises(PlotNameError, match=r"^ev\.plot has no 'zzz'; its plots are mi, neighbors, distances, "):
        ev.plot.zzz  # noqa: B018
    assert not hasattr(ev.plot, "compare") and not hasattr(ev.plot, "__wrapped__")
    with pytest.raises(AttributeError) as caught:
        ev.plot.__wrapped__  # noqa: B018
    assert type(caught.value) is AttributeError


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
    # none of ours left (a folder of another process may come or go meanwhile: only new ones count)
    assert set(temp.glob("evolution-cache-*")) - before == set()
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


def test_two_models_with_one_name_are_refused(bert, model_specs):
    """Representations are stored per model name: a second model under a taken name would overwrite
    the first one's states, so two models with one name are refused, naming the names and the fix."""
    other = ev.load(model_specs["gpt2"]["path"], name="bert")
    with pytest.raises(ValueError, match=r"two models share a name \(\['bert', 'bert'\]\).*name="):
        ev.represent([bert, other], SENTENCES[:2], attention=False)


def test_datasets_handed_out_outlive_the_in_memory_store(bert):
    """A dataset from represent()'s in-memory store (``reps[name]``, ``reps.attention(name)``) holds
    its values: after the Representations are closed and collected (which frees the store) it
    still reads the states and attention that were extracted."""
    from evolution.store import open_attention, open_representations

    reps = ev.represent(bert, SENTENCES[:4], attention=2)
    store = reps.store
    hidden, attention = reps["bert"], reps.attention("bert")
    want_hidden = open_representations(store, "bert").hidden.values.copy()
    want_attention = open_attention(store, "bert").attention.values.copy()
    assert np.isfinite(want_hidden).all() and np.abs(want_hidden).max() > 0
    reps.close()
    del reps
    gc.collect()
    for name, ds, var, want in (
        ("reps['bert']", hidden, "hidden", want_hidden),
        ("attention", attention, "attention", want_attention),
    ):
        try:
            got = ds[var].values
        except Exception as exc:  # noqa: BLE001 - a lazy dataset fails to read its freed store
            raise AssertionError(f"{name} no longer reads its {var} once the store is freed: {exc!r}") from None
        np.testing.assert_array_equal(got, want, err_msg=f"{name}.{var} after close()")


def test_layers_are_checked_before_any_work_and_count_from_the_top(bert, gpt2, monkeypatch):
    """``layers=`` out of range fails before an analysis starts (the analysis is replaced by one
    that fails the test if called); negative numbers count from the top, as in Python: -1 is the
    last block, the same layer as L."""
    import evolution.api.analyses as api

    with ev.represent([bert, gpt2], SENTENCES, attention=True) as reps:
        top = reps["bert"].sizes["layer"] - 1
        assert top == 2
        full = ev.mi(reps, k=4, restarts=1, bootstrap=0)
        last = ev.mi(reps, layers=[-1, 0], k=4, restarts=1, bootstrap=0)
        assert list(last.layer.values) == [top, 0]
        xr.testing.assert_identical(last.sel(layer=top), full.sel(layer=top))
        heads = ev.heads(reps, layers=[-1])  # attention blocks are 1..L: -1 is L, -L is 1
        assert list(heads.layer.values) == [top]
        assert list(ev.heads(reps, layers=[-top]).layer.values) == [1]

        def no_work(*a, **k):
            raise AssertionError("an analysis ran before layers= was checked")

        monkeypatch.setattr(api, "analyse", no_work)
        with pytest.raises(KeyError, match=r"layers \[99\] are not layers of bert, gpt2: valid are 0..2 .*-3..-1"):
            ev.mi(reps, layers=[0, 99], k=4)
        with pytest.raises(KeyError, match=r"layers \[0\] .* valid are 1..2"):
            ev.heads(reps, layers=[0])  # layer 0 (the embeddings) has no attention
        with pytest.raises(KeyError, match=r"layers \[-4\]"):
            ev.neighbors(reps, layers=[-4])
        with pytest.raises(TypeError, match=r"1.5 is not a layer number"):
            ev.mi(reps, layers=[1.5])


def test_unknown_options_and_keys_get_the_closest_valid_names(bert, tmp_path):
    from evolution.config import ConfigError, load_config

    with ev.represent(bert, SENTENCES[:5], attention=False) as reps:
        with pytest.raises(ConfigError, match=r"mi\.kk: unknown key; did you mean k\? the keys here .*: k, restarts"):
            ev.mi(reps, kk=40)
        with pytest.raises(ConfigError, match=r"neighbors\.max_per_typ: unknown key; did you mean max_per_type\?"):
            ev.neighbors(reps, max_per_typ=3)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workdir: w\ncorpus: {source: text, path: c.txt}\nmodels: []\nmetrics: {mi: {restrats: 2}}\n")
    (tmp_path / "c.txt").write_text("the cat sat.\n")
    with pytest.raises(ConfigError, match=r"metrics\.mi\.restrats: unknown key; did you mean restarts\?"):
        load_config(cfg)


def test_a_closed_representations_says_what_to_do(bert):
    with ev.represent(bert, SENTENCES[:5], attention=False) as reps:
        assert not reps.closed
    assert reps.closed
    for call in (lambda: ev.mi(reps, k=4), lambda: reps["bert"], lambda: ev.neighbors(reps)):
        with pytest.raises(ValueError, match=r"is closed .* run the analyses inside the 'with' block, or call ev.repr"):
            call()


def test_open_store_says_what_it_was_given_when_that_is_no_representation_store(bert, tmp_path):
    """ev.open_store on a run's metrics.zarr (it returned Representations([]): no model, no error), on
    the run's folder (zarr's GroupNotFoundError), on a missing path (a 12-frame traceback), on one
    model's group, a file or another folder: a StoreError saying what the path is and what to pass;
    on the store itself, its models."""
    import re
    import traceback

    from evolution.api.represent import StoreNotFoundError
    from evolution.metrics.results import write_metrics
    from evolution.store import StoreError

    run = tmp_path / "run"
    reps = run / "reps.zarr"
    ev.represent(bert, SENTENCES[:5], attention=False, store=reps).close()
    write_metrics(run / "metrics.zarr", {"mi": xr.Dataset({"mi": ("layer", [0.1, 0.2])})}, fingerprint="f")
    (run / "config.resolved.yaml").write_text("workdir: .\nextract: {store: null}\n", encoding="utf-8")
    assert list(ev.open_store(reps)) == ["bert"]
    q = re.escape

    def refused(path, message, error=StoreError):
        with pytest.raises(error, match=message) as caught:
            ev.open_store(path)
        assert "\n" not in str(caught.value)
        return caught

    refused(
        run / "metrics.zarr",
        rf"^{q(str(run / 'metrics.zarr'))}: a metrics store \(the analyses' results: groups mi\), not a "
        r"representation store; read its groups with evolution\.metrics\.results\.open_metrics\(path, group\), "
        rf"and to ev\.open_store pass the run's representation store, {q(str(reps))}$",
    )
    refused(
        run,
        rf"^{q(str(run))}: a run folder \(a pipeline workdir\), not a store: its states are in {q(str(reps))}; "
        rf"pass ev\.open_store\({q(repr(str(reps)))}\)$",
    )
    refused(
        reps / "bert",
        rf"one model's group of a representation store; pass the store and the model: "
        rf"ev\.open_store\({q(repr(str(reps)))}, models=\['bert'\]\)$",
    )
    # a run whose config put its states elsewhere (extract.store, recorded relative to the workdir)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.resolved.yaml").write_text("extract: {store: ../run/reps.zarr}\n", encoding="utf-8")
    refused(other, rf"a run folder \(a pipeline workdir\), not a store: its states are in {q(str(reps))};")
    # a committed result: its metrics and config, not its states
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "config.resolved.yaml").write_text("extract: {store: null}\n", encoding="utf-8")
    refused(kept, rf"its states would be in {q(str(kept / 'reps.zarr'))}, which does not exist")
    caught = refused(
        tmp_path / "nowhere",
        rf"^{q(str(tmp_path / 'nowhere'))}: no such file or directory; ev\.open_store takes a representation "
        r"store: a pipeline run's reps\.zarr, or ev\.represent\(\.\.\., store=PATH\)'s$",
        StoreNotFoundError,
    )
    assert isinstance(caught.value, FileNotFoundError) and len(traceback.extract_tb(caught.tb)) <= 3
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    refused(tmp_path / "notes.txt", r"notes\.txt: a file, not a Zarr store; ev\.open_store takes")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", r"empty: not a Zarr store \(\w+\); ev\.open_store takes a representation store")


def test_the_device_message_tells_a_cuda_build_without_a_gpu_from_a_cpu_build(monkeypatch):
    import torch

    import evolution.models.device as device

    monkeypatch.setattr(device, "cuda_count", lambda: 0)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ValueError, match=r"is a CPU build \(no CUDA\).*set device: cpu or auto"):
        device.resolve_device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match=r"is a CUDA 12.8 build but sees no GPU \(CUDA_VISIBLE_DEVICES=''\)"):
        device.resolve_device("cuda:0")
    monkeypatch.setattr(device, "cuda_count", lambda: 2)
    with pytest.raises(ValueError, match=r"torch sees 2 CUDA device\(s\), cuda:0..cuda:1"):
        device.resolve_device("cuda:2")
    assert device.resolve_device("cuda:1") == "cuda:1"


def test_a_k_capped_by_the_data_is_never_silent(bert, caplog):
    """``neighbors`` with k beyond the occurrences: every other occurrence is a neighbour, the
    same-token rate is one constant at every layer, and a WARNING says so, naming the cap; with
    a k below the cap, no such warning."""
    import logging

    with ev.represent(bert, SENTENCES, attention=False) as reps:
        with caplog.at_level(logging.WARNING):
            capped = ev.neighbors(reps, k=5000, bootstrap=0)
        msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("k = 5000 reaches every occurrence" in m and "a constant at every layer" in m for m in msgs), msgs
        same = capped.value.sel(model="bert", measure="same_token").values
        assert np.ptp(same) < 1e-12  # the constant the warning announces
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ev.neighbors(reps, k=2, bootstrap=0)
        assert not [r for r in caplog.records if "reaches every occurrence" in r.getMessage()]


def test_mi_says_when_its_k_is_capped(bert, caplog):
    """k beyond a tenth of the occurrences: k-means runs with n // 10 clusters, and one WARNING names
    the cap and the occurrences, with no line about it at INFO per layer (it was one per layer:
    3 here, 20 on a 2-model 10-layer call); the stored k is the one used."""
    import logging

    with ev.represent(bert, SENTENCES, attention=False) as reps:
        with caplog.at_level(logging.INFO):
            mi = ev.mi(reps, k=5000, restarts=1, bootstrap=0)
    n = int(mi.n.sel(model="bert", target="input").isel(layer=0))
    msgs = [r.getMessage() for r in caplog.records if "capped" in r.getMessage()]
    assert len(msgs) == 1 and f"bert (input): k = {n // 10} for {n}" in msgs[0], msgs
    assert [r.levelno for r in caplog.records if "capped" in r.getMessage()] == [logging.WARNING]
    assert int(mi.k.sel(model="bert", target="input").isel(layer=0)) == n // 10


def test_pieces_unknown_to_the_model_are_counted_shown_and_warned_about(caplog):
    """The shipped MT's vocabulary (dict.txt) holds the typeset apostrophe \u2019 and neither the
    ASCII one nor emoji: the tokenizer reads ``'`` as \u2019 (its ids equal those of the typeset
    text through SentencePiece and dict.txt directly; logged at INFO; the attribute
    ``apostrophe`` says so); the emoji stays outside the vocabulary: counted, stored as a share,
    shown as ``<unk>`` in ``token_str`` with its text in ``token_text``, marked in
    ``is_unknown`` and warned about by name; a text the vocabulary covers gets share 0 and no
    warning."""
    import logging

    import sentencepiece as spm

    models = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models"
    vocab = [line.split(" ")[0] for line in (models / "vocab" / "dict.txt").read_text(encoding="utf-8").splitlines()]
    assert "'" not in vocab and "\u2019" in vocab
    index = {p: 4 + i for i, p in enumerate(vocab)}  # fairseq: <s> <pad> </s> <unk>, then dict.txt
    sp = spm.SentencePieceProcessor(model_file=str(models / "vocab" / "spm.model"))
    text = ["I don't know what you're saying \U0001f642", "God\u2019s word is light."]
    typeset = [p for s in text for p in sp.encode(s.replace("'", "\u2019"), out_type=str)]
    outside = [p for p in typeset if p not in index]
    assert outside == ["\U0001f642"]
    mt = ev.load(models / "mt", device="cpu")
    with caplog.at_level(logging.INFO):
        with ev.represent(mt, text, attention=False) as reps:
            ds = reps["mt"]
            assert ds.token_id.values.tolist() == [index.get(p, 3) for p in typeset]
            assert ds.attrs["apostrophe"] == "\u2019"
            assert ds.attrs["unknown_pieces"] == 1 and ds.attrs["unknown_texts"] == {"\U0001f642": 1}
            assert ds.attrs["unknown_share"] == pytest.approx(1 / len(typeset))
            assert ds.is_unknown.values.tolist() == [p not in index for p in typeset]
            assert ds.token_str.values.tolist() == [p if p in index else "<unk>" for p in typeset]
            assert ds.token_text.values.tolist() == typeset
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "'\U0001f642' x1" in warned[0] and '"\'"' not in warned[0], warned
    assert any("apostrophe is read as \u2019" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        with ev.represent(mt, ["God\u2019s word is light."], attention=False) as reps:
            assert reps["mt"].attrs["unknown_pieces"] == 0 and not reps["mt"].is_unknown.values.any()
    assert not [r for r in caplog.records if "unknown to the model" in r.getMessage()]


def test_an_apostrophe_the_tokenizer_keeps_is_warned_about(caplog, bert):
    """Where the vocabulary holds no typeset apostrophe (the rule is off: a vocabulary with
    ``'``, or with neither) the text is left as it is and each apostrophe outside the
    vocabulary is an ``<unk>`` named in the warning; a fast Hugging Face tokenizer's ``[UNK]``
    keeps the characters it stands for in ``token_text`` (from its offsets)."""
    import logging

    from evolution.extract import _unknown
    from evolution.models import load_adapter
    from evolution.models.base import apostrophe_for
    from evolution.tokens import build_token_table

    assert apostrophe_for({"'", "\u2019"}) is None and apostrophe_for({"a"}) is None
    assert apostrophe_for({"\u2019", "a"}) == "\u2019"
    models = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models"
    adapter = load_adapter(ev.load(models / "mt", device="cpu").spec)  # its own copy: the cache's keeps its rule
    adapter.apostrophe = None
    table = build_token_table(["I don't know what you're saying"], adapter)
    columns = dict(table.columns)
    with caplog.at_level(logging.WARNING):
        found = _unknown(adapter, columns, "mt")
    assert found["texts"] == {"'": 2} and columns["is_unknown"].sum() == 2
    assert list(columns["token_str"][columns["is_unknown"]]) == ["<unk>", "<unk>"]
    warned = [r.getMessage() for r in caplog.records if "unknown to the model" in r.getMessage()]
    assert len(warned) == 1 and '"\'" x2' in warned[0], warned
    hf = bert.adapter
    unk = hf.unk_id
    assert getattr(hf.tokenizer, "is_fast", False)
    table = build_token_table(["the zqxj"], hf)
    at = np.flatnonzero(table.columns["token_id"] == unk)
    assert len(at) >= 1
    assert list(table.columns["token_str"][at]) == [hf.tokenizer.unk_token] * len(at)
    assert "".join(table.columns["token_text"][at]) == "zqxj"
