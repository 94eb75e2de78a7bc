"""The Bible corpus's type counts and what k-means' k leaves to MI at 1,000 types: the numbers
behind docs/metrics.md's "Type count" and "k for 1,000 types" paragraphs and
``configs/bible-paper.yaml``'s k.

The corpus stage of ``configs/bible-paper.yaml`` is run into a temporary workdir (seconds; the
Bible text under ``data/sword``: ``make data/sword/mods.d/spaRV1909eb.conf``, which ``make run``
does), its English verses are cut into pieces by the shipped MT's SentencePiece model (the
pieces the extract stage stores), and counted:

* ``types``: how many piece types have >= 1,000, >= 200 and >= 100 occurrences, in the whole
  corpus (the analysed set of ``analyse: all``) and in the training split;
* ``selection``: the 1,000 most frequent types with >= 100 occurrences (the config's
  ``tokens``), their occurrences N and H(X);
* ``proportional``: for each k, a clustering that gives each type clusters in proportion to
  its count (type t gets round(k c_t / N) clusters, at least one, where k c_t / N >= 1; the
  rest share the remaining clusters, cut in rank order into runs of about equal occurrences):
  the MI it reaches (as a fraction of H(X)) and its shuffled-label control (labels permuted by
  ``default_rng(0)``), the floor under which k-means' MI means nothing.

    python benchmarks/type_counts.py [--out results/method-checks/type_counts.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CONFIG = ROOT / "configs" / "bible-paper.yaml"
OUT = ROOT / "results" / "method-checks" / "type_counts.json"
KS = (1000, 2000, 3000, 5000, 10_000)
THRESHOLDS = (1000, 200, 100)


def corpus_pieces(workdir: Path) -> tuple[list[int], list[int]]:
    """The piece ids of the analysed English verses and of the training split's."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run",
            str(CONFIG),
            "--stage",
            "corpus",
            "--workdir",
            str(workdir),
            "--no-progress",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    from evolution.models import load_adapter

    adapter = load_adapter(
        {"kind": "shipped", "path": str(ROOT / "results" / "bible-full" / "models" / "mt"), "name": "mt"}
    )
    corpus = next((workdir / "corpus").iterdir())
    meta = json.loads((corpus / "meta.json").read_text(encoding="utf-8"))
    lines = (corpus / "sentences.txt").read_text(encoding="utf-8").splitlines()[: len(meta["refs"])]
    train = (corpus / "text" / "train.en").read_text(encoding="utf-8").splitlines()

    def ids(sentences):
        return [i for s in sentences for i in adapter.tokenize(s).ids]

    return ids(lines), ids(train)


def proportional_clusters(counts: np.ndarray, k: int) -> np.ndarray:
    """(N,) cluster of each occurrence, the occurrences of type t (``counts`` sorted from the most
    frequent) in a block: each type with k c_t / N >= 1 gets max(1, round(k c_t / N)) clusters
    of its own (its occurrences split as evenly as possible), the other types' occurrences, in
    rank order, are cut into the remaining clusters as runs of about equal size."""
    n = int(counts.sum())
    share = k * counts / n
    own = share >= 1
    q = np.maximum(1, np.round(share[own])).astype(int)
    out, next_cluster = [], 0
    for c, m in zip(counts[own], q, strict=True):
        out.append(next_cluster + (np.arange(c) * m) // c)
        next_cluster += m
    rest = int(counts[~own].sum())
    if rest:
        left = max(1, k - next_cluster)
        out.append(next_cluster + (np.arange(rest) * left) // rest)
    return np.concatenate(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    from evolution.metrics.mi import entropy, mutual_information

    with tempfile.TemporaryDirectory() as tmp:
        analysed, train = corpus_pieces(Path(tmp))
    result = {"types": {}}
    for name, ids in (("corpus", analysed), ("train", train)):
        counts = collections.Counter(ids)
        result["types"][name] = {str(t): sum(v >= t for v in counts.values()) for t in THRESHOLDS}
    ranked = sorted(collections.Counter(analysed).items(), key=lambda kv: (-kv[1], kv[0]))
    top = np.array([v for _, v in ranked if v >= 100][:1000])
    labels = np.repeat(np.arange(len(top)), top)
    h = entropy(labels)
    result["selection"] = {
        "types": int(len(top)),
        "occurrences": int(top.sum()),
        "entropy": h,
        "occurrences_per_cluster": {str(k): top.sum() / k for k in KS},
    }
    result["proportional"] = []
    shuffled = np.random.default_rng(0).permutation(labels)
    for k in KS:
        clusters = proportional_clusters(top, k)
        result["proportional"].append(
            {
                "k": k,
                "clusters": int(len(np.unique(clusters))),
                "mi_fraction": mutual_information(labels, clusters) / h,
                "control": mutual_information(shuffled, clusters),
            }
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
