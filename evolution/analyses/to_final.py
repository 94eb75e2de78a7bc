"""Distance of a checkpoint to its final model, layer by layer: how far the representations of
update U still are from what training ends with (the SVCCA-over-training view of Raghu et al.
2017, with this project's PWCCA and linear CKA; ``docs/trajectory.md``).

=====================  ==========================  =========================================
``to_final/distance``  (metric, model, layer)      1 - PWCCA (mean of both directions) or
                                                   1 - CKA between ``model``'s layer and the
                                                   same layer of its final model, on the
                                                   similarity sentences' occurrences
``to_final/final``     (model,) coordinate         the final model each checkpoint is compared with
=====================  ==========================  =========================================

Which final model a checkpoint belongs to comes from ``Inputs.attrs["finals"]``
(``{"mt@200": "mt", ...}``); both must be in the inputs. The two models tokenise the text
with one vocabulary, so their similarity rows are the same occurrences (checked).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, save_arrays, strings
from evolution.config import SimilarityConfig

logger = logging.getLogger(__name__)

__all__ = ["ToFinal", "to_final_task", "settings_read"]


def settings_read(similarity: SimilarityConfig | None) -> dict[str, Any]:
    """The settings of a ``metrics.similarity`` section that the distance reads: its ``sentences``
    (which occurrences), ``epsilon`` and ``min_ratio`` (each :class:`~evolution.metrics.similarity.View`);
    ``None``: the defaults. Both the units' keys and the trajectory stage's snapshot key hold them."""
    scfg = similarity if similarity is not None else SimilarityConfig()
    return {"sentences": scfg.sentences, "epsilon": scfg.epsilon, "min_ratio": scfg.min_ratio}


def to_final_task(
    *,
    store: str,
    model: str,
    final: str,
    n_layers: int,
    arrays: str,
    methods: list[str],
    epsilon: float,
    min_ratio: float,
) -> dict[str, Any]:
    """``{method: [distance per layer]}`` between ``model`` and ``final`` at each layer 0..n_layers-1,
    on the occurrences ``arrays`` holds (``rows/model``, ``rows/final``: (n,) store rows of the same
    occurrences in the same order)."""
    from evolution.metrics.similarity import View, pair_similarity
    from evolution.store import read_rows

    a = load_arrays(arrays)
    out: dict[str, list[float]] = {m: [] for m in methods}
    for layer in range(n_layers):
        va = View(
            read_rows(store, model, layer, a["rows/model"]),
            epsilon=epsilon,
            min_ratio=min_ratio,
            name=f"{model} layer {layer}",
        )
        vb = View(
            read_rows(store, final, layer, a["rows/final"]),
            epsilon=epsilon,
            min_ratio=min_ratio,
            name=f"{final} layer {layer}",
        )
        p_ab, p_ba, cka = pair_similarity(va, vb)
        if "pwcca" in out:
            out["pwcca"].append(1.0 - (p_ab + p_ba) / 2)
        if "cka" in out:
            out["cka"].append(1.0 - cka)
    return out


class ToFinal(Analysis):
    """One unit per checkpoint model of ``Inputs.attrs["finals"]``; not a ``metrics`` section of its
    own: the trajectory (:mod:`evolution.trajectory`) runs it with ``metrics.trajectory.methods``."""

    name = "to_final"
    # 2: the key holds every setting the distance reads (metrics.similarity.sentences) and the rows'
    # content hash; version 1 reused a distance computed on other sentences in the same workdir
    version = 2

    def __init__(self, methods: list[str]):
        self.methods = list(methods)

    def enabled(self, config) -> bool:
        return True

    def units(self, inputs: Inputs) -> list[Unit]:
        read = settings_read(inputs.config.similarity)
        epsilon, min_ratio = read["epsilon"], read["min_ratio"]
        units = []
        for model, final in inputs.attrs.get("finals", {}).items():
            m, f = inputs.models[model], inputs.models[final]
            for x in (m, f):
                x.require_every_layer("the distance to the final model")
            rows_m, rows_f = m.plan.similarity_rows, f.plan.similarity_rows
            same = len(rows_m) == len(rows_f) and all(
                np.array_equal(m.coords[v][rows_m], f.coords[v][rows_f]) for v in ("sentence", "position", "token_id")
            )
            if not same:
                logger.warning(
                    "metrics: %s and its final model %s tokenise the similarity sentences differently; "
                    "no distance to the final model",
                    model,
                    final,
                )
                continue
            arrays = save_arrays(inputs.arrays_dir, "to-final", {"rows/model": rows_m, "rows/final": rows_f})
            units.append(
                Unit(
                    model,
                    to_final_task,
                    dict(
                        store=inputs.store,
                        model=model,
                        final=final,
                        n_layers=min(m.n_layers, f.n_layers),
                        arrays=arrays,
                        methods=self.methods,
                        epsilon=epsilon,
                        min_ratio=min_ratio,
                    ),
                    key={
                        "models": [m.key, f.key],
                        "methods": self.methods,
                        **read,
                        "rows": arrays.rsplit("-", 1)[-1],  # the rows' content hash (save_arrays names it)
                    },
                )
            )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        if not results:
            return {}
        models = [m for m in inputs.attrs["finals"] if m in results]
        L = max(len(results[m][self.methods[0]]) for m in models)
        dist = np.full((len(self.methods), len(models), L), np.nan)
        for i, m in enumerate(models):
            for q, meth in enumerate(self.methods):
                d = results[m][meth]
                dist[q, i, : len(d)] = d
        finals = [inputs.attrs["finals"][m] for m in models]
        return {
            "to_final": xr.Dataset(
                {
                    "distance": (
                        ("metric", "model", "layer"),
                        dist,
                        {"long_name": "distance to the same layer of the final model"},
                    )
                },
                coords={
                    "metric": strings(self.methods),
                    "model": strings(models),
                    "layer": np.arange(L),
                    "final": ("model", strings(finals)),
                },
            )
        }
