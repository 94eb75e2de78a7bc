"""The trajectory page of the report (``trajectory.html``): the scorecard's verdict per checkpoint,
when each claim first holds, and small multiples of MI / same-token rate / distance to the final
model per layer against training updates (:mod:`evolution.trajectory`, ``docs/trajectory.md``)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

__all__ = ["verdict_grid", "curve_grid", "first_holds_rows", "write_trajectory_page"]

_COLOURS = {"holds": "#4daf4a", "does not hold": "#e41a1c", "not measurable here": "#dddddd"}


def verdict_grid(verdicts):
    """Claims (rows) x snapshots (columns), coloured by verdict: when does each finding hold."""
    from matplotlib.colors import ListedColormap

    from evolution.analyses.plotting import plt

    names = list(_COLOURS)
    claims, snaps = [str(c) for c in verdicts["claim"].values], [str(s) for s in verdicts["snapshot"].values]
    codes = np.array([[names.index(str(v)) if str(v) in names else 2 for v in row] for row in verdicts["verdict"].values])
    fig, ax = plt().subplots(figsize=(1.2 + 0.55 * len(snaps), 0.6 + 0.32 * len(claims)))
    ax.imshow(codes, cmap=ListedColormap(list(_COLOURS.values())), vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(len(snaps)), [s if s == "final" else f"{s}" for s in snaps])
    ax.set_yticks(range(len(claims)), [f"claim {c}" for c in claims])
    ax.set_xlabel("training updates (snapshot)")
    for i in range(len(claims)):
        for j in range(len(snaps)):
            ax.text(j, i, {0: "+", 1: "-", 2: ""}[int(codes[i, j])], ha="center", va="center", fontsize=8)
    ax.set_title("verdict per checkpoint (+ holds, - does not hold, grey: not measurable)", fontsize=9)
    return fig


def _spaced_labels(updates, *, min_gap: float = 0.1) -> list[str]:
    """Tick labels for ``updates`` on a log axis: a label closer than ``min_gap`` decades to the
    previous labelled one is left blank (the final models' totals, 600 / 700 / 800 / 1000,
    would overprint each other); the last update is always labelled."""
    labels, last = [], None
    for i, u in enumerate(updates):
        far = last is None or np.log10(u) - np.log10(last) >= min_gap
        if far and i < len(updates) - 1 and np.log10(updates[-1]) - np.log10(u) < min_gap:
            far = False  # leave room for the last label
        labels.append(str(int(u)) if far or i == len(updates) - 1 else "")
        last = u if labels[-1] else last
    return labels


def curve_grid(curves):
    """Rows: MI with the input / H(X), kNN same-token rate, PWCCA distance to the final model;
    columns: objectives; one line per layer, against training updates (log scale). The panels of a
    row share their y axis, so that a change of 0.005 in one objective does not look like one of 0.8
    in another."""
    from matplotlib.ticker import NullFormatter

    from evolution.analyses.plotting import plt

    rows = [("mi_input", "MI(input) / H(X)"), ("same_token", "same-token rate"), ("to_final", "PWCCA to final")]
    objectives = list(curves["objective"].values)
    fig, axes = plt().subplots(len(rows), len(objectives), figsize=(3.2 * len(objectives), 2.4 * len(rows)),
                               sharex=True, sharey="row", squeeze=False)
    x = curves["checkpoint"].values
    layers = curves["layer"].values
    cmap = plt().get_cmap("viridis")
    for r, (var, label) in enumerate(rows):
        for c, objective in enumerate(objectives):
            ax = axes[r, c]
            data = curves[var].sel(objective=objective)
            if var == "to_final":
                data = data.sel(metric="pwcca")
            for layer in layers:
                y = data.sel(layer=layer).values
                ok = np.isfinite(y)
                ax.plot(x[ok], y[ok], marker="o", ms=3, color=cmap(layer / max(1, len(layers) - 1)),
                        label=f"layer {layer}")
            ax.set_xscale("log")
            ax.set_xticks(x, _spaced_labels(x))  # the kept updates themselves, not 2 x 10^0
            ax.ticklabel_format(axis="y", useOffset=False)  # 0.9996, not "+1" and -0.0004
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(axis="x", labelrotation=45 if len(x) > 5 else 0)
            if r == 0:
                ax.set_title(objective)
            if c == 0:
                ax.set_ylabel(label)
            if r == len(rows) - 1:
                ax.set_xlabel("training updates")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))  # outside the panels
    fig.tight_layout()
    return fig


def first_holds_rows(verdicts, findings: list | None = None) -> list[list[str]]:
    """Rows (header first): claim, its text, the first update at which it holds, the update from
    which it holds at every later snapshot."""
    text = {f.label: f.claim for f in findings or []}
    rows = [["#", "claim", "first holds at update", "holds from update on"]]
    for c, first, since in zip(verdicts["claim"].values, verdicts["first"].values, verdicts["since"].values):
        rows.append([str(c), text.get(str(c), ""), "never" if first < 0 else str(int(first)),
                     "never" if since < 0 else str(int(since))])
    return rows


def write_trajectory_page(path: str | Path, trajectory: str | Path, *, title: str, findings: list | None = None
                          ) -> Path:
    """``trajectory.html`` at ``path``, its two figures (PNG) and ``trajectory-first.csv`` beside it."""
    from evolution.analyses.plotting import DPI, open_group, plt

    path = Path(path)
    curves, verdicts = open_group(trajectory, "curves"), open_group(trajectory, "verdicts")
    files = {}
    for name, fig in (("trajectory-verdicts.png", verdict_grid(verdicts)), ("trajectory-curves.png",
                                                                            curve_grid(curves))):
        fig.savefig(path.parent / name, dpi=DPI, bbox_inches="tight")
        plt().close(fig)
        files[name] = name
    rows = first_holds_rows(verdicts, findings)
    (path.parent / "trajectory-first.csv").write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n",
                                                      encoding="utf-8")
    esc = html.escape
    table = "<table><thead><tr>" + "".join(f"<th>{esc(c)}</th>" for c in rows[0]) + "</tr></thead><tbody>" + \
        "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows[1:]) + "</tbody></table>"
    snaps = ", ".join(str(s) for s in verdicts["snapshot"].values)
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto}}td,th{{border:1px solid #ccc;padding:.2em .5em}}
table{{border-collapse:collapse}}img{{max-width:100%}}</style></head><body>
<h1>{esc(title)}</h1>
<p>The scorecard of <a href="report.html">the report</a> ruled on the checkpoints kept during training
(snapshots {esc(snaps)}), each objective's base model at the same update; "final" is the report's
own. A snapshot has no bootstrap intervals unless <code>metrics.trajectory.intervals</code> is set, so its
verdicts compare point values. How they are made: docs/trajectory.md.</p>
<h2>When each claim first holds</h2>{table}
<p><a href="trajectory-first.csv">trajectory-first.csv</a></p>
<h2>Verdict per checkpoint</h2><img src="{files['trajectory-verdicts.png']}" alt="verdict per checkpoint">
<h2>Per layer, against training updates</h2><img src="{files['trajectory-curves.png']}" alt="curves">
<p>MI with the input token as a fraction of H(X) (mean over k-means restarts), the kNN same-token rate, and the
PWCCA distance of each layer to the same layer of the final model (0 there by definition).</p>
</body></html>
""", encoding="utf-8")
    return path

