"""Who are a token's nearest neighbours (Voita et al. 2019, section 5, figure 5; ``docs/metrics.md``).

Units per (model, layer): on the main text, the same-token rate among the
k nearest neighbours of pooled occurrences of the frequent types (the queries split into
units of ``neighbors.queries_per_unit``, joined by :func:`combine_layer`), and among
occurrences of one type the position distance and the same left / right
neighbour rates; with annotated text (``corpus.annotated``), the same POS
tag / dependency relation rates among one type's occurrences there. Each
within-type rate comes with its chance level, its ceiling and where it lies
between them (:mod:`evolution.metrics.neighbors`); a query without a left
(right) token, at the start (end) of its sentence, is left out of the left
(right) rate.

=======================  =======================  ==============================================
``neighbors/value``      (model, layer, measure)  ``same_token``, ``position_distance``, and for
                                                  each within-type annotation A (``left``,
                                                  ``right``; with annotated text ``pos``,
                                                  ``deprel``): ``same_A``, ``same_A_chance``,
                                                  ``same_A_ceiling``, ``same_A_normalized``
``neighbors/interval``   (..., bound)             95% cluster-bootstrap interval over
                                                  sentences (``neighbors.bootstrap``
                                                  replicates; bound: low, high)
``neighbors/queries``    (model, measure)         queries counted (a query without a left /
                                                  right token is not counted in that rate)
=======================  =======================  ==============================================

Measures of an annotation A (n_t occurrences of type t sampled, k' = min(k, n_t - 1),
c_q = the type's occurrences with the query's value, the query included; each averaged
over the queries that have a value, then over types):

==========================  ===============================================================
``same_A``                  share of the query's k' same-token neighbours with its value
``same_A_chance``           (c_q - 1) / (n_t - 1): neighbours drawn at random among the
                            type's other occurrences (layer-independent)
``same_A_ceiling``          min(c_q - 1, k') / k': occurrences ordered perfectly by A
                            (layer-independent; the most any representation can score)
``same_A_normalized``       (same_A - chance) / (ceiling - chance) of the three averages:
                            0 = chance, 1 = ceiling; its interval from the same resamples
                            of sentences for the three (paired)
==========================  ===============================================================
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, required, save_arrays, strings
from evolution.analyses.plotting import STYLES, concat, figure, label_edges, legend_below, open_group, panel_grid, tidy
from evolution.config import NeighborsConfig, resolved_dict
from evolution.metrics.neighbors import MIN_SPLIT_WIDTH, query_parts

__all__ = ["Neighbors", "layer_task", "layer_part", "combine_layer", "layer_measures", "neighbors_by_layer", "MEASURES"]

logger = logging.getLogger(__name__)


def _annotation_measures(name: str) -> tuple[str, ...]:
    return (f"same_{name}", f"same_{name}_chance", f"same_{name}_ceiling", f"same_{name}_normalized")


MEASURES = (
    "same_token",
    "position_distance",
    *_annotation_measures("left"),
    *_annotation_measures("right"),
    *_annotation_measures("pos"),
    *_annotation_measures("deprel"),
)
#: suffixes of the measures drawn in their rate's panel (not panels of their own)
BOUND_SUFFIXES = ("_chance", "_ceiling")


def layer_task(
    *,
    store: str,
    model: str,
    layer: int,
    arrays: str,
    neighbors: NeighborsConfig,
    seed: int = 0,
    queries: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One part of the measures of (model, layer) from the store (:func:`layer_part`: the pooled
    same-token shares of queries [a, b) = ``queries``, default all, and with the part that starts
    at 0 the within-type measures); ``arrays`` holds ``neighbors/{rows,token,position,left,right,
    sentence}`` and, with annotated text, ``syntax/{rows,token,position,sentence,pos,deprel}``."""
    from evolution.store import read_rows

    a = load_arrays(arrays)
    x = read_rows(store, model, layer, a["neighbors/rows"])
    within = queries is None or queries[0] == 0
    syntax = read_rows(store, model, layer, a["syntax/rows"]) if within and "syntax/rows" in a else None
    return layer_part(x, a, neighbors=neighbors, seed=seed + layer, queries=queries, syntax_vectors=syntax)


def _within(
    x: np.ndarray,
    *,
    prefix: str,
    a: dict,
    annotations: tuple[str, ...],
    c: NeighborsConfig,
    seed: int,
    out: dict,
    interval: dict,
) -> None:
    """Within-type rates of ``annotations`` with chance, ceiling and normalized value, and
    their intervals (one set of sentence resamples for all: paired)."""
    from evolution.metrics.neighbors import bootstrap_replicates, normalized, percentile_interval, within_type_measures

    types = a[f"{prefix}/token"]
    values, queries = within_type_measures(
        x,
        types=types,
        position=a[f"{prefix}/position"],
        annotations={n: a[f"{prefix}/{n}"] for n in annotations},
        k=c.k,
        metric=c.metric,
        chance=True,
        per_query=True,
    )
    if prefix == "syntax":  # on the annotated text: the rates only (position distance: the main text's)
        values.pop("position_distance")
    out.update(values)
    out["queries"].update({name: int(np.isfinite(v).sum()) for name, v in queries.items() if name in values})
    for n in annotations:
        rate, chance, ceiling = (values[f"same_{n}{s}"] for s in ("", "_chance", "_ceiling"))
        out[f"same_{n}_normalized"] = normalized(rate, chance, ceiling)
    if not c.bootstrap:
        return
    boot = {
        name: bootstrap_replicates(v, sentence=a[f"{prefix}/sentence"], groups=types, n_boot=c.bootstrap, seed=seed)
        for name, v in queries.items()
        if name in values
    }
    for n in annotations:
        boot[f"same_{n}_normalized"] = normalized(*(boot[f"same_{n}{s}"] for s in ("", "_chance", "_ceiling")))
    interval.update({name: percentile_interval(v, 0.95) for name, v in boot.items()})


def _warn_caps(k: int, capped: dict[str, tuple[int, int]]) -> None:
    """One WARNING for the models whose occurrences cap ``k`` (``model -> (occurrences, the most
    frequent type's occurrences)``): a capped search returns constants, not rates."""
    if not capped:
        return
    every = [m for m, (n, _) in capped.items() if k >= n - 1]
    lines = [f"{m}: {n} occurrences, at most {t} of one type" for m, (n, t) in capped.items()]
    what = (
        f"the search is capped to all other occurrences for {', '.join(every)}, so the same-token rate is the "
        "share of same-token pairs, a constant at every layer, and"
        if every
        else ""
    )
    logger.warning(
        "neighbors: k = %d reaches every occurrence of a type (%s): %s the within-type rates equal their "
        "ceilings. Use a k well below the occurrences per type (Voita et al. 2019: k = 50 of ~1M occurrences), "
        "or more text",
        k,
        "; ".join(lines),
        what,
    )


def layer_part(
    x: np.ndarray,
    a: dict[str, np.ndarray],
    *,
    neighbors: NeighborsConfig,
    seed: int = 0,
    queries: tuple[int, int] | None = None,
    syntax_vectors: np.ndarray | None = None,
) -> dict[str, Any]:
    """A part of one layer's measures: ``queries`` [a, b) (a range of
    :func:`evolution.metrics.neighbors.query_parts`; default all) searched among every row of
    ``x`` (n, d), the states of ``a["neighbors/rows"]``: ``{"queries": [a, b], "same_token": (b -
    a,) each query's share of same-token neighbours}``, and where a = 0 ``"within"``: the
    within-type measures (:func:`_within`, whole: one type's search is small) with their
    ``queries`` and ``interval``. ``syntax_vectors`` the states of ``a["syntax/rows"]``."""
    from evolution.metrics.neighbors import knn, same_label_per_query

    c = neighbors
    lo, hi = (0, len(x)) if queries is None else queries
    whole = (lo, hi) == (0, len(x))
    ids = knn(x, k=c.k, metric=c.metric, index=c.index, queries=None if whole else (lo, hi))
    part: dict[str, Any] = {
        "queries": [lo, hi],
        "same_token": same_label_per_query(ids, a["neighbors/token"], first=lo),
    }
    if lo == 0:
        within: dict[str, Any] = {"queries": {}}
        interval: dict[str, tuple[float, float]] = {}
        _within(
            x, prefix="neighbors", a=a, annotations=("left", "right"), c=c, seed=seed, out=within, interval=interval
        )
        if syntax_vectors is not None:
            _within(
                syntax_vectors,
                prefix="syntax",
                a=a,
                annotations=("pos", "deprel"),
                c=c,
                seed=seed,
                out=within,
                interval=interval,
            )
        within["interval"] = interval
        part["within"] = within
    return part


def combine_layer(
    parts: list[dict[str, Any]], *, sentence: np.ndarray, neighbors: NeighborsConfig, seed: int = 0
) -> dict[str, Any]:
    """One layer's measures (the module docstring's ``value`` names; under ``queries``, measure ->
    the queries counted; under ``interval``, measure -> (low, high): the 95% percentile interval of
    ``neighbors.bootstrap`` resamples of whole sentences, replicate r drawn with
    ``default_rng([seed, r])``) from its parts (:func:`layer_part`, any order): the same-token
    shares joined in query order, then averaged and resampled by ``sentence`` (n,) each pooled
    query's sentence, as one unit would."""
    from evolution.metrics.neighbors import bootstrap_interval

    parts = sorted(parts, key=lambda p: p["queries"][0])
    edges = [p["queries"] for p in parts]
    if (
        edges[0][0] != 0
        or edges[-1][1] != len(sentence)
        or any(x[1] != y[0] for x, y in zip(edges[:-1], edges[1:], strict=True))
    ):
        raise ValueError(f"neighbors: the parts {edges} do not cover the {len(sentence)} queries once: rerun the stage")
    same = np.concatenate([np.asarray(p["same_token"], dtype=np.float64) for p in parts])
    within = parts[0]["within"]
    out: dict[str, Any] = {"same_token": float(np.nanmean(same))}
    out.update({k: v for k, v in within.items() if k not in ("queries", "interval")})
    out["queries"] = {"same_token": int(np.isfinite(same).sum()), **within["queries"]}
    interval: dict[str, Any] = {}
    if neighbors.bootstrap:
        interval["same_token"] = bootstrap_interval(same, sentence=sentence, n_boot=neighbors.bootstrap, seed=seed)
    out["interval"] = {**interval, **within["interval"]}
    return out


def layer_measures(
    x: np.ndarray,
    a: dict[str, np.ndarray],
    *,
    neighbors: NeighborsConfig,
    seed: int = 0,
    syntax_vectors: np.ndarray | None = None,
) -> dict[str, Any]:
    """The measures of one layer (:func:`combine_layer`) in one search: ``x`` (n, d) the states
    of ``a["neighbors/rows"]``; ``syntax_vectors`` those of ``a["syntax/rows"]`` (annotated
    text)."""
    part = layer_part(x, a, neighbors=neighbors, seed=seed, syntax_vectors=syntax_vectors)
    return combine_layer([part], sentence=a["neighbors/sentence"], neighbors=neighbors, seed=seed)


def _part_name(model: str, layer: int, part: int, parts: int) -> str:
    """``model-layer``, or ``model-layer[p]`` for part p of a layer split by queries."""
    return f"{model}-{layer}" if parts == 1 else f"{model}-{layer}[{part}]"


def _is_part(name: str, model: str, layer: int) -> bool:
    return name == f"{model}-{layer}" or name.startswith(f"{model}-{layer}[")


class Neighbors(Analysis):
    name = "neighbors"
    version = 5  # 2: bootstrap intervals over sentences; 3: queries without a left / right token left out,
    # chance / ceiling / normalized for every within-type rate, per-replicate sentence draws;
    # 4: the pooled search split by queries (combine_layer: the parts equal the whole); 5: ties broken by
    # the stated rule (exact_knn: float64 distances, then the smaller index), whatever runs the search
    section = "neighbors"

    def units(self, inputs: Inputs) -> list[Unit]:
        cfg = inputs.config
        neighbors = required(cfg.neighbors, "neighbors")
        units = []
        capped: dict[str, tuple[int, int]] = {}
        for m in inputs.models.values():
            nb = m.plan.neighbors
            if not nb or len(nb["rows"]) <= 1:
                continue
            n, largest = len(nb["rows"]), int(np.unique(nb["token"], return_counts=True)[1].max())
            if neighbors.k >= largest - 1:
                capped[m.name] = (n, largest)
            saved = {f"neighbors/{k}": v for k, v in nb.items()}
            saved.update({f"syntax/{k}": v for k, v in (m.plan.syntax or {}).items()})
            arrays = save_arrays(inputs.arrays_dir, f"neighbors-{m.name}", saved)
            key = {
                "model": m.key,
                "neighbors": resolved_dict(neighbors),
                "tokens": resolved_dict(cfg.tokens),
                "seed": inputs.seed,
            }
            split = neighbors.index == "exact" and m.d_model >= MIN_SPLIT_WIDTH
            parts = query_parts(n, per_part=neighbors.queries_per_unit) if split else [(0, n)]
            units += [
                Unit(
                    _part_name(m.name, layer, p, len(parts)),
                    layer_task,
                    dict(
                        store=inputs.store,
                        model=m.name,
                        layer=layer,
                        arrays=arrays,
                        neighbors=neighbors,
                        seed=inputs.seed,
                        queries=queries,
                    ),
                    key={**key, "layer": layer, "queries": list(queries)},
                )
                for layer in m.layers  # those stored (extract.layers)
                for p, queries in enumerate(parts)
            ]
        _warn_caps(neighbors.k, capped)
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        models, L = inputs.names, inputs.max_layers
        cfg = required(inputs.config.neighbors, "neighbors")
        combined: dict[tuple[str, int], dict[str, Any]] = {}
        for m in models:
            computed = any(_is_part(name, m, 0) for name in results)  # the model had neighbour units
            for layer in range(L):
                parts = [r for name, r in results.items() if _is_part(name, m, layer)]
                if not parts and computed and layer in inputs.models[m].layers:
                    raise ValueError(f"neighbors: no result for {m} layer {layer}: rerun the metrics stage")
                if parts:
                    sentence = inputs.models[m].plan.neighbors["sentence"]
                    combined[m, layer] = combine_layer(
                        parts, sentence=sentence, neighbors=cfg, seed=inputs.seed + layer
                    )
        n_boot = cfg.bootstrap
        measures = [n for n in MEASURES if any(n in r for r in combined.values())]
        val = np.full((len(models), L, len(measures)), np.nan)
        ci = np.full((len(models), L, len(measures), 2), np.nan)
        queries = np.zeros((len(models), len(measures)), dtype=np.int64)
        for i, m in enumerate(models):
            for layer in range(L):
                r = combined.get((m, layer), {})
                for j, name in enumerate(measures):
                    val[i, layer, j] = r.get(name, np.nan)
                    ci[i, layer, j] = r.get("interval", {}).get(name, (np.nan, np.nan))
                    if layer == 0:
                        base = name.removesuffix("_normalized")
                        queries[i, j] = r.get("queries", {}).get(base, 0)
        ds = xr.Dataset(
            {
                "value": (("model", "layer", "measure"), val),
                "queries": (
                    ("model", "measure"),
                    queries,
                    {
                        "long_name": "queries counted (the same at every layer; a query without a "
                        "left / right token is not counted in that rate)"
                    },
                ),
                "interval": (
                    ("model", "layer", "measure", "bound"),
                    ci,
                    {"long_name": f"95% bootstrap interval over sentences ({n_boot} replicates; NaN: none)"},
                ),
            },
            coords={
                "model": strings(models),
                "layer": np.arange(L),
                "measure": strings(measures),
                "bound": strings(["low", "high"]),
            },
        )
        return {"neighbors": ds}


@figure
def neighbors_by_layer(path):
    """kNN measures per layer, one panel per measure (rows of three), models in the legend below."""
    from matplotlib.lines import Line2D

    ds = open_group(path, "neighbors")
    if ds is None:
        return None
    labels = {
        "same_token": "same token among k-NN",
        "position_distance": "position distance\n(same token)",
        "same_left": "same left neighbour\n(same token)",
        "same_right": "same right neighbour\n(same token)",
        "same_pos": "same POS (PTB tag;\nsame token)",
        "same_deprel": "same dependency relation\n(same token)",
    }
    labels.update(
        {
            f"same_{a}_normalized": f"{labels[f'same_{a}'].split(chr(10))[0]}:\n(rate - chance) / (ceiling - chance)"
            for a in ("left", "right", "pos", "deprel")
        }
    )
    measures = [str(m) for m in ds.measure.values if not str(m).endswith(BOUND_SUFFIXES)]
    fig, axes = panel_grid(len(measures), panel=(3.2, 2.3), cols=3, extra=0.5)
    frames, bounds = [], set()
    for ax, meas in zip(axes, measures, strict=True):
        for i, m in enumerate(ds.model.values):
            style = STYLES[i % len(STYLES)]
            v = ds.value.sel(model=m, measure=meas)
            ax.plot(ds.layer, v, label=str(m), markersize=3, **style)
            frames.append(tidy(v, "value"))
            if "interval" in ds:  # 95% bootstrap interval over sentences
                band = ds.interval.sel(model=m, measure=meas)
                ax.fill_between(
                    ds.layer,
                    band.sel(bound="low"),
                    band.sel(bound="high"),
                    color=style.get("color"),
                    alpha=0.2,
                    linewidth=0,
                )
                frames += [tidy(band.sel(bound=b), b) for b in ("low", "high")]
            for suffix, line in (("_chance", ":"), ("_ceiling", "--")):  # the rate's representation-free bounds
                if f"{meas}{suffix}" in ds.measure.values:
                    b = ds.value.sel(model=m, measure=f"{meas}{suffix}")
                    ax.plot(ds.layer, b, color=style.get("color"), linestyle=line, linewidth=0.8)
                    frames.append(tidy(b, suffix[1:], measure=meas))
                    bounds.add(suffix)
        ax.set(title=labels.get(meas, meas), xticks=ds.layer.values)
    label_edges(axes, xlabel="layer")
    handles, names = axes[0].get_legend_handles_labels()
    for suffix, line in (("_chance", ":"), ("_ceiling", "--")):
        if suffix in bounds:
            handles.append(Line2D([], [], color="black", linestyle=line, linewidth=0.8))
            names.append(f"{suffix[1:]} (thin {'dotted' if line == ':' else 'dashed'})")
    legend_below(fig, handles, names)
    return fig, concat(frames)


Neighbors.figures = {
    "neighbors": (
        neighbors_by_layer,
        "Who are the k nearest neighbours (bands: 95% bootstrap intervals over "
        "sentences): same-token rate over pooled "
        "occurrences; among occurrences of one token, position distance and the "
        "rate of the same left / right neighbour token (fig. 5); with annotated "
        "text (corpus.annotated), the rate of the same POS tag / dependency "
        "relation there. Dotted: chance (random neighbours among the token's "
        "other occurrences); dashed: the ceiling (occurrences ordered perfectly "
        "by that context); the normalized panels place each rate between them "
        "(0 = chance, 1 = ceiling). Queries at the start (end) of a sentence have "
        "no left (right) token and are left out.",
    )
}
