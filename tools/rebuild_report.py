"""Rewrite a committed result's report from what is committed beside it, when the report code
changes (a verdict rule, a table) but the numbers do not: ``results/<run>/metrics.zarr``, the
run's ``config.resolved.yaml`` (the shipped models' summary), ``report/provenance.json`` (what
the corpus was) and the pages of the previous report (``views.html``, kept byte for byte).
Nothing is recomputed; the figures are redrawn from the store.

    python tools/rebuild_report.py results/bible-paper [results/bible-heads ...]

A run whose workdir is at hand is better rebuilt by ``python -m pipelines.run CONFIG --force
report`` (the same page, from the same code).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def rebuild(results: Path) -> Path:
    from evolution.models.shipped_format import shipped_summary
    from evolution.report import write_report
    from evolution.report.views import read_payload

    results = results.resolve()
    report, store = results / "report", results / "metrics.zarr"
    if not store.is_dir() or not (report / "provenance.json").is_file():
        raise SystemExit(f"{results}: needs metrics.zarr and report/provenance.json (a committed result)")
    config = yaml.safe_load((results / "config.resolved.yaml").read_text(encoding="utf-8"))
    provenance = json.loads((report / "provenance.json").read_text(encoding="utf-8"))
    evaluation = results / "eval.json"
    shipped = {m["name"]: m["path"] for m in config["models"] if m["kind"] == "shipped"}
    if shipped:  # as the pipeline's report stage: what the shipped models record (paths in the resolved
        # config are relative to the workdir, runs/<name>: the same depth as results/<name>)
        training = shipped_summary({name: (results / path).resolve() for name, path in shipped.items()})
    elif evaluation.is_file():
        training = json.loads(evaluation.read_text(encoding="utf-8"))
    else:
        training = {}
    links, pages = [], {}
    views = report / "views.html"
    if views.is_file():
        page = views.read_bytes()
        shown = sorted({s["sentence"] for m in read_payload(views)["models"] for s in m["sentences"]})
        links.append(
            (
                "views.html",
                "Attention views",
                f"Vig 2019: head, model and neuron view of corpus sentences "
                f"{', '.join(map(str, shown))}; static, works offline",
            )
        )
        pages["views.html"] = lambda path: path.write_bytes(page)
    title = f"evolution: {results.name}"
    return write_report(
        store,
        report,
        title=title,
        training=training,
        corpus=provenance.get("corpus"),
        links=links,
        pages=pages,
        workdir=results,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="committed result directories (results/<run>)")
    args = parser.parse_args(argv)
    for r in args.results:
        print(rebuild(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
