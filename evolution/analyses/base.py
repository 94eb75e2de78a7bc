"""What an analysis is: the units it schedules, its cache key, its groups and its figures.

An :class:`Analysis` reads the representation store (and, for a few, re-runs
a model) and owns one or more groups of ``metrics.zarr``. It says

* whether the config asks for it (:meth:`Analysis.enabled`);
* its units of work (:meth:`Analysis.units`): each a plain function, its
  keyword arguments and what its result depends on (``Unit.key``);
* how the units' results become its groups (:meth:`Analysis.datasets`);
* its figures (:attr:`Analysis.figures`: name -> (function of the metrics
  store path, caption)).

One rule keys every unit's cached result (:func:`unit_key`): the analysis
name, its ``version`` (bumped when the analysis computes something new), the
unit's name and its ``key`` (the config sections it reads, the extraction
keys of the models it reads, the seed). ``layout`` is bumped when only the
groups built from unchanged unit results change (a derived variable): it
rebuilds ``metrics.zarr`` without recomputing any unit. The runner
(:mod:`evolution.analyses.runner`) knows nothing else about analyses.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import xarray as xr

from evolution.config import MetricsConfig
from evolution.provenance import config_hash

__all__ = [
    "Analysis",
    "Unit",
    "ModelInputs",
    "Inputs",
    "unit_key",
    "save_arrays",
    "load_arrays",
    "save_texts",
    "load_texts",
    "strings",
    "required",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Unit:
    """One task: ``fn(**kwargs)`` returns a JSON-serialisable dict.

    ``name`` is unique within its analysis (e.g. ``mt-3`` for model mt,
    layer 3); ``key`` is what the result depends on beyond the analysis
    (hashed by :func:`unit_key`). ``started``: the unit left a checkpoint in an
    earlier, interrupted run (a pruning unit's directory); the runner computes
    such units before the others, so that a rerun finishes what it began first.
    """

    name: str
    fn: Callable[..., dict]
    kwargs: dict[str, Any]
    key: dict[str, Any]
    started: bool = False


@dataclass
class ModelInputs:
    """One extracted model as the analyses see it (read from the store once per run).

    ``coords`` are the token coordinates (n,) of :mod:`evolution.store`;
    ``primary`` (n,) marks the main text; ``annotation`` maps ``pos`` (PTB
    tag), ``deprel``, ``upos`` to label codes (n,) (None without annotated
    text); ``freq_rank`` (0 off the main text) ranks token types by their count
    in the training split where the store has ``train_rank`` (this project's
    trained models), else in the main text (``frequency`` says which); ``plan`` is the
    :class:`~evolution.metrics.plan.OccurrencePlan` of every metric.
    """

    name: str
    kind: str
    objective: str | None
    key: str  # the extraction key: every result of this model depends on it
    spec: dict[str, Any]  # what evolution.models.load_adapter needs, for analyses that re-run the model
    n_layers: int
    d_model: int
    coords: dict[str, np.ndarray]
    primary: np.ndarray
    annotation: dict[str, np.ndarray] | None
    freq_rank: np.ndarray
    plan: Any
    frequency: str = "analysed text"  # what freq_rank counts: "training split" (train_rank) or "analysed text"
    ranked_types: int = 0  # how many types freq_rank ranks (the ranks a frequency bin can reach)
    stored: tuple[int, ...] | None = None  # the layers extract.layers stored (None: all of 0..n_layers - 1)

    @property
    def layers(self) -> list[int]:
        """The layers whose states the store holds: every one of 0..L unless ``extract.layers``
        chose some (the layer axis keeps its length; the others are never written)."""
        return list(range(self.n_layers)) if self.stored is None else list(self.stored)

    def require_every_layer(self, analysis: str, setting: str | None = None) -> None:
        """Refuse an analysis that reads every layer when ``extract.layers`` stored some only;
        the error names ``setting`` (what turns the analysis off), if there is one."""
        if self.stored is not None:
            off = f"set {setting}: null, or " if setting else ""
            raise ValueError(
                f"{analysis} reads every layer of {self.name}, and its store holds layers "
                f"{list(self.stored)} only (extract.layers); {off}set extract.layers: null and rerun "
                "the extract stage"
            )


@dataclass
class Inputs:
    """Everything the analyses of one run read: the store, its models, the config."""

    store: str
    models: dict[str, ModelInputs]
    config: MetricsConfig
    seed: int
    torch_threads: int
    arrays_dir: str  # where units' index arrays are written for tasks to read (see save_arrays)
    max_batch_tokens: int = 1024  # padded tokens per forward pass, for analyses that re-run a model
    targets: Any = None  # evolution.corpus.layout.Targets: the target side of a parallel corpus, or None
    attrs: dict[str, Any] = field(default_factory=dict)  # provenance attached to every group

    @property
    def names(self) -> list[str]:
        return list(self.models)

    @property
    def max_layers(self) -> int:
        return max(m.n_layers for m in self.models.values())


class Analysis:
    """Base class; see the module docstring. Subclasses set ``name`` and ``version``."""

    name: str = ""
    version: int = 1
    #: bumped when :meth:`datasets` builds different groups from the same unit results
    layout: int = 1
    #: the ``metrics`` config section that switches the analysis on (None: always on)
    section: str | None = None
    #: figure name -> (function of the metrics store path returning a Figure or None, caption)
    figures: dict[str, tuple[Callable[[Any], Any], str]] = {}

    def enabled(self, config: MetricsConfig) -> bool:
        """Whether ``config`` asks for it: its :attr:`section` is not null."""
        return self.section is None or getattr(config, self.section) is not None

    def units(self, inputs: Inputs) -> list[Unit]:
        raise NotImplementedError

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        """``metrics.zarr`` groups from the results of :meth:`units` (by unit name)."""
        raise NotImplementedError

    def tables(self, path) -> list[tuple[str, list[list[str]], str]]:
        """Tables for the report: (heading, rows with a header row first, caption)."""
        return []

    def figures_for(self, path) -> dict[str, tuple[Callable[[Any], Any], str]]:
        """The figures of a written store (default: :attr:`figures`; analyses with one
        group per selection list theirs from the store)."""
        return dict(self.figures)


def unit_key(analysis: Analysis, unit: Unit) -> str:
    """The cache key of ``unit``'s result (the one versioning rule of all analyses)."""
    return config_hash({"analysis": analysis.name, "version": analysis.version, "unit": unit.name, **unit.key})


def save_arrays(directory: str | Path, prefix: str, arrays: dict[str, np.ndarray]) -> str:
    """Write ``arrays`` to ``<directory>/<prefix>-<content hash>.npz`` (once) and return its path.

    Tasks read their index arrays from such a file, as they read the
    representations, so the task graph stays small whatever the corpus size;
    the name is content-addressed, so a file is never stale. ``directory`` may
    be an fsspec URL (:mod:`evolution.location`), for workers on other machines.
    """
    from evolution import location

    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    path = location.join(directory, f"{prefix}-{h.hexdigest()[:16]}.npz")
    if not location.exists(path):
        buffer = io.BytesIO()
        # allow_pickle: numpy's default, named so that no array can take the keyword's place
        np.savez(buffer, allow_pickle=True, **arrays)
        location.write_bytes(path, buffer.getvalue())
    return path


def load_arrays(path: str) -> dict[str, np.ndarray]:
    """The arrays written by :func:`save_arrays`."""
    from evolution import location

    with np.load(io.BytesIO(location.read_bytes(path)), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def save_texts(directory: str | Path, prefix: str, texts: dict[str, str]) -> str:
    """:func:`save_arrays` for texts (UTF-8 bytes, no pickle), for tasks that read a text on
    whichever worker they run; read back with :func:`load_texts`."""
    return save_arrays(
        directory, prefix, {k: np.frombuffer(v.encode("utf-8"), dtype=np.uint8) for k, v in texts.items()}
    )


def load_texts(path: str) -> dict[str, str]:
    """The texts written by :func:`save_texts`."""
    return {k: v.tobytes().decode("utf-8") for k, v in load_arrays(path).items()}


def strings(values) -> np.ndarray:
    """Strings as an object array: xarray stores it as zarr v3's variable-length string type
    (a fixed-width NumPy ``U`` array has no stable zarr v3 encoding)."""
    return np.array(list(values), dtype=object)


def required(section: T | None, name: str) -> T:
    """The config section ``metrics.<name>`` of an analysis that runs only when it is set
    (:meth:`Analysis.enabled`), or a ValueError saying to set it."""
    if section is None:
        raise ValueError(f"metrics.{name} is null: set it to run the analysis that reads it")
    return section
