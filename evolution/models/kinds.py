"""The model kinds, one entry each: the one place that says, per ``kind`` of a ``models:`` entry,
which adapter loads it, how :func:`evolution.api.load` recognises a path of it, how a checkpoint
series reads a member's step, and what it can do (key masking for token influence; a vocabulary
beside the weights that identifies the model). Everything that used to ask ``kind == ...``
asks :func:`kind_of` instead, so a new kind is one :class:`Kind` in :data:`KINDS`.

=============  =========================  =====================  ==================================
kind           what ``path`` is           adapter                the step it records
=============  =========================  =====================  ==================================
huggingface    a directory, config.json   HuggingFaceAdapter     trainer_state.json ``global_step``
fairseq        a checkpoint file          FairseqAdapter         the optimizer history's last
                                                                 ``num_updates``
shipped        a directory, model.json +  PlainAdapter (plain    model.json ``updates``
               model.safetensors          PyTorch)
trained        a run of the config's      FairseqAdapter, on     (train.checkpoints names them)
               ``train`` section          the run's checkpoint
activations    a representation store     StoredAdapter (serves  none (the API's alone:
               (``group``: the model)     the stored states)     ``ev.from_activations``)
=============  =========================  =====================  ==================================

The config schema (:class:`evolution.config.ModelConfig`) sits below this package and lists the
same names in its ``kind`` field; ``tests/test_model_kinds.py`` holds the two equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path

from evolution.models.base import Adapter, ModelLoadError

__all__ = ["Kind", "KINDS", "kind_of", "infer_kind"]


def _json_value(file: str, key: str) -> Callable[[Path], int | None]:
    def read(path: Path) -> int | None:
        f = path / file
        if not f.is_file():
            return None
        value = json.loads(f.read_text(encoding="utf-8")).get(key)
        return int(value) if value is not None else None

    return read


def _fairseq_updates(path: Path) -> int | None:
    """``num_updates`` of a fairseq checkpoint's last optimizer-history entry (loads it on the CPU)."""
    if not path.is_file():
        return None
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    history = state.get("optimizer_history") or []
    if history and history[-1].get("num_updates") is not None:
        return int(history[-1]["num_updates"])
    return None


def _shipped_vocabulary(path: Path) -> dict[str, Path]:
    from evolution.models.shipped_format import shipped_vocabulary

    return {"vocabulary": shipped_vocabulary(path)}


def _shipped_run(path: Path) -> dict:
    from evolution.models.shipped_format import run_spec

    return run_spec(path)


def _shipped_training_text(path: Path) -> str | None:
    from evolution.models.shipped_format import training_text_hash

    return training_text_hash(path)


@dataclass(frozen=True)
class Kind:
    """One model kind.

    ``adapter``: ``"module:Class"`` of its adapter, whose constructor takes ``path`` and the
    keywords of ``adapter_fields`` (from the spec) plus ``name``, ``objective`` and ``device``.
    ``is_directory`` / ``markers``: a checkpoint of this kind is a directory holding ``markers``
    (or a file); ``member_hint``: what to do when a series member is not. ``step``: the training
    step a checkpoint records about itself. ``supports_key_masking``: the adapter can hide keys
    per block (token influence, Voita et al. 2019 section 5). ``identity_files``: files beside the
    weights whose content is part of what the model is (a shipped model's vocabulary);
    ``training_text``: the SHA-256 of the text it was trained on, where it records one.
    """

    name: str
    adapter: str
    is_directory: bool
    markers: tuple[str, ...] = ()
    adapter_fields: tuple[str, ...] = ()
    member_hint: str = ""
    step: Callable[[Path], int | None] = field(default=lambda path: None)
    supports_key_masking: bool = True
    identity_files: Callable[[Path], dict[str, Path]] = field(default=lambda path: {})
    training_text: Callable[[Path], str | None] | None = None
    #: the training run a checkpoint records about itself (objective, seed, input token dropout),
    #: which the scorecard tells base models from their controls by; None: it records none
    recorded_run: Callable[[Path], dict] | None = None
    #: ``"module:Class"`` of the adapter built from fairseq's classes where ``adapter`` is not one
    #: (LRP relevance and pruning need fairseq's modules; :func:`evolution.models.fairseq_adapter`)
    fairseq_adapter: str | None = None
    #: a kind of the config alone: its files come from the config's train stage, not from a path
    config_only: bool = False
    #: a kind of the API alone, which no ``models:`` entry names and no path is recognised as
    #: (representations from activations: :func:`evolution.api.from_activations`)
    api_only: bool = False

    def recognises(self, path: Path) -> bool:
        """Whether the local ``path`` is a checkpoint of this kind."""
        if self.config_only or self.api_only:
            return False
        if not self.is_directory:
            return path.is_file()
        return path.is_dir() and all((path / m).is_file() for m in self.markers)

    def build(self, spec: dict, *, adapter: str | None = None) -> Adapter:
        """The adapter of ``spec`` (``ModelConfig.model_dump(mode="json")`` plus ``device``), of
        class ``adapter`` (``"module:Class"``; default :attr:`adapter`)."""
        if self.config_only:
            raise ModelLoadError(
                f"model {spec.get('name')!r}: kind {self.name!r} is resolved to its checkpoint by the pipeline's "
                "train stage; load the checkpoint file as kind: fairseq"
            )
        module, name = (adapter or self.adapter).split(":")
        cls = getattr(import_module(module), name)
        extra = {f: spec.get(f) for f in self.adapter_fields}
        return cls(
            spec["path"], **extra, name=spec.get("name"), objective=spec.get("objective"), device=spec.get("device")
        )

    def check_member(self, path: Path) -> str | None:
        """Why ``path`` cannot be a series member of this kind (None: it can)."""
        if not self.is_directory:
            return None if path.is_file() else f"a {self.name} checkpoint is a file, {str(path)!r} is not"
        if not path.is_dir():
            return (
                f"a {self.name} checkpoint is a directory, {str(path)!r} is not; "
                "make the glob match the checkpoint directories"
            )
        missing = [m for m in self.markers if not (path / m).is_file()]
        if missing:
            return f"{str(path)!r} has no {missing[0]}; {self.member_hint}"
        return None


#: Every kind a ``models:`` entry can have, by name.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "shipped",
            adapter="evolution.models.shipped_torch:PlainAdapter",
            is_directory=True,
            markers=("model.json", "model.safetensors"),
            member_hint="python -m evolution.models.shipped_format writes it",
            step=_json_value("model.json", "updates"),
            identity_files=_shipped_vocabulary,
            training_text=_shipped_training_text,
            recorded_run=_shipped_run,
            fairseq_adapter="evolution.models.shipped_fairseq:ShippedAdapter",
        ),
        Kind(
            "huggingface",
            adapter="evolution.models.huggingface:HuggingFaceAdapter",
            is_directory=True,
            markers=("config.json",),
            member_hint="save it with save_pretrained, or narrow the glob to the checkpoint directories",
            step=_json_value("trainer_state.json", "global_step"),
            supports_key_masking=False,
        ),
        Kind(
            "fairseq",
            adapter="evolution.models.fairseq:FairseqAdapter",
            is_directory=False,
            adapter_fields=("data", "sentencepiece"),
            step=_fairseq_updates,
        ),
        Kind(
            "trained",
            adapter="evolution.models.fairseq:FairseqAdapter",
            is_directory=False,
            config_only=True,
        ),
        Kind(
            "activations",
            adapter="evolution.stored_adapter:StoredAdapter",
            is_directory=True,
            adapter_fields=("group",),
            supports_key_masking=False,
            api_only=True,
        ),
    )
}


def kind_of(name: str) -> Kind:
    """The :class:`Kind` called ``name``; a ``ModelLoadError`` naming the known ones otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise ModelLoadError(f"unknown model kind {name!r}; use one of {', '.join(KINDS)}") from None


def infer_kind(path: str | Path) -> str:
    """The kind of a local ``path`` (the first of :data:`KINDS` that recognises it), or
    ``huggingface`` for a hub id; an error naming what each kind needs otherwise."""
    from evolution.models.hub import looks_like_hub_id

    p = Path(path)
    for kind in KINDS.values():
        if kind.recognises(p):
            return kind.name
    if p.is_dir():
        wanted = "; ".join(
            f"{' + '.join(k.markers)} ({k.name})" for k in KINDS.values() if k.is_directory and k.markers
        )
        raise ValueError(f"{p} is a directory that holds none of the files a model directory has: {wanted}")
    if looks_like_hub_id(str(path)):
        return "huggingface"
    raise FileNotFoundError(f"{path}: no such file or directory, and not a Hugging Face hub id")
