"""Head verdict C2 of the from-scratch models under both rules, from the committed report's
per-head entropies (no ``metrics.zarr`` is committed here, and the report's ``head_verdicts.json``
predates the lowest-layer rule of 2026-11-26).

    python results/from-scratch/c2_both_rules.py            # writes results/from-scratch/c2.json

``report/heads_entropy.csv`` holds each head's mean attention entropy and each layer's uniform
entropy (the same for every head of a layer: the heads share the queries and keys), which is all
C2 reads: the rebuilt ``heads`` group goes through the report's own rule
(:func:`evolution.report.heads_card.clark.claim_broad_lower`, which keeps the earlier halves rule
beside it). ``tests/test_docs_results_readmes.py`` checks that the earlier rule gives the committed
``head_verdicts.json``'s C2 from these numbers, and that ``c2.json`` is what this script writes.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

HERE = Path(__file__).resolve().parent


def heads_from_csv(path: Path) -> xr.Dataset:
    """The ``heads`` group's ``value`` (model, layer, head, measure) for ``entropy`` and
    ``uniform_entropy``, from a report's ``heads_entropy.csv``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    models = list(dict.fromkeys(r["model"] for r in rows))
    layers = sorted({int(r["layer"]) for r in rows})
    heads = sorted({int(float(r["head"])) for r in rows if r["head"]})
    value = np.full((len(models), len(layers), len(heads), 2), np.nan)
    for r in rows:
        m, layer = models.index(r["model"]), layers.index(int(r["layer"]))
        if r["measure"] == "entropy":
            value[m, layer, heads.index(int(float(r["head"]))), 0] = float(r["value"])
        elif r["measure"] == "uniform_entropy":
            value[m, layer, :, 1] = float(r["value"])
    value[..., 1] = np.where(np.isfinite(value[..., 0]), value[..., 1], np.nan)
    return xr.Dataset(
        {"value": (("model", "layer", "head", "measure"), value)},
        coords={"model": models, "layer": layers, "head": heads, "measure": ["entropy", "uniform_entropy"]},
    )


def c2(path: Path = HERE / "report" / "heads_entropy.csv") -> dict:
    """C2 under the lowest-layer rule and, as ``earlier``, the halves rule: claim, rule, verdict,
    why, measured."""
    from evolution.report.heads_card.base import HeadRun
    from evolution.report.heads_card.clark import claim_broad_lower

    found = claim_broad_lower(HeadRun.from_groups(heads_from_csv(path), path=str(path)))
    out = {k: getattr(found, k) for k in ("claim", "rule", "verdict", "why", "measured", "details")}
    return out | {"earlier": found.earlier, "source": "report/heads_entropy.csv"}


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE / "c2.json"
    out.write_text(json.dumps(c2(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
