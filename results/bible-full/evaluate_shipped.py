"""Test-book scores of the shipped models, written to ``models/scores.json``: BLEU / chrF of the
translation models, perplexity of the causal and masked LMs.

    python results/bible-full/evaluate_shipped.py runs/default/corpus/<key>/text [--models mt lm mlm ...]

The text directory is a corpus stage's ``text/`` (``test.en``, ``test.es``: the test books Josh,
Prov, Mark, Rom). Translation is the pruning analysis's base evaluation
(``evolution.training.pruning.translate``: fairseq's SequenceGenerator, beam 4, max length
1.5 x source + 10, as ``fairseq-generate`` in the train stage's evaluation) on the shipped
weights, loaded without unpickling; scores are sacrebleu's (``evaluate.bleu_chrf``).
Perplexity is ``evaluate.perplexity`` on the English test verses: per predicted token, the next
token and ``</s>`` for the LM (fairseq-validate's number, tested); for the MLM the changed
positions of the MLM output MI's seeded corruption, which leaves out the chosen-but-unchanged
positions fairseq also scores (so it is higher than ``eval.json``'s fairseq MLM perplexity).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    from evolution.models.shipped_fairseq import ShippedAdapter
    from evolution.training import evaluate, pruning

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", type=Path, help="a corpus stage's text/ directory with test.en and test.es")
    parser.add_argument(
        "--models", nargs="+", default=sorted(p.parent.name for p in (HERE / "models").glob("*/model.json"))
    )
    args = parser.parse_args(argv)
    sources = (args.text / "test.en").read_text(encoding="utf-8").splitlines()
    refs = (args.text / "test.es").read_text(encoding="utf-8").splitlines()
    out_path = HERE / "models" / "scores.json"
    scores = json.loads(out_path.read_text(encoding="utf-8")) if out_path.is_file() else {}
    for name in args.models:
        adapter = ShippedAdapter(HERE / "models" / name, device="cpu")
        t0 = time.perf_counter()
        ids = [adapter.tokenize(s).ids[: adapter.max_content_tokens] for s in sources]
        if adapter.objective == "mt":
            result = evaluate.bleu_chrf(pruning.translate(adapter, ids), refs)
        else:
            result = {"ppl": evaluate.perplexity(adapter, ids)}
        result.update(
            sentences=len(sources),
            seconds=round(time.perf_counter() - t0, 1),
            weights_sha256=adapter.meta["weights_sha256"],
        )
        scores[name] = result
        print(name, result, flush=True)
    out_path.write_text(json.dumps(scores, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
