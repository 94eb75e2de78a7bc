"""Annotated text: sentences with gold POS tags and dependencies from CoNLL-U.

The neighbour rates of docs/metrics.md ("the share of neighbours with the same
POS / dependency label") and the syntactic analyses need annotation the
embedded Bible lacks, so an annotated text is analysed *beside* the main one
(``corpus.annotated``). The project embeds the dev and test splits of UD
English-EWT (CC BY-SA 4.0, ``evolution/data/ud-ewt/README.md``); any CoNLL-U
file can be named instead.

Only syntactic words are read: multiword-token ranges (``3-4``) and empty
nodes (``5.1``) are skipped, as DATA.md asks, so word ``i`` of a
:class:`TreebankSentence` is the ``i``-th whitespace word of its ``text``,
which is the ``word_id`` the token table assigns (:mod:`evolution.tokens`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from evolution.config.base import EMBEDDED  # the names corpus.annotated accepts
from evolution.corpus.text import CorpusError
from evolution.labels import NO_LABEL, label_codes  # the codes of the store's annotation strings

__all__ = [
    "TreebankSentence",
    "EMBEDDED",
    "read_conllu",
    "resolve_treebank",
    "annotation_columns",
    "label_codes",
    "NO_LABEL",
    "ANNOTATION_COLUMNS",
]


@dataclass(frozen=True)
class TreebankSentence:
    """One sentence's syntactic words and their gold annotation (all of length n).

    ``head`` is 1-based as in CoNLL-U (0 = root); ``deprel`` is the universal
    relation without its subtype (``nmod:poss`` -> ``nmod``), as in Clark et
    al. (2019); ``xpos`` is the PTB tag where the treebank has one, else UPOS.
    ``line`` is the 1-based line of the sentence's first word in its file.
    """

    words: tuple[str, ...]
    upos: tuple[str, ...]
    xpos: tuple[str, ...]
    head: tuple[int, ...]
    deprel: tuple[str, ...]
    line: int

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def __len__(self) -> int:
        return len(self.words)


def resolve_treebank(name_or_path: str | Path) -> Path:
    """The file of an embedded treebank name (:data:`EMBEDDED`) or an existing path."""
    if str(name_or_path) in EMBEDDED:
        return Path(str(resources.files("evolution") / "data" / "ud-ewt" / EMBEDDED[str(name_or_path)]))
    path = Path(name_or_path)
    if not path.is_file():
        raise CorpusError(
            f"corpus.annotated: {path} is neither a file nor one of the embedded treebanks "
            f"({', '.join(EMBEDDED)}); give a CoNLL-U file (.conllu or .conllu.gz)"
        )
    return path


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_conllu(
    path: str | Path, *, max_sentences: int | None = None, text: str | None = None
) -> list[TreebankSentence]:
    """Read a CoNLL-U file (plain or ``.gz``) into :class:`TreebankSentence` s; with ``text``,
    parse that text instead (the file's content, shipped to a worker), naming ``path`` in errors.

    A word line without 10 tab-separated columns, a non-integer head or a
    sentence whose word ids do not run 1..n raises :class:`CorpusError`
    naming the file and line. Whitespace inside a form (allowed by CoNLL-U
    2) becomes ``_`` so that one form stays one whitespace word.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out: list[TreebankSentence] = []
    rows: list[list[str]] = []
    first_line = 0

    def flush() -> None:
        if not rows:
            return
        ids = [int(r[0]) for r in rows]
        if ids != list(range(1, len(rows) + 1)):
            raise CorpusError(f"{path}:{first_line}: word ids run {ids[:5]}..., expected 1..{len(rows)}")
        out.append(
            TreebankSentence(
                words=tuple("_".join(r[1].split()) or "_" for r in rows),
                upos=tuple(r[3] for r in rows),
                xpos=tuple(r[4] if r[4] != "_" else r[3] for r in rows),
                head=tuple(int(r[6]) for r in rows),
                deprel=tuple(r[7].split(":")[0] for r in rows),
                line=first_line,
            )
        )
        rows.clear()

    try:
        with io.StringIO(text) if text is not None else opener(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                line = line.rstrip("\n")
                if not line.strip():
                    flush()
                    if max_sentences is not None and len(out) >= max_sentences:
                        return out
                    continue
                if line.startswith("#"):
                    continue
                cols = line.split("\t")
                if len(cols) != 10:
                    raise CorpusError(f"{path}:{lineno}: {len(cols)} tab-separated columns, CoNLL-U has 10")
                if "-" in cols[0] or "." in cols[0]:
                    continue  # multiword token range or empty node: not a syntactic word
                if not cols[0].isdigit() or not cols[6].isdigit():
                    raise CorpusError(f"{path}:{lineno}: id {cols[0]!r} / head {cols[6]!r} are not integers")
                if not rows:
                    first_line = lineno
                rows.append(cols)
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not UTF-8 ({exc.reason}); CoNLL-U files are UTF-8") from None
    except (OSError, EOFError) as exc:
        raise CorpusError(f"{path}: cannot read ({exc})") from None
    flush()
    if not out:
        raise CorpusError(f"{path}: no sentence found; is it a CoNLL-U file?")
    return out[:max_sentences] if max_sentences is not None else out


def _word_index(
    *, sentence: np.ndarray, word_id: np.ndarray, first: int, lengths: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Which tokens (n,) belong to a word of annotated sentence ``first + j``
    (``lengths[j]`` words), and the index of that word among all annotated words."""
    sentence = np.asarray(sentence, dtype=np.int64)
    word_id = np.asarray(word_id, dtype=np.int64)
    n_words = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_words)]).astype(np.int64)
    j = sentence - first
    ok = (j >= 0) & (j < len(n_words))
    ok[ok] &= (word_id[ok] >= 0) & (word_id[ok] < n_words[j[ok]])
    return ok, offsets[j[ok]] + word_id[ok]


#: Token coordinates that carry the annotation in the representation store
#: (strings, ``""`` off the annotated text; ``head`` an int, -1 there).
ANNOTATION_COLUMNS = ("upos", "xpos", "deprel", "head")


def annotation_columns(
    *, sentence: np.ndarray, word_id: np.ndarray, first: int, sentences: Sequence[dict]
) -> dict[str, np.ndarray]:
    """Per token (n,), the gold annotation of the word it belongs to, as token coordinates.

    ``sentences[j]`` holds the word labels of corpus sentence ``first + j``
    (``upos``, ``xpos``, ``deprel``: lists of strings; ``head``: 1-based
    CoNLL-U heads, 0 = root), as the corpus stage writes them. Returns
    ``upos``, ``xpos``, ``deprel`` (object arrays, ``""`` where a token has no
    annotated word: the main text, special tokens, pieces past a truncation)
    and ``head`` (int32, -1 there).
    """
    ok, flat_index = _word_index(
        sentence=sentence, word_id=word_id, first=first, lengths=[len(s["upos"]) for s in sentences]
    )
    out: dict[str, np.ndarray] = {}
    for name in ("upos", "xpos", "deprel"):
        flat = np.array([w for s in sentences for w in s[name]], dtype=object)
        col = np.full(len(ok), "", dtype=object)
        col[ok] = flat[flat_index]
        out[name] = col
    heads = np.array([h for s in sentences for h in s["head"]], dtype=np.int32)
    out["head"] = np.full(len(ok), -1, dtype=np.int32)
    out["head"][ok] = heads[flat_index]
    return out
