"""Trained models shipped as safetensors, loaded without unpickling (``kind: shipped``).

A fairseq checkpoint is a pickle: loading one can run code from the file. The
models this project ships (``results/bible-full/models/``) are therefore
stored as plain tensors and JSON, and :class:`ShippedAdapter` builds the
network from them with fairseq's own classes, never calling ``torch.load``
or ``pickle``. The analyses see the same :class:`~evolution.models.fairseq.FairseqAdapter`
interface (hooks, attention, norms, decoder, key masking).

Layout, as :func:`pack` writes it::

    <models>/vocab/dict.txt        the one fairseq dictionary of every run (``<mask>`` last)
    <models>/vocab/spm.model       the joint SentencePiece model
    <models>/<run>/model.safetensors   the weights (no optimizer state); tensors that share
                                   storage (MT's tied embeddings) are stored once
    <models>/<run>/model.json      the fairseq task and model arguments, the tied keys,
                                   the vocabulary directory (relative), provenance

``model.json`` holds no absolute path: the task's ``data`` and the plugin's
``init_encoder`` are dropped when packing (the weights are complete without
them) and the vocabulary is found relative to the model directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
from pathlib import Path

from evolution.models.base import ModelLoadError
from evolution.models.fairseq import FairseqAdapter

logger = logging.getLogger(__name__)

__all__ = ["ShippedAdapter", "pack", "pack_training", "FORMAT"]

#: version of the ``model.json`` layout
FORMAT = 1
WEIGHTS = "model.safetensors"
META = "model.json"
#: task / model arguments that name files of the machine that trained the model
_MACHINE_PATHS = {"data", "save_dir", "init_encoder", "user_dir", "tensorboard_logdir", "wandb_project",
                  "restore_file", "finetune_from_model", "log_file", "aim_repo", "plasma_path"}
_TASK_CLASSES = {"translation": "mt", "language_modeling": "lm", "masked_lm": "mlm"}


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack(checkpoint: str | Path, *, out: str | Path, vocabulary: str | Path, run: str | None = None,
         dtype: str = "float32") -> Path:
    """Write ``out/model.safetensors`` and ``out/model.json`` from a fairseq checkpoint of this
    project's plugin (or any ``translation`` / ``language_modeling`` / ``masked_lm`` model).

    ``vocabulary`` is the directory holding ``dict.txt`` and ``spm.model`` (see :func:`pack_training`);
    it is recorded relative to ``out``. ``dtype`` is ``float32`` (exact) or ``float16``.
    Reads the checkpoint with full unpickling: pack only checkpoints you trust (your own training).
    Returns ``out``.
    """
    import torch
    from safetensors.torch import save_file

    from evolution.nets.compat import import_fairseq, trusted_checkpoints

    import_fairseq()
    checkpoint, out, vocabulary = Path(checkpoint), Path(out), Path(vocabulary)
    with trusted_checkpoints():
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=False)
    cfg = state["cfg"]
    model_args = cfg["model"]
    model_args = vars(model_args) if isinstance(model_args, argparse.Namespace) else dict(model_args)
    task = {k: v for k, v in dict(cfg["task"]).items()}
    weights, tied, seen = {}, {}, {}
    cast = {"float32": torch.float32, "float16": torch.float16}[dtype]
    for key, tensor in state["model"].items():
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ptr in seen:
            tied[key] = seen[ptr]
            continue
        seen[ptr] = key
        weights[key] = (tensor.to(cast) if tensor.is_floating_point() else tensor).contiguous().clone()
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (WEIGHTS + ".partial")
    save_file(weights, str(tmp))
    tmp.replace(out / WEIGHTS)
    history = state.get("optimizer_history") or [{}]
    meta = {
        "format": FORMAT,
        "run": run or out.name,
        "objective": _objective_of(task.get("_name")),
        "task": _jsonable({k: v for k, v in task.items() if k not in _MACHINE_PATHS}),
        "model": _jsonable({k: v for k, v in model_args.items() if k not in _MACHINE_PATHS}),
        "tied": tied,
        "vocabulary": _relative(vocabulary, out),
        "dtype": dtype,
        "updates": int(history[-1].get("num_updates", 0)),
        "weights_sha256": _sha256(out / WEIGHTS),
    }
    (out / META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    logger.info("packed %s -> %s (%.1f MB, %d tensors, %d tied)", checkpoint, out,
                (out / WEIGHTS).stat().st_size / 1e6, len(weights), len(tied))
    return out


def _objective_of(task_name: str | None) -> str | None:
    return _TASK_CLASSES.get(task_name or "")


def _relative(target: Path, start: Path) -> str:
    import os

    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


def pack_training(train_dir: str | Path, *, out: str | Path, runs: list[str] | None = None,
                  dtype: str = "float32") -> list[Path]:
    """Pack every finished run of a training directory (``<workdir>/train/<key>``) into ``out``:
    ``out/vocab/{dict.txt,spm.model}`` once and ``out/<run>/`` per run (``checkpoint_last.pt``)."""
    train_dir, out = Path(train_dir), Path(out)
    names = runs or sorted(p.name for p in (train_dir / "runs").iterdir() if (p / "done.json").is_file())
    if not names:
        raise FileNotFoundError(f"{train_dir}/runs has no finished run (runs/<name>/done.json); train first")
    vocab = out / "vocab"
    vocab.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(train_dir / "dict.txt", vocab / "dict.txt")
    shutil.copyfile(train_dir / "spm" / "spm.model", vocab / "spm.model")
    return [pack(train_dir / "runs" / n / "checkpoint_last.pt", out=out / n, vocabulary=vocab, run=n, dtype=dtype)
            for n in names]


class ShippedAdapter(FairseqAdapter):
    """A model directory written by :func:`pack`: ``model.safetensors`` + ``model.json``.

    Parameters
    ----------
    path
        The model directory.
    name, objective
        As for :class:`~evolution.models.fairseq.FairseqAdapter` (default: the directory's name
        and the objective recorded in ``model.json``).
    """

    def __init__(self, path: str | Path, *, name: str | None = None, objective: str | None = None):
        path = Path(path)
        meta_path = path / META
        if not meta_path.is_file() or not (path / WEIGHTS).is_file():
            raise ModelLoadError(f"{path} is not a shipped model directory: it needs {META} and {WEIGHTS} "
                                 "(written by `python -m evolution.models.shipped`)")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ModelLoadError(f"{meta_path}: not valid JSON ({exc})") from exc
        if self.meta.get("format") != FORMAT:
            raise ModelLoadError(f"{meta_path}: format {self.meta.get('format')!r}, this version reads {FORMAT}")
        vocab = (path / self.meta["vocabulary"]).resolve()
        for f in ("dict.txt", "spm.model"):
            if not (vocab / f).is_file():
                raise ModelLoadError(f"{path}: the vocabulary file {vocab / f} named by {META} is missing")
        super().__init__(path, data=vocab, sentencepiece=vocab / "spm.model", name=name or path.name,
                         objective=objective or self.meta.get("objective"))

    def _load(self) -> None:
        """Build the task and the network from ``model.json``; weights from safetensors only."""
        from fairseq.data import Dictionary
        from fairseq.tasks import TASK_REGISTRY
        from omegaconf import OmegaConf
        from safetensors.torch import load_file

        from evolution.nets.compat import enable_head_weights, quiet

        meta = self.meta
        task_name = meta["task"]["_name"]
        if task_name not in _TASK_CLASSES:
            raise ModelLoadError(f"{self.path}: task {task_name!r} is not one of {sorted(_TASK_CLASSES)}")
        dictionary = Dictionary.load(str(self.data / "dict.txt"))
        with quiet():
            task_cfg = OmegaConf.create({**meta["task"], "data": str(self.data)})
            model_args = argparse.Namespace(**meta["model"])
            cls = TASK_REGISTRY[task_name]
            if task_name == "translation":
                task = cls(task_cfg, dictionary, dictionary)
            elif task_name == "language_modeling":
                task = cls(task_cfg, dictionary, dictionary, targets=["future"])
            else:
                task = cls(task_cfg, dictionary)
            model = task.build_model(model_args)
        weights = load_file(str(self.path / WEIGHTS))
        params = model.state_dict()
        weights = {k: v.to(params[k].dtype) if k in params else v for k, v in weights.items()}
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = meta.get("tied", {})
        untied = [k for k in missing if k not in tied]
        if untied or unexpected:
            raise ModelLoadError(f"{self.path}: the weights do not fit the model that {META} describes "
                                 f"(missing {untied[:5]}, unexpected {unexpected[:5]})")
        now = model.state_dict()
        for key, source in tied.items():  # the built model ties them itself; check it did
            if now[key].data_ptr() != now[source].data_ptr():
                now[key].copy_(now[source])
        enable_head_weights(model)
        self._task, self._model = task, model.eval()
        self.cfg = argparse.Namespace(task=task_cfg, model=model_args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolution.models.shipped",
                                     description="Pack the finished runs of a training directory as safetensors")
    parser.add_argument("train_dir", help="<workdir>/train/<key> of a finished training")
    parser.add_argument("out", help="directory to write (e.g. results/bible-full/models)")
    parser.add_argument("--runs", nargs="*", help="run names (default: every finished run)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    pack_training(args.train_dir, out=args.out, runs=args.runs, dtype=args.dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
