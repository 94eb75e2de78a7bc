"""The findings scorecard: each claim of Voita, Sennrich & Titov (2019) checked against
the numbers of one ``metrics.zarr`` by a stated rule, never by hand.

Every claim is a function of the stored groups that returns a :class:`Finding` (or
several: a claim's further lines, such as the MLM's reversal under claim 11): the
claim, the rule, the measured numbers with their uncertainty, the paper's value, the
figure that shows them and a verdict, one of :data:`VERDICTS`. The uncertainty rules
are in :mod:`.base`; the claims in :mod:`.mi_claims` (1-5), :mod:`.neighbor_claims`
(6-8), :mod:`.similarity_claims` (9-11) and :mod:`.influence_claims` (12). A run
without what a claim needs gets "not measurable here" and says what is missing.
"""

from __future__ import annotations

from evolution.report.scorecard.base import FAILS, HOLDS, NA, SATURATION, SD_FACTOR, VERDICTS, ClaimFn, Finding, Run
from evolution.report.scorecard.influence_claims import claim_rare_influence
from evolution.report.scorecard.mi_claims import (
    claim_lm_input_falls,
    claim_lm_output_rises,
    claim_mlm_corrupted,
    claim_mlm_input_recovers,
    claim_mt_keeps_identity,
)
from evolution.report.scorecard.neighbor_claims import claim_lm_left_context, claim_mt_position, claim_same_token_order
from evolution.report.scorecard.similarity_claims import (
    claim_frequent_change_more,
    claim_lm_mt_farthest,
    claim_seeds_closer,
)

__all__ = [
    "Finding",
    "Run",
    "scorecard",
    "scorecard_table",
    "CLAIMS",
    "VERDICTS",
    "HOLDS",
    "FAILS",
    "NA",
    "SD_FACTOR",
    "SATURATION",
]

CLAIMS: tuple[ClaimFn, ...] = (
    claim_lm_input_falls,
    claim_mlm_input_recovers,
    claim_mt_keeps_identity,
    claim_lm_output_rises,
    claim_mlm_corrupted,
    claim_same_token_order,
    claim_mt_position,
    claim_lm_left_context,
    claim_lm_mt_farthest,
    claim_seeds_closer,
    claim_frequent_change_more,
    claim_rare_influence,
)

_NO_INTERVAL = "no bootstrap interval in this run: point values only"


def scorecard(path) -> list[Finding]:
    """Every claim of :data:`CLAIMS` on the ``metrics.zarr`` at ``path``, in the paper's order."""
    from dataclasses import replace

    run = Run(path)
    out: list[Finding] = []
    for claim in CLAIMS:
        run.missing_intervals = False
        found = claim(run)
        for f in found if isinstance(found, list) else [found]:
            if run.missing_intervals and f.verdict != NA and _NO_INTERVAL not in f.why:
                f = replace(f, why="; ".join(x for x in (f.why, _NO_INTERVAL) if x))
            out.append(f)
    return out


def scorecard_table(findings: list[Finding]) -> list[list[str]]:
    """Rows (header first): claim, paper's value, measured, verdict (and why)."""
    rows = [["#", "claim (Voita et al. 2019)", "paper", "measured", "verdict"]]
    for f in findings:
        rows.append([f.label, f.claim, f.paper or "-", f.measured or "-", f.verdict + (f" ({f.why})" if f.why else "")])
    return rows
