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
from collections import Counter
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, save_arrays, strings
from evolution.analyses.pair_kinds import PAIR_KINDS, pair_kind
from evolution.analyses.similarity_figures import FIGURES, change_by_frequency, pair_distances, similarity_heatmaps
from evolution.config import SimilarityConfig, resolved_dict
from evolution.metrics.plan import frequency_bins
from evolution.metrics.similarity import (
    adjacent_change,
    bin_sizes,
    bootstrap_distances,
    centre_intervals,
    summarise_replicates,
)

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


def similarity_task(
    *, store: str, models: list[str], n_layers: dict[str, int], arrays: str, similarity: SimilarityConfig, seed: int = 0
) -> dict[str, Any]:
    """All-pairs similarity of (model, layer) views on the same occurrences, and the
    paired bootstrap of the same-layer distances between models.

    ``arrays`` holds ``rows/<model>`` (n,), the same occurrences in the same order in
    every model, and ``sentence`` (n,) of those occurrences. Returns
    ``similarity[method]`` as a nested list (view_a, view_b) over ``views`` = [(model,
    layer), ...], ``n`` and, with ``similarity.bootstrap`` replicates, ``replicates``:
    ``{"pairs", "between": {method: (replicate, layer, pair)}}``, the same-layer distances
    (PWCCA: mean of both directions) of every resample of whole sentences (replicate ``r``
    draws with ``default_rng([seed, r])``, the same sentences for every model: a paired
    bootstrap), computed from weighted cross-products of the views
    (:func:`~evolution.metrics.similarity_bootstrap.between_replicates`; equal to resampling
    the rows and redoing the SVDs, :func:`~evolution.metrics.similarity.bootstrap_replicates`).
    :func:`with_intervals` places their percentile intervals around the estimates.
    """
    from evolution.metrics.resample import SentenceSums, sentence_draws
    from evolution.metrics.similarity import View, pair_similarity
    from evolution.metrics.similarity_bootstrap import MARGIN, between_replicates
    from evolution.store import read_rows

    a = load_arrays(arrays)
    rows = {m: a[f"rows/{m}"] for m in models}
    methods = similarity.methods
    kw = {"epsilon": similarity.epsilon, "min_ratio": similarity.min_ratio}
    margin = MARGIN if similarity.bootstrap else 1.0
    views, keys = [], []
    for g in models:
        for layer in range(n_layers[g]):
            views.append(View(read_rows(store, g, layer, rows[g]), name=f"{g} layer {layer}", margin=margin, **kw))
            keys.append((g, layer))
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    for i, va in enumerate(views):
        for j in range(i, len(views)):  # one product and one SVD give both PWCCA directions and CKA
            p_ab, p_ba, c = pair_similarity(va, views[j])
            if "pwcca" in sim:
                sim["pwcca"][i, j], sim["pwcca"][j, i] = p_ab, p_ba
            if "cka" in sim:
                sim["cka"][i, j] = sim["cka"][j, i] = c
    out = {"views": keys, "similarity": {m: v.tolist() for m, v in sim.items()}, "n": int(len(a["sentence"]))}
    if similarity.bootstrap:
        group = np.unique(a["sentence"], return_inverse=True)[1].ravel()
        n_groups = int(group.max()) + 1
        pairs = [(x, y) for i, x in enumerate(models) for y in models[i + 1 :]]
        by_layer: dict[int, dict[str, Any]] = {}
        for (g, layer), v in zip(keys, views):
            by_layer.setdefault(layer, {})[g] = v
        between = between_replicates(
            by_layer,
            sums=SentenceSums(group, n_groups=n_groups),
            draws=sentence_draws(n_groups, replicates=similarity.bootstrap, seed=seed),
            pairs=pairs,
            methods=methods,
            states=lambda g, layer: read_rows(store, g, layer, rows[g]),
            **kw,
        )
        out["replicates"] = {"pairs": pairs, "between": {m: v.tolist() for m, v in between.items()}}
    return out


def change_task(
    *,
    store: str,
    model: str,
    n_layers: int,
    arrays: str,
    similarity: SimilarityConfig,
    bins: list[tuple[int, int]],
    seed: int = 0,
) -> dict[str, Any]:
    """One model's change between adjacent layers per frequency-rank bin (and, with
    ``similarity.equal_bins``, per bin of equal size), with the paired bootstrap's replicates.

    ``arrays`` as for :func:`similarity_task`, with ``freq_rank`` (n,); ``bins`` the
    frequency-rank bins [lo, hi). Returns ``bins``, ``change[method]`` (layer_pair, bin) with NaN where a
    bin has too few occurrences (listed in ``notes``), the bins' ``sizes``
    (:func:`~evolution.metrics.similarity.bin_sizes`), with equal-size bins ``change_equal``
    and ``equal_sizes``, and with ``similarity.bootstrap`` replicates ``replicates[method]``
    (replicate, layer_pair, bin of both kinds): the same resamples of sentences as
    :func:`similarity_task`'s (:func:`~evolution.metrics.similarity_bootstrap.change_with_replicates`)."""
    from evolution.metrics.resample import sentence_draws
    from evolution.metrics.similarity_bootstrap import change_with_replicates
    from evolution.store import read_rows

    a = load_arrays(arrays)
    freq_rank = a["freq_rank"]
    every, split = _subsets(freq_rank, bins=bins, similarity=similarity)
    group = np.unique(a["sentence"], return_inverse=True)[1].ravel()
    n_groups = int(group.max()) + 1
    draws = sentence_draws(n_groups, replicates=similarity.bootstrap, seed=seed) if similarity.bootstrap else None
    states = [
        np.asarray(read_rows(store, model, layer, a[f"rows/{model}"]), dtype=np.float64) for layer in range(n_layers)
    ]  # read once, sliced per bin
    got = change_with_replicates(
        states,
        every,
        group=group,
        draws=draws,
        methods=similarity.methods,
        epsilon=similarity.epsilon,
        min_ratio=similarity.min_ratio,
        name=model,
    )
    masks, equal = dict(list(every.items())[: split[0]]), dict(list(every.items())[split[0] :])
    out = {
        "change": {m: v[:, : split[0]].tolist() for m, v in got["estimate"].items()},
        "notes": got["notes"],
        "bins": [tuple(b) for b in bins],
        "sizes": bin_sizes(freq_rank, masks),
    }
    if equal:
        out["change_equal"] = {m: v[:, split[0] :].tolist() for m, v in got["estimate"].items()}
        out["equal_sizes"] = bin_sizes(freq_rank, equal)
    if draws is not None:
        out["replicates"] = {m: v.tolist() for m, v in got["replicates"].items()}
    return out


def _subsets(
    freq_rank: np.ndarray, *, bins: list, similarity: SimilarityConfig
) -> tuple[dict[str, np.ndarray], tuple[int, int]]:
    """The occurrence masks (n,) of the change by frequency: the frequency-rank ``bins``
    [lo, hi), then ``similarity.equal_bins`` bins of equal size; and how many of each."""
    masks = {f"ranks [{lo}, {hi})": (freq_rank >= lo) & (freq_rank < hi) for lo, hi in bins}
    equal = {}
    if similarity.equal_bins:
        from evolution.metrics.similarity import equal_size_bins

        index = equal_size_bins(freq_rank, bins=similarity.equal_bins)
        equal = {f"equal bin {b + 1} of {similarity.equal_bins}": index == b for b in range(similarity.equal_bins)}
    return {**masks, **equal}, (len(masks), len(equal))  # one pass and one bootstrap for both kinds of bin


_CHANGE = "+change-"  # unit name (and cache file name) of a model's change: "+change-<model>" (no model name
# starts with "+")


def _joined(estimate: dict, change: dict[str, dict]) -> dict:
    """One class's result in one piece: the :func:`similarity_task` result ``estimate`` and
    the :func:`change_task` results ``change`` (by model), with ``interval`` where they
    carry replicates (:func:`with_intervals`)."""
    models = list(dict.fromkeys(g for g, _ in estimate["views"]))
    methods = list(estimate["similarity"])
    first = change[models[0]]
    out = {
        **estimate,
        "bins": [tuple(b) for b in first["bins"]],
        "notes": [n for g in models for n in change[g]["notes"]],
        "sizes": first["sizes"],
        "change": {m: {g: change[g]["change"][m] for g in models} for m in methods},
    }
    if "change_equal" in first:
        out["change_equal"] = {m: {g: change[g]["change_equal"][m] for g in models} for m in methods}
        out["equal_sizes"] = first["equal_sizes"]
    if "replicates" not in estimate:
        return out
    del out["replicates"]
    n_layers = dict(Counter(g for g, _ in estimate["views"]))
    pad = max(n_layers.values()) - 1
    replicates = {}
    for m in methods:  # (replicate, layer_pair, subset), NaN-padded to the deepest model of the class
        replicates[m] = {}
        for g in models:
            v = np.asarray(change[g]["replicates"][m], dtype=float)
            replicates[m][g] = np.concatenate([v, np.full((len(v), pad - v.shape[1], v.shape[2]), np.nan)], axis=1)
    block = {
        "first": 0,
        "replicates": len(next(iter(replicates[methods[0]].values()))),
        "pairs": estimate["replicates"]["pairs"],
        "between": estimate["replicates"]["between"],
        "change": replicates,
    }
    return with_intervals(out, [block])


def with_intervals(estimate: dict, blocks: list[dict]) -> dict:
    """``estimate`` (a class's estimates, :func:`_joined`) with ``interval``: the bootstrap
    ``blocks`` (``bootstrap_replicates``' form) summarised and centred (:func:`_centre`)."""
    keys = [tuple(v) for v in estimate["views"]]
    n_layers = dict(Counter(g for g, _ in keys))
    n_rank = len(estimate["bins"])
    n_equal = len(estimate["equal_sizes"]["n"]) if "change_equal" in estimate else 0
    methods = list(estimate["similarity"])
    change = {
        "change": estimate["change"],
        "change_equal": estimate.get("change_equal")
        or {m: {g: np.zeros((n_layers[g] - 1, 0)) for g in n_layers} for m in methods},
    }
    iv = summarise_replicates(blocks)
    _centre(
        iv,
        sim={m: np.asarray(v, dtype=float) for m, v in estimate["similarity"].items()},
        keys=keys,
        change=change,
        n_layers=n_layers,
        bins={"change": n_rank, "change_equal": n_equal},
    )
    return {**estimate, "interval": iv}


def _centre(
    iv: dict,
    *,
    sim: dict[str, np.ndarray],
    keys: list[tuple[str, int]],
    change: dict,
    n_layers: dict[str, int],
    bins: dict[str, int],
) -> None:
    """Place the percentile intervals of :func:`bootstrap_distances` (``iv``, changed in
    place) around the estimates (:func:`~evolution.metrics.similarity.centre_intervals`):
    the same-layer distances from ``sim`` (views ``keys``) and the change of both kinds of
    bin (``change[kind][method][model]``; ``bins[kind]``: how many bins of that kind, ``change``
    the rank bins, ``change_equal`` the equal-size ones), which ``iv["change"]`` holds side by
    side, rank bins first; afterwards ``iv["change"]`` and ``iv["change_equal"]`` hold them apart."""
    view = {v: i for i, v in enumerate(keys)}
    L = max(n_layers.values())
    kinds = ("change", "change_equal")  # the order of the replicates' columns
    subsets = sum(bins[k] for k in kinds)
    centred: dict[str, dict] = {"change": {}, "change_equal": {}}
    for m in sim:
        est = np.full((L, len(iv["pairs"])), np.nan)
        for p_i, (ga, gb) in enumerate(iv["pairs"]):
            for layer in range(min(n_layers[ga], n_layers[gb])):
                i, j = view[(ga, layer)], view[(gb, layer)]
                est[layer, p_i] = 1.0 - (sim[m][i, j] + sim[m][j, i]) / 2  # PWCCA: mean of both directions
        iv["between"][m] = centre_intervals(iv["between"][m], iv["between_mean"][m], est)
        for g, bounds in iv["change"][m].items():
            pairs = n_layers[g] - 1
            full = np.concatenate(
                [np.asarray(change[kind][m][g], dtype=float).reshape(pairs, bins[kind]) for kind in kinds], axis=1
            )
            bounds = np.asarray(bounds, dtype=float).reshape(L - 1, subsets, 2)
            means = np.asarray(iv["change_mean"][m][g], dtype=float).reshape(L - 1, subsets)
            out = np.full(bounds.shape, np.nan)
            out[:pairs] = centre_intervals(bounds[:pairs], means[:pairs], full)
            centred["change"].setdefault(m, {})[g] = out[:, : bins["change"]].tolist()
            centred["change_equal"].setdefault(m, {})[g] = out[:, bins["change"] :].tolist()
    iv.update(centred)
    del iv["between_mean"], iv["change_mean"]


def merge(parts: list[dict]) -> dict:
    """One similarity result from per-tokenisation-class results (NaN across classes); the
    bin sizes become per model (``sizes`` / ``equal_sizes``: model -> sizes of its class)."""
    per_model = {}
    for key in ("sizes", "equal_sizes"):
        per_model[key] = {g: p[key] for p in parts if key in p for g in dict.fromkeys(v[0] for v in p["views"])}
    if len(parts) == 1:
        return {**parts[0], **per_model}
    views = [v for p in parts for v in p["views"]]
    methods = list(parts[0]["similarity"])
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    off = 0
    for p in parts:
        n = len(p["views"])
        for m in methods:
            sim[m][off : off + n, off : off + n] = p["similarity"][m]
        off += n
    change = {m: {g: v for p in parts for g, v in p["change"][m].items()} for m in methods}
    out = {
        "views": views,
        "similarity": {m: v.tolist() for m, v in sim.items()},
        "change": change,
        "bins": parts[0]["bins"],
        "n": parts[0]["n"],
        "notes": [n for p in parts for n in p["notes"]],
        **per_model,
    }
    if all("change_equal" in p for p in parts):
        out["change_equal"] = {m: {g: v for p in parts for g, v in p["change_equal"][m].items()} for m in methods}
    # intervals are per class (their replicates resample different occurrences): none across classes
    return out


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
    version = 4  # 2: bootstrap intervals; 3: equal-size bins, bin sizes, same-layer distances by pair kind;
    # 4: the replicates from weighted cross-products (the same numbers to 1e-8), a change unit per model
    section = "similarity"

    def units(self, inputs: Inputs) -> list[Unit]:
        scfg = inputs.config.similarity
        units = []
        for names in tokenisation_classes(inputs):
            models = [inputs.models[n] for n in names]
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
            for m in models:  # one unit per model: the workers share them
                own = save_arrays(inputs.arrays_dir, "change", {f"rows/{m.name}": m.plan.similarity_rows, **shared})
                units.append(
                    Unit(
                        f"{_CHANGE}{m.name}",
                        change_task,
                        dict(
                            store=inputs.store,
                            model=m.name,
                            n_layers=m.n_layers,
                            arrays=own,
                            similarity=scfg,
                            bins=bins,
                            seed=inputs.seed,
                        ),
                        key={
                            "model": m.key,
                            "arrays": own.rsplit("-", 1)[-1],
                            "similarity": config,
                            "bins": bins,
                            "seed": inputs.seed,
                        },
                    )
                )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        estimates = {
            n: _joined(r, {g: results[_CHANGE + g] for g in dict.fromkeys(v[0] for v in r["views"])})
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
