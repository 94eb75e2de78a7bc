"""The static report: ``report.md`` and ``report.html`` beside the figures."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import xarray as xr

from evolution.analyses.plotting import open_group
from evolution.atomic import replace_dir
from evolution.report.figures import draw_all
from evolution.report.scorecard import SD_FACTOR, scorecard, scorecard_table

__all__ = ["write_report"]


def _table(da: xr.DataArray, row: str, col: str, fmt: str = "{:.3f}") -> list[list[str]]:
    head = [row] + [str(c) for c in da[col].values]
    rows = [head]
    for r in da[row].values:
        vals = da.sel({row: r}).values
        rows.append([str(r)] + ["" if np.isnan(v) else fmt.format(v) for v in vals])
    return rows


def _md(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def _html_table(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


def training_table(training: dict) -> tuple[list[list[str]], str]:
    """Rows of the training summary (``eval.json`` of the train stage) and a caption."""
    ev = training["evaluation"]
    rows = [["run", "objective", "seed", "token dropout", "updates", "minutes", "test ppl", "BLEU", "chrF"]]
    for name, run in training["runs"].items():
        r, t = ev.get(name, {}), training["timings"].get(name, {})
        rows.append([name, run["objective"], str(run["seed"]), f"{run['token_dropout']:g}", str(t.get("updates", "")),
                     f"{t.get('seconds', float('nan')) / 60:.1f}",
                     f"{r['ppl']:.1f}" if "ppl" in r else "", f"{r['bleu']:.2f}" if "bleu" in r else "",
                     f"{r['chrf']:.1f}" if "chrf" in r else ""])
    cfg = training.get("config", {})
    caption = (f"Test split of the corpus. Unigram baseline perplexity (training-split piece frequencies): "
               f"{ev['unigram_ppl']:.1f}. LM perplexity is per next token, MLM per masked token (15%). "
               f"Encoder: {cfg.get('layers')} layers, d = {cfg.get('embed_dim')}, {cfg.get('heads')} heads, "
               f"FFN {cfg.get('ffn_dim')}; vocabulary {cfg.get('vocab_size')} joint BPE pieces. "
               f"Training and data preparation took {training['train_seconds'] / 60:.1f} minutes.")
    return rows, caption


def write_report(metrics_path: str | Path, out_dir: str | Path, *, title: str = "evolution report",
                 training: dict | None = None, links: list[tuple[str, str, str]] = ()) -> Path:
    """Draw every figure and write ``report.md`` and ``report.html`` into
    ``out_dir`` (written under a temporary name, then moved into place).
    ``training`` is the train stage's summary (``eval.json``), shown first;
    ``links`` (file, text, what it is) are pages beside the report, listed
    under the title. Returns the HTML file."""
    out_dir = Path(out_dir)
    with replace_dir(out_dir) as tmp:
        figures = draw_all(metrics_path, tmp)
        sections: list[tuple[str, list[list[str]] | None, str]] = []  # (heading, table, text)
        if training is not None:
            sections.append(("Trained models", *training_table(training)))
        mi = open_group(metrics_path, "mi")
        attrs = {}
        if mi is not None:
            attrs = mi.attrs
            for t in mi.target.values:
                m = mi.mi.sel(target=t).mean("restart").transpose("model", "layer").load()
                if np.isnan(m.values).all():
                    continue
                h = ", ".join(f"{k}: {v:.3f}" for k, v in zip(mi.model.values, mi.entropy.sel(target=t).values)
                              if not np.isnan(v))
                sections.append((f"MI with the {t} (nats; mean over restarts)", _table(m, "model", "layer"),
                                 f"H(X): {h}. k = {int(np.nanmax(mi.k.sel(target=t).values))}, occurrences = "
                                 f"{int(np.nanmax(mi.n.sel(target=t).values))}."))
        nb = open_group(metrics_path, "neighbors")
        if nb is not None:
            for meas in nb.measure.values:
                table = _table(nb.value.sel(measure=meas).transpose("model", "layer").load(), "model", "layer")
                text = ""
                if "interval" in nb and np.isfinite(nb.interval.sel(measure=meas).values).any():
                    iv = nb.interval.sel(measure=meas).transpose("model", "layer", "bound").values
                    for r, row in enumerate(table[1:]):
                        for c in range(1, len(row)):
                            lo, hi = iv[r, c - 1]
                            if np.isfinite(lo):
                                row[c] += f" [{lo:.3f}, {hi:.3f}]"
                    text = "In brackets: the 95% bootstrap interval over sentences."
                sections.append((f"Neighbours: {meas}", table, text))
        sim = open_group(metrics_path, "similarity")
        if sim is not None:
            for metric in sim.metric.values:
                d = sim.distance.sel(metric=metric).load()
                adj = xr.DataArray(
                    np.array([[d.sel(model_a=m, model_b=m, layer_a=i, layer_b=i + 1).item()
                               for i in range(d.sizes["layer_a"] - 1)] for m in d.model_a.values]),
                    dims=("model", "layer_pair"),
                    coords={"model": d.model_a.values, "layer_pair": [f"{i}-{i + 1}" for i in range(d.sizes["layer_a"] - 1)]})
                sections.append((f"{str(metric).upper()} distance between adjacent layers", _table(adj, "model", "layer_pair"),
                                 f"On {sim.attrs.get('n_occurrences')} occurrences."))
        from evolution.analyses import ANALYSES

        for analysis in ANALYSES:
            sections += analysis.tables(metrics_path)
        notes = list(attrs.get("notes", [])) if attrs else []
        findings = scorecard(metrics_path)
        (tmp / "scorecard.json").write_text(json.dumps([f.as_dict() for f in findings], indent=1), encoding="utf-8")
        card, rules = scorecard_table(findings), [f"{f.number}. {f.rule}." for f in findings]
        card_text = (f"Each verdict is computed from this run's stored numbers by the rule below "
                     f"(evolution/report/scorecard.py): an MI difference counts beyond {SD_FACTOR:g} x the combined "
                     "standard deviation over k-means restarts, and MI within 2% of H(X) is saturated; neighbour "
                     "rates are compared by their 95% bootstrap intervals over sentences; distances, change and "
                     "influence by holding in every seed replicate. Not measurable here: the run lacks what the "
                     "claim needs, or the difference is within the uncertainty.")
        md = [f"# {title}", ""]
        if links:
            md += [f"[{text}]({href}) ({what})." for href, text, what in links] + [""]
        if attrs:
            md += [f"Objectives: {json.dumps(attrs.get('objectives', {}))}. Seed {attrs.get('seed')}. "
                   f"Representations: `{attrs.get('representations')}`.", ""]
        md += ["## Findings scorecard", "", _md(card), "", card_text, "", "Rules:", ""] + rules + [""]
        for name, f, caption in figures:
            md += [f"## {name}", "", f"![{name}]({f.name})", "", caption, ""]
        md += ["## Values", ""]
        for heading, table, text in sections:
            md += [f"### {heading}", "", _md(table), "", text, ""]
        if notes:
            md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
        provenance = json.dumps({k: attrs.get(k) for k in ("config", "versions", "extract_keys")}, indent=1,
                                default=str)
        md += ["## Provenance", "", "```json", provenance, "```", ""]
        (tmp / "report.md").write_text("\n".join(md), encoding="utf-8")

        body = [f"<h1>{html.escape(title)}</h1>"]
        body += [f"<p><a href=\"{html.escape(href)}\">{html.escape(text)}</a> ({html.escape(what)}).</p>"
                 for href, text, what in links]
        if attrs:
            body.append(f"<p>Objectives: {html.escape(json.dumps(attrs.get('objectives', {})))}; seed "
                        f"{attrs.get('seed')}.</p>")
        body.append(f"<h2>Findings scorecard</h2>{_html_table(card)}<p>{html.escape(card_text)}</p><ol>"
                    + "".join(f"<li>{html.escape(f.rule)}.</li>" for f in findings) + "</ol>")
        for name, f, caption in figures:
            body.append(f"<h2>{html.escape(name)}</h2><img src='{f.name}' style='max-width:100%'>"
                        f"<p>{html.escape(caption)}</p>")
        body.append("<h2>Values</h2>")
        for heading, table, text in sections:
            body.append(f"<h3>{html.escape(heading)}</h3>{_html_table(table)}<p>{html.escape(text)}</p>")
        if notes:
            body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
        body.append("<h2>Provenance</h2><pre>" + html.escape(provenance) + "</pre>")
        style = ("body{font-family:sans-serif;max-width:1200px;margin:auto} table{border-collapse:collapse;font-size:12px}"
                 "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}")
        (tmp / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
                                         f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>",
                                         encoding="utf-8")
    return out_dir / "report.html"
