"""One result wherever it runs (issue 61): the same small default-like config (two models, MI,
neighbours, similarity, change by frequency, t-SNE) run synchronously in this process and on a
local Dask cluster of two single-threaded worker processes gives ``==`` arrays in every metrics
group. The tcp:// scheduler (tests/test_cluster.py) and Slurm (tests/test_slurm.py) runs are held
to the same equality. The neighbours' part of it is the stated tie rule
(tests/test_neighbors.py, docs/metrics.md "Ties")."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import write_config
from test_metrics_stage import METRICS

from evolution.metrics.results import metrics_groups, open_metrics
from pipelines.run import run


@pytest.mark.slow
def test_synchronous_and_a_local_cluster_give_equal_arrays(tmp_path, corpus_file, model_specs):
    models = [model_specs["translation"], model_specs["language_modeling"]]
    out = {}
    for mode, cluster in (("sync", "synchronous"), ("local", "{kind: local, n_workers: 2, threads_per_worker: 1}")):
        cfg = write_config(
            tmp_path / f"{mode}.yaml", corpus=corpus_file, workdir=tmp_path / mode, extra=METRICS, models=models
        )
        cfg.write_text(cfg.read_text().replace("cluster: synchronous", f"cluster: {cluster}"))
        run(cfg, progress=False)
        out[mode] = tmp_path / mode / "metrics.zarr"
    groups = metrics_groups(out["sync"])
    assert {"mi", "neighbors", "similarity", "change"} <= set(groups), groups
    assert metrics_groups(out["local"]) == groups
    compared = 0
    for g in groups:
        a, b = open_metrics(out["sync"], g).load(), open_metrics(out["local"], g).load()
        assert set(a.data_vars) == set(b.data_vars), g
        for v in a.data_vars:
            x, y = a[v].values, b[v].values
            if x.dtype.kind == "f":
                np.testing.assert_array_equal(x, y, err_msg=f"{g}/{v}")  # NaN where NaN, bit-equal elsewhere
            else:
                assert (x == y).all(), f"{g}/{v}"
            compared += 1
    assert compared > 40
