"""The Hard-Concrete gate (Louizos, Welling & Kingma 2018) as Voita et al. (ACL 2019) use it,
built with its defaults, against the closed forms with the released code's constants
(the-story-of-heads, ``lib/layers/concrete_gate.py``: temperature beta = 0.33, stretch limits
(l, r) = (-0.1, 1.1)) written out here."""

from __future__ import annotations

import math

import pytest
import torch

from evolution.nets.gates import HardConcreteGate

BETA, LOW, HIGH = 0.33, -0.1, 1.1  # the released code's defaults
LOG_ALPHAS = [-2.0, -0.5, 0.0, 1.0, 2.0]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _default_gate(log_alphas) -> HardConcreteGate:
    gate = HardConcreteGate(len(log_alphas))  # every default
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor(log_alphas, dtype=torch.float32))
    return gate


def test_default_gate_l0_penalty_is_the_closed_form_with_the_papers_limits():
    """P(gate != 0) = sigmoid(log_alpha - beta log(-l / r)) (Louizos et al. 2018, eq. 12)."""
    gate = _default_gate(LOG_ALPHAS)
    expected = [_sigmoid(a - BETA * math.log(-LOW / HIGH)) for a in LOG_ALPHAS]
    assert gate.prob_open().tolist() == pytest.approx(expected, rel=1e-5)
    assert gate.penalty().item() == pytest.approx(sum(expected), rel=1e-5)
    assert HardConcreteGate(4).penalty().item() == pytest.approx(4 * _sigmoid(-BETA * math.log(1 / 11)), rel=1e-5)


def test_default_gate_eval_value_is_the_stretched_sigmoid():
    """At test time the gate is clip(sigmoid(log_alpha) (r - l) + l, 0, 1)."""
    gate = _default_gate(LOG_ALPHAS).eval()
    expected = [min(1.0, max(0.0, _sigmoid(a) * (HIGH - LOW) + LOW)) for a in LOG_ALPHAS]
    assert gate().tolist() == pytest.approx(expected, abs=1e-6)


def test_sampled_default_gates_are_exactly_0_and_1_as_often_as_the_closed_form_says():
    """s = sigmoid((logit u + log_alpha) / beta), u ~ U(0, 1); the gate is 0 when
    s <= -l / (r - l), i.e. with probability sigmoid(beta logit(-l / (r - l)) - log_alpha), and 1
    when s >= (1 - l) / (r - l), with probability sigmoid(log_alpha - beta logit((1 - l) / (r - l))).
    Estimated from 100,000 samples per log alpha (standard error under 0.0016)."""
    n = 100_000
    torch.manual_seed(0)
    gate = _default_gate([a for a in LOG_ALPHAS for _ in range(n)]).train()
    with torch.no_grad():
        g = gate().view(len(LOG_ALPHAS), n)
    zero = (g == 0).double().mean(1).tolist()
    one = (g == 1).double().mean(1).tolist()
    for k, a in enumerate(LOG_ALPHAS):
        p0 = _sigmoid(BETA * _logit(-LOW / (HIGH - LOW)) - a)
        p1 = _sigmoid(a - BETA * _logit((1 - LOW) / (HIGH - LOW)))
        assert zero[k] == pytest.approx(p0, abs=0.008), (a, zero[k], p0)
        assert one[k] == pytest.approx(p1, abs=0.008), (a, one[k], p1)
