"""Trained models shipped as safetensors, loaded without unpickling (``kind: shipped``).

A fairseq checkpoint is a pickle: loading one can run code from the file. The
models this project ships (``results/bible-full/models/``) are therefore
stored as plain tensors and JSON, and :class:`ShippedAdapter` builds the
network from them with fairseq's own classes, never calling ``torch.load``
or ``pickle``. The analyses see the same :class:`~evolution.models.fairseq.FairseqAdapter`
interface (hooks, attention, norms, decoder, key masking).

Layout, as :func:`pack` writes it::

    <models>/vocab/dict.txt        the one fairseq dictionary of every run (``<mask>`` last)
    <models>/vocab/spm.model       the joint SentencePiece model (its trainer's input and output
                                   file names removed: they name the training machine's paths)
    <models>/<run>/model.safetensors   the weights (no optimizer state); tensors that share
                                   storage (MT's tied embeddings) are stored once
    <models>/<run>/model.json      the fairseq task and model arguments, the tied keys,
                                   the vocabulary directory (relative), provenance

``model.json`` holds no absolute path: the task's ``data`` and the plugin's
``init_encoder`` are dropped when packing (the weights are complete without
them) and the vocabulary is found relative to the model directory. It records
the run (:func:`run_spec`: objective, seed, input token dropout) and the
SHA-256 of the training split's source text, so that a pipeline analysing the
model on the same corpus ranks token frequencies by the training split, as for
``kind: trained``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

from evolution.models.base import ModelLoadError
from evolution.provenance import file_hash

logger = logging.getLogger(__name__)

__all__ = [
    "pack",
    "pack_training",
    "run_spec",
    "scrub_sentencepiece",
    "shipped_vocabulary",
    "training_text_hash",
    "read_shipped",
    "FORMAT",
]

#: version of the ``model.json`` layout
FORMAT = 1
WEIGHTS = "model.safetensors"
META = "model.json"
#: task / model arguments that name files of the machine that trained the model
_MACHINE_PATHS = {
    "data",
    "save_dir",
    "init_encoder",
    "user_dir",
    "tensorboard_logdir",
    "wandb_project",
    "restore_file",
    "finetune_from_model",
    "log_file",
    "aim_repo",
    "plasma_path",
}
_TASK_CLASSES = {"translation": "mt", "language_modeling": "lm", "masked_lm": "mlm"}


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b, value = value & 0x7F, value >> 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes):
    """``(field number, wire type, raw bytes of the whole field, payload)`` of a protobuf message."""
    i = 0
    while i < len(data):
        start = i
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, i = _varint(data, i)
            payload = b""
        elif wire == 1:
            i += 8
            payload = b""
        elif wire == 2:
            n, i = _varint(data, i)
            payload, i = data[i : i + n], i + n
        elif wire == 5:
            i += 4
            payload = b""
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, data[start:i], payload


def scrub_sentencepiece(source: str | Path, dest: str | Path) -> Path:
    """Copy a SentencePiece model without the file names its trainer recorded (``TrainerSpec``
    fields ``input`` and ``model_prefix``: paths of the training machine). Pieces, scores and
    normalisation are untouched, so the copy segments text exactly as the original.
    A plain wire-format edit of ``ModelProto`` field 2 (no protobuf package needed)."""
    data = Path(source).read_bytes()
    out = bytearray()
    for number, wire, raw, payload in _fields(data):
        if number == 2 and wire == 2:  # ModelProto.trainer_spec
            spec = b"".join(r for n, _, r, _ in _fields(payload) if n not in (1, 2))  # input, model_prefix
            out += _encode_varint((2 << 3) | 2) + _encode_varint(len(spec)) + spec
        else:
            out += raw
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".partial")
    tmp.write_bytes(bytes(out))
    tmp.replace(dest)
    return dest


def run_spec(path: str | Path) -> dict:
    """``{objective, seed, token_dropout}`` of a shipped model directory, from ``model.json``
    alone (no torch): what the scorecard needs to tell base models, seed replicates and
    token-dropout controls apart."""
    meta = json.loads((Path(path) / META).read_text(encoding="utf-8"))
    model = meta.get("model", {})
    return {
        "objective": meta.get("objective"),
        "seed": int(model.get("seed", 0)),
        "token_dropout": float(model.get("input_token_dropout", 0.0) or 0.0),
    }


#: test scores of the models of one directory, beside them (``results/bible-full/evaluate_shipped.py``)
SCORES = "scores.json"


def shipped_summary(models: dict[str, str | Path]) -> dict | None:
    """What the report's "Trained models" table shows for shipped models (``name -> directory``),
    in the train stage's ``eval.json`` layout: ``runs`` (:func:`run_spec`), ``timings`` (the
    update count of ``model.json``) and ``evaluation``: the model's entry in ``scores.json``
    beside its directory, only where the entry's ``weights_sha256`` is the model's (scores of
    other weights are left out, with a warning). None for no models."""
    if not models:
        return None
    runs, timings, evaluation = {}, {}, {}
    for name, path in models.items():
        path = Path(path)
        meta = json.loads((path / META).read_text(encoding="utf-8"))
        runs[name] = run_spec(path)
        timings[name] = {"updates": meta.get("updates")}
        scores_path = path.parent / SCORES
        scores = json.loads(scores_path.read_text(encoding="utf-8")).get(path.name) if scores_path.is_file() else None
        if scores is None:
            continue
        if scores.get("weights_sha256") != meta.get("weights_sha256"):
            logger.warning(
                "%s: the scores of %s are of other weights than %s (weights_sha256 differs); they are "
                "left out of the report: score the model again",
                scores_path,
                path.name,
                path / WEIGHTS,
            )
            continue
        evaluation[name] = {k: scores[k] for k in ("ppl", "bleu", "chrf") if k in scores}
    return {"runs": runs, "timings": timings, "evaluation": evaluation, "shipped": True}


def read_shipped(path: str | Path) -> tuple[dict, Path]:
    """``(model.json, the vocabulary directory)`` of a shipped model directory, checked: both
    files there, valid JSON of this :data:`FORMAT`, the vocabulary's ``dict.txt`` and
    ``spm.model`` present; :class:`ModelLoadError` naming the file otherwise. Both adapters of
    ``kind: shipped`` (plain PyTorch and fairseq) read a directory through it."""
    path = Path(path)
    meta_path = path / META
    if not meta_path.is_file() or not (path / WEIGHTS).is_file():
        raise ModelLoadError(
            f"{path} is not a shipped model directory: it needs {META} and {WEIGHTS} "
            "(written by `python -m evolution.models.shipped_format`)"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{meta_path}: not valid JSON ({exc})") from exc
    if meta.get("format") != FORMAT:
        raise ModelLoadError(f"{meta_path}: format {meta.get('format')!r}, this version reads {FORMAT}")
    vocab = (path / meta["vocabulary"]).resolve()
    for f in ("dict.txt", "spm.model"):
        if not (vocab / f).is_file():
            raise ModelLoadError(f"{path}: the vocabulary file {vocab / f} named by {META} is missing")
    return meta, vocab


def shipped_vocabulary(path: str | Path) -> Path:
    """The vocabulary directory (``dict.txt``, ``spm.model``) that ``model.json`` names."""
    meta = json.loads((Path(path) / META).read_text(encoding="utf-8"))
    return (Path(path) / meta["vocabulary"]).resolve()


def training_text_hash(path: str | Path) -> str | None:
    """The SHA-256 of the training split's source text recorded in ``model.json`` (None if not)."""
    meta = json.loads((Path(path) / META).read_text(encoding="utf-8"))
    return meta.get("training_text_sha256")


def pack(
    checkpoint: str | Path,
    *,
    out: str | Path,
    vocabulary: str | Path,
    run: str | None = None,
    dtype: str = "float32",
    training_text: str | Path | None = None,
) -> Path:
    """Write ``out/model.safetensors`` and ``out/model.json`` from a fairseq checkpoint of this
    project's plugin (or any ``translation`` / ``language_modeling`` / ``masked_lm`` model).

    ``vocabulary`` is the directory holding ``dict.txt`` and ``spm.model`` (see :func:`pack_training`);
    it is recorded relative to ``out``. ``dtype`` is ``float32`` (exact) or ``float16``.
    ``training_text``: the training split's source side, whose SHA-256 is recorded.
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
    task = dict(cfg["task"])
    weights: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}  # a weight tied to another -> the stored one
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}  # (storage, offset, shape) -> its first key
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
        "weights_sha256": file_hash(out / WEIGHTS),
    }
    if training_text is not None:
        meta["training_text_sha256"] = file_hash(training_text)
    (out / META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    logger.info(
        "packed %s -> %s (%.1f MB, %d tensors, %d tied)",
        checkpoint,
        out,
        (out / WEIGHTS).stat().st_size / 1e6,
        len(weights),
        len(tied),
    )
    return out


def _objective_of(task_name: str | None) -> str | None:
    return _TASK_CLASSES.get(task_name or "")


def _relative(target: Path, start: Path) -> str:
    import os

    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


def pack_training(
    train_dir: str | Path, *, out: str | Path, runs: list[str] | None = None, dtype: str = "float32"
) -> list[Path]:
    """Pack every finished run of a training directory (``<workdir>/train/<key>``) into ``out``:
    ``out/vocab/{dict.txt,spm.model}`` once and ``out/<run>/`` per run (``checkpoint_last.pt``)."""
    train_dir, out = Path(train_dir), Path(out)
    names = runs or sorted(p.name for p in (train_dir / "runs").iterdir() if (p / "done.json").is_file())
    if not names:
        raise FileNotFoundError(f"{train_dir}/runs has no finished run (runs/<name>/done.json); train first")
    vocab = out / "vocab"
    vocab.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(train_dir / "dict.txt", vocab / "dict.txt")
    scrub_sentencepiece(train_dir / "spm" / "spm.model", vocab / "spm.model")
    # the source language is the one binarised for LM / MLM beside the MT data (trainer.TrainingPaths)
    mono = (
        [p.name for p in (train_dir / "bin").iterdir() if p.is_dir() and p.name != "mt"]
        if (train_dir / "bin").is_dir()
        else []
    )
    text = train_dir / "text" / f"train.{mono[0]}" if len(mono) == 1 else None
    text = text if text is not None and text.is_file() else None
    return [
        pack(
            train_dir / "runs" / n / "checkpoint_last.pt",
            out=out / n,
            vocabulary=vocab,
            run=n,
            dtype=dtype,
            training_text=text,
        )
        for n in names
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evolution.models.shipped_format",
        description="Pack the finished runs of a training directory as safetensors",
    )
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
