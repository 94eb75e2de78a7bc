"""The notebook runs top to bottom on a real run's output."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import write_config
from nbclient import NotebookClient

from pipelines.run import run

REPO = Path(__file__).resolve().parent.parent


def _execute(name: str) -> list:
    """Run ``notebooks/<name>`` top to bottom; return its code cells' outputs, asserting no error."""
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return outputs


@pytest.mark.slow
def test_notebook_executes(tmp_path, corpus_file, model_specs, monkeypatch):
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=[model_specs["translation"], model_specs["language_modeling"]],
        workdir=tmp_path / "w",
    )
    run(cfg, progress=False)
    monkeypatch.setenv("EVOLUTION_STORE", str(tmp_path / "w" / "reps.zarr"))
    outputs = _execute("representations.ipynb")
    # norm plot, MI, attention map; the head view only without a store
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 3


@pytest.mark.slow
def test_metrics_notebook_draws_every_figure(tmp_path, corpus_file, model_specs, monkeypatch):
    from test_conllu import TREEBANK_SENTENCES, _treebank
    from test_metrics_stage import METRICS

    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        extra=METRICS,
        workdir=tmp_path / "w",
        models=[model_specs["translation"], model_specs["language_modeling"]],
    )
    tb = _treebank(tmp_path / "tb.conllu", TREEBANK_SENTENCES)
    cfg.write_text(cfg.read_text().replace(f"  path: {corpus_file}\n", f"  path: {corpus_file}\n  annotated: {tb}\n"))
    run(cfg, progress=False)
    monkeypatch.setenv("EVOLUTION_METRICS", str(tmp_path / "w" / "metrics.zarr"))
    outputs = _execute("metrics.ipynb")
    # raw MI line plot + MI, neighbours, 2 similarity, change, change by POS, 2 t-SNE grids = 9 figures,
    # + 4 of the heads (entropy, special tokens, head map, roles; no dependency heads without select/score)
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 13


@pytest.mark.slow
def test_notebooks_run_on_committed_results_alone(monkeypatch):
    """A fresh clone: no run has been made, no variable set; the notebooks open the committed
    store and the shipped weights, and the committed copies carry their outputs."""
    monkeypatch.delenv("EVOLUTION_METRICS", raising=False)
    monkeypatch.delenv("EVOLUTION_STORE", raising=False)
    images = {}
    for name in ("metrics.ipynb", "representations.ipynb"):
        committed = nbformat.read(REPO / "notebooks" / name, as_version=4)
        images[name] = sum(
            1 for c in committed.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})
        )
        outputs = _execute(name)
        assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == images[name]
    assert images["representations.ipynb"] == 3 and images["metrics.ipynb"] >= 13
    html = [o for o in outputs if "text/html" in o.get("data", {}) and "head view" in o["data"]["text/html"].lower()]
    assert html, "representations.ipynb shows no head view"
