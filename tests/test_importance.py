"""Head gates, head-mask importance (Michel et al. 2019) and Hard-Concrete gates (Voita et al.
ACL 2019) on the tiny trained models: gradients against finite differences and a plain loop,
aggregation against hand-computed values, a gate of 0 against the head physically removed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evolution.metrics.importance import (importance, mask_gradients, normalize_by_layer, objective_items,
                                          sentence_losses)
from evolution.models.fairseq import FairseqAdapter
from evolution.nets.gates import HardConcreteGate, head_gates, remove_heads

SOURCES = ["And God said, Let there be light", "and there was light.", "The earth was without form and void"]
TARGETS = ["dnA doG dias", "dna ereht saw", "ehT htrae saw tuohtiw"]


def _adapter(trained, run, *, double=True):
    paths = trained["paths"]
    objective = run.split("-")[0]
    a = FairseqAdapter(paths.checkpoint(run), data=paths.data(objective), sentencepiece=paths.spm_model)
    if double:
        a._model.double()
    return a


def _items(a, seed=0):
    sources = [a.tokenize(s).ids for s in SOURCES]
    targets = [a.tokenize_target(t).ids for t in TARGETS] if a.objective == "mt" else None
    return [it for it in objective_items(a, sources, targets=targets, seed=seed) if it is not None]


def _loss_with_shared_gates(a, items, gates: dict) -> float:
    import contextlib

    with contextlib.ExitStack() as stack, torch.no_grad():
        for att, g in gates.items():
            stack.enter_context(head_gates(a.output_projections(att), g))
        return float(sentence_losses(a, items).sum())


@pytest.mark.parametrize("run", ["mt", "lm", "mlm"])
def test_mask_gradient_equals_central_finite_differences(trained, run):
    a = _adapter(trained, run)
    items = _items(a)[:1]
    attentions = a.attention_types
    grads = mask_gradients(a, items, attentions=attentions)
    eps = 1e-3  # fairseq's attention softmax runs in float32 even in a float64 model: below ~1e-4 the
    # differences are rounding noise; at 1e-3 the central difference's O(eps^2) error is ~1e-6 relative
    for att in attentions:
        L, H = grads[att].shape[1:]
        assert (L, H) == (len(a.output_projections(att)), a.attention_modules(att)[0].num_heads)
        fd = np.zeros((L, H))
        for layer in range(L):
            for h in range(H):
                up, down = ({x: torch.ones(L if x == att else len(a.output_projections(x)), H, dtype=torch.float64)
                             for x in attentions} for _ in range(2))
                up[att][layer, h] += eps
                down[att][layer, h] -= eps
                fd[layer, h] = (_loss_with_shared_gates(a, items, up) - _loss_with_shared_gates(a, items, down)) / (2 * eps)
        np.testing.assert_allclose(grads[att][0], fd, rtol=2e-3, atol=1e-6)
        assert np.abs(fd).max() > 1e-4  # the heads matter to the loss at all


def test_batched_per_sentence_gradients_equal_one_sentence_at_a_time(trained):
    a = _adapter(trained, "mt")
    items = _items(a)
    assert len({len(it.inputs) for it in items}) > 1  # padding is exercised
    together = mask_gradients(a, items, attentions=a.attention_types, max_batch_tokens=10_000)
    for i, it in enumerate(items):
        alone = mask_gradients(a, [it], attentions=a.attention_types)
        for att in a.attention_types:
            np.testing.assert_allclose(together[att][i], alone[att][0], rtol=1e-5, atol=1e-9)  # float32 softmax
    # different sentences have different gradients (the batch is not one sentence repeated)
    assert not np.allclose(together["encoder_self"][0], together["encoder_self"][1])


def test_lm_labels_are_the_next_tokens_and_mlm_labels_the_corrupted_originals(trained):
    lm = _adapter(trained, "lm", double=False)
    ids = lm.tokenize(SOURCES[0]).ids
    (item,) = objective_items(lm, [ids])
    assert item.inputs == lm.build_input(ids) and list(item.labels) == [*ids, lm.dictionary.eos()]
    assert list(item.positions) == list(range(len(ids) + 1))
    mlm = _adapter(trained, "mlm", double=False)
    long = mlm.tokenize(" ".join(SOURCES)).ids
    (item,) = objective_items(mlm, [long], seed=3)
    changed = item.positions - mlm.content_offset
    assert len(changed) > 0
    assert all(item.inputs[p] != lab for p, lab in zip(item.positions, item.labels))
    assert list(item.labels) == [long[c] for c in changed]
    assert objective_items(mlm, [long], seed=3)[0].inputs == item.inputs  # seeded


def test_importance_is_the_mean_of_absolute_gradients_and_layers_normalise_to_unit_norm():
    g = np.array([[[2.0, -1.0, 0.5]], [[-2.0, 3.0, 0.5]], [[1.0, -2.0, -0.5]]])  # (N=3, L=1, H=3)
    np.testing.assert_allclose(importance(g), [[5 / 3, 2.0, 0.5]])
    scores = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(normalize_by_layer(scores), [[0.6, 0.8], [0.0, 0.0], [2 ** -0.5, 2 ** -0.5]])


def test_gate_of_zero_equals_the_head_physically_removed(trained):
    a = _adapter(trained, "mt")
    b = _adapter(trained, "mt")
    x = [a.build_input(a.tokenize(s).ids) for s in SOURCES]
    L, H = len(a.output_projections()), a.num_heads
    gates = torch.ones(L, H, dtype=torch.float64)
    gates[0, 1] = 0.0
    gates[1, 0] = 0.0
    with head_gates(a.output_projections(), gates) as calls:
        gated = a.forward(x)[0]
    assert calls == [1] * L
    remove_heads(b.attention_modules()[0], [True, False])
    remove_heads(b.attention_modules()[1], [False, True])
    removed = b.forward(x)[0]
    np.testing.assert_allclose(gated, removed, rtol=1e-10, atol=1e-10)
    assert not np.allclose(gated, a.forward(x)[0])  # removing them changed something


def test_hard_concrete_gate_probabilities_against_sampling():
    torch.manual_seed(0)
    gate = HardConcreteGate(3, temperature=0.33, stretch=0.1)
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor([-1.5, 0.2, 2.0]))
    gate.train()
    samples = torch.stack([gate() for _ in range(40_000)])
    assert float(samples.min()) == 0.0 and float(samples.max()) == 1.0  # stretched and clipped
    open_freq = (samples > 0).double().mean(0)
    np.testing.assert_allclose(open_freq.numpy(), gate.prob_open().detach().numpy(), atol=0.01)
    # P(open) = sigmoid(log_a - beta * log(-l / r)), by hand for the middle gate
    assert float(gate.prob_open()[1]) == pytest.approx(1 / (1 + math.exp(-(0.2 - 0.33 * math.log(0.1 / 1.1)))))
    assert float(gate.penalty()) == pytest.approx(float(gate.prob_open().sum()))
    gate.eval()
    expected = np.clip(1 / (1 + np.exp(-np.array([-1.5, 0.2, 2.0]))) * 1.2 - 0.1, 0, 1)
    np.testing.assert_allclose(gate().detach().numpy(), expected, rtol=1e-6)
    assert gate.kept().tolist() == [False, True, True]
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor([-0.85, -0.75, 0.0]))  # P(open) = 0.5 at log_a = 0.33 log(1/11) = -0.791
    assert gate.kept().tolist() == [False, True, True]

