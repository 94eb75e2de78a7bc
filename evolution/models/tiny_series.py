"""A checkpoint series trained offline (the fixture for analyses over training time, as Pythia
publishes them): tiny GPT-2 (causal LM) and BERT (masked LM) models trained from scratch on the
Genesis text shipped with the package.

* :func:`train_series` writes ``out/step<N>/`` for N = 0, ``every``, 2 ``every``, ... ``steps``:
  ``save_pretrained`` directories (``config.json`` with ``architectures`` ``GPT2LMHeadModel`` /
  ``BertForMaskedLM``, ``model.safetensors``, tokenizer files) plus ``trainer_state.json``
  (``{"global_step": N, ...}`` as the Trainer writes it), and ``out/losses.json`` (per step).
* :func:`to_hub_cache` lays such directories out as revisions of one model repository in the
  ``huggingface_hub`` cache, so that ``snapshot_download(repo_id, revision="step50",
  local_files_only=True)`` (and :func:`evolution.models.hub.resolve`) find them offline.

Tokens are whitespace words with punctuation split off (the tokenizer's pre-tokenizer does it,
so the adapter's offsets still map each piece to its whitespace word); the ``max_vocab`` most
frequent ones form a word-level vocabulary after the special tokens, the rest map to the unknown
token. Each sentence is one training sequence: BERT ``[CLS] w1 .. wn [SEP]``, GPT-2
``w1 .. wn <|endoftext|>``, truncated to ``max_positions`` tokens in all (the model's position
limit, so every position it has is trained; the adapter truncates longer input to it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Literal

import numpy as np

from evolution.models.random_init import SPECIALS, _hf_tokenizer, vocabulary_of

__all__ = ["train_series", "to_hub_cache", "GENESIS"]

logger = logging.getLogger(__name__)

#: the English Genesis text shipped with the package (1,533 verses, one a line)
GENESIS = Path(__file__).resolve().parent.parent / "data" / "web-genesis.en.txt"


def _build(arch: str, sentences: list[str], *, max_vocab: int, layers: int, d_model: int, heads: int,
           max_positions: int, dropout: float):
    """The tokenizer and the freshly initialised model (call with the torch seed already set)."""
    import transformers as tf
    from tokenizers import pre_tokenizers as pt

    pre = pt.Sequence([pt.WhitespaceSplit(), pt.Punctuation()])
    split = [" ".join(piece for piece, _ in pre.pre_tokenize_str(s)) for s in sentences]
    # one id per word in both families, so that a GPT-2 and a BERT series tokenise a text alike and
    # the trajectory can compare them at the same step (similarity between series)
    tokenizer, vocab = _hf_tokenizer(vocabulary_of(split, max_size=max_vocab), arch, shared_ids=True)
    tokenizer.backend_tokenizer.pre_tokenizer = pre
    n, pad = len(vocab), vocab[tokenizer.pad_token]
    if arch == "bert":
        config = tf.BertConfig(vocab_size=n, hidden_size=d_model, num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=4 * d_model,
                               max_position_embeddings=max_positions, pad_token_id=pad,
                               hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        model = tf.BertForMaskedLM(config)
    elif arch == "gpt2":
        eos = vocab["<|endoftext|>"]
        config = tf.GPT2Config(vocab_size=n, n_embd=d_model, n_layer=layers, n_head=heads, n_inner=4 * d_model,
                               n_positions=max_positions, pad_token_id=pad, bos_token_id=eos, eos_token_id=eos,
                               resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
        model = tf.GPT2LMHeadModel(config)
    else:
        raise ValueError(f"unknown arch {arch!r}; use gpt2 or bert")
    return tokenizer, model


def _encode(tokenizer, arch: str, sentences: list[str], max_len: int) -> list[list[int]]:
    """Each sentence's training sequence: ``[CLS] content [SEP]`` / ``content <|endoftext|>``."""
    ids = tokenizer(sentences, add_special_tokens=False)["input_ids"]
    if arch == "bert":
        return [[tokenizer.cls_token_id, *x[:max_len - 2], tokenizer.sep_token_id] for x in ids]
    return [[*x[:max_len - 1], tokenizer.eos_token_id] for x in ids]


def _batch(seqs: list[list[int]], pad: int):
    """Right-padded ids and attention mask, both int64 ``(B, T)``."""
    t = max(len(s) for s in seqs)
    ids = np.full((len(seqs), t), pad, dtype=np.int64)
    mask = np.zeros((len(seqs), t), dtype=np.int64)
    for b, s in enumerate(seqs):
        ids[b, :len(s)], mask[b, :len(s)] = s, 1
    return ids, mask


def _mask_tokens(ids: np.ndarray, *, rng: np.random.Generator, special: np.ndarray, mask_id: int,
                 ordinary: tuple[int, int], p: float = 0.15):
    """BERT's corruption of ``ids`` ``(B, T)``: ``p`` of the ordinary tokens (never a special id)
    are chosen, of which 80 % become ``[MASK]``, 10 % a random ordinary id, 10 % stay. Returns the
    corrupted ids and the labels (the original id where chosen, -100 elsewhere)."""
    chosen = (rng.random(ids.shape) < p) & ~np.isin(ids, special)
    if not chosen.any():  # a loss needs one target at least
        cand = np.argwhere(~np.isin(ids, special))
        chosen[tuple(cand[rng.integers(len(cand))])] = True
    labels = np.where(chosen, ids, -100)
    u = rng.random(ids.shape)
    out = np.where(chosen & (u < 0.8), mask_id, ids)
    swap = chosen & (u >= 0.8) & (u < 0.9)
    out = np.where(swap, rng.integers(ordinary[0], ordinary[1], size=ids.shape), out)
    return out, labels


def _save(model, tokenizer, directory: Path, *, step: int, steps: int, loss: float | None) -> Path:
    from transformers.utils import logging as hf_logging

    directory.mkdir(parents=True, exist_ok=True)
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" at every save
    model.save_pretrained(directory, safe_serialization=True)
    if bar:
        hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(directory)
    state = {"global_step": step, "max_steps": steps, "loss": loss}
    (directory / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    return directory


def train_series(out: str | Path, *, arch: Literal["gpt2", "bert"], steps: int = 300, every: int = 50,
                 seed: int = 0, layers: int = 2, d_model: int = 32, heads: int = 4, batch_size: int = 32,
                 lr: float = 5e-3, warmup: float = 0.1, max_vocab: int = 1000, max_positions: int = 96,
                 dropout: float = 0.0, sentences: list[str] | None = None) -> dict[int, Path]:
    """Train a ``layers``-layer model from scratch and save it at step 0 and every ``every`` steps.

    ``sentences`` (default: the lines of :data:`GENESIS`) are shuffled each epoch by a numpy
    Generator seeded with ``seed`` (which also draws BERT's masks), cut into batches of
    ``batch_size``; AdamW (betas 0.9, 0.98; weight decay 0.01 on matrices; gradient norm clipped
    at 1), ``lr`` reached linearly over the first ``warmup`` fraction of ``steps``, then decayed
    linearly to 0. GPT-2: next-token loss on every token; BERT: masked-LM loss on the chosen 15 %.
    The same arguments give bit-identical weights (torch is seeded inside ``fork_rng``, so the
    caller's RNG state is left as it was). ``max_vocab`` words plus the special tokens.

    Returns ``{step: out/step<step>}``; also writes ``out/losses.json`` (``steps`` floats). The
    ``step<N>`` directories of an earlier call in ``out`` are removed first.
    """
    import torch

    if steps < 1 or every < 1:
        raise ValueError("steps and every must be positive")
    if sentences is None:
        sentences = [ln.strip() for ln in GENESIS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stale = sorted(p for p in out.glob("step*") if p.is_dir() and p.name[4:].isdigit())
    if stale:  # an earlier series here: replaced whole, so that no step of it joins this one
        logger.info("%s: replacing the earlier series (%d steps)", out, len(stale))
        for p in stale:
            shutil.rmtree(p)
    rng = np.random.default_rng(seed)
    saved: dict[int, Path] = {}
    losses: list[float] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokenizer, model = _build(arch, sentences, max_vocab=max_vocab, layers=layers, d_model=d_model,
                                  heads=heads, max_positions=max_positions, dropout=dropout)
        seqs = [s for s in _encode(tokenizer, arch, sentences, max_positions) if len(s) > 1 + (arch == "bert")]
        special = np.array(sorted(tokenizer.all_special_ids), dtype=np.int64)
        # every family's specials come first in the vocabulary (shared ids), the words after them
        ordinary = (len(dict.fromkeys(t for f in SPECIALS.values() for t in f)), len(tokenizer))
        params = list(model.parameters())
        opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.01},
                                 {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                                lr=lr, betas=(0.9, 0.98))
        n_warm = max(1, int(warmup * steps))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / n_warm, max(0.0, (steps - s) / max(1, steps - n_warm))))
        saved[0] = _save(model, tokenizer, out / "step0", step=0, steps=steps, loss=None)
        model.train()
        order: list[int] = []
        for step in range(1, steps + 1):
            if len(order) < batch_size:
                order += rng.permutation(len(seqs)).tolist()
            idx, order = order[:batch_size], order[batch_size:]
            ids, mask = _batch([seqs[i] for i in idx], tokenizer.pad_token_id)
            if arch == "bert":
                ids, labels = _mask_tokens(ids, rng=rng, special=special, mask_id=tokenizer.mask_token_id,
                                           ordinary=ordinary)
            else:
                labels = np.where(mask == 1, ids, -100)
            loss = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         labels=torch.from_numpy(labels)).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if step % every == 0 or step == steps:
                recent = losses[-(step - max(saved)):]
                logger.info("%s step %d/%d: mean loss %.3f", arch, step, steps, sum(recent) / len(recent))
                saved[step] = _save(model, tokenizer, out / f"step{step}", step=step, steps=steps, loss=losses[-1])
    (out / "losses.json").write_text(json.dumps(losses) + "\n", encoding="utf-8")
    return saved


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def to_hub_cache(cache: str | Path, *, repo_id: str, revisions: dict[str, Path]) -> Path:
    """Write ``revisions`` (revision name -> model directory) as one model repository of the
    ``huggingface_hub`` cache under ``cache``; returns ``cache/models--{org}--{name}``, holding

    * ``blobs/<sha256>``: each distinct file once (content-addressed);
    * ``snapshots/<commit>/<file>``: relative symlinks to the blobs (copies where symlinks fail);
      ``<commit>`` is 40 hex digits, the sha1 of the revision name and its files' names and hashes,
      so the same input gives the same layout;
    * ``refs/<revision>``: that commit id (no newline: huggingface_hub reads the file verbatim),
      and ``refs/main``: the last revision's.

    Top-level files of each directory are taken; an existing layout is updated in place.
    """
    if not revisions:
        raise ValueError("no revisions to write")
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    commit = ""
    for revision, directory in revisions.items():
        files = sorted(f for f in Path(directory).iterdir() if f.is_file())
        hashes = {f.name: _sha256(f) for f in files}
        manifest = revision + "\n" + "".join(f"{name} {sha}\n" for name, sha in hashes.items())
        commit = hashlib.sha1(manifest.encode("utf-8")).hexdigest()
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for f in files:
            blob = repo / "blobs" / hashes[f.name]
            if not blob.exists():
                shutil.copyfile(f, blob)
            link = snapshot / f.name
            if link.is_symlink() or link.exists():
                link.unlink()
            try:
                link.symlink_to(os.path.relpath(blob, snapshot))
            except OSError:  # no symlinks (Windows without developer mode)
                shutil.copyfile(blob, link)
        (repo / "refs" / revision).write_text(commit, encoding="utf-8")
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    return repo


def main(argv: list[str] | None = None) -> int:
    """``python -m evolution.models.tiny_series OUT --arch gpt2``: train a tiny model from scratch
    on the shipped Genesis text and save ``OUT/step<N>/`` every ``--every`` steps; with
    ``--hub-cache DIR`` also lay the series out as revisions ``step<N>`` of ``--repo-id`` there."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m evolution.models.tiny_series", description=main.__doc__)
    p.add_argument("out")
    p.add_argument("--arch", choices=["gpt2", "bert"], required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hub-cache", help="a huggingface_hub cache directory to write the series into")
    p.add_argument("--repo-id", help="the repository id in --hub-cache (default local/tiny-<arch>)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    series = train_series(args.out, arch=args.arch, steps=args.steps, every=args.every, seed=args.seed)
    for step, directory in series.items():
        print(f"step {step}: {directory}")
    if args.hub_cache:
        repo_id = args.repo_id or f"local/tiny-{args.arch}"
        repo = to_hub_cache(args.hub_cache, repo_id=repo_id,
                            revisions={f"step{s}": d for s, d in series.items()})
        print(f"{repo_id}: revisions step0..step{max(series)} in {repo}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
