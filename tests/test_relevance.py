"""Layer-wise relevance propagation (gradient x input under the conservative rules of
evolution.nets.lrp): hand-computed values on a two-layer linear network, conservation layer
by layer on the tiny trained LM and end to end on the tiny MT model, and head relevance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evolution.metrics.importance import objective_items
from evolution.metrics.relevance import head_relevance, normalize_over_heads
from evolution.models.fairseq import FairseqAdapter
from evolution.nets.gates import head_gates
from evolution.nets.lrp import conservative_rules, relevance

SOURCES = ["And God said, Let there be light", "and there was light."]
TARGETS = ["dnA doG dias", "dna ereht saw"]


def _adapter(trained, run):
    paths = trained["paths"]
    a = FairseqAdapter(paths.checkpoint(run), data=paths.data(run.split("-")[0]), sentencepiece=paths.spm_model)
    a._model.double()
    return a


def test_two_layer_linear_network_by_hand():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3, bias=False), torch.nn.Linear(3, 1, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        net[1].weight.copy_(torch.tensor([[2.0, -1.0, 1.0]]))
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    h = net[0](x)  # [1, 2, 3]
    y = net[1](h)  # 2 - 2 + 3 = 3
    r_h, r_x = relevance(y, [h, x])
    np.testing.assert_allclose(r_h.detach().numpy(), [[2.0, -2.0, 3.0]])  # h_j * w2_j
    np.testing.assert_allclose(r_x.detach().numpy(), [[3.0, 0.0]])  # x_i * (W2 W1)_i = [1 * 3, 2 * 0]
    assert float(y.detach()) == pytest.approx(3.0)


def _lm_relevances(a, ids, rules: bool):
    """Relevance of the top-1 logit at the last position for each block's input and each
    block's biases (the LM: no bias after the blocks, tied output embedding)."""
    layers = a._layers
    inputs = []
    handles = [layer.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for layer in layers]
    try:
        with conservative_rules(a._model) if rules else torch.enable_grad():
            logits = a.logits([a.build_input(ids)])
    finally:
        for h in handles:
            h.remove()
    y = logits[0, -1].max()
    biases = [[p for n, p in layer.named_parameters() if n.endswith("bias")] for layer in layers]
    flat = [b for group in biases for b in group]
    rel = relevance(y, [*inputs, *flat])
    r_inputs = [float(r.sum()) for r in rel[: len(inputs)]]
    r_bias, k = [], len(inputs)
    for group in biases:
        r_bias.append(sum(float(r.sum()) for r in rel[k : k + len(group)]))
        k += len(group)
    return float(y.detach()), r_inputs, r_bias


def test_relevance_is_conserved_layer_to_layer_on_the_tiny_lm(trained):
    a = _adapter(trained, "lm")
    ids = a.tokenize(SOURCES[0]).ids
    y, r_inputs, r_bias = _lm_relevances(a, ids, rules=True)
    assert abs(y) > 0.1
    for layer in range(len(r_inputs)):
        # what enters block l, plus what the biases of blocks l.. add, is the output score
        assert r_inputs[layer] + sum(r_bias[layer:]) == pytest.approx(y, rel=1e-9, abs=1e-9)
    # without the rules (softmax and LayerNorm through their Jacobians) it is not conserved
    y2, r2, b2 = _lm_relevances(a, ids, rules=False)
    assert y2 == pytest.approx(y)
    assert abs(r2[0] + sum(b2) - y) > 1e-3


def test_relevance_is_conserved_end_to_end_on_the_tiny_mt_model(trained):
    a = _adapter(trained, "mt")
    src = a.build_input(a.tokenize(SOURCES[0]).ids)
    dec = a.build_decoder_input(a.tokenize_target(TARGETS[0]).ids)
    enc_in, dec_in = [], []
    h1 = a._model.encoder.layers[0].register_forward_pre_hook(lambda m, args: enc_in.append(args[0]))
    h2 = a._model.decoder.layers[0].register_forward_pre_hook(lambda m, args: dec_in.append(args[0]))
    with conservative_rules(a._model):
        logits = a.logits([src], [dec])
    h1.remove()
    h2.remove()
    biases = [p for n, p in a._model.named_parameters() if n.endswith("bias")]
    y = logits[0, 2].max()
    rel = relevance(y, [enc_in[0], dec_in[0], *biases])
    total = sum(float(r.sum()) for r in rel)
    assert total == pytest.approx(float(y), rel=1e-9)
    assert abs(float(rel[0].sum())) > 1e-3 * abs(float(y))  # the source matters to the prediction


def test_head_relevance_normalised_per_layer_and_batched_like_one_step_at_a_time(trained):
    a = _adapter(trained, "mt")
    items = objective_items(
        a, [a.tokenize(s).ids for s in SOURCES], targets=[a.tokenize_target(t).ids for t in TARGETS]
    )
    together = head_relevance(a, items, attentions=a.attention_types, per_step=True, max_batch_tokens=10_000)
    n_steps = sum(len(it.positions) for it in items)
    assert together["steps"] == n_steps
    for att in a.attention_types:
        per = together["per_step"][att]
        assert per.shape[0] == n_steps
        np.testing.assert_allclose(per.sum(axis=-1), 1.0)
        np.testing.assert_allclose(together["relevance"][att], per.mean(axis=0))
    one = head_relevance(a, items, attentions=a.attention_types, per_step=True, max_batch_tokens=1)
    for att in a.attention_types:
        np.testing.assert_allclose(one["per_step"][att], together["per_step"][att], rtol=1e-6, atol=1e-12)
    # steps differ (each copy used its own step's top-1 logit)
    assert not np.allclose(together["per_step"]["encoder_self"][0], together["per_step"]["encoder_self"][1])


def test_a_head_gated_off_has_no_relevance(trained):
    a = _adapter(trained, "mt")
    items = objective_items(a, [a.tokenize(SOURCES[0]).ids], targets=[a.tokenize_target(TARGETS[0]).ids])
    gates = torch.ones(len(a.output_projections()), a.num_heads, dtype=torch.float64)
    gates[1, 0] = 0.0
    with head_gates(a.output_projections(), gates):
        rel = head_relevance(a, items)["relevance"]["encoder_self"]
    assert rel[1, 0] == 0.0 and rel[1, 1] == pytest.approx(1.0)
    assert 0 < rel[0, 0] < 1


def test_normalize_over_heads_by_hand():
    np.testing.assert_allclose(
        normalize_over_heads(np.array([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])), [[0.25, 0.75], [0.0, 0.0], [0.5, 0.5]]
    )


def test_one_steps_head_relevance_against_a_plain_computation(trained):
    """Step 2 of one sentence: relevance of the top-1 logit at the encoder heads' outputs, summed
    as |R| over (query position, feature) per head, over the layer's heads, by hand."""
    a = _adapter(trained, "mt")
    src = a.build_input(a.tokenize(SOURCES[0]).ids)
    dec = a.build_decoder_input(a.tokenize_target(TARGETS[0]).ids)
    items = objective_items(a, [a.tokenize(SOURCES[0]).ids], targets=[a.tokenize_target(TARGETS[0]).ids])
    ours = head_relevance(a, items, per_step=True)["per_step"]["encoder_self"][2]
    captured = []
    hooks = [p.register_forward_pre_hook(lambda m, args: captured.append(args[0])) for p in a.output_projections()]
    with conservative_rules(a._model):
        logits = a.logits([src], [dec])
    for h in hooks:
        h.remove()
    y = logits[0, 2].max()
    grads = torch.autograd.grad(y, captured)
    H = a.num_heads
    for layer, (z, g) in enumerate(zip(captured, grads, strict=True)):
        r = (z * g).detach().numpy()[:, 0, :]  # (T, H * d_head)
        per_head = np.array([np.abs(r[:, h * (r.shape[1] // H) : (h + 1) * (r.shape[1] // H)]).sum() for h in range(H)])
        np.testing.assert_allclose(ours[layer], per_head / per_head.sum(), rtol=1e-6)
