"""L0 pruning of attention heads (Voita et al. ACL 2019, sec. 6) for translation models
(``metrics.pruning``; off unless configured: a weak MT model's pruning curve says nothing).

For every lambda, two runs (:mod:`evolution.training.pruning`): gates on the encoder
self-attention only (the paper's fig. 7) and on all three attention types (table 2),
the latter with the from-scratch control (the same head layout trained from scratch
for ``scratch_updates``). Each run is one unit, resumable in
``<metrics store>/../pruning/<unit key>/``; test BLEU / chrF with beam 4 on the
analysed sentences' reference translations, the unpruned model's beside them, and those of
the model fine-tuned as long without gates (``metrics.pruning.control``): fine-tuning alone
moves BLEU when the base model is not converged.

Group ``heads_pruning``: ``bleu``, ``chrf``, ``bleu_scratch``, ``chrf_scratch`` (model,
run); ``bleu_continuous``, ``chrf_continuous`` (model, run: the pruned model with each head scaled
by its gate's deterministic test-time value, as the released code evaluates, beside the hard 0/1
layout of ``bleu``; NaN for runs cached before they were added); ``kept`` (model, run, attention,
layer, head: 1 kept, 0 pruned, NaN absent);
``lam``, ``scope`` (run); ``bleu_full``, ``chrf_full``, ``bleu_tuned``, ``chrf_tuned``,
``bleu_scratch_full``, ``chrf_scratch_full`` (model: every head trained from scratch by the same
loop as the kept layouts, ``metrics.pruning.scratch_full``). :func:`survivor_roles`
counts the roles (``heads`` group) of the kept encoder heads.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, required, save_texts
from evolution.analyses.heads.importance import ATTENTIONS
from evolution.analyses.heads.pruning_figures import pruning_curve, pruning_layers, pruning_roles, survivor_roles
from evolution.analyses.heads.pruning_run import SCOPES, pruning_task
from evolution.analyses.heads.pruning_seeds import LEVEL, seed_rows
from evolution.analyses.plotting import open_group

__all__ = ["HeadPruning", "pruning_task", "survivor_roles", "pruning_curve", "pruning_roles", "pruning_layers"]

#: below this test BLEU the unpruned model is too weak for its pruning curve to say anything (logged)
WEAK_BLEU = 10

logger = logging.getLogger(__name__)


class HeadPruning(Analysis):
    name = "heads_pruning"
    version = 1
    section = "pruning"

    def units(self, inputs: Inputs) -> list[Unit]:
        import hashlib

        from evolution import location
        from evolution.models import model_identity
        from evolution.provenance import config_hash

        cfg = required(inputs.config.pruning, "pruning")
        models = [m for m in inputs.models.values() if m.objective == "mt" and (not cfg.models or m.name in cfg.models)]
        if not models or inputs.targets is None:
            return []
        train_tgt = inputs.targets.training_text
        train_src = next(p for p in train_tgt.parent.glob("train.*") if p != train_tgt)
        n = cfg.test_sentences or len(inputs.targets.sentences)
        sources = _analysed_sources(inputs, n)
        texts = {
            "train_source": train_src.read_text(encoding="utf-8"),
            "train_target": train_tgt.read_text(encoding="utf-8"),
            "test_source": "\n".join(sources),
            "test_target": "\n".join(inputs.targets.sentences[: len(sources)]),
        }
        saved = save_texts(inputs.arrays_dir, "pruning", texts)
        digest = hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()[:16]
        root = location.join(location.parent(inputs.arrays_dir), "pruning")
        units = []
        # what the keys of runs that train from scratch add (the default batching: nothing, which keeps
        # the keys of earlier runs)
        batches = {} if cfg.scratch_batches == "regrouped" else {"batches": cfg.scratch_batches}
        for m in models:
            seed = _seed_of(inputs, m.name)
            if cfg.scratch_updates and cfg.scratch_full:  # every head from scratch: the recipe's own control
                key: dict[str, object] = {
                    "model": model_identity(m.spec),
                    "texts": digest,
                    "lam": None,
                    "scope": "scratch",
                    "max_tokens": cfg.max_tokens,
                    "seed": seed,
                    "scratch": cfg.scratch_updates,
                    **batches,
                }
                directory = location.join(root, config_hash(key))
                units.append(
                    Unit(
                        f"{m.name}-scratch",
                        pruning_task,
                        dict(
                            spec=m.spec,
                            texts=saved,
                            directory=directory,
                            lam=None,
                            scope="scratch",
                            updates=cfg.updates,
                            lr=cfg.lr,
                            gate_lr=None,
                            max_tokens=cfg.max_tokens,
                            seed=seed,
                            scratch_batches=cfg.scratch_batches,
                            scratch_updates=cfg.scratch_updates,
                            torch_threads=inputs.torch_threads,
                        ),
                        key=key,
                        started=location.exists(directory),
                    )
                )
            runs: list[tuple[float | None, str]] = [(None, "full")]
            if cfg.control:
                runs.append((0.0, "tuned"))
            runs += [(lam, scope) for lam in cfg.lambdas for scope in SCOPES]
            for lam, scope in runs:
                key = {
                    "model": model_identity(m.spec),
                    "texts": digest,
                    "lam": lam,
                    "scope": scope,
                    "updates": cfg.updates,
                    "lr": cfg.lr,
                    "max_tokens": cfg.max_tokens,
                    "seed": seed,
                    "scratch": cfg.scratch_updates
                    if scope == "all" and (cfg.scratch_lambdas is None or lam in cfg.scratch_lambdas)
                    else None,
                }
                gated = scope in SCOPES
                if gated and cfg.gate_lr is not None:  # null keeps the keys of runs with one rate for all
                    key["gate_lr"] = cfg.gate_lr
                if key["scratch"]:
                    key.update(batches)
                name = f"{m.name}-{scope}-{lam:g}" if gated else f"{m.name}-{scope}"
                directory = location.join(root, config_hash(key))
                units.append(
                    Unit(
                        name,
                        pruning_task,
                        dict(
                            spec=m.spec,
                            texts=saved,
                            directory=directory,
                            lam=lam,
                            scope=scope,
                            updates=cfg.updates,
                            lr=cfg.lr,
                            gate_lr=cfg.gate_lr if gated else None,
                            max_tokens=cfg.max_tokens,
                            seed=seed,
                            scratch_updates=key["scratch"],
                            scratch_batches=cfg.scratch_batches,
                            torch_threads=inputs.torch_threads,
                        ),
                        key=key,
                        started=location.exists(directory),
                    )
                )
        return units

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        cfg = required(inputs.config.pruning, "pruning")
        models = [n for n in inputs.names if f"{n}-full" in results]
        if not models:
            return {}
        weak = [
            f"{m} (BLEU {results[f'{m}-full']['bleu']:.1f})" for m in models if results[f"{m}-full"]["bleu"] < WEAK_BLEU
        ]
        if weak:
            logger.warning(
                "metrics.pruning: %s translate too poorly for the pruning curve to mean anything (BLEU "
                "< %d on the test sentences); prune a well-trained model (configs/bible-full.yaml)",
                ", ".join(weak),
                WEAK_BLEU,
            )
        runs = [(lam, scope) for lam in cfg.lambdas for scope in SCOPES]
        names = [f"{scope}-{lam:g}" for lam, scope in runs]
        shape = [(np.shape(r["kept"][a])) for r in results.values() if "kept" in r for a in r["kept"]]
        L = max([s[0] for s in shape], default=1)
        H = max([s[1] for s in shape], default=1)
        scores = {
            v: np.full((len(models), len(runs)), np.nan)
            for v in ("bleu", "chrf", "bleu_scratch", "chrf_scratch", "bleu_continuous", "chrf_continuous")
        }
        kept = np.full((len(models), len(runs), len(ATTENTIONS), L, H), np.nan)
        for i, m in enumerate(models):
            for j, (lam, scope) in enumerate(runs):
                r = results.get(f"{m}-{scope}-{lam:g}")
                if r is None:
                    continue
                for v in scores:
                    scores[v][i, j] = r.get(v, np.nan)
                for a, k in r["kept"].items():
                    k = np.asarray(k, dtype=float)
                    kept[i, j, ATTENTIONS.index(a), : k.shape[0], : k.shape[1]] = k
        ds = xr.Dataset(
            {
                **{v: (("model", "run"), x) for v, x in scores.items()},
                "kept": (
                    ("model", "run", "attention", "layer", "head"),
                    kept,
                    {"long_name": "1 kept (P(open) > P(closed)), 0 pruned, NaN not gated"},
                ),
                "lam": (("run",), np.array([lam for lam, _ in runs], dtype=float)),
                "scope": (("run",), np.array([s for _, s in runs], dtype=object)),
                "bleu_full": (("model",), np.array([results[f"{m}-full"]["bleu"] for m in models])),
                "chrf_full": (("model",), np.array([results[f"{m}-full"]["chrf"] for m in models])),
                **{
                    f"{v}_tuned": (("model",), np.array([results.get(f"{m}-tuned", {}).get(v, np.nan) for m in models]))
                    for v in ("bleu", "chrf")
                },
                **{
                    f"{v}_scratch_full": (
                        ("model",),
                        np.array([results.get(f"{m}-scratch", {}).get(f"{v}_scratch", np.nan) for m in models]),
                    )
                    for v in ("bleu", "chrf")
                },
            },
            coords={
                "model": np.array(models, dtype=object),
                "run": np.array(names, dtype=object),
                "attention": np.array(ATTENTIONS, dtype=object),
                "layer": np.arange(1, L + 1),
                "head": np.arange(H),
            },
        )
        return {"heads_pruning": ds}

    def tables(self, path):
        ds = open_group(path, "heads_pruning")
        if ds is None:
            return []
        rows = [
            ["model", "lambda", "gated", "heads kept (enc / dec-self / enc-dec)", "BLEU", "chrF", "BLEU from scratch"]
        ]
        for m in ds.model.values:
            rows.append(
                [
                    str(m),
                    "-",
                    "none",
                    "all",
                    f"{float(ds.bleu_full.sel(model=m)):.2f}",
                    f"{float(ds.chrf_full.sel(model=m)):.2f}",
                    "",
                ]
            )
            if "bleu_tuned" in ds and np.isfinite(float(ds.bleu_tuned.sel(model=m))):
                rows.append(
                    [
                        str(m),
                        "0",
                        "none, fine-tuned",
                        "all",
                        f"{float(ds.bleu_tuned.sel(model=m)):.2f}",
                        f"{float(ds.chrf_tuned.sel(model=m)):.2f}",
                        "",
                    ]
                )
            if "bleu_scratch_full" in ds and np.isfinite(float(ds.bleu_scratch_full.sel(model=m))):
                rows.append(
                    [
                        str(m),
                        "-",
                        "none, from scratch",
                        "all",
                        "",
                        "",
                        f"{float(ds.bleu_scratch_full.sel(model=m)):.2f}",
                    ]
                )
            for run in ds.run.values:
                k = ds.kept.sel(model=m, run=run)
                counts = " / ".join(
                    str(int(np.nansum(k.sel(attention=a)))) if np.isfinite(k.sel(attention=a)).any() else "all"
                    for a in ATTENTIONS
                )
                bs = float(ds.bleu_scratch.sel(model=m, run=run))
                rows.append(
                    [
                        str(m),
                        f"{float(ds.lam.sel(run=run)):g}",
                        str(ds.scope.sel(run=run).values),
                        counts,
                        f"{float(ds.bleu.sel(model=m, run=run)):.2f}",
                        f"{float(ds.chrf.sel(model=m, run=run)):.2f}",
                        f"{bs:.2f}" if np.isfinite(bs) else "",
                    ]
                )
        return [
            (
                "Pruning heads (Voita et al. ACL 2019, fig. 7 and table 2)",
                rows,
                "BLEU / chrF on the test books (beam 4) after fine-tuning with Hard-Concrete gates and an L0 "
                "penalty lambda; heads kept where P(open) > P(closed); 'none, fine-tuned': the same fine-tuning "
                "without gates (the reference for the pruned runs' BLEU); 'from scratch': the kept layout trained "
                "from a fresh initialisation for metrics.pruning.scratch_updates; 'none, from scratch': every "
                "head trained the same way (the from-scratch column's own reference).",
            )
        ] + _seed_table(ds)


def _seed_table(ds) -> list:
    """The comparison over seeds (:func:`evolution.analyses.heads.pruning_seeds.seed_rows`), where
    two or more pruned models are seeds of one recipe."""
    rows, seeds = seed_rows(ds)
    if not rows:
        return []
    return [
        (
            f"Pruning over {len(seeds)} seeds: each arm against its own reference (Voita et al. ACL 2019, table 3)",
            rows,
            f"BLEU differences on the test books, mean over the seeds {', '.join(seeds)} with a "
            f"{LEVEL:.0%} Student-t interval (n - 1 degrees of freedom). Pruned: fine-tuned with gates "
            "against the same fine-tuning without gates, translated with the hard 0/1 layout or with each "
            "head scaled by its gate's test-time value (the released code's evaluation); from scratch: the "
            "kept layout against every head, both trained from scratch by the same loop and budget; d: the "
            "first against the third, which head verdict V3 reads (holds when the interval of d lies above "
            "0 at every lambda).",
        )
    ]


def _seed_of(inputs: Inputs, model: str) -> int:
    """The seed of ``model``'s pruning and from-scratch runs: its own training seed where the run
    records one (``mt-seed1``: 1; so that the runs of two seeds of a model draw independent batches,
    gate noise and initialisations), else the config's (the keys of models at the config's seed
    are unchanged)."""
    seed = (inputs.attrs.get("runs") or {}).get(model, {}).get("seed")
    return int(seed) if seed is not None else int(inputs.seed)


def _analysed_sources(inputs: Inputs, n: int) -> list[str]:
    """The first ``n`` analysed sentences' source text (the corpus stage's sentences file)."""
    directory = Path(inputs.targets.training_text).parent.parent
    return (directory / "sentences.txt").read_text(encoding="utf-8").splitlines()[:n]


HeadPruning.figures = {
    "heads_pruning": (
        pruning_curve,
        "BLEU against the number of retained encoder heads after fine-tuning with "
        "Hard-Concrete gates on the encoder self-attention, one point per lambda "
        "(Voita et al. ACL 2019, fig. 7); at all heads the model fine-tuned as long without "
        "gates (star) and the unpruned model, not fine-tuned (hollow).",
    ),
    "heads_pruning_roles": (
        pruning_roles,
        "Roles of the encoder heads retained by each encoder-only run, from the "
        "unpruned model's head statistics (Voita et al. ACL 2019, fig. 8): "
        "positional, syntactic (any relation), rare-token (share >= 0.2) or none; "
        "a head with two roles counts under each.",
    ),
    "heads_pruning_layers": (
        pruning_layers,
        "Heads kept in each layer of each attention type when all three are "
        "gated, one line per lambda (Voita et al. ACL 2019, figs. 9-10); "
        "dotted: the layer's number of heads.",
    ),
}
