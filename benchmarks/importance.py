"""Cost of the head-importance methods against one extraction pass of the same model, and of
a pruning update against a standard training update (the padded batch's label-smoothed
cross-entropy in one call, as fairseq's criterion computes it; ratios measured in one run;
issue targets: importance and LRP <= 3x an extraction pass, a pruning update <= 1x a
training update).

A randomly initialised fairseq translation model of the project's size (6 encoder layers,
d = 128, 4 heads, FFN 512, one decoder layer; evolution.fixtures.random_init) on Genesis lines
with a word-reversed "translation". Numbers depend on the machine; the ratios are what to read.

    python benchmarks/importance.py [--sentences 200] [--updates 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn, repeat: int = 1) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    import torch

    from evolution.extract_plan import batches
    from evolution.fixtures.random_init import make_fairseq_model, vocabulary_of
    from evolution.metrics.importance import mask_gradients, objective_items
    from evolution.metrics.relevance import head_relevance
    from evolution.models.fairseq import FairseqAdapter
    from evolution.training import pruning, pruning_batches

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lines = [
        ln
        for ln in (ROOT / "evolution/data/web-genesis.en.txt").read_text(encoding="utf-8").splitlines()
        if 3 <= len(ln.split()) <= 40
    ][: args.sentences]
    targets = [" ".join(w[::-1] for w in ln.split()) for ln in lines]
    with tempfile.TemporaryDirectory() as tmp:
        words = vocabulary_of(lines + targets, max_size=8000)
        ckpt, data = make_fairseq_model(
            Path(tmp) / "mt",
            task="translation",
            words=words,
            layers=6,
            d_model=128,
            heads=4,
            ffn=512,
            max_positions=256,
            seed=0,
        )
        a = FairseqAdapter(ckpt, data=data)
        src = [a.tokenize(s).ids for s in lines]
        tgt = [a.tokenize_target(t).ids for t in targets]
        items = objective_items(a, src, targets=tgt)
        inputs = [a.build_input(s) for s in src]
        tokens = sum(len(x) for x in inputs)

        def extraction():
            for batch in batches([len(x) for x in inputs], max_batch_tokens=4096):
                a.forward([inputs[i] for i in batch])

        t_extract = _timed(extraction, repeat=2)
        t_importance = _timed(lambda: mask_gradients(a, items, attentions=a.attention_types), repeat=2)
        t_relevance = _timed(lambda: head_relevance(a, items, attentions=a.attention_types), repeat=2)
        print(
            f"{len(items)} sentences, {tokens} source tokens, {sum(len(i.positions) for i in items)} target steps; "
            f"torch threads {args.threads}"
        )
        print(f"extraction pass (hidden states)   {t_extract:8.2f} s   1.00")
        print(f"head-mask importance (all types)  {t_importance:8.2f} s   {t_importance / t_extract:5.2f}x extraction")
        print(f"LRP head relevance (all types)    {t_relevance:8.2f} s   {t_relevance / t_extract:5.2f}x extraction")

        train = pruning.training_items(a, lines, targets, max_tokens=4096)
        optimizer = torch.optim.Adam(a._model.parameters(), lr=1e-4)
        stream = pruning_batches._batches(train, max_tokens=4096, seed=0)
        a._model.train()

        def plain_updates():
            """A standard training step: the padded batch's label-smoothed cross-entropy in one
            call (torch's, as fairseq's criterion computes it on a padded target tensor)."""
            for _ in range(args.updates):
                batch = next(stream)
                logits = a.logits([it.inputs for it in batch], [it.decoder_inputs for it in batch])
                target = torch.full(logits.shape[:2], -100, dtype=torch.long)
                for b, it in enumerate(batch):
                    target[b, torch.as_tensor(it.positions)] = torch.as_tensor(it.labels)
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), target.flatten(), ignore_index=-100, label_smoothing=0.1
                )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        t_plain = _timed(plain_updates)
        with tempfile.TemporaryDirectory() as run_dir:
            t0 = time.perf_counter()
            pruning.prune(
                a,
                train,
                directory=run_dir,
                lam=0.1,
                attentions=a.attention_types,
                updates=args.updates,
                max_tokens=4096,
                save_every=10**9,
                progress=False,
            )
            t_prune = time.perf_counter() - t0
        print(f"training update (padded batch)    {t_plain / args.updates:8.3f} s   1.00")
        print(
            f"pruning update (gates + L0)       {t_prune / args.updates:8.3f} s   "
            f"{t_prune / t_plain:5.2f}x a training update"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
