"""The findings scorecard on synthetic metrics stores whose answer is known by construction:
numbers shaped as Voita et al. (2019) report them give "holds" for all 12 claims; each
claim turned around gives "does not hold"; saturation, overlapping intervals and a missing
control give "not measurable here"; and each rule is probed at its boundary (a difference
of 1.5 and 2.5 combined sd, an interval that overlaps while the points are in order, one
seed replicate that fails while the base model holds)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import xarray as xr

from evolution.metrics.results import write_metrics
from evolution.report.scorecard import FAILS, HOLDS, NA, scorecard

MODELS = ["mt", "lm", "mlm", "mt-seed1", "lm-seed1", "mlm-seed1", "mt-tokdrop", "lm-tokdrop"]
OBJECTIVE = {m: m.split("-")[0] for m in MODELS}
RUNS = {
    m: {"objective": OBJECTIVE[m], "seed": 1 if "seed1" in m else 0, "token_dropout": 0.1 if "tokdrop" in m else 0.0}
    for m in MODELS
}
L = 4  # layers 0..3
H = 4.0
Z = 1.959964


def _replicates(model: str) -> list[str]:
    """A base name ("mt") names the model and its seed replicate; a full name only itself."""
    return [model, f"{model}-seed1"] if model in ("mt", "lm", "mlm") else [model]


def _mi(
    curves: dict[tuple[str, str], list[float]],
    *,
    sd: float = 0.01,
    sentence_sd: float = 0.0,
    shuffled: float | dict = 0.1,
    entropy: float = H,
    layers: int = L,
) -> xr.Dataset:
    """MI per (model, target): ``curves`` give mi_mean; the two restarts sit at mean -/+ sd/sqrt(2)
    (so their ddof=1 sd is ``sd``); the corrected MI's sentence interval is mean -/+ Z sentence_sd.
    ``layers``: the number of layers of the curves (default :data:`L`)."""
    targets = ["input", "output", "masked_input"]
    shape = (len(MODELS), layers, len(targets))
    mi = np.full(shape + (2,), np.nan)
    shuf = np.full(shape, np.nan)
    for (model, target), c in curves.items():
        for m in _replicates(model):
            i, j = MODELS.index(m), targets.index(target)
            mi[i, :, j, 0] = np.asarray(c) - sd / np.sqrt(2)
            mi[i, :, j, 1] = np.asarray(c) + sd / np.sqrt(2)
            s = shuffled.get((model, target), 0.1) if isinstance(shuffled, dict) else shuffled
            shuf[i, :, j] = s
    mean = mi.mean(-1)
    corrected = mean - shuf
    iv = (
        np.stack([corrected - Z * sentence_sd, corrected + Z * sentence_sd], axis=-1)
        if sentence_sd
        else np.full(shape + (2,), np.nan)
    )
    return xr.Dataset(
        {
            "mi": (("model", "layer", "target", "restart"), mi),
            "mi_shuffled": (("model", "layer", "target"), shuf),
            "mi_mean": (("model", "layer", "target"), mean),
            "mi_corrected": (("model", "layer", "target"), corrected),
            "mi_fraction": (("model", "layer", "target"), mean / entropy),
            "mi_corrected_interval": (("model", "layer", "target", "bound"), iv),
            "k": (("model", "layer", "target"), np.full(shape, 30.0)),
            "n": (("model", "layer", "target"), np.full(shape, 3000.0)),
            "entropy": (("model", "target"), np.full((len(MODELS), 3), entropy)),
        },
        coords={
            "model": MODELS,
            "layer": np.arange(layers),
            "target": targets,
            "restart": [0, 1],
            "bound": ["low", "high"],
        },
    )


def _neighbors(rates: dict[tuple[str, str], list[float]], half_width: float = 0.01) -> xr.Dataset:
    measures = ["same_token", "position_distance", "same_left", "same_left_chance", "same_left_ceiling"]
    v = np.full((len(MODELS), L, len(measures)), np.nan)
    for (model, meas), c in rates.items():
        for m in _replicates(model):
            v[MODELS.index(m), :, measures.index(meas)] = c
    for m in MODELS:
        v[MODELS.index(m), :, 3], v[MODELS.index(m), :, 4] = 0.11, 0.62
    iv = np.stack([v - half_width, v + half_width], axis=-1)
    return xr.Dataset(
        {"value": (("model", "layer", "measure"), v), "interval": (("model", "layer", "measure", "bound"), iv)},
        coords={"model": MODELS, "layer": np.arange(L), "measure": measures, "bound": ["low", "high"]},
    )


def _similarity(pair: dict[str, float], half_width: float = 0.01, overrides: dict | None = None) -> xr.Dataset:
    """Same-layer distances by what two models differ in: "seed", the objective pair
    frozenset for objectives (shared or different initial weights alike), "layer0" at layer 0."""
    same = np.full((1, len(MODELS), len(MODELS), L), np.nan)
    for i, a in enumerate(MODELS):
        for j, b in enumerate(MODELS):
            for layer in range(L):
                if a == b:
                    d = 0.0
                elif OBJECTIVE[a] == OBJECTIVE[b]:
                    d = pair["seed"]
                else:
                    d = pair[frozenset({OBJECTIVE[a], OBJECTIVE[b]})]
                same[0, i, j, layer] = (overrides or {}).get((frozenset({a, b}), layer), d)
    dist = np.full((1, len(MODELS), L, len(MODELS), L), 0.5)
    for layer in range(L):
        dist[0, :, layer, :, layer] = same[0, :, :, layer]
    iv = np.stack([same - half_width, same + half_width], axis=-1)
    return xr.Dataset(
        {
            "distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), dist),
            "same_layer": (("metric", "model_a", "model_b", "layer"), same),
            "interval": (("metric", "model_a", "model_b", "layer", "bound"), iv),
        },
        coords={
            "metric": ["pwcca"],
            "model_a": MODELS,
            "layer_a": np.arange(L),
            "model_b": MODELS,
            "layer_b": np.arange(L),
            "layer": np.arange(L),
            "bound": ["low", "high"],
        },
    )


def _change(
    frequent: float,
    rare: float,
    *,
    half_width: float = 0.005,
    first_pair: tuple[float, float] | None = None,
    mlm_top: tuple[float, float] | None = None,
) -> xr.Dataset:
    """Change by frequency: bins 1-10 (frequent), 10-100 (rare) and an empty 100-1000. ``first_pair``
    (frequent, rare) overrides layer pair 0-1, which the paper does not plot; ``mlm_top`` (frequent,
    rare) the MLM's top pair."""
    bins = ["1-10", "10-100", "100-1000"]
    d = np.full((1, len(MODELS), L - 1, 3), np.nan)
    d[..., 0], d[..., 1] = frequent, rare
    if first_pair is not None:
        d[:, :, 0, 0], d[:, :, 0, 1] = first_pair
    if mlm_top is not None:
        for m in ("mlm", "mlm-seed1"):
            d[0, MODELS.index(m), -1, :2] = mlm_top
    iv = np.stack([d - half_width, d + half_width], axis=-1)
    n = np.full((len(MODELS), 3), 0.0)
    n[:, 0], n[:, 1] = 5000, 800
    return xr.Dataset(
        {
            "distance": (("metric", "model", "layer_pair", "freq_bin"), d),
            "interval": (("metric", "model", "layer_pair", "freq_bin", "bound"), iv),
            "n_occurrences": (("model", "freq_bin"), n),
        },
        coords={
            "metric": ["pwcca"],
            "model": MODELS,
            "layer_pair": ["0-1", "1-2", "2-3"],
            "layer_from": ("layer_pair", [0, 1, 2]),
            "layer_to": ("layer_pair", [1, 2, 3]),
            "freq_bin": bins,
            "bound": ["low", "high"],
        },
        attrs={"frequency": "training split"},
    )


def _influence(
    base: dict[str, tuple[list[float], list[float]]],
    drop: dict[str, tuple[float, float]],
    *,
    half_width: float = 0.005,
    seed_shift: float = 0.002,
) -> xr.Dataset:
    """``base[objective] = (rare per layer 1..3, frequent per layer 1..3)`` for the base model (the seed
    replicate is shifted by ``seed_shift`` in its rare bin); ``drop[objective] = (rare, frequent)`` at
    layer 1 of the token-dropout model (other layers 0.05)."""
    d = np.full((1, len(MODELS), L - 1, 2), 0.05)
    for o, (rare, frequent) in base.items():
        for m, shift in ((o, 0.0), (f"{o}-seed1", seed_shift)):
            d[0, MODELS.index(m), :, 1], d[0, MODELS.index(m), :, 0] = np.asarray(rare) + shift, frequent
    for o, (rare, frequent) in drop.items():
        d[0, MODELS.index(f"{o}-tokdrop"), 0] = [frequent, rare]
    iv = np.stack([d - half_width, d + half_width], axis=-1)
    samples = np.full((len(MODELS), L - 1, 2), 500.0)
    return xr.Dataset(
        {
            "distance": (("metric", "model", "layer", "freq_bin"), d),
            "interval": (("metric", "model", "layer", "freq_bin", "bound"), iv),
            "samples": (("model", "layer", "freq_bin"), samples),
        },
        coords={
            "metric": ["pwcca"],
            "model": MODELS,
            "layer": [1, 2, 3],
            "freq_bin": ["1-10", "10-100"],
            "bound": ["low", "high"],
        },
    )


PAPER_MI = {
    ("lm", "input"): [3.9, 3.7, 3.5, 3.0],
    ("mlm", "input"): [3.9, 3.2, 3.0, 3.6],
    ("mt", "input"): [3.9, 3.8, 3.6, 3.4],
    ("lm", "output"): [1.0, 1.3, 1.6, 2.0],
    ("mlm", "output"): [0.5, 0.8, 1.1, 1.4],
    ("mlm", "masked_input"): [1.2, 0.9, 0.6, 0.3],
}
PAPER_RATES = {
    ("mlm", "same_token"): [1, 0.95, 0.92, 0.9],
    ("mt", "same_token"): [1, 0.9, 0.8, 0.6],
    ("lm", "same_token"): [1, 0.8, 0.5, 0.3],
    ("mt", "position_distance"): [1, 2, 2, 2],
    ("lm", "position_distance"): [1, 3, 4, 5],
    ("mlm", "position_distance"): [1, 3, 5, 6],
    ("lm", "same_left"): [0.2, 0.6, 0.4, 0.25],
}
PAPER_PAIRS = {"seed": 0.1, frozenset({"lm", "mt"}): 0.6, frozenset({"mt", "mlm"}): 0.3, frozenset({"lm", "mlm"}): 0.5}
PAPER_INFLUENCE = dict(
    base={"mt": ([0.30, 0.10, 0.08], [0.10, 0.09, 0.08]), "lm": ([0.40, 0.2, 0.1], [0.2, 0.1, 0.1])},
    drop={"mt": (0.08, 0.1), "lm": (0.15, 0.2)},
)

PAPER = dict(
    mi=_mi(PAPER_MI),
    neighbors=_neighbors(PAPER_RATES),
    similarity=_similarity(PAPER_PAIRS),
    change=_change(frequent=0.12, rare=0.05, mlm_top=(0.06, 0.09)),
    influence=_influence(**PAPER_INFLUENCE),
)

REVERSED = dict(
    mi=_mi(
        {
            ("lm", "input"): [3.9, 3.0, 3.2, 3.5],
            ("mlm", "input"): [3.9, 3.6, 3.3, 3.0],
            ("mt", "input"): [3.9, 3.5, 3.0, 2.0],
            ("lm", "output"): [2.0, 1.6, 1.3, 1.0],
            ("mlm", "output"): [1.4, 1.1, 0.8, 0.5],
            ("mlm", "masked_input"): [0.3, 0.6, 0.9, 1.2],
        }
    ),
    neighbors=_neighbors(
        {
            ("mlm", "same_token"): [1, 0.8, 0.5, 0.3],
            ("mt", "same_token"): [1, 0.9, 0.8, 0.6],
            ("lm", "same_token"): [1, 0.95, 0.92, 0.9],
            ("mt", "position_distance"): [1, 3, 5, 7],
            ("lm", "position_distance"): [1, 3, 4, 5],
            ("mlm", "position_distance"): [1, 3, 5, 6],
            ("lm", "same_left"): [0.2, 0.3, 0.4, 0.5],
        }
    ),
    similarity=_similarity(
        {"seed": 0.55, frozenset({"lm", "mt"}): 0.3, frozenset({"mt", "mlm"}): 0.6, frozenset({"lm", "mlm"}): 0.5}
    ),
    change=_change(frequent=0.05, rare=0.12, mlm_top=(0.12, 0.05)),
    influence=_influence(
        base={"mt": ([0.10, 0.30, 0.08], [0.20, 0.09, 0.08]), "lm": ([0.1, 0.3, 0.1], [0.2, 0.1, 0.1])},
        drop={"mt": (0.3, 0.1), "lm": (0.3, 0.2)},
    ),
)


def _write(path, groups: dict[str, xr.Dataset], runs=RUNS):
    models = list(runs)
    attrs = {"objectives": {m: OBJECTIVE[m] for m in models}, "runs": runs, "seed": 0}
    sub = {}
    for name, ds in groups.items():
        if "model" in ds.dims:
            ds = ds.sel(model=models)
        if "model_a" in ds.dims:
            ds = ds.sel(model_a=models, model_b=models)
        sub[name] = ds.assign_attrs({**attrs, **ds.attrs})
    write_metrics(path, sub, fingerprint="test")
    return path


def _card(tmp_path, groups, runs=RUNS) -> dict[str, object]:
    return {f.label: f for f in scorecard(_write(tmp_path / "m.zarr", groups, runs))}


def _with(**changes) -> dict:
    return {**PAPER, **changes}


def test_numbers_shaped_as_the_paper_hold_every_claim(tmp_path):
    by = _card(tmp_path, PAPER)
    assert [k for k in by if k.isdigit()] == [str(n) for n in range(1, 13)]
    assert {k: f.verdict for k, f in by.items()} == {**dict.fromkeys(map(str, range(1, 13)), HOLDS), "11b": HOLDS}, [
        (k, f.why) for k, f in by.items() if f.verdict != HOLDS
    ]
    assert "mt 0.600 [0.590, 0.610]" in by["6"].measured
    assert "d(LM, MT) 0.600-0.600" in by["9"].measured and "8 replicate combination(s)" in by["9"].measured
    for f in by.values():  # every claim carries the paper's value and the figure that shows it
        assert f.figure and (f.paper or f.part)


def test_each_claim_turned_around_does_not_hold(tmp_path):
    by = _card(tmp_path, REVERSED)
    assert {k: f.verdict for k, f in by.items()} == {**dict.fromkeys(map(str, range(1, 13)), FAILS), "11b": FAILS}, [
        (k, f.verdict, f.why) for k, f in by.items() if f.verdict != FAILS
    ]


def test_saturation_overlap_and_missing_controls_make_claims_not_measurable(tmp_path):
    groups = _with(
        mi=_mi({("lm", "input"): [3.99] * 4, ("mlm", "input"): [3.99, 3.98, 3.97, 3.99], ("mt", "input"): [3.99] * 4}),
        neighbors=_neighbors(
            {
                ("mlm", "same_token"): [1, 0.9, 0.8, 0.62],
                ("mt", "same_token"): [1, 0.9, 0.8, 0.61],
                ("lm", "same_token"): [1, 0.9, 0.8, 0.60],
                ("lm", "same_left"): [0.2, 0.4, 0.38, 0.36],
            },
            half_width=0.05,
        ),
    )
    runs = {m: r for m, r in RUNS.items() if m in ("mt", "lm", "mlm")}
    by = _card(tmp_path, groups, runs)
    for n in ("1", "2", "3"):
        assert by[n].verdict == NA and "saturated" in by[n].why
    assert by["4"].verdict == NA and "output" in by["4"].why  # not stored
    assert by["6"].verdict == NA and "overlap" in by["6"].why
    assert by["8"].verdict == NA and "overlap" in by["8"].why
    assert by["10"].verdict == NA and "seed" in by["10"].why
    assert by["12"].verdict == NA and "token dropout" in by["12"].why


def test_the_report_opens_with_the_scorecard(tmp_path):
    from evolution.report.write import write_report

    path = _write(tmp_path / "m.zarr", PAPER)
    write_report(path, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.index("Findings scorecard") < md.index("Representations")
    html = (tmp_path / "report" / "report.html").read_text()
    assert html.count('class="verdict v-holds"') >= 12 and "12 of 12 claims hold" in html


# --- MI: control-subtracted values, combined uncertainty, saturation, every replicate -----------------


def _lm_top(drop: float, **kw) -> dict:
    """PAPER with the LM input curve falling by ``drop`` from layer 2 to the top, flat elsewhere."""
    return _with(mi=_mi({**PAPER_MI, ("lm", "input"): [3.9, 3.7, 3.5, 3.5 - drop]}, **kw))


@pytest.mark.parametrize("factor, verdict", [(1.5, FAILS), (2.5, HOLDS)])
def test_an_mi_difference_counts_beyond_two_combined_sd(tmp_path, factor, verdict):
    """Restart sd 0.01 and sentence sd 0.02 per value: combined sd of a difference sqrt(2 (0.01^2 +
    0.02^2)). A fall of 1.5 of it does not count, 2.5 does. Ignoring the sentence interval, or a
    factor of 1, would let the 1.5 case hold."""
    combined = np.sqrt(2 * (0.01**2 + 0.02**2))
    by = _card(tmp_path, _lm_top(factor * combined, sd=0.01, sentence_sd=0.02))
    assert by["1"].verdict == verdict, by["1"].why


@pytest.mark.parametrize("factor, verdict", [(1.5, FAILS), (2.5, HOLDS)])
def test_the_mt_lm_difference_counts_beyond_two_combined_sd(tmp_path, factor, verdict):
    combined = np.sqrt(2 * (0.01**2 + 0.02**2))
    mi = {**PAPER_MI, ("mt", "input"): [3.9, 3.8, 3.6, 3.0 + factor * combined], ("lm", "input"): [3.9, 3.7, 3.5, 3.0]}
    by = _card(tmp_path, _with(mi=_mi(mi, sd=0.01, sentence_sd=0.02)))
    assert by["3"].verdict == verdict, by["3"].why


def test_mi_rules_read_the_control_subtracted_mi(tmp_path):
    """The LM's raw MI falls from layer 2 to the top, but its shuffled control falls by as much:
    MI minus the control is flat, so the claim does not hold."""
    control = {("lm", "input"): np.array([0.9, 0.7, 0.5, 0.0])}
    mi = _mi(PAPER_MI)
    mi["mi_shuffled"].loc[dict(model=["lm", "lm-seed1"], target="input")] = control[("lm", "input")]
    mi["mi_corrected"] = mi.mi_mean - mi.mi_shuffled
    by = _card(tmp_path, _with(mi=mi))
    assert by["1"].verdict == FAILS


def test_claim_3_is_not_measurable_when_either_side_is_saturated(tmp_path):
    """MT at 99.5% of H(X) at the top layer, the LM at 85%: the ceiling hides how much MT lost."""
    mi = {**PAPER_MI, ("mt", "input"): [3.99, 3.99, 3.99, 3.98]}
    by = _card(tmp_path, _with(mi=_mi(mi)))
    assert by["3"].verdict == NA and "mt" in by["3"].why and "saturated" in by["3"].why


def test_an_mi_claim_fails_when_one_seed_replicate_fails(tmp_path):
    mi = _mi(PAPER_MI)
    flat = dict(model="lm-seed1", target="input")
    for v in ("mi_mean", "mi_corrected"):
        mi[v].loc[flat] = mi[v].sel(flat).values[2]
    mi["mi"].loc[flat] = mi["mi"].sel(flat).values[2]
    by = _card(tmp_path, _with(mi=mi))
    assert by["1"].verdict == FAILS and "1 of 2" in by["1"].why


def _seed_curve(mi: xr.Dataset, model: str, target: str, curve: list[float]) -> xr.Dataset:
    """``mi`` with the seed replicate ``model``'s curve for ``target`` replaced by ``curve`` (built
    by :func:`_mi` the same way as every other curve); its base model keeps its own."""
    other = _mi({(model.split("-")[0], target): curve})
    sel = dict(model=model, target=target)
    for v in ("mi", "mi_shuffled", "mi_mean", "mi_corrected", "mi_fraction", "mi_corrected_interval"):
        mi[v].loc[sel] = other[v].sel(sel).values
    return mi


@pytest.mark.parametrize("seed", ["mt-seed1", "lm-seed1"])
def test_claim_3_fails_when_one_seed_replicate_fails(tmp_path, seed):
    """Claim 3 is judged on every (MT, LM) replicate pair. The base pair holds (MT's top layer
    3.4 vs the LM's 3.0, far beyond 2 combined sd); in one seed replicate the order is turned
    around (MT seed at 2.9 below the LM's 3.0, or the LM seed at 3.5 above MT's 3.4), so the pairs
    with that replicate fail and the claim must not hold. Judged on the base models alone (either
    side restricted to its first replicate) it would hold."""
    top = {"mt-seed1": [3.9, 3.8, 3.6, 2.9], "lm-seed1": [3.9, 3.7, 3.5, 3.5]}[seed]
    mi = _seed_curve(_mi(PAPER_MI), seed, "input", top)
    by = _card(tmp_path, _with(mi=mi))
    assert by["3"].verdict == FAILS and "holds for 2 of 4 pairs" in by["3"].why, (by["3"].verdict, by["3"].why)
    assert seed in by["3"].measured


@pytest.mark.parametrize("target, curve", [("masked_input", [0.3, 0.6, 0.9, 1.2]), ("output", [1.4, 1.1, 0.8, 0.5])])
def test_claim_5_fails_when_one_seed_replicate_fails(tmp_path, target, curve):
    """Claim 5 is judged on every MLM replicate. The base MLM holds (original token's MI rises
    0.5 -> 1.4, the fed token's falls 1.2 -> 0.3); the seed replicate has one of the two curves
    turned around, so the claim must not hold. Judged on the base MLM alone it would hold."""
    mi = _seed_curve(_mi(PAPER_MI), "mlm-seed1", target, curve)
    by = _card(tmp_path, _with(mi=mi))
    assert by["5"].verdict == FAILS and "holds in 1 of 2 replicates" in by["5"].why, (by["5"].verdict, by["5"].why)
    assert "mlm-seed1" in by["5"].measured


# --- neighbours: every replicate, intervals ---------------------------------------------------------


def test_same_token_order_must_hold_for_every_replicate(tmp_path):
    nb = _neighbors(PAPER_RATES)
    nb["value"].loc[dict(model="mlm-seed1", measure="same_token", layer=L - 1)] = 0.5  # below mt's 0.6
    nb["interval"] = xr.concat([nb.value - 0.01, nb.value + 0.01], dim="bound").transpose(*nb.interval.dims)
    by = _card(tmp_path, _with(neighbors=nb))
    assert by["6"].verdict == FAILS


def test_position_distance_with_overlapping_intervals_is_not_measurable(tmp_path):
    rates = {
        **PAPER_RATES,
        ("mt", "position_distance"): [1, 2, 2, 4.95],
        ("lm", "position_distance"): [1, 3, 4, 5],
        ("mlm", "position_distance"): [1, 3, 5, 5.05],
    }
    by = _card(tmp_path, _with(neighbors=_neighbors(rates, half_width=0.1)))
    assert by["7"].verdict == NA and "overlap" in by["7"].why


def test_left_context_reports_chance_and_ceiling(tmp_path):
    by = _card(tmp_path, PAPER)
    assert by["8"].verdict == HOLDS
    assert any("chance 0.110" in d and "ceiling 0.620" in d for d in by["8"].details)


# --- similarity: intervals, seeds vs objectives, change by frequency ---------------------------------


def test_lm_mt_farther_with_overlapping_intervals_is_not_measurable(tmp_path):
    pairs = {**PAPER_PAIRS, frozenset({"lm", "mt"}): 0.31, frozenset({"mt", "mlm"}): 0.30}
    by = _card(tmp_path, _with(similarity=_similarity(pairs, half_width=0.02)))
    assert by["9"].verdict == NA and "overlap" in by["9"].why


def test_seeds_closer_reports_the_init_controlled_comparison_and_layer_0(tmp_path):
    """Objectives of one seed share initial weights and sit close at layers 0-1, closer than the
    seeds: the paper's rule fails there; the objectives across initial weights are farther than
    the seeds at every layer, which the init-controlled diagnostic reports."""
    overrides = {}
    for a in ("mt", "lm", "mlm"):
        for b in ("mt", "lm", "mlm"):
            if a < b:
                for layer in (0, 1):
                    overrides[(frozenset({a, b}), layer)] = 0.05
                    overrides[(frozenset({f"{a}-seed1", f"{b}-seed1"}), layer)] = 0.05
    by = _card(tmp_path, _with(similarity=_similarity(PAPER_PAIRS, overrides=overrides)))
    f = by["10"]
    assert f.verdict == FAILS and "[1]" in f.why and "initial weights" in f.why
    controlled = next(d for d in f.details if d.startswith("init-controlled"))
    assert "seeds closer at layer(s) [1, 2, 3]" in controlled
    layer0 = next(d for d in f.details if d.startswith("layer 0"))
    assert "objectives, shared init 0.050-0.050" in layer0 and "seeds 0.100-0.100" in layer0


def test_change_reads_the_papers_layer_pairs(tmp_path):
    """Frequent tokens change more at every pair the paper plots (1-2 up), less at 0-1: holds.
    Averaging 0-1 in as well would make it fail."""
    by = _card(tmp_path, _with(change=_change(frequent=0.06, rare=0.05, first_pair=(0.01, 0.5), half_width=0.001)))
    assert by["11"].verdict == HOLDS, by["11"].why
    assert any("5000 occurrences in the frequent bin, 800 in the rare one" in d for d in by["11"].details)


def test_change_with_overlapping_intervals_does_not_hold(tmp_path):
    by = _card(tmp_path, _with(change=_change(frequent=0.06, rare=0.05, half_width=0.01)))
    assert by["11"].verdict == FAILS


def test_mlm_top_layer_reversal_is_its_own_line(tmp_path):
    by = _card(tmp_path, _with(change=_change(frequent=0.12, rare=0.05, mlm_top=(0.11, 0.06))))
    assert by["11"].verdict == HOLDS and by["11b"].verdict == FAILS and by["11b"].part == "b"


def test_mlm_reversal_with_overlapping_intervals_is_not_measurable(tmp_path):
    """Claim 11b: at the MLM's top pair the rare bin's point value (0.07) is above the frequent
    bin's (0.06), but with half-width 0.01 their intervals overlap ([0.06, 0.08] vs [0.05, 0.07]):
    the reversal is in order on the points only, so 11b is "not measurable here", not "holds"."""
    by = _card(tmp_path, _with(change=_change(frequent=0.12, rare=0.05, mlm_top=(0.06, 0.07), half_width=0.01)))
    assert by["11b"].verdict == NA and "overlap" in by["11b"].why, (by["11b"].verdict, by["11b"].why)
    assert by["11"].verdict == HOLDS, by["11"].why  # claim 11 proper is untouched: its averaged intervals separate


# --- influence: MT and LM, layer 1, token dropout beyond the seed spread ------------------------------


def test_rare_influence_needs_lm_as_well_as_mt(tmp_path):
    """MT shows it; the LM's rare bin is not its top bin at layer 1: the claim does not hold."""
    base = {**PAPER_INFLUENCE["base"], "lm": ([0.15, 0.2, 0.1], [0.2, 0.1, 0.1])}
    by = _card(tmp_path, _with(influence=_influence(base=base, drop=PAPER_INFLUENCE["drop"])))
    assert by["12"].verdict == FAILS and "lm:" in by["12"].why


def test_rare_influence_needs_the_layer_1_lead_of_the_base_model(tmp_path):
    """Token dropout behaves, but the base MT's rare bin leads at layer 2, not 1."""
    base = {**PAPER_INFLUENCE["base"], "mt": ([0.10, 0.30, 0.08], [0.09, 0.09, 0.08])}
    by = _card(tmp_path, _with(influence=_influence(base=base, drop=PAPER_INFLUENCE["drop"])))
    assert by["12"].verdict == FAILS


def test_token_dropout_must_lower_the_rare_bin_beyond_the_seed_spread(tmp_path):
    """The dropout MT's rare bin loses its top status but falls by 0.01, within the seeds' 0.05."""
    inf = _influence(base=PAPER_INFLUENCE["base"], drop={"mt": (0.29, 0.295), "lm": (0.15, 0.2)}, seed_shift=0.05)
    by = _card(tmp_path, _with(influence=inf))
    assert by["12"].verdict == FAILS and "seed spread" in by["12"].why


def test_rare_influence_with_overlapping_layer_1_intervals_does_not_hold(tmp_path):
    base = {**PAPER_INFLUENCE["base"], "mt": ([0.105, 0.10, 0.08], [0.10, 0.09, 0.08])}
    by = _card(tmp_path, _with(influence=_influence(base=base, drop=PAPER_INFLUENCE["drop"], half_width=0.01)))
    assert by["12"].verdict == FAILS and "overlap" in by["12"].why


def _influence_three_bins(mt_middle: list[float], **kw) -> xr.Dataset:
    """:func:`_influence` with a middle frequency bin between the frequent ("1-10") and the rare one
    (now "100-1000"): ``mt_middle`` per layer 1..3 for MT and its seed replicate, 0.05 elsewhere."""
    two = _influence(**kw)
    middle = xr.full_like(two.isel(freq_bin=[0]), 0.05)
    middle["samples"] = xr.full_like(middle.samples, 500.0)
    for m in ("mt", "mt-seed1"):
        middle["distance"].loc[dict(model=m)] = np.asarray(mt_middle)[None, :, None]
    hw = kw.get("half_width", 0.005)
    middle["interval"] = (
        xr.concat([middle.distance - hw, middle.distance + hw], dim="bound")
        .transpose(*two.interval.dims)
        .assign_coords(bound=["low", "high"])
    )
    ds = xr.concat(
        [
            two.isel(freq_bin=[0]),
            middle.assign_coords(freq_bin=["10-100"]),
            two.isel(freq_bin=[1]).assign_coords(freq_bin=["100-1000"]),
        ],
        dim="freq_bin",
    )
    return ds


def test_rare_influence_needs_the_rare_bin_on_top_at_layer_1(tmp_path):
    """Three bins. MT's rarest bin (0.30 at layer 1) is above the most frequent (0.10) with
    separated intervals and peaks at layer 1, and token dropout behaves; but a middle bin has the
    largest layer-1 influence (0.40), so the rare bin is not the top bin and the claim must not
    hold. Only the "top bin" condition tells this case apart: the interval and peak conditions
    both pass."""
    inf = _influence_three_bins([0.40, 0.10, 0.08], **PAPER_INFLUENCE)
    by = _card(tmp_path, _with(influence=inf))
    assert by["12"].verdict == FAILS, (by["12"].verdict, by["12"].why)
    assert "mt: the rare bin is not the most influential at layer 1" in by["12"].why
    assert "overlap" not in by["12"].why and "peaks" not in by["12"].why


def test_rare_influence_needs_the_rare_bin_to_peak_at_layer_1(tmp_path):
    """MT's rare bin is the top bin at layer 1 (0.30 vs 0.10, intervals apart) and token dropout
    behaves, but its influence is larger still at layer 2 (0.35): it peaks at layer 2, not 1, so
    the claim must not hold. Only the "peaks at layer 1" condition tells this case apart."""
    base = {**PAPER_INFLUENCE["base"], "mt": ([0.30, 0.35, 0.08], [0.10, 0.09, 0.08])}
    by = _card(tmp_path, _with(influence=_influence(base=base, drop=PAPER_INFLUENCE["drop"])))
    assert by["12"].verdict == FAILS, (by["12"].verdict, by["12"].why)
    assert "mt: the rare bin's influence peaks at layer 2" in by["12"].why
    assert "most influential" not in by["12"].why and "overlap" not in by["12"].why


# --- each rule at its own boundary, against the answer worked out by hand ------------------------------


def test_claim_1_top_layer_equal_to_layer_2_is_no_fall(tmp_path):
    """Claim 1 on its boundary: no restart spread and no sentence interval, so 2 combined sd is 0
    and the rule asks the top layer to be strictly below layer 2. Here it is equal to it (3.5 and
    3.5, the same float): the LM's MI does not fall, so the claim does not hold. Counting a
    difference *equal* to the threshold (>= instead of >) would let it hold."""
    mi = _mi({("lm", "input"): [3.9, 3.7, 3.5, 3.5]}, sd=0.0)
    by = _card(tmp_path, _with(mi=mi))
    assert by["1"].verdict == FAILS, (by["1"].verdict, by["1"].why)
    assert "the top layer is not below layer 2" in by["1"].why


def test_claim_1_a_flat_step_is_no_rise(tmp_path):
    """Claim 1 on its other boundary: five layers, no spread (2 combined sd = 0); the LM's MI falls
    from layer 2 (3.5) to the top (3.0) and is flat from layer 2 to 3 (3.5, 3.5). A flat step does
    not rise by more than 2 combined sd, so the claim holds; counting a step equal to the
    threshold as a rise (>= instead of >) would report a rise at layer 3 and fail it."""
    mi = _mi({("lm", "input"): [3.9, 3.7, 3.5, 3.5, 3.0]}, sd=0.0, layers=5)
    by = _card(tmp_path, _with(mi=mi))
    assert by["1"].verdict == HOLDS, (by["1"].verdict, by["1"].why)
    assert "rises" not in by["1"].why
    assert "top 0.72 H" in by["1"].measured  # layer 4: 3.0 minus the control 0.1, over H = 4


@pytest.mark.parametrize("curve, layer", [([3.9, 3.1, 3.9, 3.9], 1), ([3.9, 3.9, 3.1, 3.9], 2)])
def test_claim_2_finds_the_minimum_of_the_middle_layers(tmp_path, curve, layer):
    """The MLM's MI(input) dips at one middle layer only (3.1, 3.0 after the control = 0.75 H) and
    is 3.9 at layer 0, the other middle layer and the top: the minimum over the middle layers is at
    ``layer``, below both ends by far more than 2 combined sd, so the claim holds. A minimum
    located one layer off lands on a layer equal to an end (3.9) and would fail it."""
    by = _card(tmp_path, _with(mi=_mi({**PAPER_MI, ("mlm", "input"): curve})))
    assert by["2"].verdict == HOLDS, (by["2"].verdict, by["2"].why, by["2"].measured)
    for replicate in ("mlm", "mlm-seed1"):
        assert re.search(
            rf"(^|; ){replicate}: layer 0 0\.95 H [^,]*, minimum 0\.75 H \([^)]*\) at layer {layer},", by["2"].measured
        ), by["2"].measured


def test_claim_9_reads_the_interval_of_each_named_pair(tmp_path):
    """Claim 9's intervals are those of the base models' LM-MT and MT-MLM pairs: LM-MT 0.6 and
    MT-MLM 0.3 with half-width 0.02 give [0.58, 0.62] vs [0.28, 0.32], apart: holds. The third
    pair, LM-MLM at 0.59 ([0.57, 0.61]), overlaps LM-MT, and the seed replicates' pairs sit
    elsewhere (LM-MT 0.7, MT-MLM 0.2): reading any other pair's interval prints other numbers (and
    for LM-MLM in MT-MLM's place turns the verdict into "not measurable")."""
    pairs = {"seed": 0.1, frozenset({"lm", "mt"}): 0.6, frozenset({"mt", "mlm"}): 0.3, frozenset({"lm", "mlm"}): 0.59}
    overrides = {}
    for layer in range(L):
        for lm in ("lm", "lm-seed1"):
            for mt in ("mt", "mt-seed1"):
                if (lm, mt) != ("lm", "mt"):
                    overrides[(frozenset({lm, mt}), layer)] = 0.7
        for mt in ("mt", "mt-seed1"):
            for mlm in ("mlm", "mlm-seed1"):
                if (mt, mlm) != ("mt", "mlm"):
                    overrides[(frozenset({mt, mlm}), layer)] = 0.2
    by = _card(tmp_path, _with(similarity=_similarity(pairs, half_width=0.02, overrides=overrides)))
    f = by["9"]
    assert "base models' 95% intervals [0.580, 0.620] vs [0.280, 0.320]" in f.measured, f.measured
    assert f.verdict == HOLDS, (f.verdict, f.why)
    assert "d(LM, MT) 0.600-0.700, d(MT, MLM) 0.200-0.300" in f.measured, f.measured


@pytest.mark.parametrize(
    "pair, distance, seeds, objectives",
    [
        # one objective's seeds far apart (0.4), the others' close (0.1); objectives no closer than 0.3
        (frozenset({"lm", "lm-seed1"}), 0.4, "0.400", "0.300"),
        # seeds at 0.1; one pair of objectives (MT of seed 1, base LM) closer than that, at 0.05
        (frozenset({"mt-seed1", "lm"}), 0.05, "0.100", "0.050"),
    ],
)
def test_claim_10_compares_the_farthest_seeds_with_the_closest_objectives(tmp_path, pair, distance, seeds, objectives):
    """Claim 10's rule: at every layer from 1 up, the *largest* distance between two seeds of one
    objective below the *smallest* distance between two objectives. In both cases some seed pair
    is closer than every objective pair, but the farthest seed pair is not: the claim does not
    hold at layers 1-3. Taking the closest seed pair (or the farthest objectives) would let it
    hold."""
    overrides = {(pair, layer): distance for layer in range(L)}
    by = _card(tmp_path, _with(similarity=_similarity(PAPER_PAIRS, overrides=overrides)))
    f = by["10"]
    assert f.verdict == FAILS and "fails at layer(s) [1, 2, 3]" in f.why, (f.verdict, f.why)
    assert f"layer 1: seeds <= {seeds}, objectives >= {objectives}" in f.measured, f.measured


@pytest.mark.parametrize("run", ["bible-full", "bible-paper"])
def test_committed_scorecard_is_computed_from_the_committed_store(run):
    """results/<run>: the report's scorecard.json is what scorecard() gives on the
    committed metrics.zarr (no verdict or number edited by hand, none stale)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results" / run
    committed = json.loads((root / "report" / "scorecard.json").read_text(encoding="utf-8"))
    assert [f.as_dict() for f in scorecard(root / "metrics.zarr")] == committed
    assert len([f for f in committed if not f.get("part")]) == 12
