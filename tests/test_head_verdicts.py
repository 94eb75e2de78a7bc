"""The head verdicts (evolution.report.heads_card) on synthetic metrics stores whose answers
are known by construction: numbers shaped as Clark et al. (2019), Voita et al. (ACL 2019)
and Kobayashi et al. (2020) report them make every verdict hold; each turned around makes
it fail; a missing group or variable makes it not measurable. Each rule is probed at its
boundary (a sink share of 0.49 / 0.51, a dependency margin of 0.095 / 0.105, two standard
errors, 49 / 50 arcs, a mean rho of 0.09 / 0.11, a norm share 0.001 above / below the weight
share) and each test at its level: head values placed at chosen ranks give exact
Mann-Whitney and signed-rank p-values just below and just above 0.05, checked against an
enumeration of every assignment of the ranks."""

from __future__ import annotations

import copy
import itertools
import json
import re

import numpy as np
import pytest
import xarray as xr

from evolution.metrics.heads import DIRECTIONS, MEASURES
from evolution.metrics.results import write_metrics
from evolution.report.heads_card import head_verdicts
from evolution.report.heads_card.base import rank_greater, signed_rank_below
from evolution.report.scorecard import FAILS, HOLDS, NA

MODELS = ["mt", "lm", "mlm"]
L, H = 4, 3  # layers 1-2 are the lower half, 3-4 the upper half: 6 heads each
KEYS = ["bos", "eos", "punct"]
RELATIONS = ["nsubj", "obj", "amod"]
ROLE_HEADS = [(0, 0), (1, 1), (3, 2)]  # (layer index, head): positional, syntactic (obj), rare-token


def _by_rank(ranks_upper: list[int], low: float, step: float) -> np.ndarray:
    """(L, H) values: the 6 heads of the upper half (layers 3-4) take the pooled ranks
    ``ranks_upper`` (1 = smallest of 12), the lower half the other ranks; value = low + step x rank."""
    lower = sorted(set(range(1, 13)) - set(ranks_upper))
    out = np.empty((L, H))
    out[:2] = (low + step * np.asarray(lower, float)).reshape(2, H)
    out[2:] = (low + step * np.asarray(sorted(ranks_upper, reverse=True), float)).reshape(2, H)
    return out


def _holding() -> dict:
    """Per model, the arrays of a store on which every verdict holds."""
    role = np.zeros((L, H), bool)
    for x, h in ROLE_HEADS:
        role[x, h] = True
    confidence = np.where(role, 0.0, 0.2 + 0.01 * np.arange(L * H).reshape(L, H))
    confidence[role] = [0.60, 0.62, 0.64]
    # the heads with roles first in their layer; no ties (the Mann-Whitney p is then exact)
    importance = np.array([[0.90, 0.20, 0.25], [0.21, 0.91, 0.26], [0.30, 0.31, 0.32], [0.22, 0.27, 0.92]])
    one = {
        "sink": _by_rank(list(range(7, 13)), 0.4, 0.02),  # upper heads highest; layer means 0.62 and 0.56
        # lower heads broadest, layer 1's the broadest of all (C2 and its earlier rule, the halves, hold)
        "entropy_share": _by_rank(list(range(1, 7)), 0.5, 0.03)[[1, 0, 2, 3]],
        "confidence": confidence,
        "role": role,
        "norm_ratio": 0.3 + 0.02 * np.arange(L * H).reshape(L, H),  # the sinks' norm share / weight share
        "layer_norm_ratio": np.full(L, 0.5),
        "rho": np.array([0.2, 0.3, 0.4, 0.5]),
        "relevance": importance.copy(),
        "importance": importance * np.array([1, 1, 10, 1])[:, None],
        # obj, dependent -> head beats its offset: picked on select, scored on score
        "picked": {("obj", "dependent_to_head"): 0.60},
        "baseline": {},
        "best": {},
        "arcs": {},
    }
    return {m: copy.deepcopy(one) for m in MODELS}


def _heads(d: dict, drop=(), with_sink_measure: bool = True) -> xr.Dataset:
    n = len(MODELS)
    measures = [m for m in MEASURES if with_sink_measure or m != "confidence_with_sink"]
    value = np.full((n, L, H, len(measures)), np.nan)
    alpha = np.full((n, L, H, 3), np.nan)
    norm = np.full_like(alpha, np.nan)
    layer_alpha, layer_norm = np.full((n, L, 3), np.nan), np.full((n, L, 3), np.nan)
    positional, rare = np.zeros((n, L, H), bool), np.full((n, L, H), 0.05)
    syntactic = np.zeros((n, L, H, 2), bool)
    spearman = np.full((n, L, 2), np.nan)
    for i, m in enumerate(MODELS):
        x = d[m]
        value[i, ..., measures.index("uniform_entropy")] = 3.0
        value[i, ..., measures.index("entropy")] = 3.0 * x["entropy_share"]
        value[i, ..., measures.index("confidence")] = x["confidence"]
        # the sinks: the MT encoder has no BOS, the LM no EOS (NaN, as the analysis stores them)
        split = {"mt": (np.nan, 1.0), "lm": (1.0, np.nan), "mlm": (0.4, 0.6)}[m]
        for k, f in enumerate(split):
            alpha[i, ..., k] = f * x["sink"]
            norm[i, ..., k] = f * x["sink"] * x["norm_ratio"] if x.get("norms", True) else np.nan
            layer_alpha[i, :, k] = f * x["sink"].mean(-1)
            layer_norm[i, :, k] = f * x["sink"].mean(-1) * x["layer_norm_ratio"] if x.get("norms", True) else np.nan
        alpha[i, ..., 2], norm[i, ..., 2] = 0.05, 0.06
        layer_alpha[i, :, 2], layer_norm[i, :, 2] = 0.05, 0.06
        value[i, ..., measures.index("to_bos")] = alpha[i, ..., 0]
        value[i, ..., measures.index("to_eos")] = alpha[i, ..., 1]
        (pa, ph), (sa, sh), (ra, rh) = ROLE_HEADS
        positional[i, pa, ph] = x["role"][pa, ph]
        syntactic[i, sa, sh, 1] = x["role"][sa, sh]  # obj
        rare[i, ra, rh] = 0.3 if x["role"][ra, rh] else 0.05
        spearman[i, :, 0] = x["rho"] if x.get("norms", True) else np.nan
        spearman[i, :, 1] = 0.1
        n_layers = x.get("layers", L)  # a model with fewer layers: padded with NaN, as the analysis stores it
        for arr in (value, alpha, norm, rare, layer_alpha, layer_norm, spearman):
            arr[i, n_layers:] = np.nan
    ds = xr.Dataset(
        {
            "value": (("model", "layer", "head", "measure"), value),
            "positional": (("model", "layer", "head"), positional),
            "alpha_share": (("model", "layer", "head", "key_type"), alpha),
            "norm_share": (("model", "layer", "head", "key_type"), norm),
            "layer_alpha_share": (("model", "layer", "key_type"), layer_alpha),
            "layer_norm_share": (("model", "layer", "key_type"), layer_norm),
            "rare_token_share": (("model", "layer", "head"), rare),
            "spearman": (("model", "layer", "quantity"), spearman),
            "syntactic": (("model", "layer", "head", "syntactic_relation"), syntactic),
        },
        coords={
            "model": MODELS,
            "layer": np.arange(1, L + 1),
            "head": np.arange(H),
            "measure": measures,
            "key_type": KEYS,
            "quantity": ["value_norm", "alpha_received"],
            "syntactic_relation": ["nsubj", "obj"],
        },
    )
    return ds.drop_vars([v for v in drop if v in ds])


def _dependency(d: dict, drop=()) -> xr.Dataset:
    shape = (len(MODELS), len(RELATIONS), len(DIRECTIONS))
    picked, base, best = np.full(shape, 0.30), np.full(shape, 0.30), np.full(shape, 0.32)
    arcs = np.full((len(MODELS), 2, len(RELATIONS)), 1000)
    for i, m in enumerate(MODELS):
        for (r, di), v in d[m]["picked"].items():
            picked[i, RELATIONS.index(r), DIRECTIONS.index(di)] = v
        for (r, di), v in d[m]["baseline"].items():
            base[i, RELATIONS.index(r), DIRECTIONS.index(di)] = v
        for (r, di), v in d[m]["best"].items():
            best[i, RELATIONS.index(r), DIRECTIONS.index(di)] = v
        for r, n in d[m]["arcs"].items():
            arcs[i, 1, RELATIONS.index(r)] = n
    dims = ("model", "relation", "direction")
    baseline = np.maximum(base, 0.0)
    ds = xr.Dataset(
        {
            "picked_accuracy": (dims, picked),
            "baseline_accuracy": (dims, baseline),
            "best_accuracy": (dims, best),
            "arcs": (("model", "split", "relation"), arcs),
        },
        coords={"model": MODELS, "relation": RELATIONS, "direction": list(DIRECTIONS), "split": ["select", "score"]},
    )
    return ds.drop_vars([v for v in drop if v in ds])


def _importance(d: dict, *, batch: bool = True) -> xr.Dataset:
    """LRP relevance for the translation model only; mask importance for every model, per
    sentence (``importance``) and, with ``batch``, per batch of 16 (``importance_batch``: a
    model's own ``importance_batch`` where given, else the same numbers as per sentence)."""
    attentions = ["encoder_self", "decoder_self", "encoder_decoder"]
    imp = np.full((len(MODELS), 3, L, H), np.nan)
    rel, per_batch = np.full_like(imp, np.nan), np.full_like(imp, np.nan)
    for i, m in enumerate(MODELS):
        imp[i, 0] = d[m]["importance"]
        per_batch[i, 0] = d[m].get("importance_batch", d[m]["importance"])
        if m == "mt":
            rel[i, 0] = d[m]["relevance"]
    dims = ("model", "attention", "layer", "head")
    ds = xr.Dataset(
        {"importance": (dims, imp), "relevance": (dims, rel)},
        coords={"model": MODELS, "attention": attentions, "layer": np.arange(1, L + 1), "head": np.arange(H)},
    )
    if batch:
        ds["importance_batch"] = (dims, per_batch, {"batch_size": 16})
    return ds


def _verdicts(
    tmp_path, d=None, *, groups=("heads", "heads_dependency", "heads_importance"), drop=(), with_sink_measure=True
) -> dict:
    d = _holding() if d is None else d
    build = {
        "heads": lambda: _heads(d, drop, with_sink_measure),
        "heads_dependency": lambda: _dependency(d, drop),
        "heads_importance": lambda: _importance(d),
    }
    path = tmp_path / "m.zarr"
    datasets = {g: build[g]() for g in groups}
    if not datasets:  # a store of another analysis only
        datasets = {"other": xr.Dataset({"x": (("i",), np.arange(3.0))})}
    write_metrics(path, datasets, fingerprint="test")
    # V3 reads the pruning group, which none of these stores has (tests/test_pruning_verdict.py)
    return {f.label: f for f in head_verdicts(path) if f.label != "V3"}


def _part(text: str, model: str) -> str:
    """What a finding's measured text says of ``model`` (its models are joined by "; ")."""
    return re.search(rf"(?:^|; ){model}: (.*?)(?=; (?:{'|'.join(MODELS)}): |$)", text).group(1)


def _line(f, model: str) -> str:
    """A finding's full text on ``model`` (its details: one line per model read)."""
    return next(x for x in f.details if x.startswith(f"{model}: "))


def _p(text: str, model: str) -> float:
    """The p-value printed for ``model`` in a finding's measured text."""
    return float(re.search(r"p = ([0-9.e+-]+[0-9])", _part(text, model)).group(1))


# ------------------------------------------------------------------- reference tests


def _exact_mw(x, y) -> tuple[float, float]:
    """(A, p) of "x above y" by enumerating every assignment of the pooled ranks (no ties)."""
    pooled = np.concatenate([x, y])
    ranks = pooled.argsort().argsort() + 1
    observed = ranks[: len(x)].sum()
    sums = [sum(c) for c in itertools.combinations(range(1, len(pooled) + 1), len(x))]
    a = sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y) / (len(x) * len(y))
    return a, float(np.mean([s >= observed for s in sums]))


def _exact_signed_rank(d) -> float:
    """One-sided p of "d below 0" by enumerating every sign pattern of the ranks (no ties)."""
    ranks = np.abs(d).argsort().argsort() + 1
    r_plus = ranks[d > 0].sum()
    return float(
        np.mean(
            [
                sum(r for r, s in zip(ranks, signs, strict=True) if s) <= r_plus
                for signs in itertools.product([0, 1], repeat=len(d))
            ]
        )
    )


@pytest.mark.parametrize(
    "upper_ranks", [[12, 11, 10, 9, 7, 1], [12, 11, 10, 9, 6, 1], [12, 8, 6, 5, 3, 2], [6, 5, 4, 3, 2, 1]]
)
def test_rank_greater_is_the_exact_mann_whitney_test(upper_ranks):
    v = _by_rank(upper_ranks, 0.0, 1.0)
    a, p = rank_greater(v[2:].ravel(), v[:2].ravel())
    ref_a, ref_p = _exact_mw(v[2:].ravel(), v[:2].ravel())
    assert a == pytest.approx(ref_a) and p == pytest.approx(ref_p)


@pytest.mark.parametrize("positive", [(), (10, 7), (10, 8), (12, 11, 1)])
def test_signed_rank_below_is_the_exact_wilcoxon_test(positive):
    d = np.array([(1 if r in positive else -1) * 0.001 * r for r in range(1, 13)])
    below, n, p, in_order = signed_rank_below(d)
    assert (below, n) == (12 - len(positive), 12)
    assert p == pytest.approx(_exact_signed_rank(d))
    assert in_order == (sum(positive) < 12 * 13 / 4)


def test_rank_greater_with_ties_is_the_normal_approximation_with_tie_correction():
    from scipy.stats import norm

    x, y = np.array([0.3, 0.5, 0.5, 0.7, 0.9, 0.9]), np.array([0.1, 0.3, 0.5, 0.2, 0.4, 0.3, 0.6])
    u = sum((a > b) + 0.5 * (a == b) for a in x for b in y)
    m, n = len(x), len(y)
    _, counts = np.unique(np.concatenate([x, y]), return_counts=True)
    var = m * n / 12 * ((m + n + 1) - (counts**3 - counts).sum() / ((m + n) * (m + n - 1)))
    a, p = rank_greater(x, y)
    assert a == pytest.approx(u / (m * n))
    assert p == pytest.approx(norm.sf((u - m * n / 2 - 0.5) / np.sqrt(var)))


@pytest.mark.parametrize(
    "n, lower, upper", [(2, [1], [2]), (4, [1, 2], [3, 4]), (5, [1, 2], [4, 5]), (7, [1, 2, 3], [5, 6, 7])]
)
def test_halves_leave_the_middle_layer_out(n, lower, upper):
    from evolution.report.heads_card.base import halves

    assert halves(range(1, n + 1)) == (lower, upper)


# ------------------------------------------------------------------- all hold, all fail, none measurable


def test_numbers_shaped_as_the_papers_make_every_verdict_hold(tmp_path):
    v = _verdicts(tmp_path)
    assert {k: f.verdict for k, f in v.items()} == dict.fromkeys(["C1", "C2", "C3", "V1", "V2", "K1", "K2"], HOLDS)
    for f in v.values():
        assert all(f"{m}:" in f.measured for m in MODELS), f.label  # every model read, sinks NaN or not
        assert f.why == "" and f.paper and f.rule


def _turned_around() -> dict:
    d = _holding()
    for x in d.values():
        x["sink"] = _by_rank(list(range(1, 7)), 0.4, 0.02)  # the lower layers hold the sinks
        x["entropy_share"] = _by_rank(list(range(7, 13)), 0.5, 0.03)  # the upper layers are broader
        x["confidence"] = np.where(x["role"], 0.05, x["confidence"])  # the heads with roles least confident
        x["relevance"] = x["importance"] = np.where(x["role"], 0.01, 0.5 + 0.01 * np.arange(L * H).reshape(L, H))
        x["norm_ratio"] = 1.5 + 0.01 * np.arange(L * H).reshape(L, H)
        x["layer_norm_ratio"] = np.full(L, 1.5)
        x["rho"] = -x["rho"]
        x["picked"] = {("obj", "dependent_to_head"): 0.32}
    return d


def test_numbers_turned_around_make_every_verdict_fail(tmp_path):
    v = _verdicts(tmp_path, _turned_around())
    assert {k: f.verdict for k, f in v.items()} == dict.fromkeys(["C1", "C2", "C3", "V1", "V2", "K1", "K2"], FAILS)
    assert "does not hold for 3 of 3 models" in v["K2"].why


@pytest.mark.parametrize(
    "groups, drop, missing",
    [
        (
            (),
            (),
            {
                "C1": "no heads group",
                "C2": "no heads group",
                "C3": "no heads_dependency group",
                "V1": "no heads group",
                "V2": "no heads_importance group",
                "K1": "no heads group",
                "K2": "no heads group",
            },
        ),
        (("heads", "heads_dependency"), (), {"V2": "no heads_importance group"}),
        (("heads", "heads_importance"), (), {"C3": "no heads_dependency group"}),
        (
            ("heads", "heads_dependency", "heads_importance"),
            ("alpha_share",),
            {"C1": "no alpha_share", "K1": "no alpha_share"},
        ),
        (("heads", "heads_dependency", "heads_importance"), ("norm_share",), {"K1": "no norm_share"}),
        (("heads", "heads_dependency", "heads_importance"), ("layer_norm_share",), {"K2": "no layer_norm_share"}),
        (("heads", "heads_dependency", "heads_importance"), ("spearman",), {"K1": "no spearman"}),
        (("heads", "heads_dependency", "heads_importance"), ("picked_accuracy",), {"C3": "no picked_accuracy"}),
        (
            ("heads", "heads_dependency", "heads_importance"),
            ("positional", "syntactic", "rare_token_share"),
            {"V1": "stores no head role", "V2": "no head role"},
        ),
    ],
)
def test_a_missing_group_or_variable_is_not_measurable_and_named(tmp_path, groups, drop, missing):
    v = _verdicts(tmp_path, groups=groups, drop=drop)
    for label, f in v.items():
        if label in missing:
            assert f.verdict == NA and missing[label] in f.why, (label, f.why)
        else:
            assert f.verdict == HOLDS, (label, f.why)


def test_a_model_without_norms_is_left_out_and_named(tmp_path):
    d = _holding()
    d["mlm"]["norms"] = False
    v = _verdicts(tmp_path, d)
    for label in ("K1", "K2"):
        assert v[label].verdict == HOLDS and "left out: mlm (no norms stored" in v[label].why
        assert "mlm:" not in v[label].measured


def test_one_failing_model_makes_the_claim_fail_and_is_named(tmp_path):
    d = _holding()
    d["lm"]["layer_norm_ratio"] = np.array([0.5, 0.5, 1.2, 0.5])
    v = _verdicts(tmp_path, d)
    assert v["K2"].verdict == FAILS
    assert v["K2"].why.startswith("does not hold for 1 of 3 models (holds for mt, mlm)")
    assert "(lm)" in v["K2"].why and "not in layer(s) 3" in _line(v["K2"], "lm")


@pytest.mark.parametrize("with_sink_measure", [False, True])
def test_a_store_before_version_4_says_so(tmp_path, with_sink_measure):
    """Before version 4 the heads group had no confidence_with_sink: its confidence kept the sinks."""
    v = _verdicts(tmp_path, with_sink_measure=with_sink_measure)
    noted = any("predates heads analysis version 4" in x for x in v["V1"].details)
    assert noted == (not with_sink_measure)


def test_a_model_with_fewer_layers_is_split_on_its_own_layers(tmp_path):
    d = _holding()
    d["mlm"]["layers"] = 2
    v = _verdicts(tmp_path, d)
    mlm = _line(v["C2"], "mlm")
    assert "(layer 1)" in mlm and "(layers 2)" in mlm
    assert "(layers 2-4)" in _line(v["C2"], "lm")


# ------------------------------------------------------------------- C1, C2: halves, share, test level


@pytest.mark.parametrize("ranks, verdict", [([12, 11, 10, 9, 7, 1], HOLDS), ([12, 11, 10, 9, 6, 1], NA)])
def test_c1_and_c2s_earlier_rule_at_the_level_of_the_test(tmp_path, ranks, verdict):
    """U = 29 of 36 gives p = 0.047, U = 28 p = 0.066 (6 upper against 6 lower heads)."""
    d = _holding()
    for x in d.values():
        x["sink"] = _by_rank(ranks, 0.40, 0.02)
        lower_ranks = sorted(set(range(1, 13)) - set(ranks))
        x["entropy_share"] = _by_rank(lower_ranks, 0.5, 0.03)  # the same ranks, the lower half above
    v = _verdicts(tmp_path, d)
    ref = _exact_mw(_by_rank(ranks, 0, 1)[2:].ravel(), _by_rank(ranks, 0, 1)[:2].ravel())[1]
    for label, verdict_of in (("C1", lambda f: f.verdict), ("C2 earlier", lambda f: f.earlier["verdict"])):
        f = v[label.split()[0]] if label == "C1" else v["C2"]
        measured = f.measured if label == "C1" else f.earlier["measured"]
        assert verdict_of(f) == verdict, (label, f.why)
        for m in MODELS:
            assert _p(measured, m) == pytest.approx(ref, abs=6e-4)


def _first_layer(first: list[int], second: list[int]) -> np.ndarray:
    """(L, H) entropy shares: layer 1's heads take the pooled ranks ``first`` (1 = smallest of
    12), layer 2's ``second``, layers 3-4 the others; value = 0.3 + 0.05 x rank."""
    rest = sorted(set(range(1, 13)) - set(first) - set(second), reverse=True)
    return 0.3 + 0.05 * np.array([sorted(first), sorted(second), rest[:3], rest[3:]], float)


@pytest.mark.parametrize("first, verdict", [([12, 11, 7], HOLDS), ([12, 11, 5], NA)])
def test_c2_at_the_level_of_the_test(tmp_path, first, verdict):
    """Layer 1's 3 heads against the other 9: ranks 12, 11, 7 give the exact p = 7/220 = 0.032,
    ranks 12, 11, 5 give 16/220 = 0.073 (checked by enumerating every assignment)."""
    d = _holding()
    second = sorted(set(range(1, 13)) - set(first), reverse=True)[:3]
    for x in d.values():
        x["entropy_share"] = _first_layer(first, second)
    v = _verdicts(tmp_path, d)
    share = _first_layer(first, second)
    a, ref = _exact_mw(share[0], share[1:].ravel())
    assert (ref < 0.05) == (verdict == HOLDS)
    assert v["C2"].verdict == verdict, v["C2"].why
    for m in MODELS:
        assert _p(v["C2"].measured, m) == pytest.approx(ref, abs=6e-4)  # printed to 3 decimals
        assert f"A = {a:.2f}" in _line(v["C2"], m)


def test_c2_reads_the_first_layer_where_the_halves_disagree(tmp_path):
    """MiniLM's shape: layer 1 the broadest, layer 2 the narrowest (its heads on [CLS]): C2
    holds, the earlier rule (lower half against upper half, A = 0.5) does not. The other way
    round, a broad layer 2 above a narrow layer 1 (A = 12 / 27 = 0.44): the halves hold (U = 30
    of 36), C2 does not."""
    d = _holding()
    for x in d.values():
        x["entropy_share"] = _first_layer([10, 11, 12], [1, 2, 3])
    v = _verdicts(tmp_path, d)["C2"]
    assert v.verdict == HOLDS and v.earlier["verdict"] == FAILS
    assert "lower half of the layers above the upper half" in v.earlier["rule"]
    assert "the heads of the first layer above the heads of every other layer" in v.rule
    d = _holding()
    for x in d.values():
        x["entropy_share"] = _first_layer([5, 6, 7], [10, 11, 12])
    v = _verdicts(tmp_path, d)["C2"]
    assert v.verdict == FAILS and v.earlier["verdict"] == HOLDS
    assert all("A = 0.44" in _line(v, m) for m in MODELS)


def test_the_earlier_rule_is_in_head_verdicts_json_beside_c2_only(tmp_path):
    v = _verdicts(tmp_path)
    d = v["C2"].as_dict()
    assert d["earlier"]["verdict"] == HOLDS and set(d["earlier"]) == {"claim", "rule", "verdict", "why", "measured"}
    assert all("earlier" not in f.as_dict() for k, f in v.items() if k != "C2")


@pytest.mark.parametrize("top, verdict", [(0.49, FAILS), (0.51, HOLDS)])
def test_c1_needs_half_of_an_upper_layers_attention_on_the_sinks(tmp_path, top, verdict):
    d = _holding()
    for x in d.values():
        x["sink"] = np.array(
            [[0.05, 0.06, 0.07], [0.08, 0.09, 0.10], [top - 0.01, top, top + 0.01], [0.30, 0.31, 0.32]]
        )
    v = _verdicts(tmp_path, d)
    assert v["C1"].verdict == verdict
    assert all(f"upper maximum {top:.2f} at layer 3" in _line(v["C1"], m) for m in MODELS)


# ------------------------------------------------------------------- C3: margin, standard errors, arcs, split


@pytest.mark.parametrize("picked, verdict", [(0.395, FAILS), (0.405, HOLDS)])
def test_c3_margin_over_the_offset_baseline(tmp_path, picked, verdict):
    d = _holding()
    for x in d.values():
        x["picked"] = {("obj", "dependent_to_head"): picked}
        x["arcs"] = {"obj": 20000}  # 2 se = 0.009: the margin decides
    v = _verdicts(tmp_path, d)
    assert v["C3"].verdict == verdict, v["C3"].why


@pytest.mark.parametrize("arcs, verdict", [(80, NA), (95, HOLDS)])
def test_c3_margin_beyond_two_standard_errors(tmp_path, arcs, verdict):
    """0.55 against 0.40: 2 se = 2 sqrt((0.2475 + 0.24) / n) is 0.156 at 80 arcs, 0.143 at 95."""
    d = _holding()
    for x in d.values():
        x["picked"] = {("obj", "dependent_to_head"): 0.55}
        x["baseline"] = {("obj", "dependent_to_head"): 0.40}
        x["arcs"] = {"obj": arcs}
    v = _verdicts(tmp_path, d)
    assert v["C3"].verdict == verdict, v["C3"].why
    assert f"2 se {2 * np.sqrt((0.55 * 0.45 + 0.4 * 0.6) / arcs):.3f}" in v["C3"].measured


@pytest.mark.parametrize("arcs, verdict", [(49, FAILS), (50, HOLDS)])
def test_c3_reads_relations_with_enough_arcs(tmp_path, arcs, verdict):
    """amod 0.95 against 0.05 (no standard error to speak of) on 49 or 50 arcs; the other
    relations tie with their baselines."""
    d = _holding()
    for x in d.values():
        x["picked"] = {("amod", "dependent_to_head"): 0.95}
        x["baseline"] = {("amod", "dependent_to_head"): 0.05}
        x["arcs"] = {"amod": arcs}
    v = _verdicts(tmp_path, d)
    assert v["C3"].verdict == verdict
    assert ("amod" in v["C3"].measured) == (verdict == HOLDS)


def test_c3_reads_the_head_picked_on_select_not_the_same_data_best(tmp_path):
    d = _holding()
    for x in d.values():
        x["picked"] = {("obj", "dependent_to_head"): 0.33}
        x["best"] = {("obj", "dependent_to_head"): 0.80}  # picked and scored on the score treebank: overfit
    assert _verdicts(tmp_path, d)["C3"].verdict == FAILS


@pytest.mark.parametrize("direction, verdict", [("head_to_dependent", FAILS), ("head_to_dependent_clark", HOLDS)])
def test_c3_reads_clarks_directions_only(tmp_path, direction, verdict):
    d = _holding()
    for x in d.values():
        x["picked"] = {("obj", direction): 0.60}
    assert _verdicts(tmp_path, d)["C3"].verdict == verdict


# ------------------------------------------------------------------- V1, V2: roles, level, importance


@pytest.mark.parametrize("role_ranks, verdict", [((12, 11, 7), HOLDS), ((12, 11, 5), NA), ((6, 5, 4), FAILS)])
def test_v1_at_the_level_of_the_test(tmp_path, role_ranks, verdict):
    """3 heads with a role against 9: U = 24 gives p = 0.032, U = 22 p = 0.073; A below 1/2 fails."""
    d = _holding()
    others = [r for r in range(1, 13) if r not in role_ranks]
    for x in d.values():
        conf = np.empty((L, H))
        conf[x["role"]] = [0.1 + 0.01 * r for r in role_ranks]
        conf[~x["role"]] = [0.1 + 0.01 * r for r in others]
        x["confidence"] = conf
    v = _verdicts(tmp_path, d)
    assert v["V1"].verdict == verdict
    ref = _exact_mw(np.array(role_ranks, float), np.array(others, float))[1]
    assert _p(v["V1"].measured, "lm") == pytest.approx(ref, abs=6e-4)
    assert "3 head(s) with a role (1 positional, 1 syntactic, 1 rare-token)" in _line(v["V1"], "lm")


def test_v1_leaves_out_a_model_without_a_role(tmp_path):
    d = _holding()
    d["mlm"]["role"] = np.zeros((L, H), bool)
    v = _verdicts(tmp_path, d)
    assert v["V1"].verdict == HOLDS and "left out: mlm (no head with a role)" in v["V1"].why


def test_v1_counts_rare_token_heads_from_the_stated_share(tmp_path):
    """A head with a share of 0.3 is a rare-token head; at 0.15 (below 0.2) it is not."""
    v = _verdicts(tmp_path)
    assert "1 rare-token" in _line(v["V1"], "mt")
    d = _holding()
    path = tmp_path / "low"
    path.mkdir()
    ds = _heads(d)
    ds["rare_token_share"] = ds.rare_token_share.where(ds.rare_token_share < 0.2, 0.15)
    write_metrics(path / "m.zarr", {"heads": ds}, fingerprint="test")
    f = {x.label: x for x in head_verdicts(path / "m.zarr")}["V1"]
    assert "rare-token" not in _line(f, "mt") and "2 head(s) with a role" in _line(f, "mt")


def test_v1_a_head_whose_rare_token_share_is_nan_has_no_rare_token_role(tmp_path):
    """A NaN share (the head's rarest token was never measured) is no evidence of a rare-token
    head: with one head of mt at NaN, mt still has 3 heads with a role (1 positional, 1 syntactic,
    1 rare-token) against 9 without, and its p is the exact Mann-Whitney p of that split."""
    d = _holding()
    path = tmp_path / "nan"
    path.mkdir()
    ds = _heads(d)
    nan_head = (2, 0)  # layer 3, head 0: no role, confidence 0.26
    assert not d["mt"]["role"][nan_head]
    share = ds.rare_token_share.values.copy()
    share[MODELS.index("mt"), nan_head[0], nan_head[1]] = np.nan
    ds["rare_token_share"] = (("model", "layer", "head"), share)
    write_metrics(path / "m.zarr", {"heads": ds}, fingerprint="test")
    f = {x.label: x for x in head_verdicts(path / "m.zarr")}["V1"]
    line = _line(f, "mt")
    assert "3 head(s) with a role (1 positional, 1 syntactic, 1 rare-token)" in line, line
    assert " vs 9 without " in line, line
    conf = d["mt"]["confidence"]
    ref = _exact_mw(conf[d["mt"]["role"]], conf[~d["mt"]["role"]])[1]
    assert _p(f.measured, "mt") == pytest.approx(ref, abs=6e-4)


def test_v2_reads_lrp_relevance_where_stored_else_importance_normalised_per_layer(tmp_path):
    d = _holding()
    d["mt"]["importance"] = np.where(d["mt"]["role"], 0.01, 0.5)  # mask importance says the opposite for MT
    v = _verdicts(tmp_path, d)
    assert v["V2"].verdict == HOLDS, v["V2"].why
    assert _line(v["V2"], "mt").startswith(
        "mt: 3 head(s) with a role (1 positional, 1 syntactic, 1 rare-token) LRP relevance"
    )
    assert _line(v["V2"], "lm").startswith(
        "lm: 3 head(s) with a role (1 positional, 1 syntactic, 1 rare-token) mask importance"
    )
    # layer 3 (no role) is 10x larger in raw importance: read raw, the roles would not rank first
    assert _p(v["V2"].measured, "lm") == pytest.approx(1 / 220, abs=6e-4)
    assert any(x.startswith("mt: Spearman(LRP relevance, confidence)") for x in v["V2"].details)


# ------------------------------------------------------------------- K1, K2: norms, sign, level


@pytest.mark.parametrize("positive, verdict", [((10, 7), HOLDS), ((10, 8), NA), ((12, 11, 10, 9, 8, 7, 6), FAILS)])
def test_k1_sinks_at_the_level_of_the_signed_rank_test(tmp_path, positive, verdict):
    """12 heads; norm share minus weight share = +-0.001 x rank, positive at ``positive``:
    r+ = 17 gives p = 0.046, r+ = 18 p = 0.055; r+ above n(n+1)/4 = 39 fails."""
    d = _holding()
    diff = np.array([(1 if r in positive else -1) * 0.001 * r for r in range(1, 13)]).reshape(L, H)
    for x in d.values():
        x["sink"] = np.full((L, H), 0.2)
        x["norm_ratio"] = 1 + diff / 0.2
    v = _verdicts(tmp_path, d)
    assert v["K1"].verdict == verdict, v["K1"].why
    assert _p(v["K1"].measured, "mlm") == pytest.approx(_exact_signed_rank(diff.ravel()), abs=6e-4)
    assert f"below their weight share in {12 - len(positive)} of 12 heads" in _line(v["K1"], "mlm")


@pytest.mark.parametrize("rho, verdict", [(0.09, FAILS), (0.11, HOLDS), (-0.5, FAILS)])
def test_k1_rarer_tokens_have_larger_norms(tmp_path, rho, verdict):
    """The stored rho is against a rank that grows with rarity: positive when rarer tokens
    have larger ||f(x)||; a mean over layers below 0.1, or negative, fails."""
    d = _holding()
    for x in d.values():
        x["rho"] = np.array([rho - 0.05, rho + 0.05, rho - 0.02, rho + 0.02])
    v = _verdicts(tmp_path, d)
    assert v["K1"].verdict == verdict
    assert f"{rho:+.2f} averaged over layers" in _line(v["K1"], "lm")
    assert f"rho {rho:+.2f}" in _part(v["K1"].measured, "lm")


@pytest.mark.parametrize("delta, verdict", [(-0.001, HOLDS), (0.001, FAILS)])
def test_k2_every_layer_norm_share_below_weight_share(tmp_path, delta, verdict):
    d = _holding()
    for x in d.values():
        share = x["sink"].mean(-1)
        x["layer_norm_ratio"] = np.array([0.5, 1 + delta / share[1], 0.5, 0.5])
    v = _verdicts(tmp_path, d)
    assert v["K2"].verdict == verdict


# ------------------------------------------------------------------- the report


def test_the_report_shows_the_head_verdicts_with_their_summary(tmp_path, monkeypatch):
    import evolution.analyses as analyses
    from evolution.analyses.base import Analysis
    from evolution.report.write import write_report

    def line(path):
        from evolution.analyses.plotting import plt

        fig, ax = plt().subplots(figsize=(3, 2))
        ax.plot([0, 1], [0, 1])
        return fig

    class Stub(Analysis):
        name = "stub"
        figures = {"heads_special": (line, "Special tokens.")}

    monkeypatch.setattr(analyses, "ANALYSES", (Stub(),))
    d = _holding()
    d["lm"]["layer_norm_ratio"] = np.array([0.5, 0.5, 1.2, 0.5])  # K2 fails
    path = tmp_path / "m.zarr"
    write_metrics(path, {"heads": _heads(d)}, fingerprint="test")  # C3, V2: not measurable
    page = write_report(path, tmp_path / "report")
    html, md = page.read_text(), (tmp_path / "report" / "report.md").read_text()
    assert (
        "4 of 8 head verdicts hold" in html
        and "**4 of 8 head verdicts hold; 3 not measurable here; 1 do not hold.**" in md
    )
    # a heads-only store: no representation scorecard of twelve "not measurable" rows above them
    assert "claims hold" not in html and 'id="scorecard"' not in html and "Findings scorecard" not in md
    assert not (tmp_path / "report" / "scorecard.json").exists()
    rows = re.findall(r'<tr class="claim" id="verdict-([A-Z][0-9])">', html)
    assert rows == ["C1", "C2", "C3", "V1", "V2", "V3", "K1", "K2"]
    assert html.index('id="heads"') < html.index('id="head-verdicts"') < html.index('id="verdict-C1"')
    anchor = re.search(r'<h4 id="([^"]+)">Attention and norms to special tokens', html).group(1)
    k2 = re.search(r'id="verdict-K2">(.*?)</tr>', html).group(1)
    assert f'href="#{anchor}"' in k2 and "v-fails" in k2
    c3 = re.search(r'id="verdict-C3">(.*?)</tr>', html).group(1)
    assert "href=" not in c3.split("</td>")[0]  # no dependency figure on the page: no link
    card = json.loads((tmp_path / "report" / "head_verdicts.json").read_text())
    assert [(f["number"], f["verdict"]) for f in card] == [
        ("C1", HOLDS),
        ("C2", HOLDS),
        ("C3", NA),
        ("V1", HOLDS),
        ("V2", NA),
        ("V3", NA),
        ("K1", HOLDS),
        ("K2", FAILS),
    ]


# ------------------------------------------------------------------- the committed stores


@pytest.mark.parametrize("run", ["bible-full", "bible-paper"])
def test_the_committed_stores_get_verdicts_and_say_what_they_lack(run):
    """results/<run>: verdicts, not errors. bible-paper's store has no importance (V2 says so);
    bible-full's, recomputed from the shipped weights, has relevance and importance, which V2 reads."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results" / run
    v = {f.label: f for f in head_verdicts(root / "metrics.zarr")}
    assert list(v) == ["C1", "C2", "C3", "V1", "V2", "V3", "K1", "K2"]
    assert all(f.verdict in (HOLDS, FAILS, NA) for f in v.values())
    if run == "bible-paper":
        assert v["V2"].verdict == NA and "no heads_importance group" in v["V2"].why
    else:
        assert "no heads_importance group" not in v["V2"].why and "mt:" in v["V2"].measured
    committed = root / "report" / "head_verdicts.json"
    if committed.exists():  # the report's copy is what head_verdicts() gives on the store
        assert [f.as_dict() for f in v.values()] == json.loads(committed.read_text(encoding="utf-8"))


def test_the_committed_heads_run_has_importance_verdicts():
    """results/bible-heads (heads analysis version 4, with importance from the shipped base
    models): the report's verdicts are what head_verdicts() gives on its store, and V2 reads the
    stored relevance (translation model) and importance (LM, MLM)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results" / "bible-heads"
    v = {f.label: f for f in head_verdicts(root / "metrics.zarr")}
    assert list(v) == ["C1", "C2", "C3", "V1", "V2", "V3", "K1", "K2"]
    assert "no heads_importance group" not in v["V2"].why and "mt:" in v["V2"].measured
    committed = json.loads((root / "report" / "head_verdicts.json").read_text(encoding="utf-8"))
    assert [f.as_dict() for f in v.values()] == committed


# ------------------------------------------------------------------- V2 under the per-batch estimator


_BATCH_HEAD = (
    "per-batch mask importance (batches of 16 sentences, abs of the batch loss's gradient, as Hugging "
    "Face's run_bertology.py): "
)
# the LM's heads with a role below most of their layer-mates once each layer is divided by its l2 norm
_REORDERED = np.array([[0.30, 0.50, 0.40], [0.45, 0.35, 0.60], [0.20, 0.55, 0.25], [0.50, 0.40, 0.33]])


def _batch_line(f) -> str:
    lines = [x for x in f.details if x.startswith("per-batch mask importance")]
    assert len(lines) == 1, f.details
    return lines[0]


def _a_p(line: str, model: str) -> tuple[float, float]:
    m = re.search(rf"(?:^|; ){model}: [a-z ]+ \(A = ([0-9.]+), p = ([0-9.e+-]+[0-9]);", line)
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("per_batch_fails", [True, False])
def test_v2_per_batch_line_gives_the_verdict_with_the_lms_per_batch_importance(tmp_path, per_batch_fails):
    """The LM's per-sentence and per-batch importance disagree (one ranks the heads with a role
    first in every layer, the other below most of their layer-mates): V2's verdict is the one
    per sentence, and the per-batch line gives the verdict with the LM's per-batch outcome in its
    place (the MLM's estimators agree; the MT reads LRP relevance and keeps its outcome). A and p
    against the exact Mann-Whitney test on the layer-normalised per-batch numbers."""
    d = _holding()
    role = d["lm"]["role"]
    if per_batch_fails:
        d["lm"]["importance_batch"] = _REORDERED
    else:
        d["lm"]["importance_batch"] = d["lm"]["importance"]
        d["lm"]["importance"] = _REORDERED
    v = _verdicts(tmp_path, d)["V2"]
    assert v.verdict == (HOLDS if per_batch_fails else FAILS), v.why
    line = _batch_line(v)
    assert line.startswith(_BATCH_HEAD + (FAILS if per_batch_fails else HOLDS) + "; "), line
    lm_sentence, lm_batch = (HOLDS, FAILS) if per_batch_fails else (FAILS, HOLDS)
    assert f"; lm: {lm_batch} (A = " in line and f"; per sentence: {lm_sentence}); mlm: {HOLDS} (A = " in line
    assert line.endswith("; mt: reads LRP relevance (translation model), unaffected"), line
    normalised = _REORDERED / np.sqrt((_REORDERED**2).sum(1, keepdims=True))
    a, p = _exact_mw(normalised[role], normalised[~role])
    assert (a, p) == (pytest.approx(2 / 9), pytest.approx(102 / 110))  # U = 6 of 27; 204 of the 220 rank sums >= 12
    if per_batch_fails:
        assert _a_p(line, "lm") == (pytest.approx(a, abs=0.005), pytest.approx(p, abs=6e-4))
        assert "the heads with a role do not score higher on mask importance" not in v.why
    else:  # the LM's per-sentence outcome fails on the reordered numbers; per batch it holds with the MLM's numbers
        assert _p(v.measured, "lm") == pytest.approx(p, abs=6e-4)
        assert _a_p(line, "lm") == _a_p(line, "mlm") == (1.0, pytest.approx(1 / 220, abs=6e-4))
    # the main verdict is what the same store without the per-batch variable gives
    plain = tmp_path / "plain"
    plain.mkdir()
    write_metrics(
        plain / "m.zarr", {"heads": _heads(d), "heads_importance": _importance(d, batch=False)}, fingerprint="test"
    )
    before = {f.label: f for f in head_verdicts(plain / "m.zarr")}["V2"]
    assert not [x for x in before.details if x.startswith("per-batch")]
    assert (before.verdict, before.why, before.measured, before.rule) == (v.verdict, v.why, v.measured, v.rule)
    assert before.details == tuple(x for x in v.details if x != line)


def test_v2_per_batch_line_leaves_out_a_model_without_per_batch_numbers(tmp_path):
    """A unit computed before heads_importance version 3 (its per-batch numbers NaN in a new
    group): the model is left out of the per-batch verdict with the reason, the others decide it."""
    d = _holding()
    d["mlm"]["importance_batch"] = np.full((L, H), np.nan)
    line = _batch_line(_verdicts(tmp_path, d)["V2"])
    assert line == (
        _BATCH_HEAD + f"{HOLDS}; lm: {HOLDS} (A = 1.00, p = 0.005; per sentence: {HOLDS}); mlm: left out "
        "(no per-batch importance stored (its unit predates heads_importance version 3)); mt: reads LRP "
        "relevance (translation model), unaffected"
    )
