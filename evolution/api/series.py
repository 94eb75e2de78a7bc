"""Checkpoint series in the notebook API: :func:`load_series` and :func:`trajectory`, on the
pipeline's code path (:mod:`evolution.series` expands the series as a config's ``models:`` entry;
the snapshots are the ``metrics`` analyses plus the distance to the final member, written as
snapshot stores, and :func:`evolution.trajectory.collect` builds the groups of
``trajectory.zarr`` from them; ``docs/series.md``).

>>> import evolution.api as ev
>>> gpt = ev.load_series("EleutherAI/pythia-70m", revisions=["step1000", "step8000", "step143000"])
>>> bert = ev.load_series("runs/bert", checkpoints="checkpoint-*")          # a directory of checkpoints
>>> traj = ev.trajectory([gpt, bert], sentences)                           # curves, verdicts, roles
>>> ev.plot.trajectory(traj["curves"], "to_final", series="pythia-70m")
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import xarray as xr

from evolution.api.model import Model

__all__ = ["Series", "load_series", "trajectory"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Series:
    """A model saved over training: ``members`` by ascending step, each a :class:`Model` named
    ``<name>@<step>`` (the last is the final model)."""

    name: str
    members: dict[int, Model]

    @property
    def steps(self) -> list[int]:
        return list(self.members)

    @property
    def final(self) -> Model:
        return self.members[self.steps[-1]]

    def __getitem__(self, step: int) -> Model:
        return self.members[step]

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"Series({self.name!r}, steps={self.steps})"


def load_series(
    path: str | Path | None = None,
    *,
    revisions: Sequence[str] | None = None,
    checkpoints: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    data: str | Path | None = None,
    objective: str | None = None,
    device: str = "auto",
) -> Series:
    """A checkpoint series: ``revisions`` of the hub id ``path`` (from the local Hugging Face
    cache, as :func:`evolution.api.load` resolves hub ids), or ``checkpoints``, a glob of
    checkpoint directories or files (relative to ``path`` when given, else to the working
    directory). Each member's step is the last number in its name or, failing that, the step its
    checkpoint records (:mod:`evolution.series`). ``kind`` as in :func:`~evolution.api.load`
    (default: inferred from the first checkpoint)."""
    import glob as globbing

    from pydantic import ValidationError

    from evolution.api.model import infer_kind
    from evolution.config import ConfigError, ModelConfig, resolved_dict
    from evolution.models.device import resolve_device
    from evolution.series import SeriesError, expand
    from evolution.trajectory import member_step

    if (revisions is None) == (checkpoints is None):
        raise ValueError("load_series: give revisions=[...] (hub revisions of path) or checkpoints='<glob>'")
    if checkpoints is not None and path is not None:
        checkpoints = str(Path(path) / checkpoints)
    if kind is None:
        if revisions is not None:
            kind = "huggingface"
        else:
            found = sorted(globbing.glob(str(checkpoints)))
            if not found:
                raise FileNotFoundError(f"load_series: checkpoints {checkpoints!r} matches nothing; fix the glob")
            kind = infer_kind(found[0])
    if name is None:
        source = str(path) if path is not None else str(Path(str(checkpoints)).parent)
        name = source.rstrip("/").rsplit("/", 1)[-1]
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).lstrip("-_.") or "series"
    entry = {
        "name": name,
        "kind": kind,
        "objective": objective,
        **(
            {"path": str(path), "revisions": list(revisions)}
            if revisions is not None
            else {"checkpoints": str(checkpoints)}
        ),
        **({"data": str(data)} if data is not None else {}),
    }
    try:
        spec = ModelConfig.model_validate(entry, context={"base_dir": Path.cwd()})
        members = expand(spec)
    except ValidationError as exc:
        raise ConfigError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    except SeriesError as exc:
        raise ConfigError(str(exc)) from None
    resolve_device(device)
    return Series(
        name=name,
        members={member_step(m): Model(name=m.name, spec={**resolved_dict(m), "device": device}) for m in members},
    )


def trajectory(
    series: Series | Sequence[Series],
    sentences: str | Sequence[str],
    *,
    analyses: Sequence[str] = ("mi", "neighbors", "similarity", "heads"),
    methods: Sequence[str] = ("pwcca", "cka"),
    intervals: bool = False,
    options: dict | None = None,
    tokens: dict | None = None,
    seed: int = 0,
    workdir: str | Path | None = None,
    progress: bool = False,
) -> dict[str, xr.Dataset]:
    """The trajectory of one or several series over ``sentences``: the groups of the pipeline's
    ``trajectory.zarr`` (``curves``, ``verdicts`` and, with ``heads``, ``roles``;
    :func:`evolution.trajectory.collect`), loaded into memory.

    Every member is extracted once; each step where some series has a member (not its last) is a
    snapshot: ``analyses`` on the members at that step (no bootstrap unless ``intervals``), and
    each member's PWCCA / CKA distance to its series' final member (``methods``). The final
    members get ``analyses`` with the bootstrap of ``options`` (per-analysis keyword options, the
    config's ``metrics`` keys: ``{"mi": {"k": 50}}``). ``workdir`` keeps the representations,
    snapshot stores and cache there (default: a temporary directory, removed at the end).
    """
    from pydantic import ValidationError

    from evolution.analyses.runner import run_analyses
    from evolution.api.analyses import analyse, check_similarity, inputs_for, metrics_config
    from evolution.api.represent import represent
    from evolution.config import ConfigError, ModelConfig, TrajectoryConfig
    from evolution.metrics.results import write_metrics
    from evolution.snapshots import run_snapshots
    from evolution.trajectory import Row, collect

    group = [series] if isinstance(series, Series) else list(series)
    if not group or not all(isinstance(s, Series) for s in group):
        raise TypeError("trajectory: pass a Series (ev.load_series(...)) or a list of them")
    if len({s.name for s in group}) != len(group):
        raise ValueError(f"trajectory: two series share a name ({[s.name for s in group]}); load them with name=...")
    options = dict(options or {})
    unknown = sorted(set(options) - set(analyses))
    if unknown:
        raise ValueError(f"trajectory: options for {unknown}, which are not among analyses={list(analyses)}")
    try:
        plan = TrajectoryConfig(analyses=list(analyses), intervals=intervals, methods=list(methods))
    except ValidationError as exc:
        raise ConfigError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    final_sections = {a: options.get(a, {}) for a in analyses}
    final_config = metrics_config(final_sections, tokens=tokens)

    def config_of(m: Model) -> ModelConfig:
        return ModelConfig.model_validate({k: v for k, v in m.spec.items() if k != "device"})

    rows = [
        Row(
            s.name,
            {u: config_of(s[u]) for u in s.steps[:-1]},
            config_of(s.final),
            s.steps[-1],
            s.final.spec.get("objective"),
        )
        for s in group
    ]
    tmp = tempfile.TemporaryDirectory(prefix="evolution-trajectory-") if workdir is None else None
    root = Path(tmp.name) if tmp is not None else Path(str(workdir))
    root.mkdir(parents=True, exist_ok=True)
    try:
        models = [m for s in group for m in s.members.values()]
        reps = represent(models, sentences, store=root / "reps.zarr", progress=progress)
        final_path = root / "metrics.zarr"
        finals = [s.final.name for s in group]
        write_metrics(
            str(final_path),
            analyse(reps, final_sections, models=finals, tokens=tokens, seed=seed, progress=progress),
            fingerprint="api",
        )

        def run(wanted, inputs):
            if any(a.name == "similarity" for a in wanted):
                check_similarity(inputs, inputs.config.similarity)
            return run_analyses(wanted, inputs, cache=reps.cache, progress=progress)

        def write(step, datasets):
            path = root / "trajectory" / f"update-{step}" / "metrics.zarr"
            write_metrics(str(path), datasets, fingerprint="api")
            return path

        # the pipeline's snapshot loop (evolution.snapshots): no bootstrap unless intervals
        snapshots = run_snapshots(
            rows,
            metrics=final_config,
            trajectory=plan,
            inputs=lambda names, config: inputs_for(reps, config, seed=seed, models=names),
            run=run,
            write=write,
        )
        groups = collect(final_path, snapshots, rows=rows)
        return {k: v.load() for k, v in groups.items()}
    finally:
        if tmp is not None:
            tmp.cleanup()
