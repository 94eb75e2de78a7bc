"""Head verdicts: the findings of the attention-head papers checked against the numbers
of one ``metrics.zarr`` by stated rules, as the representation scorecard
(:mod:`evolution.report.scorecard`) checks Voita, Sennrich & Titov (2019).

Each claim is a function of the stored head groups that returns a
:class:`~evolution.report.scorecard.base.Finding` labelled by its paper, apart from the
12 representation claims: C1-C3 Clark et al. (2019) (:mod:`.clark`), V1-V2 Voita et al.
(ACL 2019) (:mod:`.voita`), V3 their pruning against training from scratch (:mod:`.pruning`),
K1-K2 Kobayashi et al. (2020) (:mod:`.kobayashi`). Every rule
is read per model and must hold for every model it concerns; the tests and the way the
per-model outcomes make one verdict are in :mod:`.base`. A run without what a claim needs
gets "not measurable here" and says what is missing (docs/heads.md, "Verdicts").
"""

from __future__ import annotations

from collections.abc import Callable

from evolution.report.heads_card.base import ALPHA, HeadRun
from evolution.report.heads_card.clark import claim_broad_lower, claim_dependency_heads, claim_sinks_upper
from evolution.report.heads_card.kobayashi import claim_norm_below_weight, claim_small_norms
from evolution.report.heads_card.pruning import claim_pruned_beats_scratch
from evolution.report.heads_card.voita import claim_roles_confident, claim_roles_relevant
from evolution.report.scorecard.base import Finding

__all__ = ["head_verdicts", "has_head_groups", "CLAIMS", "ALPHA", "HeadRun"]

CLAIMS: tuple[Callable[[HeadRun], Finding], ...] = (
    claim_sinks_upper,
    claim_broad_lower,
    claim_dependency_heads,
    claim_roles_confident,
    claim_roles_relevant,
    claim_pruned_beats_scratch,
    claim_small_norms,
    claim_norm_below_weight,
)


def head_verdicts(path) -> list[Finding]:
    """Every head verdict of :data:`CLAIMS` on the ``metrics.zarr`` at ``path`` (labels C1-C3,
    V1-V3, K1-K2, in that order)."""
    run = HeadRun(path)
    return [claim(run) for claim in CLAIMS]


def has_head_groups(path) -> bool:
    """Whether the store has any group the head verdicts read."""
    return any(g is not None for g in HeadRun(path).groups.values())
