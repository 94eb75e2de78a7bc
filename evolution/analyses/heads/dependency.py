"""Dependency heads of the heads analysis (:mod:`evolution.analyses.heads`): each head's
most attended other word against the arcs of two treebanks (Clark et al. 2019, section 4.2;
Voita et al. ACL 2019, section 5.2), in the three directions of
:data:`~evolution.metrics.heads.DIRECTIONS`."""

from __future__ import annotations

from typing import Any

import numpy as np

from evolution.analyses.base import Inputs, load_texts, required, save_texts
from evolution.config import HeadsConfig
from evolution.metrics.heads import DIRECTIONS, OFFSETS

#: the directions of Clark et al.'s table (their released code's "dep->head" and the transposed "head<-dep")
CLARK_DIRECTIONS = ("dependent_to_head", "head_to_dependent_clark")
#: the directions of Voita et al.'s syntactic heads (the relation read from either word's row)
VOITA_DIRECTIONS = ("dependent_to_head", "head_to_dependent")
SPLITS = ("select", "score")


def treebank_text(inputs: Inputs, treebank: str) -> str:
    """Check that ``treebank`` (an embedded name or a CoNLL-U file) parses (a bad file fails
    here, naming its line, not in a worker), save its text with
    :func:`~evolution.analyses.base.save_texts` and return the file's path."""
    import gzip

    from evolution.corpus.conllu import read_conllu, resolve_treebank

    path = resolve_treebank(treebank)
    read_conllu(path, max_sentences=required(inputs.config.heads, "heads").max_sentences)
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
        return save_texts(inputs.arrays_dir, "treebank", {"conllu": f.read()})


def dependency_task(
    *, spec: dict, treebank: str, text: str, heads: HeadsConfig, max_batch_tokens: int, torch_threads: int = 1
) -> dict[str, Any]:
    """Dependency arcs predicted by each head's maxima on ``treebank`` (re-running the
    model; no map is kept): per (layer, head, relation, direction) hits
    (:func:`~evolution.metrics.heads.dependency_hits`), arcs per relation, and the
    fixed-offset baseline's hits. ``text``: the treebank's
    content as saved by :func:`treebank_text` (beside the store, where any worker reads it)."""
    import torch

    from evolution.corpus.conllu import read_conllu, resolve_treebank
    from evolution.extract import batches
    from evolution.metrics.heads import dependency_hits, word_attention, word_units
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    sentences = read_conllu(
        resolve_treebank(treebank), max_sentences=heads.max_sentences, text=load_texts(text)["conllu"]
    )
    relations = sorted({r for s in sentences for r in s.deprel})
    code = {r: i for i, r in enumerate(relations)}
    L, H, R = adapter.num_layers, adapter.num_heads, len(relations)
    hits, arcs = np.zeros((L, H, R, len(DIRECTIONS)), np.int64), np.zeros(R, np.int64)
    offset_hits = np.zeros((len(OFFSETS), R, len(DIRECTIONS)), np.int64)
    kept, too_long, n_prefix, n_suffix = [], 0, len(adapter.prefix), len(adapter.suffix)
    for s in sentences:
        tok = adapter.tokenize(s.text)
        if len(tok) > adapter.max_content_tokens:
            too_long += 1
            continue
        if len(tok) == 0 or max(tok.word_ids) + 1 != len(s):
            continue  # the tokenizer lost a word: cannot align
        kept.append((s, tok))
    inputs = [adapter.build_input(tok.ids) for _, tok in kept]
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        _, att = adapter.forward([inputs[i] for i in batch], attention=True)
        assert att is not None  # attention=True
        for b, i in enumerate(batch):
            s, tok = kept[i]
            t = len(inputs[i])
            units = word_units(tok.word_ids, n_prefix=n_prefix, n_suffix=n_suffix)
            words = word_attention(att[:, b, :, :t, :t], units, rule=heads.word_rule)[
                ..., n_prefix : n_prefix + len(s), n_prefix : n_prefix + len(s)
            ]
            h, a, o = dependency_hits(words, s.head, [code[r] for r in s.deprel], R)
            hits += h
            arcs += a
            offset_hits += o
    notes = []
    if too_long:
        notes.append(
            f"{spec['name']}: {too_long} sentence(s) of {treebank} longer than the model's "
            f"{adapter.max_content_tokens} content positions were left out of the dependency analysis"
        )
    if len(kept) + too_long < len(sentences):
        notes.append(
            f"{spec['name']}: {len(sentences) - len(kept) - too_long} sentence(s) of {treebank} could not "
            "be aligned word by word and were left out"
        )
    return {
        "relations": relations,
        "hits": hits,
        "arcs": arcs,
        "offset_hits": offset_hits,
        "sentences": len(kept),
        "notes": notes,
    }
