"""What a trained model is worth: LM/MLM perplexity against a unigram baseline, MT BLEU and chrF.

* Perplexity is fairseq's (``fairseq-validate`` on the test split, base-2
  loss per predicted token, so ppl = 2^loss). For the MLM the predicted
  tokens are the 15% masked positions (fairseq's masking, seeded).
* The unigram baseline is the perplexity of add-one-smoothed training-split
  piece frequencies (source side, ``</s>`` included) on every test token: what
  a model that ignores context achieves. A trained LM or MLM must beat it.
* :func:`perplexity` is the same number computed from a loaded model (any adapter, shipped
  weights included): no fairseq data directory needed.
* BLEU and chrF are sacrebleu's corpus scores of beam-search translations of
  the test split (detokenised SentencePiece output) against the raw
  references.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from evolution.training import fairseq_cli

__all__ = ["unigram_perplexity", "fairseq_perplexity", "perplexity", "translate", "bleu_chrf"]


def unigram_perplexity(train_pieces: Path, test_pieces: Path, *, vocab_size: int) -> float:
    """exp of the mean negative log-probability of ``test_pieces`` (plus one ``</s>`` per line)
    under add-one-smoothed unigram counts of ``train_pieces`` over ``vocab_size`` symbols."""
    counts: Counter = Counter()
    lines = 0
    for line in train_pieces.read_text(encoding="utf-8").splitlines():
        counts.update(line.split())
        lines += 1
    counts["</s>"] += lines
    total = sum(counts.values()) + vocab_size
    nll, n = 0.0, 0
    for line in test_pieces.read_text(encoding="utf-8").splitlines():
        for piece in [*line.split(), "</s>"]:
            nll -= math.log((counts.get(piece, 0) + 1) / total)
            n += 1
    return math.exp(nll / n)


def fairseq_perplexity(
    *, data_args: list[str], checkpoint: Path, subset: str = "test", seed: int = 0, threads: int = 2, cpu: bool = True
) -> float:
    """fairseq's perplexity of ``checkpoint`` on ``subset`` (2 ** base-2 loss per predicted token)."""
    args = [
        *data_args,
        "--path",
        str(checkpoint),
        "--valid-subset",
        subset,
        "--max-tokens",
        "8192",
        "--seed",
        str(seed),
        "--log-format",
        "json",
        "--required-batch-size-multiple",
        "1",
        *(["--cpu"] if cpu else []),
    ]
    proc = fairseq_cli.run("validate", args, threads=threads)
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.search(rf"\{{.*\"{re.escape(subset)}_loss\".*\}}", line)
        if m:
            return 2 ** float(json.loads(m.group(0))[f"{subset}_loss"])
    raise RuntimeError(f"fairseq-validate printed no {subset} loss:\n{proc.stderr[-2000:]}")


def perplexity(adapter, sentences, *, seed: int = 0, max_tokens: int = 8192) -> float:
    """exp of the mean negative log-likelihood per predicted token of a causal or masked LM
    adapter on ``sentences`` (content ids, ``Adapter.tokenize``), every token weighted alike.

    Causal LM: input ``</s> x1..xn``, labels ``x1..xn </s>``, as ``fairseq-validate`` on the
    test split (:func:`fairseq_perplexity`; equal to it, ``tests/test_shipped.py``). Masked LM:
    the MLM output MI's corruption (``evolution.metrics.importance.objective_items``: 15% of the
    content tokens, 80/10/10, ``numpy.random.default_rng([seed, s])`` for sentence s), scored at
    the positions whose token changed. fairseq's masked-LM loss also scores the chosen positions
    left unchanged (and may choose ``<s>`` / ``</s>``), the easiest targets, so this number is
    higher than :func:`fairseq_perplexity`'s and is not to be compared with it.
    """
    import torch

    from evolution.extract import batches
    from evolution.metrics.importance import objective_items, sentence_losses

    if adapter.objective not in ("lm", "mlm"):
        raise ValueError(
            f"{adapter.name}: perplexity is for causal and masked LMs, not {adapter.objective!r}; "
            "score a translation model with translate() and bleu_chrf()"
        )
    items = [it for it in objective_items(adapter, sentences, seed=seed) if it is not None]
    if not items:
        raise ValueError(f"{adapter.name}: no predicted token in {len(sentences)} sentences")
    nll, n = 0.0, 0
    with torch.inference_mode():
        for batch in batches([it.length for it in items], max_batch_tokens=max_tokens):
            chosen = [items[i] for i in batch]
            counts = [len(it.labels) for it in chosen]
            nll += float((sentence_losses(adapter, chosen).double() * torch.as_tensor(counts)).sum())
            n += sum(counts)
    return math.exp(nll / n)


def translate(
    *, data: Path, checkpoint: Path, subset: str = "test", beam: int = 4, threads: int = 2, cpu: bool = True
) -> list[str]:
    """Detokenised beam-search translations of ``subset``, in corpus order."""
    args = [
        str(data),
        "--path",
        str(checkpoint),
        "--gen-subset",
        subset,
        "--beam",
        str(beam),
        "--max-tokens",
        "8192",
        "--remove-bpe",
        "sentencepiece",
        "--required-batch-size-multiple",
        "1",
        "--max-len-a",
        "1.5",
        "--max-len-b",
        "10",
        *(["--cpu"] if cpu else []),
    ]
    proc = fairseq_cli.run("generate", args, threads=threads)
    hyps: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("D-"):
            head, _score, *text = line.split("\t")
            hyps[int(head[2:])] = text[0] if text else ""
    return [hyps[i] for i in sorted(hyps)]


def bleu_chrf(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """sacrebleu corpus BLEU and chrF (default signatures)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} translations for {len(references)} references")
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
    }
