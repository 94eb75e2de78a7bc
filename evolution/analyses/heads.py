"""Attention heads across objectives: Clark et al. (2019) statistics, Voita et al.
(ACL 2019) confidence and positional heads, Kobayashi et al. (2020) attention
weights against vector norms (METHODS.md 7; :mod:`evolution.metrics.heads`).

One unit per model reads its stored attention maps (the first
``extract.attention.sentences`` sentences, with the norms where the model has
them) and pools per-head sums over every query of every sentence.

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

``layer`` runs 1..L (blocks), ``head`` 0..H-1; models with fewer layers or
heads are padded with NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, strings
from evolution.analyses.plotting import STYLES, open_group, plt
from evolution.config import MetricsConfig

__all__ = ["Heads", "heads_task", "entropy_by_head", "special_tokens_by_layer"]

KEY_TYPES = ("bos", "eos", "punct")


def heads_task(*, store: str, model: str, causal: bool) -> dict[str, Any]:
    """Pooled per-head sums over the stored attention sentences of ``model``."""
    from evolution.metrics.heads import COUNTS, MEASURES, head_sums, is_punctuation, key_shares
    from evolution.store import open_attention, open_representations

    reps = open_representations(store, model)
    att = open_attention(store, model)
    pieces = dict(zip(reps["token_id"].values.tolist(), (str(t) for t in reps["token_str"].values)))
    n_prefix, n_suffix = len(reps.attrs.get("prefix_ids", [])), len(reps.attrs.get("suffix_ids", []))
    has_norms = "weighted_norm" in att
    L, H = att.sizes["layer"], att.sizes["head"]
    sums, norm_sums = np.zeros((L, H, len(MEASURES))), np.zeros((L, H, len(KEY_TYPES)))
    layer_norm_sums = np.zeros((L, len(KEY_TYPES)))
    counts = dict.fromkeys(set(COUNTS.values()), 0)
    for k in range(att.sizes["sentence"]):
        t = int(att["length"].values[k])
        ids = att["input_id"].values[k, :t]
        bos = np.arange(t) < n_prefix
        eos = np.arange(t) >= t - n_suffix
        punct = np.array([not (b or e) and is_punctuation(pieces.get(int(i), "")) for i, b, e in zip(ids, bos, eos)])
        alpha = att["attention"].values[k, :, :, :t, :t]
        norm = att["weighted_norm"].values[k, :, :, :t, :t] if has_norms else None
        s, c, ns = head_sums(alpha, bos=bos, eos=eos, punct=punct, causal=causal, norm=norm)
        sums += s
        for name, v in c.items():
            counts[name] += v
        if has_norms:
            norm_sums += ns
            layer_norm_sums += key_shares(att["summed_norm"].values[k, :, :t, :t], [bos, eos, punct])
    out = {"sums": sums, "counts": counts, "sentences": int(att.sizes["sentence"])}
    if has_norms:
        out.update(norm_sums=norm_sums, layer_norm_sums=layer_norm_sums)
    return out


class Heads(Analysis):
    name = "heads"
    version = 1

    def enabled(self, config: MetricsConfig) -> bool:
        return config.heads is not None

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.store import has_attention

        units = []
        for m in inputs.models.values():
            if not has_attention(inputs.store, m.name):
                continue
            units.append(Unit(m.name, heads_task, dict(store=inputs.store, model=m.name, causal=m.objective == "lm"),
                              key={"model": m.key, "causal": m.objective == "lm"}))
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        from evolution.metrics.heads import COUNTS, MEASURES

        models = [n for n in inputs.names if n in results]
        if not models:
            return {}
        L = max(np.asarray(results[m]["sums"]).shape[0] for m in models)
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
            alpha_share[i, :l, :h] = value[i, :l, :h, [MEASURES.index(f"to_{k}") for k in KEY_TYPES]].transpose(1, 2, 0)
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
                    "sentences": ("model", [results[m]["sentences"] for m in models])})
        return {"heads": ds}


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


Heads.figures = {
    "heads_entropy": (entropy_by_head, "Entropy of each head's attention (dots), averaged over the queries of the "
                                       "stored sentences, against uniform attention (grey), per layer "
                                       "(Clark et al. 2019, fig. 4)."),
    "heads_special": (special_tokens_by_layer,
                      "Share of attention to the beginning token (BOS / [CLS]), the end token (EOS / [SEP]) and "
                      "punctuation per layer: attention weights averaged over heads (solid) against the norm of the "
                      "summed weighted vectors ||sum_h alpha f(x)|| (dashed), Kobayashi et al. (2020)."),
}
