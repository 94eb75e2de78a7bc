"""Token influence (Voita et al. 2019, section 5; ``docs/metrics.md``): mask one occurrence
out of the attention keys at layer n and measure how the other tokens' layer-n
states move, by frequency-rank bin of the masked token.

One unit per model that can mask attention keys per layer: every model this
project trains or ships (MT, LM, MLM and their seed / token-dropout controls);
Hugging Face models are skipped, and a fairseq model that cannot mask is noted
and left out of the group. It re-runs the model
(:func:`evolution.metrics.influence.token_influence`). Every model masks the
same occurrences where it has the same frequency ranks and token axis (same
seed), and its bootstrap replicates resample the same sentences (paired).

===============================  ====================================  ==================================
``influence/distance``           (metric, model, layer, freq_bin)      distance of the other tokens'
                                                                       layer-n states with vs without
                                                                       one key masked at n; layer 1..L
``influence/interval``           (metric, model, layer, freq_bin,      95% percentile interval of the
                                 bound)                                bootstrap over sentences (bound:
                                                                       low, high; NaN: no bootstrap)
``influence/distance_replicates``  (metric, model, layer, freq_bin,    the distance on each resample
                                 replicate)                            (replicate r: the same sentences
                                                                       in every bin, layer and model)
``influence/rows``,              (model, layer, freq_bin)              rows pooled (other tokens),
``influence/samples``                                                  occurrences masked
``influence/sentences``          (model, freq_bin)                     distinct sentences of the masked
                                                                       occurrences (bootstrap clusters)
``influence/available``          (model, freq_bin)                     occurrences of the bin in the
                                                                       analysed text that could be
                                                                       masked (sentences of >= 3 tokens)
===============================  ====================================  ==================================
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, required, strings
from evolution.analyses.plotting import by_group_panels, concat, figure, open_group, tidy
from evolution.config import InfluenceConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["Influence", "influence_task", "influence_by_frequency", "influence_tables"]


def influence_task(
    *,
    spec: dict,
    content_ids: dict[int, list[int]],
    samples: list[tuple[int, int, int]],
    influence: InfluenceConfig,
    n_bins: int,
    torch_threads: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Token influence of one model with its bootstrap over sentences (``seed``);
    ``{"unsupported": reason}`` for a model that cannot mask attention keys per layer."""
    import torch

    from evolution.metrics.influence import token_influence
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if not adapter.supports_key_masking:
        return {"unsupported": f"{spec['name']}: {type(adapter).__name__} cannot mask attention keys per layer"}
    return token_influence(
        adapter,
        content_ids={int(k): v for k, v in content_ids.items()},
        samples=samples,
        n_bins=n_bins,
        methods=influence.methods,
        epsilon=influence.epsilon,
        min_ratio=influence.min_ratio,
        bootstrap=influence.bootstrap,
        seed=seed,
    )


class Influence(Analysis):
    name = "influence"
    version = 2  # 2: bootstrap intervals over sentences, bins' sizes, the moment route for PWCCA / CKA
    section = "influence"

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.metrics.influence import sample_influencers
        from evolution.metrics.plan import content_ids_by_sentence
        from evolution.models.kinds import kind_of

        icfg = required(inputs.config.influence, "influence")
        units = []
        for m in inputs.models.values():
            if not kind_of(m.kind).supports_key_masking:  # as the task checks its adapter
                continue
            bins, _ = _bins(icfg, m)
            sentence, main = m.coords["sentence"], m.primary
            samples = sample_influencers(
                sentence=sentence[main],
                position=m.coords["position"][main],
                freq_rank=m.freq_rank[main],
                bins=bins,
                max_per_bin=icfg.max_per_bin,
                seed=inputs.seed,
            )
            content = content_ids_by_sentence(m.coords["token_id"], sentence, wanted={s for s, _, _ in samples})
            units.append(
                Unit(
                    m.name,
                    influence_task,
                    dict(
                        spec=m.spec,
                        content_ids=content,
                        samples=samples,
                        influence=icfg,
                        n_bins=len(bins),
                        torch_threads=inputs.torch_threads,
                        seed=inputs.seed,
                    ),
                    key={
                        "model": m.key,
                        "influence": resolved_dict(icfg),
                        "seed": inputs.seed,
                        "bins": bins,
                        "frequency": m.frequency,
                    },
                )
            )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        for name, r in results.items():
            for note in r.get("notes", []) + ([r["unsupported"]] if "unsupported" in r else []):
                logger.info("metrics: influence %s: %s", name, note)
        results = {n: results[n] for n in inputs.names if n in results and "unsupported" not in results[n]}
        if not results:
            return {}
        icfg = required(inputs.config.influence, "influence")
        methods = icfg.methods
        models = list(results)
        L = max(len(r["rows"]) for r in results.values())
        edges, notes = _bins(icfg, inputs.models[models[0]])  # one basis for the trained models of a run
        for note in notes:
            logger.info("metrics: influence: %s", note)
        from evolution.metrics.influence import bin_occurrences

        bins = [f"{lo}-{hi}" for lo, hi in edges]
        B = icfg.bootstrap
        dist = np.full((len(methods), len(models), L, len(bins)), np.nan)
        interval = np.full((len(methods), len(models), L, len(bins), 2), np.nan)
        boot = np.full((len(methods), len(models), L, len(bins), B), np.nan)
        rows = np.zeros((len(models), L, len(bins)), dtype=np.int64)
        samples = np.zeros_like(rows)
        sentences = np.zeros((len(models), len(bins)), dtype=np.int64)
        available = np.zeros_like(sentences)
        for i, m in enumerate(models):
            r = results[m]
            n = len(r["rows"])
            nb = len(r["rows"][0]) if n else 0
            for q, meth in enumerate(methods):
                dist[q, i, :n, :nb] = np.asarray(r["distance"][meth], dtype=float)
                if "interval" in r:
                    interval[q, i, :n, :nb] = np.asarray(r["interval"][meth], dtype=float)
                    boot[q, i, :n, :nb] = np.moveaxis(np.asarray(r["replicates"][meth], dtype=float), 0, -1)
            rows[i, :n, :nb], samples[i, :n, :nb] = r["rows"], r["samples"]
            sentences[i, :nb] = r.get("sentences", [0] * nb)
            mi = inputs.models[m]
            main = mi.primary
            available[i, :nb] = bin_occurrences(
                sentence=mi.coords["sentence"][main], freq_rank=mi.freq_rank[main], bins=_bins(icfg, mi)[0]
            )[:nb]
        ds = xr.Dataset(
            {
                "distance": (
                    ("metric", "model", "layer", "freq_bin"),
                    dist,
                    {"long_name": "distance of the other tokens' layer-n states with vs without the key masked"},
                ),
                "interval": (
                    ("metric", "model", "layer", "freq_bin", "bound"),
                    interval,
                    {"long_name": f"95% bootstrap interval over sentences ({B} replicates; NaN: none)"},
                ),
                "distance_replicates": (
                    ("metric", "model", "layer", "freq_bin", "replicate"),
                    boot,
                    {
                        "long_name": "the distance on each resample of sentences (replicate r: the same "
                        "sentences for every bin, layer and model)"
                    },
                ),
                "rows": (("model", "layer", "freq_bin"), rows, {"long_name": "other-token rows pooled"}),
                "samples": (("model", "layer", "freq_bin"), samples, {"long_name": "occurrences masked"}),
                "sentences": (
                    ("model", "freq_bin"),
                    sentences,
                    {"long_name": "distinct sentences of the masked occurrences (bootstrap clusters)"},
                ),
                "available": (
                    ("model", "freq_bin"),
                    available,
                    {"long_name": "occurrences of the bin in the analysed text (sentences of >= 3 tokens)"},
                ),
            },
            coords={
                "metric": strings(methods),
                "model": strings(models),
                "layer": np.arange(1, L + 1),
                "freq_bin": strings(bins),
                "rank_lo": ("freq_bin", [lo for lo, _ in edges]),
                "bound": strings(["low", "high"]),
                "replicate": np.arange(B),
            },
            attrs={
                "notes": notes + [n for r in results.values() for n in r.get("notes", [])],
                "frequency": inputs.models[models[0]].frequency,
                "bootstrap": B,
            },
        )
        return {"influence": ds}

    def tables(self, path) -> list[tuple[str, list[list[str]], str]]:
        return influence_tables(path)


def _bins(icfg, m) -> tuple[list[tuple[int, int]], list[str]]:
    from evolution.metrics.plan import frequency_bins

    return frequency_bins(icfg.freq_bins, ranked_types=m.ranked_types, basis=m.frequency)


@figure
def influence_by_frequency(path, metric: str = "pwcca"):
    """Token influence by frequency-rank bin of the masked token, one panel per model, a line per
    layer; the band around layer 1 is its 95% bootstrap interval over sentences."""
    ds = open_group(path, "influence")
    if ds is None or metric not in ds.metric.values:
        return None
    d = ds.distance.sel(metric=metric).load()
    out = by_group_panels(
        d,
        series="layer",
        label=lambda layer: f"layer {layer}",
        width=lambda layer: 2.5 if layer == 1 else 1.2,
        xlabel="frequency rank bin of the masked token",
        ylabel=f"{metric.upper()} distance\n(influence)",
    )
    if out is None or "interval" not in ds:
        return out
    fig, data = out
    kept = ~np.isnan(d).all(("model", "layer")).values  # the bins by_group_panels draws
    band = ds.interval.sel(metric=metric, layer=1).load().isel(freq_bin=kept)
    x = np.arange(int(kept.sum()))
    frames = [data]
    for ax, m in zip(fig.axes, d.model.values, strict=False):  # axes beyond the models: none drawn
        lo, hi = band.sel(model=m, bound="low").values, band.sel(model=m, bound="high").values
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color="0.5", alpha=0.25, linewidth=0)
            frames += [tidy(band.sel(model=m, bound=b), f"layer 1 {b}") for b in ("low", "high")]
    return fig, concat(frames)


def _bin_size_table(ds: xr.Dataset) -> list[list[str]]:
    """Rows: bin, ranks, occurrences available / masked / their sentences / rows at layer 1
    (a value that differs between models is given per model)."""

    def cell(values) -> str:
        values = [int(v) for v in values]
        if len(set(values)) == 1:
            return f"{values[0]:,}"
        return ", ".join(f"{m}: {v:,}" for m, v in zip(ds.model.values, values, strict=True))

    table = [["bin (frequency rank)", "available", "masked", "sentences", "rows at layer 1"]]
    for b in ds.freq_bin.values:
        table.append(
            [
                str(b),
                cell(ds.available.sel(freq_bin=b).values),
                cell(ds.samples.sel(freq_bin=b, layer=1).values),
                cell(ds.sentences.sel(freq_bin=b).values),
                cell(ds.rows.sel(freq_bin=b, layer=1).values),
            ]
        )
    return table


def influence_tables(path) -> list[tuple[str, list[list[str]], str]]:
    """The report's tables: the bins' sizes, and layer 1's distances with their intervals."""
    ds = open_group(path, "influence")
    if ds is None or "available" not in ds:
        return []
    ds = ds.load()
    out = [
        (
            "Token influence: frequency bins and their sizes",
            _bin_size_table(ds),
            "available: occurrences of the bin in the analysed text (sentences of >= 3 tokens); masked: those "
            "sampled (influence.max_per_bin); sentences: their sentences, the clusters of the bootstrap; rows: the "
            "other tokens' states pooled per (layer, bin).",
        )
    ]
    for metric in ds.metric.values:
        d = ds.distance.sel(metric=metric, layer=1)
        iv = ds.interval.sel(metric=metric, layer=1)
        table = [["model", *[str(b) for b in ds.freq_bin.values]]]
        for m in ds.model.values:
            row = [str(m)]
            for b in ds.freq_bin.values:
                v = float(d.sel(model=m, freq_bin=b))
                lo, hi = (float(x) for x in iv.sel(model=m, freq_bin=b).values)
                row.append("" if np.isnan(v) else f"{v:.2e}" + (f" [{lo:.2e}, {hi:.2e}]" if np.isfinite(lo) else ""))
            table.append(row)
        out.append(
            (
                f"Token influence at layer 1 ({str(metric).upper()} distance)",
                table,
                f"In brackets: the 95% bootstrap interval over sentences ({ds.attrs.get('bootstrap', 0)} "
                "replicates, each redoing the distance).",
            )
        )
    return out


Influence.figures = {
    "influence_pwcca": (
        lambda p: influence_by_frequency(p, "pwcca"),
        "Token influence: PWCCA distance between the other tokens' layer-n states with and without "
        "one token masked out of the attention keys at layer n, by the frequency rank of the masked "
        "token (section 5; rare tokens influential at layer 1 in MT and LM). Grey band: layer 1's "
        "95% bootstrap interval over sentences.",
    ),
}
