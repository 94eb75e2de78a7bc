"""MI between a layer's k-means clusters and the input token / the output label
(Voita et al. 2019, section 3, figures 1-2; definitions and intervals: ``docs/metrics.md``).

Two kinds of unit, one group:

* per (model, layer): MI with the input token, and for an LM with the next
  token, on the stored states of the frequent types' occurrences;
* per masked LM of this project: MI with its output label (the original
  token) at corrupted positions, which needs new forward passes
  (:mod:`evolution.metrics.masked`); its result joins the layer results as
  target ``output``; on the same positions and clusters' states, MI with the
  token fed there (``<mask>``, a random or the original token) as target
  ``masked_input`` (Voita et al. 2019, finding 5: the first rises while the
  second falls).

=====================================  ===============================  ==========================================
``mi/mi``                              (model, layer, target, restart)  I(X; cluster), nats
``mi/kmeans_seed``                     (model, layer, target, restart)  the k-means seed of each restart
``mi/mi_shuffled``                     (model, layer, target)           shuffled-label control
``mi/mi_mean``, ``mi_sd``              (model, layer, target)           over restarts (sd: ddof = 1)
``mi/mi_corrected``                    (model, layer, target)           mi_mean - mi_shuffled
``mi/entropy``                         (model, target)                  H(X), the upper bound
``mi/mi_fraction``                     (model, layer, target)           mi_mean / entropy (the same model's H)
``mi/mi_corrected_fraction``           (model, layer, target)           mi_corrected / entropy
``mi/<variable>_interval``             (model, layer, target, bound)    95% interval over sentences of
                                                                        ``mi_mean``, ``mi_corrected``,
                                                                        ``mi_fraction``,
                                                                        ``mi_corrected_fraction``
                                                                        (``metrics.mi.bootstrap`` > 0)
``mi/k``, ``mi/n``                     (model, layer, target)           clusters used (after capping), occurrences
``mi_types/mi_mean``, ``mi_sd``,       (model, layer, target, types)    the same clusters on the occurrences of
``mi_shuffled``, ``mi_corrected``,                                      the ``types`` most frequent labels
``mi_fraction``,                                                        (``metrics.mi.types``; no group without)
``mi_corrected_fraction``
``mi_types/entropy``, ``n``,           (model, target, types)           H(X), occurrences and types of each subset
``n_types``
=====================================  ===============================  ==========================================

The intervals are bootstrap intervals over whole sentences with each restart's
clusters held fixed (:func:`evolution.metrics.mi.bootstrap_mi`), placed around
the estimate (:func:`evolution.metrics.mi.centred_interval`); they measure the
sampling variability of the text, ``mi_sd`` that of k-means. The attribute
``kmeans`` records the k-means that ran per model and target (``flat`` or
``two_level``; ``metrics.mi.algorithm: auto`` decides by k) and what ran it (``faiss``, or
``sklearn`` where faiss is not installed: :mod:`evolution.metrics.search`), ``bootstrap`` the
replicates behind the intervals.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, required, save_arrays, strings
from evolution.analyses.mi_figures import FIGURES, mi_by_layer, mi_by_types
from evolution.config import MIConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["MI", "layer_task", "mlm_output_task", "mi_by_layer", "mi_by_types", "BIAS_SHARE", "BIAS_FLOOR"]

#: warn when the shuffled-label control reaches this share of the MI ...
BIAS_SHARE = 0.5
#: ... and this share of H(X): a smaller control is a small bias whatever the MI, and an MI near
#: it is then the measurement (the MLM's masked positions at low layers, which hold little of
#: the token they hide), read as MI minus the control (``mi_corrected``)
BIAS_FLOOR = 0.1


def _mi_options(mi: MIConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`~evolution.metrics.mi.layer_mi` that ``metrics.mi`` sets."""
    return dict(
        k=mi.k,
        restarts=mi.restarts,
        niter=mi.niter,
        algorithm=mi.algorithm,
        bootstrap=mi.bootstrap,
        types=list(mi.types),
    )


def layer_task(*, store: str, model: str, layer: int, arrays: str, mi: MIConfig, seed: int) -> dict[str, Any]:
    """MI of one (model, layer) per target; ``arrays`` holds ``<target>/rows``,
    ``<target>/labels`` and ``<target>/sentence`` (:func:`~evolution.analyses.base.save_arrays`)."""
    from evolution.metrics.mi import layer_mi
    from evolution.store import read_rows

    a = load_arrays(arrays)
    targets = sorted({k.split("/")[0] for k in a})
    return {
        target: layer_mi(
            read_rows(store, model, layer, a[f"{target}/rows"]),
            a[f"{target}/labels"],
            seed=seed,
            sentence=a.get(f"{target}/sentence"),
            **_mi_options(mi),
        ).as_dict()
        for target in targets
    }


def mlm_output_task(
    *, spec: dict, content_ids: dict[int, list[int]], types: list[int], mi: MIConfig, seed: int, torch_threads: int = 1
) -> dict[str, Any]:
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
    states, labels, fed, sentence = masked_states(
        adapter,
        {int(k): v for k, v in content_ids.items()},
        seed=seed,
        corruptions=mi.mlm_corruptions,
        return_inputs=True,
        return_sentences=True,
    )
    keep = np.isin(labels, np.asarray(types))
    out: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    for layer in range(states.shape[0]):
        for target, acc in ((labels, out), (fed, inputs)):
            acc.append(
                layer_mi(
                    states[layer][keep], target[keep], seed=seed, sentence=sentence[keep], **_mi_options(mi)
                ).as_dict()
            )
    return {"layers": out, "input_layers": inputs}


class MI(Analysis):
    name = "mi"
    version = 3  # 2: intervals over sentences, per-restart seeds, nested type subsets; 3: k-means++ seeds
    layout = 3  # 2: mi_mean, mi_sd, mi_corrected; 3: fractions of H(X), intervals, group mi_types
    section = "mi"

    def units(self, inputs: Inputs) -> list[Unit]:
        from evolution.metrics.plan import content_ids_by_sentence

        cfg, mcfg = inputs.config, required(inputs.config.mi, "mi")
        # mlm_corruptions only concerns the MLM-output unit: changing it keeps the layer results
        layer_cfg = {
            "mi": {k: v for k, v in resolved_dict(mcfg).items() if k != "mlm_corruptions"},
            "tokens": resolved_dict(cfg.tokens),
        }
        units = []
        _warn_k_cap(mcfg.k, inputs)
        for m in inputs.models.values():
            if not m.plan.mi:
                continue
            arrays = save_arrays(
                inputs.arrays_dir,
                f"mi-{m.name}",
                {
                    f"{t}/{part}": v
                    for t, (rows, labels) in m.plan.mi.items()
                    for part, v in (
                        ("rows", rows),
                        ("labels", labels),
                        ("sentence", np.asarray(m.coords["sentence"])[rows]),
                    )
                },
            )
            for layer in m.layers:  # those stored (extract.layers)
                units.append(
                    Unit(
                        f"{m.name}-{layer}",
                        layer_task,
                        dict(store=inputs.store, model=m.name, layer=layer, arrays=arrays, mi=mcfg, seed=inputs.seed),
                        key={"model": m.key, **layer_cfg, "seed": inputs.seed, "layer": layer},
                    )
                )
            if m.objective == "mlm" and m.kind not in ("huggingface", "activations") and "input" in m.plan.mi:
                sentence, token_id = m.coords["sentence"], m.coords["token_id"]
                content = content_ids_by_sentence(token_id, sentence, wanted=np.unique(sentence[m.primary]))
                types = np.unique(m.plan.mi["input"][1]).tolist()
                units.append(
                    Unit(
                        f"{m.name}-mlm-output",
                        mlm_output_task,
                        dict(
                            spec=m.spec,
                            content_ids=content,
                            types=types,
                            mi=mcfg,
                            seed=inputs.seed,
                            torch_threads=inputs.torch_threads,
                        ),
                        key={
                            "model": m.key,
                            "mi": resolved_dict(mcfg),
                            "tokens": resolved_dict(cfg.tokens),
                            "seed": inputs.seed,
                            "targets": ["output", "masked_input"],
                        },
                    )
                )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        per_layer: dict[tuple[str, int], dict[str, dict]] = {}
        for m in inputs.models.values():
            for layer in range(m.n_layers):
                if f"{m.name}-{layer}" in results:
                    per_layer[(m.name, layer)] = dict(results[f"{m.name}-{layer}"])
            masked = results.get(f"{m.name}-mlm-output", {})
            for target, key in (("output", "layers"), ("masked_input", "input_layers")):
                for layer, v in enumerate(masked.get(key, [])):
                    if (m.name, layer) in per_layer:  # the MLM's corrupted positions join its layer results
                        per_layer[(m.name, layer)][target] = v
        if not any(per_layer.values()):
            return {}
        _warn_saturation(per_layer)
        _warn_bias(per_layer)
        models, L = inputs.names, inputs.max_layers
        targets = sorted({t for r in per_layer.values() for t in r})
        restarts = max(len(v["mi"]) for r in per_layer.values() for v in r.values())
        shape = (len(models), L, len(targets))
        mi, seeds = np.full(shape + (restarts,), np.nan), np.full(shape + (restarts,), np.nan)
        shuf, k, n = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
        ent = np.full((len(models), len(targets)), np.nan)
        names = ("mi_mean", "mi_corrected", "mi_fraction", "mi_corrected_fraction")
        interval = {name: np.full(shape + (2,), np.nan) for name in names}
        kmeans: dict[str, dict[str, str]] = {}
        replicates = 0
        for (model, layer), r in per_layer.items():
            for t, v in r.items():
                i, j = models.index(model), targets.index(t)
                mi[i, layer, j, : len(v["mi"])] = v["mi"]
                seeds[i, layer, j, : len(v.get("seeds", []))] = v.get("seeds", [])
                shuf[i, layer, j], k[i, layer, j], n[i, layer, j] = v["shuffled"], v["k"], v["n"]
                ent[i, j] = v["entropy"]
                kmeans.setdefault(model, {})[t] = f"{v.get('algorithm', '')} ({v.get('backend', 'faiss')})"
                for name, bounds in (v.get("interval") or {}).items():
                    interval[name][i, layer, j] = bounds
                replicates = max(replicates, v.get("replicates", 0))
        dims = ("model", "layer", "target")
        ds = xr.Dataset(
            {
                "mi": (dims + ("restart",), mi, {"units": "nats"}),
                "kmeans_seed": (dims + ("restart",), seeds, {"long_name": "k-means seed of each restart"}),
                "mi_shuffled": (dims, shuf, {"units": "nats"}),
                "entropy": (("model", "target"), ent, {"units": "nats", "long_name": "H(X), upper bound of MI"}),
                "k": (dims, k),
                "n": (dims, n),
            },
            coords={
                "model": strings(models),
                "layer": np.arange(L),
                "target": strings(targets),
                "restart": np.arange(restarts),
            },
            attrs={"kmeans": kmeans, "bootstrap": replicates},
        )
        _derived(ds)
        if replicates:
            ds = ds.assign_coords(bound=strings(["low", "high"]))
            for name in names:
                ds[f"{name}_interval"] = (
                    dims + ("bound",),
                    interval[name],
                    {
                        "long_name": f"95% interval of {name} over sentences ({replicates} bootstrap replicates, each "
                        "restart's clusters fixed, placed around the estimate)"
                    },
                )
        out = {"mi": ds}
        types = _types_dataset(per_layer, models=models, L=L, targets=targets)
        if types is not None:
            out["mi_types"] = types
        return out


def _derived(ds: xr.Dataset) -> None:
    """Add ``mi_mean``, ``mi_sd``, ``mi_corrected`` and the fractions of H(X) to ``ds``
    (``mi`` with a ``restart`` dimension, ``mi_shuffled``, ``entropy``; each model's own H)."""
    with warnings.catch_warnings():  # one restart: no spread
        warnings.simplefilter("ignore", RuntimeWarning)
        ds["mi_mean"] = ds.mi.mean("restart").assign_attrs(units="nats", long_name="MI, mean over restarts")
        ds["mi_sd"] = ds.mi.std("restart", ddof=1).assign_attrs(
            units="nats", long_name="standard deviation over k-means restarts (ddof = 1; NaN with one restart)"
        )
    ds["mi_corrected"] = (ds.mi_mean - ds.mi_shuffled).assign_attrs(
        units="nats", long_name="mean MI minus the shuffled-label control (the estimator's bias at this n and k)"
    )
    ds["mi_fraction"] = (ds.mi_mean / ds.entropy).assign_attrs(long_name="mi_mean / H(X) of the same model and target")
    ds["mi_corrected_fraction"] = (ds.mi_corrected / ds.entropy).assign_attrs(
        long_name="mi_corrected / H(X) of the same model and target"
    )


def _types_dataset(
    per_layer: dict[tuple[str, int], dict], *, models: list[str], L: int, targets: list[str]
) -> xr.Dataset | None:
    """Group ``mi_types`` from the layer results' ``by_types`` (None when no result has them)."""
    found = [v["by_types"] for r in per_layer.values() for v in r.values() if v.get("by_types")]
    if not found:
        return None
    types = sorted({t for b in found for t in b["types"]})
    restarts = max(len(m) for b in found for m in b["mi"])
    mi = np.full((len(models), L, len(targets), len(types), restarts), np.nan)
    shuf = np.full(mi.shape[:-1], np.nan)
    ent, n, n_types = (np.full((len(models), len(targets), len(types)), np.nan) for _ in range(3))
    for (m, layer), r in per_layer.items():
        for t, v in r.items():
            b = v.get("by_types")
            if not b:
                continue
            i, j = models.index(m), targets.index(t)
            for q, size in enumerate(b["types"]):
                c = types.index(size)
                mi[i, layer, j, c, : len(b["mi"][q])] = b["mi"][q]
                shuf[i, layer, j, c] = b["shuffled"][q]
                ent[i, j, c], n[i, j, c], n_types[i, j, c] = b["entropy"][q], b["n"][q], b["n_types"][q]
    dims = ("model", "layer", "target", "types")
    ds = xr.Dataset(
        {
            "mi": (dims + ("restart",), mi, {"units": "nats"}),
            "mi_shuffled": (dims, shuf, {"units": "nats"}),
            "entropy": (("model", "target", "types"), ent, {"units": "nats", "long_name": "H(X) of the subset"}),
            "n": (("model", "target", "types"), n, {"long_name": "occurrences of the subset"}),
            "n_types": (("model", "target", "types"), n_types, {"long_name": "types in the subset"}),
        },
        coords={
            "model": strings(models),
            "layer": np.arange(L),
            "target": strings(targets),
            "types": np.asarray(types, dtype=np.int64),
            "restart": np.arange(restarts),
        },
        attrs={
            "long_name": "MI of the full analysis set's clusters on the occurrences of its `types` most "
            "frequent labels (metrics.mi.types)"
        },
    )
    _derived(ds)
    return ds


def _flag(per_layer: dict[tuple[str, int], dict], test) -> dict[tuple[str, str], list]:
    """(model, target) -> [(layer, MI result), ...] of the layers whose MI result passes ``test``."""
    flagged: dict[tuple[str, str], list] = {}
    for (m, layer), r in sorted(per_layer.items()):
        for t, v in r.items():
            if test(v):
                flagged.setdefault((m, t), []).append((layer, v))
    return flagged


def _warn_k_cap(k: int, inputs: Inputs) -> None:
    """One WARNING when ``k`` exceeds a tenth of some model's occurrences of a target: k-means then
    runs with k capped to n // 10 (at least 10 occurrences per cluster;
    :func:`evolution.metrics.mi.layer_mi`), not with the k asked for."""
    capped = {
        f"{m.name} ({t})": len(rows)
        for m in inputs.models.values()
        for t, (rows, _) in (m.plan.mi or {}).items()
        if k > max(2, len(rows) // 10)
    }
    if capped:
        logger.warning(
            "metrics: MI's k = %d is capped to a tenth of the occurrences (at least 10 per cluster) for %s; "
            "pass more text or a smaller metrics.mi.k to get the k asked for",
            k,
            ", ".join(f"{name}: k = {max(2, n // 10)} for {n}" for name, n in capped.items()),
        )


def _warn_saturation(per_layer: dict[tuple[str, int], dict]) -> None:
    """One warning per (model, target) whose MI is within 2% of H(X) at some layers."""
    for (m, t), hits in _flag(per_layer, lambda v: v["saturated"]).items():
        v = hits[0][1]
        logger.warning(
            "metrics: MI(%s) of %s is within 2%% of H(X) = %.3f nats at layer(s) %s: almost every "
            "cluster holds one token. Either those layers keep token identity intact, or k = %d is "
            "too large for %d occurrences (%.0f per cluster) and the curve cannot show change. "
            "Check with a smaller metrics.mi.k or more text.",
            t,
            m,
            v["entropy"],
            ",".join(str(layer) for layer, _ in hits),
            v["k"],
            v["n"],
            v["n"] / v["k"],
        )


def _warn_bias(per_layer: dict[tuple[str, int], dict]) -> None:
    """One warning per (model, target) whose shuffled-label control is >= :data:`BIAS_SHARE`
    of the MI and >= :data:`BIAS_FLOOR` of H(X) at some layers: with few occurrences per cluster
    the plug-in MI is biased upward by about (k - 1)(|X| - 1) / 2n nats, and the curve then
    mostly shows that bias."""

    def biased(v: dict) -> bool:
        return v["shuffled"] >= max(BIAS_SHARE * float(np.mean(v["mi"])), BIAS_FLOOR * v["entropy"])

    for (m, t), hits in _flag(per_layer, biased).items():
        v = hits[-1][1]
        logger.warning(
            "metrics: MI(%s) of %s: the shuffled-label control is %.2f of %.2f nats at layer(s) %s "
            "(k = %d for %d occurrences, %.0f per cluster): the estimate is mostly the estimator's "
            "bias. Read MI minus the control (mi_shuffled), or use a smaller metrics.mi.k or more text.",
            t,
            m,
            v["shuffled"],
            float(np.mean(v["mi"])),
            ",".join(str(layer) for layer, _ in hits),
            v["k"],
            v["n"],
            v["n"] / v["k"],
        )


MI.figures = FIGURES
