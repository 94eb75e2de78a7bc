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


def test_test_time_gates_from_a_pruning_result_are_the_gates_eval_values():
    """The continuous test-time gate of the released code (``concrete_gate.py``: clip(sigmoid(log a)
    (r - l) + l, 0, 1)) recovered from a run's stored P(open): equal to HardConcreteGate in eval mode
    for log a spread over open, closed and clipped gates; heads pruned by the hard rule may keep
    a small positive value, which the hard 0/1 layout zeroes."""
    import torch

    from evolution.nets.gates import HardConcreteGate
    from evolution.training.pruning import kept_gates, test_time_gates

    gate = HardConcreteGate(6)
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor([-6.0, -2.2, -0.5, 0.0, 1.3, 5.0]))
    gate.eval()
    expected = gate().detach()
    result = {
        "prob_open": {"encoder_self": gate.prob_open().detach().view(2, 3).tolist()},
        "kept": {"encoder_self": gate.kept().view(2, 3).tolist()},
    }
    got = test_time_gates(result)["encoder_self"].view(-1)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert got[0] == 0.0 and got[-1] == 1.0 and 0.0 < float(got[2]) < 1.0  # clipped low, clipped high, between
    hard = kept_gates(result)["encoder_self"].view(-1)
    assert float(hard[1]) == 0.0 and float(got[1]) > 0.0  # pruned by the hard rule, still partly open
