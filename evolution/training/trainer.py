"""Train every run of the ``train`` section: vocabulary, binarised data, one initial
encoder per seed, ``fairseq-train`` per run (resumable), evaluation.

Layout of a training directory (``<workdir>/train/<key>/``)::

    text/{train,valid,test}.{src,tgt}    the split corpus (from the corpus stage)
    spm/spm.model, spm/<split>.<lang>    joint SentencePiece BPE and the encoded text
    dict.txt                             the one fairseq dictionary
    bin/mt/, bin/<src>/                  fairseq-preprocess output (MT; LM and MLM)
    init/encoder-seed<S>.pt              the initial shared-encoder weights of seed S
    runs/<name>/checkpoint_last.pt       fairseq checkpoints, train.log, done.json
    runs/<name>/kept/update-<U>.pt       with ``train.checkpoints``: the model after U updates
                                         (weights and arguments, no optimizer state)
    eval.json                            perplexities, unigram baseline, BLEU, chrF, timings

fairseq resumes from ``checkpoint_last.pt`` by itself, so an interrupted
training continues from its last save (every ``save_interval_updates``
updates) when the pipeline is run again; finished runs are skipped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from evolution.config import TrainConfig
from evolution.training import evaluate, fairseq_cli, recipe, vocab

logger = logging.getLogger(__name__)

__all__ = ["TrainingPaths", "prepare_data", "initial_encoder", "train_run", "evaluate_runs"]

_UPDATES = re.compile(r'"num_updates":\s*"?(\d+)')


class TrainingPaths:
    """Where everything of one training directory lives."""

    def __init__(self, root: Path, languages: tuple[str, str]):
        self.root = Path(root)
        self.src, self.tgt = languages
        self.text = self.root / "text"
        self.spm_dir = self.root / "spm"
        self.spm_model = self.spm_dir / "spm.model"
        self.dictionary = self.root / "dict.txt"
        self.bin_mt = self.root / "bin" / "mt"
        self.bin_mono = self.root / "bin" / self.src

    def data(self, objective: str) -> Path:
        return self.bin_mt if objective == "mt" else self.bin_mono

    def init(self, seed: int) -> Path:
        return self.root / "init" / f"encoder-seed{seed}.pt"

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / name

    def checkpoint(self, name: str) -> Path:
        return self.run_dir(name) / "checkpoint_last.pt"

    def kept(self, name: str, update: int) -> Path:
        """The checkpoint of run ``name`` kept at ``update`` (``train.checkpoints``)."""
        return self.run_dir(name) / "kept" / f"update-{update}.pt"


def prepare_data(paths: TrainingPaths, cfg: TrainConfig) -> dict:
    """SentencePiece on the training split of both sides, the dictionary, and binarised data.

    Idempotent: returns the recorded summary when ``prep.json`` exists.
    """
    done = paths.root / "prep.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    src, tgt = paths.src, paths.tgt
    model = vocab.train_sentencepiece(
        [paths.text / f"train.{src}", paths.text / f"train.{tgt}"], paths.spm_dir / "spm", vocab_size=cfg.vocab_size
    )
    counts: Counter = Counter()
    for split in ("train", "valid", "test"):
        for lang in (src, tgt):
            c = vocab.encode_file(model, paths.text / f"{split}.{lang}", paths.spm_dir / f"{split}.{lang}")
            if split == "train":
                counts.update(c)
    vocab.write_dictionary(model, counts, paths.dictionary)
    pref = {s: paths.spm_dir / s for s in ("train", "valid", "test")}
    vocab.binarize(
        dictionary=paths.dictionary,
        destdir=paths.bin_mt,
        trainpref=pref["train"],
        validpref=pref["valid"],
        testpref=pref["test"],
        source_lang=src,
        target_lang=tgt,
    )
    vocab.binarize(
        dictionary=paths.dictionary,
        destdir=paths.bin_mono,
        trainpref=pref["train"].with_suffix(f".{src}"),
        validpref=pref["valid"].with_suffix(f".{src}"),
        testpref=pref["test"].with_suffix(f".{src}"),
    )
    summary = {
        "vocab_size": cfg.vocab_size,
        "dictionary_size": 4 + sum(1 for _ in open(paths.dictionary)),
        "train_pieces": {
            lang: sum(len(line.split()) for line in open(paths.spm_dir / f"train.{lang}", encoding="utf-8"))
            for lang in (src, tgt)
        },
        "seconds": round(time.perf_counter() - t0, 1),
    }
    done.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    logger.info(
        "train: vocabulary of %d pieces, data binarised in %.0f s (%s)", cfg.vocab_size, summary["seconds"], paths.root
    )
    return summary


def _cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def initial_encoder(paths: TrainingPaths, cfg: TrainConfig, *, seed: int, languages: tuple[str, str]) -> Path:
    """The common initial encoder of ``seed`` (built once, from the MLM model's construction)."""
    out = paths.init(seed)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    args = [
        *recipe.task_args(cfg, "mlm", data=paths.data("mlm"), languages=languages),
        *recipe.encoder_args(cfg),
        "--seed",
        str(seed),
        "--cpu",
    ]
    tmp = out.with_suffix(".partial")
    fairseq_cli.run("init-encoder", [str(tmp), *args], threads=cfg.threads, what="building the initial encoder")
    os.replace(tmp, out)
    return out


def run_args(
    paths: TrainingPaths,
    cfg: TrainConfig,
    name: str,
    spec: dict,
    *,
    languages: tuple[str, str],
    updates: int | None = None,
) -> list[str]:
    """``fairseq-train``'s arguments for run ``name`` up to ``updates`` (default: the run's total)."""
    objective = spec["objective"]
    return recipe.train_args(
        cfg,
        objective=objective,
        data=paths.data(objective),
        languages=languages,
        updates=updates or getattr(cfg.updates, objective),
        seed=spec["seed"],
        save_dir=paths.run_dir(name),
        init_encoder=paths.init(spec["seed"]),
        token_dropout=spec["token_dropout"],
        cpu=_cpu(),
    )


def train_run(
    paths: TrainingPaths, cfg: TrainConfig, name: str, spec: dict, *, languages: tuple[str, str], progress: bool = True
) -> dict:
    """Run ``fairseq-train`` for one run (resuming from ``checkpoint_last.pt`` if there is one).

    With ``train.checkpoints`` the run stops at each kept update, saves the model there
    (:meth:`TrainingPaths.kept`) and resumes: fairseq seeds every update by its number and
    restores the data iterator, so the weights are those of one uninterrupted run
    (``tests/test_training.py``). Returns ``{"seconds", "updates", "resumed_from", "kept"}``;
    writes ``done.json`` on success.
    """
    run_dir = paths.run_dir(name)
    done = run_dir / "done.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    run_dir.mkdir(parents=True, exist_ok=True)
    objective = spec["objective"]
    total = getattr(cfg.updates, objective)
    resumed = _checkpoint_updates(paths.checkpoint(name))
    keep = cfg.kept_updates(objective)
    if resumed in keep and not paths.kept(name, resumed).is_file():  # stopped there, killed before keeping it
        _keep(paths.checkpoint(name), paths.kept(name, resumed))
    lost = [u for u in keep if u < resumed and not paths.kept(name, u).is_file()]
    if lost:
        logger.warning(
            "train %s: resuming at update %d, after the kept updates %s were passed without being "
            "kept; they are missing from its trajectory (delete %s to train it again)",
            name,
            resumed,
            lost,
            run_dir,
        )
    (run_dir / "args.json").write_text(
        json.dumps(run_args(paths, cfg, name, spec, languages=languages), indent=1), encoding="utf-8"
    )
    logger.info(
        "train %s: %s, %d updates%s%s",
        name,
        objective,
        total,
        f" (resuming at update {resumed})" if resumed else "",
        f", keeping the checkpoints at updates {keep}" if keep else "",
    )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=resumed, desc=f"train {name}", unit="update", leave=True)
    t0 = time.perf_counter()
    last = resumed
    try:
        for stop in [u for u in keep if u > resumed] + [total]:  # the last always runs: fairseq resumes, finishes
            args = run_args(paths, cfg, name, spec, languages=languages, updates=stop)
            last = _fairseq_train(
                args,
                run_dir=run_dir,
                name=name,
                threads=cfg.threads,
                bar=bar,
                last=last,
                done=lambda stop=stop: _checkpoint_updates(paths.checkpoint(name)) >= stop,
            )
            if stop < total:
                _keep(paths.checkpoint(name), paths.kept(name, stop))
    finally:
        if bar is not None:
            bar.close()
    result = {
        "seconds": round(time.perf_counter() - t0, 1),
        "updates": _checkpoint_updates(paths.checkpoint(name)),
        "resumed_from": resumed,
        "kept": [u for u in keep if paths.kept(name, u).is_file()],
    }
    done.write_text(json.dumps(result), encoding="utf-8")
    logger.info("train %s: %d updates in %.0f s", name, result["updates"], result["seconds"])
    return result


def _fairseq_train(args: list[str], *, run_dir: Path, name: str, threads: int, bar, last: int, done) -> int:
    """One ``fairseq-train`` process, its output appended to ``train.log``; returns the last update seen.

    A process that fails after fairseq said "done training" and ``done()`` (its checkpoint
    reached the stop) is taken as finished: a C++ runtime can abort at interpreter exit
    ("terminate called without an active exception") after every file was written."""
    with open(run_dir / "train.log", "a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            fairseq_cli.command("train", args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=fairseq_cli.environment(threads),
        )
        finished = False
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            log.write(line)
            finished = finished or "done training in" in line
            m = _UPDATES.search(line)
            if m:
                n = int(m.group(1))
                if bar is not None:
                    bar.update(max(0, n - last))
                last = max(last, n)
        rc = proc.wait()
    if rc != 0 and finished and done():
        logger.warning(
            "train %s: fairseq-train exited with status %d after finishing and saving its checkpoint "
            "(log: %s); continuing",
            name,
            rc,
            run_dir / "train.log",
        )
        return last
    if rc != 0:
        tail = (run_dir / "train.log").read_text(encoding="utf-8")[-3000:]
        raise RuntimeError(f"fairseq-train failed for run {name!r} (log: {run_dir / 'train.log'}):\n{tail}")
    return last


def _keep(checkpoint: Path, out: Path) -> None:
    """``checkpoint`` without its optimizer state, written to ``out`` (atomically)."""
    import torch

    state = torch.load(str(checkpoint), map_location="cpu", weights_only=False)
    state["last_optimizer_state"] = None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    torch.save(state, str(tmp))
    os.replace(tmp, out)


def _checkpoint_updates(path: Path) -> int:
    if not path.is_file():
        return 0
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=False)
    return int(state["optimizer_history"][-1]["num_updates"])


def evaluate_runs(paths: TrainingPaths, cfg: TrainConfig, runs: dict[str, dict], *, languages: tuple[str, str]) -> dict:
    """Perplexity (LM, MLM) with the unigram baseline, BLEU and chrF (MT), on the test split."""
    out: dict = {
        "unigram_ppl": evaluate.unigram_perplexity(
            paths.spm_dir / f"train.{paths.src}", paths.spm_dir / f"test.{paths.src}", vocab_size=cfg.vocab_size + 4
        )
    }
    refs = (paths.text / f"test.{paths.tgt}").read_text(encoding="utf-8").splitlines()
    for name, spec in runs.items():
        objective = spec["objective"]
        ckpt = paths.checkpoint(name)
        t0 = time.perf_counter()
        if objective == "mt":
            hyps = evaluate.translate(
                data=paths.data("mt"), checkpoint=ckpt, beam=cfg.beam, threads=cfg.threads, cpu=_cpu()
            )
            (paths.run_dir(name) / f"test.hyp.{paths.tgt}").write_text(
                "".join(h + "\n" for h in hyps), encoding="utf-8"
            )
            result = evaluate.bleu_chrf(hyps, refs)
        else:
            data = recipe.data_args(cfg, objective, data=paths.data(objective), languages=languages)
            result = {
                "ppl": evaluate.fairseq_perplexity(data_args=data, checkpoint=ckpt, threads=cfg.threads, cpu=_cpu())
            }
        result["seconds"] = round(time.perf_counter() - t0, 1)
        out[name] = result
        logger.info("evaluate %s: %s", name, ", ".join(f"{k} {v:.2f}" for k, v in result.items()))
    return out
