"""Token influence (Voita et al. 2019, section 5; METHODS.md 5): mask one occurrence
out of the attention keys at layer n and measure how the other tokens' layer-n
states move, by frequency-rank bin of the masked token.

One unit per model that can mask attention keys per layer (this project's
fairseq models; Hugging Face models are skipped, and a fairseq model that
cannot mask is noted and left out of the group). It re-runs the model
(:func:`evolution.metrics.influence.token_influence`).

========================  =============================  ================================
``influence/distance``    (metric, model, layer,         distance of the other tokens'
                          freq_bin)                      layer-n states with vs without
                                                         one key masked at n; layer 1..L
``influence/rows``,       (model, layer, freq_bin)       rows pooled, occurrences masked
``influence/samples``
========================  =============================  ================================
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, strings
from evolution.analyses.plotting import by_group_panels, open_group
from evolution.config import InfluenceConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["Influence", "influence_task", "influence_by_frequency"]


def influence_task(*, spec: dict, content_ids: dict[int, list[int]], samples: list[tuple[int, int, int]],
                   influence: InfluenceConfig, n_bins: int, torch_threads: int = 1) -> dict[str, Any]:
    """Token influence of one model; ``{"unsupported": reason}`` for a model that cannot
    mask attention keys per layer."""
    import torch

    from evolution.metrics.influence import token_influence
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if not adapter.supports_key_masking:
        return {"unsupported": f"{spec['name']}: {type(adapter).__name__} cannot mask attention keys per layer"}
    return token_influence(adapter, content_ids={int(k): v for k, v in content_ids.items()}, samples=samples,
                           n_bins=n_bins, methods=influence.methods,
                           epsilon=influence.epsilon, min_ratio=influence.min_ratio)


class Influence(Analysis):
    name = "influence"
    version = 1
    section = "influence"

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.metrics.influence import sample_influencers
        from evolution.metrics.plan import content_ids_by_sentence

        icfg = inputs.config.influence
        units = []
        for m in inputs.models.values():
            if m.kind == "huggingface":
                continue
            bins, _ = _bins(icfg, m)
            sentence, main = m.coords["sentence"], m.primary
            samples = sample_influencers(sentence=sentence[main], position=m.coords["position"][main],
                                         freq_rank=m.freq_rank[main], bins=bins, max_per_bin=icfg.max_per_bin,
                                         seed=inputs.seed)
            content = content_ids_by_sentence(m.coords["token_id"], sentence, wanted={s for s, _, _ in samples})
            units.append(Unit(m.name, influence_task,
                              dict(spec=m.spec, content_ids=content, samples=samples, influence=icfg,
                                   n_bins=len(bins), torch_threads=inputs.torch_threads),
                              key={"model": m.key, "influence": resolved_dict(icfg), "seed": inputs.seed,
                                   "bins": bins, "frequency": m.frequency}))
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        for name, r in results.items():
            for note in r.get("notes", []) + ([r["unsupported"]] if "unsupported" in r else []):
                logger.info("metrics: influence %s: %s", name, note)
        results = {n: results[n] for n in inputs.names if n in results and "unsupported" not in results[n]}
        if not results:
            return {}
        icfg = inputs.config.influence
        methods = icfg.methods
        models = list(results)
        L = max(len(r["rows"]) for r in results.values())
        edges, notes = _bins(icfg, inputs.models[models[0]])  # one basis for the trained models of a run
        for note in notes:
            logger.info("metrics: influence: %s", note)
        bins = [f"{lo}-{hi}" for lo, hi in edges]
        dist = np.full((len(methods), len(models), L, len(bins)), np.nan)
        rows = np.zeros((len(models), L, len(bins)), dtype=np.int64)
        samples = np.zeros_like(rows)
        for i, m in enumerate(models):
            r = results[m]
            n = len(r["rows"])
            for q, meth in enumerate(methods):
                dist[q, i, :n] = np.asarray(r["distance"][meth], dtype=float)
            rows[i, :n], samples[i, :n] = r["rows"], r["samples"]
        ds = xr.Dataset(
            {"distance": (("metric", "model", "layer", "freq_bin"), dist,
                          {"long_name": "distance of the other tokens' layer-n states with vs without the key masked"}),
             "rows": (("model", "layer", "freq_bin"), rows), "samples": (("model", "layer", "freq_bin"), samples)},
            coords={"metric": strings(methods), "model": strings(models), "layer": np.arange(1, L + 1),
                    "freq_bin": strings(bins), "rank_lo": ("freq_bin", [lo for lo, _ in edges])},
            attrs={"notes": notes + [n for r in results.values() for n in r.get("notes", [])],
                   "frequency": inputs.models[models[0]].frequency})
        return {"influence": ds}


def _bins(icfg, m) -> tuple[list[tuple[int, int]], list[str]]:
    from evolution.metrics.plan import frequency_bins

    return frequency_bins(icfg.freq_bins, ranked_types=m.ranked_types, basis=m.frequency)


def influence_by_frequency(path, metric: str = "pwcca"):
    """Token influence by frequency-rank bin of the masked token, one panel per model, a line per layer."""
    ds = open_group(path, "influence")
    if ds is None or metric not in ds.metric.values:
        return None
    return by_group_panels(ds.distance.sel(metric=metric).load(), series="layer",
                           label=lambda layer: f"layer {layer}", width=lambda layer: 2.5 if layer == 1 else 1.2,
                           xlabel="frequency rank bin of the masked token",
                           ylabel=f"{metric.upper()} distance (influence)")


Influence.figures = {
    "influence_pwcca": (lambda p: influence_by_frequency(p, "pwcca"),
                        "Token influence: PWCCA distance between the other tokens' layer-n states with and without "
                        "one token masked out of the attention keys at layer n, by the frequency rank of the masked "
                        "token (section 5; rare tokens influential at layer 1 in MT and LM)."),
}
