"""The static report: ``report.md`` and ``report.html`` beside the figures.

The page (:mod:`evolution.report.page`) opens with a title, one paragraph on what was
run on what (:mod:`evolution.report.summary`) and a table of contents; then the
findings scorecard with its summary (:mod:`evolution.report.findings`), the trained
models, the representation and head analyses under human headings
(:mod:`evolution.report.sections`), the head verdicts (:mod:`evolution.report.heads_card`)
first among the head analyses, notes, and the provenance. No link is written
whose target is not in the report directory or on the page, and no absolute path is
written (:mod:`evolution.report.paths`).
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from evolution.atomic import replace_dir
from evolution.report.figures import draw_all
from evolution.report.findings import css as findings_css
from evolution.report.findings import scorecard_html, scorecard_md
from evolution.report.heads_card import has_head_groups, head_verdicts
from evolution.report.page import FOLD, Figure, Page, Raw, Section, png_size, render_html, render_md
from evolution.report.paths import scrub_paths
from evolution.report.scorecard import scorecard
from evolution.report.scorecard.base import Run
from evolution.report.sections import GROUPS, SECTIONS, figure_place, slug, table_place
from evolution.report.summary import group_attrs, provenance, run_paragraph
from evolution.report.tables import Table, constant_value, representation_tables, training_table

__all__ = ["write_report", "training_table"]

logger = logging.getLogger(__name__)

SCORECARD_TEXT = (
    "Each verdict is computed from this run's stored numbers by the rule under its claim "
    "(evolution/report/scorecard/), never by hand. Not measurable here: the run lacks what the claim "
    "needs, or the difference is within the uncertainty. The paper's values are read off its figures."
)

HEAD_VERDICTS_TEXT = (
    "Each verdict is computed from this run's stored head statistics by the rule under its claim "
    "(evolution/report/heads_card/), model by model: it holds where it holds for every model it "
    "concerns, and the models without the numbers it needs are named. Not measurable here: the run "
    "lacks what the claim needs, or a model's numbers point the claimed way within the test's "
    "uncertainty. Counted apart from the 12 representation claims."
)


class _Ids:
    """Unique anchors: a repeated one gets -2, -3, ..."""

    def __init__(self, taken: Iterable[str] = ()):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        out, n = base, 1
        while out in self.taken:
            n += 1
            out = f"{base}-{n}"
        self.taken.add(out)
        return out


def _analysis_tables(path) -> list[Table]:
    from evolution.analyses import ANALYSES

    out = []
    for analysis in ANALYSES:
        for heading, rows, caption in analysis.tables(path):
            t = Table(heading, rows, caption, section=table_place(heading, analysis.name).id)
            value = constant_value(rows)
            if value is not None:
                t.constant = f"{value} in every cell ({t.n_rows} rows, {len(rows[0]) - 1} columns)."
            out.append(t)
    return out


def _notes(attrs: dict[str, dict]) -> list[str]:
    return list(dict.fromkeys(str(n) for a in attrs.values() for n in (a.get("notes") or [])))


def _analysis_sections(figures: list[Figure], tables: list[Table]) -> list[Section]:
    """The groups of :data:`~evolution.report.sections.GROUPS` with their subsections, figures
    first, then tables; empty ones are dropped when rendered."""
    groups = {gid: Section(gid, heading) for gid, heading in GROUPS.items()}
    subs = {}
    for spec in SECTIONS:
        if spec.id == spec.group:  # a group with no subsections ("Other")
            subs[spec.id] = groups[spec.group]
        else:
            subs[spec.id] = Section(spec.id, spec.heading, intro=spec.intro)
            groups[spec.group].children.append(subs[spec.id])
    for f in figures:
        subs[figure_place(f.name)[0].id].blocks.append(f)
    for t in tables:
        subs[t.section or table_place(t.heading).id].blocks.append(t)
    return list(groups.values())


def write_report(
    metrics_path: str | Path,
    out_dir: str | Path,
    *,
    title: str = "evolution report",
    training: dict | None = None,
    links: Iterable[tuple[str, str, str]] = (),
    corpus: dict | None = None,
    pages: dict[str, Callable[[Path], object]] | None = None,
    workdir: str | Path | None = None,
    findings: list | None = None,
) -> Path:
    """Draw every figure and write ``report.md`` and ``report.html`` into ``out_dir``
    (written under a temporary name, then moved into place). Returns the HTML file.

    ``training``: the train stage's summary (``eval.json``); ``corpus``: the corpus stage's
    ``meta.json`` (what was analysed); ``pages``: file name -> a function that writes that file
    (given its path) into the report directory before the page, e.g. ``views.html``;
    ``links``: (file, text, what it is) listed under the title, each only when the file is in
    the report directory; ``workdir``: paths on the page are shown relative to it (default: the
    parent of ``out_dir``); ``findings``: the scorecard (default:
    :func:`evolution.report.scorecard.scorecard` of the store)."""
    out_dir = Path(out_dir)
    workdir = Path(workdir) if workdir is not None else Path(out_dir).absolute().parent
    with replace_dir(out_dir) as tmp:
        drawn = draw_all(metrics_path, tmp)
        for name, write in (pages or {}).items():
            write(tmp / name)
        ids = _Ids(
            [
                "top",
                "contents",
                "scorecard",
                "head-verdicts",
                "training",
                "notes",
                "provenance",
                *GROUPS,
                *(s.id for s in SECTIONS),
            ]
        )
        figures = []
        for name, file, caption in drawn:
            w, h = png_size(file)
            figures.append(
                Figure(name, Path(file).name, figure_place(name)[1], caption, ids(f"fig-{slug(name)}"), w, h)
            )
        tables = representation_tables(metrics_path) + _analysis_tables(metrics_path)
        attrs = group_attrs(metrics_path)
        anchors = {f.name: f.id for f in figures}
        sections = []
        if findings is not None or set(attrs) & set(Run.GROUPS):
            findings = scorecard(metrics_path) if findings is None else list(findings)
            (tmp / "scorecard.json").write_text(
                scrub_paths(json.dumps([f.as_dict() for f in findings], indent=1), workdir), encoding="utf-8"
            )
            sections.append(
                Section(
                    "scorecard",
                    "Findings scorecard",
                    intro=SCORECARD_TEXT,
                    blocks=[Raw(scorecard_html(findings, anchors), scorecard_md(findings, anchors))],
                )
            )
        else:  # a heads-only run: twelve "not measurable" rows would only hide its head verdicts
            logger.info(
                "report: no representation analysis (%s) in %s: no findings scorecard",
                ", ".join(Run.GROUPS),
                metrics_path,
            )
        if training is not None:
            rows, caption = training_table(training)
            sections.append(Section("training", "Trained models", blocks=[Table("Runs", rows, caption)]))
        verdicts = head_verdicts(metrics_path)
        (tmp / "head_verdicts.json").write_text(
            scrub_paths(json.dumps([f.as_dict() for f in verdicts], indent=1), workdir), encoding="utf-8"
        )
        groups = _analysis_sections(figures, tables)
        if has_head_groups(metrics_path):
            next(g for g in groups if g.id == "heads").children.insert(
                0,
                Section(
                    "head-verdicts",
                    "Head verdicts",
                    intro=HEAD_VERDICTS_TEXT,
                    blocks=[
                        Raw(
                            scorecard_html(
                                verdicts,
                                anchors,
                                title="claim (attention-head papers)",
                                noun="head verdicts",
                                row_id="verdict",
                            ),
                            scorecard_md(
                                verdicts, anchors, title="claim (attention-head papers)", noun="head verdicts"
                            ),
                        )
                    ],
                ),
            )
        sections += groups
        notes = _notes(attrs)
        if notes:
            sections.append(
                Section(
                    "notes", "Notes", intro="What the analyses noted while computing.", blocks=[_notes_block(notes)]
                )
            )
        rows, record = provenance(metrics_path, attrs, workdir=workdir, corpus=corpus, training=training)
        full = scrub_paths(json.dumps(record, indent=1, default=str), workdir)
        (tmp / "provenance.json").write_text(full + "\n", encoding="utf-8")
        sections.append(
            Section(
                "provenance",
                "Provenance",
                blocks=[
                    Table("Versions, seed and keys", rows, "", export=False),
                    Raw(
                        f'<details><summary>The full record (<a href="provenance.json">provenance.json</a>)</summary>'
                        f"<pre>{_esc(full)}</pre></details>",
                        ["The full record: [provenance.json](provenance.json)."],
                    ),
                ],
            )
        )
        for t in (b for s in _walk(sections) for b in s.blocks if isinstance(b, Table)):
            t.id = ids(f"tab-{slug(t.heading)}")
            if not t.constant and t.n_rows and t.export:
                t.csv = f"{t.id}.csv"
                (tmp / t.csv).write_text(scrub_paths(t.to_csv(), workdir), encoding="utf-8")
        shown = []
        for href, text, what in links:
            if (tmp / href).is_file():
                shown.append((href, text, what))
            else:
                logger.warning("report: no link to %s: not in the report directory", href)
        # shipped models may have been trained on another corpus: no "the models train on" sentence
        trained = training is not None and not training.get("shipped")
        page = Page(title, run_paragraph(metrics_path, attrs, corpus=corpus, trained=trained), shown, sections)
        (tmp / "report.md").write_text(scrub_paths(render_md(page), workdir), encoding="utf-8")
        (tmp / "report.html").write_text(
            scrub_paths(render_html(page, extra_css=findings_css()), workdir), encoding="utf-8"
        )
    return out_dir / "report.html"


def _notes_block(notes: list[str]) -> Raw:
    """The notes as a list, those after the first :data:`FOLD` folded."""

    def items(ns) -> str:
        return "".join(f"<li>{_esc(n)}</li>" for n in ns)

    block = f"<ul>{items(notes[:FOLD])}</ul>"
    md = [f"- {n}" for n in notes[:FOLD]]
    if len(notes) > FOLD:
        block += (
            f"<details><summary>Show the other {len(notes) - FOLD} of {len(notes)} notes</summary>"
            f"<ul>{items(notes[FOLD:])}</ul></details>"
        )
        md += ["", f"<details><summary>Show the other {len(notes) - FOLD} of {len(notes)} notes</summary>", ""]
        md += [f"- {n}" for n in notes[FOLD:]] + ["", "</details>"]
    return Raw(block, md)


def _walk(sections: list[Section]):
    for s in sections:
        yield s
        yield from _walk(s.children)


def _esc(text: str) -> str:
    return html.escape(str(text))
