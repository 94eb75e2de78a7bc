"""Adapters: shapes, alignment of content positions, padding invariance, bad paths."""

from __future__ import annotations

import numpy as np
import pytest

from evolution.models import ModelLoadError, load_adapter
from evolution.models.base import word_ids_from_pieces

from conftest import FAIRSEQ_TASKS, HF_ARCHS

ALL = HF_ARCHS + FAIRSEQ_TASKS
EXPECTED_OBJECTIVE = {"bert": "mlm", "gpt2": "lm", "marian": "mt", "t5": "mt",
                      "translation": "mt", "language_modeling": "lm", "masked_lm": "mlm"}


@pytest.fixture(scope="module")
def adapters(model_specs):
    return {name: load_adapter(spec) for name, spec in model_specs.items()}


@pytest.mark.parametrize("name", ALL)
def test_shapes_and_objective(adapters, name):
    a = adapters[name]
    assert a.objective == EXPECTED_OBJECTIVE[name]
    tok = a.tokenize("the cat sat on the mat")
    assert tok.pieces == "the cat sat on the mat".split()
    assert tok.word_ids == list(range(6))
    inp = a.build_input(tok.ids)
    assert inp[a.content_offset:a.content_offset + len(tok)] == tok.ids
    hidden, att = a.forward([inp], attention=True)
    t = len(inp)
    assert hidden.shape == (a.num_layers + 1, 1, t, a.d_model) == (3, 1, t, 16)
    assert att.shape == (a.num_layers, 1, a.num_heads, t, t)
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)  # each query's weights are a distribution


@pytest.mark.parametrize("name", ALL)
def test_padding_does_not_change_results(adapters, name):
    a = adapters[name]
    sents = ["the cat sat on the mat", "a dog", "the mat was red and the dog was blue"]
    inputs = [a.build_input(a.tokenize(s).ids) for s in sents]
    batched_h, batched_a = a.forward(inputs, attention=True)
    for b, inp in enumerate(inputs):
        single_h, single_a = a.forward([inp], attention=True)
        t = len(inp)
        np.testing.assert_allclose(batched_h[:, b, :t], single_h[:, 0], atol=1e-5)
        np.testing.assert_allclose(batched_a[:, b, :, :t, :t], single_a[:, 0], atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_content_position_alignment(adapters, name):
    """Position i of two inputs that agree up to i: a causal LM's states there are equal
    (it has read the same prefix); a bidirectional encoder's differ (it sees the change)."""
    a = adapters[name]
    x = a.build_input(a.tokenize("the cat sat on the mat").ids)
    y = a.build_input(a.tokenize("the cat sat on the dog").ids)
    hx, _ = a.forward([x])
    hy, _ = a.forward([y])
    off = a.content_offset
    top = hx.shape[0] - 1
    before_change = slice(off, off + 5)
    if a.objective == "lm":
        np.testing.assert_allclose(hx[top, 0, before_change], hy[top, 0, before_change], atol=1e-5)
    else:
        assert np.abs(hx[top, 0, before_change] - hy[top, 0, before_change]).max() > 1e-5
    # layer 0 is position-wise: equal wherever the input token is equal
    np.testing.assert_allclose(hx[0, 0, before_change], hy[0, 0, before_change], atol=1e-6)
    assert np.abs(hx[0, 0, off + 5] - hy[0, 0, off + 5]).max() > 1e-4


def test_causal_attention_is_lower_triangular(adapters):
    for name in ("gpt2", "language_modeling"):
        a = adapters[name]
        _, att = a.forward([a.build_input(a.tokenize("the cat sat on the mat").ids)], attention=True)
        upper = np.triu(np.ones(att.shape[-2:], dtype=bool), k=1)
        assert np.abs(att[..., upper]).max() < 1e-7


def test_special_tokens_follow_training_format(adapters):
    fs = adapters["translation"]
    d = fs.dictionary
    assert (fs.prefix, fs.suffix) == ([], [d.eos()])
    assert (adapters["language_modeling"].prefix, adapters["language_modeling"].suffix) == ([d.eos()], [])
    assert (adapters["masked_lm"].prefix, adapters["masked_lm"].suffix) == ([d.bos()], [d.eos()])
    bert = adapters["bert"]
    assert bert.tokenizer.convert_ids_to_tokens(bert.prefix + bert.suffix) == ["[CLS]", "[SEP]"]
    assert adapters["gpt2"].prefix == [] and adapters["gpt2"].suffix == []


def test_word_ids_from_pieces():
    assert word_ids_from_pieces(["▁the", "▁ca", "t", "▁sat"]) == [0, 1, 1, 2]
    assert word_ids_from_pieces(["the", "ca@@", "t", "sat"]) == [0, 1, 1, 2]
    assert word_ids_from_pieces(["the", "Ġca", "t"]) == [0, 1, 1]
    assert word_ids_from_pieces(["a", "b"]) == [0, 1]


def test_bad_model_paths(tmp_path, model_specs):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_adapter({"kind": "huggingface", "path": str(tmp_path)})
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelLoadError, match="not a fairseq checkpoint"):
        load_adapter({"kind": "fairseq", "path": str(junk), "data": model_specs["translation"]["data"]})
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_adapter({"kind": "fairseq", "path": str(tmp_path / "missing.pt"), "data": str(tmp_path)})
