"""Change between adjacent layers per POS tag of the annotated text (Voita et al. 2019, sec. 4; docs/metrics.md:
change "by POS tag"; needs ``corpus.annotated`` and ``metrics.similarity``).

One unit per model: PWCCA / CKA distance between layers n and n + 1 on the
annotated occurrences of each UPOS tag; tags with fewer than
``similarity.min_ratio`` x d occurrences are NaN with a note.

=======================  =================================  ==================================
``change_pos/distance``  (metric, model, layer_pair, pos)   layer n vs n + 1 per UPOS tag
``change_pos/count``     (model, pos)                       annotated occurrences with the tag
=======================  =================================  ==================================
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, required, save_arrays, strings
from evolution.analyses.plotting import adjacent_change_figure
from evolution.config import SimilarityConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["ChangeByPOS", "pos_change_task", "change_by_pos"]


def pos_change_task(
    *, store: str, model: str, n_layers: int, arrays: str, similarity: SimilarityConfig
) -> dict[str, Any]:
    """Adjacent-layer change per POS tag: ``arrays`` holds ``rows`` (the annotated
    occurrences) and ``pos`` (their words' UPOS tags as codes into ``tags``);
    tags are the groups, in order of decreasing count."""
    from evolution.analyses.similarity import adjacent_change
    from evolution.store import read_rows

    a = load_arrays(arrays)
    pos = a["tags"][a["pos"]].astype(object)
    tags, tag_counts = np.unique(pos, return_counts=True)
    order = np.argsort(-tag_counts, kind="stable")
    counts = {str(tags[i]): int(tag_counts[i]) for i in order}
    states = [read_rows(store, model, layer, a["rows"]) for layer in range(n_layers)]
    change, notes = adjacent_change(
        states,
        {t: pos == t for t in counts},
        methods=similarity.methods,
        epsilon=similarity.epsilon,
        min_ratio=similarity.min_ratio,
        name=model,
    )
    return {"change": change, "groups": list(counts), "counts": counts, "notes": notes}


class ChangeByPOS(Analysis):
    name = "change_pos"
    version = 1
    section = "similarity"

    def units(self, inputs: Inputs) -> list[Unit]:
        scfg = required(inputs.config.similarity, "similarity")
        units = []
        for m in inputs.models.values():
            if m.annotation is None:
                continue
            m.require_every_layer("the change by part of speech (metrics.similarity)", "metrics.similarity")
            rows = m.plan.annotated_rows
            tags, codes = np.unique(np.asarray(m.coords["upos"][rows], dtype=object), return_inverse=True)
            arrays = save_arrays(
                inputs.arrays_dir,
                f"change-pos-{m.name}",  # tags as fixed-width str: no pickle
                {"rows": rows, "pos": codes.astype(np.int64), "tags": np.array(tags.tolist(), dtype=str)},
            )
            units.append(
                Unit(
                    m.name,
                    pos_change_task,
                    dict(store=inputs.store, model=m.name, n_layers=m.n_layers, arrays=arrays, similarity=scfg),
                    key={"model": m.key, "similarity": resolved_dict(scfg)},
                )
            )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        for r in results.values():
            for note in r.get("notes", []):
                logger.info("metrics: %s", note)
        methods = required(inputs.config.similarity, "similarity").methods
        results = {n: results[n] for n in inputs.names if n in results}  # config order
        models = list(results)
        tags = list(dict.fromkeys(t for r in results.values() for t in r["groups"]))  # first model's order first
        L1 = max(len(r["change"][methods[0]]) for r in results.values())
        dist = np.full((len(methods), len(models), L1, len(tags)), np.nan)
        count = np.zeros((len(models), len(tags)), dtype=np.int64)
        for i, r in enumerate(results.values()):
            cols = [tags.index(t) for t in r["groups"]]
            for q, meth in enumerate(methods):
                arr = np.asarray(r["change"][meth], dtype=float)
                dist[q, i, : len(arr)][:, cols] = arr
            count[i, cols] = [r["counts"][t] for t in r["groups"]]
        ds = xr.Dataset(
            {
                "distance": (
                    ("metric", "model", "layer_pair", "pos"),
                    dist,
                    {"long_name": "distance between layer n and n + 1 on the annotated occurrences of a POS tag"},
                ),
                "count": (("model", "pos"), count, {"long_name": "annotated occurrences with the tag"}),
            },
            coords={
                "metric": strings(methods),
                "model": strings(models),
                "layer_pair": strings(f"{i}-{i + 1}" for i in range(L1)),
                "layer_from": ("layer_pair", np.arange(L1)),
                "pos": strings(tags),
            },
            attrs={"notes": [n for r in results.values() for n in r.get("notes", [])]},
        )
        return {"change_pos": ds}


def change_by_pos(path, metric: str = "pwcca"):
    """Distance between layers n and n + 1 by POS tag of the annotated text, one panel per model."""
    return adjacent_change_figure(
        path, group="change_pos", groups="pos", xlabel="UPOS tag (annotated text; most frequent first)", metric=metric
    )


ChangeByPOS.figures = {
    "change_pos_pwcca": (
        lambda p: change_by_pos(p, "pwcca"),
        "Change between adjacent layers (PWCCA distance) by POS tag (UPOS) on the annotated text "
        "(docs/metrics.md); tags with fewer than min_ratio x d occurrences are left out.",
    ),
}
