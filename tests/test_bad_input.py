"""Bad input: each case one clear message naming the file, line or key and the fix, exit code
2, and nothing computed before deleted (a marker from an earlier run survives; no cluster or
stage output is started for a config or input that is not good)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from pipelines.run import main


def _fails(tmp_path: Path, config: str, capsys, *expected: str, cluster: bool = False) -> str:
    """Run ``config`` (``{w}`` = the workdir): exit code 2, every ``expected`` string in the
    message, the earlier run's files untouched, no new stage output, and (unless ``cluster``)
    no Dask cluster started."""
    import pipelines.run

    w = tmp_path / "w"
    w.mkdir(exist_ok=True)
    (w / "earlier.txt").write_text("from an earlier run")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(config.format(w=w, tmp=tmp_path), encoding="utf-8")
    capsys.readouterr()
    started, real = [], pipelines.run.dask_client

    def spy(cfg, **kwargs):
        started.append(cfg)
        return real(cfg, **kwargs)

    with mock.patch("pipelines.run.dask_client", spy):
        assert main([str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert cluster or not started, f"a cluster was started before the bad input was found:\n{err}"
    for e in expected:
        assert e in err, f"{e!r} not in:\n{err}"
    assert (w / "earlier.txt").read_text() == "from an earlier run"
    assert not (w / "reps.zarr").exists() and not (w / "metrics.zarr").exists()
    return err


def _text(tmp_path: Path, name: str = "c.txt", content: str = "the cat sat\nthe dog ran\n") -> Path:
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    return p


def test_malformed_yaml_names_file_line_and_column(tmp_path, capsys):
    _fails(
        tmp_path,
        "workdir: {w}\ncorpus:\n  path: [unclosed\nmodels: []\n",
        capsys,
        "bad.yaml:4:7: not valid YAML",
        "check the brackets",
    )


def test_unknown_key_and_wrong_type_name_the_key(tmp_path, model_specs, capsys):
    c = _text(tmp_path)
    bert = model_specs["bert"]["path"]
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}, pth: x}}}}\nmodels: [{{{{name: b, kind: huggingface, "
        f"path: {bert}}}}}]\n",
        capsys,
        "corpus.pth: unknown key",
        "docs/config.md",
    )
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}}}}}\nextract: {{{{chunk_tokens: many}}}}\n"
        f"models: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "extract.chunk_tokens",
        "integer",
    )


def test_missing_and_unreadable_files(tmp_path, model_specs, capsys):
    bert = model_specs["bert"]["path"]
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {tmp_path}/nope.txt}}}}\n"
        f"models: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "nope.txt",
    )
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_non_utf8_and_empty_corpus(tmp_path, model_specs, capsys):
    bert = model_specs["bert"]["path"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat\n\nthe dog \xff\xfe sat\n")
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {bad}}}}}\nmodels: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "bad.txt:3: not UTF-8",
    )
    empty = _text(tmp_path, "empty.txt", "\n  \n\n")
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {empty}}}}}\nmodels: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "empty.txt",
    )


def test_parallel_files_of_different_lengths(tmp_path, model_specs, capsys):
    src = _text(tmp_path, "c.en", "".join(f"sentence {i}\n" for i in range(10)))
    tgt = _text(tmp_path, "c.xx", "".join(f"frase {i}\n" for i in range(9)))
    bert = model_specs["bert"]["path"]
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{source: parallel, path: {src}, target_path: {tgt}}}}}\n"
        f"models: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "c.en",
        "c.xx",
        "10",
        "9",
    )


def test_bad_checkpoints_and_model_directories(tmp_path, model_specs, capsys):
    c = _text(tmp_path)
    spec = model_specs["translation"]
    # a directory, then a truncated file, where a fairseq checkpoint should be
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}}}}}\nmodels: [{{{{name: t, kind: fairseq, "
        f"path: {tmp_path}, data: {spec['data']}}}}}]\n",
        capsys,
        str(tmp_path),
    )
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(Path(spec["path"]).read_bytes()[:2000])
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}}}}}\nmodels: [{{{{name: t, kind: fairseq, "
        f"path: {truncated}, data: {spec['data']}}}}}]\n",
        capsys,
        "cut.pt",
        "not a fairseq checkpoint",
    )
    # a Hugging Face directory without weights
    hf = tmp_path / "hf"
    hf.mkdir()
    src = Path(model_specs["bert"]["path"])
    for f in src.iterdir():
        if "safetensors" not in f.name and not f.name.endswith(".bin"):
            (hf / f.name).write_bytes(f.read_bytes())
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}}}}}\nmodels: [{{{{name: b, kind: huggingface, path: {hf}}}}}]\n",
        capsys,
        str(hf),
        "weights",
    )


def test_foreign_zarr_at_the_store_path_is_not_overwritten(tmp_path, model_specs, capsys):
    import zarr

    c = _text(tmp_path)
    store = tmp_path / "foreign.zarr"
    root = zarr.open_group(store, mode="w")
    root.create_array("data", shape=(3,), dtype="i4")[:] = [1, 2, 3]
    bert = model_specs["bert"]["path"]
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncorpus: {{{{path: {c}}}}}\nextract: {{{{store: {store}}}}}\n"
        f"models: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        str(store),
    )
    assert list(zarr.open_group(store, mode="r")["data"][:]) == [1, 2, 3]


def test_unreachable_scheduler(tmp_path, model_specs, capsys):
    c = _text(tmp_path)
    bert = model_specs["bert"]["path"]
    _fails(
        tmp_path,
        f"workdir: {{w}}\ncluster: tcp://127.0.0.1:9\ncorpus: {{{{path: {c}}}}}\n"
        f"models: [{{{{name: b, kind: huggingface, path: {bert}}}}}]\n",
        capsys,
        "tcp://127.0.0.1:9",
        cluster=True,
    )


def test_full_disk_during_extraction(tmp_path, model_specs, corpus_file, capsys, monkeypatch):
    """The disk fills (ENOSPC, simulated in zarr's local store) while the second model's hidden
    states are written: exit 2 with the path and the fix; the first model stays complete, the
    second is not trusted, and the same command completes it once there is room."""
    import errno

    import numpy as np
    import zarr.storage
    from conftest import write_config

    from evolution.config import load_config
    from evolution.store import group_is_complete, open_representations
    from pipelines.stages import Context
    from pipelines.stages.extract import ExtractStage

    specs = [model_specs["bert"], model_specs["translation"]]
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=specs,
        workdir=tmp_path / "w",
        extra="metrics: {mi: null, neighbors: null, similarity: null, tsne: null, influence: null, heads: null}",
    )
    real, written = zarr.storage.LocalStore.set, []

    async def full_disk(self, key, value):
        if "translation/hidden/c/" in key:
            written.append(key)
            if len(written) > 2:
                raise OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name
        return await real(self, key, value)

    monkeypatch.setattr(zarr.storage.LocalStore, "set", full_disk)
    capsys.readouterr()
    assert main([str(cfg), "--no-progress", "--stage", "extract"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(tmp_path / "w" / "reps.zarr") in err
    assert "rerun the same command" in err
    store = str(tmp_path / "w" / "reps.zarr")
    ctx = Context(config=load_config(cfg))
    keys = {m.name: ExtractStage().model_key(ctx, m) for m in ctx.config.models}
    assert group_is_complete(store, "bert", keys["bert"])
    assert not group_is_complete(store, "translation", keys["translation"])
    bert = open_representations(store, "bert")["hidden"].values

    monkeypatch.setattr(zarr.storage.LocalStore, "set", real)  # room again
    assert main([str(cfg), "--no-progress", "--stage", "extract"]) == 0
    assert "extract: bert cached" in capsys.readouterr().err  # the finished model is not redone
    assert group_is_complete(store, "translation", keys["translation"])
    np.testing.assert_array_equal(open_representations(store, "bert")["hidden"].values, bert)
    # the completed group equals an extraction that never saw a full disk
    ref = write_config(tmp_path / "ref.yaml", corpus=corpus_file, models=specs[1:], workdir=tmp_path / "ref")
    assert main([str(ref), "--no-progress", "--stage", "extract"]) == 0
    np.testing.assert_array_equal(
        open_representations(store, "translation")["hidden"].values,
        open_representations(str(tmp_path / "ref" / "reps.zarr"), "translation")["hidden"].values,
    )
