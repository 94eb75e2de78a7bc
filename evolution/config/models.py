"""``models``: what is analysed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from evolution.config.base import _Section, _must_exist, _resolve


class ModelConfig(_Section):
    """One model to analyse.

    * ``kind: trained``: a model of this config's ``train`` section; ``run``
      names it (default: ``name``), e.g. ``mt``, ``lm-seed1``, ``mlm-tokdrop``;
      ``update`` takes the checkpoint that ``train.checkpoints`` kept at that
      update instead of the final model (the trajectory names it ``mt@200``).
    * ``kind: huggingface``: ``path`` is a local directory with ``config.json``,
      weights and a tokenizer (BERT-like encoders, GPT-2-like decoders, and the
      encoder of Marian/T5-like encoder-decoders), or a hub id (``bert-base-uncased``)
      found in, or downloaded into, the Hugging Face cache (:mod:`evolution.models.hub`;
      ``HF_HUB_OFFLINE=1`` uses the cache alone).
    * ``kind: fairseq``: ``path`` is a checkpoint file of the ``translation``,
      ``language_modeling`` or ``masked_lm`` task (or of this project's
      plugin); ``data`` is the directory holding its ``dict*.txt``;
      ``sentencepiece`` optionally names the subword model applied to raw text
      (otherwise text is split on spaces).
    * ``kind: shipped``: ``path`` is a directory written by
      ``python -m evolution.models.shipped`` (``model.safetensors`` and
      ``model.json``; e.g. ``results/bible-full/models/mt``): a trained model
      loaded without unpickling, its vocabulary found through ``model.json``.
    """

    added_later = ("update",)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
    kind: Literal["trained", "huggingface", "fairseq", "shipped"]
    run: str | None = Field(None, description="trained: the training run (default: name)")
    update: int | None = Field(None, ge=1, description="trained: the checkpoint kept at this update "
                                                       "(train.checkpoints) instead of the final model")
    hub_id: str | None = Field(None, description="huggingface: the hub id that ``path`` was given as (set when "
                                                 "loading; ``path`` is then its snapshot in the local cache)")
    path: Path | None = None
    data: Path | None = None
    sentencepiece: Path | None = None
    objective: Literal["mt", "lm", "mlm"] | None = Field(
        None, description="recorded as provenance; inferred from the model when omitted")

    @model_validator(mode="before")
    @classmethod
    def _hub_id(cls, data: Any, info: ValidationInfo) -> Any:
        """``kind: huggingface`` with a ``path`` that is no local directory but looks like a hub id
        (``bert-base-uncased``): resolved through the Hugging Face cache (:mod:`evolution.models.hub`)."""
        if not isinstance(data, dict) or data.get("kind") != "huggingface" or data.get("hub_id"):
            return data
        raw = data.get("path")
        if raw is None or Path(str(raw)).is_absolute():
            return data
        from evolution.models.base import ModelLoadError
        from evolution.models.hub import looks_like_hub_id, resolve

        if _resolve(raw, info).exists() or not looks_like_hub_id(str(raw)):
            return data
        try:
            local = resolve(str(raw))
        except ModelLoadError as exc:
            raise ValueError(f"model {data.get('name')!r}: {exc}") from None
        return {**data, "hub_id": str(raw), "path": str(local)}

    @field_validator("path", "data", "sentencepiece", mode="before")
    @classmethod
    def _paths(cls, v: Any, info: ValidationInfo) -> Path | None:
        if v is None:
            return None
        return _must_exist(_resolve(v, info), f"models[].{info.field_name}")

    @model_validator(mode="after")
    def _kind_fields(self) -> "ModelConfig":
        if self.kind == "trained":
            if self.path is not None or self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: a trained model's files come from the train stage; "
                                 "remove path/data/sentencepiece (or use kind: fairseq for files of your own)")
            return self
        if self.run is not None or self.update is not None:
            raise ValueError(f"model {self.name!r}: 'run' and 'update' are for kind: trained only")
        if self.path is None:
            raise ValueError(f"model {self.name!r}: kind {self.kind!r} needs 'path'")
        if self.kind == "shipped":
            if not (self.path / "model.json").is_file() or not (self.path / "model.safetensors").is_file():
                raise ValueError(f"model {self.name!r}: a shipped model path must be a directory with "
                                 f"model.json and model.safetensors, got {str(self.path)!r}")
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: a shipped model names its vocabulary in model.json; "
                                 "remove 'data' and 'sentencepiece'")
        elif self.kind == "huggingface":
            if not self.path.is_dir():
                raise ValueError(f"model {self.name!r}: a huggingface model path must be a directory "
                                 f"with config.json, got the file {str(self.path)!r}")
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: 'data' and 'sentencepiece' are fairseq-only; "
                                 "a huggingface directory carries its own tokenizer")
        else:
            if self.path.is_dir():
                raise ValueError(f"model {self.name!r}: a fairseq model path must be a checkpoint "
                                 f"file (e.g. checkpoint_best.pt), got the directory {str(self.path)!r}")
            if self.data is None:
                raise ValueError(f"model {self.name!r}: fairseq models need 'data', the directory "
                                 "with the dictionary (dict.txt or dict.<lang>.txt) used in training")
        return self

    @property
    def run_name(self) -> str:
        return self.run or self.name
