"""The units of :mod:`evolution.analyses.similarity` (Voita et al. 2019, section 4,
figures 3-4): :func:`similarity_task`, PWCCA / CKA between every (model, layer) view of one
tokenisation class with the paired bootstrap of the same-layer distances, and
:func:`change_task`, one model's change between adjacent layers per frequency bin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evolution.analyses.base import load_arrays
from evolution.config import SimilarityConfig
from evolution.metrics.similarity import bin_sizes

__all__ = ["similarity_task", "change_task", "combine_change"]


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
    the rows and redoing the SVDs, :func:`~evolution.metrics.similarity_intervals.bootstrap_replicates`).
    :func:`~evolution.analyses.similarity_results.with_intervals` places their percentile
    intervals around the estimates.
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
        for (g, layer), v in zip(keys, views, strict=True):
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
    subsets: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One model's change between adjacent layers per frequency-rank bin (and, with
    ``similarity.equal_bins``, per bin of equal size), with the paired bootstrap's replicates.

    ``arrays`` as for :func:`similarity_task`, with ``freq_rank`` (n,); ``bins`` the
    frequency-rank bins [lo, hi). The subsets are the frequency bins, then the equal-size
    bins (:func:`_subsets`); ``subsets`` = (a, b) computes only those with index in [a, b),
    reading only their rows: a part of the unit that :func:`combine_change` joins with the
    others (each subset's numbers depend on its own rows and the replicates' draws only, so
    the parts equal the whole). Returns the part: ``subsets`` (a, b), ``estimate[method]``
    (layer_pair, b - a) with NaN where a subset has too few occurrences (listed in ``notes``),
    their ``sizes`` (:func:`~evolution.metrics.similarity.bin_sizes`), ``n_bins`` (how many
    subsets are frequency-rank bins), ``bins``, and with ``similarity.bootstrap`` replicates
    ``replicates[method]`` (replicate, layer_pair, b - a): the same resamples of sentences
    as :func:`similarity_task`'s
    (:func:`~evolution.metrics.similarity_bootstrap.change_with_replicates`)."""
    from evolution.metrics.resample import sentence_draws
    from evolution.metrics.similarity_bootstrap import change_with_replicates
    from evolution.store import read_rows

    a = load_arrays(arrays)
    freq_rank = a["freq_rank"]
    every, split = _subsets(freq_rank, bins=bins, similarity=similarity)
    lo, hi = (0, len(every)) if subsets is None else subsets
    masks = dict(list(every.items())[lo:hi])
    group = np.unique(a["sentence"], return_inverse=True)[1].ravel()
    n_groups = int(group.max()) + 1  # of every sentence: the draws are the whole unit's
    draws = sentence_draws(n_groups, replicates=similarity.bootstrap, seed=seed) if similarity.bootstrap else None
    keep = np.any(np.stack(list(masks.values())), axis=0) if masks else np.zeros(len(freq_rank), bool)
    rows = a[f"rows/{model}"][keep]
    # float32 as stored (float16 widened exactly): every use goes through View, which takes its own
    # float64 copy of the rows it needs, so the numbers equal float64 states' at half the memory
    states = [read_rows(store, model, layer, rows) for layer in range(n_layers)]
    got = change_with_replicates(
        states,
        {k: m[keep] for k, m in masks.items()},
        group=group[keep],
        draws=draws,
        methods=similarity.methods,
        epsilon=similarity.epsilon,
        min_ratio=similarity.min_ratio,
        name=model,
    )
    out = {
        "subsets": [lo, hi],
        "estimate": {m: v.tolist() for m, v in got["estimate"].items()},
        "notes": got["notes"],
        "sizes": bin_sizes(freq_rank, masks),
        "n_bins": split[0],
        "bins": [tuple(b) for b in bins],
    }
    if draws is not None:
        out["replicates"] = {m: v.tolist() for m, v in got["replicates"].items()}
    return out


def combine_change(parts: list[dict]) -> dict[str, Any]:
    """One model's change from the parts of :func:`change_task` (in any order; together
    they cover every subset once): ``change[method]`` (layer_pair, frequency bin), ``sizes``,
    ``bins``, ``notes``; with equal-size bins ``change_equal`` and ``equal_sizes``; with
    replicates ``replicates[method]`` (replicate, layer_pair, subset of both kinds)."""
    parts = sorted(parts, key=lambda p: p["subsets"][0])
    covered = [i for p in parts for i in range(*p["subsets"])]
    if covered != list(range(len(covered))):
        raise ValueError(f"change parts cover subsets {covered}, not each of 0..{len(covered) - 1} once")
    first, n_bins = parts[0], parts[0]["n_bins"]
    methods = list(first["estimate"])
    est = {m: np.concatenate([np.asarray(p["estimate"][m], dtype=float) for p in parts], axis=1) for m in methods}
    sizes = {k: [v for p in parts for v in p["sizes"][k]] for k in first["sizes"]}
    out: dict[str, Any] = {
        "change": {m: v[:, :n_bins].tolist() for m, v in est.items()},
        "notes": [n for p in parts for n in p["notes"]],
        "bins": [tuple(b) for b in first["bins"]],
        "sizes": {k: v[:n_bins] for k, v in sizes.items()},
    }
    if len(covered) > n_bins:
        out["change_equal"] = {m: v[:, n_bins:].tolist() for m, v in est.items()}
        out["equal_sizes"] = {k: v[n_bins:] for k, v in sizes.items()}
    if "replicates" in first:
        out["replicates"] = {
            m: np.concatenate([np.asarray(p["replicates"][m], dtype=float) for p in parts], axis=2).tolist()
            for m in methods
        }
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
