"""The findings scorecard on the page (:mod:`evolution.report.scorecard` computes it):
a one-line summary first, then each claim with the paper's value beside this run's,
the diagnostics under it, a verdict in colour and in words, and a link to the figure
that shows the claim's numbers.

The three verdict colours are from the Okabe & Ito (2008) colour-blind-safe palette
(blue, vermillion, light grey) and every verdict is also written out, with a symbol.
Only the claims of the paper (``part == ""``) are counted in the summary; further
lines of a claim (``part`` "b", ...) are shown under it. The head verdicts
(:mod:`evolution.report.heads_card`) are a table of their own, drawn by the same
functions with their own heading, noun and row anchors.
"""

from __future__ import annotations

import html

from evolution.report.scorecard import FAILS, HOLDS, NA

__all__ = ["VERDICT_STYLE", "summary_counts", "summary_text", "scorecard_html", "scorecard_md", "css"]

#: verdict -> (css class, symbol, background, text colour)
VERDICT_STYLE: dict[str, tuple[str, str, str, str]] = {
    HOLDS: ("v-holds", "✓", "#0072B2", "#ffffff"),
    FAILS: ("v-fails", "✗", "#D55E00", "#ffffff"),
    NA: ("v-na", "?", "#DDDDDD", "#222222"),
}


def css() -> str:
    rules = "".join(f".{cls}{{background:{bg};color:{fg}}}" for cls, _, bg, fg in VERDICT_STYLE.values())
    return (
        rules + ".verdict{white-space:nowrap;font-weight:600;padding:1px 6px;border-radius:3px;"
        "display:inline-block}.summary{font-size:17px;margin:8px 0 12px}"
        ".summary .verdict{font-size:15px}tr.part td{font-size:12px}"
    )


def _claims(findings) -> list:
    return [f for f in findings if not getattr(f, "part", "")]


def summary_counts(findings) -> dict[str, int]:
    """verdict -> number of the paper's claims (``part == ""``) with it."""
    claims = _claims(findings)
    return {v: sum(f.verdict == v for f in claims) for v in (HOLDS, NA, FAILS)}


def summary_text(findings, noun: str = "claims") -> str:
    """ "N of 12 claims hold; M not measurable here; K do not hold" (``noun``: what is counted)."""
    c, n = summary_counts(findings), len(_claims(findings))
    return f"{c[HOLDS]} of {n} {noun} hold; {c[NA]} not measurable here; {c[FAILS]} do not hold"


def _badge(verdict: str, text: str | None = None) -> str:
    cls, sym, _, _ = VERDICT_STYLE.get(verdict, ("v-other", "", "", ""))
    return f'<span class="verdict {cls}">{sym} {html.escape(text or verdict)}</span>'


def _label(f) -> str:
    return getattr(f, "label", None) or str(f.number)


def scorecard_html(
    findings,
    figures: dict[str, str],
    *,
    title: str = "claim (Voita et al. 2019)",
    noun: str = "claims",
    row_id: str = "claim",
) -> str:
    """The summary and the table; ``figures``: figure name -> its anchor on the page (claims
    whose figure is not there get no link); ``title``: the claim column's heading; ``noun``:
    what the summary counts; ``row_id``: the prefix of each row's anchor (``claim-3``)."""
    c = summary_counts(findings)
    n = len(_claims(findings))
    out = [
        f'<p class="summary">{_badge(HOLDS, f"{c[HOLDS]} of {n} {noun} hold")} '
        f"{_badge(NA, f'{c[NA]} not measurable here')} {_badge(FAILS, f'{c[FAILS]} do not hold')}</p>",
        f'<table class="scorecard"><thead><tr><th>#</th><th>{html.escape(title)}</th><th>paper</th>'
        "<th>this run</th><th>verdict</th></tr></thead><tbody>",
    ]
    for f in findings:
        part = getattr(f, "part", "")
        anchor = figures.get(getattr(f, "figure", "") or "")
        label = html.escape(_label(f))
        label = f'<a href="#{anchor}">{label}</a>' if anchor else label
        claim = html.escape(f.claim)
        if f.rule:
            claim += f"<br><small>Rule: {html.escape(f.rule)}</small>"
        if anchor:
            claim += f'<br><small><a href="#{anchor}">figure</a></small>'
        measured = html.escape(f.measured or "-")
        details = getattr(f, "details", ()) or ()
        if details:
            measured += '<ul class="details">' + "".join(f"<li>{html.escape(d)}</li>" for d in details) + "</ul>"
        verdict = _badge(f.verdict) + (f"<br><small>{html.escape(f.why)}</small>" if f.why else "")
        if getattr(f, "earlier", None):
            verdict += f"<br><small>{html.escape(_earlier(f.earlier))}</small>"
        out.append(
            f'<tr class="{"part" if part else "claim"}" id="{row_id}-{html.escape(_label(f))}">'
            f"<td>{label}</td><td>{claim}</td><td>{html.escape(getattr(f, 'paper', '') or '-')}</td>"
            f'<td>{measured}</td><td class="verdict-cell">{verdict}</td></tr>'
        )
    out.append("</tbody></table>")
    return "".join(out)


def _earlier(e: dict) -> str:
    """The verdict of a claim's earlier rule, as printed beside the current one."""
    return f"Earlier rule ({e['rule']}): {e['verdict']}" + (f" ({e['why']})" if e.get("why") else "")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def scorecard_md(
    findings, figures: dict[str, str], *, title: str = "claim (Voita et al. 2019)", noun: str = "claims"
) -> list[str]:
    """The same in Markdown (no colour: the verdicts in words)."""
    lines = [
        f"**{summary_text(findings, noun)}.**",
        "",
        f"| # | {_cell(title)} | paper | this run | verdict |",
        "|---|---|---|---|---|",
    ]
    for f in findings:
        anchor = figures.get(getattr(f, "figure", "") or "")
        label = f"[{_label(f)}](#{anchor})" if anchor else _label(f)
        measured = _cell(f.measured or "-")
        details = getattr(f, "details", ()) or ()
        if details:
            measured += "<br><small>" + "; ".join(_cell(d) for d in details) + "</small>"
        claim = _cell(f.claim) + (f"<br><small>Rule: {_cell(f.rule)}</small>" if f.rule else "")
        verdict = f.verdict + (f" ({_cell(f.why)})" if f.why else "")
        if getattr(f, "earlier", None):
            verdict += f"<br><small>{_cell(_earlier(f.earlier))}</small>"
        lines.append(f"| {label} | {claim} | {_cell(getattr(f, 'paper', '') or '-')} | {measured} | {verdict} |")
    return lines
