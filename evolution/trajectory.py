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
from pathlib import Path
from typing import Sequence

import numpy as np
import xarray as xr

from evolution.config import MetricsConfig, ModelConfig, TrainConfig, TrajectoryConfig

logger = logging.getLogger(__name__)

__all__ = ["base_runs", "checkpoint_models", "snapshot_config", "first_holds", "collect", "FINAL"]

#: the label of the final models' snapshot (the run's own ``metrics.zarr``)
FINAL = "final"


def base_runs(train: TrainConfig, seed: int) -> dict[str, str]:
    """``objective -> run name`` of each objective's base run (the config's seed, no token dropout)."""
    return {spec["objective"]: name for name, spec in train.runs(seed).items()
            if spec["seed"] == seed and spec["token_dropout"] == 0.0}


def checkpoint_models(train: TrainConfig, seed: int) -> dict[int, list[ModelConfig]]:
    """``update -> models`` of every kept checkpoint of the base runs, named ``<run>@<update>``
    (``kind: trained`` with ``update``), by ascending update. An update that only some runs keep
    (their totals differ) has only those."""
    out: dict[int, list[ModelConfig]] = {}
    for objective, run in base_runs(train, seed).items():
        for u in train.kept_updates(objective):
            out.setdefault(u, []).append(ModelConfig(name=f"{run}@{u}", kind="trained", run=run, update=u))
    return dict(sorted(out.items()))


def snapshot_config(metrics: MetricsConfig, trajectory: TrajectoryConfig) -> MetricsConfig:
    """The ``metrics`` section of one snapshot: the analyses of ``trajectory.analyses`` with the
    run's settings, every other one off, and no bootstrap unless ``trajectory.intervals``."""
    off = {s: None for s in ("mi", "neighbors", "similarity", "tsne", "influence", "heads", "importance", "probes",
                             "pruning") if s not in trajectory.analyses}
    out = metrics.model_copy(update={**off, "trajectory": None, "store": None})
    if not trajectory.intervals:
        for section in ("mi", "neighbors", "similarity"):
            cfg = getattr(out, section)
            if cfg is not None:
                out = out.model_copy(update={section: cfg.model_copy(update={"bootstrap": 0})})
    return out


def first_holds(verdicts: Sequence[str], updates: Sequence[int]) -> tuple[int | None, int | None]:
    """``(first, since)`` of one claim over snapshots in training order: the first update whose
    verdict is "holds", and the update from which it holds at every later snapshot (None: never;
    a snapshot where the claim is not measurable breaks neither)."""
    from evolution.report.scorecard import FAILS, HOLDS

    first = next((u for v, u in zip(verdicts, updates) if v == HOLDS), None)
    since = None
    for v, u in zip(verdicts, updates):
        if v == FAILS:
            since = None
        elif v == HOLDS and since is None:
            since = u
    return first, since


def _curve(ds: xr.Dataset | None, model: str, fn) -> np.ndarray | None:
    if ds is None or model not in ds["model"].values:
        return None
    return np.asarray(fn(ds.sel(model=model)), dtype=float)


def collect(final: str | Path, snapshots: dict[int, str | Path], *, runs: dict[str, str], finals: dict[str, str],
            totals: dict[str, int]) -> dict[str, xr.Dataset]:
    """The groups of ``trajectory.zarr`` from the snapshot stores (``update -> metrics.zarr``) and
    the final models' ``final`` store. ``runs``: ``objective -> base run`` (its checkpoints are
    ``<run>@<update>``); ``finals``: ``objective ->`` its final model's name in ``final``;
    ``totals``: ``objective -> the run's updates`` (where its final model sits on the
    ``checkpoint`` axis).

    ``curves`` (objective, checkpoint, layer): ``mi_input`` (MI with the input token as a
    fraction of H(X), mean over k-means restarts), ``same_token`` (the kNN same-token rate),
    ``to_final`` (metric, ...; 0 at the final model by definition); NaN where an objective has no
    checkpoint. ``verdicts`` (claim, snapshot): the scorecard of each snapshot, with the
    snapshot's ``update`` (the final snapshot's is the largest total), and ``first`` /
    ``since`` per claim (:func:`first_holds`; -1: never).
    """
    from evolution.analyses.base import strings
    from evolution.analyses.plotting import open_group
    from evolution.report.scorecard import scorecard

    objectives = list(runs)
    updates = sorted(set(snapshots) | set(totals.values()))
    stores = {**{u: str(p) for u, p in snapshots.items()}, FINAL: str(final)}
    layers = 0
    groups: dict = {}
    for key, path in stores.items():
        groups[key] = {g: open_group(path, g) for g in ("mi", "neighbors", "to_final")}
        for ds in groups[key].values():
            if ds is not None:
                layers = max(layers, ds.sizes.get("layer", 0))
    methods = ["pwcca", "cka"]
    mi = np.full((len(objectives), len(updates), layers), np.nan)
    same = np.full_like(mi, np.nan)
    dist = np.full((len(methods), *mi.shape), np.nan)
    for o, objective in enumerate(objectives):
        run = runs[objective]
        for key in stores:
            u = totals[objective] if key == FINAL else key
            model = finals[objective] if key == FINAL else f"{run}@{u}"
            t = updates.index(u)
            g = groups[key]
            m = _curve(g["mi"], model, lambda d: (d["mi_mean"] / d["entropy"]).sel(target="input"))
            if m is not None:
                mi[o, t, :len(m)] = m
            s = _curve(g["neighbors"], model, lambda d: d["value"].sel(measure="same_token"))
            if s is not None:
                same[o, t, :len(s)] = s
            if key == FINAL:
                dist[:, o, t, :] = 0.0
            else:
                d = _curve(g["to_final"], model, lambda d: d["distance"].reindex(metric=methods))
                if d is not None:
                    dist[:, o, t, :d.shape[1]] = d
    curves = xr.Dataset(
        {"mi_input": (("objective", "checkpoint", "layer"), mi, {"long_name": "MI with the input token / H(X)"}),
         "same_token": (("objective", "checkpoint", "layer"), same, {"long_name": "kNN same-token rate"}),
         "to_final": (("metric", "objective", "checkpoint", "layer"), dist,
                      {"long_name": "distance to the same layer of the final model"})},
        coords={"objective": strings(objectives), "checkpoint": np.array(updates), "layer": np.arange(layers),
                "metric": strings(methods), "run": ("objective", strings(runs[o] for o in objectives)),
                "final_update": ("objective", [totals[o] for o in objectives])})
    labels = [str(u) for u in snapshots] + [FINAL]
    cards = {str(u): scorecard(p) for u, p in snapshots.items()}
    cards[FINAL] = scorecard(final)
    claims = [f.label for f in cards[FINAL]]
    verdict = np.array([[next((f.verdict for f in cards[s] if f.label == c), "") for s in labels] for c in claims],
                       dtype=object).reshape(len(claims), len(labels))
    snapshot_updates = [*snapshots, max(totals.values())]
    first, since = zip(*(first_holds(list(row), snapshot_updates) for row in verdict)) if claims else ((), ())
    verdicts = xr.Dataset(
        {"verdict": (("claim", "snapshot"), verdict),
         "first": ("claim", np.array([-1 if f is None else f for f in first], dtype=int),
                   {"long_name": "first update at which the claim holds (-1: never)"}),
         "since": ("claim", np.array([-1 if s is None else s for s in since], dtype=int),
                   {"long_name": "update from which the claim holds at every later snapshot (-1: never)"})},
        coords={"claim": strings(claims), "snapshot": strings(labels),
                "update": ("snapshot", np.array(snapshot_updates))})
    return {"curves": curves, "verdicts": verdicts}
