"""t-SNE layouts of selected occurrences (Voita et al. 2019, figures 6-8; METHODS.md 6).

One unit per (model, layer) lays out every selection of ``metrics.tsne``
(:func:`evolution.metrics.tsne.tsne_layout`); one group per selection:

==========================  =========================  ======================
``tsne_<name>/xy``          (model, layer, point,      t-SNE layout
                            component)
``tsne_<name>/token``,      (model, point)             what each point is
``tsne_<name>/position``
==========================  =========================  ======================
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_arrays, save_arrays, strings
from evolution.analyses.plotting import open_group, plt
from evolution.config import TSNEConfig, resolved_dict

__all__ = ["TSNE", "layer_task", "tsne_grid"]


def layer_task(*, store: str, model: str, layer: int, arrays: str, tsne: TSNEConfig, seed: int) -> dict[str, list]:
    """Layouts (points, 2) of one (model, layer), per selection; ``arrays`` holds ``<selection>`` rows."""
    from evolution.metrics.tsne import tsne_layout
    from evolution.store import read_rows

    a = load_arrays(arrays)
    return {name: tsne_layout(read_rows(store, model, layer, rows), perplexity=tsne.perplexity, seed=seed).tolist()
            for name, rows in a.items()}


class TSNE(Analysis):
    name = "tsne"
    version = 1
    section = "tsne"

    def units(self, inputs: Inputs) -> list[Unit]:
        cfg = inputs.config
        units = []
        for m in inputs.models.values():
            if not m.plan.tsne:
                continue
            arrays = save_arrays(inputs.arrays_dir, f"tsne-{m.name}",
                                 {name: sel["rows"] for name, sel in m.plan.tsne.items()})
            key = {"model": m.key, "tsne": resolved_dict(cfg.tsne), "seed": inputs.seed}
            units += [Unit(f"{m.name}-{layer}", layer_task,
                           dict(store=inputs.store, model=m.name, layer=layer, arrays=arrays, tsne=cfg.tsne,
                                seed=inputs.seed),
                           key={**key, "layer": layer})
                      for layer in range(m.n_layers)]
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        models, L = inputs.names, inputs.max_layers
        out = {}
        for name in sorted({s for r in results.values() for s in r}):
            points = max(len(r[name]) for r in results.values() if name in r)
            xy = np.full((len(models), L, points, 2), np.nan, dtype=np.float32)
            tok = np.full((len(models), points), "", dtype=object)  # object: variable-length strings in zarr v3
            pos = np.full((len(models), points), -1, dtype=np.int64)
            for i, m in enumerate(models):
                for layer in range(L):
                    r = results.get(f"{m}-{layer}", {})
                    if name in r:
                        y = np.asarray(r[name], dtype=np.float32)
                        xy[i, layer, :len(y)] = y
                sel = inputs.models[m].plan.tsne.get(name)
                if sel is not None:
                    tok[i, :len(sel["token"])] = [str(t) for t in sel["token"]]
                    pos[i, :len(sel["position"])] = sel["position"]
            out[f"tsne_{name}"] = xr.Dataset(
                {"xy": (("model", "layer", "point", "component"), xy)},
                coords={"model": strings(models), "layer": np.arange(L), "point": np.arange(points),
                        "component": strings(["x", "y"])}
            ).assign(token=(("model", "point"), tok), position=(("model", "point"), pos))
        return out

    def figures_for(self, path) -> dict:
        from evolution.metrics.results import metrics_groups

        return {g: (lambda p, n=g[len("tsne_"):]: tsne_grid(p, n),
                    f"t-SNE (openTSNE, PCA init, fixed seed) of the '{g[len('tsne_'):]}' selection per model and layer.")
                for g in metrics_groups(path) if g.startswith("tsne_")}


def tsne_grid(path, name: str):
    """models x layers small multiples of one t-SNE selection."""
    ds = open_group(path, f"tsne_{name}")
    if ds is None:
        return None
    pyplot = plt()
    models, layers = list(ds.model.values), list(ds.layer.values)
    fig, axes = pyplot.subplots(len(models), len(layers), figsize=(1.9 * len(layers), 2.0 * len(models)),
                                squeeze=False, layout="constrained")
    tokens = ds.token.values
    by_position = bool((ds.position.values >= 0).any()) and len({t for t in tokens.ravel() if t}) == 1
    vocab = sorted({t for t in tokens.ravel() if t})
    cmap = pyplot.get_cmap("tab10")
    for i, m in enumerate(models):
        keep = ds.token.sel(model=m).values != ""
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            xy = ds.xy.sel(model=m, layer=layer).values[keep]
            if by_position:
                sc = ax.scatter(xy[:, 0], xy[:, 1], c=ds.position.sel(model=m).values[keep], s=3, cmap="viridis")
            else:
                for c, t in enumerate(vocab):
                    sel = ds.token.sel(model=m).values[keep] == t
                    ax.scatter(xy[sel, 0], xy[sel, 1], s=3, color=cmap(c % 10), label=t)
            ax.set_xticks([]), ax.set_yticks([])
            if i == 0:
                ax.set_title(f"layer {layer}", fontsize=8)
            if j == 0:
                ax.set_ylabel(str(m), fontsize=8)
    if by_position:
        fig.colorbar(sc, ax=axes.ravel().tolist(), fraction=0.02, label="position")
    else:
        axes[0][-1].legend(fontsize=6, markerscale=3, loc="upper right")
    fig.suptitle(f"t-SNE of '{' / '.join(vocab)}' occurrences "
                 f"({'coloured by position' if by_position else 'coloured by token'})", fontsize=9)
    return fig
