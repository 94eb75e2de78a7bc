"""The ``train`` stage: the runs of the ``train`` section that the models use (:mod:`evolution.training.trainer`)."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from evolution.config import ConfigError, ModelConfig, TrainConfig, resolved_dict
from evolution.provenance import config_hash, versions
from pipelines.stages.base import Context, Stage
from pipelines.stages.corpus import CorpusStage

logger = logging.getLogger(__name__)

__all__ = ["TrainStage"]


def _train_section(ctx: Context) -> TrainConfig:
    """The ``train`` section, which the stage reads only when the config has one (:meth:`TrainStage.off`)."""
    if ctx.config.train is None:
        raise ConfigError("there is no train section: models of kind: trained need one")
    return ctx.config.train


class TrainStage(Stage):
    """Not all-or-nothing on purpose: fairseq's ``checkpoint_last.pt`` is the resume
    point of an interrupted run, and finished runs are kept. ``done.json``
    (written last, with the evaluation) names the runs it covers. Only the runs
    that ``kind: trained`` models name are trained (every run when the config
    lists no models), so a config can take some models from shipped weights and
    train the rest. Does nothing when the config has no ``train`` section."""

    name = "train"
    after = ("corpus",)

    def key(self, ctx: Context) -> str:
        def compute():
            train = ctx.config.train.keyed() if ctx.config.train else None
            return config_hash({"corpus": CorpusStage().training_key(ctx), "train": train, "seed": ctx.config.seed})

        return ctx.memo("train.key", compute)

    def directory(self, ctx: Context) -> Path:
        return ctx.workdir / "train" / self.key(ctx)

    def paths(self, ctx: Context):
        from evolution.training.trainer import TrainingPaths

        return TrainingPaths(self.directory(ctx), ctx.config.corpus.languages)

    @staticmethod
    def needed(ctx: Context) -> dict[str, dict]:
        """``name -> run`` of the runs this config's ``kind: trained`` models use."""
        runs = _train_section(ctx).runs(ctx.config.seed)
        used = {m.run_name for m in ctx.config.models if m.kind == "trained"}
        return {n: spec for n, spec in runs.items() if n in used}

    def _covered(self, ctx: Context) -> bool:
        done = self.directory(ctx) / "done.json"
        if not done.is_file():
            return False
        covered = json.loads(done.read_text(encoding="utf-8")).get("runs")
        return covered is None or set(self.needed(ctx)) <= set(covered)

    def off(self, ctx: Context) -> str | None:
        if ctx.config.train is None:
            return "off (no train section: every model is given)"
        return None if self.needed(ctx) else "off (no model of kind: trained)"

    def pending(self, ctx: Context) -> list[str]:
        if self.off(ctx):
            return []
        if self._covered(ctx) and self.name not in ctx.force:
            return []
        runs = self.needed(ctx)
        todo = [n for n in runs if not (self.paths(ctx).run_dir(n) / "done.json").is_file()]
        return [f"train: {', '.join(todo) or 'evaluate'} -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        from evolution.training import trainer

        if not self.pending(ctx):
            if ctx.config.train is not None:
                logger.info("train: cached at %s", self.directory(ctx))
            return
        cfg, languages = _train_section(ctx), ctx.config.corpus.languages
        paths = self.paths(ctx)
        if self.name in ctx.force and paths.root.exists():
            shutil.rmtree(paths.root)
        paths.root.mkdir(parents=True, exist_ok=True)
        if not paths.text.is_dir():
            shutil.copytree(CorpusStage().directory(ctx) / "text", paths.text)
        t0 = time.perf_counter()
        prep = trainer.prepare_data(paths, cfg)
        runs = self.needed(ctx)
        for seed in sorted({r["seed"] for r in runs.values()}):
            trainer.initial_encoder(paths, cfg, seed=seed, languages=languages)
        timings = {
            n: trainer.train_run(paths, cfg, n, spec, languages=languages, progress=ctx.progress)
            for n, spec in runs.items()
        }
        train_seconds = time.perf_counter() - t0
        evaluation = trainer.evaluate_runs(paths, cfg, runs, languages=languages)
        summary = {
            "key": self.key(ctx),
            "prepare": prep,
            "runs": runs,
            "timings": timings,
            "train_seconds": round(train_seconds, 1),
            "evaluation": evaluation,
            "config": resolved_dict(cfg),
            "versions": versions(),
        }
        ctx.timings["train"] = summary
        (paths.root / "eval.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
        (paths.root / "done.json").write_text(
            json.dumps({"key": self.key(ctx), "runs": sorted(runs)}), encoding="utf-8"
        )
        logger.info(
            "train: %d runs in %.0f s (incl. data preparation); %s",
            len(runs),
            train_seconds,
            "; ".join(
                f"{n}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "seconds")
                for n, r in evaluation.items()
                if isinstance(r, dict)
            ),
        )

    def evaluation(self, ctx: Context) -> dict | None:
        """``eval.json`` of a finished training (None without a train section or before it)."""
        if ctx.config.train is None:
            return None
        path = self.directory(ctx) / "eval.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def model_spec(self, ctx: Context, model: ModelConfig) -> dict:
        """The fairseq adapter spec of a ``kind: trained`` model."""
        run = _train_section(ctx).runs(ctx.config.seed)[model.run_name]
        paths = self.paths(ctx)
        spec = resolved_dict(model)
        checkpoint = (
            paths.checkpoint(model.run_name) if model.update is None else paths.kept(model.run_name, model.update)
        )
        spec.update(
            kind="fairseq",
            path=str(checkpoint),
            data=str(paths.data(run["objective"])),
            sentencepiece=str(paths.spm_model),
            objective=run["objective"],
            run=model.run_name,
        )
        return spec
