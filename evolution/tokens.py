"""The token table: one row per analysed token occurrence.

Built in the driver from the corpus and a model's tokenizer (no weights
needed), it fixes the ``token`` axis of a model's Zarr group before any
forward pass runs. Its columns become coordinates on ``token``:

============  =====  ==========================================================
name          dtype  meaning
============  =====  ==========================================================
sentence      int32  index of the sentence in the corpus (0-based)
position      int32  content position in the sentence (0 = first token)
token_id      int32  vocabulary id
token_str     str    the subword piece as the model saw it (``<unk>`` for text outside
                     its vocabulary)
token_text    str    the text of the piece (the characters an ``<unk>`` stands for)
word_id       int32  index of the whitespace word the piece belongs to
is_special    bool   the id is one of the tokenizer's special ids (e.g. unk)
freq_rank     int32  rank of token_id by count in this table, 1 = most frequent,
                     ties broken by smaller id
============  =====  ==========================================================
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evolution.models.base import Adapter, Tokenized

logger = logging.getLogger(__name__)

__all__ = ["TokenTable", "SentenceTooLong", "build_token_table", "frequency_ranks", "unknown_pieces", "UNKNOWN_WARN"]

#: the share of unknown pieces above which extraction warns (a model that cannot see a text's
#: characters merges them into one type: every apostrophe becomes the same <unk>)
UNKNOWN_WARN = 0.001


class SentenceTooLong(ValueError):
    """A sentence exceeds the model's positions and ``too_long`` is ``error``."""


@dataclass(frozen=True)
class TokenTable:
    """Token occurrences of the kept sentences, in corpus order.

    ``offsets[k]:offsets[k+1]`` are the rows of the ``k``-th kept sentence,
    whose corpus index is ``sentence_index[k]`` and whose content ids are
    ``ids[k]``.
    """

    sentence_index: np.ndarray  # (S,) int32
    offsets: np.ndarray  # (S + 1,) int64
    ids: list[list[int]]
    columns: dict[str, np.ndarray]  # each (N,)
    n_truncated: int
    n_skipped: int

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_sentences(self) -> int:
        return len(self.ids)


def frequency_ranks(token_ids: np.ndarray) -> np.ndarray:
    """Per occurrence, the rank of its id by count (1 = most frequent; ties: smaller id first)."""
    uniq, inverse, counts = np.unique(token_ids, return_inverse=True, return_counts=True)
    order = np.lexsort((uniq, -counts))  # primary: -count, secondary: id
    rank_of_uniq = np.empty(len(uniq), dtype=np.int32)
    rank_of_uniq[order] = np.arange(1, len(uniq) + 1, dtype=np.int32)
    return rank_of_uniq[inverse]


def build_token_table(
    sentences: Sequence[str],
    adapter: Adapter,
    *,
    too_long: Literal["truncate", "skip", "error"] = "truncate",
    lines: Sequence[int] | None = None,
    source: str = "corpus",
) -> TokenTable:
    """Tokenize every sentence and apply the length policy.

    Sentences longer than ``adapter.max_content_tokens`` are truncated, skipped
    (both counted in the log) or, with ``too_long="error"``, raise
    :class:`SentenceTooLong` naming the first offending line. Sentences that
    tokenize to nothing are skipped.
    """
    limit = adapter.max_content_tokens
    kept: list[tuple[int, Tokenized]] = []
    n_trunc = n_skip = n_empty = 0
    for k, sentence in enumerate(sentences):
        tok = adapter.tokenize(sentence)
        if len(tok) == 0:
            n_empty += 1
            continue
        if len(tok) > limit:
            if too_long == "error":
                where = f"{source}:{lines[k]}" if lines is not None else f"{source} sentence {k}"
                raise SentenceTooLong(
                    f"{where}: {len(tok)} tokens, but model {adapter.name!r} takes at most {limit} "
                    f"(max positions {adapter.max_positions} minus special tokens); set extract.too_long "
                    "to truncate or skip, or shorten the line"
                )
            if too_long == "skip":
                n_skip += 1
                continue
            tok = tok.truncated(limit)
            n_trunc += 1
        kept.append((k, tok))
    if n_trunc or n_skip:
        logger.warning(
            "%s: %d sentence(s) longer than %d tokens were %s",
            adapter.name,
            n_trunc or n_skip,
            limit,
            "truncated" if n_trunc else "skipped",
        )
    if n_empty:
        logger.info("%s: %d sentence(s) gave no tokens and were skipped", adapter.name, n_empty)
    if not kept:
        raise ValueError(f"{source}: no sentence left to analyse for model {adapter.name!r}")
    lengths = np.array([len(t) for _, t in kept], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    sent = np.repeat(np.array([k for k, _ in kept], dtype=np.int32), lengths)
    pos = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    ids = np.concatenate([np.asarray(t.ids, dtype=np.int32) for _, t in kept])
    specials = np.fromiter(adapter.special_ids, dtype=np.int32) if adapter.special_ids else np.array([], np.int32)
    columns = {
        "sentence": sent,
        "position": pos,
        "token_id": ids,
        "token_str": _seen(ids, [p for _, t in kept for p in t.pieces], adapter),
        "token_text": np.array([p for _, t in kept for p in (t.pieces if t.texts is None else t.texts)], dtype=object),
        "word_id": np.concatenate([np.asarray(t.word_ids, dtype=np.int32) for _, t in kept]),
        "is_special": np.isin(ids, specials),
        "freq_rank": frequency_ranks(ids),
    }
    return TokenTable(
        sentence_index=np.array([k for k, _ in kept], dtype=np.int32),
        offsets=offsets,
        ids=[t.ids for _, t in kept],
        columns=columns,
        n_truncated=n_trunc,
        n_skipped=n_skip,
    )


def _seen(ids: np.ndarray, pieces: list[str], adapter: Adapter) -> np.ndarray:
    """The pieces as the model saw them: a piece outside the vocabulary becomes the unknown
    piece's string (``<unk>``, ``[UNK]``), since the model saw that id and nothing else."""
    out = np.array(pieces, dtype=object)
    unk = adapter.unk_id
    if unk is not None and (ids == unk).any():
        out[ids == unk] = adapter.pieces([unk])[0]
    return out


def unknown_pieces(token_id: np.ndarray, token_text: np.ndarray, unk_id: int | None, *, top: int = 20) -> dict:
    """How much of a text the model saw as its unknown piece: ``count`` and ``share`` of the
    pieces whose id is ``unk_id``, and ``texts``: the original text of those pieces (word-start
    markers ``▁`` / ``Ġ`` / ``##`` removed) -> occurrences, the ``top`` most frequent."""
    from collections import Counter

    if unk_id is None or len(token_id) == 0:
        return {"count": 0, "share": 0.0, "texts": {}}
    mask = np.asarray(token_id) == unk_id
    texts = Counter(
        str(t).removeprefix("▁").removeprefix("Ġ").removeprefix("##") or str(t)
        for t in np.asarray(token_text, dtype=object)[mask]
    )
    return {
        "count": int(mask.sum()),
        "share": float(mask.mean()),
        "texts": dict(texts.most_common(top)),
    }
