"""Cache keys name what a result is made of, not where its inputs lie: a copy of the project in
another directory (a clone elsewhere, another machine) finds the same corpus, extraction and
metrics keys, so that its caches and the committed unit results (``metrics.reuse``) apply there;
changing an input's content changes them."""

from __future__ import annotations

import shutil
from pathlib import Path

from evolution.config import load_config

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """
workdir: runs/k
cluster: synchronous
corpus:
  source: parallel
  path: data/corpus.en
  target_path: data/corpus.es
  languages: [en, es]
  split: {valid: 0.1, test: 0.1, block_lines: 20}
models:
  - {name: mt, kind: shipped, path: models/mt}
metrics:
  reuse: [units]
"""


def _project(root: Path) -> Path:
    """A project directory: a config, a parallel corpus and the shipped MT (its vocabulary beside it)."""
    (root / "data").mkdir(parents=True)
    lines = [
        ln
        for ln in (ROOT / "evolution/data/web-genesis.en.txt").read_text(encoding="utf-8").splitlines()
        if 3 <= len(ln.split()) <= 25
    ][:100]
    (root / "data" / "corpus.en").write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    (root / "data" / "corpus.es").write_text("".join(ln[::-1] + "\n" for ln in lines), encoding="utf-8")
    models = ROOT / "results" / "bible-full" / "models"
    (root / "models").mkdir()
    shutil.copytree(models / "mt", root / "models" / "mt")
    for f in models.iterdir():  # the shared vocabulary files beside the model directories
        if f.is_file():
            shutil.copy(f, root / "models" / f.name)
    (root / "units").mkdir()
    (root / "c.yaml").write_text(CONFIG, encoding="utf-8")
    return root / "c.yaml"


def _keys(config: Path) -> dict[str, str]:
    from pipelines.stages import Context, CorpusStage, ExtractStage, MetricsStage

    ctx = Context(config=load_config(config))
    model = ctx.config.models[0]
    return {
        "corpus": CorpusStage().key(ctx),
        "training text": CorpusStage().training_key(ctx),
        "extract": ExtractStage().model_key(ctx, model),
        "metrics": MetricsStage().fingerprint(ctx),
    }


def test_a_copy_of_the_project_elsewhere_has_the_same_keys(tmp_path):
    here = _keys(_project(tmp_path / "a"))
    there = _project(tmp_path / "elsewhere" / "b")
    assert _keys(there) == here
    # the content counts: one changed line of the corpus changes every key
    text = (there.parent / "data" / "corpus.es").read_text(encoding="utf-8").splitlines(keepends=True)
    (there.parent / "data" / "corpus.es").write_text("".join(["changed\n"] + text[1:]), encoding="utf-8")
    changed = _keys(there)
    assert all(changed[k] != here[k] for k in here), changed
    # as do other weights under the same name
    (tmp_path / "a" / "models" / "mt" / "model.json").write_text(
        (tmp_path / "a" / "models" / "mt" / "model.json").read_text(encoding="utf-8").replace("{", '{"x": 1, ', 1),
        encoding="utf-8",
    )
    moved = _keys(tmp_path / "a" / "c.yaml")
    assert moved["extract"] != here["extract"] and moved["corpus"] == here["corpus"]
