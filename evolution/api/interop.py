"""Representations from activations a researcher already holds: TransformerLens caches,
nnsight's saved outputs, or plain arrays of any run (clean, patched, ablated), stored in the
layout of the project's own extraction (:mod:`evolution.activations`) so that the analyses
(:mod:`evolution.api.analyses`), the views and :func:`~evolution.api.compare.compare` take them
unchanged.

>>> reps = ev.from_activations(states, token_ids=ids, token_strs=strs)        # per sentence
>>> reps = ev.from_transformer_lens(cache, tokens, tokenizer=bridge.tokenizer)  # a TransformerLens cache
>>> reps = ev.from_nnsight(saved_layers, tokens, tokenizer=lm.tokenizer)       # nnsight's saved outputs

None of them imports TransformerLens or nnsight: a cache is read by its hook names and saved
outputs are tensors. The ``interop`` extra (``pip install -e ".[interop]"``) installs both for
the worked example of ``docs/interop.md`` and the equality tests.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evolution.api.represent import Representations

__all__ = ["from_activations", "from_transformer_lens", "from_nnsight"]

logger = logging.getLogger(__name__)


def from_activations(
    states: Sequence,
    *,
    token_ids: Sequence,
    token_strs: Sequence[Sequence[str]] | None = None,
    tokenizer: Any = None,
    attention: Sequence | None = None,
    added: tuple[int, int] = (0, 0),
    name: str = "activations",
    objective: str | None = None,
    store: str | Path | None = None,
    source: str = "arrays",
    config: Any = None,
) -> Representations:
    """:class:`Representations` of activations computed elsewhere.

    Parameters
    ----------
    states
        Per sentence, the states of every layer: an (L + 1, T_s, d) array or tensor, or a list of
        L + 1 (T_s, d) ones; layer 0 the embeddings (the first block's input), layer l block l's
        output.
    token_ids
        Per sentence, the T_s input ids (the model's whole input, added tokens included).
    token_strs, tokenizer
        Per sentence, the T_s token strings; or a tokenizer with ``convert_ids_to_tokens`` that
        gives them.
    attention
        Optional, per sentence (L, H, T_s, T_s): attention patterns (rows the queries, each a
        distribution over the keys). With them the head statistics and views run.
    added
        ``(before, after)``: how many tokens the model's input adds to every sentence (a BOS:
        ``(1, 0)``; BERT: ``(1, 1)``). Kept in the attention maps, left out of the states'
        ``token`` axis, as the project's extraction does.
    objective
        ``lm``, ``mlm`` or ``mt``: what the model predicts (MI's output label and the causal
        head statistics follow it); None: MI with the input token only.
    store
        Where to write (a path or fsspec URL); default a fresh in-memory store.
    config
        Optional: the model, or its config (Hugging Face's ``model.config``, nnsight's
        ``LanguageModel``, a TransformerLens model): states of other than its blocks + 1 layers are
        refused (one short: the embeddings are missing).

    Everything is checked before a byte is written (shapes, layer counts, token alignment, dtype,
    NaN or inf, attention rows); an :class:`~evolution.activations.ActivationsError` names the
    sentence, the layer and the fix.
    """
    from evolution.activations import KIND, as_token_ids, check_activations, write_activations
    from evolution.store import StoreError, store_entries

    if objective is not None and objective not in ("lm", "mlm", "mt"):
        raise ValueError(f"objective={objective!r}: one of 'lm', 'mlm', 'mt', or None")
    if token_strs is None:
        if tokenizer is None:
            raise ValueError("give token_strs= (per sentence, the token strings) or tokenizer= to convert the ids")
        token_strs = [
            [str(p) for p in tokenizer.convert_ids_to_tokens(as_token_ids(_np(ids), f"token_ids[{s}]"))]
            for s, ids in enumerate(token_ids)
        ]
    if config is not None and len(states):  # a list of layers or an (L + 1, T, d) array: its length is L + 1
        _check_layer_count(
            len(states[0]),
            _blocks_of(config),
            what="states[0]",
        )
    special = getattr(tokenizer, "all_special_ids", None)
    acts = check_activations(
        states,
        token_ids=token_ids,
        token_strs=token_strs,
        attention=attention,
        added=added,
        special_ids=set(special) if special is not None else None,
    )
    owned = store is None
    if store is None:
        where = f"memory://evolution-{uuid.uuid4().hex[:12]}/reps.zarr"
    else:  # a local path absolute, so that the spec the group records finds it from anywhere (ev.open_store)
        where = str(store) if "://" in str(store) else str(Path(store).resolve())
    if not owned and name in store_entries(where, key="store"):
        raise StoreError(f"{where} already holds a model {name!r}: give another name= or another store=")
    spec = {
        "name": name,
        "kind": KIND,
        "path": where,
        "group": name,
        "objective": objective,
        "data": None,
        "sentencepiece": None,
        "source": source,
    }
    key = write_activations(acts, store=where, group=name, spec=spec, attrs={"source": source, "seed": 0})
    return Representations(store=where, specs={name: spec}, extract_keys={name: key}, owned=(owned, True))


def _np(x) -> np.ndarray:
    """``x`` (a torch tensor on any device, an array, nested sequences) as a NumPy array; a
    bfloat16 or float8 tensor, which NumPy has no dtype for, as float32 (which holds it exactly)."""
    if hasattr(x, "detach"):
        t = x.detach()
        if t.is_floating_point() and str(t.dtype) not in ("torch.float16", "torch.float32", "torch.float64"):
            t = t.float()
        return t.cpu().numpy()
    return np.asarray(x)


def _blocks_of(model: Any) -> int | None:
    """The number of blocks of ``model``: a Hugging Face model or config (``num_hidden_layers``,
    ``n_layer``), nnsight's ``LanguageModel``, a TransformerLens model (``cfg.n_layers``); None if
    none of these is found."""
    for obj in (model, getattr(model, "config", None), getattr(model, "cfg", None)):
        for name in ("num_hidden_layers", "n_layer", "n_layers", "num_layers"):
            value = getattr(obj, name, None) if obj is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _token_ids(tokens) -> np.ndarray:
    """``tokens`` as a (batch, pos) integer array, or a ValueError naming what was given instead."""
    if isinstance(tokens, str) or (
        isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], (str, list, tuple)) and _has_str(tokens)
    ):
        raise ValueError(
            "tokens holds strings: pass the token ids the model ran on, (batch, pos) integers "
            "(tokenizer(texts, padding=True)['input_ids'], TransformerLens model.to_tokens(texts)); the token "
            "strings come from tokenizer= or token_strs="
        )
    try:
        ids = _np(tokens)
    except ValueError:
        ids = np.asarray(tokens, dtype=object)
    if ids.dtype == object:
        raise ValueError(
            "tokens is ragged (sentences of different lengths): pad them to one (batch, pos) array, the batch the "
            "model ran on, and pass lengths= or mask="
        )
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2:
        raise ValueError(f"tokens has shape {ids.shape}; give the (batch, position) token ids the model ran on")
    if ids.dtype.kind not in "iu":
        raise ValueError(f"tokens has dtype {ids.dtype}; give the (batch, position) token ids, integers")
    return ids


def _has_str(seq) -> bool:
    first = seq[0]
    while isinstance(first, (list, tuple)) and first:
        first = first[0]
    return isinstance(first, str)


def _edge_run(row: np.ndarray, value: int) -> int:
    """How many of ``row``'s first entries equal ``value``."""
    differs = np.flatnonzero(row != value)
    return int(differs[0]) if len(differs) else len(row)


def _check_padding(ids: np.ndarray, rows: list[np.ndarray], *, pad_id: int | None, given: str | None) -> None:
    """Refuse a batch whose kept positions still end (right padding) or begin (left padding) in
    padding: a run of the tokenizer's pad id whose length differs between sentences or exceeds
    one, or, without a pad id, a run of one repeated id (at least 2 long in some sentence, absent
    from another) that never occurs inside a sentence. ``given``: ``lengths``, ``mask`` or None."""
    kept = [ids[s, r] for s, r in enumerate(rows)]
    for side in ("end", "begin"):
        edges = [k[::-1] if side == "end" else k for k in kept]
        candidates = {int(e[0]) for e in edges if len(e) >= 2 and e[1] == e[0]}
        if pad_id is not None:
            candidates.add(int(pad_id))
        for value in sorted(candidates):
            runs = np.array([_edge_run(e, value) for e in edges])
            if runs.max() == 0 or (runs.max() < 2 and runs.min() == runs.max()):
                continue
            if value != pad_id:
                inside = any((e[_edge_run(e, value) :] == value).any() for e in edges)
                if inside or runs.min() > 0 or runs.max() < 2:
                    continue
            s, s0 = int(runs.argmax()), int(runs.argmin())
            what = f"id {value}" + (" (the tokenizer's pad token)" if value == pad_id else "")
            found = f"sentence {s} of the batch {side}s with {runs[s]} copies of {what}"
            found += f", sentence {s0} with {runs[s0]}" if runs[s0] != runs[s] else ""
            if given is None:
                fix = (
                    f"a {'right' if side == 'end' else 'left'}-padded batch would be analysed as text (the padding "
                    "the most frequent type of MI, the neighbours and PWCCA): pass lengths= (each sentence's token "
                    "count, right padding) or mask= (the attention mask the model ran with, left or right padding)"
                )
            elif given == "lengths" and side == "begin":
                fix = (
                    "the batch is left-padded and lengths= keeps each sentence's first positions, padding "
                    "included: pass mask= (the attention mask the model ran with) instead"
                )
            else:
                fix = f"the {given}= given leaves padding in the sentences: give " + (
                    "each sentence's token count" if given == "lengths" else "the attention mask of this batch"
                )
            raise ValueError(f"{found}: {fix}")


def _check_layer_count(n_states: int, blocks: int | None, *, what: str) -> None:
    """Refuse ``n_states`` layers of states for a model of ``blocks`` blocks unless it is
    ``blocks + 1`` (the embeddings, then every block); one short: the embeddings are missing."""
    if blocks is None or n_states == blocks + 1:
        return
    if n_states == blocks:
        raise ValueError(
            f"{what} holds {n_states} layers and the model has {blocks} blocks: the embeddings are missing (layer 0, "
            "the first block's input), and every label would be one off. Put the embeddings' output first "
            "(nnsight: e.g. lm.transformer.drop.output or the embeddings module's output; Hugging Face's "
            "output.hidden_states start with them)"
        )
    raise ValueError(
        f"{what} holds {n_states} layers and the model has {blocks} blocks: give the embeddings and every block's "
        f"output, {blocks + 1} in all"
    )


def _rows(tokens, lengths, mask) -> tuple[np.ndarray, list[np.ndarray]]:
    """``tokens`` (batch, pos) as NumPy, and per sentence the positions that hold tokens: the first
    ``lengths[s]``, or where ``mask[s]`` is 1 (left or right padding), or all."""
    ids = _token_ids(tokens)
    if lengths is not None and mask is not None:
        raise ValueError("give lengths= or mask=, not both")
    if lengths is not None:
        lengths = [int(n) for n in _np(lengths).ravel()]
        if len(lengths) != len(ids) or any(not 0 < n <= ids.shape[1] for n in lengths):
            raise ValueError(f"lengths={lengths}: one per sentence of the batch, each in 1..{ids.shape[1]}")
        return ids, [np.arange(n) for n in lengths]
    if mask is not None:
        m = _np(mask).astype(bool)
        if m.shape != ids.shape:
            raise ValueError(f"mask has shape {m.shape}, tokens {ids.shape}: the attention mask of the same batch")
        return ids, [np.flatnonzero(row) for row in m]
    return ids, [np.arange(ids.shape[1]) for _ in range(len(ids))]


def from_transformer_lens(
    cache,
    tokens,
    *,
    tokenizer: Any = None,
    token_strs: Sequence[Sequence[str]] | None = None,
    lengths: Sequence[int] | None = None,
    mask=None,
    final_norm: bool = True,
    attention: bool = True,
    added: tuple[int, int] = (0, 0),
    name: str = "transformer_lens",
    objective: str | None = "lm",
    store: str | Path | None = None,
) -> Representations:
    """:func:`from_activations` on a TransformerLens ``ActivationCache`` of ``tokens`` (batch, pos).

    Layer 0 is ``blocks.0.hook_resid_pre`` (or, where the cache kept only them, ``hook_embed`` +
    ``hook_pos_embed``), layer l
    ``blocks.{l-1}.hook_resid_post``; with ``final_norm`` (default) the last layer is
    ``ln_final.hook_out`` instead, the final layer norm applied, as Hugging Face's
    ``hidden_states`` and this project's extraction of GPT-2-like models define it (so that the
    two routes agree). ``attention``: store ``blocks.{l}.attn.hook_pattern`` too. ``lengths`` or
    ``mask``: where a padded batch's sentences end. The cache needs ``names_filter`` to have kept
    these hooks (``run_with_cache(tokens)`` keeps all)."""
    keys = set(cache.keys())
    n_layers = 0
    while f"blocks.{n_layers}.hook_resid_post" in keys:
        n_layers += 1
    # the model's blocks: its config where the cache holds the model, else the highest block any hook names
    named = [int(k.split(".")[1]) for k in keys if k.startswith("blocks.") and k.split(".")[1].isdigit()]
    blocks = _blocks_of(getattr(cache, "model", None)) or (max(named) + 1 if named else None)
    if final_norm and blocks is not None and 0 < n_layers < blocks:
        raise KeyError(
            f"the cache holds hook_resid_post of blocks 0..{n_layers - 1} but the model has {blocks} blocks: "
            f"ln_final.hook_out is the output after block {blocks - 1}, and would be stored as layer {n_layers}. "
            "Keep every block's hook_resid_post (run_with_cache without names_filter keeps all), or pass "
            f"final_norm=False to store layers 0..{n_layers} as the residual stream"
        )
    first = "blocks.0.hook_resid_pre"
    # without it, the embeddings are the token and position embeddings' sum (GPT-2's layer 0)
    summed = first not in keys and {"hook_embed", "hook_pos_embed"} <= keys
    missing = [k for k in ("blocks.0.hook_resid_post",) + (() if summed else (first,)) if k not in keys]
    if final_norm and n_layers and "ln_final.hook_out" not in keys:
        missing.append("ln_final.hook_out (or final_norm=False)")
    if attention and "blocks.0.attn.hook_pattern" not in keys:
        missing.append("blocks.0.attn.hook_pattern (or attention=False)")
    if missing:
        raise KeyError(
            f"the cache has no {', '.join(missing)}: run_with_cache(tokens) without names_filter keeps every hook, "
            "or keep these"
        )
    names = [f"blocks.{layer}.hook_resid_post" for layer in range(n_layers)]
    if final_norm:
        names[-1] = "ln_final.hook_out"
    embeddings = _np(cache["hook_embed"]) + _np(cache["hook_pos_embed"]) if summed else _np(cache[first])
    layers = [embeddings] + [_np(cache[k]) for k in names]
    maps = [_np(cache[f"blocks.{layer}.attn.hook_pattern"]) for layer in range(n_layers)] if attention else None
    return _batched(
        layers,
        maps,
        tokens,
        tokenizer=tokenizer,
        token_strs=token_strs,
        lengths=lengths,
        mask=mask,
        added=added,
        name=name,
        objective=objective,
        store=store,
        source="transformer_lens",
    )


def from_nnsight(
    layers: Sequence,
    tokens,
    *,
    attentions: Sequence | None = None,
    tokenizer: Any = None,
    token_strs: Sequence[Sequence[str]] | None = None,
    lengths: Sequence[int] | None = None,
    mask=None,
    added: tuple[int, int] = (0, 0),
    name: str = "nnsight",
    objective: str | None = None,
    store: str | Path | None = None,
    config: Any = None,
) -> Representations:
    """:func:`from_activations` on per-layer batched outputs: ``layers[l]`` (batch, pos, d), what
    nnsight's ``.save()`` of each layer's output holds after the trace (the embeddings, then each
    block; a block's output tuple: its first element), or Hugging Face's ``output.hidden_states``.
    ``attentions[l]`` (batch, heads, pos, pos): the patterns, e.g. ``output.attentions`` of a trace
    with ``output_attentions=True``. ``config``: the model (the ``LanguageModel``) or its config;
    with it, a list one short of its blocks + 1 is refused: the embeddings are missing (saving the
    blocks' outputs alone would shift every label by one)."""
    layers = [_np(x[0] if isinstance(x, tuple) else x) for x in layers]
    maps = [_np(a) for a in attentions] if attentions is not None else None
    blocks = _blocks_of(config) if config is not None else None
    if blocks is None and maps is not None and len(maps) == len(layers):
        blocks = len(maps)  # one map per block: as many states as maps leaves no room for the embeddings
    _check_layer_count(len(layers), blocks, what="layers")
    if maps is not None and len(maps) != len(layers) - 1:
        raise ValueError(
            f"attentions holds {len(maps)} maps for {len(layers) - 1} blocks: one (batch, heads, pos, pos) "
            "pattern per block (a model whose attention implementation returns none gives an empty tuple: "
            "load it with attn_implementation='eager')"
        )
    return _batched(
        layers,
        maps,
        tokens,
        tokenizer=tokenizer,
        token_strs=token_strs,
        lengths=lengths,
        mask=mask,
        added=added,
        name=name,
        objective=objective,
        store=store,
        source="nnsight",
    )


def _batched(
    layers: list[np.ndarray],
    maps: list[np.ndarray] | None,
    tokens,
    *,
    tokenizer,
    token_strs,
    lengths,
    mask,
    added,
    name,
    objective,
    store,
    source: str,
) -> Representations:
    """Per-layer (batch, pos, d) states and (batch, heads, pos, pos) maps cut into sentences,
    after the padding check (:func:`_check_padding`), with or without maps."""
    ids, rows = _rows(tokens, lengths, mask)
    pad = getattr(tokenizer, "pad_token_id", None)
    _check_padding(
        ids,
        rows,
        pad_id=int(pad) if isinstance(pad, (int, np.integer)) else None,
        given="lengths" if lengths is not None else "mask" if mask is not None else None,
    )
    for i, x in enumerate(layers):
        if x.ndim != 3 or x.shape[:2] != ids.shape:
            raise ValueError(
                f"layer {i} has shape {x.shape}; with tokens {ids.shape} each layer is (batch, pos, d) = "
                f"({ids.shape[0]}, {ids.shape[1]}, d)"
            )
    states = [np.stack([x[s, r] for x in layers]) for s, r in enumerate(rows)]
    attention = None
    if maps is not None:
        for i, a in enumerate(maps):
            if a.ndim != 4 or a.shape[0] != ids.shape[0] or a.shape[2:] != (ids.shape[1], ids.shape[1]):
                raise ValueError(
                    f"attention of block {i + 1} has shape {a.shape}; with tokens {ids.shape} it is (batch, heads, "
                    f"pos, pos) = ({ids.shape[0]}, heads, {ids.shape[1]}, {ids.shape[1]})"
                )
        attention = [np.stack([a[s][:, r][:, :, r] for a in maps]) for s, r in enumerate(rows)]
    token_ids = [ids[s, r] for s, r in enumerate(rows)]
    return from_activations(
        states,
        token_ids=token_ids,
        token_strs=token_strs,
        tokenizer=tokenizer,
        attention=attention,
        added=added,
        name=name,
        objective=objective,
        store=store,
        source=source,
    )
