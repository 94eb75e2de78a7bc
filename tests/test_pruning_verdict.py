"""Verdict V3 (Voita et al. ACL 2019, sec. 6): pruned against the same layout from scratch, each
arm against its own pipeline's unpruned reference, over seeds with a t interval; on synthetic
``heads_pruning`` stores whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from evolution.analyses.heads.importance import ATTENTIONS
from evolution.metrics.results import write_metrics
from evolution.report.scorecard.base import FAILS, HOLDS, NA


def _store(
    tmp_path,
    *,
    pruned,
    scratch,
    tuned=20.0,
    scratch_full=19.0,
    models=("mt", "mt-seed1", "mt-seed2"),
    runs=None,
    continuous=None,
    scratch_runs=("all-0.04", "all-0.06"),
):
    """``pruned`` / ``scratch``: (model, run) BLEU of the two all-attention runs (lambdas 0.04 and
    0.06); the references ``tuned`` (pruned arm) and ``scratch_full`` (from-scratch arm) per model."""
    names = ["encoder-0.04", "all-0.04", "encoder-0.06", "all-0.06"]
    n = len(models)
    bleu = np.full((n, 4), 18.0)
    bleu[:, [1, 3]] = pruned
    bs = np.full((n, 4), np.nan)
    for j, r in enumerate(names):
        if r in scratch_runs:
            bs[:, j] = np.asarray(scratch)[:, [1, 3].index(j)]
    cont = np.full((n, 4), np.nan) if continuous is None else np.where(np.isnan(bs), np.nan, bleu + continuous)
    ds = xr.Dataset(
        {
            "bleu": (("model", "run"), bleu),
            "bleu_scratch": (("model", "run"), bs),
            "bleu_continuous": (("model", "run"), cont),
            "bleu_tuned": (("model",), np.broadcast_to(np.asarray(tuned, float), (n,)).copy()),
            "bleu_scratch_full": (("model",), np.broadcast_to(np.asarray(scratch_full, float), (n,)).copy()),
            "bleu_full": (("model",), np.full(n, 19.5)),
            "chrf_full": (("model",), np.full(n, 45.0)),
            "chrf": (("model", "run"), np.full((n, 4), 44.0)),
            "chrf_tuned": (("model",), np.full(n, 45.5)),
            "kept": (("model", "run", "attention", "layer", "head"), np.ones((n, 4, 3, 2, 2))),
            "lam": (("run",), [0.04, 0.04, 0.06, 0.06]),
            "scope": (("run",), np.array(["encoder", "all", "encoder", "all"], dtype=object)),
        },
        coords={
            "model": np.array(models, dtype=object),
            "run": np.array(names, dtype=object),
            "attention": np.array(ATTENTIONS, dtype=object),
        },
    )
    ds.attrs["runs"] = runs or {}
    path = tmp_path / "m.zarr"
    write_metrics(path, {"heads_pruning": ds}, fingerprint="test")
    return path


def _v3(path):
    from evolution.report.heads_card import head_verdicts

    return next(f for f in head_verdicts(path) if f.label == "V3")


def test_seed_interval_is_students_t():
    from scipy.stats import t

    from evolution.report.heads_card.pruning import seed_interval

    d = np.array([0.4, 1.0, 0.7])
    mean, low, high = seed_interval(d)
    half = t.ppf(0.975, 2) * np.std(d, ddof=1) / np.sqrt(3)  # 4.303 x s / sqrt(3)
    assert mean == pytest.approx(0.7) and low == pytest.approx(0.7 - half) and high == pytest.approx(0.7 + half)
    assert np.isnan(seed_interval([0.5])[1])


def test_pruned_keeping_more_than_scratch_at_every_lambda_holds(tmp_path):
    """Pruned loses 0.4-0.6 against its tuned reference (20.0); scratch loses 1.0-1.3 against its
    own (19.0): d = 0.4-0.9 per seed, interval above 0 at both lambdas."""
    pruned = [[19.6, 19.5], [19.4, 19.5], [19.5, 19.6]]
    scratch = [[18.0, 17.9], [17.9, 17.8], [18.0, 17.7]]
    f = _v3(_store(tmp_path, pruned=pruned, scratch=scratch, continuous=0.3))
    assert f.verdict == HOLDS, f.why
    d = np.array(pruned)[:, 0] - 20.0 - (np.array(scratch)[:, 0] - 19.0)
    assert f"d = {d.mean():+.2f}" in f.measured and "lambda 0.04" in f.measured and "lambda 0.06" in f.measured
    assert any("continuous test-time gate" in x and "+0.30" in x for x in f.details)


def test_the_arms_are_read_against_their_own_references(tmp_path):
    """Raw BLEU says pruned (19.5) > scratch (19.2), but the from-scratch pipeline's reference is
    lower (19.0 against 20.0): scratch gains 0.2, pruned loses 0.5, so the claim does not hold."""
    pruned = [[19.5, 19.5]] * 3
    scratch = [[19.2, 19.25], [19.2, 19.2], [19.15, 19.2]]
    f = _v3(_store(tmp_path, pruned=pruned, scratch=scratch))
    assert f.verdict == FAILS, f.why
    # one outcome per lambda: the count is of lambdas (it said "2 of 2 models")
    assert f.why == "does not hold for 2 of 2 lambdas: the mean d is not above 0 (lambda 0.04, lambda 0.06)"


def test_a_positive_mean_whose_interval_reaches_zero_is_undecided(tmp_path):
    """d = +1.5, -0.9, +0.3 at one lambda: mean 0.3, the t interval spans 0."""
    pruned = [[20.5, 19.5], [18.1, 19.5], [19.3, 19.5]]
    scratch = [[18.0, 18.0]] * 3
    f = _v3(_store(tmp_path, pruned=pruned, scratch=scratch))
    assert f.verdict == NA and "interval of d reaches 0" in f.why
    assert f.why.startswith("undecided for 1 of 2 lambdas: the 95% interval of d reaches 0 (lambda "), f.why


def test_fewer_than_three_seeds_or_no_scratch_layout_is_not_measurable(tmp_path):
    two = _store(tmp_path / "a", pruned=[[19.6, 19.6]] * 2, scratch=[[18.0, 18.0]] * 2, models=("mt", "mt-seed1"))
    f = _v3(two)
    assert f.verdict == NA and "2 seed(s)" in f.why and "needs >= 3" in f.why
    # a token-dropout model is no seed of the base recipe
    tok = _store(
        tmp_path / "b",
        pruned=[[19.6, 19.6]] * 3,
        scratch=[[18.0, 18.0]] * 3,
        models=("mt", "mt-seed1", "mt-tokdrop"),
        runs={"mt-tokdrop": {"token_dropout": 0.1}},
    )
    f = _v3(tok)
    assert f.verdict == NA and "mt-tokdrop (token dropout" in f.why
    none = _store(tmp_path / "c", pruned=[[19.6, 19.6]] * 3, scratch=[[18.0, 18.0]] * 3, scratch_runs=())
    assert "no lambda's layout trained from scratch" in _v3(none).why
    no_ref = _store(tmp_path / "d", pruned=[[19.6, 19.6]] * 3, scratch=[[18.0, 18.0]] * 3, tuned=[20.0, np.nan, 20.0])
    f = _v3(no_ref)
    assert f.verdict == NA and "mt-seed1 (no gate-free fine-tuned reference" in f.why


def test_each_pruned_model_runs_under_its_own_training_seed():
    """Three seeds of a model must draw independent batches, gate noise and from-scratch
    initialisations: a model's pruning runs take its recorded training seed, and a model without
    one the config's (so that the cache keys of runs at the config's seed do not change)."""
    from types import SimpleNamespace

    from evolution.analyses.heads.pruning import _seed_of

    inputs = SimpleNamespace(seed=0, attrs={"runs": {"mt": {"seed": 0}, "mt-seed2": {"seed": 2, "objective": "mt"}}})
    assert [_seed_of(inputs, m) for m in ("mt", "mt-seed2", "opus-mt")] == [0, 2, 0]
    assert _seed_of(SimpleNamespace(seed=5, attrs={}), "mt-seed2") == 5


def test_the_seed_table_reads_each_arm_against_its_own_reference(tmp_path):
    """The report's table over seeds: per run and arm, the mean BLEU difference with a 95% t
    interval, computed here by hand from per-model references that differ (so that a reference
    taken from the wrong arm or model changes the numbers); the token-dropout model is left out."""
    from scipy.stats import t

    from evolution.analyses.heads.pruning import HeadPruning
    from evolution.analyses.heads.pruning_seeds import ARMS

    pruned = [[19.6, 19.1], [19.0, 19.3], [19.9, 18.8], [25.0, 25.0]]
    scratch = [[18.0, 17.1], [18.6, 17.9], [17.3, 17.6], [10.0, 10.0]]
    tuned, scratch_full = [20.1, 19.4, 20.3, 30.0], [19.0, 18.2, 19.6, 5.0]
    path = _store(
        tmp_path,
        pruned=pruned,
        scratch=scratch,
        tuned=tuned,
        scratch_full=scratch_full,
        continuous=0.25,
        models=("mt", "mt-seed1", "mt-seed2", "mt-tokdrop"),
        runs={"mt-tokdrop": {"token_dropout": 0.1}},
    )
    title, rows, caption = HeadPruning().tables(path)[-1]
    assert "3 seeds" in title and "mt, mt-seed1, mt-seed2" in caption
    assert rows[0][-1] == "per seed (mt, mt-seed1, mt-seed2)"
    by = {(r[0], r[1], r[2]): r for r in rows[1:]}
    p, s = np.array(pruned[:3]), np.array(scratch[:3])
    tu, sf = np.array(tuned[:3]), np.array(scratch_full[:3])

    def interval(x):
        half = t.ppf(0.975, 2) * np.std(x, ddof=1) / np.sqrt(3)
        return f"{x.mean():+.2f} [{x.mean() - half:+.2f}, {x.mean() + half:+.2f}]"

    for j, lam in ((0, "0.04"), (1, "0.06")):
        arm_p, arm_s = p[:, j] - tu, s[:, j] - sf
        row = by[(lam, "all", ARMS["pruned"])]
        assert row[3] == interval(arm_p) and row[4] == ", ".join(f"{v:+.2f}" for v in arm_p)
        assert by[(lam, "all", ARMS["scratch"])][3] == interval(arm_s)
        assert by[(lam, "all", ARMS["d"])][3] == interval(arm_p - arm_s)
        assert by[(lam, "all", ARMS["continuous"])][3] == interval(arm_p + 0.25)
        # the encoder-only runs have no from-scratch layout: their pruned arm alone (BLEU 18.0)
        assert by[(lam, "encoder", ARMS["pruned"])][3] == interval(18.0 - tu)
        assert (lam, "encoder", ARMS["scratch"]) not in by
    # one seed of the recipe: no table
    one = _store(tmp_path / "one", pruned=[[19.6, 19.1]], scratch=[[18.0, 17.1]], models=("mt",))
    assert not any("seeds" in t_[0] for t_ in HeadPruning().tables(one))
