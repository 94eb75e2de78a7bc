"""The findings scorecard on synthetic metrics stores whose answer is known by construction:
numbers shaped as Voita et al. (2019) report them give "holds" for all 12 claims; each
claim turned around gives "does not hold"; saturation, overlapping intervals and a missing
control give "not measurable here"."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from evolution.metrics.results import write_metrics
from evolution.report.scorecard import FAILS, HOLDS, NA, scorecard

MODELS = ["mt", "lm", "mlm", "mt-seed1", "lm-seed1", "mlm-seed1", "mt-tokdrop"]
OBJECTIVE = {m: m.split("-")[0] for m in MODELS}
RUNS = {m: {"objective": OBJECTIVE[m], "seed": 1 if "seed1" in m else 0,
            "token_dropout": 0.1 if "tokdrop" in m else 0.0} for m in MODELS}
L = 4  # layers 0..3
H = 4.0


def _mi(curves: dict[tuple[str, str], list[float]], sd: float = 0.01) -> xr.Dataset:
    targets = ["input", "output", "masked_input"]
    mi = np.full((len(MODELS), L, len(targets), 2), np.nan)
    for (model, target), c in curves.items():
        for m in [x for x in MODELS if x == model or (x.startswith(model + "-") and "tokdrop" not in x)]:
            mi[MODELS.index(m), :, targets.index(target), 0] = np.asarray(c) - sd / np.sqrt(2)
            mi[MODELS.index(m), :, targets.index(target), 1] = np.asarray(c) + sd / np.sqrt(2)
    shape = (len(MODELS), L, len(targets))
    return xr.Dataset({"mi": (("model", "layer", "target", "restart"), mi),
                       "mi_shuffled": (("model", "layer", "target"), np.full(shape, 0.1)),
                       "k": (("model", "layer", "target"), np.full(shape, 30.0)),
                       "n": (("model", "layer", "target"), np.full(shape, 3000.0)),
                       "entropy": (("model", "target"), np.full((len(MODELS), 3), H))},
                      coords={"model": MODELS, "layer": np.arange(L), "target": targets, "restart": [0, 1]})


def _neighbors(rates: dict[tuple[str, str], list[float]], half_width: float = 0.01) -> xr.Dataset:
    measures = ["same_token", "position_distance", "same_left"]
    v = np.full((len(MODELS), L, len(measures)), np.nan)
    for (m, meas), c in rates.items():
        v[MODELS.index(m), :, measures.index(meas)] = c
    iv = np.stack([v - half_width, v + half_width], axis=-1)
    return xr.Dataset({"value": (("model", "layer", "measure"), v),
                       "interval": (("model", "layer", "measure", "bound"), iv)},
                      coords={"model": MODELS, "layer": np.arange(L), "measure": measures, "bound": ["low", "high"]})


def _similarity(pair: dict[frozenset, float]) -> xr.Dataset:
    d = np.full((1, len(MODELS), L, len(MODELS), L), 0.5)
    for i, a in enumerate(MODELS):
        for j, b in enumerate(MODELS):
            key = frozenset({OBJECTIVE[a], OBJECTIVE[b]})
            for layer in range(L):
                d[0, i, layer, j, layer] = 0.0 if a == b else (pair["seed"] if OBJECTIVE[a] == OBJECTIVE[b]
                                                               else pair[key])
    return xr.Dataset({"distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), d)},
                      coords={"metric": ["pwcca"], "model_a": MODELS, "layer_a": np.arange(L), "model_b": MODELS,
                              "layer_b": np.arange(L)})


def _change(frequent: float, rare: float) -> xr.Dataset:
    bins = ["1-10", "10-100", "100-1000"]
    d = np.full((1, len(MODELS), L - 1, 3), np.nan)
    d[..., 0], d[..., 1] = frequent, rare  # the last bin is unfilled (NaN): the rarest filled is 10-100
    return xr.Dataset({"distance": (("metric", "model", "layer_pair", "freq_bin"), d)},
                      coords={"metric": ["pwcca"], "model": MODELS, "layer_pair": ["0-1", "1-2", "2-3"],
                              "freq_bin": bins}, attrs={"frequency": "training split"})


def _influence(mt_rare: list[float], mt_frequent: list[float], drop_rare: float, drop_frequent: float) -> xr.Dataset:
    d = np.full((1, len(MODELS), L - 1, 2), 0.05)
    for m in ("mt", "mt-seed1"):
        d[0, MODELS.index(m), :, 1], d[0, MODELS.index(m), :, 0] = mt_rare, mt_frequent
    d[0, MODELS.index("mt-tokdrop"), 0] = [drop_frequent, drop_rare]
    return xr.Dataset({"distance": (("metric", "model", "layer", "freq_bin"), d)},
                      coords={"metric": ["pwcca"], "model": MODELS, "layer": [1, 2, 3], "freq_bin": ["1-10", "10-100"]})


PAPER = dict(
    mi=_mi({("lm", "input"): [3.9, 3.7, 3.5, 3.0], ("mlm", "input"): [3.9, 3.2, 3.0, 3.6],
            ("mt", "input"): [3.9, 3.8, 3.6, 3.4], ("lm", "output"): [1.0, 1.3, 1.6, 2.0],
            ("mlm", "output"): [0.5, 0.8, 1.1, 1.4], ("mlm", "masked_input"): [1.2, 0.9, 0.6, 0.3]}),
    neighbors=_neighbors({("mlm", "same_token"): [1, .95, .92, .9], ("mt", "same_token"): [1, .9, .8, .6],
                          ("lm", "same_token"): [1, .8, .5, .3], ("mt", "position_distance"): [1, 2, 2, 2],
                          ("lm", "position_distance"): [1, 3, 4, 5], ("mlm", "position_distance"): [1, 3, 5, 6],
                          ("lm", "same_left"): [.2, .6, .4, .25]}),
    similarity=_similarity({"seed": 0.1, frozenset({"lm", "mt"}): 0.6, frozenset({"mt", "mlm"}): 0.3,
                            frozenset({"lm", "mlm"}): 0.5}),
    change=_change(frequent=0.12, rare=0.05),
    influence=_influence(mt_rare=[0.30, 0.10, 0.08], mt_frequent=[0.10, 0.09, 0.08], drop_rare=0.08, drop_frequent=0.1),
)

REVERSED = dict(
    mi=_mi({("lm", "input"): [3.9, 3.0, 3.2, 3.5], ("mlm", "input"): [3.9, 3.6, 3.3, 3.0],
            ("mt", "input"): [3.9, 3.5, 3.0, 2.0], ("lm", "output"): [2.0, 1.6, 1.3, 1.0],
            ("mlm", "output"): [1.4, 1.1, 0.8, 0.5], ("mlm", "masked_input"): [0.3, 0.6, 0.9, 1.2]}),
    neighbors=_neighbors({("mlm", "same_token"): [1, .8, .5, .3], ("mt", "same_token"): [1, .9, .8, .6],
                          ("lm", "same_token"): [1, .95, .92, .9], ("mt", "position_distance"): [1, 3, 5, 7],
                          ("lm", "position_distance"): [1, 3, 4, 5], ("mlm", "position_distance"): [1, 3, 5, 6],
                          ("lm", "same_left"): [.2, .3, .4, .5]}),
    similarity=_similarity({"seed": 0.55, frozenset({"lm", "mt"}): 0.3, frozenset({"mt", "mlm"}): 0.6,
                            frozenset({"lm", "mlm"}): 0.5}),
    change=_change(frequent=0.05, rare=0.12),
    influence=_influence(mt_rare=[0.10, 0.30, 0.08], mt_frequent=[0.20, 0.09, 0.08], drop_rare=0.3, drop_frequent=0.1),
)


def _write(path, groups: dict[str, xr.Dataset], runs=RUNS):
    attrs = {"objectives": OBJECTIVE, "runs": runs, "seed": 0}
    write_metrics(path, {name: ds.assign_attrs({**attrs, **ds.attrs}) for name, ds in groups.items()},
                  fingerprint="test")
    return path


def test_numbers_shaped_as_the_paper_hold_every_claim(tmp_path):
    findings = scorecard(_write(tmp_path / "m.zarr", PAPER))
    assert [f.number for f in findings] == list(range(1, 13))
    assert {f.number: f.verdict for f in findings} == dict.fromkeys(range(1, 13), HOLDS), \
        [(f.number, f.why) for f in findings if f.verdict != HOLDS]
    by = {f.number: f for f in findings}
    assert "mt 0.60 [0.59, 0.61]" in by[6].measured.replace("0.600", "0.60").replace("0.590", "0.59").replace(
        "0.610", "0.61")
    assert "d(LM, MT) 0.600-0.600" in by[9].measured and "8 replicate combination(s)" in by[9].measured


def test_each_claim_turned_around_does_not_hold(tmp_path):
    findings = scorecard(_write(tmp_path / "m.zarr", REVERSED))
    assert {f.number: f.verdict for f in findings} == dict.fromkeys(range(1, 13), FAILS), \
        [(f.number, f.verdict, f.why) for f in findings if f.verdict != FAILS]


def test_uncertainty_and_missing_controls_make_claims_not_measurable(tmp_path):
    groups = dict(PAPER)
    # MI at H(X) everywhere (saturated), rates in order but inside each other's intervals, no seeds / dropout
    groups["mi"] = _mi({("lm", "input"): [3.99] * 4, ("mlm", "input"): [3.99, 3.98, 3.97, 3.99],
                        ("mt", "input"): [3.99] * 4})
    groups["neighbors"] = _neighbors({("mlm", "same_token"): [1, .9, .8, .62], ("mt", "same_token"): [1, .9, .8, .61],
                                      ("lm", "same_token"): [1, .9, .8, .60], ("lm", "same_left"): [.2, .4, .38, .36]},
                                     half_width=0.05)
    runs = {m: r for m, r in RUNS.items() if m in ("mt", "lm", "mlm")}
    objectives = {m: OBJECTIVE[m] for m in runs}
    keep = dict(model=list(runs))
    sub = {name: (ds.sel(**keep) if "model" in ds.dims else ds.sel(model_a=list(runs), model_b=list(runs)))
           for name, ds in groups.items()}
    path = tmp_path / "m.zarr"
    write_metrics(path, {n: ds.assign_attrs({"objectives": objectives, "runs": runs, "seed": 0, **ds.attrs})
                         for n, ds in sub.items()}, fingerprint="test")
    by = {f.number: f for f in scorecard(path)}
    for n in (1, 2, 3):
        assert by[n].verdict == NA and "saturated" in by[n].why
    assert by[4].verdict == NA and "output" in by[4].why  # not stored
    assert by[6].verdict == NA and "overlap" in by[6].why
    assert by[8].verdict == NA and "overlap" in by[8].why
    assert by[10].verdict == NA and "seed" in by[10].why
    assert by[12].verdict == NA and "token dropout" in by[12].why


def test_report_opens_with_the_scorecard(tmp_path):
    from evolution.report.write import write_report

    path = _write(tmp_path / "m.zarr", PAPER)
    write_report(path, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.index("## Findings scorecard") < md.index("## Values")
    assert md.count("| holds") == 12
    html = (tmp_path / "report" / "report.html").read_text()
    assert "Findings scorecard" in html and html.count("<td>holds") == 12


@pytest.mark.parametrize("number", [1])
def test_a_difference_within_the_restart_spread_does_not_count(tmp_path, number):
    """LM input MI falling by 0.02 with restarts 0.05 apart: within 2 sd, so it does not hold."""
    groups = dict(PAPER)
    groups["mi"] = _mi({("lm", "input"): [3.9, 3.7, 3.69, 3.68]}, sd=0.05)
    by = {f.number: f for f in scorecard(_write(tmp_path / "m.zarr", groups))}
    assert by[number].verdict == FAILS


@pytest.mark.parametrize("run", ["bible-full", "bible-paper"])
def test_committed_scorecard_is_computed_from_the_committed_store(run):
    """results/<run>: the report's scorecard.json is what scorecard() gives on the
    committed metrics.zarr (no verdict or number edited by hand, none stale)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results" / run
    committed = json.loads((root / "report" / "scorecard.json").read_text(encoding="utf-8"))
    assert [f.as_dict() for f in scorecard(root / "metrics.zarr")] == committed
    assert len(committed) == 12
