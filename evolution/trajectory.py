"""The trajectory over training: when each finding first appears (``docs/trajectory.md``).

Voita et al. (2019) analysed converged models only. With ``train.checkpoints`` each run keeps
its model at log-spaced updates; ``metrics.trajectory`` repeats the cheap analyses (MI,
neighbours, similarity between objectives, head statistics) on the checkpoints of each
objective's base model, with the run's own ``metrics`` settings, and measures each
checkpoint's distance to its final model. One checkpoint is one *snapshot*, a
``metrics.zarr`` of its own, so the scorecard of :mod:`evolution.report.scorecard` rules on it
unchanged. Snapshots are computed one checkpoint at a time and cached like every analysis: a
new checkpoint computes only itself.

Layout under the workdir::

    trajectory/update-<U>/metrics.zarr   the snapshot at update U (groups as metrics.zarr, plus to_final)
    trajectory.zarr                      curves (objective, checkpoint, layer) and verdicts (claim, snapshot)

:func:`collect` builds ``trajectory.zarr`` from the snapshots and the final ``metrics.zarr``;
:func:`first_holds` reads a row of verdicts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from evolution.config import ModelConfig, TrainConfig

logger = logging.getLogger(__name__)

__all__ = [
    "Row",
    "base_runs",
    "trained_rows",
    "series_rows",
    "checkpoint_models",
    "final_of",
    "first_holds",
    "member_step",
    "head_roles",
    "collect",
    "FINAL",
]

#: the label of the final models' snapshot (the run's own ``metrics.zarr``)
FINAL = "final"


@dataclass(frozen=True)
class Row:
    """One row of the trajectory: a trained run's kept checkpoints (``label``: its objective) or a
    checkpoint series (``label``: the series' name). ``members``: ``step -> model`` of the
    snapshots; ``final``: the model the report analyses, at step ``final_step``."""

    label: str
    members: dict[int, ModelConfig]
    final: ModelConfig
    final_step: int
    objective: str | None = None


def base_runs(train: TrainConfig, seed: int) -> dict[str, str]:
    """``objective -> run name`` of each objective's base run (the config's seed, no token dropout)."""
    return {
        spec["objective"]: name
        for name, spec in train.runs(seed).items()
        if spec["seed"] == seed and spec["token_dropout"] == 0.0
    }


def trained_rows(train: TrainConfig | None, seed: int, models: Sequence[ModelConfig] = ()) -> list[Row]:
    """The rows of the base runs' kept checkpoints (``train.checkpoints``), named ``<run>@<update>``
    (``kind: trained`` with ``update``); the final model is the config's entry for the run where
    ``models`` lists one."""
    if train is None or train.checkpoints is None:
        return []
    listed = {m.run_name: m for m in models if m.kind == "trained" and m.update is None}
    rows = []
    for objective, run in base_runs(train, seed).items():
        members = {
            u: ModelConfig(name=f"{run}@{u}", kind="trained", run=run, update=u) for u in train.kept_updates(objective)
        }
        rows.append(
            Row(
                objective,
                members,
                listed.get(run, ModelConfig(name=run, kind="trained")),
                getattr(train.updates, objective),
                objective,
            )
        )
    return rows


def series_rows(series: dict[str, list[ModelConfig]]) -> list[Row]:
    """The rows of checkpoint series (:mod:`evolution.series`): every member but the last is a
    snapshot's; the last is the final model."""
    return [
        Row(
            name,
            {member_step(m): m for m in members[:-1]},
            members[-1],
            member_step(members[-1]),
            members[-1].objective,
        )
        for name, members in series.items()
    ]


def member_step(member: ModelConfig) -> int:
    """The training step of a series member (:func:`evolution.series.expand` sets it)."""
    if member.step is None:
        raise ValueError(f"series member {member.name} has no step (evolution.series.expand sets it)")
    return member.step


def checkpoint_models(rows: Sequence[Row]) -> dict[int, list[ModelConfig]]:
    """``step -> models`` of every snapshot, by ascending step. A step that only some rows have
    (their totals or saving schedules differ) has only those."""
    out: dict[int, list[ModelConfig]] = {}
    for row in rows:
        for u, m in row.members.items():
            out.setdefault(u, []).append(m)
    return dict(sorted(out.items()))


def final_of(rows: Sequence[Row]) -> dict[str, ModelConfig]:
    """``member name -> the final model of its row``: what each snapshot model is compared with."""
    return {m.name: r.final for r in rows for m in r.members.values()}


def first_holds(verdicts: Sequence[str], updates: Sequence[int]) -> tuple[int | None, int | None]:
    """``(first, since)`` of one claim over snapshots in training order: the first update whose
    verdict is "holds", and the update from which it holds at every later snapshot (None: never;
    a snapshot where the claim is not measurable breaks neither)."""
    from evolution.report.scorecard import FAILS, HOLDS

    first = next((u for v, u in zip(verdicts, updates, strict=True) if v == HOLDS), None)
    since = None
    for v, u in zip(verdicts, updates, strict=True):
        if v == FAILS:
            since = None
        elif v == HOLDS and since is None:
            since = u
    return first, since


#: the head roles followed over steps (the ``heads`` group's flags, as the pruning figures count them)
ROLES = ("positional", "syntactic", "rare_token")


def head_roles(flags: Sequence[np.ndarray | None], steps: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """When each head takes a role, and whether it keeps it. ``flags``: per step (ascending), a
    (role, layer, head) bool array, or None where the step was not analysed (breaks nothing).
    Returns ``first`` (role, layer, head): the first step with the flag (-1: never), and ``kept``:
    the flag holds at every analysed step from ``first`` on (False where never taken)."""
    known = [(f, u) for f, u in zip(flags, steps, strict=True) if f is not None]
    if not known:
        raise ValueError("head_roles: no step has head flags")
    stack = np.stack([f for f, _ in known])  # (step, role, layer, head)
    has = stack.any(axis=0)
    first_index = np.argmax(stack, axis=0)
    first = np.where(has, np.asarray([u for _, u in known])[first_index], -1)
    after = np.arange(len(known))[:, None, None, None] >= first_index[None]
    kept = has & np.all(stack | ~after, axis=0)
    return first, kept


def _curve(ds: xr.Dataset | None, model: str, fn) -> np.ndarray | None:
    if ds is None or model not in ds["model"].values:
        return None
    return np.asarray(fn(ds.sel(model=model)), dtype=float)


def _between(ds: xr.Dataset | None, a: str, b: str, methods: list[str]) -> np.ndarray | None:
    """(metric, layer) distance between models ``a`` and ``b`` at the same layer (either order)."""
    if ds is None or "same_layer" not in ds:
        return None
    names = set(ds["model_a"].values) & set(ds["model_b"].values)
    if a not in names or b not in names:
        return None
    d = ds["same_layer"].reindex(metric=methods)
    return np.fmax(d.sel(model_a=a, model_b=b).values, d.sel(model_a=b, model_b=a).values)


def collect(final: str | Path, snapshots: Mapping[int, str | Path], *, rows: Sequence[Row]) -> dict[str, xr.Dataset]:
    """The groups of ``trajectory.zarr`` from the snapshot stores (``step -> metrics.zarr``) and the
    final models' store ``final``, for ``rows`` (:func:`trained_rows`, :func:`series_rows`).

    ``curves`` (series, checkpoint, layer): ``mi_input`` (MI with the input token as a fraction of
    H(X), mean over k-means restarts), ``same_token`` (the kNN same-token rate), ``to_final``
    (metric, ...; 0 at the final model by definition); NaN where a row has no checkpoint.
    ``between`` (metric, pair, checkpoint, layer): the distance between two rows' models at the
    same step and layer (the snapshot's similarity; at the final models, the report's), NaN where
    either lacks the step. ``verdicts`` (claim, snapshot): the scorecard of each snapshot, with the
    snapshot's ``update`` (the final snapshot's is the largest final step), and ``first`` /
    ``since`` per claim (:func:`first_holds`; -1: never). ``roles`` (series, role, layer, head),
    where the snapshots have head statistics: ``first`` and ``kept`` (:func:`head_roles`).
    """
    from itertools import combinations

    from evolution.analyses.base import strings
    from evolution.analyses.heads.pruning_figures import head_role_flags
    from evolution.analyses.plotting import open_group
    from evolution.report.scorecard import scorecard

    labels = [r.label for r in rows]
    updates = sorted(set(snapshots) | {r.final_step for r in rows})
    stores: dict[int | str, str] = {**{u: str(p) for u, p in snapshots.items()}, FINAL: str(final)}
    groups = {
        key: {g: open_group(path, g) for g in ("mi", "neighbors", "to_final", "similarity", "heads")}
        for key, path in stores.items()
    }
    layers = max(
        [
            0,
            *(
                ds.sizes.get("layer", 0)
                for g in groups.values()
                for name, ds in g.items()
                if ds is not None and name != "heads"
            ),
        ]
    )

    def where(row: Row):  # (store key, step, model name) of every model of a row, by step
        out = [(u, u, m.name) for u, m in sorted(row.members.items()) if u in stores]
        return out + [(FINAL, row.final_step, row.final.name)]

    # the objective each final model was analysed under (the store's provenance), where a row does not say
    recorded = next((dict(ds.attrs.get("objectives") or {}) for ds in groups[FINAL].values() if ds is not None), {})
    methods = ["pwcca", "cka"]
    mi = np.full((len(rows), len(updates), layers), np.nan)
    same = np.full_like(mi, np.nan)
    mi_iv, same_iv = np.full((*mi.shape, 2), np.nan), np.full((*mi.shape, 2), np.nan)
    dist = np.full((len(methods), *mi.shape), np.nan)
    # (group, variable, its curve, where it goes): a value per layer, or its interval per layer and bound
    read = (
        ("mi", "mi_mean", lambda d, v: (d[v] / d["entropy"]).sel(target="input"), mi),
        ("mi", "mi_mean_interval", lambda d, v: (d[v] / d["entropy"]).sel(target="input"), mi_iv),
        ("neighbors", "value", lambda d, v: d[v].sel(measure="same_token"), same),
        ("neighbors", "interval", lambda d, v: d[v].sel(measure="same_token"), same_iv),
    )
    for o, row in enumerate(rows):
        for key, u, model in where(row):
            t, g = updates.index(u), groups[key]
            for group, var, pick, out in read:
                ds = g[group]
                if ds is not None and var in ds:
                    c = _curve(ds, model, lambda d, pick=pick, var=var: pick(d, var))
                    if c is not None:
                        out[o, t, : len(c)] = c
            if key != FINAL:  # the final model's own distance: 0 at its layers, set below
                d = _curve(g["to_final"], model, lambda d: d["distance"].reindex(metric=methods))
                if d is not None:
                    dist[:, o, t, : d.shape[1]] = d
    for o, row in enumerate(rows):  # the final model's distance to itself: 0 at the layers it has
        own = (
            np.isfinite(dist[:, o]).any(axis=(0, 1)) | np.isfinite(mi[o]).any(axis=0) | np.isfinite(same[o]).any(axis=0)
        )
        dist[:, o, updates.index(row.final_step), own] = 0.0
    pairs = list(combinations(range(len(rows)), 2))
    between = np.full((len(methods), len(pairs), len(updates), layers), np.nan)
    for p, (i, j) in enumerate(pairs):
        at_j = {u: (key, model) for key, u, model in where(rows[j])}
        for key, u, model in where(rows[i]):
            if u in at_j and at_j[u][0] == key:
                d = _between(groups[key]["similarity"], model, at_j[u][1], methods)
                if d is not None:
                    between[:, p, updates.index(u), : d.shape[1]] = d
    curves = xr.Dataset(
        {
            "mi_input": (("series", "checkpoint", "layer"), mi, {"long_name": "MI with the input token / H(X)"}),
            "same_token": (("series", "checkpoint", "layer"), same, {"long_name": "kNN same-token rate"}),
            "to_final": (
                ("metric", "series", "checkpoint", "layer"),
                dist,
                {"long_name": "distance to the same layer of the final model"},
            ),
            "mi_input_interval": (
                ("series", "checkpoint", "layer", "bound"),
                mi_iv,
                {"long_name": "95% bootstrap interval of mi_input (NaN: not computed)"},
            ),
            "same_token_interval": (
                ("series", "checkpoint", "layer", "bound"),
                same_iv,
                {"long_name": "95% bootstrap interval of same_token (NaN: not computed)"},
            ),
            "between": (
                ("metric", "pair", "checkpoint", "layer"),
                between,
                {"long_name": "distance between two series' models at the same step and layer"},
            ),
        },
        coords={
            "series": strings(labels),
            "checkpoint": np.array(updates),
            "layer": np.arange(layers),
            "metric": strings(methods),
            "bound": strings(["low", "high"]),
            "pair": strings(f"{labels[i]} | {labels[j]}" for i, j in pairs),
            "objective": ("series", strings(r.objective or recorded.get(r.final.name, "") for r in rows)),
            "final_model": ("series", strings(r.final.name for r in rows)),
            "final_update": ("series", [r.final_step for r in rows]),
        },
    )
    snap_labels = [str(u) for u in snapshots] + [FINAL]
    cards = {str(u): scorecard(p) for u, p in snapshots.items()}
    cards[FINAL] = scorecard(final)
    claims = [f.label for f in cards[FINAL]]
    verdict = np.array(
        [[next((f.verdict for f in cards[s] if f.label == c), "") for s in snap_labels] for c in claims], dtype=object
    ).reshape(len(claims), len(snap_labels))
    snapshot_updates = [*snapshots, max(r.final_step for r in rows)]
    first, since = (
        zip(*(first_holds(list(row), snapshot_updates) for row in verdict), strict=True) if claims else ((), ())
    )
    verdicts = xr.Dataset(
        {
            "verdict": (("claim", "snapshot"), verdict),
            "first": (
                "claim",
                np.array([-1 if f is None else f for f in first], dtype=int),
                {"long_name": "first update at which the claim holds (-1: never)"},
            ),
            "since": (
                "claim",
                np.array([-1 if s is None else s for s in since], dtype=int),
                {"long_name": "update from which the claim holds at every later snapshot (-1: never)"},
            ),
        },
        coords={
            "claim": strings(claims),
            "snapshot": strings(snap_labels),
            "update": ("snapshot", np.array(snapshot_updates)),
        },
    )
    result = {"curves": curves, "verdicts": verdicts}
    roles = _roles(rows, groups, where, head_role_flags)
    if roles is not None:
        result["roles"] = roles
    return result


def _roles(rows, groups, where, flags_of) -> xr.Dataset | None:
    """The ``roles`` group of :func:`collect` (None where no snapshot has head statistics)."""
    from evolution.analyses.base import strings

    per_row = []
    for row in rows:
        flags, steps = [], []
        for key, u, model in where(row):
            heads = groups[key]["heads"]
            ok = heads is not None and model in heads["model"].values
            flags.append(np.stack(flags_of(heads, model)) if ok else None)
            steps.append(u)
        per_row.append(head_roles(flags, steps) if any(f is not None for f in flags) else None)
    if all(r is None for r in per_row):
        return None
    L = max(r[0].shape[1] for r in per_row if r is not None)
    H = max(r[0].shape[2] for r in per_row if r is not None)
    first = np.full((len(rows), len(ROLES), L, H), -1, dtype=int)
    kept = np.zeros(first.shape, dtype=bool)
    for o, r in enumerate(per_row):
        if r is not None:
            first[o, :, : r[0].shape[1], : r[0].shape[2]] = r[0]
            kept[o, :, : r[1].shape[1], : r[1].shape[2]] = r[1]
    return xr.Dataset(
        {
            "first": (
                ("series", "role", "layer", "head"),
                first,
                {"long_name": "first step at which the head has the role (-1: never)"},
            ),
            "kept": (
                ("series", "role", "layer", "head"),
                kept,
                {"long_name": "the head has the role at every analysed step from its first on"},
            ),
        },
        coords={
            "series": strings(r.label for r in rows),
            "role": strings(ROLES),
            "layer": np.arange(L),
            "head": np.arange(H),
        },
    )
