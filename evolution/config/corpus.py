"""``corpus``: the text to analyse and train on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from evolution.config.base import _must_exist, _resolve, _Section, _treebank


class SplitConfig(_Section):
    """Which whole groups (Bible books; blocks of ``block_lines`` lines of
    plain files) are held out. Either group names or fractions of the pairs."""

    valid: list[str] | float | None = Field(
        None, description="group names, or a fraction of the pairs; default: Bible books below, else 0.02"
    )
    test: list[str] | float | None = Field(
        None, description="group names, or a fraction of the pairs; default: Bible books below, else 0.08"
    )
    block_lines: int = Field(100, ge=1, description="lines per group for plain parallel files")


#: The default held-out books of the Bible corpus: both testaments, several genres
#: (~2% valid, ~9% test of the 30,460 verse pairs).
BIBLE_VALID = ["Ruth", "Lam", "Eph", "Jas", "1Pet"]
BIBLE_TEST = ["Josh", "Prov", "Mark", "Rom"]


class CorpusConfig(_Section):
    """The sentences that models are trained on and analysed with.

    * ``source: text``: one sentence per line from ``path`` (analysis only:
      nothing to train on).
    * ``source: parallel``: a parallel corpus from ``path`` + ``target_path``
      (line-aligned files) or from a TSV ``path`` with ``columns``.
    * ``source: bible``: the embedded default, two SWORD modules (World
      English Bible and Reina-Valera 1909 from Debian's ``sword-text-web`` and
      ``sword-text-sparv``; ``make setup`` fetches them into ``data/sword``).

    Parallel corpora are filtered by ``max_length_ratio`` (characters) and
    split into train/valid/test by whole groups (``split``); the ``analyse``
    split's source side is what the analyses read.
    """

    source: Literal["text", "parallel", "bible"] = "text"
    path: Path | None = Field(None, description="text: the sentences; parallel: source-side file or TSV")
    target_path: Path | None = Field(None, description="parallel: the target-side file, line-aligned")
    columns: dict[str, str] | None = Field(
        None, description="parallel TSV: {source: en, target: es[, ref: ref][, group: book]}"
    )
    sword_root: Path = Field(
        Path("data/sword"), validate_default=True, description="bible: SWORD root with mods.d/ and modules/"
    )
    modules: tuple[str, str] = Field(("engWEB2015eb", "spaRV1909eb"), description="bible: source, target module")
    languages: tuple[str, str] = Field(("en", "es"), description="source and target language codes (file suffixes)")
    max_length_ratio: float = Field(2.2, gt=1, description="drop pairs whose longer side has more characters")
    split: Annotated[SplitConfig, Field(default_factory=SplitConfig)]
    analyse: Literal["train", "valid", "test", "all"] = Field(
        "test",
        description="the split whose source side is analysed; all: the whole corpus in its order "
        "(Voita et al.'s analysis-set size; trained models have seen its training part)",
    )
    max_sentences: int | None = Field(None, ge=1, description="analyse only the first N sentences")
    annotated: str | None = Field(
        None,
        description="annotated text analysed beside the main one, for POS / dependency neighbour rates: "
        "an embedded treebank (ud-ewt-test, ud-ewt-dev) or a CoNLL-U file; null = none",
    )
    annotated_sentences: int | None = Field(None, ge=1, description="use only the first N annotated sentences")

    @field_validator("annotated", mode="before")
    @classmethod
    def _annotated(cls, v: Any, info: ValidationInfo) -> str | None:
        return _treebank(v, info, "corpus.annotated")

    @field_validator("path", "target_path", mode="before")
    @classmethod
    def _path(cls, v: Any, info: ValidationInfo) -> Path | None:
        return None if v is None else _must_exist(_resolve(v, info), f"corpus.{info.field_name}")

    @field_validator("sword_root", mode="before")
    @classmethod
    def _root(cls, v: Any, info: ValidationInfo) -> Path:
        return _resolve(v, info)

    @model_validator(mode="after")
    def _source_fields(self) -> CorpusConfig:
        if self.source in ("text", "parallel") and self.path is None:
            raise ValueError(f"corpus.source is {self.source!r} but corpus.path is missing")
        if self.source == "parallel" and (self.target_path is None) == (self.columns is None):
            raise ValueError(
                "corpus.source is 'parallel': give either target_path (two line-aligned files) "
                "or columns (a TSV with a header), not both or neither"
            )
        if self.columns is not None and not {"source", "target"} <= set(self.columns):
            raise ValueError("corpus.columns needs at least 'source' and 'target' column names")
        bible = self.source == "bible"
        split = self.split.model_copy(
            update={
                "valid": self.split.valid if self.split.valid is not None else (BIBLE_VALID if bible else 0.02),
                "test": self.split.test if self.split.test is not None else (BIBLE_TEST if bible else 0.08),
            }
        )
        object.__setattr__(self, "split", split)
        return self

    @property
    def parallel(self) -> bool:
        return self.source in ("parallel", "bible")
