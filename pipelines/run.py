"""Command line: ``python -m pipelines.run CONFIG [--stage NAME] [--force NAME] [--dry-run] [--workdir DIR]``.

Runs the stages of the pipeline DAG in order, skipping those whose outputs are
cached for the same config and inputs. Exit codes: 0 done, 2 bad config or
input (nothing written), a full disk (rerun once there is room) or a workdir another live run is using
(``pipelines.lock``), 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from evolution.config import ConfigError, load_config, parse_overrides
from evolution.corpus import CorpusError
from evolution.dask_compute import WorkerLost
from evolution.models import ModelLoadError
from evolution.store import StoreError
from evolution.tokens import SentenceTooLong
from pipelines.cluster import dask_client
from pipelines.lock import WorkdirBusy, workdir_lock
from pipelines.plan import PlanError, gemm_rate
from pipelines.stages import STAGES, Context, downstream, stage_order

logger = logging.getLogger("pipelines.run")

__all__ = ["main", "run", "DiskFull"]


_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=_FORMAT,
        handlers=[logging.StreamHandler(sys.stderr)],
        force=True,
    )
    for noisy in ("fairseq", "hydra", "distributed", "transformers", "urllib3", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _log_to_file(workdir: Path) -> logging.Handler:
    """Also write this run's log to ``<workdir>/logs/run-<time>.log``; remove the handler when done."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    path = workdir / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S')}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    logging.getLogger().addHandler(handler)
    logger.info("log: %s", path)
    return handler


class DiskFull(RuntimeError):
    """No space left where the run writes (ENOSPC / EDQUOT); the message names where and what to do."""


def run(
    config_path: str | Path,
    *,
    stage: str | None = None,
    force: list[str] | None = None,
    dry_run: bool = False,
    plan_only: bool = False,
    workdir: str | Path | None = None,
    progress: bool = True,
    overrides: dict[str, Any] | None = None,
) -> Context:
    """Run the pipeline as the CLI does; returns the run's :class:`Context`. ``overrides``: dotted
    keys replacing the file's (:func:`evolution.config.load_config`; the CLI's ``--set``)."""
    overrides = {**(overrides or {}), **({"workdir": str(Path(workdir).resolve())} if workdir else {})}
    if overrides:
        logger.info("config overrides: %s", ", ".join(f"{k}={v!r}" for k, v in overrides.items()))
    config = load_config(config_path, overrides=overrides)
    order = stage_order(stage)
    forced: set[str] = set()
    for name in force or []:
        if name not in STAGES:
            raise ConfigError(f"--force {name}: unknown stage; stages are {list(STAGES)}")
        forced |= downstream(name)
    ctx = Context(config=config, force=forced, progress=progress)
    plan = {name: STAGES[name].pending(ctx) for name in order}
    for name in order:
        lines = plan[name]
        idle = (STAGES[name].off(ctx) or "cached") if not lines else f"to run ({len(lines)} item(s))"
        logger.info("%-8s %s", name, idle)
        for line in lines:
            logger.info("         - %s", line)
    if dry_run:
        return ctx
    if plan_only:
        _plan(ctx, order, plan)
        return ctx
    config.workdir.mkdir(parents=True, exist_ok=True)
    with workdir_lock(config.workdir):  # one run per workdir (WorkdirBusy names the other one)
        _run_locked(ctx, order, plan)
    return ctx


def _plan(ctx: Context, order: list[str], plan: dict[str, list[str]]) -> None:
    """``--plan``: the extraction's plan and, once the extraction is stored, the metrics stage's.
    Nothing is written under the workdir (no lock, no log file): a corpus not yet built is read
    into a temporary directory, removed afterwards; the metrics plan writes its units' index arrays
    (content-addressed, the run's own) beside the store, in ``metrics-inputs/``."""
    import tempfile

    from pipelines.stages.corpus import CorpusStage
    from pipelines.stages.extract import ExtractStage

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evolution-plan-") as tmp:
        try:
            if plan.get("corpus"):
                ctx.corpus_directory = Path(tmp) / "corpus"
                CorpusStage().run(ctx)
                logger.info(
                    "plan: the corpus stage is not built: read in %.1f s into a temporary directory, removed after "
                    "the plan (nothing is written under the workdir), to count each model's tokens",
                    time.perf_counter() - t0,
                )
            untrained = bool(plan.get("train"))  # a run still to train has no checkpoint to measure yet
            if untrained:
                logger.info("plan: models of kind trained are left out until the train stage has run")
            todo = [m for m in ctx.config.models if not (untrained and m.kind == "trained")]
            ExtractStage().plan(ctx, ExtractStage()._todo(ctx, todo) if "extract" in order else [], only=True)
            if "metrics" in order:
                if ExtractStage().pending(ctx):
                    logger.info(
                        "plan: the metrics stage is planned once the extraction is in the store (its units are "
                        "counted from the stored tokens); it plans itself when it starts (metrics/plan.json)"
                    )
                else:
                    from evolution import location
                    from pipelines.stages.metrics import MetricsStage

                    logger.info(
                        "plan: the metrics units' index arrays go to %s (content-addressed: the run reads the "
                        "same files); nothing else is written",
                        location.inputs_dir(ExtractStage().store(ctx)),
                    )
                    MetricsStage().plan(ctx)
        finally:
            ctx.corpus_directory = None  # removed with the temporary directory
    logger.info("plan: --plan took %.1f s", time.perf_counter() - t0)


def _run_locked(ctx: Context, order: list[str], plan: dict[str, list[str]]) -> None:
    config = ctx.config
    log_handler = _log_to_file(config.workdir)
    try:
        _execute(ctx, order, plan)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        from pipelines.stages.extract import ExtractStage
        from pipelines.stages.metrics import MetricsStage

        where = exc.filename or (
            f"writing under the workdir {config.workdir}, the representation store "
            f"{ExtractStage().store(ctx)} or the metrics store {MetricsStage().path(ctx)}"
        )
        raise DiskFull(
            f"{where}: {exc.strerror}. Free space there, or point workdir / extract.store / "
            "metrics.store at a disk with room, then rerun the same command: finished results are "
            "kept, the interrupted one is redone (a partly written store group is never read)"
        ) from exc
    finally:
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()


def _execute(ctx: Context, order: list[str], plan: dict[str, list[str]]) -> None:
    config = ctx.config
    from evolution.provenance import portable

    resolved = portable(config.model_dump(mode="json"), config.workdir)  # paths relative to the workdir
    (config.workdir / "config.resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    t0 = time.perf_counter()
    # the cluster starts lazily, for the first stage that has tasks for it and after that stage's
    # own checks: a bad corpus or checkpoint stops the run before any cluster exists
    with contextlib.ExitStack() as stack:
        started = False
        for name in order:
            stage = STAGES[name]
            if stage.uses_cluster and plan[name] and not started:
                stage.prepare(ctx)
                # the plans' GEMM rate, measured before the workers start: while they import (both
                # cores busy for seconds) it read 17.6 G/s where the machine gave 27.8 before
                # (results/shapes/metrics/rate-after-start/plan.json against ../plan.json)
                ctx.memo("plan.gemm", lambda: gemm_rate(0.25))
                ctx.client = stack.enter_context(
                    dask_client(config.cluster, device=config.extract.device, workdir=config.workdir)
                )
                started = True
            stage.run(ctx)
    logger.info("done in %.1f s; results under %s", time.perf_counter() - t0, config.workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.run", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the YAML config, e.g. evolution.yaml")
    parser.add_argument("--stage", choices=list(STAGES), help="run up to and including this stage")
    parser.add_argument(
        "--force",
        action="append",
        default=[],
        metavar="NAME",
        choices=list(STAGES),
        help="redo this stage and every stage after it (repeatable)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would run and stop")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the extraction's plan (bytes, a worker's peak memory against the workers' memory limit, seconds "
        "on this machine, how long its measurements took) and, once the extraction is stored, the metrics stage's "
        "(units, multiply-adds, seconds), and stop; writes nothing under the workdir",
    )
    parser.add_argument("--workdir", help="override the config's workdir")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="replace one setting of the config, the value read as YAML (repeatable), e.g. --set metrics.pruning=null",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    try:
        run(
            args.config,
            stage=args.stage,
            force=args.force,
            dry_run=args.dry_run,
            plan_only=args.plan,
            workdir=args.workdir,
            progress=not args.no_progress,
            overrides=parse_overrides(args.overrides),
        )
    except (ConfigError, CorpusError, ModelLoadError, SentenceTooLong, StoreError, ConnectionError) as exc:
        logger.error("%s", exc)
        return 2
    except (DiskFull, WorkdirBusy, WorkerLost, PlanError) as exc:
        logger.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        logger.error("interrupted; rerun the same command to resume (incomplete outputs are redone)")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
