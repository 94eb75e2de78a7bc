"""The head map of the heads analysis (:mod:`evolution.analyses.heads`): the
Jensen-Shannon distance between every two heads of all models and its 2-D MDS map."""

from __future__ import annotations

from typing import Any

import numpy as np

from evolution.metrics.plan import rows_by_sentence


def head_map_task(*, store: str, models: list[str], seed: int) -> dict[str, Any]:
    """Jensen-Shannon distance between every two heads of ``models`` (Clark et al. 2019,
    section 6): word-level attention among content words (special tokens dropped, rows
    renormalised) on the stored sentences every model has, JS divergence averaged over
    queries, its square root a distance; and a 2-D MDS map of it."""
    from sklearn.manifold import MDS

    from evolution.metrics.heads import js_divergence_sums, word_attention, word_units
    from evolution.store import open_attention, open_attention_array, open_representations

    per_model: dict[str, dict[str, Any]] = {}
    for m in models:
        reps, att = open_representations(store, m), open_attention(store, m)
        per_model[m] = {
            "rows": rows_by_sentence(reps["sentence"].values),
            "word_id": reps["word_id"].values,
            "prefix": len(reps.attrs.get("prefix_ids", [])),
            "suffix": len(reps.attrs.get("suffix_ids", [])),
            "index": {int(s): k for k, s in enumerate(att["sentence"].values)},
            "length": att["length"].values,
            "attention": open_attention_array(store, m),
            "shape": (att.sizes["layer"], att.sizes["head"]),
        }
    common = sorted(set.intersection(*(set(p["index"]) for p in per_model.values())))
    units = [
        (m, layer + 1, h)
        for m in models
        for layer in range(per_model[m]["shape"][0])
        for h in range(per_model[m]["shape"][1])
    ]
    js = np.zeros((len(units), len(units)))
    n_queries = 0
    for s in common:
        maps = []
        for m in models:
            p = per_model[m]
            k, t = p["index"][s], int(p["length"][p["index"][s]])
            wid = p["word_id"][p["rows"][s]]
            if len(wid) != t - p["prefix"] - p["suffix"]:
                break
            alpha = np.asarray(p["attention"][k, :, :, :t, :t], dtype=np.float64)
            w = word_attention(alpha, word_units(wid, n_prefix=p["prefix"], n_suffix=p["suffix"]))
            n = int(wid.max()) + 1
            w = w[..., p["prefix"] : p["prefix"] + n, p["prefix"] : p["prefix"] + n] + 1e-12
            maps.append((w / w.sum(-1, keepdims=True)).reshape(-1, n, n))
        if len(maps) < len(models) or len({x.shape[1] for x in maps}) > 1 or maps[0].shape[1] < 2:
            continue
        js += js_divergence_sums(np.concatenate(maps))  # (units, units)
        n_queries += maps[0].shape[1]
    if n_queries == 0:
        return {"units": units, "sentences": 0}
    dist = np.sqrt(np.clip(js / n_queries, 0, None))
    xy = MDS(
        n_components=2, metric="precomputed", init="classical_mds", random_state=seed, normalized_stress="auto"
    ).fit_transform(dist)
    return {"units": units, "distance": dist, "xy": xy, "sentences": len(common), "queries": n_queries}
