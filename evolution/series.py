"""Checkpoint series: one model family saved over training, as models (``docs/series.md``).

Public checkpoint suites keep a model at many training steps: Pythia as hub revisions
(``step0`` ... ``step143000``), MultiBERTs and most labs as directories of saved checkpoints. A
``models:`` entry with ``revisions: [...]`` (a hub id as ``path``) or ``checkpoints: <glob>`` is
such a series. :func:`expand` turns it into its *members*, ordinary :class:`ModelConfig` entries
named ``<name>@<step>`` and ordered by step, each extracted and cached like any model (its cache
key is its own files' content, so adding a step computes only that step).

The step of a member is the last number in its revision or file name (``step1000``,
``checkpoint-500``, ``checkpoint_3_1200.pt``: 1000, 500, 1200); a name without one (``final``,
``checkpoint_best.pt``) takes the step its checkpoint records: ``global_step`` of the
``trainer_state.json`` that transformers' Trainer writes beside the weights, ``updates`` of a
shipped model's ``model.json``, or ``num_updates`` of a fairseq checkpoint's optimizer history.

The last member is analysed with the config's models (the report, with intervals); the earlier
ones are the trajectory's snapshots (:mod:`evolution.trajectory`).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from evolution.config.models import ModelConfig

__all__ = ["expand", "member_name", "step_of_name", "recorded_step", "same_weights", "SeriesError"]

_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class SeriesError(ValueError):
    """A series that cannot be expanded; the message names the member and the fix."""


def member_name(series: str, step: int) -> str:
    """``<series>@<step>``, the model name of a series' member."""
    return f"{series}@{int(step)}"


def step_of_name(name: str) -> int | None:
    """The last number in ``name`` without its file suffix (``step1000`` -> 1000,
    ``checkpoint_3_1200.pt`` -> 1200); None if it has none."""
    stem = Path(name).name
    for suffix in (".pt", ".safetensors", ".bin"):
        stem = stem.removesuffix(suffix)
    m = _LAST_NUMBER.search(stem)
    return int(m.group(1)) if m else None


def recorded_step(path: str | Path, kind: str) -> int | None:
    """The step a checkpoint records about itself (None if it records none): ``global_step`` of
    ``trainer_state.json`` (Hugging Face), ``updates`` of ``model.json`` (shipped), ``num_updates``
    of the last optimizer-history entry (fairseq; loads the checkpoint on the CPU); per kind in
    :data:`evolution.models.kinds.KINDS`."""
    from evolution.models.kinds import kind_of

    return kind_of(kind).step(Path(path))


def _check_member(path: Path, kind: str, where: str) -> None:
    from evolution.models.kinds import kind_of

    problem = kind_of(kind).check_member(path)
    if problem is not None:
        raise SeriesError(f"{where}: {problem}")


def _members_from_revisions(spec: ModelConfig) -> dict[int, dict]:
    from evolution.models.base import ModelLoadError
    from evolution.models.hub import resolve

    if spec.revisions is None or spec.hub_id is None:
        raise SeriesError(f"model {spec.name!r}: a series of revisions needs 'revisions' and a hub id as 'path'")
    out: dict[int, dict] = {}
    for rev in spec.revisions:
        step = step_of_name(rev)
        where = f"model {spec.name!r}, revision {rev!r}"
        if step is None:
            raise SeriesError(
                f"{where}: no step in the revision's name; name revisions by their step "
                "(Pythia's step1000), or save the checkpoints in directories and use 'checkpoints'"
            )
        if step in out:
            raise SeriesError(f"{where}: step {step} is also revision {out[step]['revision']!r}; keep one of them")
        try:
            path = resolve(spec.hub_id, revision=rev)
        except ModelLoadError as exc:
            raise SeriesError(f"{where} (member {member_name(spec.name, step)}): {exc}") from None
        out[step] = {"path": path, "revision": rev}
    return out


def _members_from_glob(spec: ModelConfig) -> dict[int, dict]:
    if spec.checkpoints is None:
        raise SeriesError(f"model {spec.name!r}: a series of checkpoints needs 'checkpoints', a glob")
    paths = sorted(Path(p) for p in glob.glob(spec.checkpoints))
    if not paths:
        raise SeriesError(
            f"model {spec.name!r}: checkpoints {spec.checkpoints!r} matches nothing; fix the glob "
            "(relative to the config file's directory)"
        )
    out: dict[int, dict] = {}
    for path in paths:
        where = f"model {spec.name!r}, checkpoint {str(path)!r}"
        _check_member(path, spec.kind, where)
        step = step_of_name(path.name)
        if step is None:
            step = recorded_step(path, spec.kind)
        if step is None:
            raise SeriesError(
                f"{where}: neither its name nor its metadata gives a step; rename it with its step "
                "(checkpoint-500) or leave it out of the glob"
            )
        if step in out:
            raise SeriesError(
                f"{where}: step {step} is also {str(out[step]['path'])!r}; keep one of them (narrow the glob)"
            )
        out[step] = {"path": path}
    return out


def expand(spec: ModelConfig) -> list[ModelConfig]:
    """The members of the series ``spec`` (``revisions`` or ``checkpoints``), by ascending step,
    each named ``<name>@<step>`` with ``series`` and ``step`` set (and ``revision`` for a hub
    revision). A single member is refused: a series needs two steps to follow.

    Raises
    ------
    SeriesError
        A revision not in the cache, a glob matching nothing, a step that cannot be read or that
        two members share; the message names the member and the fix.
    """
    if not spec.is_series:
        raise SeriesError(f"model {spec.name!r} is not a series (it has neither 'revisions' nor 'checkpoints')")
    found = _members_from_revisions(spec) if spec.revisions is not None else _members_from_glob(spec)
    if len(found) < 2:
        raise SeriesError(
            f"model {spec.name!r}: a series needs at least two checkpoints, found {len(found)}; "
            "for one model leave out 'revisions'/'checkpoints'"
        )
    base = spec.model_dump(exclude={"name", "revisions", "checkpoints", "path", "series", "step", "revision"})
    return [
        ModelConfig(**{**base, **found[step], "name": member_name(spec.name, step), "series": spec.name, "step": step})
        for step in sorted(found)
    ]


def _weights_digest(m: ModelConfig) -> str:
    """SHA-256 over the names and bytes of a member's weight files (a fairseq checkpoint: the file)."""
    import hashlib

    from evolution.provenance import file_hash

    if m.path is None:
        raise SeriesError(f"member {m.name}: no path to read its weights from")
    path = Path(m.path)
    if path.is_file():
        return file_hash(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt")):
        h.update(f.name.encode())
        h.update(file_hash(f).encode())
    return h.hexdigest()


def same_weights(members: list[ModelConfig]) -> list[list[str]]:
    """Groups (of two or more, by step) of ``members`` whose weight files are byte-identical: two
    steps that are one model. Public suites have served them (EleutherAI/pythia#205: 86 of
    pythia-2.8b's 154 step revisions hold the final checkpoint's weights), and a trajectory through
    them would show training standing still. File hashes are memoised, and the cache keys of the
    extraction hash the same files, so this reads nothing twice."""
    groups: dict[str, list[str]] = {}
    for m in sorted(members, key=lambda m: m.step if m.step is not None else -1):
        groups.setdefault(_weights_digest(m), []).append(m.name)
    return [names for names in groups.values() if len(names) > 1]
