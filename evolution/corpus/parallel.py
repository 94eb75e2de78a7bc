"""Parallel corpora: sentence pairs, the length-ratio filter and the train/valid/test split.

A :class:`ParallelCorpus` comes from two line-aligned text files, a TSV, or
two SWORD Bible modules (:mod:`evolution.corpus.sword`). Every pair carries
a reference (``Gen.1.1`` or the 1-based line number) and a *group*: the unit
the split keeps whole. For the Bible the group is the book (no verse of a
test book is seen in training); for plain files it is a block of
``block_lines`` consecutive lines, so a document is not cut across splits.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evolution.corpus.text import CorpusError

logger = logging.getLogger(__name__)

__all__ = [
    "ParallelCorpus",
    "read_parallel_text",
    "read_parallel_tsv",
    "read_bible",
    "filter_length_ratio",
    "split_corpus",
    "SPLITS",
]

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class ParallelCorpus:
    """Aligned ``source[i]`` / ``target[i]`` with reference ``refs[i]`` and split group ``groups[i]``."""

    source: list[str]
    target: list[str]
    refs: list[str]
    groups: list[str]
    origin: str
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.source)

    def subset(self, keep: Sequence[int]) -> ParallelCorpus:
        return ParallelCorpus(
            source=[self.source[i] for i in keep],
            target=[self.target[i] for i in keep],
            refs=[self.refs[i] for i in keep],
            groups=[self.groups[i] for i in keep],
            origin=self.origin,
            stats=dict(self.stats),
        )


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                out.append(" ".join(raw.decode("utf-8").split()))
            except UnicodeDecodeError as exc:
                raise CorpusError(
                    f"{path}:{lineno}: not UTF-8 ({exc.reason} at byte {exc.start}); re-encode the "
                    "file, e.g. `iconv -f latin1 -t utf-8`"
                ) from None
    return out


def _drop_empty(
    source: list[str], target: list[str], refs: list[str], groups: list[str], origin: str
) -> ParallelCorpus:
    keep = [i for i, (s, t) in enumerate(zip(source, target, strict=True)) if s and t]
    dropped = len(source) - len(keep)
    if dropped:
        logger.info("%s: dropped %d pair(s) with an empty side", origin, dropped)
    corpus = ParallelCorpus(source, target, refs, groups, origin, {"pairs_read": len(source), "empty": dropped})
    return corpus.subset(keep)


def read_parallel_text(source_path: str | Path, target_path: str | Path, *, block_lines: int = 100) -> ParallelCorpus:
    """Two line-aligned UTF-8 files (``.gz`` allowed). Different line counts are an error."""
    source_path, target_path = Path(source_path), Path(target_path)
    source, target = _lines(source_path), _lines(target_path)
    if len(source) != len(target):
        raise CorpusError(
            f"{source_path} has {len(source)} lines but {target_path} has {len(target)}; "
            "a parallel corpus needs one target line per source line (check for a missing or "
            "extra line, or a stray newline inside a sentence)"
        )
    refs = [str(i) for i in range(1, len(source) + 1)]
    groups = [f"block{i // block_lines:06d}" for i in range(len(source))]
    return _drop_empty(source, target, refs, groups, f"{source_path} + {target_path}")


def read_parallel_tsv(
    path: str | Path,
    *,
    source_column: str,
    target_column: str,
    ref_column: str | None = None,
    group_column: str | None = None,
    block_lines: int = 100,
) -> ParallelCorpus:
    """A TSV with a header row (``.gz`` allowed); columns named by the arguments."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise CorpusError(f"{path}: empty file; a TSV corpus needs a header row naming its columns")
        for col in (source_column, target_column, ref_column, group_column):
            if col is not None and col not in header:
                raise CorpusError(f"{path}: no column {col!r} in the header {header}; set corpus.columns")
        idx = {c: header.index(c) for c in (source_column, target_column, ref_column, group_column) if c}
        source, target, refs, groups = [], [], [], []
        for lineno, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise CorpusError(f"{path}:{lineno}: {len(row)} fields, the header has {len(header)}")
            source.append(" ".join(row[idx[source_column]].split()))
            target.append(" ".join(row[idx[target_column]].split()))
            refs.append(row[idx[ref_column]] if ref_column else str(lineno - 1))
            groups.append(row[idx[group_column]] if group_column else f"block{(lineno - 2) // block_lines:06d}")
    return _drop_empty(source, target, refs, groups, str(path))


def read_bible(root: str | Path, *, source_module: str, target_module: str) -> ParallelCorpus:
    """Verse pairs of two SWORD modules; the split group is the OSIS book."""
    from evolution.corpus.sword import align_verses, read_module

    pairs, stats = align_verses(read_module(root, source_module), read_module(root, target_module))
    logger.info(
        "%s/%s: %d verse pairs (%s)",
        source_module,
        target_module,
        len(pairs),
        ", ".join(f"{k} {v}" for k, v in stats.items()),
    )
    return ParallelCorpus(
        source=[a.text for a, _ in pairs],
        target=[b.text for _, b in pairs],
        refs=[a.ref for a, _ in pairs],
        groups=[a.book for a, _ in pairs],
        origin=f"{root}:{source_module}+{target_module}",
        stats=stats,
    )


def filter_length_ratio(corpus: ParallelCorpus, *, max_ratio: float) -> ParallelCorpus:
    """Drop pairs whose longer side has more than ``max_ratio`` times the characters of the shorter.

    With 2.2 on the WEB/RV1909 verses this drops exactly the verses that the
    two editions number differently inside a chapter (their lengths differ
    wildly) and keeps 30,460 pairs, as the independent extraction in
    ``shared/data/bible`` does.
    """
    keep = [
        i
        for i, (s, t) in enumerate(zip(corpus.source, corpus.target, strict=True))
        if max(len(s), len(t)) <= max_ratio * min(len(s), len(t))
    ]
    out = corpus.subset(keep)
    out.stats["length_ratio_dropped"] = len(corpus) - len(keep)
    logger.info("length ratio > %.2f: dropped %d of %d pairs", max_ratio, len(corpus) - len(keep), len(corpus))
    if not len(out):
        raise CorpusError(
            f"{corpus.origin}: no pair left after the length-ratio filter (max {max_ratio}); "
            "raise corpus.max_length_ratio or check that the two sides are aligned"
        )
    return out


def split_corpus(
    corpus: ParallelCorpus, *, valid: Sequence[str] | float, test: Sequence[str] | float, seed: int = 0
) -> dict[str, list[int]]:
    """Indices of each split; whole groups only.

    ``valid``/``test`` are either group names (Bible books: ``["Ruth", "Mark"]``)
    or fractions of the pairs; with fractions, groups are ordered by a seeded
    hash and taken until the fraction is reached, so the split is the same on
    every machine.
    """
    groups = list(dict.fromkeys(corpus.groups))
    assign: dict[str, str] = {}
    if isinstance(valid, (int, float)) or isinstance(test, (int, float)):
        if not (isinstance(valid, (int, float)) and isinstance(test, (int, float))):
            raise CorpusError("corpus split: give valid and test both as group names or both as fractions")
        sizes: dict[str, int] = {}
        for g in corpus.groups:
            sizes[g] = sizes.get(g, 0) + 1
        order = sorted(groups, key=lambda g: hashlib.sha256(f"{seed}:{g}".encode()).hexdigest())
        n, taken = len(corpus), {"valid": 0, "test": 0}
        for g in order:
            for name, frac in (("test", test), ("valid", valid)):
                if taken[name] < frac * n:
                    assign[g], taken[name] = name, taken[name] + sizes[g]
                    break
    else:
        for name, wanted in (("valid", valid), ("test", test)):
            missing = [g for g in wanted if g not in groups]
            if missing:
                raise CorpusError(f"corpus.split.{name}: unknown group(s) {missing}; the corpus has {groups[:80]}")
            for g in wanted:
                if g in assign:
                    raise CorpusError(f"corpus.split: {g!r} is in both valid and test")
                assign[g] = name
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, g in enumerate(corpus.groups):
        out[assign.get(g, "train")].append(i)
    for name in SPLITS:
        if not out[name]:
            raise CorpusError(
                f"corpus split: the {name} split is empty ({len(corpus)} pairs, {len(groups)} groups); "
                "give it at least one group or a larger fraction"
            )
    return out
