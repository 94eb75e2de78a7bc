"""Which heads matter: head-mask importance (Michel et al. 2019) for every model that can
compute its own training loss (fairseq models; Hugging Face BERT-like masked LMs and GPT-2
with their pretraining head), and LRP head relevance (Voita et al. ACL 2019) for
translation models, over the analysed sentences (``metrics.importance``). A model without
its own loss (a bare encoder such as MiniLM) gets ``{"unsupported": reason}``, logged and
left out of the group.

Group ``heads_importance`` (dims ``model``, ``attention``, ``layer``, ``head``):

* ``importance``: E_x |dL(x)/dxi_h| over sentences (:mod:`evolution.metrics.importance`),
  ``importance_sem`` its standard error over sentences, ``importance_normalized`` the
  per-layer l2-normalised scores Michel et al. prune by;
* ``importance_batch``: the per-batch estimator, mean over consecutive batches of
  :data:`~evolution.metrics.importance.BATCH_SIZE` (16) sentences of |dL(batch)/dxi_h|, the
  batch's loss its mean token NLL (:func:`~evolution.metrics.importance.batch_importance`:
  the rule of Hugging Face's run_bertology.py; attribute ``batch_size``), and
  ``importance_batch_normalized`` its per-layer l2-normalised scores; NaN for unit results
  computed before analysis version 3;
* ``relevance``: the per-layer normalised LRP relevance of the top-1 logit, averaged over
  decoding steps (:mod:`evolution.metrics.relevance`), ``relevance_sem`` over steps;
* ``sentences`` / ``steps`` (model): what was averaged.

:func:`correlations` adds the Spearman correlations between relevance, importance and
the heads group's confidence, per model (read from the store, so that any two runs'
groups can be compared the same way), each estimator of mask importance named in the table
(:data:`~evolution.metrics.importance.ESTIMATORS`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_texts, required, save_texts
from evolution.analyses.plotting import WIDTH, concat, figure, open_group, plt, tidy
from evolution.metrics.importance import BATCH_SIZE, ESTIMATORS
from evolution.metrics.plan import rows_by_sentence

__all__ = ["HeadImportance", "importance_task", "correlations", "importance_heatmaps"]

logger = logging.getLogger(__name__)

ATTENTIONS = ("encoder_self", "decoder_self", "encoder_decoder")


def _sem(samples: np.ndarray) -> list | None:
    """The standard error of the mean over axis 0 (as nested lists), None below two samples."""
    return (samples.std(axis=0, ddof=1) / np.sqrt(len(samples))).tolist() if len(samples) > 1 else None


def importance_task(
    *,
    store: str,
    model: str,
    spec: dict,
    text: str | None,
    sentences: int | None,
    seed: int,
    relevance: bool,
    max_batch_tokens: int,
    torch_threads: int = 1,
) -> dict[str, Any]:
    """Mask importance (and for translation models LRP relevance) of every head over the first
    ``sentences`` analysed sentences (the store's token ids; MT: teacher-forced on the
    reference translations in ``text``, saved by :func:`~evolution.analyses.base.save_texts`)."""
    import torch

    from evolution.metrics.importance import batch_importance, importance, mask_gradients, objective_items, unavailable
    from evolution.metrics.relevance import head_relevance
    from evolution.models import cached_adapter, fairseq_adapter
    from evolution.store import open_representations

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    reason = unavailable(adapter)
    if reason is not None:
        return {"unsupported": reason}
    reps = open_representations(store, model)
    rows_of = rows_by_sentence(reps["sentence"].values)
    token_id = reps["token_id"].values
    chosen = sorted(rows_of)[:sentences]
    ids = [token_id[rows_of[s]].tolist() for s in chosen]
    targets = None
    if adapter.objective == "mt":
        if text is None:
            return {
                "unsupported": f"{model}: a translation model's loss needs the reference translations "
                "(a parallel corpus)"
            }
        lines = load_texts(text)["targets"].split("\n")
        limit = adapter.max_target_tokens
        keep = [k for k, s in enumerate(chosen) if s < len(lines) and lines[s].strip()]
        ids = [ids[k] for k in keep]
        targets = [adapter.tokenize_target(lines[chosen[k]]).ids[:limit] for k in keep]
    items = [it for it in objective_items(adapter, ids, targets=targets, seed=seed) if it is not None]
    attentions = adapter.attention_types
    t0 = time.perf_counter()
    grads = mask_gradients(adapter, items, attentions=attentions, max_batch_tokens=max_batch_tokens)
    tokens = [len(it.labels) for it in items]  # each item's predicted tokens (metrics.importance.flat_positions)
    out: dict[str, Any] = {
        "attentions": list(attentions),
        "sentences": len(items),
        "importance": {a: importance(g).tolist() for a, g in grads.items()},
        "importance_sem": {a: _sem(np.abs(g)) for a, g in grads.items()},
        "importance_batch": {a: batch_importance(g, tokens, batch_size=BATCH_SIZE).tolist() for a, g in grads.items()},
        "batch_size": BATCH_SIZE,
        "importance_seconds": round(time.perf_counter() - t0, 2),
    }
    if relevance and adapter.objective == "mt":
        t0 = time.perf_counter()
        # LRP's rules patch fairseq's attention and run on the CPU (evolution/nets/lrp.py); the mask
        # gradients above ran on the spec's device, through the plain network for a shipped model
        cpu = fairseq_adapter({**spec, "device": "cpu"})
        rel = head_relevance(cpu, items, attentions=attentions, max_batch_tokens=max_batch_tokens, per_step=True)
        out.update(
            steps=rel["steps"],
            relevance={a: v.tolist() for a, v in rel["relevance"].items()},
            relevance_sem={a: _sem(v) for a, v in rel["per_step"].items()},
            relevance_seconds=round(time.perf_counter() - t0, 2),
        )
    return out


class HeadImportance(Analysis):
    name = "heads_importance"
    # 3: the per-batch estimator importance_batch; 2: Hugging Face BERT-like masked LMs and GPT-2;
    # 1: fairseq models only
    version = 3
    section = "importance"

    def units(self, inputs: Inputs) -> list[Unit]:
        cfg = required(inputs.config.importance, "importance")
        text, digest = None, None
        if inputs.targets is not None and any(m.objective == "mt" for m in inputs.models.values()):
            text = save_texts(inputs.arrays_dir, "heads-importance", {"targets": "\n".join(inputs.targets.sentences)})
            digest = inputs.targets.digest
        return [
            Unit(
                m.name,
                importance_task,
                dict(
                    store=inputs.store,
                    model=m.name,
                    spec=m.spec,
                    text=text if m.objective == "mt" else None,
                    sentences=cfg.sentences,
                    seed=inputs.seed,
                    relevance=cfg.relevance,
                    max_batch_tokens=inputs.max_batch_tokens,
                    torch_threads=inputs.torch_threads,
                ),
                key={
                    "model": m.key,
                    "sentences": cfg.sentences,
                    "relevance": cfg.relevance,
                    "seed": inputs.seed,
                    "targets": digest if m.objective == "mt" else None,
                },
            )
            for m in inputs.models.values()
        ]

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        for name in inputs.names:
            if "unsupported" in results.get(name, {}):
                logger.warning("metrics: heads_importance: %s", results[name]["unsupported"])
        models = [n for n in inputs.names if n in results and "unsupported" not in results[n]]
        if not models:
            return {}
        shapes = [np.shape(results[m]["importance"][a]) for m in models for a in results[m]["attentions"]]
        L, H = max(s[0] for s in shapes), max(s[1] for s in shapes)
        arrays = {
            v: np.full((len(models), len(ATTENTIONS), L, H), np.nan)
            for v in ("importance", "importance_sem", "importance_batch", "relevance", "relevance_sem")
        }
        for i, m in enumerate(models):
            r = results[m]
            for a in r["attentions"]:
                j = ATTENTIONS.index(a)
                for v in arrays:  # a unit result without a variable (computed before it existed) leaves NaN
                    value = (r.get(v) or {}).get(a)
                    if value is not None:
                        value = np.asarray(value, dtype=float)
                        arrays[v][i, j, : value.shape[0], : value.shape[1]] = value
        from evolution.metrics.importance import normalize_by_layer as normalized

        sizes = {size for m in models if (size := results[m].get("batch_size")) is not None}
        batch_size = sizes.pop() if len(sizes) == 1 else BATCH_SIZE
        dims = ("model", "attention", "layer", "head")
        ds = xr.Dataset(
            {
                "importance": (
                    dims,
                    arrays["importance"],
                    {"long_name": "E_x |dL/dxi_h| (Michel et al. 2019)", "estimator": ESTIMATORS["importance"]},
                ),
                "importance_sem": (dims, arrays["importance_sem"], {"long_name": "standard error over sentences"}),
                "importance_normalized": (
                    dims,
                    normalized(arrays["importance"]),
                    {"long_name": "importance / its l2 norm over the layer's heads"},
                ),
                "importance_batch": (
                    dims,
                    arrays["importance_batch"],
                    {
                        "long_name": f"mean over batches of {batch_size} sentences of |dL(batch)/dxi_h|",
                        "estimator": ESTIMATORS["importance_batch"],
                        "batch_size": int(batch_size),
                    },
                ),
                "importance_batch_normalized": (
                    dims,
                    normalized(arrays["importance_batch"]),
                    {"long_name": "importance_batch / its l2 norm over the layer's heads"},
                ),
                "relevance": (
                    dims,
                    arrays["relevance"],
                    {"long_name": "LRP relevance of the top-1 logit, share of the layer (Voita et al. 2019)"},
                ),
                "relevance_sem": (dims, arrays["relevance_sem"], {"long_name": "standard error over decoding steps"}),
                "sentences": (("model",), np.array([results[m]["sentences"] for m in models])),
                "steps": (("model",), np.array([results[m].get("steps", 0) for m in models])),
            },
            coords={
                "model": np.array(models, dtype=object),
                "attention": np.array(ATTENTIONS, dtype=object),
                "layer": np.arange(1, L + 1),
                "head": np.arange(H),
            },
        )
        return {"heads_importance": ds}

    def tables(self, path):
        corr = correlations(path)
        if corr is None:
            return []
        names = {"relevance": "LRP relevance", "confidence": "confidence", **ESTIMATORS}
        rows = [["model", "pair", "Spearman rho", "heads"]]
        for m in corr.model.values:
            for (a, b), p in zip(PAIRS, corr.pair.values, strict=True):
                rho = float(corr.rho.sel(model=m, pair=p))
                if np.isfinite(rho):
                    rows.append(
                        [str(m), f"{names[a]} ~ {names[b]}", f"{rho:+.2f}", str(int(corr.n.sel(model=m, pair=p)))]
                    )
        return [
            (
                "Which heads matter: Spearman correlations between importance, relevance and confidence",
                rows,
                "Encoder self-attention heads of each model (Voita et al. ACL 2019: the heads LRP finds relevant "
                "are the confident ones). Mask importance (Michel et al. 2019) under two estimators: per sentence, "
                "the mean over sentences of |dL(x)/dxi_h| (their eq. 2; variable importance), and per batch of "
                f"{BATCH_SIZE} consecutive sentences, the mean over batches of |dL(batch)/dxi_h|, whose sentences' "
                "signs cancel within a batch (Hugging Face's run_bertology.py; variable importance_batch; rows "
                "only where the store has it). Michel et al.'s released prune.py takes the absolute value per "
                "sentence and query position, so that no two sentences' signs cancel.",
            )
        ]

    figures = {}


PAIRS = (
    ("relevance", "confidence"),
    ("importance", "confidence"),
    ("relevance", "importance"),
    ("importance_batch", "confidence"),
    ("relevance", "importance_batch"),
    ("importance", "importance_batch"),
)


def correlations(path) -> xr.Dataset | None:
    """Spearman rho (model, pair) over the encoder self-attention heads between LRP relevance,
    mask importance per sentence (``importance``) and per batch (``importance_batch``, where
    stored) and confidence (the ``heads`` group's maximum attention weight), with the number of
    heads ``n``; None when the store has no ``heads_importance`` group."""
    from scipy.stats import spearmanr

    imp = open_group(path, "heads_importance")
    if imp is None:
        return None
    heads = open_group(path, "heads")
    models = list(imp.model.values)
    rho = np.full((len(models), len(PAIRS)), np.nan)
    n = np.zeros((len(models), len(PAIRS)), int)
    for i, m in enumerate(models):
        values = {
            v: imp[v].sel(model=m, attention="encoder_self").values.ravel()
            for v in ("relevance", "importance", "importance_batch")
            if v in imp
        }  # a store before v3: no batch
        if heads is not None and m in heads.model.values:
            conf = heads.value.sel(model=m, measure="confidence").values.ravel()
            if conf.size == values["importance"].size:  # both padded to the same (layer, head) grid
                values["confidence"] = conf
        for j, (a, b) in enumerate(PAIRS):
            if a in values and b in values:
                ok = np.isfinite(values[a]) & np.isfinite(values[b])
                n[i, j] = int(ok.sum())
                if n[i, j] > 2:
                    rho[i, j] = spearmanr(values[a][ok], values[b][ok]).statistic
    return xr.Dataset(
        {"rho": (("model", "pair"), rho), "n": (("model", "pair"), n)},
        coords={
            "model": np.array(models, dtype=object),
            "pair": np.array([f"{a} ~ {b}" for a, b in PAIRS], dtype=object),
        },
    )


@figure
def importance_heatmaps(path):
    """Per model (rows): layer x head heatmaps of encoder mask importance (normalised per
    layer), LRP relevance and confidence (Voita et al. ACL 2019, figs. 1-3), each panel's
    colour scale fit to its data and stated on its colour bar."""
    imp = open_group(path, "heads_importance")
    if imp is None:
        return None
    heads = open_group(path, "heads")
    models = list(imp.model.values)
    panels = [
        ("importance_normalized", "mask importance\n(layer-normalised)"),
        ("relevance", "LRP relevance"),
        ("confidence", "confidence"),
    ]
    pyplot = plt()
    fig, axes = pyplot.subplots(
        len(models), 3, figsize=(WIDTH, 2.2 * len(models) + 0.4), squeeze=False, layout="constrained"
    )
    frames = []
    for r, m in enumerate(models):
        for c, (var, title) in enumerate(panels):
            ax = axes[r][c]
            if var == "confidence":
                da = (
                    heads.value.sel(model=m, measure="confidence")
                    if heads is not None and m in heads.model.values
                    else None
                )
            else:
                da = imp[var].sel(model=m, attention="encoder_self")
            data = None if da is None else da.transpose("layer", "head").values
            if data is None or not np.isfinite(data).any():
                ax.set_axis_off()
                ax.set_title(f"{m}: {title.splitlines()[0]}: not measured")
                continue
            vmin, vmax = float(np.nanmin(data)), float(np.nanmax(data))
            im = ax.imshow(data, cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
            ax.set_yticks(range(data.shape[0]), [str(i + 1) for i in range(data.shape[0])])
            ax.set_xticks(range(data.shape[1]), [str(h) for h in range(data.shape[1])])
            ax.set_title(f"{m}: {title}")
            ax.set_ylabel("layer")
            if r == len(models) - 1:
                ax.set_xlabel("head")
            fig.colorbar(im, ax=ax, fraction=0.05, label=f"{vmin:.2g} to {vmax:.2g}\n(panel's range)")
            frames.append(tidy(da, var, model=str(m)))
    return fig, concat(frames)


HeadImportance.figures = {
    "heads_importance": (
        importance_heatmaps,
        "Encoder heads by layer (rows) and head (columns): Michel et al.'s "
        "mask importance (normalised per layer), Voita et al.'s LRP relevance "
        "(translation models) and confidence; each panel's colour scale runs from "
        "its smallest to its largest value (stated on its colour bar).",
    ),
}
