"""Vig (2019) attention views: the page's data against the store, and the page itself in
headless Chromium (Debian's ``chromium``; skipped where it is not installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import write_config

from evolution.config import ConfigError
from evolution.store import open_attention
from pipelines.run import run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


#: a sentence whose words "cat" and "mat" are 2 and 3 subword-nmt pieces (``@@`` continues a word)
PIECES = "the ca@@ t sat on the m@@ a@@ t"
PIECE_WORDS = [[0], [1, 2], [3], [4], [5], [6, 7, 8]]  # content positions of each word, read off PIECES


@pytest.fixture(scope="module")
def pieces_spec(model_dir):
    """A tiny fairseq translation model whose dictionary has the pieces of :data:`PIECES`."""
    from conftest import WORDS

    from evolution.fixtures.random_init import make_fairseq_model

    ckpt, data = make_fairseq_model(
        model_dir / "pieces",
        task="translation",
        words=WORDS + ["ca@@", "m@@", "a@@", "t"],
        layers=2,
        d_model=16,
        heads=2,
        max_positions=32,
        seed=2,
    )
    return {
        "name": "pieces",
        "kind": "fairseq",
        "path": str(ckpt),
        "data": str(data),
        "sentencepiece": None,
        "objective": None,
    }


@pytest.fixture(scope="module")
def viewed(tmp_path_factory, model_specs, pieces_spec):
    from conftest import SENTENCES

    tmp = tmp_path_factory.mktemp("views")
    corpus = tmp / "corpus.txt"
    n = len(SENTENCES)  # sentence n: a long one; n + 1: words of several pieces
    corpus.write_text("\n".join(SENTENCES + [" ".join(SENTENCES[:6]), PIECES]) + "\n", encoding="utf-8")
    extra = (
        "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n  tsne: null\n  influence: null\n"
        f"report:\n  views: {{sentences: [0, 3, {n}, {n + 1}], top_k: 3}}"
    )
    cfg = write_config(
        tmp / "c.yaml",
        corpus=corpus,
        workdir=tmp / "w",
        extra=extra,
        models=[model_specs["translation"], model_specs["bert"], model_specs["gpt2"], pieces_spec],
    )
    text = cfg.read_text().replace("sentences: 5", f"sentences: {n + 2}")
    cfg.write_text(text)
    run(cfg, progress=False)
    report = (tmp / "w" / "report" / "report.html").read_text()
    assert (
        f'<a href="views.html">Attention views</a> (Vig 2019: head, model and neuron view of corpus sentences '
        f"0, 3, {n}, {n + 1};" in report
    )
    page = shutil.copy(tmp / "w" / "report" / "views.html", tmp / "views.html")  # later tests rerun the report
    from evolution.report.views import read_payload

    data = read_payload(page)
    return {
        "cfg": cfg,
        "tmp": tmp,
        "page": Path(page),
        "data": data,
        "n": n,
        "store": str(tmp / "w" / "reps.zarr"),
        "specs": {**model_specs, "pieces": pieces_spec},
    }


def test_page_data_are_the_stored_maps_top_k(viewed):
    data = viewed["data"]
    assert [m["name"] for m in data["models"]] == ["translation", "bert", "gpt2", "pieces"]
    store = str(viewed["tmp"] / "w" / "reps.zarr")
    att = open_attention(store, "translation").load()
    m = data["models"][0]
    item = m["sentences"][1]  # corpus sentence 3
    assert item["sentence"] == 3
    t = int(att.length.sel(sentence=3))
    alpha = att.attention.sel(sentence=3).values[:, :, :t, :t].astype(float)
    sub = item["levels"]["subword"]
    assert sub["tokens"][-1] == "</s>" and len(sub["tokens"]) == t  # MT encoder input: words then </s>
    edges = sub["edges"]["alpha"][1][0]  # layer 2, head 0
    for q in range(t):
        mine = sorted((k for qq, k, _ in edges if qq == q))
        top = np.argsort(-alpha[1, 0, q], kind="stable")[:3]
        assert set(mine) <= set(top.tolist())  # at most the 3 strongest (tiny weights dropped)
        for qq, k, w in edges:
            if qq == q:
                assert w == pytest.approx(alpha[1, 0, q, k] / alpha[1, 0, q].sum(), abs=1 / 510 + 1e-6)  # in 1/255
    assert set(sub["edges"]) == {"alpha", "norm"}  # translation has Kobayashi norms
    assert set(data["models"][2]["sentences"][0]["levels"]["word"]["edges"]) == {"alpha"}  # gpt2: maps only
    assert "neuron" in item and "neuron" not in data["models"][2]["sentences"][0]
    # word level of BERT: [CLS] and [SEP] stay units of their own around the words
    words = data["models"][1]["sentences"][0]["levels"]["word"]["tokens"]
    assert words[0] == "[CLS]" and words[-1] == "[SEP]" and words[1:-1] == "the cat sat on the mat".split()


def _model(viewed, name):
    return next(m for m in viewed["data"]["models"] if m["name"] == name)


def _check_edges(edges, expected, top_k):
    """Top-k ``[query, key, weight]`` edges of one (layer, head) against the full expected
    (T, T) weights: every edge's weight, and every query's strongest key present."""
    tol = 1 / 510 + 1e-4  # the store keeps float32 maps and norms, the page multiples of 1/255; near-ties may swap
    strongest = np.zeros(expected.shape[0])
    for q, k, w in edges:
        assert w == pytest.approx(expected[q, k], abs=tol), (q, k)
        assert expected[q, k] >= np.sort(expected[q])[-top_k] - tol  # among the query's top k
        strongest[q] = max(strongest[q], expected[q, k])
    np.testing.assert_allclose(strongest, expected.max(-1), atol=tol)  # each query's strongest key is shown


def test_norm_edges_are_alpha_times_value_norm_normalised_per_query(viewed):
    """Kobayashi et al. (2020): ||alpha_qk f(x_k)|| = alpha_qk ||f(x_k)||; the views draw it divided
    by its row sum. Expected weights from the store's attention and value norms (not from the
    stored weighted norms the page is built from)."""
    top_k = viewed["data"]["top_k"]
    checked = 0
    for name in ("translation", "pieces"):
        att = open_attention(viewed["store"], name).load()
        for item in _model(viewed, name)["sentences"]:
            s = item["sentence"]
            t = int(att.length.sel(sentence=s))
            alpha = att.attention.sel(sentence=s).values[:, :, :t, :t].astype(np.float64)
            value_norm = att.value_norm.sel(sentence=s).values[:, :, :t].astype(np.float64)
            raw = alpha * value_norm[:, :, None, :]
            assert np.abs(raw.sum(-1) - 1).max() > 0.1  # unnormalised rows are not distributions
            expected = raw / raw.sum(-1, keepdims=True)
            edges = item["levels"]["subword"]["edges"]["norm"]
            for layer in range(alpha.shape[0]):
                for h in range(alpha.shape[1]):
                    _check_edges(edges[layer][h], expected[layer, h], top_k)
                    checked += 1
    assert checked == 2 * 4 * 2 * 2  # models x sentences x layers x heads


def _plain_word_attention(a: np.ndarray, groups: list[list[int]], rule: str) -> np.ndarray:
    """(T, T) -> (U, U) by a plain loop: to a word, the sum over its pieces' columns; from a
    word, the mean over its pieces' rows (``mean``) or its first piece's row (``first``)."""
    out = np.zeros((len(groups), len(groups)))
    for u, rows in enumerate(groups):
        rows = rows if rule == "mean" else rows[:1]
        for v, cols in enumerate(groups):
            out[u, v] = sum(a[q, k] for q in rows for k in cols) / len(rows)
    return out


def test_word_level_edges_follow_the_word_rule(viewed):
    """Words of 2 and 3 pieces: the word-level edges of both weights equal a plain loop over the
    pieces with Clark et al.'s rule (the default of heads.word_rule: from a word the mean of its
    pieces' rows, to a word the sum of its pieces' columns); "first" gives other numbers."""
    data, n = viewed["data"], viewed["n"]
    assert data["word_rule"] == "mean"
    item = next(it for it in _model(viewed, "pieces")["sentences"] if it["sentence"] == n + 1)
    assert item["levels"]["subword"]["tokens"] == PIECES.split() + ["</s>"]
    assert item["levels"]["word"]["tokens"] == ["the", "cat", "sat", "on", "the", "mat", "</s>"]
    groups = PIECE_WORDS + [[len(PIECES.split())]]  # </s>: a unit of its own
    att = open_attention(viewed["store"], "pieces").load()
    t = int(att.length.sel(sentence=n + 1))
    alpha = att.attention.sel(sentence=n + 1).values[:, :, :t, :t].astype(np.float64)
    value_norm = att.value_norm.sel(sentence=n + 1).values[:, :, :t].astype(np.float64)
    norm = alpha * value_norm[:, :, None, :]
    norm /= norm.sum(-1, keepdims=True)
    differ = 0.0
    for weight, maps in (("alpha", alpha), ("norm", norm)):
        edges = item["levels"]["word"]["edges"][weight]
        for layer in range(alpha.shape[0]):
            for h in range(alpha.shape[1]):
                mean = _plain_word_attention(maps[layer, h], groups, "mean")
                _check_edges(edges[layer][h], mean, data["top_k"])
                differ = max(differ, np.abs(mean - _plain_word_attention(maps[layer, h], groups, "first")).max())
    assert differ > 0.02  # the rules tell apart on this sentence
    # the other rule, asked for, is the first piece's row
    from evolution.report.views import views_data

    first = views_data(
        viewed["store"],
        {"pieces": viewed["specs"]["pieces"]},
        sentences=[n + 1],
        top_k=3,
        neuron=False,
        word_rule="first",
    )
    assert first["word_rule"] == "first"
    edges = first["models"][0]["sentences"][0]["levels"]["word"]["edges"]["alpha"]
    for layer in range(alpha.shape[0]):
        for h in range(alpha.shape[1]):
            _check_edges(edges[layer][h], _plain_word_attention(alpha[layer, h], groups, "first"), 3)


def test_neuron_view_queries_and_keys_give_the_stored_attention(viewed):
    """The neuron view's q and k are the adapter's (forward_qk on the stored input ids) and
    softmax(q . k / sqrt(d_head)) of the page's vectors is the stored attention; with q and k
    exchanged it is not (the transposed scores)."""
    from evolution.models import load_adapter

    for name in ("translation", "bert", "pieces"):
        att = open_attention(viewed["store"], name).load()
        adapter = load_adapter(viewed["specs"][name])
        for item in _model(viewed, name)["sentences"]:
            s = item["sentence"]
            t = int(att.length.sel(sentence=s))
            ids = att.input_id.sel(sentence=s).values[:t].tolist()
            q, k = (np.asarray(item["neuron"][x], dtype=np.float64) for x in ("q", "k"))
            ref_q, ref_k = adapter.forward_qk([ids])
            # the page holds float16: rounding to nearest is within 2**-11 of the value
            np.testing.assert_allclose(q, ref_q[:, 0], rtol=2**-11, atol=1e-5)
            np.testing.assert_allclose(k, ref_k[:, 0], rtol=2**-11, atol=1e-5)
            stored = att.attention.sel(sentence=s).values[:, :, :t, :t].astype(np.float64)

            def softmax(scores):
                e = np.exp(scores - scores.max(-1, keepdims=True))
                return e / e.sum(-1, keepdims=True)

            d = q.shape[-1]
            np.testing.assert_allclose(softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(d)), stored, atol=5e-3)
            if name != "bert":  # the tiny BERT's attention is close to uniform; fairseq's is not
                assert np.abs(softmax(k @ np.swapaxes(q, -1, -2) / np.sqrt(d)) - stored).max() > 0.05


def test_a_sentence_without_stored_attention_is_refused(viewed, model_specs):
    cfg = viewed["cfg"]
    n = viewed["n"]
    cfg.write_text(cfg.read_text().replace(f"sentences: [0, 3, {n}, {n + 1}]", "sentences: [0, 99]"))
    with pytest.raises(ConfigError, match=r"report.views.sentences: model 'translation': sentence\(s\) \[99\]"):
        run(cfg, progress=False)
    assert (viewed["tmp"] / "w" / "metrics.zarr").is_dir()  # nothing computed is lost
    assert (viewed["tmp"] / "w" / "report" / "report.html").is_file()  # nor the previous report


def test_views_of_chosen_models_only(viewed):
    """report.views.models: the page holds those models' data alone, the same as on the page of
    every model; a name that is not a model stops the run at the config, naming the key."""
    cfg, n = viewed["cfg"], viewed["n"]
    text = cfg.read_text().replace("sentences: [0, 99]", f"sentences: [0, 3, {n}, {n + 1}]")
    cfg.write_text(text.replace("top_k: 3}", "top_k: 3, models: [gpt2, translation]}"))
    run(cfg, progress=False)
    from evolution.report.views import unpack_payload

    page = (viewed["tmp"] / "w" / "report" / "views.html").read_text()
    data = unpack_payload(
        json.loads(
            re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
            .group(1)
            .replace("<\\/", "</")
        )
    )
    assert [m["name"] for m in data["models"]] == ["translation", "gpt2"]  # in the config's model order
    full = {m["name"]: m for m in viewed["data"]["models"]}
    assert data["models"][1] == full["gpt2"] and data["models"][0] == full["translation"]
    cfg.write_text(text.replace("top_k: 3}", "top_k: 3, models: [gpt3]}"))
    with pytest.raises(ConfigError, match=r"report.views.models: no model named \['gpt3'\]"):
        run(cfg, progress=False)
    cfg.write_text(text)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_page_draws_every_head_and_layer_in_chromium(viewed, tmp_path):
    """Headless Chromium runs the page's script: the model view draws layers x heads thumbnails,
    the head view one checkbox per head and lines, the neuron view a row per key; no console error.
    The neuron view's numbers are what its script computes from the page's q and k: for query 0
    (layer 1, head 0) the score q_0 . k_j / sqrt(d) and its softmax over the keys j, against numpy
    on the page's data. q_0 . k_j differs from k_0 . q_j (the scores with q and k exchanged) by
    more than the printed precision on this model, so a script that reads q for k and k for q fails."""
    page = viewed["page"]
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    out = subprocess.run(
        common + ["--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = out.stdout
    assert 'data-ready="1"' in dom, out.stderr[-2000:]
    m = viewed["data"]["models"][0]  # the first model is shown: 2 layers x 2 heads
    assert dom.count('class="thumb"') == m["layers"] * m["heads"]
    assert dom.count('class="headbox"') == m["heads"]
    assert dom.count('class="edge"') > 0
    assert dom.count('class="neuronrow"') == len(m["sentences"][0]["levels"]["subword"]["tokens"])
    neuron = m["sentences"][0]["neuron"]
    q, k = (np.asarray(neuron[x][0][0], dtype=np.float64) for x in ("q", "k"))  # layer 1, head 0: (T, d)
    want = k @ q[0] / np.sqrt(q.shape[-1])  # query 0 against each key j
    exchanged = q @ k[0] / np.sqrt(q.shape[-1])
    assert np.abs(want - exchanged).max() > 0.05  # the case tells the two readings apart
    rows = re.findall(r'<tr class="neuronrow">(.*?)</tr>', dom, re.S)
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in rows]  # token, score, softmax (vector cells hold spans)
    shown = np.array([[float(c[-2]), float(c[-1])] for c in cells])
    np.testing.assert_allclose(shown[:, 0], want, atol=0.0051)  # printed with 2 decimals
    e = np.exp(want - want.max())
    np.testing.assert_allclose(shown[:, 1], e / e.sum(), atol=0.0006)  # printed with 3 decimals
    console_errors = [ln for ln in out.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert not console_errors, console_errors
    shot = tmp_path / "views.png"
    subprocess.run(
        common + [f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()], capture_output=True, timeout=120
    )
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_decoder_and_cross_attention_of_a_translation_model(viewed, model_specs):
    """A translation model's views carry its decoder's self-attention and its attention over the
    source, on its greedy translation: the top-k edges of the adapter's own decoder maps."""
    from evolution.models import cached_adapter

    data = viewed["data"]
    m = data["models"][0]
    assert m["name"] == "translation" and all("decoder" not in it for it in data["models"][1]["sentences"])
    adapter = cached_adapter(model_specs["translation"])
    item = m["sentences"][0]
    dec = item["decoder"]
    source = item["levels"]["subword"]["tokens"]
    assert dec["tokens"][0] == "</s>" and dec["layers"] == len(dec["self"]) == len(dec["cross"])
    ids = [adapter.dictionary.index(t) for t in source]
    target = adapter.translate([ids], max_len_a=1.5, max_len_b=10)[0]
    assert dec["tokens"] == adapter.pieces(adapter.build_decoder_input(target))
    own, cross = adapter.forward_decoder([ids], [adapter.build_decoder_input(target)])
    for layer in range(dec["layers"]):
        for h in range(m["heads"]):
            _check_edges(dec["self"][layer][h], own[layer, 0, h], data["top_k"])
            _check_edges(dec["cross"][layer][h], cross[layer, 0, h], data["top_k"])
            assert all(k < len(source) for _, k, _ in dec["cross"][layer][h])
            assert all(k <= q for q, k, _ in dec["self"][layer][h])  # causal


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_the_cross_attention_view_draws_target_against_source_in_chromium(viewed, tmp_path):
    """``#attention=cross``: the head view's left column is the translation's tokens, its right
    column the source's, and its lines join them (the page decodes its packed edges)."""
    page = viewed["page"]
    item = viewed["data"]["models"][0]["sentences"][0]
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    out = subprocess.run(
        common + ["--dump-dom", page.as_uri() + "#model=translation&attention=cross"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = out.stdout
    assert 'data-ready="1"' in dom, out.stderr[-2000:]
    head = dom.split('id="headview"', 1)[1].split("</svg>", 1)[0]
    assert head.count('class="tok"') == len(item["decoder"]["tokens"]) + len(item["levels"]["subword"]["tokens"])
    assert head.count('class="edge"') > 0
    assert "decoder over the source" in dom
