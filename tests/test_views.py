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

from evolution.config import ConfigError
from evolution.store import open_attention
from pipelines.run import run

from conftest import write_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def viewed(tmp_path_factory, model_specs):
    from conftest import SENTENCES

    tmp = tmp_path_factory.mktemp("views")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES + [" ".join(SENTENCES[:6])]) + "\n", encoding="utf-8")  # a long one too
    extra = "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n  tsne: null\n  influence: null\n" \
            f"report:\n  views: {{sentences: [0, 3, {len(SENTENCES)}], top_k: 3}}"
    cfg = write_config(tmp / "c.yaml", corpus=corpus, workdir=tmp / "w", extra=extra,
                       models=[model_specs["translation"], model_specs["bert"], model_specs["gpt2"]])
    text = cfg.read_text().replace("sentences: 5", f"sentences: {len(SENTENCES) + 1}")
    cfg.write_text(text)
    run(cfg, progress=False)
    report = (tmp / "w" / "report" / "report.html").read_text()
    assert f'<a href="views.html">Attention views</a> (Vig 2019: head, model and neuron view of corpus sentences ' \
           f'0, 3, {len(SENTENCES)};' in report
    page = shutil.copy(tmp / "w" / "report" / "views.html", tmp / "views.html")  # later tests rerun the report
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page.read_text(),
                                re.S).group(1).replace("<\\/", "</"))
    return {"cfg": cfg, "tmp": tmp, "page": Path(page), "data": data, "n": len(SENTENCES)}


def test_page_data_are_the_stored_maps_top_k(viewed):
    data = viewed["data"]
    assert [m["name"] for m in data["models"]] == ["translation", "bert", "gpt2"]
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
                assert w == pytest.approx(alpha[1, 0, q, k] / alpha[1, 0, q].sum(), abs=1e-3)
    assert set(sub["edges"]) == {"alpha", "norm"}  # translation has Kobayashi norms
    assert set(data["models"][2]["sentences"][0]["levels"]["word"]["edges"]) == {"alpha"}  # gpt2: maps only
    assert "neuron" in item and "neuron" not in data["models"][2]["sentences"][0]
    # word level of BERT: [CLS] and [SEP] stay units of their own around the words
    words = data["models"][1]["sentences"][0]["levels"]["word"]["tokens"]
    assert words[0] == "[CLS]" and words[-1] == "[SEP]" and words[1:-1] == "the cat sat on the mat".split()


def test_a_sentence_without_stored_attention_is_refused(viewed, model_specs):
    cfg = viewed["cfg"]
    cfg.write_text(cfg.read_text().replace(f"sentences: [0, 3, {viewed['n']}]", "sentences: [0, 99]"))
    with pytest.raises(ConfigError, match=r"report.views.sentences: model 'translation': sentence\(s\) \[99\]"):
        run(cfg, progress=False)
    assert (viewed["tmp"] / "w" / "metrics.zarr").is_dir()  # nothing computed is lost
    assert (viewed["tmp"] / "w" / "report" / "report.html").is_file()  # nor the previous report


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_page_draws_every_head_and_layer_in_chromium(viewed, tmp_path):
    """Headless Chromium runs the page's script: the model view draws layers x heads thumbnails,
    the head view one checkbox per head and lines, the neuron view a row per key; no console error."""
    page = viewed["page"]
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    out = subprocess.run(common + ["--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    dom = out.stdout
    assert 'data-ready="1"' in dom, out.stderr[-2000:]
    m = viewed["data"]["models"][0]  # the first model is shown: 2 layers x 2 heads
    assert dom.count('class="thumb"') == m["layers"] * m["heads"]
    assert dom.count('class="headbox"') == m["heads"]
    assert dom.count('class="edge"') > 0
    assert dom.count('class="neuronrow"') == len(m["sentences"][0]["levels"]["subword"]["tokens"])
    console_errors = [ln for ln in out.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert not console_errors, console_errors
    shot = tmp_path / "views.png"
    subprocess.run(common + [f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()], capture_output=True,
                   timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000
