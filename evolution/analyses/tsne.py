"""t-SNE layouts of selected occurrences (Voita et al. 2019, figures 6-8; docs/metrics.md).

One unit per (model, layer) lays out every selection of ``metrics.tsne``
(:func:`evolution.metrics.tsne.tsne_layout`); one group per selection:

==========================  =========================  ======================
``tsne_<name>/xy``          (model, layer, point,      t-SNE layout
                            component)
``tsne_<name>/token``,      (model, point)             what each point is
``tsne_<name>/position``,
``tsne_<name>/label``                                  (its UD label with
                                                       ``color: upos|deprel``)
``tsne_<name>_masked/xy``   (model, layer, point,      masked LMs, ``masked:
                            component)                 true``: the word masked
==========================  =========================  ======================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, required, save_arrays, strings
from evolution.analyses.plotting import WIDTH, figure, legend_below, open_group, plt
from evolution.config import TSNEConfig, resolved_dict

logger = logging.getLogger(__name__)

__all__ = ["TSNE", "layer_task", "masked_task", "tsne_grid"]


def layer_task(*, store: str, model: str, layer: int, arrays: str, tsne: TSNEConfig, seed: int) -> dict[str, list]:
    """Layouts (points, 2) of one (model, layer), per selection; ``arrays`` holds ``<selection>`` rows."""
    from evolution.metrics.tsne import tsne_layout
    from evolution.store import read_rows

    a = load_arrays(arrays)
    return {
        name: tsne_layout(read_rows(store, model, layer, rows), perplexity=tsne.perplexity, seed=seed).tolist()
        for name, rows in a.items()
    }


def masked_task(
    *,
    spec: dict,
    content_ids: dict[int, list[int]],
    points: list[tuple[int, int]],
    tsne: TSNEConfig,
    seed: int,
    max_batch_tokens: int = 1024,
    torch_threads: int = 1,
) -> dict:
    """Layouts per layer of a masked LM's states at ``points`` [(sentence, position)] when
    each point's word is ``<mask>`` and 15% of the rest of its sentence is corrupted as in
    training (:func:`evolution.metrics.masked.corrupt`, seeded per point): ``{"layers":
    [(points, 2) per layer]}``, or ``{"unsupported": reason}``."""
    import torch

    from evolution.metrics.tsne import tsne_layout
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    if adapter.mask_id is None:
        return {"unsupported": f"{spec['name']}: no <mask> symbol"}
    states = masked_point_states(adapter, content_ids, points, seed=seed, max_batch_tokens=max_batch_tokens)
    return {"layers": [tsne_layout(x, perplexity=tsne.perplexity, seed=seed).tolist() for x in states]}


def masked_point_states(
    adapter,
    content_ids: dict[int, list[int]],
    points: list[tuple[int, int]],
    *,
    seed: int,
    max_batch_tokens: int = 1024,
) -> np.ndarray:
    """(L + 1, points, d): a masked LM's states at each point [(sentence, position)] when
    that position is ``<mask>`` and the rest of the sentence is corrupted as in training
    (15%: 80% ``<mask>``, 10% random, 10% kept; one generator per point)."""
    from evolution.extract import batches
    from evolution.metrics.masked import corrupt

    low, high = adapter.ordinary_ids
    inputs = []
    for s, pos in points:
        new, _ = corrupt(
            content_ids[int(s)],
            rng=np.random.default_rng([seed, int(s), int(pos)]),
            mask_id=adapter.mask_id,
            low=low,
            high=high,
        )
        new[int(pos)] = adapter.mask_id
        inputs.append(adapter.build_input(new))
    states = np.zeros((adapter.num_layers + 1, len(points), adapter.d_model), np.float32)
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        hidden = adapter.forward([inputs[i] for i in batch])[0]
        for b, i in enumerate(batch):
            states[:, i] = hidden[:, b, adapter.content_offset + int(points[i][1])]
    return states


def _rows_hash(rows) -> str:
    """SHA-256 (16 hex digits) of a selection's store rows, in order."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(rows, dtype=np.int64).tobytes()).hexdigest()[:16]


class TSNE(Analysis):
    name = "tsne"
    version = 3  # 2: UD-label colours, the masked MLM's layouts; 3: the UD-label selection planned (was skipped)
    section = "tsne"

    def units(self, inputs: Inputs) -> list[Unit]:
        tsne = required(inputs.config.tsne, "tsne")
        units = []
        for m in inputs.models.values():
            if not m.plan.tsne:
                continue
            arrays = save_arrays(
                inputs.arrays_dir, f"tsne-{m.name}", {name: sel["rows"] for name, sel in m.plan.tsne.items()}
            )
            # the occurrences laid out, not only the settings: the plan draws them after the neighbours'
            # sample from one generator, so neighbours' and token settings change them too
            rows = {name: _rows_hash(sel["rows"]) for name, sel in m.plan.tsne.items()}
            key = {"model": m.key, "tsne": resolved_dict(tsne), "seed": inputs.seed, "rows": rows}
            units += [
                Unit(
                    f"{m.name}-{layer}",
                    layer_task,
                    dict(store=inputs.store, model=m.name, layer=layer, arrays=arrays, tsne=tsne, seed=inputs.seed),
                    key={**key, "layer": layer},
                )
                for layer in m.layers  # those stored (extract.layers)
            ]
            if m.objective == "mlm" and m.kind not in ("huggingface", "activations"):
                from evolution.metrics.plan import content_ids_by_sentence

                for sel_cfg in tsne.selections:
                    sel = m.plan.tsne.get(sel_cfg.name)
                    if not sel_cfg.masked or sel is None:
                        continue
                    points = [(int(s), int(p)) for s, p in zip(sel["sentence"], sel["position"], strict=True)]
                    content = content_ids_by_sentence(
                        m.coords["token_id"], m.coords["sentence"], wanted={s for s, _ in points}
                    )
                    units.append(
                        Unit(
                            f"{m.name}-masked-{sel_cfg.name}",
                            masked_task,
                            dict(
                                spec=m.spec,
                                content_ids=content,
                                points=points,
                                tsne=tsne,
                                seed=inputs.seed,
                                max_batch_tokens=inputs.max_batch_tokens,
                                torch_threads=inputs.torch_threads,
                            ),
                            key={**key, "selection": sel_cfg.name, "masked": True},
                        )
                    )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        models, L = inputs.names, inputs.max_layers
        out = {}
        masked = {k: r for k, r in results.items() if "-masked-" in k}
        results = {k: r for k, r in results.items() if k not in masked}
        for name in sorted({s for r in results.values() for s in r}):
            points = max(len(r[name]) for r in results.values() if name in r)
            xy = np.full((len(models), L, points, 2), np.nan, dtype=np.float32)
            tok = np.full((len(models), points), "", dtype=object)  # object: variable-length strings in zarr v3
            label = np.full((len(models), points), "", dtype=object)
            pos = np.full((len(models), points), -1, dtype=np.int64)
            for i, m in enumerate(models):
                for layer in range(L):
                    r = results.get(f"{m}-{layer}", {})
                    if name in r:
                        y = np.asarray(r[name], dtype=np.float32)
                        xy[i, layer, : len(y)] = y
                sel = inputs.models[m].plan.tsne.get(name)
                if sel is not None:
                    tok[i, : len(sel["token"])] = [str(t) for t in sel["token"]]
                    label[i, : len(sel["label"])] = [str(t) for t in sel["label"]]
                    pos[i, : len(sel["position"])] = sel["position"]
            ds = xr.Dataset(
                {"xy": (("model", "layer", "point", "component"), xy)},
                coords={
                    "model": strings(models),
                    "layer": np.arange(L),
                    "point": np.arange(points),
                    "component": strings(["x", "y"]),
                },
            ).assign(
                token=(("model", "point"), tok), position=(("model", "point"), pos), label=(("model", "point"), label)
            )
            color = {s.name: s.color for s in required(inputs.config.tsne, "tsne").selections}.get(name, "token")
            out[f"tsne_{name}"] = ds.assign_attrs(color=color, masked=False)
            mlm = [m for m in models if f"{m}-masked-{name}" in masked and "layers" in masked[f"{m}-masked-{name}"]]
            for k, r in masked.items():
                if "unsupported" in r and k.endswith(f"-masked-{name}"):
                    logger.info("metrics: t-SNE %s: %s", name, r["unsupported"])
            if mlm:
                mxy = np.full((len(mlm), L, points, 2), np.nan, dtype=np.float32)
                for i, m in enumerate(mlm):
                    for layer, y in enumerate(masked[f"{m}-masked-{name}"]["layers"]):
                        y = np.asarray(y, dtype=np.float32)
                        mxy[i, layer, : len(y)] = y
                out[f"tsne_{name}_masked"] = (
                    ds.sel(model=mlm)
                    .assign(xy=(("model", "layer", "point", "component"), mxy))
                    .assign_attrs(color=color, masked=True)
                )
        return out

    def figures_for(self, path) -> dict:
        from evolution.metrics.results import metrics_groups

        return {
            g: (
                _grid_figure(g[len("tsne_") :]),
                f"t-SNE (openTSNE, PCA init, fixed seed) of the '{g[len('tsne_') :]}' selection per model and layer.",
            )
            for g in metrics_groups(path)
            if g.startswith("tsne_")
        }


def _grid_figure(name: str) -> Callable[[Any], Any]:
    """The figure function (of the metrics store path) of t-SNE selection ``name``'s group."""
    return lambda path: tsne_grid(path, name)


@figure
def tsne_grid(path, name: str):
    """models x layers small multiples of one t-SNE selection, the legend (or the position
    colour bar) outside the panels."""
    import pandas as pd

    ds = open_group(path, f"tsne_{name}")
    if ds is None:
        return None
    pyplot = plt()
    models, layers = list(ds.model.values), list(ds.layer.values)
    side = min(1.5, (WIDTH - 0.5) / len(layers))
    fig, axes = pyplot.subplots(
        len(models),
        len(layers),
        figsize=(side * len(layers) + 0.5, side * len(models) + 0.9),
        squeeze=False,
        layout="constrained",
    )
    tokens = ds.token.values
    by_label = "label" in ds and any(str(t) for t in ds.label.values.ravel())
    by_position = not by_label and bool((ds.position.values >= 0).any()) and len({t for t in tokens.ravel() if t}) == 1
    vocab = sorted({t for t in tokens.ravel() if t})
    colours = ds.label if by_label else ds.token
    classes = sorted({str(t) for t in colours.values.ravel() if str(t)})
    if by_label:  # the 9 most frequent labels, the rest as "other"
        counts = {c: int((colours.values == c).sum()) for c in classes}
        classes = sorted(classes, key=lambda c: -counts[c])[:9]
    cmap = pyplot.get_cmap("tab10")
    frames = []
    for i, m in enumerate(models):
        keep = ds.token.sel(model=m).values != ""
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            xy = ds.xy.sel(model=m, layer=layer).values[keep]
            values = colours.sel(model=m).values[keep]
            frames.append(
                pd.DataFrame(
                    {
                        "model": str(m),
                        "layer": int(layer),
                        "point": (ds.point.values[keep] if "point" in ds.coords else np.flatnonzero(keep)),
                        "token": [str(t) for t in ds.token.sel(model=m).values[keep]],
                        "colour": (ds.position.sel(model=m).values[keep] if by_position else [str(v) for v in values]),
                        "x": xy[:, 0],
                        "y": xy[:, 1],
                    }
                )
            )
            if by_position:
                sc = ax.scatter(xy[:, 0], xy[:, 1], c=ds.position.sel(model=m).values[keep], s=2, cmap="viridis")
            else:
                for c, t in enumerate(classes):
                    ax.scatter(xy[values == t, 0], xy[values == t, 1], s=2, color=cmap(c % 10), label=t)
                rest = ~np.isin(values, classes)
                if rest.any():
                    ax.scatter(xy[rest, 0], xy[rest, 1], s=2, color="lightgrey", label="other")
            ax.set_xticks([]), ax.set_yticks([])
            if i == 0:
                ax.set_title(f"layer {layer}")
            if j == 0:
                ax.set_ylabel(str(m))
    if by_position:
        fig.colorbar(sc, ax=axes.ravel().tolist(), fraction=0.02, label="position")
    else:
        legend_below(fig, markerscale=4)
    how = (
        "coloured by position"
        if by_position
        else f"coloured by {ds.attrs.get('color', 'label')} (gold, UD EWT)"
        if by_label
        else "coloured by token"
    )
    masked = ", the word masked and 15% of the sentence corrupted" if ds.attrs.get("masked") else ""
    fig.suptitle(f"t-SNE of '{' / '.join(vocab)}' occurrences{masked} ({how})")
    frames = [f for f in frames if len(f)]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not (by_position or by_label):
        return fig, data.drop(columns=["colour"], errors="ignore")  # coloured by token
    return fig, data.rename(columns={"colour": "position" if by_position else "label"})
