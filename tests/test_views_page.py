"""The views page of a long sentence: the shipped MT on 150 Genesis pieces with every view
(decoder, cross attention and neuron view included) under 1 MB, its frame a screen high, its
packed data decoded here by the documented format (evolution/report/views_payload.py) against the
maps, and drawn by headless Chromium (Debian's ``chromium``; skipped where it is not installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evolution.store import open_attention

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

SHIPPED = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models"


def _genesis(pieces: int) -> str:
    """Genesis (the World English Bible) from its start, as many whole words as the shipped
    vocabulary's SentencePiece cuts into at most ``pieces`` pieces."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(SHIPPED / "vocab" / "spm.model"))
    text = (Path(__file__).resolve().parents[1] / "evolution" / "data" / "web-genesis.en.txt").read_text("utf-8")
    out = ""
    for word in text.split():
        longer = f"{out} {word}".strip()
        if len(sp.encode(longer)) > pieces:
            return out
        out = longer
    raise AssertionError("Genesis is shorter than that")


def _payload(page_html: str) -> dict:
    """The page's data script as written (packed)."""
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', page_html, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def _dom(url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Headless Chromium's DOM of ``url`` once its scripts ran (stdout), its log (stderr)."""
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def shipped_mt_page():
    """``ev.views`` of the shipped MT on 149 Genesis pieces (150 tokens with ``</s>``): every view,
    the decoder's self-attention and its attention over the source, and the neuron view; and the
    store of the same sentence's maps."""
    import evolution.api as ev

    mt = ev.load(SHIPPED / "mt", device="cpu")
    sentence = _genesis(149)
    page = ev.views(mt, sentence)
    reps = ev.represent(mt, [sentence], attention=True, norms=True)
    return {"model": mt, "sentence": sentence, "page": page, "reps": reps}


def test_a_150_piece_mt_page_with_decoder_and_neuron_view_is_under_1_mb(shipped_mt_page):
    """The page of a 150-token sentence of the shipped MT, every part included (head, model and
    neuron view, subword and word level, alpha and ||alpha f(x)||, the decoder's self and cross
    attention of its greedy translation): under 1 MB (edges and float16 queries and keys
    deflated; 1.81 MB with the earlier packing), and its inline frame a screen high (900 px;
    8,330 px before) with the page scrolling inside, a short head view's frame lower, a given
    height kept."""
    import evolution.api as ev
    from evolution.api.views import MAX_HEIGHT

    page = shipped_mt_page["page"]
    item = _payload(page.html)["models"][0]["sentences"][0]
    assert len(item["levels"]["subword"]["tokens"]) == 150
    assert set(item["levels"]) == {"subword", "word"} and set(item["levels"]["word"]["edges"]) == {"alpha", "norm"}
    assert len(item["decoder"]["tokens"]) > 150 and {"self", "cross"} <= set(item["decoder"]) and "neuron" in item
    assert "display:none" not in page.html  # every view
    size = len(page.html.encode())
    assert size < 1_000_000, size
    assert page.height == MAX_HEIGHT == 900
    assert f"height:{MAX_HEIGHT}px" in page._repr_html_()
    mt = shipped_mt_page["model"]
    short = ev.head_view(mt, "In the beginning.")
    assert 200 < short.height < MAX_HEIGHT
    assert ev.head_view(mt, "In the beginning.", height=500).height == 500


def _decode_edges(x: dict) -> dict:
    """An edge set decoded here, by the documented format alone (views_payload's docstring):
    {(layer, head, query): [(key, weight), ...]}."""
    import base64
    import zlib

    n_layers, n_heads, rows = x["edges"]
    dt = np.dtype("u1" if x["keys"] < 256 else "<u2")
    raw = zlib.decompress(base64.b64decode(x["z"]))
    counts = np.frombuffer(raw, dtype=dt, count=n_layers * n_heads * rows).reshape(n_layers, n_heads, rows)
    n = int(counts.sum())
    keys = np.frombuffer(raw, dtype=dt, count=n, offset=counts.size * dt.itemsize)
    weights = np.frombuffer(raw, dtype=np.uint8, count=n, offset=(counts.size + n) * dt.itemsize) / 255
    assert len(raw) == (counts.size + n) * dt.itemsize + n
    out, e = {}, 0
    for i in np.ndindex(counts.shape):
        c = int(counts[i])
        out[i] = list(zip(keys[e : e + c].tolist(), weights[e : e + c].tolist(), strict=True))
        e += c
    return out


def _decode_half(x: dict) -> np.ndarray:
    import base64
    import zlib

    raw = np.frombuffer(zlib.decompress(base64.b64decode(x["z"])), dtype=np.uint8)
    n = raw.size // 2
    return np.stack([raw[:n], raw[n:]], axis=1).copy().view("<f2").reshape(x["half"])


def _check_top_k(decoded: dict, maps: np.ndarray, top_k: int) -> None:
    """Decoded edges against (L, H, Q, K) weights: each row's keys are its ``top_k`` strongest of
    at least 0.005 (ties either way), strongest first, each weight the map's to 1/510."""
    maps = maps / maps.sum(-1, keepdims=True)
    assert {i[:2] for i in decoded} == set(np.ndindex(maps.shape[:2]))
    for (layer, h, q), edges in decoded.items():
        row = maps[layer, h, q]
        kth = np.sort(row)[::-1][min(top_k, row.size) - 1]
        assert len(edges) == int(np.sum(np.sort(row)[::-1][:top_k] >= 0.005)), (layer, h, q)
        for k, w in edges:
            assert row[k] >= kth - 1e-6 and w == pytest.approx(row[k], abs=1 / 510 + 1e-6), (layer, h, q, k)
        assert [w for _, w in edges] == sorted((w for _, w in edges), reverse=True)


def test_the_mt_page_holds_the_maps_top_k_and_the_adapters_queries_and_keys(shipped_mt_page):
    """The 150-token page's packed data decoded in this test by its format alone (not the page's
    unpacking): every query's top-k keys of the stored encoder maps (alpha and the normalised
    ||alpha f(x)||), of the decoder's self and cross attention recomputed by the adapter, and the
    adapter's queries and keys in float16, exactly; the module's unpacking gives the same numbers."""
    from evolution.models import cached_adapter
    from evolution.report.views import unpack_payload

    page, reps, mt = shipped_mt_page["page"], shipped_mt_page["reps"], shipped_mt_page["model"]
    payload = _payload(page.html)
    top_k = payload["top_k"]
    item = payload["models"][0]["sentences"][0]
    att = open_attention(reps.store, "mt").load()
    t = int(att.length.values[0])
    ids = att.input_id.values[0, :t].tolist()
    alpha = att.attention.values[0, :, :, :t, :t].astype(np.float64)
    norm = att.weighted_norm.values[0, :, :, :t, :t].astype(np.float64)
    edges = item["levels"]["subword"]["edges"]
    _check_top_k(_decode_edges(edges["alpha"]), alpha, top_k)
    _check_top_k(_decode_edges(edges["norm"]), norm, top_k)
    adapter = cached_adapter(mt.spec)
    dec = item["decoder"]
    target = adapter.translate([ids], max_len_a=1.5, max_len_b=10)[0]
    assert dec["tokens"] == adapter.pieces(adapter.build_decoder_input(target))
    own, cross = adapter.forward_decoder([ids], [adapter.build_decoder_input(target)])
    _check_top_k(_decode_edges(dec["self"]), own[:, 0].astype(np.float64), top_k)
    _check_top_k(_decode_edges(dec["cross"]), cross[:, 0].astype(np.float64), top_k)
    queries, keys = adapter.forward_qk([ids])
    np.testing.assert_array_equal(_decode_half(item["neuron"]["q"]), queries[:, 0].astype(np.float16))
    np.testing.assert_array_equal(_decode_half(item["neuron"]["k"]), keys[:, 0].astype(np.float16))
    unpacked = unpack_payload(payload)["models"][0]["sentences"][0]
    theirs = {}
    for layer, per_head in enumerate(unpacked["decoder"]["cross"]):
        for h, e in enumerate(per_head):
            for q in range(len(dec["tokens"])):
                theirs[(layer, h, q)] = [(k, w) for qq, k, w in e if qq == q]
    assert theirs == _decode_edges(dec["cross"])
    assert unpacked["neuron"]["k"] == keys[:, 0].astype(np.float16).astype(float).tolist()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_the_mt_page_draws_its_cross_attention_in_chromium(shipped_mt_page, tmp_path):
    """Headless Chromium unpacks the 150-token page (DecompressionStream) and draws the decoder's
    attention over the source: 3 x 4 thumbnails, lines, a neuron row per source token, no console error."""
    path = shipped_mt_page["page"].save(tmp_path / "mt.html")
    out = _dom(path.as_uri() + "#attention=cross", tmp_path)
    dom = out.stdout
    assert 'data-ready="1"' in dom, out.stderr[-2000:]
    assert dom.count('class="thumb"') == 3 * 4  # the decoder's layers x heads
    assert dom.count('class="edge"') > 1000
    assert dom.count('class="neuronrow"') == 150
    console_errors = [ln for ln in out.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert not console_errors, console_errors


def _synthetic(tokens: int) -> dict:
    """A views data dict of one 1-layer, 2-head model on ``tokens`` tokens: query q attends to
    keys q and q + 1 (weights 1/255 multiples), the last query to nothing; head 1 to key 0 only."""
    edges = [[[q, q, 200 / 255], [q, q + 1, 55 / 255]] for q in range(tokens - 1)]
    head0 = [e for pair in edges for e in pair]
    head1 = [[q, 0, 1.0] for q in range(tokens - 1)]
    toks = [f"t{i}" for i in range(tokens)]
    level = {"tokens": toks, "edges": {"alpha": [[head0, head1]]}}
    item = {"sentence": 0, "levels": {"subword": level, "word": level}}
    item["neuron"] = {"q": np.full((1, 2, tokens, 4), 0.5).tolist(), "k": np.full((1, 2, tokens, 4), -1.25).tolist()}
    return {"models": [{"name": "toy", "layers": 1, "heads": 2, "sentences": [item]}], "top_k": 2, "word_rule": "mean"}


@pytest.mark.parametrize("tokens", [20, 300])
def test_the_payload_unpacks_to_the_data_with_narrow_and_wide_keys(tokens):
    """Packing then unpacking gives the data back exactly: uint8 counts and keys below 256 tokens,
    uint16 above, a query without edges kept in its place."""
    from evolution.report.views import unpack_payload, views_html

    data = _synthetic(tokens)
    payload = _payload(views_html(data))
    assert payload["models"][0]["sentences"][0]["levels"]["subword"]["edges"]["alpha"]["keys"] == tokens
    assert unpack_payload(payload) == data


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_the_page_unpacks_wide_keys_in_chromium(tmp_path):
    """A 300-token page (uint16 keys): the head view draws every edge of layer 1's heads."""
    from evolution.report.views import write_views

    data = _synthetic(300)
    path = write_views(tmp_path / "wide.html", data)
    out = _dom(path.as_uri() + "#level=subword", tmp_path)
    dom = out.stdout
    assert 'data-ready="1"' in dom, out.stderr[-2000:]
    head = dom.split('id="headview"', 1)[1].split("</svg>", 1)[0]
    lines = re.findall(r'<line x1="155" y1="([\d.]+)" x2="365" y2="([\d.]+)"', head)
    assert len(lines) == 3 * 299
    assert ("8", "8") in lines and ("4776", "4776") in lines and ("4776", "4792") in lines  # y = 8 + 16 q: q 298
    assert ("4776", "8") in lines  # head 1: the last query with edges, to key 0


@pytest.mark.parametrize("model, prefix", [("lm", ["</s>"]), ("mlm", ["<s>"])])
def test_an_unknown_piece_after_an_added_token_has_its_text_at_its_own_position(model, prefix):
    """Models that put a token before the text (the shipped LM's ``</s>``, the MLM's ``<s>``): the
    emoji's text stands at the position of the ``<unk>`` the model saw, in the input's positions
    (prefix included), not one before it; every other position's text is its piece."""
    import evolution.api as ev
    from evolution.report.views import unpack_payload

    m = ev.load(SHIPPED / model, device="cpu")
    assert m.adapter.prefix and m.adapter.pieces(m.adapter.prefix) == prefix
    page = ev.views(m, "God saw the light \U0001f642 and it was good.", neuron=False)
    levels = unpack_payload(_payload(page.html))["models"][0]["sentences"][0]["levels"]
    sub = levels["subword"]
    assert sub["tokens"][: len(prefix)] == prefix and sub["tokens"].count("<unk>") == 1
    at = sub["tokens"].index("<unk>")
    expected = [("\U0001f642" if i == at else t) for i, t in enumerate(sub["tokens"])]
    assert sub["texts"] == expected
    words = levels["word"]
    at = words["tokens"].index("<unk>")
    assert [t for i, t in enumerate(words["texts"]) if i != at] == [t for i, t in enumerate(words["tokens"]) if i != at]
    assert words["texts"][at] == "\U0001f642"


def test_a_piece_the_model_saw_as_unk_shows_unk_with_its_text_beside_it(tmp_path):
    """The views show what the model saw: the emoji, outside the shipped vocabulary, is ``<unk>``
    in the page's tokens, and its text rides along (``texts``, drawn beside the token, ``<unk>
    [text]``, and as its tooltip in Chromium); every other position's text is its piece."""
    import evolution.api as ev
    from evolution.report.views import unpack_payload

    mt = ev.load(SHIPPED / "mt", device="cpu")
    page = ev.views(mt, "God saw the light \U0001f642 and it was good.", neuron=False)
    level = unpack_payload(_payload(page.html))["models"][0]["sentences"][0]["levels"]["subword"]
    at = level["tokens"].index("<unk>")
    assert level["texts"][at] == "\U0001f642" and level["tokens"].count("<unk>") == 1
    assert [t for i, t in enumerate(level["texts"]) if i != at] == [t for i, t in enumerate(level["tokens"]) if i != at]
    words = unpack_payload(_payload(page.html))["models"][0]["sentences"][0]["levels"]["word"]
    assert words["texts"][words["tokens"].index("<unk>")] == "\U0001f642"
    plain = unpack_payload(_payload(ev.views(mt, "God saw the light.", neuron=False).html))
    assert "texts" not in plain["models"][0]["sentences"][0]["levels"]["subword"]
    if CHROMIUM is None:
        return
    out = _dom(page.save(tmp_path / "unk.html").as_uri(), tmp_path)
    assert 'data-ready="1"' in out.stdout, out.stderr[-2000:]
    # the text beside what the model saw, on the page itself (a screenshot or a print keeps it), and as the tooltip
    assert "&lt;unk&gt; [\U0001f642]<title>the text: \U0001f642</title>" in out.stdout
