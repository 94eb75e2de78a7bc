"""The report page's structure (evolution.report.write) on a synthetic metrics store whose
answers are known by construction: a scorecard whose verdicts differ, a table of 25 rows,
tables of one constant, attributes that carry absolute paths under the workdir and outside
it. The written HTML is parsed: every anchor the page links to is on the page, every file
it links to is in the report directory, every figure links to itself at full size."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from evolution.analyses.base import Analysis
from evolution.metrics.results import write_metrics
from evolution.report.scorecard import FAILS, HOLDS, NA, Finding

MODELS = ["mt", "lm", "mlm", "mt-seed1", "mt-tokdrop"]
OBJECTIVE = {m: m.split("-")[0] for m in MODELS}
RUNS = {
    m: {"objective": OBJECTIVE[m], "seed": 1 if "seed1" in m else 0, "token_dropout": 0.1 if "tokdrop" in m else 0.0}
    for m in MODELS
}
L = 4
LONG_ROWS = 25  # rows of the long table (more than the 10 shown)
OUTSIDE = "/opt/elsewhere/data/sword"  # an absolute path outside the workdir


def _mi() -> xr.Dataset:
    targets = ["input", "masked_input"]
    mi = np.full((len(MODELS), L, len(targets), 2), np.nan)
    for i in range(len(MODELS)):
        mi[i, :, 0, 0] = mi[i, :, 0, 1] = 3.0 - 0.1 * np.arange(L) - 0.01 * i
    mi[MODELS.index("mlm"), :, 1, :] = (0.5 - 0.05 * np.arange(L))[:, None]  # masked_input: the MLM only; the
    # other rows are NaN and left out
    shape = (len(MODELS), L, len(targets))
    return xr.Dataset(
        {
            "mi": (("model", "layer", "target", "restart"), mi),
            "mi_shuffled": (("model", "layer", "target"), np.full(shape, 0.1)),
            "k": (("model", "layer", "target"), np.full(shape, 30.0)),
            "n": (("model", "layer", "target"), np.full(shape, 1234.0)),
            "entropy": (("model", "target"), np.full((len(MODELS), 2), 3.5)),
        },
        coords={"model": MODELS, "layer": np.arange(L), "target": targets, "restart": [0, 1]},
    )


def _neighbors() -> xr.Dataset:
    measures = ["same_token", "same_pos_chance", "same_deprel_chance"]
    v = np.zeros((len(MODELS), L, len(measures)))
    v[..., 0] = 1.0 - 0.05 * np.arange(L)[None, :] - 0.01 * np.arange(len(MODELS))[:, None]
    v[..., 1] = 0.481  # one constant everywhere
    v[..., 2] = np.linspace(0.3, 0.34, len(MODELS))[:, None]  # layer-independent, one value per model
    iv = np.stack([v - 0.01, v + 0.01], axis=-1)
    return xr.Dataset(
        {"value": (("model", "layer", "measure"), v), "interval": (("model", "layer", "measure", "bound"), iv)},
        coords={"model": MODELS, "layer": np.arange(L), "measure": measures, "bound": ["low", "high"]},
    )


def _write_store(workdir: Path) -> Path:
    attrs = {
        "objectives": OBJECTIVE,
        "runs": RUNS,
        "seed": 0,
        "representations": f"{workdir}/reps.zarr",
        "notes": [f"read {workdir}/corpus/abc/sentences.txt", f"treebank at {OUTSIDE}/ud.conllu"]
        + [f"note {i}" for i in range(12)],
        "config": {"tokens": {"top": 50}, "heads": {"treebank": f"{OUTSIDE}/ud.conllu"}},
        "versions": {
            "code": "abc123def456",
            "python": "3.11.7",
            "torch": "2.13.0",
            "numpy": "2.4.6",
            "platform": "Linux",
        },
        "extract_keys": {m: f"{i:016x}" for i, m in enumerate(MODELS)},
    }
    path = workdir / "metrics.zarr"
    write_metrics(
        path, {"mi": _mi().assign_attrs(attrs), "neighbors": _neighbors().assign_attrs(attrs)}, fingerprint="f" * 16
    )
    return path


def _line_figure(path):
    from evolution.analyses.plotting import plt

    fig, ax = plt().subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    return fig


def _wide_figure(path):
    from evolution.analyses.plotting import plt

    fig, ax = plt().subplots(figsize=(20, 1.5))
    ax.plot([0, 1], [1, 0])
    return fig


class Extra(Analysis):
    """Stands in for the analyses: a known and an unknown figure, a long and a constant table."""

    name = "extra"
    figures = {
        "mi": (_line_figure, "MI caption."),
        "heads_entropy": (_wide_figure, "Wide caption."),
        "mean_norm": (_line_figure, "Mean norm caption."),
        "absent": (lambda p: None, "Never drawn."),
    }

    def tables(self, path):
        long_rows = [["model", "relation", "accuracy"]] + [
            [f"m{i}", f"rel{i}", f"{i / 100:.2f}"] for i in range(LONG_ROWS)
        ]
        flat = [["model", "0", "1", "2"]] + [[m, "7.00", "7.00", "7.00"] for m in MODELS]
        return [("Dependency heads", long_rows, "Long caption."), ("Flat quantity", flat, "")]


def _finding(number, verdict, *, part="", figure="", paper="", details=()):
    return Finding(
        number,
        f"claim {number}{part}",
        f"rule {number}",
        f"measured {number}",
        verdict,
        why=f"why {number}" if verdict != HOLDS else "",
        paper=paper,
        figure=figure,
        details=details,
        part=part,
    )


#: 5 hold, 4 not measurable, 3 fail; a further line (11b) that holds and must not be counted
VERDICTS = {
    1: HOLDS,
    2: NA,
    3: FAILS,
    4: HOLDS,
    5: HOLDS,
    6: NA,
    7: FAILS,
    8: HOLDS,
    9: NA,
    10: NA,
    11: HOLDS,
    12: FAILS,
}
FINDINGS = [
    _finding(
        n,
        v,
        figure={1: "mi", 2: "absent", 3: "nonexistent"}.get(n, ""),
        paper="0.60 vs 0.53" if n == 1 else "",
        details=("detail a", "detail b") if n == 1 else (),
    )
    for n, v in VERDICTS.items()
]
FINDINGS.insert(11, _finding(11, HOLDS, part="b"))

TRAINING = {
    "runs": {m: RUNS[m] for m in ("mt", "lm")},
    "timings": {"mt": {"seconds": 600.0, "updates": 100}, "lm": {"updates": 100}},
    "train_seconds": 0.0,
    "evaluation": {"mt": {"bleu": 12.345}, "lm": {"ppl": 40.0}, "unigram_ppl": 500.0},
    "config": {"layers": 4},
    "key": "trainkey",
}

CORPUS = {
    "key": "corpuskey",
    "inputs": {"a": "h1"},
    "analysed_split": "test",
    "languages": ["en", "es"],
    "config": {"source": "bible", "modules": ["engWEB", "spaRV"], "sword_root": OUTSIDE, "annotated": "ud-ewt-test"},
    "splits": {"train": {"pairs": 900}, "test": {"pairs": 80, "source_words": 1600, "group_names": ["Josh"]}},
    "annotated": {"first": 80, "n_sentences": 20, "n_words": 300},
    "n_sentences": 100,
    "source": f"{OUTSIDE}:engWEB+spaRV",
}


class Parsed(HTMLParser):
    """Ids, links, images (with the link around each), headings, the table of contents, and
    whether every element is closed in order."""

    VOID = {"meta", "img", "br", "hr", "input", "link", "col", "source"}

    def __init__(self, text: str):
        super().__init__()
        self.ids, self.hrefs, self.srcs, self.imgs, self.toc = [], [], [], [], []
        self.headings: list[tuple[str, str, str]] = []  # (tag, id, text)
        self.stack: list[tuple[str, dict]] = []
        self.errors: list[str] = []
        self._heading = None
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed {[t for t, _ in self.stack]}")

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
            if any(t == "nav" for t, _ in self.stack):
                self.toc.append(a["href"])
        if tag == "img":
            self.srcs.append(a["src"])
            link = next((attrs_ for t, attrs_ in reversed(self.stack) if t == "a"), None)
            self.imgs.append((a, link))
        if tag in ("h2", "h3"):
            self._heading = [tag, a.get("id", ""), ""]
        if tag not in self.VOID:
            self.stack.append((tag, a))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1][0] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag in ("h2", "h3") and self._heading:
            self.headings.append(tuple(self._heading))
            self._heading = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading[2] += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    import evolution.analyses as analyses
    from evolution.report.write import write_report

    workdir = tmp_path_factory.mktemp("run")
    path = _write_store(workdir)
    views = lambda p: p.write_text("<!doctype html><title>views</title>", encoding="utf-8")  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analyses, "ANALYSES", (Extra(),))
        page = write_report(
            path,
            workdir / "report",
            title="synthetic",
            training=TRAINING,
            corpus=CORPUS,
            findings=FINDINGS,
            pages={"views.html": views},
            links=[("views.html", "Attention views", "head view"), ("missing.html", "Missing page", "never written")],
        )
        again = workdir / "again"
        write_report(
            path,
            again,
            title="synthetic",
            training=TRAINING,
            corpus=CORPUS,
            findings=FINDINGS,
            pages={"views.html": views},
            links=[("views.html", "Attention views", "head view")],
            workdir=workdir,
        )
    out = page.parent
    text = page.read_text(encoding="utf-8")
    return {
        "dir": out,
        "workdir": workdir,
        "html": text,
        "md": (out / "report.md").read_text(encoding="utf-8"),
        "parsed": Parsed(text),
        "again": again,
        "store": path,
    }


def test_the_html_parses_with_every_element_closed_and_unique_ids(report):
    p = report["parsed"]
    assert p.errors == []
    assert len(p.ids) == len(set(p.ids))


def test_summary_counts_the_papers_claims_by_verdict(report):
    expected = "5 of 12 claims hold; 4 not measurable here; 3 do not hold"
    assert f"**{expected}.**" in report["md"]
    text = re.sub(r"<[^>]+>", "", report["html"])
    assert "5 of 12 claims hold" in text and "4 not measurable here" in text and "3 do not hold" in text
    # the summary comes before the first claim's row
    assert report["html"].index("5 of 12 claims hold") < report["html"].index("claim 1<")


def test_each_verdict_has_its_own_colour_and_its_word(report):
    html = report["html"]
    colours = dict(re.findall(r"\.(v-holds|v-fails|v-na)\{background:(#[0-9A-Fa-f]{6})", html))
    assert set(colours) == {"v-holds", "v-fails", "v-na"} and len(set(colours.values())) == 3
    rows = re.findall(r'<tr class="(?:claim|part)" id="claim-([^"]+)">(.*?)</tr>', html)
    assert [label for label, _ in rows] == [f.label for f in FINDINGS]
    cls = {HOLDS: "v-holds", FAILS: "v-fails", NA: "v-na"}
    for (label, row), f in zip(rows, FINDINGS, strict=True):
        badge = re.search(r'<span class="verdict (v-[a-z]+)">[^<]*?([a-z ]+)</span>', row)
        assert badge.group(1) == cls[f.verdict] and badge.group(2).strip() == f.verdict, label
    # markdown: the verdicts in words, one row per finding
    md_rows = [line for line in report["md"].splitlines() if re.match(r"\| (\[)?\d+b?", line)]
    assert len(md_rows) == len(FINDINGS)
    assert [r.rstrip(" |").split(" | ")[-1].split(" (")[0] for r in md_rows] == [f.verdict for f in FINDINGS]


def test_paper_value_and_details_stand_beside_the_measured_value(report):
    row = re.search(r'<tr class="claim" id="claim-1">(.*?)</tr>', report["html"]).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[2] == "0.60 vs 0.53" and cells[3].startswith("measured 1")
    assert '<ul class="details"><li>detail a</li><li>detail b</li></ul>' in cells[3]


def test_a_claim_links_to_its_figure_only_when_drawn(report):
    html, p = report["html"], report["parsed"]
    row = lambda n: re.search(rf'<tr class="claim" id="claim-{n}">(.*?)</tr>', html).group(1)  # noqa: E731
    assert '<a href="#fig-mi">1</a>' in row(1) and "fig-mi" in p.ids
    assert "href" not in row(2) and "href" not in row(3)  # "absent" drew nothing, "nonexistent" is no figure
    assert not (report["dir"] / "absent.png").exists()


def test_every_link_and_image_resolves(report):
    p, out = report["parsed"], report["dir"]
    ids = set(p.ids)
    for href in p.hrefs + p.srcs:
        if href.startswith("#"):
            assert href[1:] in ids, href
        else:
            assert "/" not in href and (out / href).is_file(), href
    assert "views.html" in p.hrefs and "missing.html" not in report["html"]
    assert "[Attention views](views.html)" in report["md"] and "missing.html" not in report["md"]
    for target in re.findall(r"\]\(([^)#][^)]*)\)", report["md"]):
        assert (out / target).is_file(), target
    for anchor in re.findall(r"\]\(#([^)]+)\)", report["md"]):
        assert f'<a id="{anchor}"></a>' in report["md"], anchor


def test_the_table_of_contents_lists_every_section_and_subsection(report):
    p = report["parsed"]
    assert all(id_ for _, id_, _ in p.headings)
    assert p.toc == [f"#{id_}" for _, id_, _ in p.headings]
    h2 = [text for tag, _, text in p.headings if tag == "h2"]
    assert h2[0] == "Findings scorecard" and h2[1] == "Trained models" and h2[-1] == "Provenance"
    assert h2.index("Representations (Voita, Sennrich & Titov 2019)") < h2.index("Attention heads") < h2.index("Other")


def test_markdown_has_the_same_sections_as_the_html(report):
    md = [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#{2,3}) (.+)$", report["md"], re.M)]
    html = [(int(tag[1]), text) for tag, _, text in report["parsed"].headings]
    assert md == html


def test_figures_sit_under_human_headings_and_unknown_ones_under_other(report):
    html = report["html"]
    assert html.index('id="mi"') < html.index('id="fig-mi"') < html.index('id="neighbours"')
    assert html.index('id="heads-statistics"') < html.index('id="fig-heads-entropy"') < html.index('id="other"')
    assert html.index('id="other"') < html.index('id="fig-mean-norm"') < html.index('id="notes"')
    assert '<h4 id="fig-mean-norm">Mean norm</h4>' in html
    assert '<h4 id="tab-dependency-heads">' in html
    assert html.index('id="heads-dependency"') < html.index('id="tab-dependency-heads"') < html.index('id="other"')


def test_every_figure_links_to_itself_at_its_natural_size(report):
    from evolution.report.page import png_size

    p, out = report["parsed"], report["dir"]
    assert len(p.imgs) == 3  # mi, heads_entropy, mean_norm; "absent" drew nothing
    for img, link in p.imgs:
        assert link is not None and link["href"] == img["src"]
        w, h = png_size(out / img["src"])
        assert (int(img["width"]), int(img["height"])) == (w, h)  # never upscaled: max-width 100% shrinks only
    wide = next(img for img, _ in p.imgs if img["src"] == "heads_entropy.png")
    assert int(wide["width"]) > 1100
    assert re.search(r"figure img\{max-width:100%;height:auto", report["html"])


def test_long_tables_fold_after_ten_rows_and_constant_tables_are_one_sentence(report):
    html, md, out = report["html"], report["md"], report["dir"]
    block = html[html.index('<h4 id="tab-dependency-heads">') :]
    block = block[: block.index("</details>")]
    shown, folded = block.split("<details>")
    assert [f"m{i}" for i in range(10)] == re.findall(r"<td>(m\d+)</td>", shown)
    assert [f"m{i}" for i in range(10, LONG_ROWS)] == re.findall(r"<td>(m\d+)</td>", folded)
    assert f"Show the other {LONG_ROWS - 10} of {LONG_ROWS} rows" in folded
    md_block = md[md.index("#### Dependency heads") :]
    md_block = md_block[: md_block.index("Long caption.")]
    md_shown, md_folded = md_block.split("<details>")
    assert re.findall(r"^\| (m\d+) ", md_shown, re.M) == [f"m{i}" for i in range(10)]
    assert re.findall(r"^\| (m\d+) ", md_folded, re.M) == [f"m{i}" for i in range(10, LONG_ROWS)]
    assert f"Show the other {LONG_ROWS - 10} of {LONG_ROWS} rows" in md_folded
    assert (out / "tab-dependency-heads.csv").read_text().count("\n") == LONG_ROWS + 1
    # one constant in every cell: a sentence, no table
    assert re.search(r'<p id="tab-flat-quantity"><b>Flat quantity</b>: 7\.00 in every cell', html)
    assert "#### Flat quantity" not in md and "**Flat quantity**: 7.00 in every cell" in md
    assert "0.481 for every model and layer" in html
    # layer-independent values (one per model): one sentence naming each model's value
    assert "the same at every layer: mt 0.300, lm 0.310, mlm 0.320, mt-seed1 0.330, mt-tokdrop 0.340" in html
    # rows that are NaN everywhere are left out: masked_input has the MLM only
    mi = html[html.index("MI with the token fed") :]
    assert re.findall(r"<td>([a-z-0-9]+)</td><td class=\"num\">", mi[: mi.index("</table>")]) == ["mlm"]


def test_text_is_left_aligned_and_only_numeric_columns_right_aligned(report):
    html = report["html"]
    assert re.search(r"th,td\{[^}]*text-align:left", html) and "td.num,th.num{text-align:right" in html
    block = html[html.index('<h4 id="tab-dependency-heads">') :]
    first = re.search(r"<tr><td>m0</td>(.*?)</tr>", block).group(1)
    assert first == '<td>rel0</td><td class="num">0.00</td>'


def test_no_absolute_path_on_the_page_paths_relative_to_the_workdir(report):
    out, workdir = report["dir"], report["workdir"]
    files = [f for f in out.iterdir() if f.suffix in (".html", ".md", ".json", ".csv")]
    assert {"report.html", "report.md", "provenance.json", "scorecard.json"} <= {f.name for f in files}
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert str(workdir) not in text and "/opt/" not in text, f.name
        assert not re.search(r"(?<![\w.:/<~-])/[\w.-]+/[\w.-]+", text), (
            f.name,
            re.search(r"(?<![\w.:/<~-])/[\w.-]+/[\w.-]+", text),
        )
    html = report["html"]
    assert "<td>representations</td><td>reps.zarr</td>" in html
    assert "read corpus/abc/sentences.txt" in html and "treebank at …/ud.conllu" in html
    record = json.loads((out / "provenance.json").read_text())
    assert record["representations"] == "reps.zarr" and record["config"]["heads"]["treebank"] == "…/ud.conllu"


def test_the_paragraph_says_what_was_run_on_what_without_raw_dicts(report):
    p = re.search(r"</h1><p>(.*?)</p>", report["html"]).group(1)
    assert "{" not in p and "}" not in p
    assert "5 models of 3 objectives" in p
    assert "translation (MT): mt (seed 0), mt-seed1 (seed 1), mt-tokdrop (seed 0, token dropout 0.1)" in p
    assert "masked language model (MLM): mlm (seed 0)" in p
    assert "the Bible (SWORD modules engWEB, spaRV), en → es" in p
    assert "test split (Josh): 80 sentences, 1,600 en words" in p and "20 annotated sentences of ud-ewt-test" in p
    assert "MI on up to 1,234 occurrences of the 50 most frequent types" in p
    assert report["html"].count("</h1><p>") == 1 and "Objectives:" not in report["html"]


def test_training_total_is_written_only_when_stored_and_consistent(report):
    from evolution.report.tables import training_caption, training_table

    html = report["html"]
    assert "0.0 minutes" not in html and "in all" not in html  # train_seconds 0: not measured
    rows, _ = training_table(TRAINING)
    assert rows[1][5] == "10.0" and rows[2][5] == ""  # lm's time is not stored: blank, not nan
    ok = dict(TRAINING, train_seconds=900.0)
    assert "Training and data preparation took 15.0 minutes in all." in training_caption(ok)
    short = dict(TRAINING, train_seconds=300.0)  # below the longest run (600 s): not a total
    assert "in all" not in training_caption(short)
    resumed = dict(TRAINING, timings={"mt": {"seconds": 60.0, "updates": 100, "resumed_from": 40}})
    assert training_table(resumed)[0][1][5] == "1.0*" and "mt at update 40" in training_caption(resumed)


def test_provenance_is_a_short_table_with_the_full_record_folded(report):
    html = report["html"]
    prov = html[html.index('<h2 id="provenance">') :]
    assert "<td>code version</td><td>abc123def456</td>" in prov
    assert "<td>libraries</td><td>python 3.11.7, torch 2.13.0, numpy 2.4.6</td>" in prov
    assert "<td>seed</td><td>0</td>" in prov and "<td>metrics store key</td><td>ffffffffffffffff</td>" in prov
    assert "<td>corpus key</td><td>corpuskey" in prov and "<td>training key</td><td>trainkey" in prov
    assert re.search(r'<details><summary>The full record \(<a href="provenance.json">', prov)
    assert prov.index("<details>") < prov.index("<pre>") < prov.index("</details>")
    notes = html[html.index('<h2 id="notes">') : html.index('<h2 id="provenance">')]
    assert notes.count("<li>") == 14 and "Show the other 4 of 14 notes" in notes
    md_notes = report["md"][report["md"].index("## Notes") :]
    md_notes = md_notes[: md_notes.index("## Provenance")]
    assert md_notes.count("\n- ") == 14 and "Show the other 4 of 14 notes" in md_notes  # every note in both pages


def test_the_report_is_deterministic(report):
    again = report["again"]
    assert (again / "report.html").read_text() == report["html"]
    assert (again / "report.md").read_text() == report["md"]


def test_the_summary_counts_the_stores_own_scorecard(tmp_path, monkeypatch):
    """Without ``findings``: the counts are those of scorecard.json (the scorecard of the store)."""
    import evolution.analyses as analyses
    from evolution.report.write import write_report

    monkeypatch.setattr(analyses, "ANALYSES", ())
    path = _write_store(tmp_path)
    write_report(path, tmp_path / "report")
    card = [f for f in json.loads((tmp_path / "report" / "scorecard.json").read_text()) if not f.get("part")]
    counts = {v: sum(f["verdict"] == v for f in card) for v in (HOLDS, NA, FAILS)}
    assert (
        f"**{counts[HOLDS]} of {len(card)} claims hold; {counts[NA]} not measurable here; "
        f"{counts[FAILS]} do not hold.**"
    ) in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize(
    "name, section, title",
    [
        ("similarity_pwcca", "similarity", "Distances between layers and models (PWCCA)"),
        ("change_pos_pwcca", "change", "Change between adjacent layers by POS tag (PWCCA)"),
        ("change_pwcca", "change", "Change between adjacent layers by frequency (PWCCA)"),
        ("tsne_be_masked", "tsne", "t-SNE of the 'be' selection at masked positions"),
        ("tsne_is_deprel", "tsne", "t-SNE of the 'is_deprel' selection"),
        ("heads_dependency", "heads-dependency", "Dependency relations by head"),
        ("heads_pruning_layers", "heads-importance", "Heads kept per attention type and layer"),
        ("mean_norm", "other", "Mean norm"),
    ],
)
def test_figure_identifiers_map_to_sections_and_titles(name, section, title):
    from evolution.report.sections import figure_place

    spec, got = figure_place(name)
    assert (spec.id, got) == (section, title)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{w}/reps.zarr", "reps.zarr"),
        ("at {w}: done", "at .: done"),
        ('"{w}/a/b.txt"', '"a/b.txt"'),
        ("{w}-other/x.txt", "…/x.txt"),  # a sibling of the workdir is not under it
        ("/srv/data/sword and /srv", "…/sword and /srv"),  # one component: not told from a word
        ("to </s> and 1/2 and and/or, https://example.org/a/b", "to </s> and 1/2 and and/or, https://example.org/a/b"),
    ],
)
def test_scrub_paths(tmp_path, text, expected):
    from evolution.report.paths import scrub_paths

    assert scrub_paths(text.format(w=tmp_path), tmp_path) == expected
