"""The results of :mod:`evolution.analyses.similarity`'s units joined (Voita et al. 2019,
section 4, figures 3-4): a tokenisation class's estimates with its models' change by
frequency (:func:`joined`), the bootstrap replicates summarised into intervals placed around
the estimates (:func:`with_intervals`), and the classes merged into one result
(:func:`merge`).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from evolution.metrics.similarity_intervals import centre_intervals, summarise_replicates

__all__ = ["joined", "with_intervals", "merge"]


def joined(estimate: dict, change: dict[str, dict]) -> dict:
    """One class's result in one piece: the
    :func:`~evolution.analyses.similarity_tasks.similarity_task` result ``estimate`` and the
    :func:`~evolution.analyses.similarity_tasks.change_task` results ``change`` (by model), with
    ``interval`` where they carry replicates (:func:`with_intervals`)."""
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
    replicates: dict[str, dict[str, np.ndarray]] = {}
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
    """``estimate`` (a class's estimates, :func:`joined`) with ``interval``: the bootstrap
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
    """Place the percentile intervals of
    :func:`~evolution.metrics.similarity_intervals.bootstrap_distances` (``iv``, changed in place)
    around the estimates (:func:`~evolution.metrics.similarity_intervals.centre_intervals`):
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
