"""A representation store from activations computed elsewhere (TransformerLens, nnsight, a
patched or ablated run, any code that holds per-layer states): the same Zarr layout the
project's own extraction writes (:mod:`evolution.store`), so that every analysis that reads
states, and with attention maps given the head statistics and views, runs on it unchanged.

The input is per sentence: ``states[s]`` (L + 1, T_s, d), layer 0 the embeddings (the input
of the first block) and layer l the output of block l; ``token_ids[s]`` and ``token_strs[s]``
(T_s,), the model's whole input; optionally ``attention[s]`` (L, H, T_s, T_s), rows the
queries, each row a distribution over the keys. ``added = (n_before, n_after)``: the tokens
the model's input adds around the text (a BOS: ``(1, 0)``; BERT's [CLS] .. [SEP]: ``(1, 1)``)
are kept in the attention maps, as the project's extraction keeps special tokens there, and
left out of the states' ``token`` axis (:mod:`evolution.models.base`: content positions only).

Everything is checked before anything is written (:func:`check_activations`): shapes, layer
counts, token alignment, dtype, NaN or inf, attention rows that are not distributions; an
error names the sentence, the layer and the fix. The group's fingerprint is a SHA-256 of the
arrays and tokens, so that the analyses' cache keys (which build on it) tell a clean run from
a patched one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Activations", "ActivationsError", "as_token_ids", "check_activations", "write_activations", "KIND"]

logger = logging.getLogger(__name__)

#: the ``kind`` of the model spec of a store written here (:mod:`evolution.models.stored` serves it)
KIND = "activations"

#: the largest deviation of an attention row's sum from 1 accepted (float16 maps sum to 1 within ~1e-3)
ROW_SUM_TOLERANCE = 1e-2


class ActivationsError(ValueError):
    """Activations that cannot be stored as given; the message names the sentence, the layer and the fix."""


@dataclass
class Activations:
    """Checked activations, ready to write: ``states`` per sentence (L + 1, n_s, d) float32, content
    tokens only; ``inputs`` per sentence the whole input ids; ``pieces`` their strings; ``attention``
    per sentence (L, H, T_s, T_s) float32 or None; ``prefix`` / ``suffix`` the added ids."""

    states: list[np.ndarray]
    inputs: list[list[int]]
    pieces: list[list[str]]
    attention: list[np.ndarray] | None
    prefix: list[int]
    suffix: list[int]
    word_ids: list[list[int]] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        """L: the number of blocks (the states have L + 1 layers)."""
        return int(self.states[0].shape[0]) - 1

    @property
    def d_model(self) -> int:
        return int(self.states[0].shape[2])

    @property
    def n_heads(self) -> int:
        return int(self.attention[0].shape[1]) if self.attention is not None else 0

    def fingerprint(self) -> str:
        """SHA-256 of every state, attention map and token id (32 hex digits)."""
        h = hashlib.sha256()
        for s, x in enumerate(self.states):
            h.update(np.asarray(self.inputs[s], dtype=np.int64).tobytes())
            h.update(np.ascontiguousarray(x).tobytes())
            if self.attention is not None:
                h.update(np.ascontiguousarray(self.attention[s]).tobytes())
        h.update("\x00".join(p for ps in self.pieces for p in ps).encode("utf-8"))
        return h.hexdigest()[:32]


def _array(x, what: str) -> np.ndarray:
    """``x`` (a NumPy array, a torch tensor on any device, or nested sequences) as a NumPy array."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().float().cpu().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # noqa: BLE001 - ragged lists and foreign objects alike
        raise ActivationsError(f"{what}: not an array ({type(x).__name__}: {exc})") from None


def _layers(x, what: str) -> np.ndarray:
    """One sentence's states: an (L + 1, T, d) array, or a sequence of (T, d) arrays, one per layer."""
    if isinstance(x, (list, tuple)):
        parts = [_array(v, f"{what} layer {layer}") for layer, v in enumerate(x)]
        shapes = {p.shape for p in parts}
        if len(shapes) != 1:
            listed = ", ".join(f"layer {i}: {p.shape}" for i, p in enumerate(parts))
            raise ActivationsError(
                f"{what}: its layers differ in shape ({listed}); every layer of a sentence is (tokens, d)"
            )
        return np.stack(parts)
    return _array(x, what)


def word_ids(pieces: Sequence[str]) -> list[int]:
    """Word index of each piece: WordPiece (``##`` continues a word), SentencePiece / byte-level BPE
    (``▁`` / ``Ġ`` opens one), subword-nmt (``@@`` continues into the next), else one word each
    (:func:`evolution.models.base.word_ids_from_pieces` beside WordPiece)."""
    from evolution.models.base import word_ids_from_pieces

    if any(str(p).startswith("##") for p in pieces):
        out, word = [], -1
        for i, p in enumerate(pieces):
            if i == 0 or not str(p).startswith("##"):
                word += 1
            out.append(word)
        return out
    return word_ids_from_pieces([str(p) for p in pieces])


#: a piece that reads as a special token: ``<s>``, ``</s>``, ``<|endoftext|>``, ``[CLS]``, ``<pad>``
_SPECIAL_PIECE = re.compile(r"^(<\|[^|\s]+\|>|</?[A-Za-z_]+>|\[[A-Z_]+\])$")


def as_token_ids(x, what: str) -> list[int]:
    """One sentence's token ids as ints; strings are refused by name (they belong in ``token_strs``)."""
    a = _array(x, what).ravel()
    if a.dtype.kind in "USO" and any(isinstance(v, str) for v in a.tolist()):
        raise ActivationsError(
            f"{what} holds strings ({a.tolist()[:3]!r}...): pass the token ids the model ran on "
            "(tokenizer(text)['input_ids']); the strings go to token_strs=, or come from tokenizer="
        )
    if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.array_equal(a, np.round(a))):
        raise ActivationsError(f"{what} has dtype {a.dtype}; token ids are integers")
    return [int(i) for i in a]


def _warn_unannounced_specials(
    inputs: list[list[int]], pieces: list[list[str]], special_ids: Collection[int] | None
) -> None:
    """A WARNING where every sentence opens (or closes) with the same special token and ``added``
    does not count it: it would be analysed as text, the most frequent "type" of MI and the
    neighbours. Special: among ``special_ids`` (a tokenizer's ``all_special_ids``), or a piece
    that reads as one (``<s>``, ``[CLS]``, ``<|endoftext|>``)."""
    if len(inputs) < 2:
        return

    def special(i: int, piece: str) -> bool:
        return (i in special_ids) if special_ids is not None else bool(_SPECIAL_PIECE.match(piece))

    first = {ids[0] for ids in inputs}
    last = {ids[-1] for ids in inputs}
    before = len(first) == 1 and special(inputs[0][0], pieces[0][0])
    after = len(last) == 1 and special(inputs[0][-1], pieces[0][-1])
    if before or after:
        where = " and ".join(
            f"{side} with {pieces[0][k]!r} (id {inputs[0][k]})"
            for side, k, flag in (("opens", 0, before), ("closes", -1, after))
            if flag
        )
        logger.warning(
            "every sentence %s and added=(0, 0): the model's input adds it, so it would be analysed as text "
            "(the most frequent type of MI, the neighbours and PWCCA); pass added=(%d, %d) to keep it out of "
            "the states (it stays in the attention maps)",
            where,
            int(before),
            int(after),
        )


def check_activations(
    states: Sequence,
    *,
    token_ids: Sequence,
    token_strs: Sequence,
    attention: Sequence | None = None,
    added: tuple[int, int] = (0, 0),
    special_ids: Collection[int] | None = None,
) -> Activations:
    """The activations as :class:`Activations`, or an :class:`ActivationsError` naming the first
    problem (sentence, layer) and what to do: see the module docstring for the shapes.

    ``special_ids``: the tokenizer's special ids, if at hand; with ``added=(0, 0)`` a special
    token that opens or closes every sentence is a WARNING naming the ``added`` to pass (without
    them, a piece such as ``<s>`` or ``[CLS]`` counts as special)."""
    n = len(states)
    if n == 0:
        raise ActivationsError("states is empty: pass one (layers, tokens, d) array per sentence")
    for name, seq in (("token_ids", token_ids), ("token_strs", token_strs), ("attention", attention)):
        if seq is not None and len(seq) != n:
            raise ActivationsError(
                f"{name} has {len(seq)} sentences, states {n}: pass one entry per sentence, in the same order"
            )
    before, after = (int(added[0]), int(added[1]))
    if before < 0 or after < 0:
        raise ActivationsError(f"added={added!r}: counts of tokens before and after the text, both >= 0")
    out_states: list[np.ndarray] = []
    inputs: list[list[int]] = []
    pieces: list[list[str]] = []
    maps: list[np.ndarray] = []
    shape0: tuple[int, int] | None = None
    prefix: list[int] | None = None
    suffix: list[int] | None = None
    for s in range(n):
        x = _layers(states[s], f"states[{s}]")
        if x.ndim != 3:
            raise ActivationsError(
                f"states[{s}] has shape {x.shape}; one sentence's states are (layers, tokens, d): layer 0 the "
                "embeddings, layer l block l's output (a batch (sentence, tokens, d) per layer: ev.from_nnsight)"
            )
        if not np.issubdtype(x.dtype, np.floating):
            raise ActivationsError(f"states[{s}] has dtype {x.dtype}; states are floating point (float16/32/64)")
        if shape0 is None:
            shape0 = (x.shape[0], x.shape[2])
            if x.shape[0] < 2:
                raise ActivationsError(
                    f"states[{s}] has {x.shape[0]} layer(s); give the embeddings (layer 0) and every block's output"
                )
        elif (x.shape[0], x.shape[2]) != shape0:
            raise ActivationsError(
                f"states[{s}] has {x.shape[0]} layers of width {x.shape[2]}, sentence 0 {shape0[0]} of width "
                f"{shape0[1]}: every sentence comes from the same model and the same layers"
            )
        bad = ~np.isfinite(x)
        if bad.any():
            layer = int(np.flatnonzero(bad.any(axis=(1, 2)))[0])
            raise ActivationsError(
                f"states[{s}] layer {layer}: {int(bad[layer].sum())} NaN or inf values (of {bad[layer].size}); "
                "the run that produced them overflowed or a hook wrote NaN: fix the run, or leave the sentence out"
            )
        ids = as_token_ids(token_ids[s], f"token_ids[{s}]")
        strs = [str(p) for p in token_strs[s]]
        t = x.shape[1]
        if len(ids) != t or len(strs) != t:
            raise ActivationsError(
                f"sentence {s}: states have {t} tokens, token_ids {len(ids)}, token_strs {len(strs)}; they must "
                "align position by position (padding removed: pass lengths= or the attention mask when batched)"
            )
        if t <= before + after:
            raise ActivationsError(
                f"sentence {s}: {t} tokens, of which added={added!r} are not text: nothing left to analyse"
            )
        pre, suf = ids[:before], ids[t - after :] if after else []
        if prefix is None:
            prefix, suffix = pre, suf
        elif pre != prefix or suf != suffix:
            raise ActivationsError(
                f"sentence {s}: the added tokens {pre} .. {suf} differ from sentence 0's {prefix} .. {suffix}; "
                "added=(before, after) counts tokens the model's input adds to every sentence alike "
                "(a BOS: (1, 0)); with none, added=(0, 0)"
            )
        if attention is not None:
            a = _array(attention[s], f"attention[{s}]")
            if a.ndim != 4 or a.shape[0] != shape0[0] - 1 or a.shape[2:] != (t, t):
                raise ActivationsError(
                    f"attention[{s}] has shape {a.shape}; expected (layers, heads, query, key) = "
                    f"({shape0[0] - 1}, heads, {t}, {t}): one map per block, over the sentence's {t} tokens"
                )
            if maps and a.shape[1] != maps[0].shape[1]:
                raise ActivationsError(f"attention[{s}] has {a.shape[1]} heads, sentence 0 {maps[0].shape[1]}")
            a = a.astype(np.float32)
            if not np.isfinite(a).all():
                layer = int(np.flatnonzero(~np.isfinite(a).all(axis=(1, 2, 3)))[0])
                raise ActivationsError(f"attention[{s}] layer {layer + 1}: NaN or inf weights; fix the run")
            sums = a.sum(-1)
            dev = np.abs(sums - 1.0)
            if (a < -1e-6).any() or dev.max() > ROW_SUM_TOLERANCE:
                layer = int(
                    np.flatnonzero((dev > ROW_SUM_TOLERANCE).any(axis=(1, 2)) | (a < -1e-6).any(axis=(1, 2, 3)))[0]
                )
                worst = float(sums.reshape(-1)[int(dev.argmax())])
                short = not (a < -1e-6).any() and bool((sums[dev > ROW_SUM_TOLERANCE] < 1.0).all())
                fix = (
                    "its weights sum to less than 1 over the sentence's keys: the rest went to keys outside it, "
                    "the padding of a batch or tokens cut off; give lengths= or mask= as the model ran (the "
                    "attention mask), with the padding masked in the run itself"
                    if short
                    else "pass the attention pattern (after the softmax: TransformerLens hook_pattern), not the scores"
                )
                raise ActivationsError(
                    f"attention[{s}] layer {layer + 1}: rows are not distributions over the keys (a row sums to "
                    f"{worst:.4g}); {fix}"
                )
            maps.append(a)
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        out_states.append(np.ascontiguousarray(x[:, before : t - after]))
        inputs.append(ids)
        pieces.append(strs)
    assert prefix is not None and suffix is not None
    if before == 0 and after == 0:
        _warn_unannounced_specials(inputs, pieces, special_ids)
    return Activations(
        states=out_states,
        inputs=inputs,
        pieces=pieces,
        attention=maps if attention is not None else None,
        prefix=prefix,
        suffix=suffix,
        word_ids=[word_ids(p[before : len(p) - after]) for p in pieces],
    )


def columns_of(acts: Activations) -> dict[str, np.ndarray]:
    """The token coordinates of the store (:mod:`evolution.tokens`) for the content tokens."""
    from evolution.tokens import frequency_ranks

    before, after = len(acts.prefix), len(acts.suffix)
    content = [ids[before : len(ids) - after] for ids in acts.inputs]
    lengths = np.array([len(c) for c in content], dtype=np.int64)
    ids = np.concatenate([np.asarray(c, dtype=np.int32) for c in content])
    specials = np.array(sorted({*acts.prefix, *acts.suffix}), dtype=np.int32)
    return {
        "sentence": np.repeat(np.arange(len(content), dtype=np.int32), lengths),
        "position": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
        "token_id": ids,
        "token_str": np.array([p for ps in acts.pieces for p in ps[before : len(ps) - after]], dtype=object),
        "word_id": np.concatenate([np.asarray(w, dtype=np.int32) for w in acts.word_ids]),
        "is_special": np.isin(ids, specials),
        "freq_rank": frequency_ranks(ids),
    }


def write_activations(
    acts: Activations,
    *,
    store: str,
    group: str,
    spec: dict[str, Any],
    attrs: dict[str, Any],
    chunk_tokens: int = 4096,
) -> str:
    """Write ``acts`` as model ``group`` of ``store`` (hidden states, token coordinates, the
    attention group when maps are given) and mark it complete; returns its fingerprint (the
    extraction key the analyses' caches build on)."""
    from evolution.provenance import versions
    from evolution.store import (
        create_attention_group,
        create_hidden_group,
        mark_complete,
        open_attention_array,
        open_hidden,
    )

    key = acts.fingerprint()
    columns = columns_of(acts)
    group_attrs = {
        **attrs,
        "model": group,
        "model_config": spec,
        "versions": versions(),
        "objective": spec.get("objective"),
        "num_layers": acts.n_layers,
        "num_heads": acts.n_heads,
        "d_model": acts.d_model,
        "max_positions": max(len(x) for x in acts.inputs),
        "content_offset": len(acts.prefix),
        "prefix_ids": acts.prefix,
        "suffix_ids": acts.suffix,
        "prefix_pieces": acts.pieces[0][: len(acts.prefix)],
        "suffix_pieces": acts.pieces[0][len(acts.pieces[0]) - len(acts.suffix) :],
        "corpus_sha256": hashlib.sha256(
            "\n".join(" ".join(map(str, ids)) for ids in acts.inputs).encode("utf-8")
        ).hexdigest(),
        "n_truncated": 0,
        "n_skipped": 0,
        "annotated_from": -1,
    }
    if "://" not in store:
        from evolution.provenance import portable

        group_attrs = portable(group_attrs, os.path.dirname(os.path.abspath(store)))
    n_tokens = len(columns["token_id"])
    create_hidden_group(
        store,
        group,
        columns=columns,
        n_layers=acts.n_layers + 1,
        d_model=acts.d_model,
        chunk_tokens=min(chunk_tokens, n_tokens),
        dtype="float32",
        attrs=group_attrs,
        fingerprint=key,
    )
    hidden = open_hidden(store, group, mode="r+")
    hidden[:] = np.concatenate(acts.states, axis=1)
    if acts.attention is not None:
        create_attention_group(
            store,
            group,
            sentence=np.arange(len(acts.inputs), dtype=np.int32),
            inputs=acts.inputs,
            n_layers=acts.n_layers,
            n_heads=acts.n_heads,
            dtype="float32",
            attrs={"special_ids": sorted({*acts.prefix, *acts.suffix}), **group_attrs},
        )
        arr = open_attention_array(store, group, mode="r+")
        for k, a in enumerate(acts.attention):  # NaN past the sentence, as the extraction writes it
            t = a.shape[-1]
            row = np.full(arr.shape[1:], np.nan, dtype=np.float32)
            row[:, :, :t, :t] = a
            arr[k] = row
    mark_complete(store, group, key)
    logger.info(
        "%s: %d tokens of %d sentences, %d layers x %d features%s stored from activations",
        group,
        n_tokens,
        len(acts.inputs),
        acts.n_layers + 1,
        acts.d_model,
        f", attention of {acts.n_heads} heads" if acts.attention is not None else "",
    )
    return key
