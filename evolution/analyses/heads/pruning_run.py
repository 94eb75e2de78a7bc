"""One L0 pruning run of :mod:`evolution.analyses.heads.pruning` as a unit's task (Voita et al.
ACL 2019, sec. 6): fine-tune a translation model with Hard-Concrete gates on the heads of a
scope (:data:`SCOPES`) and translate with the kept heads, train the kept layout from scratch
(the paper's control), or score the references (the unpruned model, the same fine-tuning
without gates, every head from scratch): :func:`pruning_task`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from evolution.analyses.base import load_texts
from evolution.analyses.heads.importance import ATTENTIONS

__all__ = ["SCOPES", "pruning_task"]

#: the attention types each scope gates: the encoder self-attention alone (the paper's fig. 7),
#: or all three (table 2)
SCOPES = {"encoder": ("encoder_self",), "all": ATTENTIONS}

logger = logging.getLogger(__name__)


def _pairs(lines_src: list[str], lines_tgt: list[str]) -> tuple[list[str], list[str]]:
    # not strict: one side's file may end in a newline and the other's not (an empty last line)
    keep = [i for i, (s, t) in enumerate(zip(lines_src, lines_tgt, strict=False)) if s.strip() and t.strip()]
    return [lines_src[i] for i in keep], [lines_tgt[i] for i in keep]


def pruning_task(
    *,
    spec: dict,
    texts: str,
    directory: str,
    lam: float | None,
    scope: str,
    updates: int,
    lr: float,
    max_tokens: int,
    seed: int,
    scratch_updates: int | None,
    torch_threads: int = 1,
    gate_lr: float | None = None,
    scratch_batches: str = "regrouped",
) -> dict[str, Any]:
    """One pruning run (``lam`` None: the unpruned model's BLEU only, or with ``scope`` "scratch" the
    full layout trained from scratch for ``scratch_updates``; ``scope`` "tuned": the same fine-tuning
    without gates): fine-tune with gates, translate the test sentences with the kept heads, and with
    ``scratch_updates`` train the kept layout from scratch (batched as ``scratch_batches``:
    :data:`evolution.training.pruning_batches.BATCHINGS`) and translate again."""
    import torch

    from evolution.models import fairseq_adapter
    from evolution.models.base import FairseqLayoutHeads
    from evolution.training import evaluate, pruning

    torch.set_num_threads(torch_threads)
    spec = {**spec, "device": "cpu"}  # pruning fine-tunes and trains on the CPU (docs/heads.md)
    adapter = fairseq_adapter(spec, cached=False)  # fairseq's classes train; not the cached one: fine-tuning changes it
    t = load_texts(texts)
    src, tgt = _pairs(t["train_source"].split("\n"), t["train_target"].split("\n"))
    refs = t["test_target"].split("\n")
    test_ids = [adapter.tokenize(s).ids[: adapter.max_content_tokens] for s in t["test_source"].split("\n")]

    def score(gates=None) -> dict:
        hyps = pruning.translate(adapter, test_ids, gates=gates)
        return evaluate.bleu_chrf(hyps, refs)

    def from_scratch(model, layout, updates: int) -> dict:
        """``model`` re-initialised and trained with the heads of ``layout`` for ``updates`` under the
        base schedule."""
        base_lr, warmup = _base_schedule(model)
        items = pruning.training_items(model, src, tgt, max_tokens=max_tokens)
        if scratch_batches == "fixed" and len(items) != len(src):
            # fairseq draws its order over every binarised pair and filters after: one pair fewer here
            # changes every batch (still cut once and reordered per epoch, but not fairseq-train's)
            logger.warning(
                "metrics.pruning.scratch_batches fixed: %d of %d training pairs are longer than the "
                "model accepts or max_tokens %d and were left out, so the batches are fixed but not "
                "those fairseq-train drew",
                len(src) - len(items),
                len(src),
                max_tokens,
            )
        return pruning.train_with_heads(
            model,
            items,
            directory=Path(directory) / "scratch",
            layout=layout,
            updates=updates,
            lr=base_lr,
            warmup=warmup,
            max_tokens=max_tokens,
            seed=seed,
            progress=False,
            batching=scratch_batches,
        )

    t0 = time.perf_counter()
    if lam is None and scope != "scratch":
        return {**score(), "seconds": round(time.perf_counter() - t0, 1)}
    from evolution import location

    if location.is_url(directory):
        raise ValueError(
            f"metrics.pruning keeps its resumable runs on a local disk, not at {directory}: "
            "use a local metrics.store / extract.store for pruning"
        )
    if scope == "scratch":  # every head, from scratch, by the from-scratch runs' loop
        if scratch_updates is None:
            raise ValueError(
                "a pruning run of scope 'scratch' trains every head from scratch for scratch_updates: "
                "pass scratch_updates (metrics.pruning.scratch_updates)"
            )
        if not isinstance(adapter, FairseqLayoutHeads):
            raise ValueError(
                f"metrics.pruning: {adapter.name} ({type(adapter).__name__}) has no fairseq-layout heads "
                "to train from scratch; pruning runs on fairseq translation models"
            )
        layout = {
            a: [[1.0] * adapter.attention_modules(a)[0].num_heads] * len(adapter.output_projections(a))
            for a in ATTENTIONS
        }
        scratch = from_scratch(adapter, layout, scratch_updates)
        s = score()
        return {
            "bleu_scratch": s["bleu"],
            "chrf_scratch": s["chrf"],
            "layout": layout,
            "scratch_seconds": scratch["seconds"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
    assert lam is not None  # lam None returned above: the unpruned model's score, or the scratch run
    items = pruning.training_items(adapter, src, tgt, max_tokens=max_tokens)
    run = pruning.prune(
        adapter,
        items,
        directory=Path(directory) / "prune",
        lam=lam,
        attentions=SCOPES.get(scope, ()),
        updates=updates,
        lr=lr,
        gate_lr=gate_lr,
        max_tokens=max_tokens,
        seed=seed,
        progress=False,
    )
    kept = pruning.kept_gates(run)
    out = {
        "kept": run["kept"],
        "prob_open": run["prob_open"],
        **score(kept),
        "prune_seconds": run["seconds"],
        "history": run["history"],
    }
    # the released code's own test-time model: every head scaled by its gate's deterministic value
    continuous = score(pruning.test_time_gates(run))
    out.update(bleu_continuous=continuous["bleu"], chrf_continuous=continuous["chrf"])
    if scratch_updates:
        adapter = fairseq_adapter(spec, cached=False)
        scratch = from_scratch(adapter, kept, scratch_updates)
        s = score(kept)
        out.update(bleu_scratch=s["bleu"], chrf_scratch=s["chrf"], scratch_seconds=scratch["seconds"])
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _base_schedule(adapter) -> tuple[float, int]:
    """The learning rate and warm-up the model was trained with (its recorded fairseq arguments;
    fairseq's defaults where absent): the from-scratch control trains under the same schedule."""
    args = getattr(adapter, "cfg", None)
    model = getattr(args, "model", None)
    lr = getattr(model, "lr", None) or [1e-3]
    lr = float(lr[0] if isinstance(lr, (list, tuple)) else lr)
    return lr, int(getattr(model, "warmup_updates", None) or 4000)
