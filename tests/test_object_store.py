"""The representation and metrics stores on object storage: ``s3://`` URLs through fsspec,
against an S3-compatible server (moto in server mode) that the test starts on 127.0.0.1.

The run uses a LocalCluster of worker processes, which read the representations and the
metrics tasks' index arrays from the bucket, not from the workdir; credentials and the
endpoint come from the environment only. The numbers equal a run on local stores, and the
secret never reaches the config, the logs or the stores' attributes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from test_cluster import CONFIG, _free_port
from test_training import _corpus

ROOT = Path(__file__).resolve().parents[1]
SECRET = "not-a-real-secret-7f3a"


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """A moto S3 server on 127.0.0.1 and the environment that points fsspec at it."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    port = _free_port()
    log = tmp_path / "moto.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "evolution-test",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import fsspec

    fsspec.config.conf.pop("s3", None)
    deadline = time.time() + 30
    while True:
        try:
            fs = fsspec.filesystem("s3", skip_instance_cache=True)
            fs.mkdir("evolution-test")
            break
        except Exception:  # noqa: BLE001 - the server is still starting
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.3)
    yield fs
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


def _groups(path) -> dict[str, xr.Dataset]:
    from evolution.metrics.results import metrics_groups, open_metrics

    return {g: open_metrics(path, g).load() for g in metrics_groups(path)}


@pytest.mark.slow
def test_stores_on_s3_equal_local_stores(tmp_path, s3_server):
    from pipelines.run import main

    src, tgt = _corpus(tmp_path)
    local = tmp_path / "local.yaml"
    local.write_text(CONFIG.format(workdir=tmp_path / "local", cluster="cluster: synchronous", src=src, tgt=tgt))
    assert main([str(local), "--no-progress"]) == 0
    shutil.copytree(tmp_path / "local" / "train", tmp_path / "s3" / "train")  # the same trained models

    reps, metrics = "s3://evolution-test/run/reps.zarr", "s3://evolution-test/run/metrics.zarr"
    cfg = CONFIG.format(workdir=tmp_path / "s3", cluster="cluster: {kind: local, n_workers: 2}", src=src, tgt=tgt)
    cfg = cfg.replace("extract:\n", f"extract:\n  store: {reps}\n").replace(
        "metrics:\n", f"metrics:\n  store: {metrics}\n"
    )
    remote = tmp_path / "s3.yaml"
    remote.write_text(cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.run", str(remote), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    fs = s3_server
    fs.invalidate_cache()
    # every store lives in the bucket, nothing of them in the workdir
    assert fs.exists("evolution-test/run/reps.zarr/mt/hidden/zarr.json")
    assert fs.exists("evolution-test/run/metrics.zarr/zarr.json")
    # what the metrics tasks read: the occurrence plans, the similarity subsets, the decoder heads' texts
    inputs = {p.rpartition("/")[2].split("-")[0] for p in fs.ls("evolution-test/run/metrics-inputs")}
    assert {"mi", "neighbors", "similarity", "tsne", "heads"} <= inputs, inputs
    workdir = tmp_path / "s3"
    assert not (workdir / "reps.zarr").exists() and not (workdir / "metrics.zarr").exists()
    assert not list(workdir.rglob("*.npz")) and not (workdir / "metrics-inputs").exists()
    assert (workdir / "report" / "report.html").is_file()

    # the same numbers as the local run
    from evolution.store import open_representations

    for model in ("mt", "lm", "mlm"):
        a = open_representations(reps, model)
        b = open_representations(str(tmp_path / "local" / "reps.zarr"), model)
        np.testing.assert_array_equal(a["hidden"].values, b["hidden"].values)
    got, want = _groups(metrics), _groups(tmp_path / "local" / "metrics.zarr")
    assert sorted(got) == sorted(want) and "mi" in got and "influence" in got
    for g in want:
        xr.testing.assert_allclose(got[g], want[g], rtol=1e-5, atol=1e-6)

    # the secret is nowhere: config, resolved config, logs, store attributes
    texts = [
        remote.read_text(),
        (workdir / "config.resolved.yaml").read_text(),
        proc.stderr,
        *(p.read_text() for p in (workdir / "logs").glob("*.log")),
    ]
    attrs = json.dumps([g.attrs for g in got.values()], default=str)
    assert not any(SECRET in t for t in [*texts, attrs])

    # the same command again: everything cached, nothing recomputed
    again = subprocess.run(
        [sys.executable, "-m", "pipelines.run", str(remote), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "to run" not in again.stderr, again.stderr[-3000:]


def test_a_foreign_object_at_the_metrics_store_is_refused(tmp_path, s3_server):
    from evolution.metrics.results import check_metrics_store
    from evolution.store import StoreError, check_store

    fs = s3_server
    fs.pipe("evolution-test/other/notes.txt", b"keep me")
    for check, key in ((check_store, "extract.store"), (check_metrics_store, "metrics.store")):
        with pytest.raises(StoreError, match=key):
            check("s3://evolution-test/other")
    assert fs.cat("evolution-test/other/notes.txt") == b"keep me"
    check_store("s3://evolution-test/nothing-here")  # an empty prefix is a new store
    check_metrics_store("s3://evolution-test/nothing-here")


def test_credentials_in_a_store_url_are_refused(tmp_path):
    from evolution.config import ConfigError, load_config

    src, tgt = _corpus(tmp_path)
    for url in ("s3://AKIAEXAMPLE:hunter2@bucket/reps.zarr", "s3://bucket/reps.zarr?secret=hunter2"):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            CONFIG.format(workdir=tmp_path / "w", cluster="", src=src, tgt=tgt).replace(
                "extract:\n", f"extract:\n  store: '{url}'\n"
            )
        )
        with pytest.raises(ConfigError, match="extract.store: the URL carries credentials") as err:
            load_config(cfg)
        assert "hunter2" not in str(err.value)  # the message does not repeat the secret


def test_locations_keep_urls_intact(tmp_path):
    """``Path`` would fold ``s3://`` into ``s3:/``; URLs keep their protocol, local paths resolve."""
    from evolution import location

    assert location.join("s3://bucket/run/", "metrics.zarr") == "s3://bucket/run/metrics.zarr"
    assert location.inputs_dir("s3://bucket/run/reps.zarr") == "s3://bucket/run/metrics-inputs"
    assert location.inputs_dir(tmp_path / "w" / "reps.zarr") == str(tmp_path / "w" / "metrics-inputs")
    assert location.is_url("gs://b/x") and not location.is_url(tmp_path) and not location.is_url("file:///tmp/x")
    # local files: written whole (no temporary left), read back, listed, removed
    f = location.join(tmp_path / "d", "a.bin")
    location.write_bytes(f, b"\x00\x01")
    assert location.read_bytes(f) == b"\x00\x01" and location.listdir(tmp_path / "d") == ["a.bin"]
    location.remove(tmp_path / "d")
    assert not location.exists(f) and location.listdir(tmp_path / "d") == []


def test_a_metrics_store_overlapping_other_outputs_is_refused(tmp_path):
    """Writing the metrics replaces the whole metrics store: it may not be, hold, or sit inside the
    representation store, nor hold the workdir."""
    from evolution.config import ConfigError, load_config

    src, tgt = _corpus(tmp_path)
    w = tmp_path / "w"
    cases = [
        ("s3://b/run/reps.zarr", "s3://b/run", "extract.store"),
        ("s3://b/run/reps.zarr", "s3://b/run/reps.zarr", "extract.store"),
        ("s3://b/run/reps.zarr", "s3://b/run/metrics-inputs", "the metrics inputs"),
        (None, str(w / "reps.zarr" / "m.zarr"), "extract.store"),
        (None, str(tmp_path), "extract.store"),
    ]
    for reps, metrics, clash in cases:
        cfg = CONFIG.format(workdir=w, cluster="", src=src, tgt=tgt)
        if reps:
            cfg = cfg.replace("extract:\n", f"extract:\n  store: {reps}\n")
        cfg = cfg.replace("metrics:\n", f"metrics:\n  store: {metrics}\n")
        (tmp_path / "c.yaml").write_text(cfg)
        with pytest.raises(ConfigError, match=f"metrics.store {metrics} overlaps {clash}"):
            load_config(tmp_path / "c.yaml")
    # beside each other is fine
    (tmp_path / "c.yaml").write_text(
        CONFIG.format(workdir=w, cluster="", src=src, tgt=tgt)
        .replace("extract:\n", "extract:\n  store: s3://b/run/reps.zarr\n")
        .replace("metrics:\n", "metrics:\n  store: s3://b/run/metrics.zarr\n")
    )
    assert load_config(tmp_path / "c.yaml").metrics.store == "s3://b/run/metrics.zarr"
