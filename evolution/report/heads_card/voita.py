"""Verdicts V1-V2: Voita, Talbot, Moiseev, Sennrich & Titov (ACL 2019), "Analyzing
Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be
Pruned", read off the ``heads`` and ``heads_importance`` groups.

Abstract: "the most important and confident heads play consistent and often
linguistically-interpretable roles". The roles (sec. 5): positional heads (``heads/
positional``), syntactic heads (``heads/syntactic``, any relation), rare-token heads
(``heads/rare_token_share`` >= :data:`RARE_SHARE`, the threshold by which the pruning
analysis counts the survivors' roles).

* V1: the heads with a role are more confident than the heads without one;
* V2: where head importance is stored, the heads with a role are the relevant ones: LRP
  relevance (translation models, Voita et al.'s measure), else Michel et al.'s (2019)
  mask importance normalised per layer, per sentence (their eq. 2). Where the store also
  holds the per-batch estimator (``importance_batch``, heads_importance version 3), a line
  of the details (starting with :data:`BATCH_PREFIX`) gives the verdict with it in place of
  the per-sentence one for the models that read mask importance (the translation models
  read LRP relevance and keep their outcome); the verdict itself stays per sentence.
"""

from __future__ import annotations

import numpy as np

from evolution.metrics.importance import normalize_by_layer
from evolution.report.heads_card.base import (
    ALPHA,
    NOT_SIGNIFICANT,
    HeadRun,
    Outcome,
    Source,
    pfmt,
    rank_greater,
    verdict,
)
from evolution.report.scorecard.base import FAILS, HOLDS, NA, Finding, fmt

__all__ = ["claim_roles_confident", "claim_roles_relevant", "RARE_SHARE", "BATCH_PREFIX"]

#: a rare-token head points to the sentence's rarest token in at least this share of sentences
#: (the heads group's attribute ``rare_share`` where stored)
RARE_SHARE = 0.2

#: how V2's line on the per-batch estimator of mask importance begins
#: (:func:`evolution.metrics.importance.batch_importance`)
BATCH_PREFIX = "per-batch mask importance"

PAPER = {
    "V1": "the most important and confident heads play consistent, often linguistically interpretable roles: "
    "positional, syntactic, rare tokens (Voita et al. ACL 2019, abstract, sec. 5)",
    "V2": "the heads LRP finds most relevant are the confident ones and those with roles; the others can be pruned "
    "with little loss (Voita et al. ACL 2019, sec. 4-6)",
}

_ROLES = (
    "positional: >= heads.positional_share of maxima on one offset; syntactic: heads/syntactic for any relation; "
    "rare-token: heads/rare_token_share >= {rare:g}"
)


def _rare_share(run: HeadRun) -> float:
    return float(run.group("heads").attrs.get("rare_share", RARE_SHARE))


def _with_roles(run: HeadRun, model: str, values: np.ndarray, name: str) -> Outcome | str:
    """The outcome of "heads with a role score higher on ``values`` ((layer, head))", or the
    reason the model is left out."""
    roles = run.roles(model, _rare_share(run))
    if roles is None:
        return "no head role stored"
    role, counts, _ = roles
    ok = run.exists(model) & np.isfinite(values)
    x, y = values[role & ok], values[~role & ok]
    if not len(x):
        return "no head with a role"
    if not len(y):
        return "every head has a role"
    a, p = rank_greater(x, y)
    kinds = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    text = (
        f"{len(x)} head(s) with a role ({kinds}) {name} {fmt(x.mean(), 3)} vs {len(y)} without "
        f"{fmt(y.mean(), 3)}; A = {fmt(a)}, p = {pfmt(p)}"
    )
    short = f"A = {fmt(a)}, p = {pfmt(p)}"
    if a <= 0.5:
        return Outcome(model, FAILS, text, f"the heads with a role do not score higher on {name}", short)
    return Outcome(model, HOLDS if p < ALPHA else NA, text, "" if p < ALPHA else NOT_SIGNIFICANT, short)


def _version_note(run: HeadRun) -> tuple[str, ...]:
    """A note when the store's head definitions predate heads analysis version 4 (no
    ``confidence_with_sink`` measure beside ``confidence``)."""
    if "confidence_with_sink" in run.group("heads").measure.values:
        return ()
    return (
        "this store predates heads analysis version 4 (docs/heads.md): its confidence is the largest weight on "
        "any key, the sinks included, and its rare-token shares follow the earlier rule (first minimum, BOS "
        "queries and annotated sentences counted)",
    )


def claim_roles_confident(run: HeadRun) -> Finding:
    claim = "The heads with a role (positional, syntactic, rare-token) are the confident ones."
    rare = _rare_share(run) if run.heads is not None else RARE_SHARE
    rule = (
        "per model, the confidence (heads/value confidence: the mean largest weight on a content key) of the "
        "heads with a role against the heads without one: one-sided Mann-Whitney over heads, "
        f"p < {ALPHA:g}; roles: {_ROLES.format(rare=rare)}; every model with heads of both kinds"
    )
    args = Source(paper=PAPER["V1"], figure="heads_roles")
    if run.heads is None:
        return verdict("V1", claim, rule, [], {}, missing="no heads group in this run", **args)
    if not run.has_measures("entropy", "confidence"):
        return verdict("V1", claim, rule, [], {}, missing="the heads group has no confidence", **args)
    outcomes, left_out = [], {}
    for m in run.models():
        got = _with_roles(run, m, run.measure(m, "confidence"), "confidence")
        if isinstance(got, str):
            left_out[m] = got
        else:
            outcomes.append(got)
    missing = (
        ""
        if any(v in run.heads for v in ("positional", "syntactic", "rare_token_share"))
        else "the heads group stores no head role (positional, syntactic, rare_token_share)"
    )
    return verdict("V1", claim, rule, outcomes, left_out, missing=missing, details=_version_note(run), **args)


def _read(run: HeadRun, model: str, var: str) -> np.ndarray | None:
    """(layer, head) of ``heads_importance/var`` for the model's encoder self-attention on the
    heads group's grid; None where the store has no such numbers (absent, or all NaN)."""
    imp, heads = run.group("heads_importance"), run.group("heads")
    if var not in imp or model not in imp.model.values or "encoder_self" not in imp.attention.values:
        return None
    grid = dict(layer=heads.layer.values, head=heads["head"].values)
    v = imp[var].sel(model=model, attention="encoder_self").reindex(**grid).values.astype(float)
    return v if np.isfinite(v).any() else None


def _importance(run: HeadRun, model: str) -> tuple[np.ndarray, str] | str:
    """((layer, head) on the heads group's grid, its name) of the model's encoder
    self-attention: LRP relevance where stored, else mask importance normalised per layer;
    or the reason there is none."""
    imp = run.group("heads_importance")
    if model not in imp.model.values:
        return "no importance stored"
    if "encoder_self" not in imp.attention.values:
        return "no encoder self-attention in heads_importance"
    relevance = _read(run, model, "relevance")
    if relevance is not None:
        return relevance, "LRP relevance"
    raw = _read(run, model, "importance")
    if raw is None:
        return "no importance stored"
    return normalize_by_layer(raw), "mask importance"


def _per_batch(
    run: HeadRun, claim: str, rule: str, outcomes: list[Outcome], names: dict[str, str], left_out: dict[str, str]
) -> str | None:
    """V2's line on the per-batch estimator (``importance_batch``, normalised per layer): the
    verdict with each mask-importance model's per-batch outcome in place of its per-sentence
    one (``outcomes``, read from ``names[model]``), the LRP outcomes kept; None when the store
    has no per-batch importance (a heads_importance group before version 3)."""
    imp = run.group("heads_importance")
    if "importance_batch" not in imp:
        return None
    size = imp["importance_batch"].attrs.get("batch_size")
    batches = f"batches of {int(size)} sentences, " if size is not None else ""
    head = f"{BATCH_PREFIX} ({batches}abs of the batch loss's gradient, as Hugging Face's run_bertology.py)"
    batch, gone, lrp, texts = [], dict(left_out), [], []
    for o in outcomes:
        if names[o.model] != "mask importance":
            batch.append(o)
            lrp.append(o.model)
            continue
        raw = _read(run, o.model, "importance_batch")
        got = (
            "no per-batch importance stored (its unit predates heads_importance version 3)"
            if raw is None
            else _with_roles(run, o.model, normalize_by_layer(raw), BATCH_PREFIX)
        )
        if isinstance(got, str):
            gone[o.model] = got
            texts.append(f"{o.model}: left out ({got})")
            continue
        batch.append(got)
        texts.append(f"{o.model}: {got.verdict} ({got.short}; per sentence: {o.verdict})")
    b = verdict("V2", claim, rule, batch, gone)
    if lrp:
        texts.append(
            f"{', '.join(lrp)}: {'reads' if len(lrp) == 1 else 'read'} LRP relevance (translation "
            f"{'model' if len(lrp) == 1 else 'models'}), unaffected"
        )
    if not any(names[o.model] == "mask importance" for o in outcomes):
        texts.append("no model reads mask importance")
    return f"{head}: {b.verdict}; " + "; ".join(texts)


def claim_roles_relevant(run: HeadRun) -> Finding:
    from scipy.stats import spearmanr

    claim = "Where head importance is measured, the heads with a role are the relevant ones."
    rule = (
        "per model with heads_importance, the encoder self-attention heads' LRP relevance (share of the layer; "
        "translation models), else their mask importance (Michel et al. 2019) divided by its l2 norm over the "
        "layer's heads: the heads with a role against those without one, one-sided Mann-Whitney over heads, "
        f"p < {ALPHA:g}; roles as in V1; every model with importance and heads of both kinds"
    )
    args = Source(paper=PAPER["V2"], figure="heads_importance")
    if run.importance is None:
        return verdict(
            "V2",
            claim,
            rule,
            [],
            {},
            missing="no heads_importance group in this run (metrics.importance "
            "is off, or no model computes its own loss)",
            **args,
        )
    if run.heads is None or not run.has_measures("entropy"):
        return verdict("V2", claim, rule, [], {}, missing="no heads group in this run (the roles)", **args)
    outcomes, left_out, details, names = [], {}, list(_version_note(run)), {}
    for m in (str(x) for x in run.importance.model.values):
        if m not in run.models():
            left_out[m] = "not in the heads group"
            continue
        got = _importance(run, m)
        if isinstance(got, str):
            left_out[m] = got
            continue
        values, name = got
        outcome = _with_roles(run, m, values, name)
        if isinstance(outcome, str):
            left_out[m] = outcome
            continue
        outcomes.append(outcome)
        names[m] = name
        if "confidence" in run.heads.measure.values:
            conf = run.measure(m, "confidence")
            ok = np.isfinite(conf) & np.isfinite(values)
            if ok.sum() > 2:
                res = spearmanr(values[ok], conf[ok], alternative="greater")
                details.append(
                    f"{m}: Spearman({name}, confidence) {float(res.statistic):+.2f} over {int(ok.sum())} "
                    f"heads, one-sided p = {pfmt(float(res.pvalue))}"
                )
    line = _per_batch(run, claim, rule, outcomes, names, left_out)
    if line is not None:
        details.append(line)
    return verdict("V2", claim, rule, outcomes, left_out, details=tuple(details), **args)
