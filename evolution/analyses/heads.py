"""Attention heads across objectives: Clark et al. (2019) statistics, Voita et al.
(ACL 2019) confidence and positional heads, Kobayashi et al. (2020) attention
weights against vector norms (METHODS.md 7; :mod:`evolution.metrics.heads`).

One unit per model re-runs it over every sentence of the analysis set (the
store's token ids, so truncation is the extraction's) and pools per-head sums
over every query, keeping no map; the head map reads the stored maps (the first
``extract.attention.sentences`` sentences) of every model; the dependency
units re-run each model on two treebanks; a translation model's decoder unit
re-runs it teacher-forced on the reference translations.

============================  ==============================  ==========================================
``heads/value``               (model, layer, head, measure)   entropy (nats) and its uniform baseline,
                                                              attention to BOS / [CLS] (``to_bos``),
                                                              EOS / [SEP] (``to_eos``), punctuation,
                                                              self, previous, next token; confidence;
                                                              share of maxima at offset -1 / 0 / +1
``heads/positional``          (model, layer, head)            >= heads.positional_share (90%) of maxima
                                                              on one offset
``heads/alpha_share``,        (model, layer, head, key_type)  share of each query's attention weight /
``heads/norm_share``                                          of its ||alpha f(x)|| going to bos, eos,
                                                              punct keys
``heads/layer_alpha_share``,  (model, layer, key_type)        the same per layer: weights averaged over
``heads/layer_norm_share``                                    heads / ||sum_h alpha f(x)||
============================  ==============================  ==========================================

``heads/rare_token_share``     (model, layer, head)            share of sentences whose maxima go mostly
                                                              to the least frequent token (training-split
                                                              counts; trained models only)
``heads/spearman``             (model, layer, quantity)        Spearman correlation of ||f(x)|| / of the
                                                              attention a token receives with its
                                                              frequency rank (Kobayashi et al. 2020)
``heads/syntactic``            (model, layer, head,            dependency accuracy >= the best offset
                              syntactic_relation)             baseline + heads.syntactic_margin
``heads_map/js_distance``     (unit, unit_b)                  Jensen-Shannon distance between all heads
``heads_map/xy``              (unit, component)               their 2-D MDS map; unit_model, unit_layer,
                                                              unit_head say which head a unit is
``heads_dependency/...``      (model, split, layer, head,     dependency accuracy (Clark et al.), the
                              relation, direction)            offset baseline, the head picked on the
                                                              select treebank and its score accuracy
``heads_decoder/value``,      (model, attention, layer,       translation models: the statistics above
``positional``,               head[, measure])                for the decoder self-attention and the
``rare_token_share``                                          encoder-decoder attention, teacher-forced
                                                              on the reference (parallel corpora)

``layer`` runs 1..L (blocks), ``head`` 0..H-1; models with fewer layers or
heads are padded with NaN. Select the head dimension as ``ds["head"]``
(``ds.head`` is xarray's method).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_texts, save_texts, strings
from evolution.analyses.plotting import STYLES, open_group, plt
from evolution.config import HeadsConfig
from evolution.metrics.heads import OFFSETS
from evolution.metrics.plan import rows_by_sentence

logger = logging.getLogger(__name__)

__all__ = ["Heads", "heads_task", "dependency_task", "entropy_by_head", "special_tokens_by_layer",
           "dependency_heatmap", "head_roles"]

DIRECTIONS = ("dependent_to_head", "head_to_dependent")
SPLITS = ("select", "score")

KEY_TYPES = ("bos", "eos", "punct")


def treebank_text(inputs: Inputs, treebank: str) -> str:
    """Check that ``treebank`` (an embedded name or a CoNLL-U file) parses (a bad file fails
    here, naming its line, not in a worker), save its text with
    :func:`~evolution.analyses.base.save_texts` and return the file's path."""
    import gzip

    from evolution.corpus.conllu import read_conllu, resolve_treebank

    path = resolve_treebank(treebank)
    read_conllu(path, max_sentences=inputs.config.heads.max_sentences)
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
        return save_texts(inputs.arrays_dir, "treebank", {"conllu": f.read()})


def dependency_task(*, spec: dict, treebank: str, text: str, heads: HeadsConfig, max_batch_tokens: int,
                    torch_threads: int = 1) -> dict[str, Any]:
    """Dependency arcs predicted by each head's most attended other word on ``treebank``
    (re-running the model; no map is kept): per (layer, head, relation, direction) hits,
    arcs per relation, and the fixed-offset baseline's hits. ``text``: the treebank's
    content as saved by :func:`treebank_text` (beside the store, where any worker reads it)."""
    import torch

    from evolution.corpus.conllu import read_conllu, resolve_treebank
    from evolution.extract import batches
    from evolution.metrics.heads import dependency_hits, word_attention, word_units
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    sentences = read_conllu(resolve_treebank(treebank), max_sentences=heads.max_sentences,
                            text=load_texts(text)["conllu"])
    relations = sorted({r for s in sentences for r in s.deprel})
    code = {r: i for i, r in enumerate(relations)}
    L, H, R = adapter.num_layers, adapter.num_heads, len(relations)
    hits, arcs = np.zeros((L, H, R, 2), np.int64), np.zeros(R, np.int64)
    offset_hits = np.zeros((len(OFFSETS), R, 2), np.int64)
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
        for b, i in enumerate(batch):
            s, tok = kept[i]
            t = len(inputs[i])
            units = word_units(tok.word_ids, n_prefix=n_prefix, n_suffix=n_suffix)
            words = word_attention(att[:, b, :, :t, :t], units, rule=heads.word_rule)[..., n_prefix:n_prefix + len(s),
                                                                                      n_prefix:n_prefix + len(s)]
            h, a, o = dependency_hits(words, s.head, [code[r] for r in s.deprel], R)
            hits += h
            arcs += a
            offset_hits += o
    notes = []
    if too_long:
        notes.append(f"{spec['name']}: {too_long} sentence(s) of {treebank} longer than the model's "
                     f"{adapter.max_content_tokens} content positions were left out of the dependency analysis")
    if len(kept) + too_long < len(sentences):
        notes.append(f"{spec['name']}: {len(sentences) - len(kept) - too_long} sentence(s) of {treebank} could not "
                     "be aligned word by word and were left out")
    return {"relations": relations, "hits": hits, "arcs": arcs, "offset_hits": offset_hits,
            "sentences": len(kept), "notes": notes}


def rare_token_hit(alpha: np.ndarray, *, rare: int, eos: np.ndarray) -> np.ndarray:
    """(L, H) whether each head's maxima in one sentence go mostly to position ``rare`` (the
    sentence's least frequent token): the key most often holding a query's maximum weight,
    EOS queries excluded (Voita et al. ACL 2019, rare-token heads)."""
    amax = alpha[..., ~eos, :].argmax(-1)  # (L, H, queries)
    modes = np.apply_along_axis(lambda a: np.bincount(a, minlength=alpha.shape[-1]).argmax(), -1, amax)
    return (modes == rare).astype(float)


def heads_task(*, store: str, model: str, spec: dict, causal: bool, max_batch_tokens: int,
               torch_threads: int = 1) -> dict[str, Any]:
    """Per-head sums over every sentence of the analysis set, streamed: the model re-runs on
    the stored token ids (truncation included) in batches and no map is kept. Also the
    Spearman correlation of ||f(x)|| and of the attention a token receives with its
    frequency (Kobayashi et al. 2020, section 5; both averaged over heads, per layer), and
    the rare-token hits (Voita et al. ACL 2019). Frequency: the training-split counts
    (``train_count``) where the store has them, else the store's ``freq_rank``."""
    import torch
    from scipy.stats import spearmanr

    from evolution.extract import batches
    from evolution.metrics.heads import COUNTS, MEASURES, head_sums, is_punctuation, key_shares
    from evolution.models import cached_adapter
    from evolution.store import open_representations

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    reps = open_representations(store, model)
    rows_of = rows_by_sentence(reps["sentence"].values)
    token_id, token_str = reps["token_id"].values, reps["token_str"].values
    train_count = reps["train_count"].values if "train_count" in reps.coords else None
    rank = -train_count if train_count is not None else reps["freq_rank"].values  # Spearman: any monotone rank
    sentences = sorted(rows_of)
    inputs = [adapter.build_input(token_id[rows_of[s]].tolist()) for s in sentences]
    n_prefix, n_suffix = adapter.content_offset, len(adapter.suffix)
    has_norms = adapter.supports_norms
    L, H = adapter.num_layers, adapter.num_heads
    sums, norm_sums = np.zeros((L, H, len(MEASURES))), np.zeros((L, H, len(KEY_TYPES)))
    layer_norm_sums = np.zeros((L, len(KEY_TYPES)))
    counts = dict.fromkeys(set(COUNTS.values()), 0)
    ranks, received, value_norm = [], [], []  # per content token: frequency, (L,) means over heads
    rare_hits, rare_sentences = np.zeros((L, H)), 0
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        xs = [inputs[i] for i in batch]
        if has_norms:
            _, att, norms = adapter.forward_norms(xs)
        else:
            (_, att), norms = adapter.forward(xs, attention=True), None
        for b, i in enumerate(batch):
            t, rows = len(inputs[i]), rows_of[sentences[i]]
            bos = np.arange(t) < n_prefix
            eos = np.arange(t) >= t - n_suffix
            punct = np.zeros(t, bool)
            punct[n_prefix:t - n_suffix] = [is_punctuation(str(p)) for p in token_str[rows]]
            alpha = np.asarray(att[:, b, :, :t, :t], dtype=np.float64)
            norm = np.asarray(norms["weighted_norm"][:, b, :, :t, :t], dtype=np.float64) if has_norms else None
            s, c, ns = head_sums(alpha, bos=bos, eos=eos, punct=punct, causal=causal, norm=norm)
            sums += s
            for name, v in c.items():
                counts[name] += v
            content = slice(n_prefix, t - n_suffix)
            if train_count is not None and len(rows) > 1:  # the sentence's least frequent token
                rare_hits += rare_token_hit(alpha, rare=n_prefix + int(np.argmin(train_count[rows])), eos=eos)
                rare_sentences += 1
            ranks.append(rank[rows])
            received.append(alpha.mean(axis=(1, 2))[:, content])  # (L, n): per key, mean over heads and queries
            if has_norms:
                norm_sums += ns
                value_norm.append(np.asarray(norms["value_norm"][:, b, :, :t], dtype=np.float64).mean(1)[:, content])
                layer_norm_sums += key_shares(np.asarray(norms["summed_norm"][:, b, :t, :t], dtype=np.float64),
                                              [bos, eos, punct])
    out: dict[str, Any] = {"sums": sums, "counts": counts, "sentences": len(sentences),
                           "frequency": "train_count" if train_count is not None else "freq_rank"}
    spearman = np.full((L, 2), np.nan)
    r = np.concatenate(ranks)
    for j, values in enumerate((value_norm, received)):
        if values:
            v = np.concatenate(values, axis=1)
            spearman[:, j] = [spearmanr(v[layer], r).statistic for layer in range(L)]
    out["spearman"] = spearman
    if rare_sentences:
        out.update(rare_hits=rare_hits, rare_sentences=rare_sentences)
    if has_norms:
        out.update(norm_sums=norm_sums, layer_norm_sums=layer_norm_sums)
    return out


ATTENTIONS = ("decoder_self", "encoder_decoder")


def decoder_text(inputs: Inputs) -> str:
    """Save the analysed sentences' reference translations and the training split's target
    side with :func:`~evolution.analyses.base.save_texts` (beside the representation store,
    where every worker reads) and return the file's path."""
    from pathlib import Path

    return save_texts(inputs.arrays_dir, "heads-decoder",
                      {"targets": "\n".join(inputs.targets.sentences),
                       "training": Path(inputs.targets.training_text).read_text(encoding="utf-8")})


def decoder_task(*, store: str, model: str, spec: dict, text: str, max_batch_tokens: int,
                 torch_threads: int = 1) -> dict[str, Any]:
    """The decoder heads of a translation model (Voita et al. ACL 2019 measured the roles of
    encoder heads; here the same statistics where they apply to the decoder): teacher-forced
    on the reference translation ``targets[s]`` of every analysed sentence ``s`` (``text``:
    the arrays of :func:`decoder_text`, beside the store so that any worker reads them; the
    store's source token ids, truncation included), per-head sums of :data:`MEASURES`
    for the decoder self-attention (causal; queries ``</s> y1..ym``) and the
    encoder-decoder attention (keys: the source ``x1..xn </s>``), pooled as in
    :func:`heads_task`, and the rare-token hits: the least frequent target token (counts
    on the training split's target side; queries that can see it) and the least frequent source
    token (the store's ``train_count``)."""
    import torch
    from collections import Counter

    from evolution.extract import batches
    from evolution.metrics.heads import MEASURES, cross_head_sums, head_sums, is_punctuation
    from evolution.models import cached_adapter
    from evolution.store import open_representations

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if not adapter.supports_decoder:
        return {"unsupported": f"{model}: {type(adapter).__name__} cannot return decoder attention; decoder heads "
                               "are measured for fairseq translation models"}
    texts = load_texts(text)
    targets = texts["targets"].split("\n")
    reps = open_representations(store, model)
    rows_of = rows_by_sentence(reps["sentence"].values)
    token_id, token_str = reps["token_id"].values, reps["token_str"].values
    source_count = reps["train_count"].values if "train_count" in reps.coords else None
    sentences = [s for s in sorted(rows_of) if s < len(targets) and targets[s].strip()]
    target_counts: Counter = Counter()
    for line in texts["training"].splitlines():
        if line.strip():
            target_counts.update(adapter.tokenize_target(line.strip()).ids)
    limit, truncated = adapter.max_target_tokens, 0
    pairs = []
    for s in sentences:
        tok = adapter.tokenize_target(targets[s])
        truncated += len(tok) > limit
        ids, pieces = tok.ids[:limit], tok.pieces[:limit]
        pairs.append((adapter.build_input(token_id[rows_of[s]].tolist()), adapter.build_decoder_input(ids), ids, pieces))
    n_prefix = adapter.content_offset
    src_suffix = len(adapter.suffix)
    sums = {a: 0.0 for a in ATTENTIONS}
    counts = {a: Counter() for a in ATTENTIONS}
    rare_hits = {a: 0.0 for a in ATTENTIONS}
    rare_sentences = {a: 0 for a in ATTENTIONS}
    for batch in batches([max(len(p[0]), len(p[1])) for p in pairs], max_batch_tokens=max_batch_tokens):
        own, cross = adapter.forward_decoder([pairs[i][0] for i in batch], [pairs[i][1] for i in batch])
        for b, i in enumerate(batch):
            src, dec, ids, pieces = pairs[i]
            rows = rows_of[sentences[i]]
            ts, tt = len(src), len(dec)
            dec_punct = np.array([False] + [is_punctuation(p) for p in pieces])
            first = np.arange(tt) == 0
            a_own = np.asarray(own[:, b, :, :tt, :tt], dtype=np.float64)
            s_own, c_own, _ = head_sums(a_own, bos=first, eos=np.zeros(tt, bool), punct=dec_punct, causal=True)
            src_punct = np.zeros(ts, bool)
            src_punct[n_prefix:ts - src_suffix] = [is_punctuation(str(p)) for p in token_str[rows]]
            a_cross = np.asarray(cross[:, b, :, :tt, :ts], dtype=np.float64)
            s_cross, c_cross = cross_head_sums(a_cross, bos=np.arange(ts) < n_prefix,
                                               eos=np.arange(ts) >= ts - src_suffix, punct=src_punct)
            for a, sm, c in (("decoder_self", s_own, c_own), ("encoder_decoder", s_cross, c_cross)):
                sums[a] = sums[a] + sm
                counts[a].update(c)
            if len(ids) > 1:  # the least frequent target token, for the queries at or after it
                rare = 1 + int(np.argmin([target_counts.get(t, 0) for t in ids]))
                rare_hits["decoder_self"] += rare_token_hit(a_own, rare=rare, eos=np.arange(tt) < rare)
                rare_sentences["decoder_self"] += 1
            if source_count is not None and len(rows) > 1:
                rare = n_prefix + int(np.argmin(source_count[rows]))
                rare_hits["encoder_decoder"] += rare_token_hit(a_cross, rare=rare, eos=np.zeros(tt, bool))
                rare_sentences["encoder_decoder"] += 1
    if not pairs:
        return {"sentences": 0, "notes": [f"{model}: no analysed sentence has a target side; no decoder heads"]}
    notes = []
    if truncated:
        notes.append(f"{model}: {truncated} target sentence(s) longer than the decoder's {limit} positions were "
                     "truncated for the decoder heads")
    return {"sums": np.stack([np.asarray(sums[a]) for a in ATTENTIONS]),
            "counts": {a: dict(counts[a]) for a in ATTENTIONS},
            "rare_hits": np.stack([np.zeros(np.shape(sums[a])[:2]) + rare_hits[a] for a in ATTENTIONS]),
            "rare_sentences": [rare_sentences[a] for a in ATTENTIONS], "sentences": len(pairs),
            "target_tokens": int(sum(len(p[2]) for p in pairs)), "notes": notes,
            "measures": list(MEASURES)}


def head_map_task(*, store: str, models: list[str], seed: int) -> dict[str, Any]:
    """Jensen-Shannon distance between every two heads of ``models`` (Clark et al. 2019,
    section 6): word-level attention among content words (special tokens dropped, rows
    renormalised) on the stored sentences every model has, JS divergence averaged over
    queries, its square root a distance; and a 2-D MDS map of it."""
    from sklearn.manifold import MDS

    from evolution.metrics.heads import js_divergence_sums, word_attention, word_units
    from evolution.store import open_attention, open_attention_array, open_representations

    per_model = {}
    for m in models:
        reps, att = open_representations(store, m), open_attention(store, m)
        per_model[m] = {"rows": rows_by_sentence(reps["sentence"].values), "word_id": reps["word_id"].values,
                        "prefix": len(reps.attrs.get("prefix_ids", [])), "suffix": len(reps.attrs.get("suffix_ids", [])),
                        "index": {int(s): k for k, s in enumerate(att["sentence"].values)},
                        "length": att["length"].values, "attention": open_attention_array(store, m),
                        "shape": (att.sizes["layer"], att.sizes["head"])}
    common = sorted(set.intersection(*(set(p["index"]) for p in per_model.values())))
    units = [(m, layer + 1, h) for m in models for layer in range(per_model[m]["shape"][0])
             for h in range(per_model[m]["shape"][1])]
    js = np.zeros((len(units), len(units)))
    n_queries = 0
    for s in common:
        maps = []
        for m in models:
            p = per_model[m]
            k, t = p["index"][s], int(p["length"][p["index"][s]])
            wid = p["word_id"][p["rows"][s]]
            if len(wid) != t - p["prefix"] - p["suffix"]:
                break
            alpha = np.asarray(p["attention"][k, :, :, :t, :t], dtype=np.float64)
            w = word_attention(alpha, word_units(wid, n_prefix=p["prefix"], n_suffix=p["suffix"]))
            n = int(wid.max()) + 1
            w = w[..., p["prefix"]:p["prefix"] + n, p["prefix"]:p["prefix"] + n] + 1e-12
            maps.append((w / w.sum(-1, keepdims=True)).reshape(-1, n, n))
        if len(maps) < len(models) or len({x.shape[1] for x in maps}) > 1 or maps[0].shape[1] < 2:
            continue
        js += js_divergence_sums(np.concatenate(maps))  # (units, units)
        n_queries += maps[0].shape[1]
    if n_queries == 0:
        return {"units": units, "sentences": 0}
    dist = np.sqrt(np.clip(js / n_queries, 0, None))
    xy = MDS(n_components=2, metric="precomputed", init="classical_mds", random_state=seed,
             normalized_stress="auto").fit_transform(dist)
    return {"units": units, "distance": dist, "xy": xy, "sentences": len(common), "queries": n_queries}


class Heads(Analysis):
    name = "heads"
    version = 3  # 2: statistics over every sentence (re-run), frequency from training counts; 3: decoder heads
    section = "heads"

    def tables(self, path):
        return _tables(path)

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.store import has_attention

        units = []
        for m in inputs.models.values():
            if not has_attention(inputs.store, m.name):
                continue
            units.append(Unit(m.name, heads_task,
                              dict(store=inputs.store, model=m.name, spec=m.spec, causal=m.objective == "lm",
                                   max_batch_tokens=inputs.max_batch_tokens, torch_threads=inputs.torch_threads),
                              key={"model": m.key, "causal": m.objective == "lm"}))
        if inputs.targets is not None:
            import hashlib

            digest = hashlib.sha256("\n".join(inputs.targets.sentences).encode()).hexdigest()[:16]
            text = None
            for m in inputs.models.values():
                if m.objective == "mt":
                    text = text or decoder_text(inputs)
                    units.append(Unit(f"{m.name}-decoder", decoder_task,
                                      dict(store=inputs.store, model=m.name, spec=m.spec,
                                           text=text,
                                           max_batch_tokens=inputs.max_batch_tokens,
                                           torch_threads=inputs.torch_threads),
                                      key={"model": m.key, "targets": digest}))
        with_maps = [u.kwargs["model"] for u in units if u.fn is heads_task]
        if with_maps:
            units.append(Unit("map", head_map_task, dict(store=inputs.store, models=with_maps, seed=inputs.seed),
                              key={"models": [inputs.models[m].key for m in with_maps], "seed": inputs.seed}))
        hcfg = inputs.config.heads
        if hcfg.select is not None:
            from evolution.corpus.conllu import resolve_treebank
            from evolution.provenance import file_hash

            texts = {split: treebank_text(inputs, getattr(hcfg, split)) for split in SPLITS}
            for m in inputs.models.values():
                for split in SPLITS:
                    treebank = getattr(hcfg, split)
                    units.append(Unit(f"{m.name}-dependency-{split}", dependency_task,
                                      dict(spec=m.spec, treebank=treebank, text=texts[split], heads=hcfg,
                                           max_batch_tokens=inputs.max_batch_tokens,
                                           torch_threads=inputs.torch_threads),
                                      key={"model": m.key, "treebank": file_hash(resolve_treebank(treebank)),
                                           "max_sentences": hcfg.max_sentences, "word_rule": hcfg.word_rule}))
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        from evolution.metrics.heads import COUNTS, MEASURES

        models = [n for n in inputs.names if n in results]
        decoder = self._decoder(inputs, results)
        if not models:
            return {} if decoder is None else {"heads_decoder": decoder}
        L = max(np.asarray(results[m]["sums"]).shape[0] for m in models)  # noqa: N806
        H = max(np.asarray(results[m]["sums"]).shape[1] for m in models)
        value = np.full((len(models), L, H, len(MEASURES)), np.nan)
        alpha_share = np.full((len(models), L, H, len(KEY_TYPES)), np.nan)
        norm_share = np.full_like(alpha_share, np.nan)
        layer_norm_share = np.full((len(models), L, len(KEY_TYPES)), np.nan)
        for i, m in enumerate(models):
            r = results[m]
            sums = np.asarray(r["sums"])
            l, h = sums.shape[:2]
            denom = np.array([r["counts"][COUNTS[name]] for name in MEASURES], dtype=float)
            value[i, :l, :h] = sums / np.maximum(denom, 1)
            alpha_share[i, :l, :h] = value[i, :l, :h][..., [MEASURES.index(f"to_{k}") for k in KEY_TYPES]]
            if "norm_sums" in r:
                norm_share[i, :l, :h] = np.asarray(r["norm_sums"]) / r["counts"]["queries"]
                layer_norm_share[i, :l] = np.asarray(r["layer_norm_sums"]) / r["counts"]["queries"]
        offsets = value[..., [MEASURES.index(k) for k in ("max_prev", "max_self", "max_next")]]
        threshold = inputs.config.heads.positional_share
        positional = offsets.max(-1) >= threshold
        ds = xr.Dataset(
            {"value": (("model", "layer", "head", "measure"), value),
             "positional": (("model", "layer", "head"), positional & ~np.isnan(offsets).all(-1),
                            {"long_name": f">= {threshold:.0%} of maxima on one relative offset (-1, 0 or +1)"}),
             "alpha_share": (("model", "layer", "head", "key_type"), alpha_share),
             "norm_share": (("model", "layer", "head", "key_type"), norm_share),
             "layer_alpha_share": (("model", "layer", "key_type"), np.nanmean(alpha_share, axis=2)),
             "layer_norm_share": (("model", "layer", "key_type"), layer_norm_share)},
            coords={"model": strings(models), "layer": np.arange(1, L + 1), "head": np.arange(H),
                    "measure": strings(MEASURES), "key_type": strings(KEY_TYPES),
                    "sentences": ("model", [results[m]["sentences"] for m in models])},
            attrs={"frequency": {m: results[m].get("frequency", "") for m in models}})
        spearman = np.full((len(models), L, 2), np.nan)
        for i, m in enumerate(models):
            sp = np.asarray(results[m]["spearman"], dtype=float)
            spearman[i, :len(sp)] = sp
        rare = np.full((len(models), L, H), np.nan)
        for i, m in enumerate(models):
            if "rare_hits" in results[m]:
                hits = np.asarray(results[m]["rare_hits"], dtype=float)
                rare[i, :hits.shape[0], :hits.shape[1]] = hits / results[m]["rare_sentences"]
        ds["rare_token_share"] = (("model", "layer", "head"), rare,
                                  {"long_name": "share of sentences whose head maxima go mostly to the least frequent "
                                                "token (training-split counts; Voita et al. ACL 2019)"})
        ds["spearman"] = (("model", "layer", "quantity"), spearman,
                          {"long_name": "Spearman correlation with the frequency rank of the key token, over the "
                                        "content tokens of the stored sentences (Kobayashi et al. 2020)"})
        ds = ds.assign_coords(quantity=strings(["value_norm", "alpha_received"]))
        out = {"heads": ds}
        if "map" in results and results["map"].get("sentences"):
            r = results["map"]
            units = r["units"]
            out["heads_map"] = xr.Dataset(
                {"js_distance": (("unit", "unit_b"), np.asarray(r["distance"]),
                                 {"long_name": "sqrt of the Jensen-Shannon divergence (nats) averaged over queries"}),
                 "xy": (("unit", "component"), np.asarray(r["xy"]))},
                coords={"unit_model": ("unit", strings(u[0] for u in units)),
                        "unit_layer": ("unit", [u[1] for u in units]), "unit_head": ("unit", [u[2] for u in units]),
                        "component": strings(["x", "y"])},
                attrs={"sentences": r["sentences"], "queries": r["queries"]})
        if decoder is not None:
            out["heads_decoder"] = decoder
        dep = self._dependency(inputs, results)
        if dep is not None:
            out["heads_dependency"] = dep
            ds["syntactic"] = dep["syntactic"].reindex(model=ds.model.values, layer=ds.layer.values,
                                                       head=ds["head"].values, fill_value=False)
        return out

    def _decoder(self, inputs: Inputs, results: dict[str, dict]) -> xr.Dataset | None:
        """The ``heads_decoder`` group: per (model, attention, layer, head, measure) the
        statistics of a translation model's decoder self-attention and encoder-decoder
        attention; positional heads (decoder self-attention only) and rare-token shares."""
        from evolution.metrics.heads import COUNTS, MEASURES

        done = {}
        for n in inputs.names:
            r = results.get(f"{n}-decoder")
            if r is None:
                continue
            for note in r.get("notes", []) + ([r["unsupported"]] if "unsupported" in r else []):
                logger.info("metrics: heads: %s", note)
            if r.get("sentences"):
                done[n] = r
        if not done:
            return None
        models = list(done)
        L = max(np.asarray(r["sums"]).shape[1] for r in done.values())  # noqa: N806
        H = max(np.asarray(r["sums"]).shape[2] for r in done.values())
        value = np.full((len(models), len(ATTENTIONS), L, H, len(MEASURES)), np.nan)
        rare = np.full((len(models), len(ATTENTIONS), L, H), np.nan)
        for i, m in enumerate(models):
            r = done[m]
            sums = np.asarray(r["sums"], dtype=float)
            l, h = sums.shape[1:3]
            for j, a in enumerate(ATTENTIONS):
                denom = np.array([r["counts"][a][COUNTS[name]] for name in MEASURES], dtype=float)
                value[i, j, :l, :h] = sums[j] / np.maximum(denom, 1)
                if r["rare_sentences"][j]:
                    rare[i, j, :l, :h] = np.asarray(r["rare_hits"], dtype=float)[j] / r["rare_sentences"][j]
        offsets = value[..., [MEASURES.index(k) for k in ("max_prev", "max_self", "max_next")]]
        threshold = inputs.config.heads.positional_share
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            positional = np.nanmax(offsets, axis=-1) >= threshold
        return xr.Dataset(
            {"value": (("model", "attention", "layer", "head", "measure"), value,
                       {"long_name": "per-head statistics of the decoder, teacher-forced on the reference translation; "
                                     "NaN where a measure does not apply (offsets in encoder-decoder attention)"}),
             "positional": (("model", "attention", "layer", "head"), positional,
                            {"long_name": f">= {threshold:.0%} of maxima on one relative offset (decoder "
                                          "self-attention; -1 or 0 in a causal decoder)"}),
             "rare_token_share": (("model", "attention", "layer", "head"), rare,
                                  {"long_name": "share of sentences whose head maxima go mostly to the least frequent "
                                                "token: the target token (decoder self-attention, queries at or after "
                                                "it) or the source token (encoder-decoder); training-split counts"})},
            coords={"model": strings(models), "attention": strings(ATTENTIONS), "layer": np.arange(1, L + 1),
                    "head": np.arange(H), "measure": strings(MEASURES),
                    "sentences": ("model", [done[m]["sentences"] for m in models]),
                    "target_tokens": ("model", [done[m]["target_tokens"] for m in models])})

    def _dependency(self, inputs: Inputs, results: dict[str, dict]) -> xr.Dataset | None:
        """The ``heads_dependency`` group: accuracy per (model, split, layer, head, relation,
        direction), the offset baseline, the head picked on ``select`` scored on ``score``."""
        hcfg = inputs.config.heads
        models = [n for n in inputs.names if f"{n}-dependency-score" in results]
        if not models:
            return None
        for m in models:
            for split in SPLITS:
                for note in results[f"{m}-dependency-{split}"]["notes"]:
                    logger.info("metrics: heads: %s", note)
        relations = sorted({r for m in models for split in SPLITS for r in results[f"{m}-dependency-{split}"]["relations"]})
        missing = [r for r in hcfg.relations if r not in relations]
        if missing:
            logger.warning("metrics: heads: relation(s) %s do not occur in %s / %s (relations there: %s); "
                           "fix metrics.heads.relations", missing, hcfg.select, hcfg.score, ", ".join(relations))
        L = max(np.asarray(results[f"{m}-dependency-score"]["hits"]).shape[0] for m in models)
        H = max(np.asarray(results[f"{m}-dependency-score"]["hits"]).shape[1] for m in models)
        acc = np.full((len(models), 2, L, H, len(relations), 2), np.nan)
        base = np.full((len(models), 2, len(relations), 2, len(OFFSETS)), np.nan)
        arcs = np.zeros((len(models), 2, len(relations)), np.int64)
        for i, m in enumerate(models):
            for j, split in enumerate(SPLITS):
                r = results[f"{m}-dependency-{split}"]
                cols = [relations.index(x) for x in r["relations"]]
                n = np.asarray(r["arcs"], dtype=float)
                hits = np.asarray(r["hits"], dtype=float)
                with np.errstate(invalid="ignore", divide="ignore"):
                    acc[i, j, :hits.shape[0], :hits.shape[1]][..., cols, :] = hits / n[:, None]
                    base[i, j][cols] = (np.asarray(r["offset_hits"], dtype=float) / n[None, :, None]).transpose(1, 2, 0)
                arcs[i, j, cols] = r["arcs"]
        ds = xr.Dataset(
            {"accuracy": (("model", "split", "layer", "head", "relation", "direction"), acc,
                          {"long_name": "share of arcs whose other word is the head's most attended other word"}),
             "offset_accuracy": (("model", "split", "relation", "direction", "offset"), base),
             "arcs": (("model", "split", "relation"), arcs)},
            coords={"model": strings(models), "split": strings(SPLITS), "layer": np.arange(1, L + 1),
                    "head": np.arange(H), "relation": strings(relations), "direction": strings(DIRECTIONS),
                    "offset": list(OFFSETS), "treebank": ("split", strings([hcfg.select, hcfg.score]))},
            attrs={"word_rule": hcfg.word_rule})
        # the head picked on the select split, scored on the score split; and the paper's number
        # (picked and scored on the same data) beside it
        flat = lambda x: x.reshape(x.shape[0], L * H, *x.shape[3:])  # noqa: E731 - (model, layer*head, R, D)
        pick = np.nan_to_num(flat(acc[:, 0]), nan=-1.0).argmax(axis=1)  # (model, R, D)
        picked = np.take_along_axis(flat(acc[:, 1]), pick[:, None], axis=1)[:, 0]
        dims = ("model", "relation", "direction")
        ds["picked_layer"] = (dims, pick // H + 1)
        ds["picked_head"] = (dims, pick % H)
        ds["picked_accuracy"] = (dims, picked, {"long_name": "score-split accuracy of the head picked on the "
                                                             "select split"})
        with warnings.catch_warnings():  # relations without arcs in a split (root) stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            best = np.nanmax(flat(acc[:, 1]), axis=1)
            margin = np.nanmax(acc[:, 1], axis=-1) - np.nanmax(base[:, 1], axis=(-1, -2))[:, None, None, :]
        ds["best_accuracy"] = (dims, best,
                               {"long_name": "best head picked and scored on the score split (as Clark et al.)"})
        base_pick = np.nan_to_num(base[:, 0], nan=-1.0).argmax(axis=-1)  # (model, R, D)
        ds["baseline_offset"] = (dims, np.asarray(OFFSETS)[base_pick])
        ds["baseline_accuracy"] = (dims, np.take_along_axis(base[:, 1], base_pick[..., None], axis=-1)[..., 0],
                                   {"long_name": "score-split accuracy of the offset picked on the select split"})
        keep = [relations.index(r) for r in hcfg.relations if r in relations]
        ds["syntactic"] = (("model", "layer", "head", "syntactic_relation"), margin[..., keep] >= hcfg.syntactic_margin,
                           {"long_name": f"score-split accuracy (either direction) >= the best offset baseline + "
                                         f"{hcfg.syntactic_margin:g} (Voita et al. ACL 2019)"})
        ds = ds.assign_coords(syntactic_relation=strings([relations[k] for k in keep]))
        return ds


def _tables(path) -> list[tuple[str, list[list[str]], str]]:
    """Head roles per model, dependency heads for Voita et al.'s relations, frequency correlations."""
    ds, dep = open_group(path, "heads"), open_group(path, "heads_dependency")
    out = []
    if ds is None:
        return out
    f = lambda v: "" if not np.isfinite(v) else f"{v:.2f}"  # noqa: E731
    head = ["model", "positional heads", "max rare-token share (layer-head)"]
    rels = list(ds.syntactic_relation.values) if "syntactic" in ds else []
    rows = [head + [f"syntactic {r}" for r in rels]]
    for m in ds.model.values:
        rare = ds.rare_token_share.sel(model=m).values
        where = np.unravel_index(np.nanargmax(rare), rare.shape) if np.isfinite(rare).any() else None
        rows.append([str(m), str(int(ds.positional.sel(model=m).sum()))]
                    + [f"{np.nanmax(rare):.2f} ({where[0] + 1}-{where[1]})" if where else ""]
                    + [str(int(ds.syntactic.sel(model=m, syntactic_relation=r).sum())) for r in rels])
    out.append(("Head roles", rows, "Positional: >= 90% of maxima on one offset; rare-token: share of sentences whose "
                "maxima go mostly to the least frequent token (training-split counts); syntactic: dependency accuracy "
                ">= the offset baseline + 10 points (Voita et al. ACL 2019)."))
    if dep is not None:
        rows = [["model", "relation", "direction", "head (dev)", "test accuracy", "same-data best", "offset baseline"]]
        for m in dep.model.values:
            for r in [x for x in ("nsubj", "obj", "amod", "advmod") if x in dep.relation.values]:
                for d in dep.direction.values:
                    sel = dict(model=m, relation=r, direction=d)
                    rows.append([str(m), r, str(d).replace("_", " "),
                                 f"{int(dep.picked_layer.sel(**sel))}-{int(dep.picked_head.sel(**sel))}",
                                 f(dep.picked_accuracy.sel(**sel).item()), f(dep.best_accuracy.sel(**sel).item()),
                                 f"{f(dep.baseline_accuracy.sel(**sel).item())} "
                                 f"(offset {int(dep.baseline_offset.sel(**sel)):+d})"])
        out.append(("Dependency heads", rows, f"Picked on {dep.treebank.values[0]}, scored on {dep.treebank.values[1]} "
                    "(layer-head counted from 1-0); same-data best: picked and scored on the second, as Clark et al."))
    dec = open_group(path, "heads_decoder")
    if dec is not None:
        rows = [["model", "attention", "layer", "entropy (uniform)", "confidence", "to </s>", "to punct.",
                 "positional heads", "max rare-token share"]]
        for m in dec.model.values:
            for a in dec.attention.values:
                v = dec.value.sel(model=m, attention=a)
                for layer in dec.layer.values:
                    x = v.sel(layer=layer)
                    if np.isnan(x.sel(measure="entropy")).all():
                        continue
                    mean = lambda name: x.sel(measure=name).mean("head").item()  # noqa: E731
                    rows.append([str(m), str(a).replace("_", "-"), str(int(layer)),
                                 f"{f(mean('entropy'))} ({f(mean('uniform_entropy'))})", f(mean("confidence")),
                                 f(mean("to_bos" if a == "decoder_self" else "to_eos")), f(mean("to_punct")),
                                 str(int(dec.positional.sel(model=m, attention=a, layer=layer).sum()))
                                 if a == "decoder_self" else "n/a",
                                 f(dec.rare_token_share.sel(model=m, attention=a, layer=layer).max().item())])
        out.append(("Decoder heads of the translation model", rows,
                    "Teacher-forced on the reference translations of the analysed sentences; means over heads. "
                    "Decoder self-attention: to </s> is the start symbol, positional heads have >= 90% of maxima on "
                    "offset -1 or 0; encoder-decoder: to </s> is the source's end, positions do not apply. "
                    "Rare-token share: the least frequent target (self) or source (encoder-decoder) token."))
    rows = [["model", "quantity"] + [str(int(v)) for v in ds.layer.values]]
    for m in ds.model.values:
        for q in ds.quantity.values:
            rows.append([str(m), str(q)] + [f(v) for v in ds.spearman.sel(model=m, quantity=q).values])
    out.append(("Spearman correlation with frequency rank, by layer", rows,
                "Of ||f(x)|| (averaged over heads) and of the attention a token receives, over the content tokens of "
                "the analysis set (Kobayashi et al. 2020); frequency: training-split counts where the model has them "
                f"({', '.join(f'{m}: {v}' for m, v in ds.attrs.get('frequency', {}).items())}); a positive value: rarer "
                "tokens score higher."))
    return out


def entropy_by_head(path):
    """Per model, the entropy of every head (dots) by layer against the uniform baseline (line)."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    models = list(ds.model.values)
    fig, axes = pyplot.subplots(1, len(models), figsize=(3.8 * len(models), 3.2), squeeze=False, sharey=True,
                                layout="constrained")
    for i, (ax, m) in enumerate(zip(axes[0], models)):
        v = ds.value.sel(model=m)
        for layer in ds.layer.values:
            e = v.sel(layer=layer, measure="entropy").values
            ax.scatter(np.full(len(e), layer), e, s=14, color=STYLES[i % len(STYLES)]["color"],
                       marker=STYLES[i % len(STYLES)]["marker"])
        ax.plot(ds.layer, v.sel(measure="uniform_entropy").mean("head"), color="grey", lw=0.8, label="uniform")
        ax.set(title=str(m), xlabel="layer")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("entropy of a head's attention (nats)")
    return fig


def special_tokens_by_layer(path):
    """Share of attention going to BOS / EOS / punctuation per layer: weights (solid) and
    ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020) fig. 2-3."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    fig, axes = pyplot.subplots(1, len(KEY_TYPES), figsize=(4 * len(KEY_TYPES), 3.2), squeeze=False, sharey=True,
                                layout="constrained")
    for ax, k in zip(axes[0], KEY_TYPES):
        for i, m in enumerate(ds.model.values):
            color = STYLES[i % len(STYLES)]["color"]
            ax.plot(ds.layer, ds.layer_alpha_share.sel(model=m, key_type=k), color=color, marker="o", label=f"{m}: alpha")
            norm = ds.layer_norm_share.sel(model=m, key_type=k)
            if not np.isnan(norm.values).all():
                ax.plot(ds.layer, norm, color=color, linestyle="--", marker="x", label=f"{m}: ||sum alpha f||")
        ax.set(title=f"to {k}", xlabel="layer", ylim=(0, 1))
    axes[0][0].set_ylabel("share of each query's attention")
    axes[0][-1].legend(fontsize=6)
    return fig


def dependency_heatmap(path, top: int = 15):
    """Per direction: relations x models, the score-split accuracy of the head picked on the
    select split, annotated with it and (in brackets) the offset baseline's."""
    ds = open_group(path, "heads_dependency")
    if ds is None:
        return None
    pyplot = plt()
    arcs = ds.arcs.sel(split="score").sum("model").values
    rel = ds.relation.values[np.argsort(-arcs, kind="stable")[:top]]
    models = list(ds.model.values)
    fig, axes = pyplot.subplots(1, 2, figsize=(2.2 + 1.6 * len(models) * 2, 0.35 * len(rel) + 1.6), squeeze=False,
                                layout="constrained")
    for ax, direction in zip(axes[0], ds.direction.values):
        acc = ds.picked_accuracy.sel(direction=direction, relation=rel).transpose("relation", "model").values
        base = ds.baseline_accuracy.sel(direction=direction, relation=rel).transpose("relation", "model").values
        im = ax.imshow(acc, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for r in range(acc.shape[0]):
            for c in range(acc.shape[1]):
                if np.isfinite(acc[r, c]):
                    ax.text(c, r, f"{acc[r, c]:.2f} ({base[r, c]:.2f})", ha="center", va="center", fontsize=6,
                            color="white" if acc[r, c] < 0.6 else "black")
        ax.set_xticks(range(len(models)), models, fontsize=8)
        ax.set_yticks(range(len(rel)), rel, fontsize=7)
        ax.set_title(str(direction).replace("_", " "), fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), fraction=0.03, label="accuracy of the dev-picked head on test")
    return fig


def head_roles(path):
    """Per model, how many heads are positional and, per relation, syntactic."""
    ds = open_group(path, "heads")
    if ds is None:
        return None
    pyplot = plt()
    roles = {"positional": ds.positional.sum(("layer", "head")).values}
    if "syntactic" in ds:
        for r in ds.syntactic_relation.values:
            roles[f"syntactic {r}"] = ds.syntactic.sel(syntactic_relation=r).sum(("layer", "head")).values
    models = list(ds.model.values)
    fig, ax = pyplot.subplots(figsize=(1.2 + 0.9 * len(roles) * len(models) / 2, 3.2), layout="constrained")
    width = 0.8 / len(models)
    x = np.arange(len(roles))
    for i, m in enumerate(models):
        ax.bar(x + i * width, [v[i] for v in roles.values()], width, label=str(m),
               color=STYLES[i % len(STYLES)]["color"])
    ax.set_xticks(x + width * (len(models) - 1) / 2, list(roles), rotation=30, fontsize=7)
    ax.set(ylabel="heads", title=f"head roles ({int(ds.sizes['layer'] * ds.sizes['head'])} heads per model at most)")
    ax.legend(fontsize=7)
    return fig


def head_map(path):
    """All heads of all models in one 2-D MDS map of their Jensen-Shannon distances."""
    ds = open_group(path, "heads_map")
    if ds is None:
        return None
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(5.2, 4.4), layout="constrained")
    layers = ds.unit_layer.values
    for i, m in enumerate(dict.fromkeys(ds.unit_model.values)):
        sel = ds.unit_model.values == m
        style = STYLES[i % len(STYLES)]
        ax.scatter(ds.xy.values[sel, 0], ds.xy.values[sel, 1], s=12 + 10 * layers[sel], color=style["color"],
                   marker=style["marker"], alpha=0.75, label=str(m))
    ax.set(title=f"heads by Jensen-Shannon distance (MDS; {ds.attrs.get('sentences')} sentences)",
           xticks=[], yticks=[])
    ax.legend(fontsize=7, title="marker size: layer", title_fontsize=7)
    return fig


Heads.figures = {
    "heads_entropy": (entropy_by_head, "Entropy of each head's attention (dots), averaged over the queries of the "
                                       "stored sentences, against uniform attention (grey), per layer "
                                       "(Clark et al. 2019, fig. 4)."),
    "heads_special": (special_tokens_by_layer,
                      "Share of attention to the beginning token (BOS / [CLS]), the end token (EOS / [SEP]) and "
                      "punctuation per layer: attention weights averaged over heads (solid) against the norm of the "
                      "summed weighted vectors ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020)."),
    "heads_dependency": (dependency_heatmap,
                         "Dependency relations (the 15 most frequent) found by one attention head: accuracy on the "
                         "score treebank (UD EWT test) of the head picked on the select treebank (UD EWT dev), in "
                         "brackets the best fixed-offset baseline picked the same way (Clark et al. 2019, section "
                         "4.2; they picked and scored on the same data: heads_dependency/best_accuracy)."),
    "heads_map": (head_map, "Every head of every model placed by multidimensional scaling of the Jensen-Shannon "
                            "distance between their word-level attention (content words; Clark et al. 2019, fig. 6)."),
    "heads_roles": (head_roles, "Head roles per model: positional heads (>= 90% of maxima on one offset) and "
                                "syntactic heads per relation (>= 10 points over the offset baseline), Voita et al. "
                                "(ACL 2019)."),
}
