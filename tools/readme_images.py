"""The README's two pictures, from committed artefacts: the findings scorecard of the committed
replication (``results/bible-full/report/scorecard.json`` and ``head_verdicts.json``: claim,
verdict) drawn as a table, and a screenshot of its attention views page in headless Chromium
(the MT's decoder over the source, ``views.html#model=mt&attention=cross``).

    python tools/readme_images.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "results" / "bible-full" / "report"
COLOURS = {"holds": "#d8f0d8", "does not hold": "#f6d5d5"}


def scorecard(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        (f"{c['number']}{c.get('part') or ''}", c["claim"], c["verdict"])
        for c in json.loads((REPORT / "scorecard.json").read_text(encoding="utf-8"))
    ]
    rows += [
        (str(c["number"]), c["claim"], c["verdict"])
        for c in json.loads((REPORT / "head_verdicts.json").read_text(encoding="utf-8"))
    ]
    cells = [[n, "\n".join(textwrap.wrap(claim, 92)), verdict] for n, claim, verdict in rows]
    height = 0.4 + sum(0.17 * (c[1].count("\n") + 1) + 0.04 for c in cells)
    fig, ax = plt.subplots(figsize=(10.5, height))
    ax.axis("off")
    table = ax.table(
        cellText=cells,
        colLabels=["claim", "Voita et al. 2019 (1-12) and the head papers (C, V, K)", "verdict"],
        colWidths=[0.06, 0.78, 0.16],
        loc="upper center",
        cellLoc="left",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    for (r, c), cell in table.get_celld().items():
        cell.PAD = 0.01
        if r == 0:
            cell.set_text_props(weight="bold")
            continue
        cell.get_text().set_horizontalalignment("left")
        cell._loc = "left"
        lines = cells[r - 1][1].count("\n") + 1
        cell.set_height(0.18 * lines / height + 0.04 / height)
        if c == 2:
            cell.set_facecolor(COLOURS.get(cells[r - 1][2], "#eeeeee"))
    ax.set_title(
        "results/bible-full: the findings scorecard (report/scorecard.json, head_verdicts.json)", fontsize=9, loc="left"
    )
    path = out / "scorecard.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def views(out: Path) -> Path | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium: the views screenshot is skipped (apt-get install chromium)")
        return None
    path = out / "views-cross.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--hide-scrollbars",
                f"--screenshot={path}",
                "--window-size=1100,1250",
                (REPORT / "views.html").as_uri() + "#model=mt&attention=cross&layer=3",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for p in (scorecard(args.out), views(args.out)):
        if p is not None:
            print(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
