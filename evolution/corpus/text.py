"""Plain-text corpora: one sentence per line, UTF-8."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["Corpus", "CorpusError", "read_text_corpus"]


class CorpusError(ValueError):
    """Input text that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Corpus:
    """Sentences with the 1-based line of the source file each came from."""

    sentences: list[str]
    lines: list[int]
    source: str

    def __len__(self) -> int:
        return len(self.sentences)


def read_text_corpus(path: str | Path, *, max_sentences: int | None = None) -> Corpus:
    """Read one sentence per line.

    Lines are stripped of surrounding whitespace; empty lines are dropped and
    counted in the log. Bytes that are not UTF-8 raise :class:`CorpusError`
    naming the file, the line and the byte offset.
    """
    path = Path(path)
    sentences: list[str] = []
    lines: list[int] = []
    empty = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(
                    f"{path}:{lineno}: not UTF-8 ({exc.reason} at byte {exc.start} of the line: "
                    f"{raw[max(0, exc.start - 10) : exc.start + 10]!r}); re-encode the file, e.g. "
                    f"`iconv -f latin1 -t utf-8`"
                ) from None
            text = " ".join(text.split())
            if not text:
                empty += 1
                continue
            sentences.append(text)
            lines.append(lineno)
            if max_sentences is not None and len(sentences) >= max_sentences:
                break
    if empty:
        logger.info("%s: dropped %d empty line(s)", path, empty)
    if not sentences:
        raise CorpusError(f"{path}: no non-empty lines; a corpus needs one sentence per line")
    logger.info("%s: %d sentences", path, len(sentences))
    return Corpus(sentences=sentences, lines=lines, source=str(path))
