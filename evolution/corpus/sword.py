"""Verse-aligned parallel text from two SWORD Bible modules.

The embedded default corpus pairs the World English Bible (``engWEB2015eb``,
Debian ``sword-text-web``) with the Reina-Valera 1909 (``spaRV1909eb``,
Debian ``sword-text-sparv``); both are public domain. ``pysword`` reads the
module files; this module decides what a verse's *text* is and which verses
pair up:

* OSIS markup is removed. Footnotes, cross-references and variant readings
  (``note``, ``rdg``), non-canonical section titles and speaker labels are
  dropped and replaced by a space (WEB glues the words around a note);
  canonical titles (psalm superscriptions) are kept, as both editions have
  them inside verse 1. Strong's ``<w>`` wrappers keep their words; two
  wrappers that touch get a space between them (RV1909 has ~400 such places).
* Everything after a book's end marker is cut (WEB appends its glossary to
  Revelation 22:21).
* RV1909 prints the first word(s) of each chapter in capitals ("EN el
  principio"); they are re-cased ("En el principio").
* Versification: the two modules number some chapters differently (Numbers
  13, Job 39 and 41, Hosea 12, Jonah 2, ...). A chapter is paired verse by
  verse only where both sides end on the same verse number; otherwise that
  chapter *and the next one* are dropped (a shifted boundary moves verses
  into the following chapter). A verse missing mid-chapter on one side (WEB
  brackets Acts 8:37) drops only that verse.

Decompressing: ``pysword`` inflates a whole book block for every verse it
reads; :class:`_CachedModule` keeps the last block, so reading the whole Bible
takes seconds.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["SWORD_PACKAGES", "SwordError", "Verse", "clean_osis", "read_module", "align_verses"]

#: Debian packages that ship the default modules.
SWORD_PACKAGES = {"engWEB2015eb": "sword-text-web", "spaRV1909eb": "sword-text-sparv", "engKJV2006eb": "sword-text-kjv"}


class SwordError(FileNotFoundError):
    """A SWORD module that cannot be found or read; the message says how to get it."""


@dataclass(frozen=True)
class Verse:
    """One verse: OSIS book id (``Gen``), chapter, verse and its plain text."""

    book: str
    chapter: int
    verse: int
    text: str

    @property
    def ref(self) -> str:
        return f"{self.book}.{self.chapter}.{self.verse}"


_DROP = re.compile(r"<(note|rdg|title|speaker|catchWord)\b(?![^>]*canonical=\"true\")[^>]*?(?<!/)>.*?</\1>", re.S)
_DROP_EMPTY = re.compile(r"<(note|rdg|title|speaker|catchWord)\b[^>]*/>")
_BOOK_END = re.compile(r"<div\b[^>]*\beID=[^>]*\btype=\"book\"[^>]*/>|<div\b[^>]*\btype=\"book\"[^>]*\beID=[^>]*/>")
_TOUCHING = re.compile(r"(</(?:w|transChange|q)>)(<(?:w|transChange|q)\b)")
# Inline wrappers whose tags sit inside running text and must not add a space.
_INLINE = re.compile(r"</?(?:w|transChange|q|seg|name|hi|foreign|divineName|reference)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)”])")
_CAPS_WORD = re.compile(r"\b([A-ZÁÉÍÓÚÑÜÂÊÎÔÛ]{2,})\b")


def clean_osis(text: str) -> str:
    """Plain text of one verse's OSIS markup (see the module docstring for the rules)."""
    end = _BOOK_END.search(text)
    if end:
        text = text[: end.start()]
    text = _DROP.sub(" ", text)
    text = _DROP_EMPTY.sub(" ", text)
    text = _TOUCHING.sub(r"\1 \2", text)
    text = _INLINE.sub("", text)
    text = _TAG.sub(" ", text)
    text = text.replace("¶", " ")
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def recase_chapter_start(text: str) -> str:
    """Re-case the capitalised first word(s) of a chapter.

    ``EN el`` -> ``En el``; ``¡OH Jehová`` -> ``¡Oh Jehová``; ``Y HABIA`` ->
    ``Y habia``. Only the first run of all-capital words (two letters or more)
    changes; its first word keeps an initial capital where it starts a
    sentence (start of the verse, or after ``.``, ``!``, ``?`` or ``:``, as
    after a psalm title), otherwise the run is lower-cased.
    """
    m = _CAPS_WORD.search(text)
    if not m:
        return text
    start = m.start()
    before = text[:start].rstrip("¡¿“‘\"' ")
    sentence_start = not before or before[-1] in ".!?:"
    out, pos, first = [], start, True
    for word in re.finditer(r"\S+", text[start:]):
        w = word.group()
        core = w.strip("¡¿,.;:!?()\"'“”‘’")
        if not _CAPS_WORD.fullmatch(core):
            break
        new = core.capitalize() if first and sentence_start else core.lower()
        out.append(text[pos : start + word.start()] + w.replace(core, new))
        pos, first = start + word.end(), False
    return text[:start] + "".join(out) + text[pos:]


def _missing(root: Path, name: str, found) -> SwordError:
    package = SWORD_PACKAGES.get(name)
    how = (
        f"install the Debian package {package} (`apt-get install {package}`, or without root "
        f"`apt-get download {package} && dpkg-deb -x {package}_*.deb DIR` and point corpus.sword_root "
        f"at DIR/usr/share/sword; `make setup` does this into data/sword)"
        if package
        else "install the module into that SWORD root"
    )
    return SwordError(
        f"SWORD module {name!r} not found under {root} (found: {sorted(found) or 'none'}); "
        f"{how}, or set corpus.source: parallel and point it at plain text files"
    )


def module_files(root: str | Path, name: str) -> Path:
    """The data directory of module ``name`` (what identifies its text, for caching)."""
    root = Path(root)
    confs = {p.stem.lower(): p for p in (root / "mods.d").glob("*.conf")} if (root / "mods.d").is_dir() else {}
    conf = confs.get(name.lower())
    if conf is None:
        raise _missing(root, name, [p.stem for p in confs.values()])
    for line in conf.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("DataPath="):
            return (root / line.split("=", 1)[1].strip()).resolve()
    raise SwordError(f"{conf}: no DataPath line; the module is damaged, reinstall it")


class _CachedModule:
    """A pysword zText module whose decompressed book block is kept between verses."""

    def __init__(self, root: Path, name: str):
        from pysword.modules import SwordModules

        modules = SwordModules(paths=str(root))
        try:
            found = modules.parse_modules()
        except Exception:  # pysword raises bare IOError/OSError/ValueError for a missing mods.d
            found = {}
        if name not in found:
            raise _missing(root, name, found)
        self.name = name
        self.bible = modules.get_bible_from_module(name)
        original = self.bible._decompressed_text
        cache: dict = {}

        def cached(testament, buf_num):
            key = (testament, buf_num)
            if key not in cache:
                cache.clear()  # one book block at a time (BlockType=BOOK)
                cache[key] = original(testament, buf_num)
            return cache[key]

        self.bible._decompressed_text = cached


def read_module(root: str | Path, name: str, *, recase: bool | None = None) -> dict[tuple[str, int], dict[int, str]]:
    """Every non-empty verse of module ``name`` under SWORD root ``root``.

    Returns ``{(osis_book, chapter): {verse: text}}`` in canonical order.
    ``recase`` (default: on for ``spaRV1909eb``) re-cases chapter openings.
    """
    module = _CachedModule(Path(root), name)
    recase = name.startswith("spaRV1909") if recase is None else recase
    structure = module.bible.get_structure()
    chapters: dict[tuple[str, int], dict[int, str]] = {}
    for testament, books in structure.get_books().items():
        if testament not in module.bible._testaments:
            continue
        for book in books:
            offset = structure._book_offset(book.name)
            for chapter in range(1, book.num_chapters + 1):
                verses: dict[int, str] = {}
                indices = book.get_indicies(chapters=[chapter], offset=offset)
                for verse, index in enumerate(indices, start=1):
                    raw = module.bible._text_for_index(testament, index)
                    text = clean_osis(raw) if raw else ""
                    if text:
                        if recase and not verses:
                            text = recase_chapter_start(text)
                        verses[verse] = text
                if verses:
                    chapters[(book.osis_name, chapter)] = verses
    if not chapters:
        raise SwordError(f"SWORD module {name!r} under {root} has no readable verse")
    return chapters


def align_verses(
    source: dict[tuple[str, int], dict[int, str]], target: dict[tuple[str, int], dict[int, str]]
) -> tuple[list[tuple[Verse, Verse]], dict[str, int]]:
    """Pair verses of two modules by reference (rules in the module docstring).

    Returns the pairs in the source's order and counts of what was dropped.
    """
    pairs: list[tuple[Verse, Verse]] = []
    stats = {
        "chapters_paired": 0,
        "chapters_renumbered": 0,
        "chapters_after_renumbered": 0,
        "chapters_one_side": 0,
        "verses_one_side": 0,
    }
    skip_next = False
    previous_book = None
    for key, src in source.items():
        book, chapter = key
        if book != previous_book:
            skip_next, previous_book = False, book
        tgt = target.get(key)
        if tgt is None:
            stats["chapters_one_side"] += 1
            continue
        if max(src) != max(tgt):
            stats["chapters_renumbered"] += 1
            skip_next = True
            continue
        if skip_next:
            stats["chapters_after_renumbered"] += 1
            skip_next = False
            continue
        stats["chapters_paired"] += 1
        for verse in sorted(src.keys() | tgt.keys()):
            if verse in src and verse in tgt:
                pairs.append((Verse(book, chapter, verse, src[verse]), Verse(book, chapter, verse, tgt[verse])))
            else:
                stats["verses_one_side"] += 1
    return pairs, stats
