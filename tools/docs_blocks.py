"""The blocks of the docs that quote committed results, written from those results, so that a
recompute cannot leave stale numbers behind. A block sits between two markers in a Markdown file:

    <!-- generated: NAME (python tools/docs_blocks.py) -->
    ...
    <!-- end: NAME -->

    python tools/docs_blocks.py           # rewrite every block from the committed artefacts
    python tools/docs_blocks.py --check   # exit 1, naming the stale blocks, when any differs

``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIBLE_FULL = ROOT / "results" / "bible-full" / "report"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def scorecard_table(report: Path = BIBLE_FULL) -> str:
    """The committed scorecard as a table: claim, verdict, the numbers it read (``measured``)."""
    rows = ["| # | claim | verdict | numbers (`report/scorecard.json`, measured) |", "|---|---|---|---|"]
    for c in json.loads((report / "scorecard.json").read_text(encoding="utf-8")):
        label = f"{c['number']}{c.get('part') or ''}"
        rows.append(f"| {label} | {_cell(c['claim'])} | {c['verdict']} | {_cell(c['measured'])} |")
    return "\n".join(rows)


def head_verdict_table(report: Path = BIBLE_FULL) -> str:
    """The committed head verdicts: claim, verdict, why, and the earlier rule's verdict where kept."""
    rows = ["| # | claim | verdict | why (`report/head_verdicts.json`) |", "|---|---|---|---|"]
    for c in json.loads((report / "head_verdicts.json").read_text(encoding="utf-8")):
        why = c["why"] or "-"
        if c.get("earlier"):
            why += f"; under the earlier rule ({c['earlier']['claim']}): {c['earlier']['verdict']}"
        rows.append(f"| {c['number']} | {_cell(c['claim'])} | {c['verdict']} | {_cell(why)} |")
    return "\n".join(rows)


PROBES_CSV = "tab-attention-parsing-probes-clark-et-al-2019-table-3.csv"
SPEARMAN_CSV = "tab-which-heads-matter-spearman-correlations-between-importance-relevance-and-confidence.csv"


def csv_table(path: Path) -> str:
    """A report table's CSV as a Markdown table, as it is."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return "\n".join(
        ["| " + " | ".join(_cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
        + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]]
    )


def spearman_table(path: Path) -> str:
    """The "Which heads matter" CSV (model, pair, rho, heads) as one row per model, one column per pair."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    value = {(r["model"], r["pair"]): r["Spearman rho"] for r in rows}
    out = ["| model | " + " | ".join(_cell(p) for p in pairs) + " |", "|---|" + "---|" * len(pairs)]
    out += [f"| {m} | " + " | ".join(value.get((m, p), "") for p in pairs) + " |" for m in models]
    return "\n".join(out)


MINILM = ROOT / "results" / "minilm-paper" / "metrics.zarr"


def minilm_heads_table(store: Path = MINILM) -> str:
    """The committed MiniLM store's head statistics per layer (mean over the heads): attention to
    [CLS], [SEP] and punctuation (alpha, and share of ||sum_h alpha f(x)||), entropy, and the
    Spearman correlation of ||f(x)|| with the frequency rank (group ``heads``)."""
    from evolution.metrics.results import open_metrics

    ds = open_metrics(store, "heads").load()
    (model,) = ds.model.values
    ds = ds.sel(model=model)
    uniform = float(ds.value.sel(measure="uniform_entropy").mean())
    lines = [
        ("attention to [CLS] (alpha)", ds.layer_alpha_share.sel(key_type="bos"), 3),
        ("attention to [CLS] (share of \\|\\|sum_h alpha f\\|\\|)", ds.layer_norm_share.sel(key_type="bos"), 3),
        ("attention to [SEP] (alpha)", ds.layer_alpha_share.sel(key_type="eos"), 3),
        ("attention to punctuation (alpha)", ds.layer_alpha_share.sel(key_type="punct"), 3),
        ("attention to punctuation (norm share)", ds.layer_norm_share.sel(key_type="punct"), 3),
        (f"entropy (nats; uniform {uniform:.2f})", ds.value.sel(measure="entropy").mean("head"), 2),
        ("Spearman(\\|\\|f(x)\\|\\|, frequency rank)", ds.spearman.sel(quantity="value_norm"), 2),
    ]
    layers = [int(x) for x in ds.layer.values]
    out = ["| | " + " | ".join(map(str, layers)) + " |", "|---|" + "---|" * len(layers)]
    out += [
        f"| {label} | " + " | ".join(f"{float(v):.{digits}f}" for v in x.sel(layer=layers).values) + " |"
        for label, x, digits in lines
    ]
    return "\n".join(out)


def _count(findings: list[dict]) -> Counter:
    return Counter(c["verdict"] for c in findings)


def summary_sentence(report: Path = BIBLE_FULL) -> str:
    """How many of the paper's 12 claims (11b apart) and of the head verdicts hold."""
    card = json.loads((report / "scorecard.json").read_text(encoding="utf-8"))
    twelve = [c for c in card if not c.get("part")]
    held = [str(c["number"]) for c in twelve if c["verdict"] == "holds"]
    heads = json.loads((report / "head_verdicts.json").read_text(encoding="utf-8"))
    n = _count(heads)
    parts = [
        f"{n[v]} {w}"
        for v, w in (
            ("holds", "hold"),
            ("does not hold", "do not hold"),
            ("not measurable here", "cannot be measured on these models"),
        )
        if n[v]
    ]
    return (
        f"{len(held)} of the paper's {len(twelve)} claims hold (claims {_ranges(held)}), and "
        f"{n['holds'] if n['holds'] else 'none'} of the {len(heads)} head-paper checks "
        f"{'hold' if n['holds'] != 1 else 'holds'} ({', '.join(parts)})."
    )


def _ranges(numbers: list[str]) -> str:
    """ "1-7, 9 and 11" from ["1", ..., "7", "9", "11"]."""
    xs = sorted(int(x) for x in numbers)
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    text = [f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]
    return ", ".join(text[:-1]) + " and " + text[-1] if len(text) > 1 else text[0]


PRUNING_SEEDS = ROOT / "results" / "bible-full" / "pruning-seeds"
SEEDS_CSV = "tab-pruning-over-3-seeds-each-arm-against-its-own-reference-voita-et-al-acl-2019-table-3.csv"


def pruning_seeds(report: Path = PRUNING_SEEDS) -> str:
    """The three-seed pruning comparison (``configs/bible-full-pruning-seeds.yaml``): the report's
    seed table as it is, then head verdict V3 with what it measured and its details."""
    v3 = next(c for c in json.loads((report / "head_verdicts.json").read_text(encoding="utf-8")) if c["number"] == "V3")
    lines = [
        csv_table(report / SEEDS_CSV),
        "",
        f"V3 (`{report.relative_to(ROOT).as_posix()}/head_verdicts.json`): **{v3['verdict']}**"
        + (f" ({v3['measured']})" if v3["measured"] else f": {v3['why']}")
        + ".",
    ]
    lines += [f"- {d}" for d in v3.get("details") or []]
    return "\n".join(lines)


#: block name -> (file, function writing its text)
BLOCKS = {
    "scorecard-bible-full": ("docs/metrics.md", scorecard_table),
    "head-verdicts-bible-full": ("docs/heads.md", head_verdict_table),
    "summary-bible-full": ("README.md", summary_sentence),
    "probes-bible-full": ("results/bible-full/README.md", lambda: csv_table(BIBLE_FULL / PROBES_CSV)),
    "importance-bible-full": ("results/bible-full/README.md", lambda: spearman_table(BIBLE_FULL / SPEARMAN_CSV)),
    "heads-minilm-paper": ("docs/heads.md", minilm_heads_table),
    "pruning-seeds-bible-full": ("results/bible-full/README.md", pruning_seeds),
    "pruning-seeds-heads": ("docs/heads.md", pruning_seeds),
    "probes-bible-heads": (
        "results/bible-heads/README.md",
        lambda: csv_table(ROOT / "results" / "bible-heads" / "report" / PROBES_CSV),
    ),
}


def _pattern(name: str) -> re.Pattern:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} \(python tools/docs_blocks.py\) -->\n)(.*?)"
        rf"(\n<!-- end: {re.escape(name)} -->)",
        re.S,
    )


def render(name: str) -> tuple[Path, str, str]:
    """(file, its current text, its text with the block ``name`` rewritten)."""
    rel, make = BLOCKS[name]
    path = ROOT / rel
    text = path.read_text(encoding="utf-8")
    pattern = _pattern(name)
    if not pattern.search(text):
        raise ValueError(
            f"{rel}: no block {name!r}; add the markers '<!-- generated: {name} (python "
            f"tools/docs_blocks.py) -->' and '<!-- end: {name} -->'"
        )
    return path, text, pattern.sub(lambda m: m.group(1) + "\n" + make() + "\n" + m.group(3), text, count=1)


def stale() -> list[str]:
    """The names of the blocks whose text differs from what the artefacts give."""
    out = []
    for name in BLOCKS:
        _, old, new = render(name)
        if new != old:
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which blocks are stale")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"stale: {name} in {BLOCKS[name][0]}; run python tools/docs_blocks.py")
        return 1 if names else 0
    for name in BLOCKS:
        path, old, new = render(name)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {name} in {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
