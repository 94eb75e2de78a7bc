"""L0 pruning with Hard-Concrete gates (Voita et al. ACL 2019) on the tiny trained MT model:
the penalty closes gates, a killed run resumes to the uninterrupted run's numbers, and a
pruned model translates exactly as the model with those heads physically removed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evolution.models.fairseq import FairseqAdapter
from evolution.nets.gates import remove_heads
from evolution.training import pruning, pruning_batches

SOURCES = [
    "And God said, Let there be light",
    "and there was light.",
    "The earth was without form and void",
    "God saw the light, that it was good",
] * 3
TARGETS = [" ".join(w[::-1] for w in s.split()) for s in SOURCES]


def _mt(trained):
    paths = trained["paths"]
    return FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)


def test_a_large_penalty_closes_gates_and_no_penalty_keeps_them(trained, tmp_path):
    results = {}
    for lam in (0.0, 20.0):
        a = _mt(trained)
        items = pruning.training_items(a, SOURCES, TARGETS)
        results[lam] = pruning.prune(
            a,
            items,
            directory=tmp_path / f"lam{lam}",
            lam=lam,
            attentions=a.attention_types,
            updates=40,
            lr=0.05,
            max_tokens=200,
            progress=False,
        )
    total = {lam: sum(np.sum(r["prob_open"][att]) for att in r["prob_open"]) for lam, r in results.items()}
    heads = sum(np.size(results[0.0]["prob_open"][att]) for att in results[0.0]["prob_open"])
    assert total[20.0] < 0.25 * heads < total[0.0]
    for r in results.values():  # kept = P(open) > P(closed) = P(open) > 0.5
        for att in r["kept"]:
            np.testing.assert_array_equal(np.asarray(r["kept"][att]), np.asarray(r["prob_open"][att]) > 0.5)
    assert results[20.0]["history"][-1]["penalty"] < results[20.0]["history"][0]["penalty"]


def test_gate_lr_moves_the_gates_and_lr_the_model(trained, tmp_path):
    """The gates' own rate: with the model's rate tiny, a strong penalty closes the gates in 40
    updates at gate_lr 0.05 and cannot at gate_lr None (= lr, one rate for all: Adam moves a
    parameter by about its rate per update, so log alpha moves by at most ~40 x 1e-5). Either way
    no model weight moves more than Adam's bound of about lr per update."""
    results, moved = {}, {}
    for gate_lr in (0.05, None):
        a = _mt(trained)
        before = [p.detach().clone() for p in a._model.parameters()]
        items = pruning.training_items(a, SOURCES, TARGETS)
        results[gate_lr] = pruning.prune(
            a,
            items,
            directory=tmp_path / f"g{gate_lr}",
            lam=20.0,
            attentions=a.attention_types,
            updates=40,
            lr=1e-5,
            gate_lr=gate_lr,
            max_tokens=200,
            progress=False,
        )
        moved[gate_lr] = max(
            float((p.detach() - q).abs().max()) for p, q in zip(a._model.parameters(), before, strict=True)
        )
    heads = sum(np.size(v) for v in results[None]["prob_open"].values())
    total = {g: sum(np.sum(v) for v in r["prob_open"].values()) for g, r in results.items()}
    initial = heads / (1 + np.exp(0.33 * np.log(0.1 / 1.1)))  # P(open) at log alpha 0: 0.69 per head
    assert total[0.05] < 0.25 * heads
    assert total[None] == pytest.approx(initial, rel=0.01)  # 40 x 1e-5 moves no gate
    assert sum(np.sum(k) for k in results[0.05]["kept"].values()) < sum(
        np.sum(k) for k in results[None]["kept"].values()
    )
    for g in moved:
        assert 0 < moved[g] <= 40 * 1e-5 * 1.5  # at most ~lr per update (bias correction: a little more)


def test_without_gates_the_run_fine_tunes_the_model_only(trained, tmp_path):
    """attentions=() (the pruning analysis' 'tuned' control): no gate, no penalty, the model's
    weights change, and the kept heads are none gated (translation uses every head)."""
    a = _mt(trained)
    before = [p.detach().clone() for p in a._model.parameters()]
    items = pruning.training_items(a, SOURCES, TARGETS)
    r = pruning.prune(
        a,
        items,
        directory=tmp_path / "tuned",
        lam=0.0,
        attentions=(),
        updates=5,
        lr=1e-3,
        max_tokens=200,
        progress=False,
    )
    assert r["kept"] == {} and r["prob_open"] == {} and pruning.kept_gates(r) == {}
    assert all(h["penalty"] == 0.0 and h["open"] == {} for h in r["history"])
    assert any(not torch.equal(p.detach(), q) for p, q in zip(a._model.parameters(), before, strict=True))


def test_an_interrupted_pruning_run_resumes_to_the_same_numbers(trained, tmp_path, monkeypatch):
    a = _mt(trained)
    items = pruning.training_items(a, SOURCES, TARGETS)
    straight = pruning.prune(
        a,
        items,
        directory=tmp_path / "straight",
        lam=1.0,
        updates=8,
        lr=0.01,
        max_tokens=100,
        save_every=4,
        progress=False,
    )
    b = _mt(trained)
    real_step = torch.optim.Adam.step
    calls = {"n": 0}

    def dying_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(torch.optim.Adam, "step", dying_step)
        with pytest.raises(KeyboardInterrupt):
            pruning.prune(
                b,
                items,
                directory=tmp_path / "resumed",
                lam=1.0,
                updates=8,
                lr=0.01,
                max_tokens=100,
                save_every=4,
                progress=False,
            )
    assert not (tmp_path / "resumed" / "result.json").exists()
    c = _mt(trained)
    resumed = pruning.prune(
        c,
        items,
        directory=tmp_path / "resumed",
        lam=1.0,
        updates=8,
        lr=0.01,
        max_tokens=100,
        save_every=4,
        progress=False,
    )
    np.testing.assert_allclose(resumed["prob_open"]["encoder_self"], straight["prob_open"]["encoder_self"], rtol=1e-6)
    for p, q in zip(a._model.parameters(), c._model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_translations_of_the_gated_model_equal_the_model_with_heads_removed(trained):
    a = _mt(trained)
    b = _mt(trained)
    sources = [a.tokenize(s).ids for s in SOURCES[:4]]
    kept = {
        att: torch.ones(len(a.output_projections(att)), a.attention_modules(att)[0].num_heads)
        for att in a.attention_types
    }
    kept["encoder_self"][0, 1] = 0
    kept["decoder_self"][0, 0] = 0
    kept["encoder_decoder"][0, 1] = 0
    gated = pruning.translate(a, sources, gates=kept, beam=2)
    for att, mask in kept.items():
        for module, row in zip(b.attention_modules(att), mask, strict=True):
            if not row.all():
                remove_heads(module, row.bool().tolist())
    removed = pruning.translate(b, sources, beam=2)
    assert gated == removed
    # the pruned heads matter: the teacher-forced outputs with and without the gates differ
    import contextlib

    from evolution.nets.gates import head_gates

    src, dec = [a.build_input(sources[0])], [a.build_decoder_input(sources[0])]
    with torch.no_grad():
        full = a.logits(src, dec)
        with contextlib.ExitStack() as stack:
            for att, g in kept.items():
                stack.enter_context(head_gates(a.output_projections(att), g))
            pruned = a.logits(src, dec)
    assert (full - pruned).abs().max() > 1e-3


def test_label_smoothed_loss_by_hand():
    from evolution.metrics.importance import Item

    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]]))
    item = Item(inputs=[1, 2], decoder_inputs=[1, 2], positions=np.array([0, 1]), labels=np.array([0, 2]))
    total, n = pruning.label_smoothed_loss(logits, [item], smoothing=0.1)
    eps_i = 0.1 / 2
    expected = sum(
        (1 - 0.1 - eps_i) * -np.log(p[y]) + eps_i * -np.log(p).sum()
        for p, y in (([0.5, 0.25, 0.25], 0), ([0.2, 0.2, 0.6], 2))
    )
    assert n == 2 and float(total) == pytest.approx(expected, rel=1e-6)


def test_label_smoothed_loss_of_a_batch_is_the_sum_over_its_items():
    """Items of unequal lengths in one batch: the loss is the sum over every item's own positions
    and labels (a plain loop over items and positions), the count their number."""
    from evolution.metrics.importance import Item

    logits = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    items = [
        Item([1], [1, 2, 3], np.array([0, 2]), np.array([1, 3])),
        Item([1], [1, 2, 3, 4], np.array([1, 2, 3]), np.array([4, 0, 2])),
        Item([1], [1], np.array([0]), np.array([2])),
    ]
    total, n = pruning.label_smoothed_loss(logits, items, smoothing=0.2)
    logp = torch.log_softmax(logits.double(), -1).numpy()
    eps_i = 0.2 / 4
    expected = sum(
        (1 - 0.2 - eps_i) * -logp[b, p, y] - eps_i * logp[b, p].sum()
        for b, it in enumerate(items)
        for p, y in zip(it.positions, it.labels, strict=True)
    )
    assert n == 6 and float(total) == pytest.approx(expected, rel=1e-5)


def test_l0_penalty_is_the_mean_over_gated_layers_of_expected_open_heads_by_hand():
    import math

    from evolution.nets.gates import HardConcreteGate

    enc, dec = HardConcreteGate(6), HardConcreteGate(2)  # 3 layers x 2 heads, 1 layer x 2 heads
    with torch.no_grad():
        enc.log_a.copy_(torch.tensor([0.0, 1.0, -1.0, 2.0, -2.0, 0.5]))
        dec.log_a.copy_(torch.tensor([3.0, -3.0]))
    shift = 0.33 * math.log(0.1 / 1.1)  # log_a - beta log(-l / r)
    p_open = [1 / (1 + math.exp(-(a - shift))) for a in [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -3.0]]
    expected = sum(p_open) / 4  # 4 gated layers in all, not 8 heads and not 2 attention types
    value = pruning.l0_penalty({"encoder_self": enc, "decoder_self": dec}, {"encoder_self": 3, "decoder_self": 1})
    assert float(value) == pytest.approx(expected, rel=1e-6)


def test_inverse_sqrt_is_fairseqs_schedule():
    """The from-scratch control trains under the base models' schedule: fairseq's own
    InverseSquareRootSchedule, stepped as its trainer steps it, gives the same rate at every update."""
    from types import SimpleNamespace

    import torch
    from fairseq.optim.lr_scheduler.inverse_square_root_schedule import InverseSquareRootSchedule

    from evolution.nets.compat import import_fairseq
    from evolution.training.pruning import inverse_sqrt

    import_fairseq()
    from fairseq.optim import FairseqOptimizer

    class Plain(FairseqOptimizer):
        def __init__(self):
            super().__init__(None)
            self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)

    opt = Plain()
    sched = InverseSquareRootSchedule(SimpleNamespace(warmup_updates=40, warmup_init_lr=1e-7, lr=[2e-3]), opt)
    for step in range(0, 400):
        expected = opt.get_lr() if step == 0 else sched.step_update(step)
        assert inverse_sqrt(step, lr=2e-3, warmup=40) == pytest.approx(expected, rel=1e-12), step


def test_batches_of_each_epoch_follow_their_own_generator():
    """_batches: epoch e is ordered by numpy.random.default_rng([seed, e]) (so a resumed run sees the
    batches an uninterrupted one would, and epochs differ), every item once per epoch, each batch
    within max_tokens; rebuilt here from that contract by a plain loop."""
    from types import SimpleNamespace

    items = [SimpleNamespace(length=int(n), name=i) for i, n in enumerate(np.random.default_rng(0).integers(3, 30, 40))]
    stream = pruning_batches._batches(items, max_tokens=64, seed=5)

    def epoch(e):
        rng = np.random.default_rng([5, e])
        order = rng.permutation(len(items))
        cut, batch = [], []
        for i in sorted(order, key=lambda i: items[i].length):  # fewer than 2,000 items: one block
            if batch and items[i].length * (len(batch) + 1) > 64:
                cut.append(batch)
                batch = []
            batch.append(int(i))
        cut.append(batch)
        return [cut[k] for k in rng.permutation(len(cut))]

    for e in range(2):
        expected = epoch(e)
        got = [[it.name for it in next(stream)] for _ in expected]
        assert got == expected, e
        assert sorted(i for b in got for i in b) == list(range(len(items)))
        assert all(max(items[i].length for i in b) * len(b) <= 64 or len(b) == 1 for b in got)
    assert epoch(0) != epoch(1)


def test_the_from_scratch_control_starts_from_a_fresh_initialisation_not_the_pretrained_weights(trained, tmp_path):
    """train_with_heads re-initialises the model before training (Voita et al. 2019, sec. 6: the
    control that trains the pruned architecture from scratch). With 0 updates its weights are the
    starting point: every LayerNorm at PyTorch's initialisation (weight 1, bias 0), which the
    trained checkpoint's are not, and no weight matrix equal to the checkpoint's."""
    pretrained = _mt(trained)
    before = {k: v.detach().clone() for k, v in pretrained._model.state_dict().items()}
    norms = [m for m in pretrained._model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and not all(
        torch.equal(m.weight, torch.ones_like(m.weight)) and torch.equal(m.bias, torch.zeros_like(m.bias))
        for m in norms
    )  # the premise
    a = _mt(trained)
    items = pruning.training_items(a, SOURCES, TARGETS)
    layout = {
        att: np.ones((len(a.output_projections(att)), a.attention_modules(att)[0].num_heads))
        for att in a.attention_types
    }
    pruning.train_with_heads(
        a, items, directory=tmp_path / "scratch", layout=layout, updates=0, max_tokens=200, seed=3, progress=False
    )
    same = [
        k
        for k, v in a._model.state_dict().items()
        if v.dim() >= 2 and v.is_floating_point() and torch.equal(v, before[k])
    ]
    assert same == [], f"the from-scratch run starts from the pretrained {same}"
    for name, m in a._model.named_modules():
        if isinstance(m, torch.nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight)), f"{name}.weight is not a fresh LayerNorm's 1"
            assert torch.equal(m.bias, torch.zeros_like(m.bias)), f"{name}.bias is not a fresh LayerNorm's 0"
