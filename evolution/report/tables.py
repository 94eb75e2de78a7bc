"""The report's tables: the per-layer values of the representation analyses, the
training summary, and what every table shares on the page (a table whose values are
all one constant becomes one sentence; numeric columns are recognised so that only
they are right-aligned).

A :class:`Table` is rows of strings, the header row first. The analyses' own tables
(:meth:`evolution.analyses.base.Analysis.tables`) come as (heading, rows, caption) and
are wrapped as they are.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

import numpy as np
import xarray as xr

from evolution.analyses.plotting import open_group

__all__ = ["Table", "representation_tables", "training_table", "training_caption", "numeric_columns", "constant_value"]

_NUMBER = re.compile(r"^[+-]?(\d[\d,]*\.?\d*|\.\d+)(e[+-]?\d+)?%?\*?( \[[^\]]*\]| \([^)]*\))?$", re.I)


@dataclass
class Table:
    """One table of the page: ``rows`` (header first), a caption, and the sentence that
    replaces it when every value is one constant (:func:`constant_value`)."""

    heading: str
    rows: list[list[str]]
    caption: str = ""
    constant: str = ""  # set: the table is shown as this sentence
    section: str = ""  # subsection id (evolution.report.sections); "" = decided by its heading
    id: str = ""  # anchor on the page (set when the page is assembled)
    csv: str = ""  # file name of every row as CSV (set when written)
    export: bool = True  # written as CSV beside the page

    @property
    def n_rows(self) -> int:
        return max(len(self.rows) - 1, 0)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(self.rows)
        return buffer.getvalue()


def numeric_columns(rows: list[list[str]]) -> list[bool]:
    """Per column: whether every non-empty data cell is a number (optionally followed by an
    interval in brackets or a note in parentheses)."""
    if not rows:
        return []
    n = len(rows[0])
    out = []
    for c in range(n):
        cells = [r[c].strip() for r in rows[1:] if c < len(r) and r[c].strip() not in ("", "-", "n/a")]
        out.append(bool(cells) and all(_NUMBER.match(x) for x in cells))
    return out


def constant_value(rows: list[list[str]]) -> str | None:
    """The one value of every data cell (all columns but the first) when they are all equal and
    there are at least two; None otherwise."""
    cells = [x for r in rows[1:] for x in r[1:]]
    if len(cells) < 2 or not cells[0].strip() or any(x != cells[0] for x in cells):
        return None
    return cells[0]


def _collapse(table: Table, what: str) -> Table:
    """``table`` as one sentence when every value is one constant."""
    value = constant_value(table.rows)
    if value is not None:
        table.constant = f"{value} for every {what}."
    return table


def _grid(da: xr.DataArray, row: str, col: str, fmt: str = "{:.3f}") -> list[list[str]]:
    """Rows of a 2-d DataArray (``row`` x ``col``), rows that are NaN everywhere left out."""
    rows = [[row] + [str(c) for c in da[col].values]]
    for r in da[row].values:
        vals = np.asarray(da.sel({row: r}).values, dtype=float)
        if np.isnan(vals).all():
            continue
        rows.append([str(r)] + ["" if np.isnan(v) else fmt.format(v) for v in vals])
    return rows


_TARGETS = {
    "input": "the input token",
    "output": "the output label (next token for an LM, original token for an MLM)",
    "masked_input": "the token fed at the MLM's corrupted positions",
}

_ANNOTATIONS = {"left": "left token", "right": "right token", "pos": "POS tag", "deprel": "dependency relation"}


def neighbour_heading(measure: str) -> str:
    """A human heading for a ``neighbors`` measure, e.g. ``same_pos_chance`` -> "Neighbours: same POS
    tag by chance"."""
    if measure == "same_token":
        return "Neighbours: same token (top-k neighbours of the same type)"
    if measure == "position_distance":
        return "Neighbours: position distance among same-token neighbours"
    m = re.match(r"same_([a-z]+?)(_chance|_ceiling|_normalized)?$", measure)
    if m and m.group(1) in _ANNOTATIONS:
        what = {
            None: "",
            "_chance": " by chance",
            "_ceiling": ", ceiling",
            "_normalized": ", normalised between chance (0) and ceiling (1)",
        }[m.group(2)]
        return f"Neighbours: same {_ANNOTATIONS[m.group(1)]}{what}"
    return f"Neighbours: {measure.replace('_', ' ')}"


def _mi_tables(path) -> list[Table]:
    mi = open_group(path, "mi")
    out: list[Table] = []
    if mi is None:
        return out
    for t in mi.target.values:
        m = mi.mi.sel(target=t).mean("restart").transpose("model", "layer")
        if np.isnan(m.values).all():
            continue
        ent = {
            str(k): float(v)
            for k, v in zip(mi.model.values, mi.entropy.sel(target=t).values, strict=True)
            if np.isfinite(v)
        }
        h = (
            f"H(X) = {next(iter(ent.values())):.3f} for every model"
            if len(set(ent.values())) == 1
            else "H(X): " + ", ".join(f"{k} {v:.3f}" for k, v in ent.items())
        )
        caption = (
            f"Nats, mean over k-means restarts. {h}. k = {int(np.nanmax(mi.k.sel(target=t).values))}, "
            f"occurrences = {int(np.nanmax(mi.n.sel(target=t).values)):,}."
        )
        out.append(
            _collapse(
                Table(f"MI with {_TARGETS.get(str(t), str(t))}", _grid(m, "model", "layer"), caption, section="mi"),
                "model and layer",
            )
        )
    return out


def _neighbour_tables(path) -> list[Table]:
    nb = open_group(path, "neighbors")
    out: list[Table] = []
    if nb is None:
        return out
    for meas in nb.measure.values:
        da = nb.value.sel(measure=meas).transpose("model", "layer")
        table = Table(neighbour_heading(str(meas)), _grid(da, "model", "layer"), section="neighbours")
        per_row = {r[0]: {x for x in r[1:] if x} for r in table.rows[1:]}
        values = {x for v in per_row.values() for x in v}
        if sum(len(r) - 1 for r in table.rows[1:]) >= 2 and all(len(v) == 1 for v in per_row.values()):
            # the same at every layer (chance and ceiling are layer-independent): one sentence
            iv = nb.interval.sel(measure=meas).values if "interval" in nb else np.array([np.nan])
            span = (
                f" (95% intervals within [{np.nanmin(iv):.3f}, {np.nanmax(iv):.3f}])" if np.isfinite(iv).any() else ""
            )
            table.constant = (
                f"{values.pop()} for every model and layer{span}."
                if len(values) == 1
                else "the same at every layer: " + ", ".join(f"{m} {v.pop()}" for m, v in per_row.items()) + f"{span}."
            )
            out.append(table)
            continue
        if "interval" in nb and np.isfinite(nb.interval.sel(measure=meas).values).any():
            iv = nb.interval.sel(measure=meas).transpose("model", "layer", "bound")
            keep = [str(r[0]) for r in table.rows[1:]]
            for row, model in zip(table.rows[1:], keep, strict=True):
                bounds = iv.sel(model=model).values
                for c in range(1, len(row)):
                    lo, hi = bounds[c - 1]
                    if row[c] and np.isfinite(lo):
                        row[c] += f" [{lo:.3f}, {hi:.3f}]"
            table.caption = "In brackets: the 95% bootstrap interval over sentences."
        out.append(table)
    return out


def _similarity_tables(path) -> list[Table]:
    sim = open_group(path, "similarity")
    out: list[Table] = []
    if sim is None:
        return out
    for metric in sim.metric.values:
        d = sim.distance.sel(metric=metric)
        n = d.sizes["layer_a"] - 1
        adj = xr.DataArray(
            np.array(
                [
                    [d.sel(model_a=m, model_b=m, layer_a=i, layer_b=i + 1).item() for i in range(n)]
                    for m in d.model_a.values
                ]
            ),
            dims=("model", "layer_pair"),
            coords={"model": d.model_a.values, "layer_pair": [f"{i}-{i + 1}" for i in range(n)]},
        )
        occ = sim.attrs.get("n_occurrences")
        out.append(
            _collapse(
                Table(
                    f"{str(metric).upper()} distance between adjacent layers",
                    _grid(adj, "model", "layer_pair"),
                    f"On {occ:,} occurrences." if isinstance(occ, int) else "",
                    section="similarity",
                ),
                "model and layer pair",
            )
        )
    return out


def representation_tables(path) -> list[Table]:
    """The per-layer tables of MI, neighbours and similarity of the store at ``path``."""
    return _mi_tables(path) + _neighbour_tables(path) + _similarity_tables(path)


def training_table(training: dict) -> tuple[list[list[str]], str]:
    """Rows of the training summary (``eval.json`` of the train stage) and a caption
    (:func:`training_caption`)."""
    ev = training.get("evaluation", {})
    timings = training.get("timings", {})
    rows = [["run", "objective", "seed", "token dropout", "updates", "minutes", "test ppl", "BLEU", "chrF"]]
    for name, run in training.get("runs", {}).items():
        r, t = ev.get(name, {}), timings.get(name, {})
        seconds = t.get("seconds")
        minutes = f"{seconds / 60:.1f}" if isinstance(seconds, (int, float)) and seconds > 0 else ""
        if minutes and t.get("resumed_from"):
            minutes += "*"
        rows.append(
            [
                name,
                str(run.get("objective", "")),
                str(run.get("seed", "")),
                f"{run.get('token_dropout', 0.0):g}",
                str(t.get("updates", "")),
                minutes,
                f"{r['ppl']:.1f}" if "ppl" in r else "",
                f"{r['bleu']:.2f}" if "bleu" in r else "",
                f"{r['chrf']:.1f}" if "chrf" in r else "",
            ]
        )
    return rows, training_caption(training)


def training_caption(training: dict) -> str:
    """What the training table needs beside it. The total time is written only when it is
    stored, positive and at least the longest run's time (a total of 0 or one below a run's
    time is a total that was not measured)."""
    ev, cfg = training.get("evaluation", {}), training.get("config", {})
    if training.get("shipped"):
        return (
            "Shipped weights (kind: shipped): updates from each model's model.json; test scores from the "
            "scores.json beside the models, where they are of these weights (BLEU / chrF: beam 4, sacrebleu; "
            "LM perplexity per next token; MLM perplexity over the seeded corruption's changed positions, "
            "evolution.training.evaluate.perplexity, so not fairseq's). Blank: not scored."
        )
    parts = ["Test split of the corpus."]
    if "unigram_ppl" in ev:
        parts.append(f"Unigram baseline perplexity (training-split piece frequencies): {ev['unigram_ppl']:.1f}.")
    parts.append("LM perplexity is per next token, MLM per masked token (15%).")
    if cfg:
        parts.append(
            f"Encoder: {cfg.get('layers')} layers, d = {cfg.get('embed_dim')}, {cfg.get('heads')} heads, "
            f"FFN {cfg.get('ffn_dim')}; vocabulary {cfg.get('vocab_size')} joint BPE pieces."
        )
    timings = training.get("timings", {})
    runs = [t["seconds"] for t in timings.values() if isinstance(t.get("seconds"), (int, float)) and t["seconds"] > 0]
    resumed = {name: t["resumed_from"] for name, t in timings.items() if t.get("resumed_from")}
    if runs:
        parts.append(
            "Minutes: each run's training time"
            + (
                "; * resumed from a checkpoint ("
                + ", ".join(f"{k} at update {v}" for k, v in resumed.items())
                + "): the minutes count the resumed part only."
                if resumed
                else "."
            )
        )
    prepare = training.get("prepare", {}).get("seconds")
    if isinstance(prepare, (int, float)) and prepare > 0:
        parts.append(f"Data preparation took {prepare / 60:.1f} minutes.")
    total = training.get("train_seconds")
    if isinstance(total, (int, float)) and total > 0 and total >= max(runs, default=0.0):
        parts.append(f"Training and data preparation took {total / 60:.1f} minutes in all.")
    return " ".join(parts)
