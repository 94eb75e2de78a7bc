"""Bootstrap intervals of the PWCCA / CKA distances (:mod:`evolution.metrics.similarity`) over
resamples of whole sentences, by the definition: each replicate resamples the rows and redoes
the views' SVDs (:func:`bootstrap_replicates`, in blocks of replicates; :func:`bootstrap_distances`
all at once); the replicates summarised into percentile intervals (:func:`summarise_replicates`)
and placed around the estimates (:func:`centre_intervals`; Efron & Tibshirani 1993, ch. 10).
:mod:`evolution.metrics.similarity_bootstrap` reaches the same replicates from weighted
cross-products.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["bootstrap_distances", "bootstrap_replicates", "summarise_replicates", "centre_intervals"]


def bootstrap_distances(
    *,
    read,
    models: list[str],
    n_layers: dict[str, int],
    sentence: np.ndarray,
    masks: dict[str, np.ndarray],
    methods: list[str],
    replicates: int,
    seed: int,
    epsilon: float,
    min_ratio: float,
    level: float = 0.95,
) -> dict[str, Any]:
    """``read(model, layer)`` (n, d) the states of the compared occurrences, ``sentence``
    (n,) their sentences. Percentile intervals of the distances the figures compare, over ``replicates``
    resamples of whole sentences (replicate ``r`` draws with ``default_rng([seed, r])``,
    the same occurrences for every model): the same-layer distance of every pair of
    models, and each model's change between adjacent layers per subset of ``masks``.
    Each replicate redoes the SVDs (a View per model and layer), one layer at a time.
    ``between`` (layer, pair, 2) and ``change`` (layer_pair, subset, 2) are the plain
    percentiles; ``between_mean`` / ``change_mean`` the replicates' means, with which
    :func:`centre_intervals` places them around the estimates (a resample repeats
    sentences, and repeated rows make CCA fit closer: the replicates' distances sit below
    the estimate, the more so the fewer occurrences per dimension).

    :func:`bootstrap_replicates` on blocks of replicates followed by
    :func:`summarise_replicates` gives the same numbers (the pipeline's route: one task per
    block, so that the replicates spread over the workers)."""
    block = bootstrap_replicates(
        read=read,
        models=models,
        n_layers=n_layers,
        sentence=sentence,
        masks=masks,
        methods=methods,
        replicates=range(replicates),
        seed=seed,
        epsilon=epsilon,
        min_ratio=min_ratio,
    )
    return summarise_replicates([block], level=level)


def bootstrap_replicates(
    *,
    read,
    models: list[str],
    n_layers: dict[str, int],
    sentence: np.ndarray,
    masks: dict[str, np.ndarray],
    methods: list[str],
    replicates: range,
    seed: int,
    epsilon: float,
    min_ratio: float,
) -> dict[str, Any]:
    """The replicates ``replicates`` (e.g. ``range(10, 20)``) of :func:`bootstrap_distances`,
    unsummarised: ``between[method]`` (replicate, layer, pair) and
    ``change[method][model]`` (replicate, layer_pair, subset) as nested lists (NaN where
    a pair or subset has no value), with ``first`` and ``pairs``. Replicate ``r`` is the
    same resample whichever block computes it."""
    from evolution.metrics.plan import rows_by_sentence
    from evolution.metrics.similarity import View, cka, pair_similarity, pwcca

    fns = {"pwcca": pwcca, "cka": cka}
    groups = list(rows_by_sentence(np.asarray(sentence)).values())
    picks = [
        np.concatenate([groups[k] for k in np.random.default_rng([seed, r]).integers(0, len(groups), len(groups))])
        for r in replicates
    ]
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    L = max(n_layers.values())
    R = len(picks)
    between = {m: np.full((R, L, len(pairs)), np.nan) for m in methods}
    change = {m: {g: np.full((R, L - 1, len(masks)), np.nan) for g in models} for m in methods}
    previous: dict[str, np.ndarray] = {}
    for layer in range(L):
        states = {g: read(g, layer) for g in models if layer < n_layers[g]}
        for r, idx in enumerate(picks):
            views = {
                g: View(x[idx], epsilon=epsilon, min_ratio=min_ratio, name=f"{g} layer {layer}")
                for g, x in states.items()
            }
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
    return {
        "first": replicates.start,
        "replicates": R,
        "pairs": pairs,
        "between": {m: v.tolist() for m, v in between.items()},
        "change": {m: {g: v.tolist() for g, v in per.items()} for m, per in change.items()},
    }


def summarise_replicates(blocks: list[dict[str, Any]], *, level: float = 0.95) -> dict[str, Any]:
    """:func:`bootstrap_distances`'s result from blocks of :func:`bootstrap_replicates`
    (any order: they are put in replicate order; a block without replicates is skipped)."""
    blocks = sorted((b for b in blocks if b["replicates"]), key=lambda b: b["first"])
    if not blocks:
        raise ValueError("summarise_replicates: no replicates; ask for similarity.bootstrap >= 1")
    methods = list(blocks[0]["between"])

    def stack(get) -> np.ndarray:
        return np.concatenate([np.asarray(get(b), dtype=float) for b in blocks], axis=0)

    between = {m: stack(lambda b, m=m: b["between"][m]) for m in methods}
    change = {m: {g: stack(lambda b, m=m, g=g: b["change"][m][g]) for g in blocks[0]["change"][m]} for m in methods}
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def bounds(x: np.ndarray) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: bins too small
            return np.moveaxis(np.nanpercentile(x, q, axis=0), 0, -1).tolist()

    def mean(x: np.ndarray) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(x, axis=0).tolist()

    return {
        "pairs": [tuple(p) for p in blocks[0]["pairs"]],
        "replicates": sum(b["replicates"] for b in blocks),
        "between": {m: bounds(v) for m, v in between.items()},
        "change": {m: {g: bounds(v) for g, v in per.items()} for m, per in change.items()},
        "between_mean": {m: mean(v) for m, v in between.items()},
        "change_mean": {m: {g: mean(v) for g, v in per.items()} for m, per in change.items()},
    }


def centre_intervals(bounds, means, estimates) -> list:
    """Percentile ``bounds`` (..., 2) moved by ``estimates - means`` (...): the bootstrap
    interval placed around the estimate (its spread from the replicates, its location from
    the estimate; Efron & Tibshirani 1993, ch. 10: mean(replicates) - estimate is the
    bootstrap's bias estimate). NaN where either is NaN."""
    shift = np.asarray(estimates, dtype=float) - np.asarray(means, dtype=float)
    return (np.asarray(bounds, dtype=float) + shift[..., None]).tolist()
