"""The metrics stage's plan before it runs: each unit's multiply-adds (the arithmetic that
dominates it) and its seconds at this machine's float64 GEMM rate on one core, and the stage's
wall time on the cluster's workers (:func:`evolution.schedule.list_schedule` of the planned
units, in the order the runner submits them).

Modelled: the units that took 97% of the MiniLM paper-size stage
(``results/minilm-paper/split/profile.jsonl``). With n occurrences of width d:

=========================  ===================================================================
neighbours, one part       q n d for its q queries among the layer's n, plus (the part that
                           starts at 0) the within-type searches, sum over types of n_t^2 d
                           (``index: ivf`` counted as exact)
MI, one layer              per target and restart, k capped at n / 10 as ``layer_mi`` does:
                           ``flat`` k-means, min(n, 256 k) k d ``niter`` + n k d (Lloyd on
                           faiss's training sample, then every row assigned); ``two_level``,
                           c = 4 sqrt k coarse cells of k / c fine centroids each: (min(n, 256 c)
                           c + n k / c) d ``niter`` + n (c + 4 k / c) d
similarity estimate        per view (model, layer) 2 n d^2 (Gram and basis), per pair of
                           views, a view with itself included (V (V + 1) / 2 for V views),
                           n d^2 (the bases' cross-product)
change by frequency, part  per frequency bin of n_b occurrences (at least ``min_ratio`` d):
                           (1 + ``bootstrap``) (L - 1) 3 n_b d^2 over the L - 1 adjacent pairs of
                           L stored layers (their factorisations and the replicates' weighted
                           cross-products)
=========================  ===================================================================

Memory: the arrays a unit of a modelled family holds at its peak (:func:`unit_memory`), above a
worker's own (:data:`WORKER_BASE`) and a fixed :data:`UNIT_FIXED`: the rows it reads as float32
(4 n d bytes) and what it builds from them. Neighbours: the rows and faiss's copy of them (twice,
8 n d; the NumPy route adds a float64 (4,096, n) distance block); MI: the rows, faiss's training
sample and 96 bytes a row of labels and probed cells; the similarity estimate: the float64 bases
of its V views (8 n d each) and the view in the making (centred copy and basis, 16 n d), and
with a bootstrap between M >= 2 models a layer's bases stacked and their weighted copies
(8 n d (2 M + 1)); the
change by frequency: its L layers' rows and, for its largest bin n_b, twelve float64 (n_b, d)
arrays (96 n_b d: two views, their stacked bases, the view in the making and the replicates'
weighted products; fitted to bin 0 of the MiniLM paper-size run, as ``docs/decisions.md`` #30
says).

Seconds = multiply-adds / (rate x :data:`EFFICIENCY`), where the efficiency of each family is
the measured seconds of its units in the committed MiniLM paper-size run against its
multiply-adds at that run's rate (``benchmarks/metrics_plan.py`` refits it from a run); MI's
per k-means algorithm: ``mi``, two-level, there, and ``mi_flat`` on the default config's run. A unit
of any other analysis (t-SNE, the head analyses, change by position, ...) is not modelled: the
plan counts it and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays

__all__ = [
    "UnitCost",
    "unit_work",
    "unit_memory",
    "plan_units",
    "plan_lines",
    "plan_record",
    "memory_lines",
    "terminate_fraction",
    "EFFICIENCY",
    "WORKER_BASE",
    "UNIT_FIXED",
    "SHRINK",
    "OVER_LIMIT",
]

#: resident bytes of a metrics worker before its unit's arrays: Python, NumPy, faiss, torch and the
#: analysis modules imported (0.42 GiB measured after importing them, 2026-11-29), which
#: :func:`unit_memory` comes on top of
WORKER_BASE = int(0.45 * 2**30)

#: bytes every modelled unit holds besides its arrays (its arrays file, zarr's chunk buffers, BLAS
#: and faiss work space): the default config's neighbour and MI units hold 0.12 GiB above a
#: worker's base for arrays of a few MB (``benchmarks/unit_memory.py``,
#: results/scale/plan/unit_memory.json)
UNIT_FIXED = int(0.1 * 2**30)

#: multiply-adds / (measured seconds x rate) of each modelled family: the share of the one-core
#: float64 GEMM rate its units reached in the MiniLM paper-size run of
#: results/minilm-paper/split/profile.jsonl (29.4 G multiply-adds/s; ``python
#: benchmarks/metrics_plan.py <a run's metrics> --profile results/minilm-paper/split/profile.jsonl
#: --rate 29.4e9 --fit``). MI's is low: its count is the k-means alone, and a unit also runs the
#: sentence bootstrap, the MI of each type set and, two-level, one small k-means per coarse cell.
#: ``mi_flat``, MI whose k-means is flat (k below ``TWO_LEVEL_FROM_K``; the paper-size run's is
#: two-level), was fitted on the default config's run (results/scale/plan/plan_check.json, k = 300,
#: width 128) and checked on the real shapes (results/shapes/metrics/, k = 100, widths 768 and
#: 1,024: measured / planned 0.80; docs/decisions.md #32). ``mlm_output``, the MLM-output MI unit
#: (the corrupted text's forward passes and two k-means per layer), was fitted on the same run
#: (results/scale/plan/, 172.2 s) and checked on the default config's 1- and 2-worker runs
#: (results/scale/workers/).
EFFICIENCY: dict[str, float] = {
    "neighbors": 0.316,
    "mi": 0.081,
    "mi_flat": 0.211,
    "similarity": 0.416,
    "change": 0.636,
    "mlm_output": 0.336,
}


@dataclass(frozen=True)
class UnitCost:
    """One unit of the plan: its analysis, name, family (a key of :data:`EFFICIENCY`, or None:
    not modelled), multiply-adds, planned seconds and planned memory (None when not modelled)."""

    analysis: str
    unit: str
    family: str | None
    work: float | None
    seconds: float | None
    memory: float | None = None  # bytes of arrays at the unit's peak, above WORKER_BASE (None: not modelled)


def _neighbors(unit: Unit, inputs: Inputs) -> float:
    m = inputs.models[unit.kwargs["model"]]
    nb = m.plan.neighbors
    n, d = len(nb["rows"]), m.d_model
    lo, hi = unit.kwargs.get("queries") or (0, n)
    work = float(hi - lo) * n * d
    if lo == 0:
        for part in (nb, m.plan.syntax or {}):
            if "token" in part:
                counts = np.unique(part["token"], return_counts=True)[1].astype(np.float64)
                work += float((counts**2).sum()) * d
    return work


def _mi(unit: Unit, inputs: Inputs) -> float:
    m = inputs.models[unit.kwargs["model"]]
    return sum(_kmeans(len(rows), unit.kwargs["mi"], m.d_model) for rows, _ in m.plan.mi.values())


#: the share of positions BERT's corruption changes (:func:`evolution.metrics.masked.corrupt`): 15%
#: chosen, of which 80% masked and 10% replaced by another token
CHANGED = 0.15 * 0.9


def _capped_k(cfg: Any, n: int) -> int:
    """MI's k on ``n`` rows, capped as :func:`evolution.metrics.mi.layer_mi` caps it (10 rows a cluster)."""
    return min(cfg.k, max(2, n // 10))


def _kmeans(n: int, cfg: Any, d: int) -> float:
    """Multiply-adds of one MI k-means over ``n`` rows (all restarts), k capped as ``layer_mi`` caps it."""
    from evolution.metrics.kmeans import resolve_algorithm

    k = _capped_k(cfg, n)
    if resolve_algorithm(cfg.algorithm, k=k) == "two_level":
        coarse = 4 * math.sqrt(k)
        fine = k / coarse  # fine centroids per coarse cell
        lloyd = min(n, 256 * coarse) * coarse + n * fine  # the coarse level's training rows; the cells'
        return cfg.restarts * (lloyd * cfg.niter + n * (coarse + 4 * fine)) * d  # + assigning every row
    return cfg.restarts * (min(n, 256 * k) * cfg.niter + n) * k * d


def _mlm_size(unit: Unit, inputs: Inputs) -> tuple[Any, int, int]:
    """(model inputs, content tokens fed per corruption, expected corrupted positions of the MI
    types) of an MLM-output unit (``<model>-mlm-output``: :func:`evolution.analyses.mi.mlm_output_task`)."""
    m = inputs.models[unit.name.removesuffix("-mlm-output")]
    kw = unit.kwargs
    ids = [np.asarray(v) for v in kw["content_ids"].values()]
    tokens = sum(len(v) for v in ids)
    of_types = sum(int(np.isin(v, kw["types"]).sum()) for v in ids)
    return m, tokens, int(CHANGED * kw["mi"].mlm_corruptions * of_types)


def _mlm_output(unit: Unit, inputs: Inputs) -> float:
    """The corrupted text's forward passes (about 12 d^2 a token and block: the attention's four
    projections and an FFN of 4 d) and two MI k-means (output label, input fed) per layer."""
    m, tokens, n = _mlm_size(unit, inputs)
    cfg, d = unit.kwargs["mi"], m.d_model
    forward = float(cfg.mlm_corruptions) * tokens * (m.n_layers - 1) * 12 * d * d
    return forward + 2 * m.n_layers * _kmeans(n, cfg, d)


def _mlm_output_memory(unit: Unit, inputs: Inputs) -> float:
    m, _, n = _mlm_size(unit, inputs)
    k = _capped_k(unit.kwargs["mi"], n)
    return 4.0 * m.n_layers * n * m.d_model + 4.0 * (n + min(n, 256 * k)) * m.d_model + 96.0 * n


def _similarity(unit: Unit, inputs: Inputs) -> float:
    names = unit.kwargs["models"]
    views = sum(unit.kwargs["n_layers"].values())
    d = max(inputs.models[g].d_model for g in names)
    n = len(inputs.models[names[0]].plan.similarity_rows)
    return float(n) * d * d * (2 * views + views * (views + 1) / 2)


def _change_masks(unit: Unit, inputs: Inputs) -> tuple[Any, int, list[np.ndarray]]:
    """(similarity config, width, the occurrence masks of the bins) of a change-by-frequency unit
    (its part ``subsets`` of them, as ``change_task`` takes it)."""
    from evolution.analyses.similarity_tasks import _subsets

    kw = unit.kwargs
    cfg = kw["similarity"]
    every, _ = _subsets(load_arrays(kw["arrays"])["freq_rank"], bins=kw["bins"], similarity=cfg)
    lo, hi = kw.get("subsets") or (0, len(every))
    return cfg, inputs.models[kw["model"]].d_model, list(every.values())[lo:hi]


def _change(unit: Unit, inputs: Inputs) -> float:
    cfg, d, masks = _change_masks(unit, inputs)
    sizes = [int(mask.sum()) for mask in masks]
    pairs = unit.kwargs["n_layers"] - 1
    return float(sum(n for n in sizes if n >= cfg.min_ratio * d)) * d * d * 3 * pairs * (1 + cfg.bootstrap)


def _neighbors_memory(unit: Unit, inputs: Inputs) -> float:
    from evolution.metrics.search import backend

    m = inputs.models[unit.kwargs["model"]]
    n, d = len(m.plan.neighbors["rows"]), m.d_model
    lo, _ = unit.kwargs.get("queries") or (0, n)
    syntax = len((m.plan.syntax or {}).get("rows", ())) if lo == 0 else 0
    block = 0.0 if backend() == "faiss" else 8.0 * 4096 * n  # NumPy's float64 distances per query block
    return 8.0 * (n + syntax) * d + block


def _mi_memory(unit: Unit, inputs: Inputs) -> float:
    from evolution.metrics.kmeans import resolve_algorithm

    m = inputs.models[unit.kwargs["model"]]
    cfg = unit.kwargs["mi"]
    sizes = [len(rows) for rows, _ in m.plan.mi.values()] or [0]
    n = max(sizes)  # targets run one after another
    k = _capped_k(cfg, n)
    if resolve_algorithm(cfg.algorithm, k=k) == "two_level":
        k = max(2, int(round(4 * math.sqrt(k))))  # faiss trains the coarse level's centroids; cells are small
    return 4.0 * (n + min(n, 256 * k)) * m.d_model + 96.0 * n  # + labels, probed cells and their order


def _similarity_memory(unit: Unit, inputs: Inputs) -> float:
    names = unit.kwargs["models"]
    views = sum(unit.kwargs["n_layers"].values())
    d = max(inputs.models[g].d_model for g in names)
    n = len(inputs.models[names[0]].plan.similarity_rows)
    held = 8.0 * n * d * (views + 2) + 4.0 * n * d
    if unit.kwargs["similarity"].bootstrap and len(names) > 1:  # a layer's M bases stacked, twice, and one more
        held += 8.0 * n * d * (2 * len(names) + 1)
    return held


def _change_memory(unit: Unit, inputs: Inputs) -> float:
    cfg, d, masks = _change_masks(unit, inputs)
    kw = unit.kwargs
    if not masks:
        return 0.0
    kept = int(np.any(np.stack(masks), axis=0).sum())
    largest = max((int(mask.sum()) for mask in masks if mask.sum() >= cfg.min_ratio * d), default=0)
    return 4.0 * kw["n_layers"] * kept * d + 96.0 * largest * d


_MEMORY = {
    "neighbors": _neighbors_memory,
    "mi": _mi_memory,
    "mi_flat": _mi_memory,
    "similarity": _similarity_memory,
    "change": _change_memory,
    "mlm_output": _mlm_output_memory,
}


def unit_memory(family: str | None, unit: Unit, inputs: Inputs) -> float | None:
    """Bytes ``unit`` of ``family`` holds at its peak above :data:`WORKER_BASE`: its arrays and
    :data:`UNIT_FIXED` (None for a family not modelled)."""
    return None if family is None else UNIT_FIXED + _MEMORY[family](unit, inputs)


_MODELS = {
    ("neighbors", "layer_task"): ("neighbors", _neighbors),
    ("mi", "layer_task"): ("mi", _mi),
    ("similarity", "similarity_task"): ("similarity", _similarity),
    ("similarity", "change_task"): ("change", _change),
    ("mi", "mlm_output_task"): ("mlm_output", _mlm_output),
}


def unit_work(analysis: str, unit: Unit, inputs: Inputs) -> tuple[str | None, float | None]:
    """(family, multiply-adds) of one unit, (None, None) for a unit the model does not cover."""
    found = _MODELS.get((analysis, getattr(unit.fn, "__name__", "")))
    if found is None:
        return None, None
    family, work = found
    if family == "mi" and _mi_flat(unit, inputs):
        family = "mi_flat"
    return family, work(unit, inputs)


def _mi_flat(unit: Unit, inputs: Inputs) -> bool:
    """Whether an MI unit's k-means is flat for the target with the most occurrences (the one
    whose k-means dominates it; k capped as ``layer_mi`` caps it)."""
    from evolution.metrics.kmeans import resolve_algorithm

    cfg = unit.kwargs["mi"]
    n = max((len(rows) for rows, _ in inputs.models[unit.kwargs["model"]].plan.mi.values()), default=0)
    return resolve_algorithm(cfg.algorithm, k=_capped_k(cfg, n)) == "flat"


def plan_units(units: list[tuple[Analysis, Unit]], inputs: Inputs, *, rate: float) -> list[UnitCost]:
    """The plan of ``units`` ((analysis, unit) in the order they are submitted) at ``rate``
    float64 multiply-adds a second on one core (:func:`pipelines.plan.gemm_rate`'s measure)."""
    out = []
    for a, u in units:
        family, work = unit_work(a.name, u, inputs)
        seconds = None if family is None or work is None else work / (rate * EFFICIENCY[family])
        out.append(UnitCost(a.name, u.name, family, work, seconds, unit_memory(family, u, inputs)))
    return out


#: the settings that shrink a unit of each family's working set (what the over-the-limit line names)
SHRINK = {
    "neighbors": "metrics.neighbors.top or max_per_type (its rows)",
    "mi": "metrics.tokens.top (its types' occurrences)",
    "mi_flat": "metrics.tokens.top (its types' occurrences)",
    "similarity": "metrics.similarity.sentences (its rows; every layer's basis is held at once)",
    "change": "metrics.similarity.sentences (its largest frequency bin's rows)",
    "mlm_output": "metrics.mi.mlm_corruptions or metrics.tokens.top (its corrupted positions)",
}


#: how the line of units planned over the workers' memory limit starts (the runner logs it as a WARNING)
OVER_LIMIT = "metrics plan: over the limit:"


def terminate_fraction() -> float:
    """The share of its memory limit at which a worker's nanny stops it (distributed's
    ``distributed.worker.memory.terminate``, 0.95 by default; 1 where it is switched off)."""
    import dask

    value = dask.config.get("distributed.worker.memory.terminate", default=0.95)
    return float(value) if value else 1.0


def memory_lines(plan: list[UnitCost], *, workers: int, memory_limit: float | None = None) -> list[str]:
    """The plan's memory: the unit with the largest working set, a worker's peak (that plus
    :data:`WORKER_BASE`), the workers' together when the ``workers`` largest units run at once,
    and, where a unit's peak is above the share of a worker's ``memory_limit`` (bytes) at which
    its nanny stops it (:func:`terminate_fraction`), a line naming the unit and the setting (the
    runner logs it as a WARNING)."""
    known = sorted((c for c in plan if c.memory is not None), key=lambda c: -(c.memory or 0.0))
    if not known:
        return []
    gib = 2.0**30
    big = known[0]
    peak = WORKER_BASE + (big.memory or 0.0)
    together = workers * WORKER_BASE + sum(c.memory or 0.0 for c in known[:workers])
    lines = [
        f"metrics plan: memory: largest unit {big.analysis} {big.unit} holds {(big.memory or 0.0) / gib:.2f} GiB, "
        f"a worker about {peak / gib:.2f} GiB with its {WORKER_BASE / gib:.2f} GiB base; "
        f"{workers} worker(s) at most {together / gib:.2f} GiB together"
    ]
    stop = None if not memory_limit else memory_limit * terminate_fraction()
    over = [c for c in known if stop is not None and WORKER_BASE + (c.memory or 0.0) > stop]
    if over and stop is not None:
        lines.append(
            f"{OVER_LIMIT} {len(over)} unit(s) plan more than the {stop / gib:.2f} GiB at which "
            f"a worker is stopped ({terminate_fraction():.0%} of its memory limit of {(memory_limit or 0.0) / gib:.2f} "
            f"GiB: cluster.memory_limit), the largest {big.analysis} {big.unit} at {peak / gib:.2f} GiB; raise "
            "cluster.memory_limit (with fewer cluster.n_workers: cluster.n_workers: 1 gives one worker the "
            f"machine) or lower {'; '.join(dict.fromkeys(SHRINK[c.family] for c in over if c.family))}"
        )
    return lines


def plan_lines(plan: list[UnitCost], *, workers: int, rate: float, memory_limit: float | None = None) -> list[str]:
    """The lines the metrics stage logs before it computes: per analysis the units, their
    multiply-adds and planned seconds and the largest unit; the units not modelled; the
    stage's wall time on ``workers`` (list scheduling of the planned units); the memory
    (:func:`memory_lines`)."""
    from evolution.schedule import list_schedule

    if not plan:
        return []
    lines = [f"metrics plan: at {rate / 1e9:.1f} G float64 multiply-adds/s on one core (NumPy GEMM)"]
    by: dict[str, list[UnitCost]] = {}
    for c in plan:
        by.setdefault(c.analysis, []).append(c)
    for name, cs in by.items():
        known = [c for c in cs if c.seconds is not None]
        if not known:
            lines.append(f"metrics plan: {name:<11} {len(cs):>4} unit(s), not modelled")
            continue
        big = max(known, key=lambda c: c.seconds or 0.0)
        rest = f"; {len(cs) - len(known)} not modelled" if len(known) < len(cs) else ""
        lines.append(
            f"metrics plan: {name:<11} {len(cs):>4} unit(s) {sum(c.work or 0.0 for c in known):9.2e} multiply-adds "
            f"{sum(c.seconds or 0.0 for c in known):9,.0f} s (largest: {big.unit}, {big.seconds:,.0f} s){rest}"
        )
    seconds = [c.seconds or 0.0 for c in plan]
    total = sum(seconds)
    if total == 0:
        return [*lines, f"metrics plan: none of the {len(plan)} unit(s) is modelled"]
    largest = max(plan, key=lambda c: c.seconds or 0.0)
    wall = list_schedule(seconds, workers=workers)
    others = sum(c.seconds is None for c in plan)
    lines.append(
        f"metrics plan: {total:,.0f} s of modelled units, about {wall:,.0f} s on {workers} worker(s)"
        + (f" (the {others} units not modelled come on top)" if others else "")
        + f"; the largest unit {largest.analysis} {largest.unit} is "
        f"{100 * (largest.seconds or 0.0) / max(total, 1e-9):.1f}% of them"
    )
    return lines + memory_lines(plan, workers=workers, memory_limit=memory_limit)


def plan_record(plan: list[UnitCost], *, rate: float, workers: int) -> dict[str, Any]:
    """The plan as JSON (``metrics/plan.json``): rate, workers, and per unit its analysis,
    name, family, multiply-adds and planned seconds."""
    return {
        "rate": rate,
        "workers": workers,
        "efficiency": dict(EFFICIENCY),
        "worker_base": WORKER_BASE,
        "unit_fixed": UNIT_FIXED,
        "units": [c.__dict__ for c in plan],
    }
