"""Who are a token's nearest neighbours (Voita et al. 2019, section 6, figure 5; METHODS.md 3).

One unit per (model, layer): on the main text, the same-token rate among the
k nearest neighbours of pooled occurrences of the frequent types, and among
occurrences of one type the position distance and the same left / right
neighbour rates; with annotated text (``corpus.annotated``), the same POS
tag / dependency relation rates among one type's occurrences there, beside
the rate of random neighbours (``_chance``).

====================  ======================  ===========================================
``neighbors/value``   (model, layer, measure)  same_token, position_distance, same_left,
                                               same_right; with annotated text also
                                               same_pos, same_deprel (+ ``_chance``)
``neighbors/interval``  (..., bound)           95% bootstrap interval over sentences
                                               (``neighbors.bootstrap`` replicates)
====================  ======================  ===========================================
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, save_arrays, strings
from evolution.analyses.plotting import STYLES, open_group, plt
from evolution.config import NeighborsConfig, resolved_dict

__all__ = ["Neighbors", "layer_task", "neighbors_by_layer", "MEASURES"]

MEASURES = ("same_token", "position_distance", "same_left", "same_right",
            "same_pos", "same_pos_chance", "same_deprel", "same_deprel_chance")


def layer_task(*, store: str, model: str, layer: int, arrays: str, neighbors: NeighborsConfig,
               seed: int = 0) -> dict[str, Any]:
    """The measures of one (model, layer) and their bootstrap intervals over sentences
    (``interval``: measure -> (low, high)); ``arrays`` holds
    ``neighbors/{rows,token,position,left,right,sentence}`` and, with annotated text,
    ``syntax/{rows,token,position,sentence,pos,deprel}``."""
    from evolution.metrics.neighbors import bootstrap_interval, knn, same_label_per_query, within_type_measures
    from evolution.store import read_rows

    a = load_arrays(arrays)
    c = neighbors
    x = read_rows(store, model, layer, a["neighbors/rows"])
    ids = knn(x, k=c.k, metric=c.metric, index=c.index)
    same = same_label_per_query(ids, a["neighbors/token"])
    within, queries = within_type_measures(x, types=a["neighbors/token"], position=a["neighbors/position"],
                                           annotations={"left": a["neighbors/left"], "right": a["neighbors/right"]},
                                           k=c.k, metric=c.metric, per_query=True)
    out: dict[str, Any] = {"same_token": float(np.nanmean(same)), **within}
    interval: dict[str, tuple[float, float]] = {}
    if c.bootstrap:
        boot = dict(sentence=a["neighbors/sentence"], n_boot=c.bootstrap, seed=seed + layer)
        interval["same_token"] = bootstrap_interval(same, **boot)
        interval.update({name: bootstrap_interval(v, groups=a["neighbors/token"], **boot) for name, v in queries.items()})
    if "syntax/rows" in a:  # on the annotated text: same POS / dependency relation among same-token neighbours
        r, queries = within_type_measures(read_rows(store, model, layer, a["syntax/rows"]), types=a["syntax/token"],
                                          position=a["syntax/position"],
                                          annotations={"pos": a["syntax/pos"], "deprel": a["syntax/deprel"]},
                                          k=c.k, metric=c.metric, chance=True, per_query=True)
        out.update({name: v for name, v in r.items() if name.startswith("same_")})
        if c.bootstrap:
            boot = dict(sentence=a["syntax/sentence"], groups=a["syntax/token"], n_boot=c.bootstrap, seed=seed + layer)
            interval.update({name: bootstrap_interval(v, **boot) for name, v in queries.items()
                             if name.startswith("same_")})
    out["interval"] = interval
    return out


class Neighbors(Analysis):
    name = "neighbors"
    version = 2  # 2: bootstrap intervals over sentences
    section = "neighbors"

    def units(self, inputs: Inputs) -> list[Unit]:
        cfg = inputs.config
        units = []
        for m in inputs.models.values():
            nb = m.plan.neighbors
            if not nb or len(nb["rows"]) <= 1:
                continue
            parts = {f"neighbors/{k}": v for k, v in nb.items()}
            parts.update({f"syntax/{k}": v for k, v in (m.plan.syntax or {}).items()})
            arrays = save_arrays(inputs.arrays_dir, f"neighbors-{m.name}", parts)
            key = {"model": m.key, "neighbors": resolved_dict(cfg.neighbors), "tokens": resolved_dict(cfg.tokens),
                   "seed": inputs.seed}
            units += [Unit(f"{m.name}-{layer}", layer_task,
                           dict(store=inputs.store, model=m.name, layer=layer, arrays=arrays, neighbors=cfg.neighbors,
                                seed=inputs.seed),
                           key={**key, "layer": layer})
                      for layer in range(m.n_layers)]
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        models, L = inputs.names, inputs.max_layers
        measures = [n for n in MEASURES if any(n in r for r in results.values())]
        val = np.full((len(models), L, len(measures)), np.nan)
        ci = np.full((len(models), L, len(measures), 2), np.nan)
        for i, m in enumerate(models):
            for layer in range(L):
                r = results.get(f"{m}-{layer}", {})
                for j, name in enumerate(measures):
                    val[i, layer, j] = r.get(name, np.nan)
                    ci[i, layer, j] = r.get("interval", {}).get(name, (np.nan, np.nan))
        ds = xr.Dataset({"value": (("model", "layer", "measure"), val),
                         "interval": (("model", "layer", "measure", "bound"), ci,
                                      {"long_name": f"95% bootstrap interval over sentences "
                                                    f"({inputs.config.neighbors.bootstrap} replicates; NaN: none)"})},
                        coords={"model": strings(models), "layer": np.arange(L), "measure": strings(measures),
                                "bound": strings(["low", "high"])})
        return {"neighbors": ds}


def neighbors_by_layer(path):
    """kNN measures per layer, one panel per measure."""
    ds = open_group(path, "neighbors")
    if ds is None:
        return None
    pyplot = plt()
    labels = {"same_token": "same token among k-NN", "position_distance": "position distance (same token)",
              "same_left": "same left neighbour (same token)", "same_right": "same right neighbour (same token)",
              "same_pos": "same POS (PTB tag; same token)", "same_deprel": "same dependency relation (same token)"}
    measures = [str(m) for m in ds.measure.values if not str(m).endswith("_chance")]
    cols = min(4, len(measures))
    rows = -(-len(measures) // cols)
    fig, axes = pyplot.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False, layout="constrained")
    for ax in axes.ravel()[len(measures):]:
        ax.set_visible(False)
    for ax, meas in zip(axes.ravel(), measures):
        for i, m in enumerate(ds.model.values):
            style = STYLES[i % len(STYLES)]
            ax.plot(ds.layer, ds.value.sel(model=m, measure=meas), label=str(m), **style)
            if "interval" in ds:  # 95% bootstrap interval over sentences
                band = ds.interval.sel(model=m, measure=meas)
                ax.fill_between(ds.layer, band.sel(bound="low"), band.sel(bound="high"), color=style.get("color"),
                                alpha=0.2, linewidth=0)
            if f"{meas}_chance" in ds.measure.values:  # random neighbours among the type's occurrences
                ax.plot(ds.layer, ds.value.sel(model=m, measure=f"{meas}_chance"), color=style.get("color"),
                        linestyle=":", linewidth=0.8, label="chance (dotted)" if i == 0 else None)
        ax.set(title=labels.get(meas, meas), xlabel="layer")
        ax.legend(fontsize=8)
    return fig


Neighbors.figures = {
    "neighbors": (neighbors_by_layer, "Who are the k nearest neighbours (bands: 95% bootstrap intervals over "
                                      "sentences): same-token rate over pooled "
                                      "occurrences; among occurrences of one token, position distance and the "
                                      "rate of the same left / right neighbour token (fig. 5); with annotated "
                                      "text (corpus.annotated), the rate of the same POS tag / dependency "
                                      "relation there, dotted: the rate of random neighbours of the same token.")}
