"""Shared fixtures: tiny randomly initialised models of every family, built locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolution.fixtures.random_init import make_fairseq_model, make_hf_model, vocabulary_of

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran to the cat",
    "the mat was red and the dog was blue",
    "on the mat sat a red cat",
    "the blue dog sat",
    "a cat",
    "the dog ran on and on and on to the red mat",
    "red blue red blue",
] * 3
WORDS = vocabulary_of(SENTENCES)

HF_ARCHS = ["bert", "gpt2", "marian", "t5"]
FAIRSEQ_TASKS = ["translation", "language_modeling", "masked_lm"]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def model_specs(model_dir) -> dict[str, dict]:
    """name -> spec dict (as ModelConfig dumps it) for 4 HF and 3 fairseq models."""
    specs = {}
    for arch in HF_ARCHS:
        path = make_hf_model(
            model_dir / arch, arch=arch, words=WORDS, layers=2, d_model=16, heads=2, max_positions=32, seed=1
        )
        specs[arch] = {
            "name": arch,
            "kind": "huggingface",
            "path": str(path),
            "data": None,
            "sentencepiece": None,
            "objective": None,
        }
    for task in FAIRSEQ_TASKS:
        ckpt, data = make_fairseq_model(
            model_dir / task, task=task, words=WORDS, layers=2, d_model=16, heads=2, max_positions=32, seed=1
        )
        specs[task] = {
            "name": task,
            "kind": "fairseq",
            "path": str(ckpt),
            "data": str(data),
            "sentencepiece": None,
            "objective": None,
        }
    return specs


def _with_pretraining_head(directory: Path, *, arch: str, seed: int) -> Path:
    """Replace the bare model that :func:`make_hf_model` wrote in ``directory`` by the model with
    its pretraining head (BertForMaskedLM / GPT2LMHeadModel), every bias and LayerNorm weight
    random (N(0, 0.5) / U(0.5, 1.5)) instead of 0 / 1, and weights with a wider spread (sd 0.2),
    so that attention is far from uniform and no term of a formula vanishes."""
    import torch
    import transformers as tf
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    config = tf.AutoConfig.from_pretrained(directory)
    config.initializer_range = 0.2
    torch.manual_seed(seed)
    model = (tf.BertForMaskedLM if arch == "bert" else tf.GPT2LMHeadModel)(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "LayerNorm.weight" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def hf_lm_specs(model_dir) -> dict[str, dict]:
    """name -> spec of two tiny Hugging Face models *with* their pretraining head and non-zero
    biases: ``bert_mlm`` (BertForMaskedLM) and ``gpt2_lm`` (GPT2LMHeadModel), 2 layers, d = 16,
    2 heads, the word-level vocabulary of :data:`SENTENCES`."""
    specs = {}
    for name, arch in (("bert_mlm", "bert"), ("gpt2_lm", "gpt2")):
        path = make_hf_model(
            model_dir / name, arch=arch, words=WORDS, layers=2, d_model=16, heads=2, max_positions=32, seed=3
        )
        _with_pretraining_head(path, arch=arch, seed=3)
        specs[name] = {
            "name": name,
            "kind": "huggingface",
            "path": str(path),
            "data": None,
            "sentencepiece": None,
            "objective": None,
        }
    return specs


@pytest.fixture()
def corpus_file(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return path


def write_config(
    path: Path, *, corpus: Path, models: list[dict], workdir: Path, cluster: str = "synchronous", extra: str = ""
) -> Path:
    """A minimal YAML config for the given model specs."""
    lines = [
        f"workdir: {workdir}",
        f"cluster: {cluster}",
        "corpus:",
        f"  path: {corpus}",
        "extract:",
        "  chunk_tokens: 32",
        "  task_chunks: 2",
        "  max_batch_tokens: 64",
        "  attention:",
        "    sentences: 5",
    ]
    lines += [extra] if extra else []
    lines.append("models:")
    for m in models:
        entry = f"  - {{name: {m['name']}, kind: {m['kind']}, path: {m['path']}"
        if m.get("data"):
            entry += f", data: {m['data']}"
        lines.append(entry + "}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """One tiny training of this project's MT, LM, LM with token dropout and MLM (2 layers,
    d = 16, 4 updates each; tests/test_training.py's corpus and config), shared by every module."""
    from test_training import CONFIG, _corpus

    from evolution.config import load_config
    from pipelines.run import main
    from pipelines.stages import Context, TrainStage

    tmp = tmp_path_factory.mktemp("training")
    src, tgt = _corpus(tmp)
    cfg_path = tmp / "train.yaml"
    cfg_path.write_text(CONFIG.format(workdir=tmp / "run", src=src, tgt=tgt), encoding="utf-8")
    assert main([str(cfg_path), "--stage", "extract"]) == 0
    cfg = load_config(cfg_path)
    ctx = Context(config=cfg)
    return {"cfg": cfg, "cfg_path": cfg_path, "paths": TrainStage().paths(ctx), "ctx": ctx}
