"""``models``: what is analysed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from evolution.config.base import _must_exist, _resolve, _Section


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
      ``python -m evolution.models.shipped_format`` (``model.safetensors`` and
      ``model.json``; e.g. ``results/bible-full/models/mt``): a trained model
      loaded without unpickling, its vocabulary found through ``model.json``.

    A **checkpoint series** (``docs/series.md``): ``revisions: [step1000, step2000, ...]`` with a
    hub id as ``path`` (``kind: huggingface``; each revision resolved from the local cache, as a hub
    id is), or ``checkpoints: <glob>`` of directories (``huggingface``, ``shipped``) or files
    (``fairseq``), the step read from each name (the last number in it: ``step1000``,
    ``checkpoint-500``, ``checkpoint_3_1200.pt``) or else from the checkpoint's own metadata. Each
    member becomes a model named ``<name>@<step>`` (:mod:`evolution.series`); the last one is analysed
    as the config's models are, the others by ``metrics.trajectory``.
    """

    added_later = ("update", "revisions", "checkpoints", "series", "step", "revision")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
    kind: Literal["trained", "huggingface", "fairseq", "shipped"]
    run: str | None = Field(None, description="trained: the training run (default: name)")
    update: int | None = Field(
        None,
        ge=1,
        description="trained: the checkpoint kept at this update (train.checkpoints) instead of the final model",
    )
    revisions: list[str] | None = Field(
        None, min_length=1, description="huggingface: a series of hub revisions of ``path`` (a hub id)"
    )
    checkpoints: str | None = Field(
        None, description="a series: a glob of checkpoint directories or files, relative to the config file"
    )
    series: str | None = Field(None, description="set on a series member: the series' name")
    step: int | None = Field(None, ge=0, description="set on a series member: its training step")
    revision: str | None = Field(None, description="set on a series member from ``revisions``: its hub revision")
    hub_id: str | None = Field(
        None,
        description="huggingface: the hub id that ``path`` was given as (set when "
        "loading; ``path`` is then its snapshot in the local cache)",
    )
    path: Path | None = None
    data: Path | None = None
    sentencepiece: Path | None = None
    objective: Literal["mt", "lm", "mlm"] | None = Field(
        None, description="recorded as provenance; inferred from the model when omitted"
    )

    @model_validator(mode="before")
    @classmethod
    def _hub_id(cls, data: Any, info: ValidationInfo) -> Any:
        """``kind: huggingface`` with a ``path`` that is no local directory but looks like a hub id
        (``bert-base-uncased``): resolved through the Hugging Face cache (:mod:`evolution.models.hub`)."""
        if isinstance(data, dict) and data.get("revisions") is not None and data.get("kind") != "huggingface":
            raise ValueError(
                f"model {data.get('name')!r}: 'revisions' are Hugging Face hub revisions (kind: "
                "huggingface); for directories or files of other kinds use 'checkpoints: <glob>'"
            )
        if not isinstance(data, dict) or data.get("kind") != "huggingface" or data.get("hub_id"):
            return data
        from evolution.models.base import ModelLoadError
        from evolution.models.hub import looks_like_hub_id, resolve

        raw = data.get("path")
        if data.get("revisions") is not None:  # a series of hub revisions: resolved per member (evolution.series)
            if data.get("checkpoints") is not None:
                raise ValueError(
                    f"model {data.get('name')!r}: give either 'revisions' (hub revisions) or "
                    "'checkpoints' (a glob), not both"
                )
            if raw is None or not looks_like_hub_id(str(raw)):
                raise ValueError(
                    f"model {data.get('name')!r}: 'revisions' needs a hub id as 'path' "
                    f"(e.g. EleutherAI/pythia-70m), got {raw!r}; for local directories use "
                    "'checkpoints: <glob>'"
                )
            return {**data, "hub_id": str(raw), "path": None}
        if raw is None or Path(str(raw)).is_absolute():
            return data
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

    @field_validator("checkpoints", mode="before")
    @classmethod
    def _glob(cls, v: Any, info: ValidationInfo) -> str | None:
        return None if v is None else str(_resolve(str(v), info))

    @model_validator(mode="after")
    def _kind_fields(self) -> ModelConfig:
        if self.revisions is not None or self.checkpoints is not None:
            return self._series_fields()
        if self.kind == "trained":
            if self.path is not None or self.data is not None or self.sentencepiece is not None:
                raise ValueError(
                    f"model {self.name!r}: a trained model's files come from the train stage; "
                    "remove path/data/sentencepiece (or use kind: fairseq for files of your own)"
                )
            return self
        if self.run is not None or self.update is not None:
            raise ValueError(f"model {self.name!r}: 'run' and 'update' are for kind: trained only")
        if self.path is None:
            raise ValueError(f"model {self.name!r}: kind {self.kind!r} needs 'path'")
        if self.kind == "shipped":
            if not (self.path / "model.json").is_file() or not (self.path / "model.safetensors").is_file():
                raise ValueError(
                    f"model {self.name!r}: a shipped model path must be a directory with "
                    f"model.json and model.safetensors, got {str(self.path)!r}"
                )
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(
                    f"model {self.name!r}: a shipped model names its vocabulary in model.json; "
                    "remove 'data' and 'sentencepiece'"
                )
        elif self.kind == "huggingface":
            if not self.path.is_dir():
                raise ValueError(
                    f"model {self.name!r}: a huggingface model path must be a directory "
                    f"with config.json, got the file {str(self.path)!r}"
                )
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(
                    f"model {self.name!r}: 'data' and 'sentencepiece' are fairseq-only; "
                    "a huggingface directory carries its own tokenizer"
                )
        else:
            if self.path.is_dir():
                raise ValueError(
                    f"model {self.name!r}: a fairseq model path must be a checkpoint "
                    f"file (e.g. checkpoint_best.pt), got the directory {str(self.path)!r}"
                )
            if self.data is None:
                raise ValueError(
                    f"model {self.name!r}: fairseq models need 'data', the directory "
                    "with the dictionary (dict.txt or dict.<lang>.txt) used in training"
                )
        return self

    def _series_fields(self) -> ModelConfig:
        where = f"model {self.name!r}"
        if "@" in self.name:
            raise ValueError(f"{where}: a series' members are named <name>@<step>; give the series a name without '@'")
        if self.revisions is not None and self.checkpoints is not None:
            raise ValueError(f"{where}: give either 'revisions' (hub revisions) or 'checkpoints' (a glob), not both")
        if self.kind == "trained":
            raise ValueError(
                f"{where}: a trained run's checkpoints come from train.checkpoints and "
                "metrics.trajectory; remove 'revisions'/'checkpoints'"
            )
        if self.checkpoints is not None and self.path is not None:
            raise ValueError(f"{where}: with 'checkpoints' each member's path comes from the glob; remove 'path'")
        if self.kind == "fairseq" and self.data is None:
            raise ValueError(f"{where}: fairseq checkpoints need 'data', the directory with the dictionary")
        if len(set(self.revisions or [])) != len(self.revisions or []):
            raise ValueError(f"{where}: a revision is listed twice in 'revisions'")
        return self

    @property
    def is_series(self) -> bool:
        """A series to expand (``revisions`` or ``checkpoints``), not one model."""
        return self.revisions is not None or self.checkpoints is not None

    @property
    def run_name(self) -> str:
        return self.run or self.name
