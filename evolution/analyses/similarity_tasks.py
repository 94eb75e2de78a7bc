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

__all__ = ["similarity_task", "change_task"]


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
