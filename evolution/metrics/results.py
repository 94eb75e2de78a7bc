"""Assemble task results into ``metrics.zarr`` (xarray-readable, zarr v3).

========================  =============================================  ================================
group / variable          dimensions                                     meaning
========================  =============================================  ================================
``mi/mi``                 (model, layer, target, restart)                I(X; cluster), nats
``mi/mi_shuffled``        (model, layer, target)                         shuffled-label control
``mi/entropy``            (model, target)                                H(X), the upper bound
``mi/k``, ``mi/n``        (model, layer, target)                         clusters used, occurrences
``neighbors/value``       (model, layer, measure)                        same_token, position_distance,
                                                                         same_left, same_right; with
                                                                         annotated text also same_pos,
                                                                         same_deprel (+ ``_chance``)
``similarity/distance``   (metric, model_a, layer_a, model_b, layer_b)   1 - PWCCA (weights from a) or
                                                                         1 - CKA
``change/distance``       (metric, model, layer_pair, freq_bin)          layer n vs n + 1, per
                                                                         frequency-rank bin
``change_pos/distance``   (metric, model, layer_pair, pos)               the same per UPOS tag of the
                                                                         annotated text (``count``:
                                                                         (model, pos) occurrences)
``influence/distance``    (metric, model, layer, freq_bin)               token influence: layer-n states
                                                                         of the other tokens with vs
                                                                         without one key masked at n
``influence/rows``,       (model, layer, freq_bin)                       rows pooled, occurrences masked
``influence/samples``
``tsne_<name>/xy``        (model, layer, point, component)               t-SNE layout
``tsne_<name>/token``,    (model, point)                                 what each point is
``.../position``
========================  =============================================  ================================

Models with fewer layers are padded with NaN along ``layer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from evolution.atomic import replace_dir

__all__ = ["build_datasets", "change_pos_dataset", "influence_dataset", "write_metrics", "open_metrics", "NEIGHBOR_MEASURES"]

NEIGHBOR_MEASURES = ("same_token", "position_distance", "same_left", "same_right",
                     "same_pos", "same_pos_chance", "same_deprel", "same_deprel_chance")


def _s(values) -> np.ndarray:
    """Strings as an object array: xarray stores it as zarr v3's variable-length string type
    (a fixed-width NumPy ``U`` array has no stable zarr v3 encoding)."""
    return np.array(list(values), dtype=object)


def build_datasets(*, models: list[str], n_layers: dict[str, int], layer_results: dict[tuple[str, int], dict],
                   similarity: dict[str, Any] | None, attrs: dict[str, Any]) -> dict[str, xr.Dataset]:
    """Datasets by group name from :func:`~evolution.metrics.tasks.layer_task` and
    :func:`~evolution.metrics.tasks.similarity_task` results."""
    L = max(n_layers.values())
    layer = np.arange(L)
    out: dict[str, xr.Dataset] = {}

    if any(r.get("mi") for r in layer_results.values()):
        targets = sorted({t for r in layer_results.values() for t in r.get("mi", {})})
        restarts = max(len(v["mi"]) for r in layer_results.values() for v in r["mi"].values())
        shape = (len(models), L, len(targets))
        mi = np.full(shape + (restarts,), np.nan)
        shuf, k, n = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
        ent = np.full((len(models), len(targets)), np.nan)
        for (m, l), r in layer_results.items():
            for t, v in r.get("mi", {}).items():
                i, j = models.index(m), targets.index(t)
                mi[i, l, j, :len(v["mi"])] = v["mi"]
                shuf[i, l, j], k[i, l, j], n[i, l, j] = v["shuffled"], v["k"], v["n"]
                ent[i, j] = v["entropy"]
        out["mi"] = xr.Dataset(
            {"mi": (("model", "layer", "target", "restart"), mi, {"units": "nats"}),
             "mi_shuffled": (("model", "layer", "target"), shuf, {"units": "nats"}),
             "entropy": (("model", "target"), ent, {"units": "nats", "long_name": "H(X), upper bound of MI"}),
             "k": (("model", "layer", "target"), k), "n": (("model", "layer", "target"), n)},
            coords={"model": _s(models), "layer": layer, "target": _s(targets), "restart": np.arange(restarts)})

    if any("neighbors" in r for r in layer_results.values()):
        measures = [n for n in NEIGHBOR_MEASURES if any(n in r.get("neighbors", {}) for r in layer_results.values())]
        val = np.full((len(models), L, len(measures)), np.nan)
        for (m, l), r in layer_results.items():
            for j, name in enumerate(measures):
                val[models.index(m), l, j] = r.get("neighbors", {}).get(name, np.nan)
        out["neighbors"] = xr.Dataset({"value": (("model", "layer", "measure"), val)},
                                      coords={"model": _s(models), "layer": layer, "measure": _s(measures)})

    names = sorted({s for r in layer_results.values() for s in r.get("tsne", {})})
    for name in names:
        points = max(len(r["tsne"][name]) for r in layer_results.values() if name in r.get("tsne", {}))
        xy = np.full((len(models), L, points, 2), np.nan, dtype=np.float32)
        for (m, l), r in layer_results.items():
            if name in r.get("tsne", {}):
                y = np.asarray(r["tsne"][name], dtype=np.float32)
                xy[models.index(m), l, :len(y)] = y
        out[f"tsne_{name}"] = xr.Dataset({"xy": (("model", "layer", "point", "component"), xy)},
                                         coords={"model": _s(models), "layer": layer, "point": np.arange(points),
                                                 "component": _s(["x", "y"])})

    if similarity is not None:
        methods = list(similarity["similarity"])
        views = [tuple(v) for v in similarity["views"]]
        dist = np.full((len(methods), len(models), L, len(models), L), np.nan)
        for a_i, (ma, la) in enumerate(views):
            for b_i, (mb, lb) in enumerate(views):
                for q, meth in enumerate(methods):
                    dist[q, models.index(ma), la, models.index(mb), lb] = 1.0 - similarity["similarity"][meth][a_i][b_i]
        out["similarity"] = xr.Dataset(
            {"distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), dist)},
            coords={"metric": _s(methods), "model_a": _s(models), "layer_a": layer, "model_b": _s(models),
                    "layer_b": layer},
            attrs={"n_occurrences": similarity["n"], "notes": similarity["notes"]})
        bins = [f"{lo}-{hi}" for lo, hi in similarity["bins"]]
        ch = np.full((len(methods), len(models), L - 1, len(bins)), np.nan)
        for q, meth in enumerate(methods):
            for m, rows in similarity["change"][meth].items():
                arr = np.asarray(rows, dtype=float)
                ch[q, models.index(m), :len(arr)] = arr
        out["change"] = xr.Dataset(
            {"distance": (("metric", "model", "layer_pair", "freq_bin"), ch,
                          {"long_name": "distance between layer n and n + 1 on occurrences in a frequency-rank bin"})},
            coords={"metric": _s(methods), "model": _s(models), "layer_pair": _s(f"{i}-{i + 1}" for i in range(L - 1)),
                    "layer_from": ("layer_pair", np.arange(L - 1)), "freq_bin": _s(bins),
                    "rank_lo": ("freq_bin", [lo for lo, _ in similarity["bins"]])})
    for ds in out.values():
        ds.attrs.update(attrs)
    return out


def change_pos_dataset(results: dict[str, dict], *, methods: list[str], attrs: dict[str, Any]) -> xr.Dataset | None:
    """The ``change_pos`` group from :func:`~evolution.metrics.tasks.pos_change_task` results:
    ``distance`` (metric, model, layer_pair, pos) and ``count`` (model, pos)."""
    if not results:
        return None
    models = list(results)
    tags = list(dict.fromkeys(t for r in results.values() for t in r["groups"]))  # first model's order first
    L1 = max(len(r["change"][methods[0]]) for r in results.values())
    dist = np.full((len(methods), len(models), L1, len(tags)), np.nan)
    count = np.zeros((len(models), len(tags)), dtype=np.int64)
    for i, (m, r) in enumerate(results.items()):
        cols = [tags.index(t) for t in r["groups"]]
        for q, meth in enumerate(methods):
            arr = np.asarray(r["change"][meth], dtype=float)
            dist[q, i, :len(arr)][:, cols] = arr
        count[i, cols] = [r["counts"][t] for t in r["groups"]]
    ds = xr.Dataset(
        {"distance": (("metric", "model", "layer_pair", "pos"), dist,
                      {"long_name": "distance between layer n and n + 1 on the annotated occurrences of a POS tag"}),
         "count": (("model", "pos"), count, {"long_name": "annotated occurrences with the tag"})},
        coords={"metric": _s(methods), "model": _s(models), "layer_pair": _s(f"{i}-{i + 1}" for i in range(L1)),
                "layer_from": ("layer_pair", np.arange(L1)), "pos": _s(tags)})
    ds.attrs.update(attrs)
    ds.attrs["notes"] = [n for r in results.values() for n in r.get("notes", [])]
    return ds


def influence_dataset(results: dict[str, dict], *, freq_bins: list[int], methods: list[str],
                      attrs: dict[str, Any]) -> xr.Dataset | None:
    """The ``influence`` group from :func:`~evolution.metrics.tasks.influence_task` results
    (models that cannot mask keys are left out). ``layer`` runs 1..L."""
    results = {m: r for m, r in results.items() if "unsupported" not in r}
    if not results:
        return None
    models = list(results)
    L = max(len(r["rows"]) for r in results.values())
    bins = [f"{lo}-{hi}" for lo, hi in zip(freq_bins[:-1], freq_bins[1:])]
    dist = np.full((len(methods), len(models), L, len(bins)), np.nan)
    rows = np.zeros((len(models), L, len(bins)), dtype=np.int64)
    samples = np.zeros_like(rows)
    for i, m in enumerate(models):
        r = results[m]
        n = len(r["rows"])
        for q, meth in enumerate(methods):
            dist[q, i, :n] = np.asarray(r["distance"][meth], dtype=float)
        rows[i, :n], samples[i, :n] = r["rows"], r["samples"]
    return xr.Dataset(
        {"distance": (("metric", "model", "layer", "freq_bin"), dist,
                      {"long_name": "distance of the other tokens' layer-n states with vs without the key masked"}),
         "rows": (("model", "layer", "freq_bin"), rows), "samples": (("model", "layer", "freq_bin"), samples)},
        coords={"metric": _s(methods), "model": _s(models), "layer": np.arange(1, L + 1), "freq_bin": _s(bins),
                "rank_lo": ("freq_bin", freq_bins[:-1])},
        attrs=dict(attrs, notes=[n for r in results.values() for n in r.get("notes", [])]))


def attach_tsne_labels(datasets: dict[str, xr.Dataset], labels: dict[str, dict[str, dict[str, np.ndarray]]],
                       models: list[str]) -> None:
    """Add ``token`` and ``position`` (model, point) to each ``tsne_<name>`` dataset."""
    for key, ds in datasets.items():
        if not key.startswith("tsne_"):
            continue
        name = key[len("tsne_"):]
        P = ds.sizes["point"]
        tok = np.full((len(models), P), "", dtype=object)  # object: variable-length strings in zarr v3
        pos = np.full((len(models), P), -1, dtype=np.int64)
        for i, m in enumerate(models):
            sel = labels.get(m, {}).get(name)
            if sel is not None:
                tok[i, :len(sel["token"])] = [str(t) for t in sel["token"]]
                pos[i, :len(sel["position"])] = sel["position"]
        datasets[key] = ds.assign(token=(("model", "point"), tok), position=(("model", "point"), pos))


def write_metrics(path: Path, datasets: dict[str, xr.Dataset], *, fingerprint: str) -> None:
    """Write all groups to ``path`` under a temporary name, then move it into place."""
    import json

    import zarr

    with replace_dir(path) as tmp:
        zarr.open_group(tmp, mode="w", zarr_format=3)  # the root exists even when no metric had enough data
        for group, ds in datasets.items():
            ds = ds.copy()
            # attributes as JSON would store them (tuples -> lists, paths -> strings)
            ds.attrs = json.loads(json.dumps(ds.attrs, default=str))
            ds.to_zarr(tmp, group=group, mode="w", zarr_format=3, consolidated=False)
        zarr.open_group(tmp, mode="r+", zarr_format=3).attrs.update({"evolution_fingerprint": fingerprint,
                                                                     "groups": sorted(datasets)})


def metrics_fingerprint(path: Path) -> str | None:
    import zarr

    try:
        return zarr.open_group(path, mode="r", zarr_format=3).attrs.get("evolution_fingerprint")
    except Exception:  # noqa: BLE001 - a missing or unreadable store is simply not done
        return None


def open_metrics(path: str | Path, group: str) -> xr.Dataset:
    """``xr.open_zarr(path, group=group, consolidated=False)`` for a metrics store written by the pipeline."""
    return xr.open_zarr(path, group=group, consolidated=False)
