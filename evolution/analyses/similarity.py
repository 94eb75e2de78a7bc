"""PWCCA / CKA between layers and models, and change between adjacent layers by
frequency (Voita et al. 2019, section 4, figures 3-4; ``docs/metrics.md``).

One unit per set of models that tokenise the similarity sentences
identically (the same (sentence, position, token id) at the similarity rows:
models may still differ elsewhere, e.g. one truncates a long sentence of the
annotated text one piece earlier because it adds a beginning-of-sentence
token). Views of different sets stay NaN.

===============================  =============================================  ================================
``similarity/distance``          (metric, model_a, layer_a, model_b, layer_b)   1 - PWCCA (weights from a)
                                                                                or 1 - CKA
``similarity/same_layer``        (metric, model_a, model_b, layer)              same-layer distance, PWCCA the
                                                                                mean of both directions (what
                                                                                the interval bounds); layer 0
                                                                                included
``similarity/pair``              (model_a, model_b) coordinate                  what the two models differ in
                                                                                (:func:`pair_kind`)
``similarity/interval``          (metric, model_a, model_b, layer, bound)       95% bootstrap interval of
                                                                                ``same_layer``
``change/distance``              (metric, model, layer_pair, freq_bin)          layer n vs n + 1 on the
                                                                                occurrences of a frequency-rank
                                                                                bin (``similarity.freq_bins``)
``change/interval``              (metric, model, layer_pair, freq_bin, bound)   its 95% bootstrap interval
``change/n_occurrences``,        (model, freq_bin)                              occurrences and types in a bin
``n_types``
``change_equal/...``             as ``change``, plus ``rank_lo``, ``rank_hi``   bins of equal size by frequency
                                 (model, freq_bin)                              rank (``similarity.equal_bins``)
===============================  =============================================  ================================

``layer_pair`` carries the coordinates ``layer_from`` and ``layer_to`` (Voita
et al.'s figure 4 plots the pairs 1-2 .. 5-6: select ``layer_from >= 1``).
"""

from __future__ import annotations

import logging

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, required, save_arrays, strings
from evolution.analyses.pair_kinds import PAIR_KINDS, pair_kind
from evolution.analyses.similarity_figures import FIGURES, change_by_frequency, pair_distances, similarity_heatmaps
from evolution.analyses.similarity_results import joined, merge, with_intervals
from evolution.analyses.similarity_tasks import _subsets, change_task, combine_change, similarity_task
from evolution.config import resolved_dict
from evolution.metrics.plan import frequency_bins
from evolution.metrics.similarity import adjacent_change
from evolution.metrics.similarity_intervals import bootstrap_distances

logger = logging.getLogger(__name__)

__all__ = [
    "Similarity",
    "similarity_task",
    "change_task",
    "with_intervals",
    "adjacent_change",
    "bootstrap_distances",
    "merge",
    "similarity_heatmaps",
    "change_by_frequency",
    "pair_kind",
    "pair_distances",
    "PAIR_KINDS",
]


_CHANGE = "+change-"  # unit name (and cache file name) of a model's change: "+change-<model>[<bin>]" (no model name
# starts with "+")


def tokenisation_classes(inputs: Inputs) -> list[list[str]]:
    """Models grouped by the (sentence, position, token id) of their similarity rows."""
    classes: dict[bytes, list[str]] = {}
    for m in inputs.models.values():
        rows = m.plan.similarity_rows
        occurrences = np.stack([m.coords[v][rows].astype(np.int64) for v in ("sentence", "position", "token_id")])
        classes.setdefault(occurrences.tobytes(), []).append(m.name)
    if len(classes) > 1:
        logger.warning(
            "metrics: models tokenise the similarity sentences differently (%s); similarity is computed "
            "within each group only",
            "; ".join(", ".join(v) for v in classes.values()),
        )
    return list(classes.values())


class Similarity(Analysis):
    name = "similarity"
    version = 5  # 2: bootstrap intervals; 3: equal-size bins, bin sizes, same-layer distances by pair kind;
    # 4: the replicates from weighted cross-products (the same numbers to 1e-8), a change unit per model;
    # 5: a change unit per model and bin (combine_change: the parts equal the whole)
    section = "similarity"

    def units(self, inputs: Inputs) -> list[Unit]:
        scfg = required(inputs.config.similarity, "similarity")
        units = []
        for names in tokenisation_classes(inputs):
            models = [inputs.models[n] for n in names]
            for m in models:
                m.require_every_layer("metrics.similarity (PWCCA, CKA, change by frequency)", "metrics.similarity")
            n_rows = len(models[0].plan.similarity_rows)
            d = max(m.d_model for m in models)
            if n_rows < scfg.min_ratio * d:
                logger.warning(
                    "metrics: similarity skipped for %s: %d occurrences in the first %d sentences, "
                    "fewer than metrics.similarity.min_ratio x d = %g x %d",
                    ", ".join(names),
                    n_rows,
                    scfg.sentences,
                    scfg.min_ratio,
                    d,
                )
                continue
            bins, notes = frequency_bins(scfg.freq_bins, ranked_types=models[0].ranked_types, basis=models[0].frequency)
            for note in notes:
                logger.info("metrics: change by frequency (%s): %s", ", ".join(names), note)
            first = models[0].plan.similarity_rows
            shared = {"freq_rank": models[0].freq_rank[first], "sentence": models[0].coords["sentence"][first]}
            arrays = save_arrays(
                inputs.arrays_dir,
                "similarity",
                {**{f"rows/{m.name}": m.plan.similarity_rows for m in models}, "sentence": shared["sentence"]},
            )
            name, n_layers = "+".join(names), {m.name: m.n_layers for m in models}
            config = resolved_dict(scfg)
            estimate = {k: v for k, v in config.items() if k not in ("freq_bins", "equal_bins")}
            units.append(
                Unit(
                    name,
                    similarity_task,
                    dict(
                        store=inputs.store,
                        models=names,
                        n_layers=n_layers,
                        arrays=arrays,
                        similarity=scfg,
                        seed=inputs.seed,
                    ),
                    key={"models": [m.key for m in models], "similarity": estimate, "seed": inputs.seed},
                )
            )
            n_subsets = sum(_subsets(shared["freq_rank"], bins=bins, similarity=scfg)[1])  # what change_task splits
            for m in models:  # a unit per model and bin: the workers share them (their parts combine exactly)
                own = save_arrays(inputs.arrays_dir, "change", {f"rows/{m.name}": m.plan.similarity_rows, **shared})
                for k in range(n_subsets):
                    units.append(
                        Unit(
                            f"{_CHANGE}{m.name}[{k}]",
                            change_task,
                            dict(
                                store=inputs.store,
                                model=m.name,
                                n_layers=m.n_layers,
                                arrays=own,
                                similarity=scfg,
                                bins=bins,
                                seed=inputs.seed,
                                subsets=(k, k + 1),
                            ),
                            key={
                                "model": m.key,
                                "arrays": own.rsplit("-", 1)[-1],
                                "similarity": config,
                                "bins": bins,
                                "seed": inputs.seed,
                                "subsets": [k, k + 1],
                            },
                        )
                    )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}

        def change(g: str) -> dict:  # the model's parts, one per bin
            return combine_change([r for n, r in results.items() if n.startswith(f"{_CHANGE}{g}[")])

        estimates = {
            n: joined(r, {g: change(g) for g in dict.fromkeys(v[0] for v in r["views"])})
            for n, r in results.items()
            if not n.startswith(_CHANGE)
        }
        similarity = merge(list(estimates.values()))
        for note in similarity["notes"]:
            logger.info("metrics: %s", note)
        models, L = inputs.names, inputs.max_layers
        layer = np.arange(L)
        methods = list(similarity["similarity"])
        views = [tuple(v) for v in similarity["views"]]
        dist = np.full((len(methods), len(models), L, len(models), L), np.nan)
        for a_i, (ma, la) in enumerate(views):
            for b_i, (mb, lb) in enumerate(views):
                for q, meth in enumerate(methods):
                    dist[q, models.index(ma), la, models.index(mb), lb] = 1.0 - similarity["similarity"][meth][a_i][b_i]
        same = np.diagonal(dist, axis1=2, axis2=4)  # (metric, model_a, model_b, layer)
        same = (same + np.swapaxes(same, 1, 2)) / 2  # PWCCA: mean of both directions; CKA is symmetric
        runs = dict(inputs.attrs.get("runs", {}))
        kinds = [
            [pair_kind(a, b, objectives={m: inputs.models[m].objective for m in models}, runs=runs) for b in models]
            for a in models
        ]
        ds = xr.Dataset(
            {
                "distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), dist),
                "same_layer": (
                    ("metric", "model_a", "model_b", "layer"),
                    same,
                    {"long_name": "distance between two models at the same layer (PWCCA: mean of both directions)"},
                ),
            },
            coords={
                "metric": strings(methods),
                "model_a": strings(models),
                "layer_a": layer,
                "model_b": strings(models),
                "layer_b": layer,
                "layer": layer,
                "pair": (("model_a", "model_b"), np.array(kinds, dtype=object)),
            },
            attrs={"n_occurrences": similarity["n"], "notes": similarity["notes"], "pair_kinds": list(PAIR_KINDS)},
        )
        out = {"similarity": ds}
        frequency = next(iter(inputs.models.values())).frequency
        out["change"] = _change_dataset(
            similarity["change"],
            similarity.get("sizes", {}),
            methods=methods,
            models=models,
            L=L,
            labels=[f"{lo}-{hi}" for lo, hi in similarity["bins"]],
            frequency=frequency,
        )
        out["change"] = out["change"].assign_coords(
            rank_lo=("freq_bin", [lo for lo, _ in similarity["bins"]]),
            rank_hi=("freq_bin", [hi for _, hi in similarity["bins"]]),
        )
        if "change_equal" in similarity:
            n_bins = len(next(iter(similarity["equal_sizes"].values()))["n"])
            out["change_equal"] = _change_dataset(
                similarity["change_equal"],
                similarity["equal_sizes"],
                methods=methods,
                models=models,
                L=L,
                labels=[f"q{b + 1}" for b in range(n_bins)],
                frequency=frequency,
                ranges=True,
            )
        interval = similarity.get("interval")
        if interval is not None:  # one tokenisation class (merge keeps intervals only then)
            n_boot = interval["replicates"]
            between = np.full((len(methods), len(models), len(models), L, 2), np.nan)
            for q, meth in enumerate(methods):
                b = np.asarray(interval["between"][meth], dtype=float)  # (layer, pair, 2)
                for p_i, (ma, mb) in enumerate(interval["pairs"]):
                    i, j = models.index(ma), models.index(mb)
                    between[q, i, j, : len(b)] = between[q, j, i, : len(b)] = b[:, p_i]
            long_name = f"95% bootstrap interval over sentences ({n_boot} paired replicates)"
            out["similarity"]["interval"] = (
                ("metric", "model_a", "model_b", "layer", "bound"),
                between,
                {"long_name": "same-layer distance (mean of both directions): " + long_name},
            )
            out["similarity"] = out["similarity"].assign_coords(bound=strings(["low", "high"]))
            for kind in ("change", "change_equal"):
                if kind not in out or kind not in interval:
                    continue
                iv = np.full(out[kind].distance.shape + (2,), np.nan)
                for q, meth in enumerate(methods):
                    for m, v in interval[kind][meth].items():
                        v = np.asarray(v, dtype=float)
                        iv[q, models.index(m), : len(v)] = v
                out[kind]["interval"] = (
                    ("metric", "model", "layer_pair", "freq_bin", "bound"),
                    iv,
                    {"long_name": long_name},
                )
                out[kind] = out[kind].assign_coords(bound=strings(["low", "high"]))
        return out


def _change_dataset(
    change: dict,
    sizes: dict[str, dict],
    *,
    methods: list[str],
    models: list[str],
    L: int,
    labels: list[str],
    frequency: str,
    ranges: bool = False,
) -> xr.Dataset:
    """A change-by-frequency group: ``change[method][model]`` (layer_pair, bin) and per
    model the bins' ``sizes`` (:func:`~evolution.metrics.similarity.bin_sizes`); with
    ``ranges`` each model's rank range per bin as variables ``rank_lo`` / ``rank_hi``
    (equal-size bins: the range depends on the text)."""
    ch = np.full((len(methods), len(models), L - 1, len(labels)), np.nan)
    for q, meth in enumerate(methods):
        for m, rows in change[meth].items():
            arr = np.asarray(rows, dtype=float).reshape(-1, len(labels)) if len(labels) else np.empty((0, 0))
            ch[q, models.index(m), : len(arr)] = arr
    per_bin = {key: np.full((len(models), len(labels)), np.nan) for key in ("n", "types", "rank_lo", "rank_hi")}
    for m, v in sizes.items():
        for key, arr in per_bin.items():
            arr[models.index(m)] = v[key]
    ds = xr.Dataset(
        {
            "distance": (
                ("metric", "model", "layer_pair", "freq_bin"),
                ch,
                {"long_name": "distance between layer n and n + 1 on occurrences in a frequency-rank bin"},
            ),
            "n_occurrences": (("model", "freq_bin"), per_bin["n"], {"long_name": "occurrences in the bin"}),
            "n_types": (("model", "freq_bin"), per_bin["types"], {"long_name": "token types in the bin"}),
        },
        coords={
            "metric": strings(methods),
            "model": strings(models),
            "layer_pair": strings(f"{i}-{i + 1}" for i in range(L - 1)),
            "layer_from": ("layer_pair", np.arange(L - 1)),
            "layer_to": ("layer_pair", np.arange(1, L)),
            "freq_bin": strings(labels),
        },
        attrs={"frequency": frequency, "bins": "equal occurrences by frequency rank" if ranges else "rank edges"},
    )
    if ranges:
        ds["rank_lo"] = (("model", "freq_bin"), per_bin["rank_lo"], {"long_name": "smallest frequency rank in the bin"})
        ds["rank_hi"] = (
            ("model", "freq_bin"),
            per_bin["rank_hi"],
            {"long_name": "largest frequency rank in the bin + 1"},
        )
    return ds


Similarity.figures = FIGURES
