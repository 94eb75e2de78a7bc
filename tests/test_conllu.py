"""Annotated text: the CoNLL-U reader, token alignment, and POS / dependency neighbour rates."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import SENTENCES, write_config

from evolution.corpus.conllu import (
    EMBEDDED,
    NO_LABEL,
    annotation_columns,
    label_codes,
    read_conllu,
    resolve_treebank,
)
from evolution.corpus.text import CorpusError
from evolution.metrics.neighbors import knn, within_type_measures

SAMPLE = """# sent_id = a
# text = Don't stop now.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVB\t_\t3\taux\t3:aux\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t3:advmod\t_
3\tstop\tstop\tVERB\tVB\t_\t0\troot\t0:root\t_
3.1\tgo\tgo\tVERB\t_\t_\t_\t_\t3:conj\t_
4\tnow\tnow\tADV\t_\t_\t3\tadvmod:tmod\t3:advmod\t_
5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_

# sent_id = b
1\tNew York\tNew York\tPROPN\tNNP\t_\t0\troot\t0:root\t_
"""


def test_reads_words_and_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "s.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(SAMPLE)
    a, b = read_conllu(path)
    assert a.words == ("Do", "n't", "stop", "now", ".")  # not "Don't", not the empty node "go"
    assert a.upos == ("AUX", "PART", "VERB", "ADV", "PUNCT")
    assert a.xpos == ("VB", "RB", "VB", "ADV", ".")  # no PTB tag -> UPOS
    assert a.head == (3, 3, 0, 3, 3)
    assert a.deprel == ("aux", "advmod", "root", "advmod", "punct")  # subtype dropped
    assert a.line == 4 and b.line == 12
    assert b.words == ("New_York",) and b.text == "New_York"  # one form stays one whitespace word
    assert len(read_conllu(path, max_sentences=1)) == 1


@pytest.mark.parametrize(
    "bad, where",
    [
        ("1\tDo\tdo\tAUX\n", ":1: 4 tab-separated"),
        ("2\tDo\tdo\tAUX\tVB\t_\t0\troot\t_\t_\n", ":1: word ids run"),
        ("1\tDo\tdo\tAUX\tVB\t_\tx\troot\t_\t_\n", ":1: id '1' / head 'x'"),
    ],
)
def test_bad_conllu_names_file_and_line(tmp_path, bad, where):
    path = tmp_path / "bad.conllu"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(CorpusError, match=where):
        read_conllu(path)


def test_embedded_treebank_equals_the_conllu_package():
    """Our reader against the independent `conllu` parser on the whole embedded test split."""
    conllu = pytest.importorskip("conllu")
    path = resolve_treebank("ud-ewt-test")
    ours = read_conllu(path)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        ref = conllu.parse(fh.read())
    assert len(ours) == len(ref) == 2077
    for o, r in zip(ours, ref, strict=True):
        words = [t for t in r if isinstance(t["id"], int)]
        assert o.words == tuple(t["form"] for t in words)
        assert o.upos == tuple(t["upos"] for t in words)
        assert o.xpos == tuple(t["xpos"] or t["upos"] for t in words)
        assert o.head == tuple(t["head"] for t in words)
        assert o.deprel == tuple(t["deprel"].split(":")[0] for t in words)
    assert sum(len(o) for o in ours) == 25094
    assert set(EMBEDDED) == {"ud-ewt-dev", "ud-ewt-test"}
    with pytest.raises(CorpusError, match="neither a file nor one of the embedded"):
        resolve_treebank("ud-ewt")


def test_annotation_columns_follow_word_ids():
    # corpus sentences 0-1 are main text, 2-3 annotated; sentence 3 truncated after 2 tokens
    sentences = [
        {
            "upos": ["DET", "NOUN", "VERB"],
            "xpos": ["DT", "NN", "VBD"],
            "deprel": ["det", "nsubj", "root"],
            "head": [2, 3, 0],
        },
        {
            "upos": ["PRON", "VERB", "ADJ", "PUNCT"],
            "xpos": ["PRP", "VBZ", "JJ", "."],
            "deprel": ["nsubj", "root", "xcomp", "punct"],
            "head": [2, 0, 2, 2],
        },
    ]
    sentence = np.array([0, 0, 1, 2, 2, 2, 2, 3, 3])
    word_id = np.array([0, 1, 0, 0, 1, 1, 2, 0, 1])  # "cat" split into two pieces -> both NN
    cols = annotation_columns(sentence=sentence, word_id=word_id, first=2, sentences=sentences)
    assert cols["xpos"].tolist() == ["", "", "", "DT", "NN", "NN", "VBD", "PRP", "VBZ"]
    assert cols["deprel"].tolist() == ["", "", "", "det", "nsubj", "nsubj", "root", "nsubj", "root"]
    assert cols["head"].tolist() == [-1, -1, -1, 2, 3, 3, 0, 2, 0]
    codes = label_codes(cols["xpos"])
    vocab = sorted({w for s in sentences[:1] for w in s["xpos"]} | {"PRP", "VBZ"})  # the labels present
    assert [vocab[c] if c != NO_LABEL else None for c in codes] == [
        None,
        None,
        None,
        "DT",
        "NN",
        "NN",
        "VBD",
        "PRP",
        "VBZ",
    ]
    # a word id beyond the sentence (should not happen, but never an index error)
    far = annotation_columns(sentence=np.array([2]), word_id=np.array([7]), first=2, sentences=sentences)
    assert far["upos"][0] == "" and far["head"][0] == -1


def _brute_within_type(x, types, labels, k):
    """The same-label rate among same-type neighbours, and its chance level, by explicit loops."""
    rate, chance = [], []
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        d = ((x[rows][:, None] - x[rows][None]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        kk = min(k, len(rows) - 1)
        r_q, c_q = [], []
        for i, q in enumerate(rows):
            nb = rows[np.argsort(d[i], kind="stable")[:kk]]
            r_q.append(np.mean(labels[nb] == labels[q]))
            others = np.delete(rows, i)
            c_q.append(np.mean(labels[others] == labels[q]))
        rate.append(np.mean(r_q))
        chance.append(np.mean(c_q))
    return np.mean(rate), np.mean(chance)


def test_same_pos_rate_and_chance_against_brute_force():
    rng = np.random.default_rng(0)
    types = np.repeat([0, 1, 2], [30, 40, 20])
    pos = rng.integers(0, 3, size=len(types))
    # representations that encode POS (plus noise) -> rate well above chance
    x = (np.eye(3)[pos] * 3 + rng.normal(size=(len(types), 3)) * 0.5).astype(np.float32)
    got = within_type_measures(
        x, types=types, position=np.zeros(len(types)), annotations={"pos": pos}, k=5, chance=True
    )
    rate, chance = _brute_within_type(x, types, pos, 5)
    assert got["same_pos"] == pytest.approx(rate, abs=1e-9)
    assert got["same_pos_chance"] == pytest.approx(chance, abs=1e-12)
    assert got["same_pos"] > 0.9 > 0.5 > got["same_pos_chance"]
    # representations that ignore POS -> the rate is near chance
    z = rng.normal(size=(len(types), 3)).astype(np.float32)
    noise = within_type_measures(
        z, types=types, position=np.zeros(len(types)), annotations={"pos": pos}, k=5, chance=True
    )
    assert abs(noise["same_pos"] - noise["same_pos_chance"]) < 0.1
    assert noise["same_pos_chance"] == pytest.approx(chance, abs=1e-12)  # independent of the vectors
    assert knn(z, k=5).shape == (len(types), 5)


def test_hf_word_ids_are_whitespace_words():
    from evolution.models.base import whitespace_word_ids

    s = "Don't stop  search-engine ."
    # spans as a punctuation-splitting pre-tokenizer (and a byte-level one with leading spaces) gives them
    spans = [(0, 3), (3, 4), (4, 5), (5, 10), (11, 18), (18, 19), (19, 25), (25, 27)]
    assert whitespace_word_ids(s, spans) == [0, 0, 0, 1, 2, 2, 2, 3]
    assert whitespace_word_ids(s, [(5, 6)]) is None  # a span of spaces only: no word


def _treebank(path, sentences):
    """A CoNLL-U file for whitespace sentences; tag: DT for the/a, NN for nouns, JJ for colours,
    VB otherwise; relation det / nsubj / amod / root."""
    tags = {
        "the": ("DT", "det"),
        "a": ("DT", "det"),
        "cat": ("NN", "nsubj"),
        "dog": ("NN", "nsubj"),
        "mat": ("NN", "obl"),
        "red": ("JJ", "amod"),
        "blue": ("JJ", "amod"),
    }
    upos = {"DT": "DET", "NN": "NOUN", "JJ": "ADJ", "VB": "VERB"}
    out = []
    for s in sentences:
        for i, w in enumerate(s.split(), start=1):
            tag, rel = tags.get(w, ("VB", "root"))
            out.append(f"{i}\t{w}\t{w}\t{upos[tag]}\t{tag}\t_\t{0 if rel == 'root' else 1}\t{rel}\t_\t_")
        out.append("")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


TREEBANK_SENTENCES = SENTENCES[:8] * 2

METRICS = """metrics:
  tokens: {top: 6, min_count: 3}
  mi: {k: 4, restarts: 1}
  neighbors: {k: 3}
  similarity: {min_ratio: 2, freq_bins: [1, 3, 10, 100]}
  tsne: null"""


@pytest.mark.slow
def test_annotated_text_adds_rates_and_leaves_main_metrics_unchanged(tmp_path, corpus_file, model_specs):
    from evolution.config import load_config
    from evolution.metrics.plan import text_parts
    from evolution.metrics.results import open_metrics
    from evolution.store import open_representations
    from pipelines.run import run
    from pipelines.stages import Context, CorpusStage

    tb = _treebank(tmp_path / "tb.conllu", TREEBANK_SENTENCES)
    models = [model_specs["translation"], model_specs["language_modeling"]]
    plain = write_config(tmp_path / "a.yaml", corpus=corpus_file, workdir=tmp_path / "a", extra=METRICS, models=models)
    annotated = write_config(
        tmp_path / "b.yaml", corpus=corpus_file, workdir=tmp_path / "b", extra=METRICS, models=models
    )
    text = annotated.read_text()
    annotated.write_text(text.replace(f"  path: {corpus_file}\n", f"  path: {corpus_file}\n  annotated: {tb}\n"))
    run(plain, progress=False)
    run(annotated, progress=False)

    # the token alignment: tiny models have one token per word, so each annotated token's code
    # decodes to the tag of word `position` of its treebank sentence
    ctx = Context(config=load_config(annotated), progress=False)
    ann = CorpusStage().annotation(ctx)
    assert ann["first"] == len(SENTENCES) and ann["n_sentences"] == len(TREEBANK_SENTENCES)
    # the labels are token coordinates of the store (metrics read only the store)
    ds = open_representations(str(tmp_path / "b" / "reps.zarr"), "translation")
    assert ds.attrs["annotated_from"] == ann["first"]
    parts = text_parts(
        sentence=ds.sentence.values,
        token_id=ds.token_id.values,
        freq_rank=ds.freq_rank.values,
        labels={c: ds[c].values for c in ("upos", "xpos", "deprel")},
        annotated_from=ds.attrs["annotated_from"],
    )
    sent, pos = ds.sentence.values, ds.position.values
    rows = np.flatnonzero(~parts["primary"])
    assert len(rows) == sum(len(s.split()) for s in TREEBANK_SENTENCES)
    vocab = sorted(set(ds.xpos.values[rows]))
    for r in rows:
        word = ann["sentences"][sent[r] - ann["first"]]
        assert ds.xpos.values[r] == word["xpos"][pos[r]] and ds.upos.values[r] == word["upos"][pos[r]]
        assert ds.deprel.values[r] == word["deprel"][pos[r]] and ds["head"].values[r] == word["head"][pos[r]]
        assert vocab[parts["annotation"]["pos"][r]] == word["xpos"][pos[r]]
    assert (parts["annotation"]["pos"][parts["primary"]] == NO_LABEL).all()
    assert (ds.upos.values[parts["primary"]] == "").all() and (ds["head"].values[parts["primary"]] == -1).all()

    def group(w, name):
        return open_metrics(tmp_path / w / "metrics.zarr", name).load()

    nb_a, nb_b = group("a", "neighbors"), group("b", "neighbors")
    assert "same_pos" not in nb_a.measure.values
    for m in ("same_pos", "same_pos_chance", "same_deprel", "same_deprel_chance"):
        v = nb_b.value.sel(measure=m).values
        assert ((v >= 0) & (v <= 1)).all(), m
    # chance does not depend on the layer
    assert np.ptp(nb_b.value.sel(measure="same_pos_chance").values, axis=1).max() < 1e-12
    # the main text's metrics are those of the run without annotated text: same rows, and states
    # equal up to float noise from other batch shapes (~5e-7), which can flip exact ties between
    # this corpus's repeated sentences in k-NN and k-means, hence the tolerances
    for m in nb_a.measure.values:
        np.testing.assert_allclose(nb_a.value.sel(measure=m).values, nb_b.value.sel(measure=m).values, atol=0.02)
    np.testing.assert_allclose(group("a", "mi").mi.values, group("b", "mi").mi.values, atol=0.05)
    np.testing.assert_allclose(
        group("a", "similarity").distance.values, group("b", "similarity").distance.values, atol=1e-4
    )
    # (PWCCA of a small frequency bin amplifies that noise more: its rank cut-off moves)
    np.testing.assert_allclose(group("a", "change").distance.values, group("b", "change").distance.values, atol=2e-3)
    ds_a = open_representations(str(tmp_path / "a" / "reps.zarr"), "translation")
    np.testing.assert_array_equal(parts["freq_rank"][parts["primary"]], ds_a.freq_rank.values)
    # change by POS tag: each tag's value is PWCCA between adjacent layers on that tag's annotated rows
    from evolution.metrics.similarity import View, pwcca
    from evolution.store import read_rows

    cp = group("b", "change_pos")
    assert cp.distance.dims == ("metric", "model", "layer_pair", "pos")
    upos = ds.upos.values[rows]
    d = ds.sizes["feature"]
    checked = 0
    for tag in cp.pos.values:
        sel = rows[upos == tag]
        assert cp["count"].sel(model="translation", pos=tag).item() == len(sel)
        got = cp.distance.sel(metric="pwcca", model="translation", pos=tag).values
        if len(sel) < 2 * d:  # min_ratio 2 in METRICS
            assert np.isnan(got).all()
            continue
        store = str(tmp_path / "b" / "reps.zarr")
        views = [View(read_rows(store, "translation", layer, sel), min_ratio=2) for layer in range(ds.sizes["layer"])]
        np.testing.assert_allclose(got, [1 - pwcca(views[i], views[i + 1]) for i in range(len(views) - 1)], atol=1e-9)
        checked += 1
    assert checked >= 1
    assert (tmp_path / "b" / "report" / "change_pos_pwcca.png").is_file()
    assert "same POS tag" in (tmp_path / "b" / "report" / "report.md").read_text()
