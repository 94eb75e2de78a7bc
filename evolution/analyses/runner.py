"""Run analyses: one generic loop over their units, with a cache of results on disk.

Each unit's result is cached as ``<cache>/<analysis>-<unit>-<key>.json``
(:func:`~evolution.analyses.base.unit_key`), written under a temporary name
and renamed, so an interrupted run keeps what it finished and never reads a
half-written result. Units run as one Dask graph (on the cluster's workers,
or in this process); the log lines that the library writes inside a unit
(k capped, the k-means chosen, perplexity capped, openTSNE's own) come back
with its result and are replayed into this process's log, so they reach the
run log from any worker.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, unit_key

logger = logging.getLogger(__name__)

__all__ = ["run_analyses", "logged", "unit_file", "reused_file", "log_metrics_plan", "read_profile"]

#: Loggers whose lines a unit carries back (INFO and above).
CAPTURED = ("evolution", "openTSNE")


class _ThreadRecords(logging.Handler):
    """Collects the records emitted in one thread."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.thread = threading.get_ident()
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append(
                {
                    "name": record.name,
                    "levelno": record.levelno,
                    "msg": record.getMessage(),
                    "created": record.created,
                    "process": record.process,
                }
            )


class _PeakRSS:
    """The largest resident memory of this process while a unit runs, sampled every ``every``
    seconds in a thread (the worker's RSS: what it kept from earlier units included)."""

    def __init__(self, every: float = 0.1):
        import psutil  # type: ignore[import-untyped]

        self.proc, self.every, self.peak = psutil.Process(), every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> _PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def logged(fn: Callable[..., dict], device: str | None = None, **kwargs) -> dict[str, Any]:
    """``{"result": fn(**kwargs), "logs": [...], "time": {...}}``: the unit's result, its log
    records and its cost (what runs on a worker), its products on ``device`` (``metrics.device``:
    :mod:`evolution.metrics.backend`): ``wall`` and ``cpu`` seconds (the worker
    process's user + system time, so BLAS or torch threads count), ``start`` (epoch seconds),
    ``worker`` (host:pid) and ``rss_peak`` (bytes: the worker's largest resident memory while the
    unit ran, sampled every 0.1 s)."""
    import resource
    import socket
    import time

    import dask

    loggers = [logging.getLogger(n) for n in CAPTURED]
    levels = [lg.level for lg in loggers]
    handler = _ThreadRecords()
    for lg in loggers:
        if lg.getEffectiveLevel() > logging.INFO:  # a worker's default is WARNING
            lg.setLevel(logging.INFO)
        lg.addHandler(handler)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start, t0 = time.time(), time.perf_counter()
    try:
        # a unit is one task on one worker thread: Dask arrays it reads (xarray's lazy store
        # variables) compute in this thread. Left to the default, a computation inside a task on
        # a distributed worker secedes it and queues its pieces behind every other unit, and the
        # worker runs another unit beside it on the same core (seen: the head map, 8 s alone,
        # took 695 s of wall time in the default run at commit 90eba53)
        # and its BLAS on one thread, as on a worker process (Dask's nanny starts it with
        # OMP_NUM_THREADS=1): a threaded BLAS splits sums (dot products, reductions) by its thread
        # count, which changes the last bits, so a synchronous run would differ from a cluster's in
        # values that are rounding noise (seen: PWCCA intervals of 4e-14 differing by 1.5e-4 of
        # themselves); the same bits in every mode (tests/test_execution_modes.py)
        from threadpoolctl import threadpool_limits

        from evolution.metrics import backend

        with (
            dask.config.set(scheduler="synchronous"),
            threadpool_limits(limits=1, user_api="blas"),
            backend.use(device),
            _PeakRSS() as rss,
        ):
            result = fn(**kwargs)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return {
        "result": result,
        "logs": handler.records,
        "time": {
            "wall": wall,
            "cpu": cpu,
            "start": start,
            "worker": f"{socket.gethostname()}:{os.getpid()}",
            "rss_peak": rss.peak,
        },
    }


def unit_file(cache: Path, analysis: Analysis, unit: Unit) -> Path:
    """Where ``unit``'s result is cached: its analysis, name and key (:func:`unit_key`)."""
    return cache / f"{analysis.name}-{unit.name}-{unit_key(analysis, unit)}.json"


def reused_file(cached: Path, reuse: Sequence[Path]) -> Path | None:
    """The first file of the ``reuse`` directories named as ``cached`` (the same unit and key)."""
    return next((p for d in reuse if (p := Path(d) / cached.name).is_file()), None)


def log_metrics_plan(
    units: list[tuple[Analysis, Unit]],
    inputs: Inputs,
    *,
    rate: float,
    workers: int,
    profile: Path | None = None,
    memory_limit: float | None = None,
) -> list[str]:
    """Log the plan of ``units`` (:mod:`evolution.analyses.cost`; a unit planned over the
    workers' ``memory_limit`` in bytes as a WARNING) and, with ``profile``, write it as
    ``plan.json`` beside it; returns the lines."""
    from evolution.analyses.cost import OVER_LIMIT, plan_lines, plan_record, plan_units

    plan = plan_units(units, inputs, rate=rate)
    lines = plan_lines(plan, workers=workers, rate=rate, memory_limit=memory_limit)
    for line in lines:
        logger.log(logging.WARNING if line.startswith(OVER_LIMIT) else logging.INFO, "%s", line)
    if profile is not None:
        profile.parent.mkdir(parents=True, exist_ok=True)
        tmp = profile.with_name("plan.json.partial")
        tmp.write_text(json.dumps(plan_record(plan, rate=rate, workers=workers)), encoding="utf-8")
        os.replace(tmp, profile.with_name("plan.json"))
    return lines


def read_profile(path: Path) -> list[dict[str, Any]]:
    """The unit records of ``path`` (a ``profile.jsonl`` that :func:`run_analyses` appends to)
    from its last run (a rerun appends another), in the order they started; [] when it has none."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        return []
    last = max(r["run"] for r in rows)
    return sorted((r for r in rows if r["run"] == last), key=lambda r: r["start"])


def _replay(records: list[dict[str, Any]], *, unit: str) -> None:
    """Re-emit records that another process wrote (this process's own went out already)."""
    for r in records:
        if r["process"] == os.getpid():
            continue
        rec = logging.makeLogRecord(
            {
                "name": r["name"],
                "levelno": r["levelno"],
                "levelname": logging.getLevelName(r["levelno"]),
                "msg": f"[{unit}] {r['msg']}",
                "created": r["created"],
                "process": r["process"],
            }
        )
        logging.getLogger(r["name"]).handle(rec)


def _jsonable(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o)}")


def run_analyses(
    analyses: list[Analysis],
    inputs: Inputs,
    *,
    cache: Path,
    client=None,
    progress: bool = True,
    force: bool = False,
    reuse: Sequence[Path] = (),
    profile: Path | None = None,
    rate: float | None = None,
    workers: int = 1,
) -> dict[str, xr.Dataset]:
    """Compute every unit of ``analyses`` not in ``cache`` (all with ``force``), then
    build their ``metrics.zarr`` groups. Returns datasets by group name, each
    carrying ``inputs.attrs`` (where the analysis set none of the same name) plus
    its analysis's name and version.

    ``reuse``: read-only directories of unit results (files named as in ``cache``, e.g. a
    committed ``results/<run>/units``); a unit whose file is there is copied into ``cache``
    instead of being computed (not with ``force``). The file name holds the unit's key, so
    only a result of the same inputs and settings is reused.

    Every computed unit logs its wall and CPU time; with ``profile`` (a JSON-lines file) each
    one also appends a record ``{"run", "analysis", "unit", "wall", "cpu", "start", "end",
    "worker"}`` as it finishes (``run``: this call's start, epoch seconds), which
    ``benchmarks/pipeline.py`` reads.

    With ``rate`` (float64 multiply-adds a second on one core), the units to compute are
    planned first (:mod:`evolution.analyses.cost`: their seconds, and the stage's on
    ``workers``), logged, and written as ``plan.json`` beside ``profile``."""
    import shutil
    import time

    import dask

    from evolution.extract import compute

    cache.mkdir(parents=True, exist_ok=True)
    run_start = time.time()
    results: dict[str, dict[str, dict]] = {a.name: {} for a in analyses}
    todo, where, started, reused, pending = [], [], [], 0, []
    for a in analyses:
        for u in a.units(inputs):
            f = unit_file(cache, a, u)
            if not force and not f.is_file():
                found = reused_file(f, reuse)
                if found is not None:
                    tmp = f.with_name(f.name + ".partial")
                    shutil.copyfile(found, tmp)
                    os.replace(tmp, f)
                    reused += 1
            if f.is_file() and not force:
                results[a.name][u.name] = json.loads(f.read_text(encoding="utf-8"))
                continue
            todo.append(
                dask.delayed(logged, pure=True)(
                    u.fn, device=inputs.config.device, **u.kwargs, dask_key_name=f"{a.name}-{u.name}"
                )
            )
            where.append((a.name, u.name, f))
            started.append(u.started)
            pending.append((a, u))
    # the units that an interrupted run began (checkpoints on disk) first, so that a rerun finishes
    # them before it starts new ones; sorted() is stable, so the rest keep their order
    order = sorted(range(len(todo)), key=lambda i: not started[i])
    todo, where, n_started = [todo[i] for i in order], [where[i] for i in order], sum(started)
    if rate is not None and todo:
        try:
            from evolution.dask_compute import worker_memory_limit

            log_metrics_plan(
                [pending[i] for i in order],
                inputs,
                rate=rate,
                workers=workers,
                profile=profile,
                memory_limit=worker_memory_limit(client),
            )
        except Exception as exc:  # a forecast: its failure must not stop the work it forecasts
            logger.warning("metrics plan: not made (%s: %s); the stage runs without it", type(exc).__name__, exc)
    n_cached = sum(len(r) for r in results.values())
    logger.info(
        "metrics: %d task(s) to compute%s, %d cached%s",
        len(todo),
        f" ({n_started} resumed from their checkpoints first)" if n_started else "",
        n_cached,
        f" ({reused} reused from {', '.join(map(str, reuse))})" if reused else "",
    )

    def keep(i: int, out: dict) -> None:
        """Cache one unit's result as soon as it is done (a killed run keeps it)."""
        name, unit, f = where[i]
        _replay(out["logs"], unit=f"{name} {unit}")
        r = json.loads(json.dumps(out["result"], default=_jsonable))
        tmp = f.with_name(f.name + ".partial")
        tmp.write_text(json.dumps(r), encoding="utf-8")
        os.replace(tmp, f)
        results[name][unit] = r
        t = out.get("time")
        if t is not None:
            logger.info(
                "metrics: %s %s: %.1f s wall, %.1f s CPU, peak %.2f GiB RSS on %s",
                name,
                unit,
                t["wall"],
                t["cpu"],
                t.get("rss_peak", 0) / 2**30,
                t["worker"],
            )
            if profile is not None:
                record = {"run": run_start, "analysis": name, "unit": unit, **t, "end": t["start"] + t["wall"]}
                with open(profile, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")

    if todo:
        compute(todo, client=client, progress=progress, label="metrics", unit="task", on_result=keep, first=n_started)
    datasets: dict[str, xr.Dataset] = {}
    for a in analyses:
        for group, ds in a.datasets(inputs, results[a.name]).items():
            ds.attrs = {
                **inputs.attrs,
                **ds.attrs,
                "analysis": a.name,
                "analysis_version": a.version,
                "analysis_layout": a.layout,
            }
            datasets[group] = ds
    return datasets
