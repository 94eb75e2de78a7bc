"""PWCCA / CKA between layers and models, and change between adjacent layers by
frequency (Voita et al. 2019, section 4, figures 3-4; METHODS.md 4).

One unit per set of models that tokenise the similarity sentences
identically (the same (sentence, position, token id) at the similarity rows:
models may still differ elsewhere, e.g. one truncates a long sentence of the
annotated text one piece earlier because it adds a beginning-of-sentence
token). Views of different sets stay NaN.

=========================  =============================================  =========================
``similarity/distance``    (metric, model_a, layer_a, model_b, layer_b)   1 - PWCCA (weights from a)
                                                                          or 1 - CKA
``change/distance``        (metric, model, layer_pair, freq_bin)          layer n vs n + 1, per
                                                                          frequency-rank bin
=========================  =============================================  =========================
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import xarray as xr

from evolution.metrics.plan import frequency_bins
from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, save_arrays, strings
from evolution.analyses.plotting import STYLES, adjacent_change_figure, open_group, plt
from evolution.config import SimilarityConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["Similarity", "similarity_task", "adjacent_change", "merge", "similarity_heatmaps",
           "change_by_frequency"]


def similarity_task(*, store: str, models: list[str], n_layers: dict[str, int], arrays: str,
                    similarity: SimilarityConfig, bins: list[tuple[int, int]], seed: int = 0) -> dict[str, Any]:
    """All-pairs similarity of (model, layer) views on the same occurrences,
    and adjacent-layer change per frequency-rank bin.

    ``arrays`` holds ``rows/<model>`` (n,), the same occurrences in the same
    order in every model, and ``freq_rank`` (n,) of those occurrences; ``bins``
    the frequency-rank bins [lo, hi) of the change measure.
    Returns ``similarity[method]`` as a nested list (view_a, view_b) over
    ``views`` = [(model, layer), ...], and ``change[method][model]`` as
    (layer_pair, bin) with NaN where a bin has too few occurrences (listed in
    ``notes``). With ``similarity.bootstrap`` and ``sentence`` (n,) in ``arrays``,
    ``interval``: 95% percentile intervals over resampled sentences (one resample
    shared by every model: a paired bootstrap) of the same-layer distances between
    models (``between[method]``: (layer, model pair, 2)) and of the change
    (``change[method][model]``: (layer_pair, bin, 2)); see :func:`bootstrap_distances`.
    """
    from evolution.metrics.similarity import View, pair_similarity
    from evolution.store import read_rows

    a = load_arrays(arrays)
    rows = {m: a[f"rows/{m}"] for m in models}
    methods = similarity.methods
    kw = {"epsilon": similarity.epsilon, "min_ratio": similarity.min_ratio}
    views, keys = [], []
    for g in models:
        for layer in range(n_layers[g]):
            views.append(View(read_rows(store, g, layer, rows[g]), name=f"{g} layer {layer}", **kw))
            keys.append((g, layer))
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    for i, va in enumerate(views):
        for j in range(i, len(views)):  # one product and one SVD give both PWCCA directions and CKA
            p_ab, p_ba, c = pair_similarity(va, views[j])
            if "pwcca" in sim:
                sim["pwcca"][i, j], sim["pwcca"][j, i] = p_ab, p_ba
            if "cka" in sim:
                sim["cka"][i, j] = sim["cka"][j, i] = c
    del views
    bins = [tuple(b) for b in bins]
    change: dict[str, dict[str, list]] = {m: {} for m in methods}
    notes = []
    freq_rank = a["freq_rank"]
    masks = {f"ranks [{lo}, {hi})": (freq_rank >= lo) & (freq_rank < hi) for lo, hi in bins}
    for g in models:
        states = [read_rows(store, g, layer, rows[g]) for layer in range(n_layers[g])]  # read once, sliced per bin
        per_method, bin_notes = adjacent_change(states, masks, methods=methods, epsilon=kw["epsilon"],
                                                min_ratio=kw["min_ratio"], name=g)
        notes += bin_notes
        for m in methods:
            change[m][g] = per_method[m]
    out = {"views": keys, "similarity": {m: v.tolist() for m, v in sim.items()}, "change": change,
           "bins": bins, "n": int(len(freq_rank)), "notes": notes}
    if similarity.bootstrap and "sentence" in a:
        out["interval"] = bootstrap_distances(
            read=lambda g, layer: np.asarray(read_rows(store, g, layer, rows[g]), dtype=np.float64),
            models=models, n_layers=n_layers, sentence=a["sentence"], masks=masks, methods=methods,
            replicates=similarity.bootstrap, seed=seed, **kw)
    return out


def bootstrap_distances(*, read, models: list[str], n_layers: dict[str, int], sentence: np.ndarray,
                        masks: dict[str, np.ndarray], methods: list[str], replicates: int, seed: int,
                        epsilon: float, min_ratio: float, level: float = 0.95) -> dict[str, Any]:
    """``read(model, layer)`` (n, d) the states of the compared occurrences, ``sentence``
    (n,) their sentences. Percentile intervals of the distances the figures compare, over ``replicates``
    resamples of whole sentences (replicate ``r`` draws with ``default_rng([seed, r])``,
    the same occurrences for every model): the same-layer distance of every pair of
    models, and each model's change between adjacent layers per subset of ``masks``.
    Each replicate redoes the SVDs (a View per model and layer), one layer at a time."""
    from evolution.metrics.plan import rows_by_sentence
    from evolution.metrics.similarity import View, cka, pair_similarity, pwcca

    fns = {"pwcca": pwcca, "cka": cka}
    groups = list(rows_by_sentence(np.asarray(sentence)).values())
    picks = [np.concatenate([groups[k] for k in np.random.default_rng([seed, r]).integers(0, len(groups),
                                                                                          len(groups))])
             for r in range(replicates)]
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1:]]
    L = max(n_layers.values())
    between = {m: np.full((replicates, L, len(pairs)), np.nan) for m in methods}
    change = {m: {g: np.full((replicates, L - 1, len(masks)), np.nan) for g in models} for m in methods}
    previous: dict[str, np.ndarray] = {}
    for layer in range(L):
        states = {g: read(g, layer) for g in models if layer < n_layers[g]}
        for r, idx in enumerate(picks):
            views = {g: View(x[idx], epsilon=epsilon, min_ratio=min_ratio, name=f"{g} layer {layer}")
                     for g, x in states.items()}
            for p, (a, b) in enumerate(pairs):
                if a in views and b in views:
                    p_ab, p_ba, c = pair_similarity(views[a], views[b])
                    for m in methods:  # PWCCA weights by one view: the mean of both directions
                        between[m][r, layer, p] = 1.0 - ((p_ab + p_ba) / 2 if m == "pwcca" else c)
            for g, x in states.items():
                if g not in previous:
                    continue
                for k, mask in enumerate(masks.values()):
                    sel = idx[mask[idx]]
                    if len(sel) < min_ratio * x.shape[1]:
                        continue
                    va = View(previous[g][sel], epsilon=epsilon, min_ratio=min_ratio)
                    vb = View(x[sel], epsilon=epsilon, min_ratio=min_ratio)
                    for m in methods:
                        change[m][g][r, layer - 1, k] = 1.0 - fns[m](va, vb)
        previous = states
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def bounds(x: np.ndarray) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: bins too small
            return np.moveaxis(np.nanpercentile(x, q, axis=0), 0, -1).tolist()

    return {"pairs": pairs, "replicates": replicates,
            "between": {m: bounds(v) for m, v in between.items()},
            "change": {m: {g: bounds(v) for g, v in per.items()} for m, per in change.items()}}



def adjacent_change(states: list[np.ndarray], masks: dict[str, np.ndarray], *, methods: list[str], epsilon: float,
                    min_ratio: float, name: str) -> tuple[dict[str, list[list[float]]], list[str]]:
    """Distance between layers n and n + 1 on each subset of occurrences.

    ``states[layer]`` (n, d) for layers 0..L-1 on the same occurrences;
    ``masks`` (n,) bool per subset (a frequency bin, a POS group). Returns
    ``{method: (L - 1, subsets) nested list}`` with NaN where a subset has
    fewer than ``min_ratio x d`` occurrences (each such subset named in the
    notes), and the notes.
    """
    from evolution.metrics.similarity import View, cka, pwcca

    fns = {"pwcca": pwcca, "cka": cka}
    L = len(states)
    out = {m: np.full((L - 1, len(masks)), np.nan) for m in methods}
    notes = []
    for b, (label, mask) in enumerate(masks.items()):
        if mask.sum() < min_ratio * states[0].shape[1]:
            notes.append(f"change {name} {label}: {int(mask.sum())} occurrences < {min_ratio:g} x d; left as NaN")
            continue
        vs = [View(s[mask], name=f"{name} layer {i} {label}", epsilon=epsilon, min_ratio=min_ratio)
              for i, s in enumerate(states)]
        for layer in range(L - 1):
            for m in methods:
                out[m][layer, b] = 1.0 - fns[m](vs[layer], vs[layer + 1])
    return {m: v.tolist() for m, v in out.items()}, notes


def merge(parts: list[dict]) -> dict:
    """One similarity result from per-tokenisation-class results (NaN across classes)."""
    if len(parts) == 1:
        return parts[0]
    views = [v for p in parts for v in p["views"]]
    methods = list(parts[0]["similarity"])
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    off = 0
    for p in parts:
        n = len(p["views"])
        for m in methods:
            sim[m][off:off + n, off:off + n] = p["similarity"][m]
        off += n
    change = {m: {g: v for p in parts for g, v in p["change"][m].items()} for m in methods}
    # intervals are per class (their replicates resample different occurrences): none across classes
    return {"views": views, "similarity": {m: v.tolist() for m, v in sim.items()}, "change": change,
            "bins": parts[0]["bins"], "n": parts[0]["n"], "notes": [n for p in parts for n in p["notes"]]}


def tokenisation_classes(inputs: Inputs) -> list[list[str]]:
    """Models grouped by the (sentence, position, token id) of their similarity rows."""
    classes: dict[bytes, list[str]] = {}
    for m in inputs.models.values():
        rows = m.plan.similarity_rows
        occurrences = np.stack([m.coords[v][rows].astype(np.int64) for v in ("sentence", "position", "token_id")])
        classes.setdefault(occurrences.tobytes(), []).append(m.name)
    if len(classes) > 1:
        logger.warning("metrics: models tokenise the similarity sentences differently (%s); similarity is computed "
                       "within each group only", "; ".join(", ".join(v) for v in classes.values()))
    return list(classes.values())


class Similarity(Analysis):
    name = "similarity"
    version = 2  # 2: bootstrap intervals
    section = "similarity"

    def units(self, inputs: Inputs) -> list[Unit]:
        scfg = inputs.config.similarity
        units = []
        for names in tokenisation_classes(inputs):
            models = [inputs.models[n] for n in names]
            n_rows = len(models[0].plan.similarity_rows)
            d = max(m.d_model for m in models)
            if n_rows < scfg.min_ratio * d:
                logger.warning("metrics: similarity skipped for %s: %d occurrences in the first %d sentences, "
                               "fewer than metrics.similarity.min_ratio x d = %g x %d", ", ".join(names), n_rows,
                               scfg.sentences, scfg.min_ratio, d)
                continue
            bins, notes = frequency_bins(scfg.freq_bins, ranked_types=models[0].ranked_types,
                                         basis=models[0].frequency)
            for note in notes:
                logger.info("metrics: change by frequency (%s): %s", ", ".join(names), note)
            rows = {f"rows/{m.name}": m.plan.similarity_rows for m in models}
            first = models[0].plan.similarity_rows
            arrays = save_arrays(inputs.arrays_dir, "similarity",
                                 {**rows, "freq_rank": models[0].freq_rank[first],
                                  "sentence": models[0].coords["sentence"][first]})
            units.append(Unit("+".join(names), similarity_task,
                              dict(store=inputs.store, models=names, n_layers={m.name: m.n_layers for m in models},
                                   arrays=arrays, similarity=scfg, bins=bins, seed=inputs.seed),
                              key={"models": [m.key for m in models], "similarity": resolved_dict(scfg),
                                   "bins": bins, "seed": inputs.seed}))
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        similarity = merge(list(results.values()))
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
        out = {"similarity": xr.Dataset(
            {"distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), dist)},
            coords={"metric": strings(methods), "model_a": strings(models), "layer_a": layer,
                    "model_b": strings(models), "layer_b": layer},
            attrs={"n_occurrences": similarity["n"], "notes": similarity["notes"]})}
        bins = [f"{lo}-{hi}" for lo, hi in similarity["bins"]]
        ch = np.full((len(methods), len(models), L - 1, len(bins)), np.nan)
        for q, meth in enumerate(methods):
            for m, rows in similarity["change"][meth].items():
                arr = np.asarray(rows, dtype=float)
                ch[q, models.index(m), :len(arr)] = arr
        out["change"] = xr.Dataset(
            {"distance": (("metric", "model", "layer_pair", "freq_bin"), ch,
                          {"long_name": "distance between layer n and n + 1 on occurrences in a frequency-rank bin"})},
            coords={"metric": strings(methods), "model": strings(models),
                    "layer_pair": strings(f"{i}-{i + 1}" for i in range(L - 1)),
                    "layer_from": ("layer_pair", np.arange(L - 1)), "freq_bin": strings(bins),
                    "rank_lo": ("freq_bin", [lo for lo, _ in similarity["bins"]])},
            attrs={"frequency": next(iter(inputs.models.values())).frequency})
        interval = similarity.get("interval")
        if interval is not None:  # one tokenisation class (merge keeps intervals only then)
            n_boot = interval["replicates"]
            between = np.full((len(methods), len(models), len(models), L, 2), np.nan)
            change_iv = np.full((len(methods), len(models), L - 1, len(bins), 2), np.nan)
            for q, meth in enumerate(methods):
                b = np.asarray(interval["between"][meth], dtype=float)  # (layer, pair, 2)
                for p_i, (ma, mb) in enumerate(interval["pairs"]):
                    i, j = models.index(ma), models.index(mb)
                    between[q, i, j, :len(b)] = between[q, j, i, :len(b)] = b[:, p_i]
                for m, v in interval["change"][meth].items():
                    v = np.asarray(v, dtype=float)
                    change_iv[q, models.index(m), :len(v)] = v
            long_name = f"95% bootstrap interval over sentences ({n_boot} paired replicates)"
            out["similarity"]["interval"] = (("metric", "model_a", "model_b", "layer", "bound"), between,
                                             {"long_name": "same-layer distance (mean of both directions): "
                                                           + long_name})
            out["similarity"] = out["similarity"].assign_coords(layer=layer, bound=strings(["low", "high"]))
            out["change"]["interval"] = (("metric", "model", "layer_pair", "freq_bin", "bound"), change_iv,
                                         {"long_name": long_name})
            out["change"] = out["change"].assign_coords(bound=strings(["low", "high"]))
        return out


def similarity_heatmaps(path, metric: str = "pwcca"):
    """Layer x layer distance within each model, and same-layer distance between models."""
    ds = open_group(path, "similarity")
    if ds is None or metric not in ds.metric.values:
        return None
    pyplot = plt()
    d = ds.distance.sel(metric=metric).load()
    models = list(ds.model_a.values)
    cols = min(5, len(models) + 1)  # a run with controls: rows of five panels
    rows = -(-(len(models) + 1) // cols)
    fig, grid = pyplot.subplots(rows, cols, figsize=(3.6 * cols, 3.4 * rows), squeeze=False, layout="constrained")
    axes = grid.ravel()
    for ax in axes[len(models) + 1:]:
        ax.set_visible(False)
    for ax, m in zip(axes, models):
        im = ax.imshow(d.sel(model_a=m, model_b=m), vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set(title=f"{m}: layer vs layer", xlabel="layer", ylabel="layer")
    fig.colorbar(im, ax=axes[:len(models)].tolist(), fraction=0.02, label=f"{metric.upper()} distance")
    ax = axes[len(models)]
    k = 0
    for i, a in enumerate(models):
        for b in models[i + 1:]:
            same = [d.sel(model_a=a, model_b=b, layer_a=layer, layer_b=layer).item() for layer in ds.layer_a.values]
            ax.plot(ds.layer_a, same, label=f"{a} vs {b}", **STYLES[k % len(STYLES)])
            if "interval" in ds:  # 95% bootstrap interval over sentences
                band = ds.interval.sel(metric=metric, model_a=a, model_b=b)
                ax.fill_between(ds.layer, band.sel(bound="low"), band.sel(bound="high"),
                                color=STYLES[k % len(STYLES)]["color"], alpha=0.15, linewidth=0)
            k += 1
    ax.set(title="between models, same layer", xlabel="layer", ylabel=f"{metric.upper()} distance", ylim=(0, 1))
    if k:
        ax.legend(fontsize=8 if k <= 6 else 5, ncol=1 if k <= 10 else 2)
    return fig


def change_by_frequency(path, metric: str = "pwcca"):
    """Distance between layers n and n + 1 by frequency-rank bin, one panel per model."""
    return adjacent_change_figure(path, group="change", groups="freq_bin", xlabel="frequency rank bin", metric=metric)


Similarity.figures = {
    "similarity_pwcca": (lambda p: similarity_heatmaps(p, "pwcca"),
                         "PWCCA distance between layers of one model and between models at the same layer (fig. 3)."),
    "similarity_cka": (lambda p: similarity_heatmaps(p, "cka"), "The same with linear CKA."),
    "change_pwcca": (lambda p: change_by_frequency(p, "pwcca"),
                     "Change between adjacent layers (PWCCA distance) by token frequency rank (fig. 4)."),
}
