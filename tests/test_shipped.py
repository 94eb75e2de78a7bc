"""Trained models shipped as safetensors (``kind: shipped``): packed from the tiny training,
loaded without unpickling, and giving the pickled checkpoint's numbers exactly."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch

from evolution.config import load_config
from evolution.models import load_adapter
from evolution.models.base import ModelLoadError
from evolution.models.fairseq import FairseqAdapter
from evolution.models.shipped_fairseq import ShippedAdapter
from evolution.models.shipped_format import pack_training

SENTENCE = "And God said, Let there be light: and there was light."


@pytest.fixture(scope="module")
def shipped(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("shipped") / "models"
    pack_training(trained["paths"].root, out=out)
    return out


def _no_unpickling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a shipped model must load without unpickling")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


@pytest.mark.parametrize("run", ["mt", "lm", "mlm", "lm-tokdrop"])
def test_shipped_model_gives_the_checkpoints_states_and_attention(trained, shipped, run, monkeypatch):
    paths = trained["paths"]
    objective = run.split("-")[0]
    reference = FairseqAdapter(paths.checkpoint(run), data=paths.data(objective), sentencepiece=paths.spm_model)
    with monkeypatch.context() as m:
        _no_unpickling(m)
        model = ShippedAdapter(shipped / run)
    assert (model.objective, model.prefix, model.suffix) == (reference.objective, reference.prefix, reference.suffix)
    tokens = model.tokenize(SENTENCE)
    assert tokens.ids == reference.tokenize(SENTENCE).ids
    inputs = [model.build_input(tokens.ids)]
    h, a = model.forward(inputs, attention=True)
    h_ref, a_ref = reference.forward(inputs, attention=True)
    np.testing.assert_array_equal(h, h_ref)
    np.testing.assert_array_equal(a, a_ref)
    if objective == "mt":
        target = [model.build_decoder_input(model.tokenize_target("Y dijo Dios").ids)]
        for ours, theirs in zip(
            model.forward_decoder(inputs, target), reference.forward_decoder(inputs, target), strict=True
        ):
            np.testing.assert_array_equal(ours, theirs)


def test_tied_embeddings_are_stored_once_and_tied_again(trained, shipped):
    from safetensors import safe_open

    with safe_open(str(shipped / "mt" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    meta = json.loads((shipped / "mt" / "model.json").read_text())
    assert "encoder.embed_tokens.weight" in keys
    assert set(meta["tied"]) == {"decoder.embed_tokens.weight", "decoder.output_projection.weight"}
    assert not set(meta["tied"]) & keys
    model = ShippedAdapter(shipped / "mt")._model
    assert model.decoder.embed_tokens.weight.data_ptr() == model.encoder.embed_tokens.weight.data_ptr()
    assert model.decoder.output_projection.weight.data_ptr() == model.encoder.embed_tokens.weight.data_ptr()


def test_model_json_names_no_path_of_the_training_machine(trained, shipped):
    root = str(trained["paths"].root)
    for meta_path in shipped.glob("*/model.json"):
        text = meta_path.read_text()
        assert root not in text and str(trained["cfg_path"].parent) not in text, meta_path
        meta = json.loads(text)
        assert not meta["vocabulary"].startswith("/")
        assert meta["updates"] == 4
    assert sorted(p.name for p in shipped.iterdir()) == ["lm", "lm-tokdrop", "mlm", "mt", "vocab"]


def test_shipped_directory_moves_with_its_vocabulary(shipped, tmp_path):
    moved = tmp_path / "elsewhere"
    import shutil

    shutil.copytree(shipped, moved)
    a = ShippedAdapter(moved / "mlm")
    b = ShippedAdapter(shipped / "mlm")
    x = [a.build_input(a.tokenize(SENTENCE).ids)]
    np.testing.assert_array_equal(a.forward(x)[0], b.forward(x)[0])
    (moved / "vocab" / "spm.model").unlink()
    with pytest.raises(ModelLoadError, match="spm.model"):
        ShippedAdapter(moved / "mlm")
    with pytest.raises(ModelLoadError, match="model.json"):
        ShippedAdapter(moved / "vocab")


def test_config_kind_shipped(shipped, tmp_path, corpus_file):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"workdir: {tmp_path / 'run'}\ncorpus: {{path: {corpus_file}}}\n"
        f"models:\n  - {{name: mt, kind: shipped, path: {shipped / 'mt'}}}\n",
        encoding="utf-8",
    )
    model = load_config(cfg).models[0]
    adapter = load_adapter(model.model_dump(mode="json"))
    assert adapter.objective == "mt" and adapter.name == "mt"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"workdir: {tmp_path / 'run'}\ncorpus: {{path: {corpus_file}}}\n"
        f"models:\n  - {{name: v, kind: shipped, path: {shipped / 'vocab'}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(Exception, match="model.json and model.safetensors"):
        load_config(bad)


def test_committed_bible_full_models_load_without_unpickling(monkeypatch):
    """The shipped bible-full weights in the repository load from a fresh clone, pickle-free, and
    name no path of the machine that trained them."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models"
    runs = sorted(p.parent.name for p in root.glob("*/model.json"))
    assert "mt" in runs
    for run in runs:
        meta = (root / run / "model.json").read_text()
        assert '"/' not in meta  # no absolute path in any argument
        with monkeypatch.context() as m:
            _no_unpickling(m)
            model = ShippedAdapter(root / run)
        assert model.objective == run.split("-")[0] and model.num_layers == 6 and model.d_model == 128
    mt = ShippedAdapter(root / "mt")
    assert mt.tokenize("In the beginning God created the heavens").pieces[:3] == ["▁In", "▁the", "▁beginning"]


def test_shipped_weights_give_the_stored_states(monkeypatch):
    """The committed weights give the committed results: the hidden states of one analysed sentence
    as the run that made them stored them (results/bible-full/states-sample.*, written by its
    sample_states.py), recomputed from results/bible-full/models without unpickling. Tolerance
    1e-4 for other machines' float kernels (the same machine gives them bit for bit); a model that
    is not the one the states came from (another run, another update) differs by O(1)."""
    import hashlib
    from pathlib import Path

    import evolution.api as ev

    root = Path(__file__).resolve().parents[1] / "results" / "bible-full"
    meta = json.loads((root / "states-sample.json").read_text(encoding="utf-8"))
    stored = np.load(root / "states-sample.npz")
    assert set(meta["store_models"]) >= {"mt", "lm", "mlm"}
    for name, info in meta["store_models"].items():
        directory = root / "models" / info["shipped"]
        digest = hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()
        assert digest == info["weights_sha256"], f"{directory} is not the model whose states were stored"
        with monkeypatch.context() as m:
            _no_unpickling(m)
            model = ev.load(directory, device="cpu")
        reps = ev.represent([model], [meta["text"]])[name]
        np.testing.assert_array_equal(reps.token_id.values, stored[f"{name}.token_id"])
        np.testing.assert_allclose(reps.hidden.values, stored[f"{name}.hidden"], rtol=0, atol=1e-4)


def test_vocabulary_names_no_path_and_segments_as_the_trained_one(trained, shipped):
    """The shipped SentencePiece model drops the file names its trainer recorded (paths of the
    training machine) and segments every line of the corpus exactly as the original."""
    import sentencepiece as spm

    paths = trained["paths"]
    original = paths.spm_model.read_bytes()
    assert str(paths.root).encode() in original  # the trainer recorded its input files
    copy = (shipped / "vocab" / "spm.model").read_bytes()
    assert str(paths.root).encode() not in copy and b"train." not in copy
    a = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    b = spm.SentencePieceProcessor(model_file=str(shipped / "vocab" / "spm.model"))
    lines = [
        t
        for split in ("train", "test")
        for lang in (paths.src, paths.tgt)
        for t in (paths.text / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
    ]
    assert lines and all(a.encode(t) == b.encode(t) for t in lines)
    assert a.get_piece_size() == b.get_piece_size()
    assert [a.get_score(i) for i in range(a.get_piece_size())] == [b.get_score(i) for i in range(b.get_piece_size())]


def test_model_json_records_the_run_and_its_training_text(trained, shipped):
    """run_spec gives what the train section says of each run; the training text's hash is the
    source side of the training split (so frequency ranks can come from it)."""
    from evolution.models.shipped_format import run_spec, training_text_hash
    from evolution.provenance import file_hash

    paths, runs = trained["paths"], trained["cfg"].train.runs(trained["cfg"].seed)
    for name in ("mt", "lm", "mlm", "lm-tokdrop"):
        assert run_spec(shipped / name) == {k: runs[name][k] for k in ("objective", "seed", "token_dropout")}
        assert training_text_hash(shipped / name) == file_hash(paths.text / f"train.{paths.src}")


def test_lm_perplexity_of_shipped_weights_is_fairseqs(trained, shipped):
    """``evaluate.perplexity`` on the shipped LM (no fairseq data directory, no unpickling) equals
    fairseq-validate's perplexity of the checkpoint in eval.json, every predicted token weighted
    alike (the test sentences differ in length, and a mean of sentence means is shown to differ).
    The masked LM's, batched with padding, equals the one-sentence-per-batch computation."""
    from evolution.training import evaluate

    paths = trained["paths"]
    ev = json.loads((paths.root / "eval.json").read_text(encoding="utf-8"))["evaluation"]
    lines = (paths.text / f"test.{paths.src}").read_text(encoding="utf-8").splitlines()
    lm = ShippedAdapter(shipped / "lm")
    ids = [lm.tokenize(t).ids for t in lines]
    assert len({len(x) for x in ids}) > 3
    assert evaluate.perplexity(lm, ids) == pytest.approx(ev["lm"]["ppl"], rel=1e-3)  # fairseq logs 3 decimals
    by_sentence = [evaluate.perplexity(lm, [x]) for x in ids]
    mean_of_means = math.exp(np.mean(np.log(by_sentence)))
    assert mean_of_means != pytest.approx(ev["lm"]["ppl"], rel=1e-3)  # so the weighting is tested
    mlm = ShippedAdapter(shipped / "mlm")
    ids = [mlm.tokenize(t).ids for t in lines]
    batched = evaluate.perplexity(mlm, ids, max_tokens=4096)
    assert batched == pytest.approx(evaluate.perplexity(mlm, ids, max_tokens=1), rel=1e-6)
    assert batched != pytest.approx(evaluate.perplexity(mlm, ids, seed=1), rel=1e-6)  # the seed picks the masks
    with pytest.raises(ValueError, match="translation model"):
        evaluate.perplexity(ShippedAdapter(shipped / "mt"), ids)


def test_shipped_summary_shows_updates_and_only_the_scores_of_these_weights(tmp_path, caplog):
    """The report's "Trained models" table for shipped models: each run's updates and objective
    from model.json, and the test scores of scores.json only where they were computed on the
    same weights (a stale entry, whose weights_sha256 differs, is left out with a warning)."""
    import shutil
    from pathlib import Path

    from evolution.models.shipped_format import shipped_summary
    from evolution.report.tables import training_table

    committed = Path(__file__).resolve().parent.parent / "results" / "bible-full" / "models"
    for name in ("mt", "lm-tokdrop"):
        (tmp_path / name).mkdir()
        shutil.copy(committed / name / "model.json", tmp_path / name / "model.json")
    meta = json.loads((tmp_path / "mt" / "model.json").read_text())
    (tmp_path / "scores.json").write_text(
        json.dumps(
            {
                "mt": {"bleu": 12.345, "chrf": 40.25, "weights_sha256": meta["weights_sha256"]},
                "lm-tokdrop": {"ppl": 43.2, "weights_sha256": "0" * 64},
            }
        )
    )
    summary = shipped_summary({"mt": tmp_path / "mt", "lm-tokdrop": tmp_path / "lm-tokdrop"})
    assert summary["evaluation"] == {"mt": {"bleu": 12.345, "chrf": 40.25}}
    assert "lm-tokdrop are of other weights" in caplog.text
    rows, caption = training_table(summary)
    assert rows[1] == ["mt", "mt", "0", "0", "3800", "", "", "12.35", "40.2"]
    assert rows[2] == ["lm-tokdrop", "lm", "0", "0.1", "4000", "", "", "", ""]
    assert "Shipped weights" in caption and shipped_summary({}) is None


def test_report_of_shipped_models_shows_their_scores_and_redraws_when_they_change(shipped, tmp_path, corpus_file):
    """A run on shipped weights: the report's "Trained models" table has the update count of
    model.json; scores.json written beside the models afterwards makes the report stage pending
    again, and the redrawn table has the new BLEU."""
    from pipelines.run import run
    from pipelines.stages import STAGES, Context

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"workdir: {tmp_path / 'run'}\ncorpus: {{path: {corpus_file}}}\n"
        f"models:\n  - {{name: mt, kind: shipped, path: {shipped / 'mt'}}}\n"
        "metrics: {mi: null, neighbors: null, similarity: null, tsne: null, influence: null, heads: null}\n",
        encoding="utf-8",
    )
    run(cfg, progress=False)
    runs_csv = tmp_path / "run" / "report" / "tab-runs.csv"
    updates = json.loads((shipped / "mt" / "model.json").read_text())["updates"]
    assert runs_csv.read_text().splitlines()[1] == f"mt,mt,0,0,{updates},,,,"
    assert not STAGES["report"].pending(Context(config=load_config(cfg)))
    sha = json.loads((shipped / "mt" / "model.json").read_text())["weights_sha256"]
    (shipped / "scores.json").write_text(json.dumps({"mt": {"bleu": 7.125, "chrf": 30.5, "weights_sha256": sha}}))
    try:
        assert STAGES["report"].pending(Context(config=load_config(cfg)))
        run(cfg, progress=False)
        assert runs_csv.read_text().splitlines()[1] == f"mt,mt,0,0,{updates},,,7.12,30.5"
    finally:
        (shipped / "scores.json").unlink()


@pytest.mark.parametrize("change", ["unexpected", "missing"])
def test_fairseq_route_refuses_weights_that_do_not_fit_naming_the_key(tmp_path, change):
    """The shipped fairseq route (ShippedAdapter, as LRP and pruning load a shipped model) refuses
    weights with a key fairseq's model lacks, or without one it has, naming the key as it stands
    in model.safetensors."""
    import re
    from pathlib import Path

    from safetensors.numpy import load_file, save_file

    source = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models" / "lm"
    meta = json.loads((source / "model.json").read_text(encoding="utf-8"))
    meta["vocabulary"] = str((source / meta["vocabulary"]).resolve())
    (tmp_path / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    weights = load_file(str(source / "model.safetensors"))
    if change == "unexpected":
        key = "decoder.encoder.layers.2.self_attn.extra_proj.weight"
        weights[key] = np.zeros((4, 4), dtype=np.float32)
    else:
        key = "decoder.encoder.layers.2.self_attn.k_proj.bias"
        del weights[key]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=rf"{change} \['{re.escape(key)}'\]"):
        ShippedAdapter(tmp_path)
