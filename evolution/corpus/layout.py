"""The corpus directory, ``<workdir>/corpus/<key>/``: its one writer and reader.

::

    sentences.txt                the analysed sentences, one per line: the main text,
                                 then the annotated text (if any)
    meta.json                    counts, provenance, the 1-based source line of each
                                 analysed sentence (``lines``)
    annotation.json              gold labels of the annotated sentences (``first``: the
                                 corpus index of the first one); read by extraction, which
                                 writes them into the representation store
    text/{train,valid,test}.<lang>   parallel sources: the split text (training data)
    text/analysed.<tgt>          parallel sources: the target side of the analysed sentences
    refs/<split>.txt             parallel sources: the reference (book, chapter, verse) of each pair
    done.json                    written last: ``{"key": ...}``

:func:`read_source` reads and checks everything before anything is written
(bad input fails with nothing half-written); :func:`write` fills a fresh
directory that the caller moves into place.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolution.config import CorpusConfig, resolved_dict
from evolution.corpus.text import Corpus, read_text_corpus
from evolution.provenance import file_hash, versions

logger = logging.getLogger(__name__)

__all__ = ["SourceText", "read_source", "write", "load", "load_annotation", "load_targets", "is_done"]


@dataclass
class SourceText:
    """What :func:`read_source` read: the main text (a plain or a split parallel corpus)
    and the annotated treebank, if any."""

    config: CorpusConfig
    plain: Corpus | None = None
    parallel: Any = None  # evolution.corpus.parallel.ParallelCorpus
    splits: dict[str, list[int]] | None = None
    treebank: list | None = None  # [TreebankSentence]
    meta: dict[str, Any] = field(default_factory=dict)


def read_source(cfg: CorpusConfig, *, seed: int, inputs: dict[str, str]) -> SourceText:
    """Read (and validate) the configured corpus; a parallel one is length-filtered
    and split by whole groups with ``seed``. ``inputs`` (file -> hash) is provenance."""
    out = SourceText(
        config=cfg,
        meta={
            "inputs": inputs,
            "config": resolved_dict(cfg),
            "versions": versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    )
    if cfg.source == "text":
        out.plain = read_text_corpus(_path(cfg), max_sentences=cfg.max_sentences)
        out.meta.update(source=out.plain.source, source_sha256=file_hash(out.plain.source))
    else:
        out.parallel, out.splits = _read_parallel(cfg, seed=seed)
    if cfg.annotated is not None:
        from evolution.corpus.conllu import read_conllu, resolve_treebank

        out.treebank = read_conllu(resolve_treebank(cfg.annotated), max_sentences=cfg.annotated_sentences)
        logger.info(
            "corpus: annotated text %s: %d sentences, %d words",
            cfg.annotated,
            len(out.treebank),
            sum(len(t) for t in out.treebank),
        )
    return out


def _read_parallel(cfg: CorpusConfig, *, seed: int):
    from evolution.corpus.parallel import (
        filter_length_ratio,
        read_bible,
        read_parallel_text,
        read_parallel_tsv,
        split_corpus,
    )

    if cfg.source == "bible":
        corpus = read_bible(cfg.sword_root, source_module=cfg.modules[0], target_module=cfg.modules[1])
    elif cfg.target_path is not None:
        corpus = read_parallel_text(_path(cfg), cfg.target_path, block_lines=cfg.split.block_lines)
    else:
        cols = cfg.columns or {}
        corpus = read_parallel_tsv(
            _path(cfg),
            source_column=cols["source"],
            target_column=cols["target"],
            ref_column=cols.get("ref"),
            group_column=cols.get("group"),
            block_lines=cfg.split.block_lines,
        )
    corpus = filter_length_ratio(corpus, max_ratio=cfg.max_length_ratio)
    valid, test = cfg.split.valid, cfg.split.test
    if valid is None or test is None:  # CorpusConfig's validation fills in the defaults
        raise ValueError("corpus.split.valid and corpus.split.test must be set (group names or fractions)")
    return corpus, split_corpus(corpus, valid=valid, test=test, seed=seed)


def _path(cfg: CorpusConfig) -> Path:
    """``corpus.path``, which text and parallel sources need (CorpusConfig's validation checks it)."""
    if cfg.path is None:
        raise ValueError(f"corpus.source is {cfg.source!r} but corpus.path is missing")
    return cfg.path


def write(directory: Path, source: SourceText, *, key: str) -> int:
    """Fill the empty ``directory`` with the layout above; ``done.json`` last.
    Returns the number of sentences to analyse."""
    meta = {"key": key, **source.meta}
    if source.plain is not None:
        sentences, lines = source.plain.sentences, source.plain.lines
    else:
        sentences, lines = _write_parallel(directory, source, meta)
    if source.treebank is not None:
        meta["annotated"] = _write_annotation(directory, source.treebank, first=len(sentences))
        sentences = sentences + [t.text for t in source.treebank]
        lines = lines + [t.line for t in source.treebank]
    (directory / "sentences.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    meta.update(n_sentences=len(sentences), lines=lines)
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    (directory / "done.json").write_text(json.dumps({"key": key}), encoding="utf-8")
    return len(sentences)


def _write_annotation(directory: Path, treebank, *, first: int) -> dict:
    """``annotation.json``: per annotated sentence its words' labels; they are corpus
    sentences ``first ...`` (after the main text)."""
    doc = {
        "first": first,
        "n_sentences": len(treebank),
        "sentences": [{"upos": t.upos, "xpos": t.xpos, "deprel": t.deprel, "head": t.head} for t in treebank],
    }
    (directory / "annotation.json").write_text(json.dumps(doc), encoding="utf-8")
    return {"first": first, "n_sentences": len(treebank), "n_words": sum(len(t) for t in treebank)}


def _write_parallel(directory: Path, source: SourceText, meta: dict) -> tuple[list[str], list[int]]:
    from evolution.corpus.parallel import SPLITS

    c, corpus, splits = source.config, source.parallel, source.splits
    assert splits is not None  # read_source splits every parallel corpus
    (directory / "text").mkdir()
    (directory / "refs").mkdir()
    src, tgt = c.languages
    counts: dict[str, dict[str, Any]] = {}
    for name in SPLITS:
        idx = splits[name]
        (directory / "text" / f"{name}.{src}").write_text(
            "".join(corpus.source[i] + "\n" for i in idx), encoding="utf-8"
        )
        (directory / "text" / f"{name}.{tgt}").write_text(
            "".join(corpus.target[i] + "\n" for i in idx), encoding="utf-8"
        )
        (directory / "refs" / f"{name}.txt").write_text("".join(corpus.refs[i] + "\n" for i in idx), encoding="utf-8")
        groups = list(dict.fromkeys(corpus.groups[i] for i in idx))
        counts[name] = {
            "pairs": len(idx),
            "groups": len(groups),
            "source_words": sum(len(corpus.source[i].split()) for i in idx),
            "target_words": sum(len(corpus.target[i].split()) for i in idx),
        }
        if name != "train":
            counts[name]["group_names"] = groups
        logger.info(
            "corpus: %s split: %d pairs in %d groups, %d %s / %d %s words",
            name,
            len(idx),
            len(groups),
            counts[name]["source_words"],
            src,
            counts[name]["target_words"],
            tgt,
        )
    pool = sorted(i for name in SPLITS for i in splits[name]) if c.analyse == "all" else splits[c.analyse]
    analysed = pool[: c.max_sentences] if c.max_sentences else pool
    meta.update(
        source=corpus.origin,
        filter=corpus.stats,
        splits=counts,
        analysed_split=c.analyse,
        languages=[src, tgt],
        refs=[corpus.refs[i] for i in analysed],
    )
    # the target side of the analysed sentences, line by line (decoder heads)
    (directory / "text" / f"analysed.{tgt}").write_text(
        "".join(corpus.target[i] + "\n" for i in analysed), encoding="utf-8"
    )
    # `lines`: 1-based position of each analysed sentence in the analysed list (its split, or the corpus)
    return [corpus.source[i] for i in analysed], list(range(1, len(analysed) + 1))


def is_done(directory: Path) -> bool:
    return (directory / "done.json").is_file()


def load(directory: Path) -> Corpus:
    """The analysed sentences of a written corpus directory."""
    meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    sentences = (directory / "sentences.txt").read_text(encoding="utf-8").splitlines()
    return Corpus(sentences=sentences, lines=meta["lines"], source=str(directory / "sentences.txt"))


def load_annotation(directory: Path) -> dict | None:
    """``annotation.json`` (None when nothing is annotated): ``first`` and per sentence
    ``upos``, ``xpos``, ``deprel``, ``head`` word by word."""
    f = directory / "annotation.json"
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None


@dataclass(frozen=True)
class Targets:
    """The target side of a parallel corpus directory: ``sentences[i]`` translates analysed
    sentence ``i`` (the main text only; annotated sentences have none), ``training_text``
    the target side of the training split (for frequencies)."""

    sentences: list[str]
    training_text: Path
    language: str

    @property
    def digest(self) -> str:
        """A short hash of ``sentences``: what units that read the reference translations key on."""
        import hashlib

        return hashlib.sha256("\n".join(self.sentences).encode()).hexdigest()[:16]


def load_targets(directory: Path) -> Targets | None:
    """The target side of the analysed sentences (None for a plain-text corpus)."""
    meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    if "analysed_split" not in meta:
        return None
    tgt = (meta.get("languages") or meta["config"]["languages"])[1]
    n_main = meta.get("annotated", {}).get("first", meta["n_sentences"])
    analysed = directory / "text" / f"analysed.{tgt}"
    if analysed.is_file():
        sentences = analysed.read_text(encoding="utf-8").splitlines()[:n_main]
    else:  # corpus directories written before analysed.<tgt>: the split file, by line
        lines = (directory / "text" / f"{meta['analysed_split']}.{tgt}").read_text(encoding="utf-8").splitlines()
        sentences = [lines[i - 1] for i in meta["lines"][:n_main]]
    return Targets(sentences=sentences, training_text=directory / "text" / f"train.{tgt}", language=tgt)
