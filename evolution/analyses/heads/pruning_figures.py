"""Figures of the ``heads_pruning`` group (Voita et al. ACL 2019, figs. 7-10): BLEU against the
retained encoder heads, the roles of the retained encoder heads per lambda, and the heads kept
per attention type and layer when every attention type is gated.

Each function takes the metrics store's path and returns a Figure with its numbers attached
(:func:`evolution.analyses.plotting.figure`), or None where the store lacks what it draws.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from evolution.analyses.heads.importance import ATTENTIONS
from evolution.analyses.plotting import figure, open_group

__all__ = ["ROLES", "head_role_flags", "survivor_roles", "pruning_curve", "pruning_roles", "pruning_layers"]

#: the roles counted among the kept encoder heads (the ``heads`` group's flags); "other": none of the three
ROLES = ("positional", "syntactic", "rare_token", "other")


def head_role_flags(heads: xr.Dataset, model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(positional, syntactic, rare_token)``, each (layer, head) bool, of ``model`` in the ``heads``
    group: its positional flag, a syntactic flag for any relation, and a rare-token share of
    sentences >= the group's ``rare_share`` attribute (0.2 where absent; a NaN share is no role)."""
    h = heads.sel(model=model)
    positional = h.positional.values.astype(bool)
    syntactic = (
        h.syntactic.any("syntactic_relation").values.astype(bool) if "syntactic" in h else np.zeros_like(positional)
    )
    rare = (
        np.nan_to_num(h.rare_token_share.values, nan=-1.0) >= heads.attrs.get("rare_share", 0.2)
        if "rare_token_share" in h
        else np.zeros_like(positional)
    )
    return positional, syntactic, rare


def survivor_roles(path) -> xr.Dataset | None:
    """For each (model, run): how many kept encoder heads are positional, syntactic (any relation),
    rare-token (share of sentences >= ``rare_share`` attribute of the heads group, or 0.2) or none
    of these, from the ``heads`` group's flags of the unpruned model."""
    prune, heads = open_group(path, "heads_pruning"), open_group(path, "heads")
    if prune is None or heads is None:
        return None
    roles = ROLES
    counts = np.zeros((prune.sizes["model"], prune.sizes["run"], len(roles)))
    for i, m in enumerate(prune.model.values):
        if m not in heads.model.values:
            continue
        positional, syntactic, rare = head_role_flags(heads, m)
        for j, run in enumerate(prune.run.values):
            kept = (
                prune.kept.sel(model=m, run=run, attention="encoder_self").values[
                    : positional.shape[0], : positional.shape[1]
                ]
                == 1
            )
            counts[i, j] = [
                np.sum(kept & positional),
                np.sum(kept & syntactic),
                np.sum(kept & rare),
                np.sum(kept & ~(positional | syntactic | rare)),
            ]
    return xr.Dataset(
        {"heads": (("model", "run", "role"), counts)},
        coords={"model": prune.model.values, "run": prune.run.values, "role": np.array(roles, dtype=object)},
    )


@figure
def pruning_curve(path):
    """BLEU against the number of retained encoder heads (Voita et al. ACL 2019, fig. 7): one
    point per lambda of the encoder-only runs; at all heads the model fine-tuned as long without
    gates (a star, the curve's end) and the unpruned model (hollow), or, without that control, the
    unpruned model as the curve's end."""
    import pandas as pd

    from evolution.analyses.plotting import STYLES, legend_right, plt

    ds = open_group(path, "heads_pruning")
    runs = [] if ds is None else [r for r in ds.run.values if str(ds.scope.sel(run=r).values) == "encoder"]
    if not runs:  # no group, or the references alone (metrics.pruning.lambdas: []): no curve to draw
        return None
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(6.4, 3.8), layout="constrained")
    rows = []
    for i, m in enumerate(ds.model.values):
        enc = ds.kept.sel(model=m, attention="encoder_self")
        total = int(np.isfinite(enc.isel(run=0)).sum())
        x = [int(np.nansum(enc.sel(run=r))) for r in runs]
        y = [float(ds.bleu.sel(model=m, run=r)) for r in runs]
        rows += [
            dict(model=str(m), run=str(r), lam=float(ds.lam.sel(run=r)), kept_encoder_heads=xi, bleu=yi)
            for r, xi, yi in zip(runs, x, y, strict=True)
        ]
        full = float(ds.bleu_full.sel(model=m))
        rows.append(dict(model=str(m), run="unpruned", lam=0.0, kept_encoder_heads=total, bleu=full))
        style = STYLES[i % len(STYLES)]
        tuned = float(ds.bleu_tuned.sel(model=m)) if "bleu_tuned" in ds else np.nan
        # the curve ends at all heads with the reference: the same fine-tuning without gates where it
        # was run (a star; the unpruned model, not fine-tuned, as a hollow marker beside it), else the
        # unpruned model
        end = tuned if np.isfinite(tuned) else full
        order = np.argsort(x + [total], kind="stable")
        ax.plot(
            np.asarray(x + [total])[order],
            np.asarray(y + [end])[order],
            label=str(m),
            color=style["color"],
            marker=style["marker"],
        )
        if np.isfinite(tuned):
            rows.append(dict(model=str(m), run="tuned", lam=0.0, kept_encoder_heads=total, bleu=tuned))
            ax.plot(
                [total],
                [tuned],
                linestyle="none",
                marker="*",
                markersize=12,
                color=style["color"],
                label=f"{m}, fine-tuned without gates",
            )
            ax.plot(
                [total],
                [full],
                linestyle="none",
                marker=style["marker"],
                markerfacecolor="none",
                color=style["color"],
                label=f"{m}, unpruned (not fine-tuned)",
            )
        for r, xi, yi in zip(runs, x, y, strict=True):
            ax.annotate(
                f"λ={float(ds.lam.sel(run=r)):g}", (xi, yi), fontsize=8, xytext=(3, 3), textcoords="offset points"
            )
    ax.set(xlabel="retained encoder heads", ylabel="BLEU (test, beam 4)", title="pruning encoder self-attention heads")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.margins(x=0.12, y=0.15)
    legend_right(ax)
    return fig, pd.DataFrame(rows)


def _encoder_runs(ds: xr.Dataset, model) -> list[tuple[str, float, int]]:
    """(run, lambda, kept encoder heads) of the encoder-only runs, most heads first."""
    enc = ds.kept.sel(model=model, attention="encoder_self")
    runs = [
        (str(r), float(ds.lam.sel(run=r)), int(np.nansum(enc.sel(run=r))))
        for r in ds.run.values
        if str(ds.scope.sel(run=r).values) == "encoder" and np.isfinite(enc.sel(run=r)).any()
    ]
    return sorted(runs, key=lambda t: (-t[2], t[1]))


@figure
def pruning_roles(path):
    """The roles of the retained encoder heads per lambda (Voita et al. ACL 2019, fig. 8): for each
    encoder-only run, bars of how many kept heads are positional, syntactic, rare-token or none of
    these (:func:`survivor_roles`; a head with two roles counts under each, so the bars are side by
    side, not stacked as in the paper, whose roles do not overlap). One panel per model."""
    import pandas as pd

    from evolution.analyses.plotting import legend_right, plt

    roles, ds = survivor_roles(path), open_group(path, "heads_pruning")
    if roles is None:
        return None
    models = [m for m in ds.model.values if _encoder_runs(ds, m)]
    if not models:
        return None
    pyplot = plt()
    fig, axes = pyplot.subplots(1, len(models), figsize=(6.4, 3.6), layout="constrained", squeeze=False)
    colors = {"positional": "tab:blue", "syntactic": "tab:green", "rare_token": "tab:red", "other": "tab:gray"}
    width = 0.8 / len(ROLES)
    rows = []
    for ax, m in zip(axes[0], models, strict=True):
        runs = _encoder_runs(ds, m)
        for k, role in enumerate(ROLES):
            y = [float(roles.heads.sel(model=m, run=r, role=role)) for r, _, _ in runs]
            ax.bar(
                np.arange(len(runs)) + (k - (len(ROLES) - 1) / 2) * width,
                y,
                width=width,
                color=colors[role],
                label=role.replace("_", "-"),
            )
            rows += [
                dict(model=str(m), run=r, lam=lam, kept_encoder_heads=n, role=role, heads=v)
                for (r, lam, n), v in zip(runs, y, strict=True)
            ]
        ax.set_xticks(range(len(runs)), [f"λ={lam:g}\n{n} kept" for _, lam, n in runs])
        ax.set(ylabel="retained encoder heads", title=f"{m}: roles of the retained heads")
        ax.yaxis.get_major_locator().set_params(integer=True)
    legend_right(axes[0, -1])
    return fig, pd.DataFrame(rows)


@figure
def pruning_layers(path):
    """Heads kept per attention type and layer when all three types are gated (Voita et al. ACL
    2019, figs. 9-10): one panel per attention type (encoder self, decoder self, encoder-decoder),
    the kept heads of each layer, one line per lambda of the all-attention runs; the dotted line
    is the layer's number of heads."""
    import pandas as pd

    from evolution.analyses.plotting import STYLES, legend_right, plt

    ds = open_group(path, "heads_pruning")
    if ds is None:
        return None
    runs = [r for r in ds.run.values if str(ds.scope.sel(run=r).values) == "all"]
    pairs = [(m, r) for m in ds.model.values for r in runs if np.isfinite(ds.kept.sel(model=m, run=r)).any()]
    if not pairs:
        return None
    pyplot = plt()
    fig, axes = pyplot.subplots(
        1, len(ATTENTIONS), figsize=(6.4, 3.0), layout="constrained", sharey=True, squeeze=False
    )
    several = len(ds.model) > 1
    rows = []
    for ax, attention in zip(axes[0], ATTENTIONS, strict=True):
        total = None
        for i, (m, r) in enumerate(pairs):
            k = ds.kept.sel(model=m, run=r, attention=attention)
            layers = [int(x) for x in k.layer.values if np.isfinite(k.sel(layer=x)).any()]
            if not layers:
                continue
            y = [int(np.nansum(k.sel(layer=x))) for x in layers]
            total = (layers, [int(np.isfinite(k.sel(layer=x)).sum()) for x in layers])
            lam = float(ds.lam.sel(run=r))
            style = STYLES[i % len(STYLES)]
            ax.plot(layers, y, label=f"{m} λ={lam:g}" if several else f"λ={lam:g}", **style)
            rows += [
                dict(model=str(m), run=str(r), lam=lam, attention=attention, layer=x, kept_heads=v, heads=n)
                for x, v, n in zip(layers, y, total[1], strict=True)
            ]
        if total is not None:
            ax.plot(*total, color="black", linestyle=":", linewidth=1, label="heads per layer")
            ax.set_xticks(total[0])
        ax.set(xlabel="layer", title=attention.replace("_", " "))
    axes[0, 0].set(ylabel="heads kept")
    axes[0, 0].set_ylim(bottom=-0.2)
    axes[0, 0].yaxis.get_major_locator().set_params(integer=True)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    legend_right(axes[0, -1], handles, labels)
    return fig, pd.DataFrame(rows)
