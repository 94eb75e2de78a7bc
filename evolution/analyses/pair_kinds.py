"""What two models differ in: the kinds of model pair that the similarity group labels
(coordinate ``pair`` of ``similarity``) and claim 10's diagnostics compare (seeds against
objectives; Voita et al. 2019, sec. 2)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PAIR_KINDS", "pair_kind"]


#: What two models differ in (:func:`pair_kind`), the groups of claim 10's diagnostics.
PAIR_KINDS = (
    "same model",
    "seeds",
    "objectives, shared init",
    "objectives, different inits",
    "token dropout",
    "same objective",
    "objectives",
    "other",
)


def pair_kind(a: str, b: str, *, objectives: Mapping[str, str | None], runs: dict[str, dict]) -> str:
    """One of :data:`PAIR_KINDS` for models ``a`` and ``b``. With both in ``runs`` (this project's
    trained runs: objective, seed, token_dropout; a seed fixes the initial weights, which the
    objectives of one seed share, Voita et al. 2019, sec. 2): ``seeds`` (one objective, two
    seeds), ``objectives, shared init`` (two objectives, one seed), ``objectives, different
    inits`` (two objectives, two seeds), ``token dropout`` (one objective and seed, one of them
    with token dropout); ``other`` for the rest (a token-dropout model against another
    objective). Without runs: ``same objective`` or ``objectives`` by objective alone."""
    if a == b:
        return "same model"
    if a in runs and b in runs:
        ra, rb = runs[a], runs[b]
        same_objective, same_seed = ra.get("objective") == rb.get("objective"), ra.get("seed") == rb.get("seed")
        dropout = (float(ra.get("token_dropout", 0.0) or 0.0), float(rb.get("token_dropout", 0.0) or 0.0))
        if dropout == (0.0, 0.0):
            if same_objective:
                return "seeds" if not same_seed else "other"
            return "objectives, shared init" if same_seed else "objectives, different inits"
        if same_objective and same_seed and dropout[0] != dropout[1]:
            return "token dropout"
        return "other"
    oa, ob = objectives.get(a), objectives.get(b)
    if oa is None or ob is None:
        return "other"
    return "same objective" if oa == ob else "objectives"
