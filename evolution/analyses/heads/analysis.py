"""The :class:`Heads` analysis (:mod:`evolution.analyses.heads`): its units and its
groups ``heads``, ``heads_map``, ``heads_decoder`` and ``heads_dependency``."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, required, strings
from evolution.analyses.heads.decoder import ATTENTIONS, decoder_task, decoder_text
from evolution.analyses.heads.dependency import DIRECTIONS, SPLITS, VOITA_DIRECTIONS, dependency_task, treebank_text
from evolution.analyses.heads.head_map import head_map_task
from evolution.analyses.heads.report import FIGURES, _tables
from evolution.analyses.heads.statistics import KEY_TYPES, heads_task
from evolution.metrics.heads import OFFSETS

logger = logging.getLogger(__package__)  # "evolution.analyses.heads", the logger's name before the split

#: what each dependency direction counts (coordinate ``direction_rule`` of ``heads_dependency``)
DIRECTION_RULES = {
    "dependent_to_head": "the dependent's most attended other word is its head (Clark et al.'s dep->head)",
    "head_to_dependent": "the head word's most attended other word is the dependent (its row; Voita et al.)",
    "head_to_dependent_clark": "the head word is the other word attending most to the dependent (the transposed "
    "map, Clark et al.'s released head<-dep)",
}


class Heads(Analysis):
    name = "heads"
    # 2: statistics over every sentence (re-run), frequency from training counts; 3: decoder heads;
    # 4: confidence over non-sink keys (confidence_with_sink beside it), Clark's transposed direction,
    # Clark's punctuation, rare-token tie rule and main-text filter, NaN for absent special tokens
    version = 4
    section = "heads"
    figures = FIGURES

    def tables(self, path):
        return _tables(path)

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.store import has_attention

        units = []
        hcfg = required(inputs.config.heads, "heads")
        for m in inputs.models.values():
            if not has_attention(inputs.store, m.name):
                continue
            units.append(
                Unit(
                    m.name,
                    heads_task,
                    dict(
                        store=inputs.store,
                        model=m.name,
                        spec=m.spec,
                        causal=m.objective == "lm",
                        max_batch_tokens=inputs.max_batch_tokens,
                        punctuation=hcfg.punctuation,
                        torch_threads=inputs.torch_threads,
                        sentences=hcfg.sentences,
                    ),
                    key={
                        "model": m.key,
                        "causal": m.objective == "lm",
                        "punctuation": hcfg.punctuation,
                        **({"sentences": hcfg.sentences} if hcfg.sentences else {}),
                    },
                )
            )
        if inputs.targets is not None:
            digest = inputs.targets.digest
            text = None
            for m in inputs.models.values():
                if m.objective == "mt":
                    text = text or decoder_text(inputs)
                    units.append(
                        Unit(
                            f"{m.name}-decoder",
                            decoder_task,
                            dict(
                                store=inputs.store,
                                model=m.name,
                                spec=m.spec,
                                text=text,
                                punctuation=hcfg.punctuation,
                                max_batch_tokens=inputs.max_batch_tokens,
                                torch_threads=inputs.torch_threads,
                            ),
                            key={"model": m.key, "targets": digest, "punctuation": hcfg.punctuation},
                        )
                    )
        with_maps = [u.kwargs["model"] for u in units if u.fn is heads_task]
        if with_maps:
            units.append(
                Unit(
                    "map",
                    head_map_task,
                    dict(store=inputs.store, models=with_maps, seed=inputs.seed),
                    key={"models": [inputs.models[m].key for m in with_maps], "seed": inputs.seed},
                )
            )
        if hcfg.select is not None:
            from evolution.corpus.conllu import resolve_treebank
            from evolution.provenance import file_hash

            texts = {split: treebank_text(inputs, getattr(hcfg, split)) for split in SPLITS}
            for m in inputs.models.values():
                for split in SPLITS:
                    treebank = getattr(hcfg, split)
                    units.append(
                        Unit(
                            f"{m.name}-dependency-{split}",
                            dependency_task,
                            dict(
                                spec=m.spec,
                                treebank=treebank,
                                text=texts[split],
                                heads=hcfg,
                                max_batch_tokens=inputs.max_batch_tokens,
                                torch_threads=inputs.torch_threads,
                            ),
                            key={
                                "model": m.key,
                                "treebank": file_hash(resolve_treebank(treebank)),
                                "max_sentences": hcfg.max_sentences,
                                "word_rule": hcfg.word_rule,
                            },
                        )
                    )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        from evolution.metrics.heads import COUNTS, MEASURES

        models = [n for n in inputs.names if n in results]
        decoder = self._decoder(inputs, results)
        if not models:
            return {} if decoder is None else {"heads_decoder": decoder}
        L = max(np.asarray(results[m]["sums"]).shape[0] for m in models)
        H = max(np.asarray(results[m]["sums"]).shape[1] for m in models)
        value = np.full((len(models), L, H, len(MEASURES)), np.nan)
        alpha_share = np.full((len(models), L, H, len(KEY_TYPES)), np.nan)
        norm_share = np.full_like(alpha_share, np.nan)
        layer_norm_share = np.full((len(models), L, len(KEY_TYPES)), np.nan)
        for i, m in enumerate(models):
            r = results[m]
            sums = np.asarray(r["sums"])
            n_layers, n_heads = sums.shape[:2]
            denom = np.array([r["counts"][COUNTS[name]] for name in MEASURES], dtype=float)
            value[i, :n_layers, :n_heads] = sums / np.maximum(denom, 1)
            alpha_share[i, :n_layers, :n_heads] = value[i, :n_layers, :n_heads][
                ..., [MEASURES.index(f"to_{k}") for k in KEY_TYPES]
            ]
            if "norm_sums" in r:
                norm_share[i, :n_layers, :n_heads] = np.asarray(r["norm_sums"]) / r["counts"]["queries"]
                layer_norm_share[i, :n_layers] = np.asarray(r["layer_norm_sums"]) / r["counts"]["queries"]
        offsets = value[..., [MEASURES.index(k) for k in ("max_prev", "max_self", "max_next")]]
        threshold = required(inputs.config.heads, "heads").positional_share
        positional = offsets.max(-1) >= threshold
        with warnings.catch_warnings():  # a special token no model has (BOS of MT, EOS of LM): NaN, not 0
            warnings.simplefilter("ignore", RuntimeWarning)
            layer_alpha_share = np.nanmean(alpha_share, axis=2)
        ds = xr.Dataset(
            {
                "value": (
                    ("model", "layer", "head", "measure"),
                    value,
                    {
                        "long_name": "per-head statistics (docs/heads.md); confidence: mean over content queries of "
                        "the largest weight on a content key (special tokens left out), "
                        "confidence_with_sink: the largest weight on any key; NaN for attention to a "
                        "special token the model's input does not have"
                    },
                ),
                "positional": (
                    ("model", "layer", "head"),
                    positional & ~np.isnan(offsets).all(-1),
                    {"long_name": f">= {threshold:.0%} of maxima on one relative offset (-1, 0 or +1)"},
                ),
                "alpha_share": (("model", "layer", "head", "key_type"), alpha_share),
                "norm_share": (("model", "layer", "head", "key_type"), norm_share),
                "layer_alpha_share": (("model", "layer", "key_type"), layer_alpha_share),
                "layer_norm_share": (("model", "layer", "key_type"), layer_norm_share),
            },
            coords={
                "model": strings(models),
                "layer": np.arange(1, L + 1),
                "head": np.arange(H),
                "measure": strings(MEASURES),
                "key_type": strings(KEY_TYPES),
                "sentences": ("model", [results[m]["sentences"] for m in models]),
            },
            attrs={
                "frequency": {m: results[m].get("frequency", "") for m in models},
                "punctuation": required(inputs.config.heads, "heads").punctuation,
            },
        )
        spearman = np.full((len(models), L, 2), np.nan)
        for i, m in enumerate(models):
            sp = np.asarray(results[m]["spearman"], dtype=float)
            spearman[i, : len(sp)] = sp
        rare = np.full((len(models), L, H), np.nan)
        for i, m in enumerate(models):
            if "rare_hits" in results[m]:
                hits = np.asarray(results[m]["rare_hits"], dtype=float)
                rare[i, : hits.shape[0], : hits.shape[1]] = hits / results[m]["rare_sentences"]
        ds["rare_token_share"] = (
            ("model", "layer", "head"),
            rare,
            {
                "long_name": "share of main-text sentences whose head maxima (content queries) go "
                "mostly to the least frequent token (training-split counts; ties: "
                "every tied rarest token counts, k tied modal keys share the hit; "
                "Voita et al. ACL 2019)"
            },
        )
        ds["spearman"] = (
            ("model", "layer", "quantity"),
            spearman,
            {
                "long_name": "Spearman correlation with the frequency rank of the key token (a rank that "
                "grows with rarity: positive when rarer tokens score higher), over the "
                "content tokens of the stored sentences (Kobayashi et al. 2020)"
            },
        )
        ds = ds.assign_coords(quantity=strings(["value_norm", "alpha_received"]))
        out = {"heads": ds}
        if "map" in results and results["map"].get("sentences"):
            r = results["map"]
            units = r["units"]
            out["heads_map"] = xr.Dataset(
                {
                    "js_distance": (
                        ("unit", "unit_b"),
                        np.asarray(r["distance"]),
                        {"long_name": "sqrt of the Jensen-Shannon divergence (nats) averaged over queries"},
                    ),
                    "xy": (("unit", "component"), np.asarray(r["xy"])),
                },
                coords={
                    "unit_model": ("unit", strings(u[0] for u in units)),
                    "unit_layer": ("unit", [u[1] for u in units]),
                    "unit_head": ("unit", [u[2] for u in units]),
                    "component": strings(["x", "y"]),
                },
                attrs={"sentences": r["sentences"], "queries": r["queries"]},
            )
        if decoder is not None:
            out["heads_decoder"] = decoder
        dep = self._dependency(inputs, results)
        if dep is not None:
            out["heads_dependency"] = dep
            ds["syntactic"] = dep["syntactic"].reindex(
                model=ds.model.values, layer=ds.layer.values, head=ds["head"].values, fill_value=False
            )
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
        L = max(np.asarray(r["sums"]).shape[1] for r in done.values())
        H = max(np.asarray(r["sums"]).shape[2] for r in done.values())
        value = np.full((len(models), len(ATTENTIONS), L, H, len(MEASURES)), np.nan)
        rare = np.full((len(models), len(ATTENTIONS), L, H), np.nan)
        for i, m in enumerate(models):
            r = done[m]
            sums = np.asarray(r["sums"], dtype=float)
            n_layers, n_heads = sums.shape[1:3]
            for j, a in enumerate(ATTENTIONS):
                denom = np.array([r["counts"][a][COUNTS[name]] for name in MEASURES], dtype=float)
                value[i, j, :n_layers, :n_heads] = sums[j] / np.maximum(denom, 1)
                if r["rare_sentences"][j]:
                    rare[i, j, :n_layers, :n_heads] = (
                        np.asarray(r["rare_hits"], dtype=float)[j] / r["rare_sentences"][j]
                    )
        offsets = value[..., [MEASURES.index(k) for k in ("max_prev", "max_self", "max_next")]]
        threshold = required(inputs.config.heads, "heads").positional_share
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            positional = np.nanmax(offsets, axis=-1) >= threshold
        return xr.Dataset(
            {
                "value": (
                    ("model", "attention", "layer", "head", "measure"),
                    value,
                    {
                        "long_name": "per-head statistics of the decoder, teacher-forced on the reference translation; "
                        "NaN where a measure does not apply (offsets in encoder-decoder attention)"
                    },
                ),
                "positional": (
                    ("model", "attention", "layer", "head"),
                    positional,
                    {
                        "long_name": f">= {threshold:.0%} of maxima on one relative offset (decoder "
                        "self-attention; -1 or 0 in a causal decoder)"
                    },
                ),
                "rare_token_share": (
                    ("model", "attention", "layer", "head"),
                    rare,
                    {
                        "long_name": "share of sentences whose head maxima go mostly to the least frequent "
                        "token: the target token (decoder self-attention, queries at or after "
                        "it) or the source token (encoder-decoder); training-split counts; "
                        "ties as in heads/rare_token_share"
                    },
                ),
            },
            coords={
                "model": strings(models),
                "attention": strings(ATTENTIONS),
                "layer": np.arange(1, L + 1),
                "head": np.arange(H),
                "measure": strings(MEASURES),
                "sentences": ("model", [done[m]["sentences"] for m in models]),
                "target_tokens": ("model", [done[m]["target_tokens"] for m in models]),
            },
        )

    def _dependency(self, inputs: Inputs, results: dict[str, dict]) -> xr.Dataset | None:
        """The ``heads_dependency`` group: accuracy per (model, split, layer, head, relation,
        direction), the offset baseline, the head picked on ``select`` scored on ``score``."""
        hcfg = required(inputs.config.heads, "heads")
        models = [n for n in inputs.names if f"{n}-dependency-score" in results]
        if not models:
            return None
        for m in models:
            for split in SPLITS:
                for note in results[f"{m}-dependency-{split}"]["notes"]:
                    logger.info("metrics: heads: %s", note)
        relations = sorted(
            {r for m in models for split in SPLITS for r in results[f"{m}-dependency-{split}"]["relations"]}
        )
        missing = [r for r in hcfg.relations if r not in relations]
        if missing:
            logger.warning(
                "metrics: heads: relation(s) %s do not occur in %s / %s (relations there: %s); "
                "fix metrics.heads.relations",
                missing,
                hcfg.select,
                hcfg.score,
                ", ".join(relations),
            )
        L = max(np.asarray(results[f"{m}-dependency-score"]["hits"]).shape[0] for m in models)
        H = max(np.asarray(results[f"{m}-dependency-score"]["hits"]).shape[1] for m in models)
        acc = np.full((len(models), 2, L, H, len(relations), len(DIRECTIONS)), np.nan)
        base = np.full((len(models), 2, len(relations), len(DIRECTIONS), len(OFFSETS)), np.nan)
        arcs = np.zeros((len(models), 2, len(relations)), np.int64)
        for i, m in enumerate(models):
            for j, split in enumerate(SPLITS):
                r = results[f"{m}-dependency-{split}"]
                cols = [relations.index(x) for x in r["relations"]]
                n = np.asarray(r["arcs"], dtype=float)
                hits = np.asarray(r["hits"], dtype=float)
                with np.errstate(invalid="ignore", divide="ignore"):
                    acc[i, j, : hits.shape[0], : hits.shape[1]][..., cols, :] = hits / n[:, None]
                    base[i, j][cols] = (np.asarray(r["offset_hits"], dtype=float) / n[None, :, None]).transpose(1, 2, 0)
                arcs[i, j, cols] = r["arcs"]
        ds = xr.Dataset(
            {
                "accuracy": (
                    ("model", "split", "layer", "head", "relation", "direction"),
                    acc,
                    {"long_name": "share of arcs that the head's maxima predict, by direction (direction_rule)"},
                ),
                "offset_accuracy": (("model", "split", "relation", "direction", "offset"), base),
                "arcs": (("model", "split", "relation"), arcs),
            },
            coords={
                "model": strings(models),
                "split": strings(SPLITS),
                "layer": np.arange(1, L + 1),
                "head": np.arange(H),
                "relation": strings(relations),
                "direction": strings(DIRECTIONS),
                "offset": list(OFFSETS),
                "treebank": ("split", strings([hcfg.select, hcfg.score])),
                "direction_rule": ("direction", strings(DIRECTION_RULES[d] for d in DIRECTIONS)),
            },
            attrs={"word_rule": hcfg.word_rule},
        )
        # the head picked on the select split, scored on the score split; and the paper's number
        # (picked and scored on the same data) beside it
        flat = lambda x: x.reshape(x.shape[0], L * H, *x.shape[3:])  # noqa: E731 - (model, layer*head, R, D)
        pick = np.nan_to_num(flat(acc[:, 0]), nan=-1.0).argmax(axis=1)  # (model, R, D)
        picked = np.take_along_axis(flat(acc[:, 1]), pick[:, None], axis=1)[:, 0]
        dims = ("model", "relation", "direction")
        ds["picked_layer"] = (dims, pick // H + 1)
        ds["picked_head"] = (dims, pick % H)
        ds["picked_accuracy"] = (
            dims,
            picked,
            {"long_name": "score-split accuracy of the head picked on the select split"},
        )
        with warnings.catch_warnings():  # relations without arcs in a split (root) stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            best = np.nanmax(flat(acc[:, 1]), axis=1)
            voita = [DIRECTIONS.index(d) for d in VOITA_DIRECTIONS]  # syntactic heads: Voita et al.'s directions
            margin = (
                np.nanmax(acc[:, 1][..., voita], axis=-1)
                - np.nanmax(base[:, 1][..., voita, :], axis=(-1, -2))[:, None, None, :]
            )
        ds["best_accuracy"] = (
            dims,
            best,
            {"long_name": "best head picked and scored on the score split (as Clark et al.)"},
        )
        base_pick = np.nan_to_num(base[:, 0], nan=-1.0).argmax(axis=-1)  # (model, R, D)
        ds["baseline_offset"] = (dims, np.asarray(OFFSETS)[base_pick])
        ds["baseline_accuracy"] = (
            dims,
            np.take_along_axis(base[:, 1], base_pick[..., None], axis=-1)[..., 0],
            {"long_name": "score-split accuracy of the offset picked on the select split"},
        )
        keep = [relations.index(r) for r in hcfg.relations if r in relations]
        ds["syntactic"] = (
            ("model", "layer", "head", "syntactic_relation"),
            margin[..., keep] >= hcfg.syntactic_margin,
            {
                "long_name": f"score-split accuracy (dependent_to_head or head_to_dependent) >= the "
                f"best offset baseline of these directions + "
                f"{hcfg.syntactic_margin:g} (Voita et al. ACL 2019)"
            },
        )
        ds = ds.assign_coords(syntactic_relation=strings([relations[k] for k in keep]))
        return ds
