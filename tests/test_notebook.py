"""The notebook runs top to bottom on a real run's output."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from pipelines.run import run

from conftest import write_config

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_notebook_executes(tmp_path, corpus_file, model_specs, monkeypatch):
    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file,
                       models=[model_specs["translation"], model_specs["language_modeling"]], workdir=tmp_path / "w")
    run(cfg, progress=False)
    monkeypatch.setenv("EVOLUTION_STORE", str(tmp_path / "w" / "reps.zarr"))
    nb = nbformat.read(REPO / "notebooks" / "representations.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 2  # norm plot + attention map


@pytest.mark.slow
def test_metrics_notebook_draws_every_figure(tmp_path, corpus_file, model_specs, monkeypatch):
    from test_metrics_stage import METRICS

    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, extra=METRICS, workdir=tmp_path / "w",
                       models=[model_specs["translation"], model_specs["language_modeling"]])
    run(cfg, progress=False)
    monkeypatch.setenv("EVOLUTION_METRICS", str(tmp_path / "w" / "metrics.zarr"))
    nb = nbformat.read(REPO / "notebooks" / "metrics.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # raw MI line plot + MI, neighbours, 2 similarity, change, 2 t-SNE grids = 8 figures
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 8
