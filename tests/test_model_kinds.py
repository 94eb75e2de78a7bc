"""The model-kind registry (:mod:`evolution.models.kinds`): every place that depends on the kind
asks it, and it agrees with the config schema, the adapters and the files each kind is made of."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from evolution.models.kinds import KINDS, infer_kind, kind_of

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "results" / "bible-full" / "models"


def test_the_config_schema_lists_the_registrys_kinds():
    from evolution.config import ModelConfig

    literal = ModelConfig.model_fields["kind"].annotation
    # every kind but the API's own (representations from activations, which no config names)
    assert set(typing.get_args(literal)) == {k for k, v in KINDS.items() if not v.api_only}
    assert [k for k, v in KINDS.items() if v.api_only] == ["activations"]


def _shipped(root: Path) -> Path:
    d = root / "s"
    d.mkdir()
    (d / "model.json").write_text(json.dumps({"updates": 1234}), encoding="utf-8")
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_a_path_is_recognised_by_the_files_its_kind_is_made_of(tmp_path):
    shipped = _shipped(tmp_path)
    hf = tmp_path / "h"
    hf.mkdir()
    (hf / "config.json").write_text("{}", encoding="utf-8")
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 77}), encoding="utf-8")
    ckpt = tmp_path / "checkpoint_last.pt"
    ckpt.write_bytes(b"")
    half = tmp_path / "half"  # model.json without the weights: not a shipped model
    half.mkdir()
    (half / "model.json").write_text("{}", encoding="utf-8")
    (tmp_path / "b").mkdir()
    both = _shipped(tmp_path / "b")  # a shipped model beside a config.json: shipped, as before
    (both / "config.json").write_text("{}", encoding="utf-8")
    assert infer_kind(shipped) == "shipped" and infer_kind(both) == "shipped"
    assert infer_kind(hf) == "huggingface" and infer_kind(ckpt) == "fairseq"
    assert infer_kind("EleutherAI/pythia-70m") == "huggingface"
    with pytest.raises(ValueError, match=r"model.json \+ model.safetensors \(shipped\).*config.json \(huggingface\)"):
        infer_kind(half)
    with pytest.raises(FileNotFoundError):
        infer_kind(tmp_path / "missing" / "x.pt")
    # the step each checkpoint records, read per kind
    assert kind_of("shipped").step(shipped) == 1234 and kind_of("huggingface").step(hf) == 77
    assert kind_of("huggingface").step(shipped) is None
    # a series member of the wrong shape names the file it lacks
    assert "config.json" in kind_of("huggingface").check_member(shipped)
    assert "is a file" in kind_of("fairseq").check_member(hf)
    assert kind_of("shipped").check_member(shipped) is None


def test_an_unknown_kind_names_the_known_ones():
    from evolution.models import ModelLoadError, load_adapter

    with pytest.raises(ModelLoadError, match="use one of shipped, huggingface, fairseq, trained"):
        load_adapter({"kind": "onnx", "path": "x"})
    with pytest.raises(ModelLoadError, match="train stage"):
        load_adapter({"kind": "trained", "name": "mt", "path": None})


def test_the_registrys_capabilities_are_the_adapters():
    """Key masking (token influence) as the adapters report it: the shipped models' plain-PyTorch
    adapter has it, a Hugging Face model does not; the shipped model records its run and its
    vocabulary is part of what it is."""
    from evolution.models import load_adapter

    mt = {"kind": "shipped", "name": "mt", "path": str(SHIPPED / "mt"), "device": "cpu"}
    shipped = load_adapter(mt)
    assert shipped.supports_key_masking is kind_of("shipped").supports_key_masking is True
    assert type(shipped).__name__ == "PlainAdapter"
    assert kind_of("shipped").recorded_run(SHIPPED / "mt")["objective"] == "mt"
    assert set(kind_of("shipped").identity_files(SHIPPED / "mt")) == {"vocabulary"}
    assert kind_of("huggingface").recorded_run is None and kind_of("huggingface").identity_files(SHIPPED) == {}


@pytest.mark.parametrize("kind", ["huggingface"])
def test_a_huggingface_model_cannot_hide_keys(tmp_path, kind):
    from evolution.fixtures.random_init import make_hf_model
    from evolution.models import load_adapter

    path = make_hf_model(tmp_path / "bert", arch="bert", words=["a", "b", "c"], seed=0)
    adapter = load_adapter({"kind": kind, "name": "bert", "path": str(path), "device": "cpu"})
    assert adapter.supports_key_masking is kind_of(kind).supports_key_masking is False
