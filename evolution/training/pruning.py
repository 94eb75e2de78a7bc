"""Pruning attention heads with Hard-Concrete gates and an L0 penalty (Voita, Talbot,
Moiseev, Sennrich & Titov, ACL 2019, sec. 6), and the from-scratch control.

:func:`prune` fine-tunes a trained translation model (every parameter, as the
paper does) with one :class:`~evolution.nets.gates.HardConcreteGate` per head
of the chosen attention types, multiplying the head's output before the
output projection, and the loss

    label-smoothed cross-entropy per target token
    + lambda * mean over gated layers of the expected number of open gates

(the-story-of-heads, ``lib/task/seq2seq/problems/concrete.py`` l. 61, 96-106:
the penalties of the gated layers are averaged, not divided by the head
count). At the end a head is kept when P(open) > P(closed); the pruned model
multiplies kept heads by 1 and the others by 0, which is the model with those
heads removed (``tests/test_importance.py`` checks the equivalence).

:func:`train_with_heads` trains the same architecture *from scratch* (fairseq's
initialisation under ``seed``) with a fixed head layout for a given number of
updates: the paper's control that separates "these heads suffice" from "the
pruned model was initialised well".

Both resume: every ``save_every`` updates the weights, gates, optimizer and
step go to ``<directory>/state.pt`` (plain tensors, loaded with
``weights_only=True``); a run whose ``result.json`` exists is returned as is. Their
batches: :mod:`evolution.training.pruning_batches`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evolution.training.pruning_batches import BATCHINGS, fixed_batches

logger = logging.getLogger(__name__)

__all__ = [
    "training_items",
    "fixed_batches",
    "BATCHINGS",
    "l0_penalty",
    "inverse_sqrt",
    "prune",
    "kept_gates",
    "train_with_heads",
    "translate",
    "label_smoothed_loss",
]


def training_items(adapter, sources: Sequence[str], targets: Sequence[str], *, max_tokens: int | None = None):
    """The :class:`~evolution.metrics.importance.Item` of each sentence pair (raw text, tokenised with
    the model's own SentencePiece and dictionary), dropping pairs longer than the model accepts."""
    from evolution.metrics.importance import objective_items

    src = [adapter.tokenize(s).ids for s in sources]
    tgt = [adapter.tokenize_target(t).ids for t in targets]
    limit = min(adapter.max_content_tokens, adapter.max_target_tokens)
    keep = [i for i in range(len(src)) if 0 < len(src[i]) <= limit and 0 < len(tgt[i]) <= limit]
    items = objective_items(adapter, [src[i] for i in keep], targets=[tgt[i] for i in keep])
    return [it for it in items if it is not None and (max_tokens is None or it.length <= max_tokens)]


def label_smoothed_loss(logits, items, *, smoothing: float = 0.1):
    """Sum over the items' positions of fairseq's label-smoothed NLL
    ((1 - eps - eps_i) * nll + eps_i * sum_v -log p_v, eps_i = eps / (V - 1)), and the
    number of positions: the criterion the base MT model was trained with. The positions of
    all items are gathered in one indexing (one per item would make the backward pass allocate
    a (B, T, V) gradient per item)."""
    import torch

    from evolution.metrics.importance import flat_positions

    logp = torch.log_softmax(logits.float(), dim=-1)
    rows, pos, labels = flat_positions(items, device=logp.device)
    lp = logp[rows, pos]  # (N, V)
    eps_i = smoothing / (logp.shape[-1] - 1)
    nll = -lp.gather(-1, labels[:, None]).squeeze(-1)
    return ((1.0 - smoothing - eps_i) * nll - eps_i * lp.sum(-1)).sum(), int(labels.numel())


def l0_penalty(gates: dict, layers: dict):
    """The mean over gated layers of each layer's expected number of open heads: ``gates``
    attention -> :class:`~evolution.nets.gates.HardConcreteGate` over its (L * H) heads, ``layers``
    attention -> L (the-story-of-heads, ``lib/task/seq2seq/problems/concrete.py`` l. 61)."""
    return sum(g.penalty() for g in gates.values()) / sum(layers[a] for a in gates)


def inverse_sqrt(step: int, *, lr: float, warmup: int, warmup_init_lr: float = 1e-7) -> float:
    """fairseq's ``inverse_sqrt`` schedule, the base models' (``recipe.py``): the learning rate of
    the update after ``step`` completed ones, linear from ``warmup_init_lr`` to ``lr`` over ``warmup``
    updates, then ``lr * sqrt(warmup / step)``."""
    if step < warmup:
        return warmup_init_lr + step * (lr - warmup_init_lr) / warmup
    return lr * (warmup / step) ** 0.5


def _run(
    adapter,
    items,
    *,
    directory: Path,
    updates: int,
    lr: float,
    max_tokens: int,
    seed: int,
    gates: dict,
    fixed: dict,
    lam: float,
    save_every: int,
    progress: bool,
    smoothing: float,
    warmup: int = 0,
    gate_lr: float | None = None,
    batching: str = "regrouped",
) -> dict:
    import torch

    from evolution.nets.gates import head_gates

    directory.mkdir(parents=True, exist_ok=True)
    model = adapter._model
    gate_params = [p for g in gates.values() for p in g.parameters()]
    groups = [{"params": list(model.parameters()), "name": "model"}]
    if gate_params:
        groups.append({"params": gate_params, "name": "gates"})
    optimizer = torch.optim.Adam(groups, lr=lr, betas=(0.9, 0.98))
    state_path, step, history = directory / "state.pt", 0, []
    if state_path.is_file():
        state = torch.load(str(state_path), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        for a, g in gates.items():
            g.load_state_dict(state["gates"][a])
        optimizer.load_state_dict(state["optimizer"])
        step, history = int(state["step"]), json.loads(state["history"])
        torch.set_rng_state(state["torch_rng"])
        logger.info("prune %s: resuming at update %d", directory.name, step)
    else:
        torch.manual_seed(seed)
    stream = itertools.islice(BATCHINGS[batching](items, max_tokens=max_tokens, seed=seed), step, None)
    projections = {a: adapter.output_projections(a) for a in set(gates) | set(fixed)}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=updates, initial=step, desc=f"prune {directory.name}", unit="update")
    model.train()
    for g in gates.values():
        g.train()
    t0 = time.perf_counter()
    while step < updates:
        batch = next(stream)
        with contextlib.ExitStack() as stack:
            for a, g in gates.items():
                stack.enter_context(head_gates(projections[a], g().view(len(projections[a]), -1)))
            for a, mask in fixed.items():
                stack.enter_context(head_gates(projections[a], mask))
            logits = adapter.logits([it.inputs for it in batch], [it.decoder_inputs for it in batch])
        loss_sum, n = label_smoothed_loss(logits, batch, smoothing=smoothing)
        penalty = l0_penalty(gates, {a: len(projections[a]) for a in gates}) if gates else loss_sum.new_zeros(())
        loss = loss_sum / n + lam * penalty
        rate = inverse_sqrt(step, lr=lr, warmup=warmup) if warmup else lr
        for group in optimizer.param_groups:
            group["lr"] = gate_lr if group["name"] == "gates" and gate_lr is not None else rate
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if bar is not None:
            bar.update(1)
        if step % 10 == 0 or step == updates:
            history.append(
                {
                    "update": step,
                    "loss": float(loss_sum.detach()) / n,
                    "penalty": float(penalty.detach()),
                    "open": {a: float(g.prob_open().sum().detach()) for a, g in gates.items()},
                }
            )
        if step % save_every == 0 or step == updates:
            tmp = directory / "state.pt.partial"
            torch.save(
                {
                    "model": model.state_dict(),
                    "gates": {a: g.state_dict() for a, g in gates.items()},
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                    "history": json.dumps(history),
                    "torch_rng": torch.get_rng_state(),
                },
                str(tmp),
            )
            tmp.replace(state_path)
    if bar is not None:
        bar.close()
    model.eval()
    for g in gates.values():
        g.eval()
    return {"updates": step, "seconds": round(time.perf_counter() - t0, 1), "history": history}


def _gates_for(adapter, attentions: Sequence[str]) -> dict:
    from evolution.nets.gates import HardConcreteGate

    return {
        a: HardConcreteGate(len(adapter.output_projections(a)) * adapter.attention_modules(a)[0].num_heads)
        for a in attentions
    }


def prune(
    adapter,
    items,
    *,
    directory: str | Path,
    lam: float,
    attentions: Sequence[str] = ("encoder_self",),
    updates: int = 1000,
    lr: float = 1e-4,
    gate_lr: float | None = None,
    max_tokens: int = 4096,
    seed: int = 0,
    save_every: int = 200,
    progress: bool = True,
    smoothing: float = 0.1,
) -> dict:
    """Fine-tune ``adapter``'s model in place with Hard-Concrete head gates on ``attentions``.

    Returns (and writes to ``directory/result.json``) ``{"kept": {attention: (L, H) bool as
    lists}, "prob_open": {...}, "lambda", "updates", "seconds", "history"}``; the adapter's model
    is left fine-tuned (evaluate it under :func:`kept_gates`). ``lr``: Adam's, constant (the
    released code restarts its noam schedule; a constant small rate is what fine-tuning a
    converged model needs here, docs/decisions.md). ``gate_lr``: Adam's constant rate for the
    gates' log alpha (None: ``lr``, one rate for all as in the released code). Adam moves each
    parameter by about its rate per update whatever the gradient's size, so in a budget of
    ``updates`` a gate's log alpha moves at most about ``updates * gate_lr``: at lr 1e-4 a
    thousand updates cannot close a gate (docs/decisions.md). ``attentions`` empty: the same
    fine-tuning without gates (the unpruned control).
    """
    directory = Path(directory)
    finished = _finished(adapter, directory)
    if finished is not None:
        return finished
    gates = _gates_for(adapter, attentions)
    run = _run(
        adapter,
        items,
        directory=directory,
        updates=updates,
        lr=lr,
        max_tokens=max_tokens,
        seed=seed,
        gates=gates,
        fixed={},
        lam=lam,
        save_every=save_every,
        progress=progress,
        smoothing=smoothing,
        gate_lr=gate_lr,
    )
    shape = {a: (len(adapter.output_projections(a)), -1) for a in attentions}
    result = {
        "lambda": lam,
        "attentions": list(attentions),
        "kept": {a: g.kept().view(shape[a]).tolist() for a, g in gates.items()},
        "prob_open": {a: g.prob_open().detach().view(shape[a]).tolist() for a, g in gates.items()},
        **run,
    }
    (directory / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return result


def _finished(adapter, directory: Path) -> dict | None:
    """A finished run's ``result.json``, its final weights loaded into the adapter's model; None
    when the run has not finished."""
    import torch

    done = directory / "result.json"
    if not done.is_file():
        return None
    state = torch.load(str(directory / "state.pt"), map_location="cpu", weights_only=True)
    adapter._model.load_state_dict(state["model"])
    adapter._model.eval()
    return json.loads(done.read_text(encoding="utf-8"))


def kept_gates(result: dict) -> dict:
    """``attention -> (L, H)`` float tensor of 1 (kept) and 0 (pruned) from a :func:`prune` result."""
    import torch

    return {a: torch.as_tensor(k, dtype=torch.float32) for a, k in result["kept"].items()}


def test_time_gates(result: dict, *, temperature: float = 0.33, stretch: float = 0.1) -> dict:
    """``attention -> (L, H)`` float tensor of the gates' deterministic test-time values, as the
    released code applies them (``concrete_gate.py``: ``clip(sigmoid(log_a) (r - l) + l, 0, 1)``
    with ``(l, r) = (-stretch, 1 + stretch)``; :class:`evolution.nets.gates.HardConcreteGate` in
    eval mode), recovered from a :func:`prune` result's ``prob_open`` = sigmoid(log_a - temperature
    log(-l / r)). ``temperature`` and ``stretch``: the gates' (the defaults, as :func:`prune` uses)."""
    import torch

    low, high = -float(stretch), 1.0 + float(stretch)
    out = {}
    for a, p in result["prob_open"].items():
        p = torch.as_tensor(p, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
        log_a = torch.log(p) - torch.log1p(-p) + temperature * math.log(-low / high)
        out[a] = (torch.sigmoid(log_a) * (high - low) + low).clamp(0.0, 1.0).to(torch.float32)
    return out


def train_with_heads(
    adapter,
    items,
    *,
    directory: str | Path,
    layout: dict,
    updates: int,
    lr: float = 1e-3,
    warmup: int = 400,
    max_tokens: int = 4096,
    seed: int = 0,
    save_every: int = 200,
    progress: bool = True,
    smoothing: float = 0.1,
    batching: str = "regrouped",
) -> dict:
    """Re-initialise ``adapter``'s model (fairseq's initialisation under ``seed``) and train it
    from scratch with the fixed head ``layout`` (``attention -> (L, H)`` 0/1, e.g.
    :func:`kept_gates` of a pruning run) for ``updates`` updates under the base recipe's schedule
    (:func:`inverse_sqrt` with ``warmup`` updates to ``lr``). ``batching``: a key of
    :data:`BATCHINGS` ("fixed": fairseq-train's batches, docs/decisions.md "The 1.2 BLEU gap")."""
    if batching not in BATCHINGS:
        raise ValueError(f"batching {batching!r} is not one of {sorted(BATCHINGS)}")
    import torch

    directory = Path(directory)
    finished = _finished(adapter, directory)
    if finished is not None:
        return finished
    if not (directory / "state.pt").is_file():
        torch.manual_seed(seed)
        fresh = adapter._task.build_model(adapter.cfg.model)
        adapter._model.load_state_dict(fresh.state_dict())
    fixed = {a: torch.as_tensor(m, dtype=torch.float32) for a, m in layout.items()}
    run = _run(
        adapter,
        items,
        directory=directory,
        updates=updates,
        lr=lr,
        max_tokens=max_tokens,
        seed=seed,
        gates={},
        fixed=fixed,
        lam=0.0,
        save_every=save_every,
        progress=progress,
        smoothing=smoothing,
        warmup=warmup,
        batching=batching,
    )
    result = {"layout": {a: np.asarray(m).tolist() for a, m in layout.items()}, **run}
    (directory / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return result


def translate(
    adapter, sources: Sequence[Sequence[int]], *, gates: dict | None = None, beam: int = 4, max_batch_tokens: int = 8192
) -> list[str]:
    """Beam-search translations (fairseq's ``SequenceGenerator``, as the base evaluation:
    beam 4, max length 1.5 x source + 10) of source content ids, detokenised, with the heads
    multiplied by ``gates`` (``attention -> (L, H)``) where given."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    from evolution.extract_plan import batches
    from evolution.nets.gates import head_gates

    tgt_dict = adapter._task.target_dictionary
    generator = SequenceGenerator([adapter._model], tgt_dict, beam_size=beam, max_len_a=1.5, max_len_b=10)
    out: list[str] = [""] * len(sources)
    inputs = [adapter.build_input(list(s)) for s in sources]
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        ids, _, lengths = adapter._pad([inputs[i] for i in batch])
        sample = {"net_input": {"src_tokens": ids, "src_lengths": torch.as_tensor(lengths)}}
        with contextlib.ExitStack() as stack, torch.no_grad():
            for a, g in (gates or {}).items():
                stack.enter_context(head_gates(adapter.output_projections(a), g))
            hyps = generator.generate([adapter._model], sample)
        for b, i in enumerate(batch):
            pieces = tgt_dict.string(hyps[b][0]["tokens"].int().cpu())
            out[i] = "".join(pieces.split()).replace("\u2581", " ").strip()
    return out
