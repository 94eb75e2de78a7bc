"""The metrics stage's units of work, run on Dask workers.

* :func:`layer_task`: MI, neighbours and t-SNE of one (model, layer);
* :func:`influence_task`: token influence of one model (it runs the model);
* :func:`similarity_task`: PWCCA/CKA between every pair of (model, layer)
  views, and change between adjacent layers by frequency bin, with one
  factorisation per view (:class:`evolution.metrics.similarity.View`).

Each reads the rows it needs from the representation store and returns
plain, JSON-serialisable results.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["read_rows", "layer_task", "similarity_task", "adjacent_change", "pos_change_task", "influence_task",
           "mlm_output_task"]


def read_rows(store: str, group: str, layer: int, rows: np.ndarray) -> np.ndarray:
    """``hidden[layer, rows, :]`` as float32 (n, d), reading only the chunks needed."""
    import zarr

    arr = zarr.open_array(store, path=f"{group}/hidden", mode="r", zarr_format=3)
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return np.empty((0, arr.shape[2]), dtype=np.float32)
    lo, hi = int(rows.min()), int(rows.max()) + 1
    if len(rows) > (hi - lo) // 4:  # dense: one contiguous read, then index in memory
        return np.asarray(arr[layer, lo:hi], dtype=np.float32)[rows - lo]
    return np.asarray(arr.get_orthogonal_selection((layer, rows, slice(None))), dtype=np.float32)


def layer_task(*, store: str, group: str, layer: int, plan: str, cfg: dict[str, Any],
               seed: int) -> dict[str, Any]:
    """MI, neighbour measures and t-SNE layouts of one (model, layer); ``plan`` is the
    path of the model's plan file (:func:`~evolution.metrics.plan.save_task_plan`)."""
    from evolution.metrics.mi import layer_mi
    from evolution.metrics.neighbors import knn, same_label_rate, within_type_measures
    from evolution.metrics.plan import load_task_plan
    from evolution.metrics.tsne import tsne_layout

    plan = load_task_plan(plan)
    out: dict[str, Any] = {"model": group, "layer": layer}
    if cfg.get("mi") is not None:
        out["mi"] = {}
        for target, (rows, labels) in plan["mi"].items():
            r = layer_mi(read_rows(store, group, layer, rows), labels, k=cfg["mi"]["k"],
                         restarts=cfg["mi"]["restarts"], niter=cfg["mi"]["niter"], seed=seed,
                         algorithm=cfg["mi"]["algorithm"])
            out["mi"][target] = r.as_dict()
    nb = plan.get("neighbors")
    if cfg.get("neighbors") is not None and nb is not None and len(nb["rows"]) > 1:
        c = cfg["neighbors"]
        x = read_rows(store, group, layer, nb["rows"])
        ids = knn(x, k=c["k"], metric=c["metric"], index=c["index"])
        out["neighbors"] = {"same_token": same_label_rate(ids, nb["token"]),
                            **within_type_measures(x, types=nb["token"], position=nb["position"],
                                                   annotations={"left": nb["left"], "right": nb["right"]},
                                                   k=c["k"], metric=c["metric"])}
        syn = plan.get("syntax")
        if syn:  # on the annotated text: same POS / dependency relation among same-token neighbours
            r = within_type_measures(read_rows(store, group, layer, syn["rows"]), types=syn["token"],
                                     position=syn["position"], annotations={"pos": syn["pos"], "deprel": syn["deprel"]},
                                     k=c["k"], metric=c["metric"], chance=True)
            out["neighbors"].update({name: v for name, v in r.items() if name.startswith("same_")})
    if cfg.get("tsne") is not None:
        out["tsne"] = {}
        for name, sel in plan["tsne"].items():
            y = tsne_layout(read_rows(store, group, layer, sel["rows"]), perplexity=cfg["tsne"]["perplexity"],
                            seed=seed)
            out["tsne"][name] = y.tolist()
    return out


def _bins(edges: list[int]) -> list[tuple[int, int]]:
    return list(zip(edges[:-1], edges[1:]))


def similarity_task(*, store: str, groups: list[str], n_layers: dict[str, int], rows: dict[str, np.ndarray],
                    freq_rank: np.ndarray, cfg: dict[str, Any]) -> dict[str, Any]:
    """All-pairs similarity of (model, layer) views on the same occurrences,
    and adjacent-layer change per frequency-rank bin.

    ``rows[group]`` (n,) index the token axis of each group, the same
    occurrences in the same order in every group (the caller checks that
    the groups tokenise them identically: rows may differ where another
    part of the corpus was truncated differently); ``freq_rank`` (n,) is the
    frequency rank of those occurrences. Returns ``similarity[method]`` as a
    nested list (view_a, view_b) over ``views`` = [(group, layer), ...], and
    ``change[method][group]`` as (layer_pair, bin) with NaN where a bin has
    too few occurrences (listed in ``notes``).
    """
    from evolution.metrics.similarity import View, cka, pwcca

    fns = {"pwcca": pwcca, "cka": cka}
    methods = cfg["methods"]
    kw = {"epsilon": cfg["epsilon"], "min_ratio": cfg["min_ratio"]}
    views, keys = [], []
    for g in groups:
        for layer in range(n_layers[g]):
            views.append(View(read_rows(store, g, layer, rows[g]), name=f"{g} layer {layer}", **kw))
            keys.append((g, layer))
    sim = {m: np.full((len(views), len(views)), np.nan) for m in methods}
    for i, a in enumerate(views):
        for j, b in enumerate(views):
            for m in methods:
                if m == "cka" and j < i:
                    sim[m][i, j] = sim[m][j, i]  # symmetric
                else:
                    sim[m][i, j] = fns[m](a, b)
    del views
    bins = _bins(cfg["freq_bins"])
    change: dict[str, dict[str, list]] = {m: {} for m in methods}
    notes = []
    freq_rank = np.asarray(freq_rank)
    masks = {f"ranks [{lo}, {hi})": (freq_rank >= lo) & (freq_rank < hi) for lo, hi in bins}
    for g in groups:
        states = [read_rows(store, g, layer, rows[g]) for layer in range(n_layers[g])]  # read once, sliced per bin
        per_method, bin_notes = adjacent_change(states, masks, methods=methods, epsilon=kw["epsilon"],
                                                min_ratio=kw["min_ratio"], name=g)
        notes += bin_notes
        for m in methods:
            change[m][g] = per_method[m]
    return {"views": keys, "similarity": {m: v.tolist() for m, v in sim.items()}, "change": change,
            "bins": bins, "n": int(len(freq_rank)), "notes": notes}


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


def pos_change_task(*, store: str, group: str, n_layers: int, rows: np.ndarray, pos: np.ndarray,
                    cfg: dict[str, Any]) -> dict[str, Any]:
    """Adjacent-layer change per POS tag on the annotated text (METHODS.md 4: change "by POS
    tag"): ``rows`` the annotated occurrences, ``pos`` (len(rows),) their words' tags (strings);
    tags are the groups, in order of decreasing count."""
    pos = np.asarray(pos, dtype=object)
    tags, counts = np.unique(pos, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    counts = {str(tags[i]): int(counts[i]) for i in order}
    states = [read_rows(store, group, layer, rows) for layer in range(n_layers)]
    change, notes = adjacent_change(states, {t: pos == t for t in counts}, methods=cfg["methods"],
                                    epsilon=cfg["epsilon"], min_ratio=cfg["min_ratio"], name=group)
    return {"change": change, "groups": list(counts), "counts": counts, "notes": notes}


def influence_task(*, spec: dict, content_ids: dict[int, list[int]], samples: list[tuple[int, int, int]],
                   n_bins: int, cfg: dict[str, Any], torch_threads: int = 1) -> dict[str, Any]:
    """Token influence of one model (:func:`evolution.metrics.influence.token_influence`);
    ``{"unsupported": reason}`` for a model that cannot mask attention keys per layer."""
    import torch

    from evolution.metrics.influence import token_influence
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if not adapter.supports_key_masking:
        return {"unsupported": f"{spec['name']}: {type(adapter).__name__} cannot mask attention keys per layer"}
    return token_influence(adapter, content_ids={int(k): v for k, v in content_ids.items()}, samples=samples,
                           n_bins=n_bins, methods=cfg["methods"], epsilon=cfg["epsilon"], min_ratio=cfg["min_ratio"])


def mlm_output_task(*, spec: dict, content_ids: dict[int, list[int]], types: list[int], cfg: dict[str, Any],
                    seed: int, torch_threads: int = 1) -> dict[str, Any]:
    """MI with the output label of a masked LM at every layer (:mod:`evolution.metrics.masked`):
    ``{"layers": [mi result per layer]}``, restricted to original tokens in ``types``."""
    import torch

    from evolution.metrics.masked import masked_states
    from evolution.metrics.mi import layer_mi
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if adapter.mask_id is None:
        return {"unsupported": f"{spec['name']}: no <mask> symbol"}
    states, labels = masked_states(adapter, {int(k): v for k, v in content_ids.items()}, seed=seed,
                                   corruptions=cfg.get("mlm_corruptions", 1))
    keep = np.isin(labels, np.asarray(types))
    out = []
    for layer in range(states.shape[0]):
        r = layer_mi(states[layer][keep], labels[keep], k=cfg["k"], restarts=cfg["restarts"], niter=cfg["niter"],
                     seed=seed, algorithm=cfg["algorithm"])
        out.append(r.as_dict())
    return {"layers": out}
