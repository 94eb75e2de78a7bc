"""Smoke test of an installation without fairseq: import the package, open the committed results,
draw a figure, and use the notebook API on a small random Hugging Face model (represent, MI,
neighbours, head statistics, views). tools/check_pythons.sh runs it under other Python
versions (docs/install.md); exits non-zero on the first failure."""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    warnings.simplefilter("ignore")
    import evolution.api as ev
    from evolution.analyses.mi_figures import mi_by_layer
    from evolution.fixtures.random_init import make_hf_model, vocabulary_of
    from evolution.metrics.results import open_metrics

    mi = open_metrics(str(ROOT / "results" / "bible-full" / "metrics.zarr"), "mi")
    assert mi.sizes["model"] >= 3, mi
    assert mi_by_layer(str(ROOT / "results" / "bible-full" / "metrics.zarr")) is not None
    sentences = ["the cat sat on the mat", "a dog ran to the cat", "the mat was red and the dog was blue"] * 4
    with tempfile.TemporaryDirectory() as tmp:
        path = make_hf_model(
            Path(tmp) / "bert",
            arch="bert",
            words=vocabulary_of(sentences),
            layers=2,
            d_model=16,
            heads=2,
            max_positions=32,
            seed=1,
        )
        model = ev.load(str(path), name="bert", device="cpu")
        reps = ev.represent(model, sentences, attention=3)
        assert reps["bert"].hidden.dims == ("layer", "token", "feature")
        ev.mi(reps, k=5, restarts=2, bootstrap=5)
        ev.neighbors(reps, k=5, bootstrap=5)
        ev.heads(reps)
        assert "<iframe" in ev.head_view(model, "the cat sat on the mat")._repr_html_()
    blocked = [m for m in ("fairseq", "faiss") if m in sys.modules]
    print(f"python {sys.version.split()[0]}: ok; imported neither fairseq nor faiss: {not blocked}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
