"""The trajectory page of the report (``trajectory.html``): the scorecard's verdict per checkpoint,
when each claim first holds, and small multiples of MI / same-token rate / distance to the final
model per layer against training updates (:mod:`evolution.trajectory`, ``docs/trajectory.md``)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

__all__ = ["verdict_grid", "curve_grid", "layer_lines", "first_holds_rows", "write_trajectory_page"]

_COLOURS = {"holds": "#4daf4a", "does not hold": "#e41a1c", "not measurable here": "#dddddd"}


def verdict_grid(verdicts):
    """Claims (rows) x snapshots (columns), coloured by verdict: when does each finding hold."""
    from matplotlib.colors import ListedColormap

    from evolution.analyses.plotting import plt

    names = list(_COLOURS)
    claims, snaps = [str(c) for c in verdicts["claim"].values], [str(s) for s in verdicts["snapshot"].values]
    codes = np.array(
        [[names.index(str(v)) if str(v) in names else 2 for v in row] for row in verdicts["verdict"].values]
    )
    fig, ax = plt().subplots(figsize=(1.2 + 0.55 * len(snaps), 0.6 + 0.32 * len(claims)))
    ax.imshow(codes, cmap=ListedColormap(list(_COLOURS.values())), vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(len(snaps)), [s if s == "final" else f"{s}" for s in snaps])
    ax.set_yticks(range(len(claims)), [f"claim {c}" for c in claims])
    ax.set_xlabel("training step (snapshot)")
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
        if u <= 0:  # step 0 (the initial model) sits at the linear part of the symlog axis
            labels.append(str(int(u)))
            continue
        far = last is None or np.log10(u) - np.log10(last) >= min_gap
        if far and i < len(updates) - 1 and np.log10(updates[-1]) - np.log10(u) < min_gap:
            far = False  # leave room for the last label
        labels.append(str(int(u)) if far or i == len(updates) - 1 else "")
        last = u if labels[-1] else last
    return labels


def _step_axis(ax, x) -> None:
    """Training steps on a linear axis where they are evenly spaced (a checkpoint every N steps),
    else on a log axis (symlog below the first positive step, so that step 0 shows)."""
    from matplotlib.ticker import NullFormatter

    positive = x[x > 0]
    gaps = np.diff(np.asarray(x, dtype=float))
    # saved every N steps (the last gap may be shorter: a final step off the grid): linear
    if len(gaps) > 1 and gaps.min() > 0 and np.allclose(gaps[:-1], gaps[0], rtol=0.01) and gaps[-1] <= gaps[0] * 1.01:
        ax.set_xticks(x, [str(int(u)) for u in x])
    else:  # log-spaced (kept updates F, F R, F R^2, ...; Pythia's early steps)
        if len(positive) < len(x) and len(positive):
            ax.set_xscale("symlog", linthresh=float(positive.min()))
        else:
            ax.set_xscale("log")
        ax.set_xticks(x, _spaced_labels(x))  # the kept steps themselves, not 2 x 10^0
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelrotation=45 if len(x) > 5 else 0)


def layer_lines(ax, x, data, layers, *, n_layers: int) -> dict:
    """One line per layer of ``data`` (checkpoint, layer) against the steps ``x`` on a step axis
    (:func:`_step_axis`), coloured by depth out of ``n_layers``, NaN steps left out. Returns
    ``layer -> (the steps drawn as a bool mask, its colour)``."""
    from evolution.analyses.plotting import plt

    cmap = plt().get_cmap("viridis")
    drawn = {}
    for layer in layers:
        y = data.sel(layer=layer).values
        ok = np.isfinite(y)
        color = cmap(int(layer) / max(1, n_layers - 1))
        ax.plot(x[ok], y[ok], marker="o", ms=3, color=color, label=f"layer {int(layer)}")
        drawn[layer] = (ok, color)
    _step_axis(ax, x)
    return drawn


def _by_series(ds):
    """A ``curves`` group written before rows were series (dimension ``objective``), read as one."""
    return ds.rename({"objective": "series"}) if "objective" in ds.dims else ds


def curve_grid(curves):
    """Rows: MI with the input / H(X), kNN same-token rate, PWCCA distance to the final model;
    columns: the series (a trained objective's base run, or a checkpoint series); one line per
    layer, against training steps (log scale). The panels of a row share their y axis, so that a
    change of 0.005 in one series does not look like one of 0.8 in another."""
    from evolution.analyses.plotting import plt

    curves = _by_series(curves)
    rows = [("mi_input", "MI(input) / H(X)"), ("same_token", "same-token rate"), ("to_final", "PWCCA to final")]
    objectives = list(curves["series"].values)
    fig, axes = plt().subplots(
        len(rows),
        len(objectives),
        figsize=(3.2 * len(objectives), 2.4 * len(rows)),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    x = curves["checkpoint"].values
    layers = curves["layer"].values
    for r, (var, label) in enumerate(rows):
        for c, objective in enumerate(objectives):
            ax = axes[r, c]
            data = curves[var].sel(series=objective)
            if var == "to_final":
                data = data.sel(metric="pwcca")
            layer_lines(ax, x, data, layers, n_layers=len(layers))
            ax.ticklabel_format(axis="y", useOffset=False)  # 0.9996, not "+1" and -0.0004
            if r == 0:
                ax.set_title(objective)
            if c == 0:
                ax.set_ylabel(label)
            if r == len(rows) - 1:
                ax.set_xlabel("training step")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))  # outside the panels
    fig.tight_layout()
    return fig


def between_grid(curves):
    """One panel per pair of series: the PWCCA distance between their models at the same step,
    one line per layer (the snapshots' similarity; the last point is the final models'). None
    without pairs measured at a common step."""
    from evolution.analyses.plotting import plt

    if "between" not in curves or curves.sizes.get("pair", 0) == 0:
        return None
    data = curves["between"].sel(metric="pwcca")
    pairs = [p for p in curves["pair"].values if np.isfinite(data.sel(pair=p).values).any()]
    if not pairs:
        return None
    x, layers = curves["checkpoint"].values, curves["layer"].values
    fig, axes = plt().subplots(1, len(pairs), figsize=(3.4 * len(pairs), 2.8), sharey=True, squeeze=False)
    for c, pair in enumerate(pairs):
        ax = axes[0, c]
        layer_lines(ax, x, data.sel(pair=pair), layers, n_layers=len(layers))
        ax.set(title=str(pair), xlabel="training step")
        if c == 0:
            ax.set_ylabel("PWCCA distance between series")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def role_rows(roles) -> list[list[str]]:
    """Rows (header first): every head that takes a role at some step, with the step it first has
    it and whether it keeps it at every later analysed step; by series, role, first step."""
    rows = [["series", "role", "layer", "head", "first step", "kept"]]
    if roles is None:
        return rows
    found = []
    for s in roles["series"].values:
        for r in roles["role"].values:
            first = roles["first"].sel(series=s, role=r).values
            kept = roles["kept"].sel(series=s, role=r).values
            for layer, head in zip(*np.nonzero(first >= 0), strict=True):
                found.append((str(s), str(r), int(first[layer, head]), int(layer), int(head), bool(kept[layer, head])))
    for s, r, first, layer, head, kept in sorted(found):
        rows.append([s, r, str(layer), str(head), str(first), "yes" if kept else "no"])
    return rows


def first_holds_rows(verdicts, findings: list | None = None) -> list[list[str]]:
    """Rows (header first): claim, its text, the first step at which it holds, the step from
    which it holds at every later snapshot."""
    text = {f.label: f.claim for f in findings or []}
    rows = [["#", "claim", "first holds at step", "holds from step on"]]
    for c, first, since in zip(
        verdicts["claim"].values, verdicts["first"].values, verdicts["since"].values, strict=True
    ):
        rows.append(
            [
                str(c),
                text.get(str(c), ""),
                "never" if first < 0 else str(int(first)),
                "never" if since < 0 else str(int(since)),
            ]
        )
    return rows


def _table(rows: list[list[str]], *, limit: int | None = None) -> str:
    esc = html.escape
    body = rows[1:] if limit is None else rows[1 : limit + 1]
    return (
        "<table><thead><tr>"
        + "".join(f"<th>{esc(c)}</th>" for c in rows[0])
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in body)
        + "</tbody></table>"
    )


def _csv(path: Path, rows: list[list[str]]) -> None:
    path.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n", encoding="utf-8")


def write_trajectory_page(
    path: str | Path, trajectory: str | Path, *, title: str, findings: list | None = None
) -> Path:
    """``trajectory.html`` at ``path``, its figures (PNG) and ``trajectory-first.csv`` (and, with
    head statistics, ``trajectory-roles.csv``) beside it."""
    from evolution.analyses.plotting import DPI, open_group, plt

    path = Path(path)
    curves, verdicts = _by_series(open_group(trajectory, "curves")), open_group(trajectory, "verdicts")
    figures = {
        "trajectory-verdicts.png": verdict_grid(verdicts),
        "trajectory-curves.png": curve_grid(curves),
        "trajectory-between.png": between_grid(curves),
    }
    for name, fig in figures.items():
        if fig is not None:
            fig.savefig(path.parent / name, dpi=DPI, bbox_inches="tight")
            plt().close(fig)
    rows = first_holds_rows(verdicts, findings)
    _csv(path.parent / "trajectory-first.csv", rows)
    roles = role_rows(open_group(trajectory, "roles"))
    esc = html.escape
    between = (
        ""
        if figures["trajectory-between.png"] is None
        else """<h2>Between series, at the same step</h2>
<img src="trajectory-between.png" alt="distance between series">
<p>The PWCCA distance between two series' models at the same step and layer (the snapshot's similarity between
them; the last point is the final models'). Only steps that both series have are drawn.</p>"""
    )
    role_html = ""
    if len(roles) > 1:
        _csv(path.parent / "trajectory-roles.csv", roles)
        more = f" (the first 60 of {len(roles) - 1})" if len(roles) > 61 else ""
        role_html = f"""<h2>Head roles over training</h2>
<p>Every head that is positional, syntactic or rare-token (the head statistics' flags, docs/heads.md) at some
analysed step: the first step with the role, and whether it keeps it at every later step{esc(more)}.</p>
{_table(roles, limit=60)}<p><a href="trajectory-roles.csv">trajectory-roles.csv</a></p>"""
    same = curves.attrs.get("same_weights") or {}
    warning = (
        ""
        if not same
        else "<p><b>Warning: some steps are one model.</b> "
        + "; ".join(
            f"{esc(k)}: {esc(', '.join(g))} hold byte-identical weights" for k, groups in same.items() for g in groups
        )
        + ". Their points are the same model at different steps; check the checkpoint source.</p>"
    )
    if verdicts is None:
        raise ValueError(f"{trajectory}: no verdicts group; run the trajectory stage to write it")
    snaps = ", ".join(str(s) for s in verdicts["snapshot"].values)
    series = ", ".join(str(s) for s in curves["series"].values)
    path.write_text(
        f"""<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto}}td,th{{border:1px solid #ccc;padding:.2em .5em}}
table{{border-collapse:collapse}}img{{max-width:100%}}</style></head><body>
<h1>{esc(title)}</h1>
<p>The scorecard of <a href="report.html">the report</a> ruled on the checkpoints of each series ({esc(series)}:
a trained objective's base run, or a checkpoint series of the config's models) at the same step (snapshots
{esc(snaps)}); "final" is the report's own. A snapshot has no bootstrap intervals unless
<code>metrics.trajectory.intervals</code> is set, so its verdicts compare point values. How they are made:
docs/trajectory.md and docs/series.md.</p>
{warning}
<h2>When each claim first holds</h2>{_table(rows)}
<p><a href="trajectory-first.csv">trajectory-first.csv</a></p>
<h2>Verdict per checkpoint</h2><img src="trajectory-verdicts.png" alt="verdict per checkpoint">
<h2>Per layer, against training steps</h2><img src="trajectory-curves.png" alt="curves">
<p>MI with the input token as a fraction of H(X) (mean over k-means restarts), the kNN same-token rate, and the
PWCCA distance of each layer to the same layer of the final model (0 there by definition).</p>
{between}
{role_html}
</body></html>
""",
        encoding="utf-8",
    )
    return path
