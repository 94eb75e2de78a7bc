"""The report's page as a document (title, paragraph, sections with figures and tables)
rendered twice from one structure, as ``report.html`` and ``report.md``, so that the
two have the same sections.

Every section has an anchor (``id``) and the table of contents links to them; text is
left-aligned, only numeric columns are right-aligned; a table longer than :data:`FOLD`
rows shows its first rows and folds the rest into a ``<details>`` element (in Markdown
too, which code hosts render folded: every row is in both pages); a table whose values
are one constant is one sentence; every figure links to itself at full size and is shown
at its natural size at most (never upscaled), shrunk to the column's width when wider.
"""

from __future__ import annotations

import html
import struct
from dataclasses import dataclass, field
from pathlib import Path

from evolution.report.tables import Table, numeric_columns

__all__ = ["Figure", "Raw", "Section", "Page", "render_html", "render_md", "png_size", "FOLD"]

#: rows of a table shown before the rest is folded
FOLD = 10
#: width of the page's column, CSS pixels
COLUMN = 1100


@dataclass
class Figure:
    """A drawn figure: its identifier, file (beside the page), title, caption and pixel size."""

    name: str
    file: str
    title: str
    caption: str
    id: str
    width: int = 0
    height: int = 0


@dataclass
class Raw:
    """A block rendered by its owner: HTML and the Markdown lines of the same content."""

    html: str
    md: list[str]


@dataclass
class Section:
    id: str
    heading: str
    intro: str = ""
    blocks: list = field(default_factory=list)  # Figure | Table | Raw
    children: list[Section] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.blocks and all(c.empty() for c in self.children)


@dataclass
class Page:
    title: str
    paragraph: str
    links: list[tuple[str, str, str]]  # (href, text, what), already checked to exist
    sections: list[Section]


def png_size(path: str | Path) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header; (0, 0) when not a PNG."""
    with open(path, "rb") as fh:
        head = fh.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    return struct.unpack(">II", head[16:24])


STYLE = (
    f"body{{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:{COLUMN}px;margin:0 auto;"
    "padding:0 16px 40px;line-height:1.45;color:#222;text-align:left}"
    "h1{margin-bottom:4px}h2{border-bottom:1px solid #ddd;padding-bottom:2px;margin-top:36px}"
    "h3{margin-top:28px}h4{margin:20px 0 6px}"
    "table{border-collapse:collapse;font-size:13px;margin:6px 0}"
    "th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}td:first-child{white-space:nowrap}.wide{overflow-x:auto}"
    "td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "figure{margin:8px 0 16px}figure img{max-width:100%;height:auto;border:1px solid #eee}"
    "figcaption,.caption{font-size:13px;color:#444}small,.details{font-size:12px;color:#555}"
    "ul.details{margin:4px 0 0;padding-left:16px}nav.toc{background:#fafafa;border:1px solid #e4e4e4;"
    "padding:4px 16px;margin:12px 0}nav.toc ol{margin:2px 0;padding-left:20px}"
    "details{margin:4px 0 10px}summary{cursor:pointer;color:#0b5394}pre{font-size:12px;overflow-x:auto}"
    "a.csv{font-size:12px;font-weight:normal;margin-left:6px}"
)


# ---------------------------------------------------------------- HTML


def _e(text) -> str:
    return html.escape(str(text))


_NUM = ' class="num"'


def _rows_html(rows: list[list[str]], numeric: list[bool]) -> str:
    return "".join(
        "<tr>" + "".join(f"<td{_NUM if numeric[i] else ''}>{_e(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )


def _table_html(t: Table) -> str:
    csv = f'<a class="csv" href="{_e(t.csv)}">csv</a>' if t.csv else ""
    if t.constant:
        return (
            f'<p id="{_e(t.id)}"><b>{_e(t.heading)}</b>: {_e(t.constant)}'
            + (f" {_e(t.caption)}" if t.caption else "")
            + "</p>"
        )
    numeric = numeric_columns(t.rows)
    head = "<tr>" + "".join(f"<th{_NUM if numeric[i] else ''}>{_e(c)}</th>" for i, c in enumerate(t.rows[0])) + "</tr>"
    body = t.rows[1:]
    out = [
        f'<h4 id="{_e(t.id)}">{_e(t.heading)}{csv}</h4>',
        f'<div class="wide"><table><thead>{head}</thead><tbody>{_rows_html(body[:FOLD], numeric)}</tbody>'
        "</table></div>",
    ]
    if len(body) > FOLD:
        out.append(
            f"<details><summary>Show the other {len(body) - FOLD} of {len(body)} rows</summary>"
            f'<div class="wide"><table><thead>{head}</thead><tbody>{_rows_html(body[FOLD:], numeric)}</tbody>'
            "</table></div></details>"
        )
    if t.caption:
        out.append(f'<p class="caption">{_e(t.caption)}</p>')
    return "".join(out)


def _figure_html(f: Figure) -> str:
    size = f' width="{f.width}" height="{f.height}"' if f.width and f.height else ""
    return (
        f'<h4 id="{_e(f.id)}">{_e(f.title)}</h4><figure><a href="{_e(f.file)}" title="full size">'
        f'<img src="{_e(f.file)}" alt="{_e(f.title)}"{size} loading="lazy"></a>'
        f"<figcaption>{_e(f.caption)} <small>(<code>{_e(f.name)}</code>; click for full size)</small>"
        "</figcaption></figure>"
    )


def _block_html(b) -> str:
    if isinstance(b, Table):
        return _table_html(b)
    if isinstance(b, Figure):
        return _figure_html(b)
    return b.html


def _section_html(s: Section, level: int) -> str:
    out = [f'<h{level} id="{_e(s.id)}">{_e(s.heading)}</h{level}>']
    if s.intro:
        out.append(f"<p>{_e(s.intro)}</p>")
    out += [_block_html(b) for b in s.blocks]
    out += [_section_html(c, level + 1) for c in s.children if not c.empty()]
    return "".join(out)


def _toc_html(sections: list[Section]) -> str:
    def items(ss: list[Section]) -> str:
        return "".join(
            f'<li><a href="#{_e(s.id)}">{_e(s.heading)}</a>'
            + (f"<ol>{items(kids)}</ol>" if (kids := [c for c in s.children if not c.empty()]) else "")
            + "</li>"
            for s in ss
            if not s.empty()
        )

    return f'<nav class="toc" id="contents"><b>Contents</b><ol>{items(sections)}</ol></nav>'


def render_html(page: Page, *, extra_css: str = "") -> str:
    body = [f'<h1 id="top">{_e(page.title)}</h1>', f"<p>{_e(page.paragraph)}</p>"]
    if page.links:
        body.append(
            "<p>"
            + " ".join(f'<a href="{_e(href)}">{_e(text)}</a> ({_e(what)}).' for href, text, what in page.links)
            + "</p>"
        )
    body.append(_toc_html(page.sections))
    body += [_section_html(s, 2) for s in page.sections if not s.empty()]
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(page.title)}</title>'
        f"<style>{STYLE}{extra_css}</style></head><body>{''.join(body)}</body></html>\n"
    )


# ---------------------------------------------------------------- Markdown


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_rows(rows: list[list[str]]) -> list[str]:
    numeric = numeric_columns(rows)
    out = [
        "| " + " | ".join(_md_cell(c) for c in rows[0]) + " |",
        "|" + "".join("---:|" if n else "---|" for n in numeric),
    ]
    return out + ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows[1:]]


def _anchor(id_: str) -> str:
    return f'<a id="{id_}"></a>'


def _table_md(t: Table) -> list[str]:
    if t.constant:
        return [_anchor(t.id), "", f"**{t.heading}**: {t.constant}" + (f" {t.caption}" if t.caption else ""), ""]
    out = [_anchor(t.id), "", f"#### {t.heading}", ""] + _md_rows(t.rows[: FOLD + 1]) + [""]
    if t.n_rows > FOLD:  # every row is in the page: the rest in a <details> that code hosts render folded
        out += [
            f"<details><summary>Show the other {t.n_rows - FOLD} of {t.n_rows} rows"
            + (f" (also in [{t.csv}]({t.csv}))" if t.csv else "")
            + "</summary>",
            "",
        ]
        out += _md_rows([t.rows[0]] + t.rows[FOLD + 1 :]) + ["", "</details>", ""]
    if t.caption:
        out += [t.caption, ""]
    return out


def _figure_md(f: Figure) -> list[str]:
    return [
        _anchor(f.id),
        "",
        f"#### {f.title}",
        "",
        f"[![{f.title}]({f.file})]({f.file})",
        "",
        f"{f.caption} (`{f.name}`)",
        "",
    ]


def _section_md(s: Section, level: int) -> list[str]:
    out = [_anchor(s.id), "", f"{'#' * level} {s.heading}", ""]
    if s.intro:
        out += [s.intro, ""]
    for b in s.blocks:
        out += _table_md(b) if isinstance(b, Table) else _figure_md(b) if isinstance(b, Figure) else b.md + [""]
    for c in s.children:
        if not c.empty():
            out += _section_md(c, level + 1)
    return out


def _toc_md(sections: list[Section], depth: int = 0) -> list[str]:
    out = []
    for i, s in enumerate([s for s in sections if not s.empty()], 1):
        out.append(f"{'   ' * depth}{i}. [{s.heading}](#{s.id})")
        out += _toc_md(s.children, depth + 1)
    return out


def render_md(page: Page) -> str:
    md = [f"# {page.title}", "", page.paragraph, ""]
    if page.links:
        md += [" ".join(f"[{text}]({href}) ({what})." for href, text, what in page.links), ""]
    md += ["**Contents**", ""] + _toc_md(page.sections) + [""]
    for s in page.sections:
        if not s.empty():
            md += _section_md(s, 2)
    return "\n".join(md).rstrip("\n") + "\n"
