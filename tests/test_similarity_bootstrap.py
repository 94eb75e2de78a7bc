"""The similarity bootstrap from weighted cross-products against its definition: resample whole
sentences, stack their rows and redo every SVD (``evolution.metrics.similarity.bootstrap_replicates``).
Equal within 1e-8 (float64) on random data with a rank-deficient view, a constant unit, a
subset too small for some resamples and a direction that only one sentence carries (which
the fast path hands back to the definition); the pipeline's own states in test_similarity.py."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from evolution.metrics.resample import SentenceSums, sentence_counts, sentence_draws
from evolution.metrics.similarity import View, bootstrap_replicates, summarise_replicates
from evolution.metrics.similarity_bootstrap import (
    MARGIN,
    between_replicates,
    change_with_replicates,
    pair_with_replicates,
)

TOLERANCE = 1e-8
METHODS = ["pwcca", "cka"]


def _states(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 25, 150)
    sentence = np.repeat(rng.permutation(150) * 7 + 3, lengths)  # ids neither sorted nor contiguous
    n, d, layers = len(sentence), 12, 4
    states = {}
    for g in ("a", "b", "c"):
        x = rng.normal(size=(n, d)) * np.linspace(3, 0.2, d)
        per = [x]
        for _ in range(1, layers):
            x = np.tanh(x @ rng.normal(size=(d, d)) / np.sqrt(d)) + 0.3 * rng.normal(size=(n, d))
            per.append(x)
        states[g] = per
    states["b"][2][:, 5] = 2 * states["b"][2][:, 1] - states["b"][2][:, 0]  # rank-deficient view
    states["c"][1][:, 3] = 0.7  # a constant unit
    masks = {"half": rng.random(n) < 0.5, "third": rng.random(n) < 0.3, "small": rng.random(n) < 0.1}
    return sentence, states, {"a": layers, "b": layers, "c": layers - 1}, masks


def _fast(sentence, states, n_layers, masks, *, replicates: int, seed: int, epsilon: float, min_ratio: float):
    """The replicates in bootstrap_replicates' form, by the fast path."""
    models = list(states)
    group = np.unique(sentence, return_inverse=True)[1]
    draws = sentence_draws(group.max() + 1, replicates=replicates, seed=seed)
    views = {
        layer: {
            g: View(states[g][layer], epsilon=epsilon, min_ratio=min_ratio, margin=MARGIN)
            for g in models
            if layer < n_layers[g]
        }
        for layer in range(max(n_layers.values()))
    }
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    between = between_replicates(
        views,
        sums=SentenceSums(group, n_groups=group.max() + 1),
        draws=draws,
        pairs=pairs,
        methods=METHODS,
        epsilon=epsilon,
        min_ratio=min_ratio,
        states=lambda g, layer: states[g][layer],
    )
    change, estimates = {m: {} for m in METHODS}, {}
    top = max(n_layers.values()) - 1
    for g in models:
        got = change_with_replicates(
            states[g][: n_layers[g]],
            masks,
            group=group,
            draws=draws,
            methods=METHODS,
            epsilon=epsilon,
            min_ratio=min_ratio,
            name=g,
        )
        estimates[g] = got["estimate"]
        for m in METHODS:
            v = got["replicates"][m]
            change[m][g] = np.concatenate([v, np.full((len(v), top - v.shape[1], v.shape[2]), np.nan)], axis=1)
    return {"first": 0, "replicates": replicates, "pairs": pairs, "between": between, "change": change}, estimates


def _assert_same(fast, ref):
    for m in METHODS:
        a, b = np.asarray(ref["between"][m]), np.asarray(fast["between"][m])
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(b, a, rtol=0, atol=TOLERANCE, err_msg=f"between {m}")
        for g in ref["change"][m]:
            a, b = np.asarray(ref["change"][m][g]), np.asarray(fast["change"][m][g])
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"change {m} {g}: NaN pattern")
            np.testing.assert_allclose(b, a, rtol=0, atol=TOLERANCE, err_msg=f"change {m} {g}")


def test_replicates_and_intervals_equal_the_resampled_svds():
    sentence, states, n_layers, masks = _states()
    kw = dict(replicates=12, seed=5, epsilon=1e-6, min_ratio=3.0)
    ref = bootstrap_replicates(
        read=lambda g, layer: states[g][layer],
        models=list(states),
        n_layers=n_layers,
        sentence=sentence,
        masks=masks,
        methods=METHODS,
        replicates=range(12),
        seed=5,
        epsilon=1e-6,
        min_ratio=3.0,
    )
    fast, _ = _fast(sentence, states, n_layers, masks, **kw)
    _assert_same(fast, ref)
    # the small subset (about 260 rows against 3 x 12 = 36 needed... per replicate) and the model
    # without layer 3 leave NaN where the definition does: checked above; the values are not trivial
    between = np.asarray(fast["between"]["pwcca"])
    assert np.nanstd(between) > 1e-3 and np.isnan(between[:, 3, 1:]).all() and np.isfinite(between[:, 3, 0]).all()
    s_ref, s_fast = summarise_replicates([ref]), summarise_replicates([fast])
    for key in ("between", "between_mean"):
        for m in METHODS:
            np.testing.assert_allclose(np.asarray(s_fast[key][m]), np.asarray(s_ref[key][m]), rtol=0, atol=TOLERANCE)


def test_subsets_below_the_minimum_in_some_resamples():
    """A subset near min_ratio x d: some resamples fall below it (NaN there, as the definition)."""
    sentence, states, n_layers, masks = _states(1)
    need = masks["small"].sum() / 12  # min_ratio at which the full subset just passes
    kw = dict(seed=2, epsilon=1e-6, min_ratio=float(need * 0.97))
    ref = bootstrap_replicates(
        read=lambda g, layer: states[g][layer],
        models=list(states),
        n_layers=n_layers,
        sentence=sentence,
        masks=masks,
        methods=METHODS,
        replicates=range(10),
        **kw,
    )
    fast, _ = _fast(sentence, states, n_layers, masks, replicates=10, **kw)
    small = np.asarray(fast["change"]["cka"]["a"])[:, :, 2]
    assert np.isnan(small).any() and np.isfinite(small).any()
    _assert_same(fast, ref)


def test_a_direction_of_one_sentence_goes_to_the_definition(caplog):
    """A unit that only one sentence moves: resamples without that sentence lose the direction
    (the replicate's rank falls), which the fast path cannot see in the full data's basis; those
    replicates are computed by the definition, and the numbers still agree."""
    sentence, states, n_layers, masks = _states(2)
    first = sentence == sentence[0]
    for g in states:
        for x in states[g]:
            x[:, -1] = np.where(first, np.arange(len(x)) % 5 - 2.0, 0.0)
    ref = bootstrap_replicates(
        read=lambda g, layer: states[g][layer],
        models=list(states),
        n_layers=n_layers,
        sentence=sentence,
        masks=masks,
        methods=METHODS,
        replicates=range(8),
        seed=1,
        epsilon=1e-6,
        min_ratio=3.0,
    )
    with caplog.at_level(logging.INFO, logger="evolution.metrics.similarity_bootstrap"):
        fast, _ = _fast(sentence, states, n_layers, masks, replicates=8, seed=1, epsilon=1e-6, min_ratio=3.0)
    assert any("from their resampled rows" in r.getMessage() for r in caplog.records)
    _assert_same(fast, ref)


def test_estimates_equal_the_definition():
    """The change estimates come from the same views as the replicates (spare directions kept
    aside): equal to adjacent_change."""
    from evolution.metrics.similarity import adjacent_change

    sentence, states, n_layers, masks = _states(3)
    _, estimates = _fast(sentence, states, n_layers, masks, replicates=2, seed=0, epsilon=1e-6, min_ratio=3.0)
    for g in states:
        ref, _ = adjacent_change(states[g][: n_layers[g]], masks, methods=METHODS, epsilon=1e-6, min_ratio=3.0, name=g)
        for m in METHODS:
            np.testing.assert_allclose(estimates[g][m], np.asarray(ref[m]), rtol=0, atol=1e-12)


def test_sentence_sums_against_a_loop():
    """Per-replicate weighted cross-products, sums and row counts against weighting the rows."""
    rng = np.random.default_rng(4)
    group = rng.integers(0, 30, 400)
    group[group == 7] = 8  # a sentence without rows
    a, b = rng.normal(size=(400, 5)), rng.normal(size=(400, 3))
    draws = sentence_draws(30, replicates=range(3, 7), seed=9)
    counts = sentence_counts(draws)
    sums = SentenceSums(group, n_groups=30, block_bytes=8 * 5 * 3 * 4)  # blocks of 4 sentences
    got, n = sums.centred(a, b, counts)
    for r in range(4):
        w = counts[r][group]
        np.testing.assert_allclose(sums.products(a, b, counts)[r], (a * w[:, None]).T @ b, rtol=1e-12)
        ma, mb = w @ a / w.sum(), w @ b / w.sum()
        np.testing.assert_allclose(got[r], ((a - ma) * w[:, None]).T @ (b - mb), rtol=1e-10, atol=1e-10)
        assert n[r] == w.sum()
        idx = sums.resample_rows(draws[r])  # the drawn sentences' rows, in the order drawn
        np.testing.assert_array_equal(idx, np.concatenate([np.flatnonzero(group == k) for k in draws[r]]))
    with pytest.raises(ValueError, match="0..29"):
        SentenceSums(np.array([0, 30]), n_groups=30)


@pytest.mark.parametrize("dead", [False, True])
def test_one_pair_and_its_replicates_equal_the_resampled_views(dead):
    """Token influence's route (two views of the same rows): the estimate and every replicate's
    PWCCA both ways and CKA equal the definition on the resampled rows, also with a dead and a
    duplicated unit; a replicate below min_ratio x d rows is NaN."""
    from evolution.metrics.similarity import pair_similarity

    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(40), rng.integers(4, 16, 40))
    x = rng.normal(size=(len(group), 6))
    y = x[:, :4] @ rng.normal(size=(4, 6)) + rng.normal(size=(len(group), 6)) * 0.7
    if dead:
        x[:, 5] = 0.0
        y[:, 2] = y[:, 1]
    draws = sentence_draws(40, replicates=10, seed=4)
    min_ratio = len(group) / 6 * 0.99  # the full rows pass; resamples with fewer rows do not
    est, reps = pair_with_replicates(x, y, group=group, draws=draws, epsilon=1e-6, min_ratio=min_ratio)
    np.testing.assert_allclose(
        est, pair_similarity(View(x, min_ratio=min_ratio), View(y, min_ratio=min_ratio)), rtol=0, atol=1e-12
    )
    sums = SentenceSums(group, n_groups=40)
    for r in range(10):
        idx = sums.resample_rows(draws[r])
        if len(idx) < min_ratio * 6:
            assert np.isnan(reps[r]).all()
            continue
        want = pair_similarity(View(x[idx], min_ratio=min_ratio), View(y[idx], min_ratio=min_ratio))
        np.testing.assert_allclose(reps[r], want, rtol=0, atol=TOLERANCE)
    assert np.isnan(reps[:, 0]).any() and np.isfinite(reps[:, 0]).any()


def test_change_intervals_go_to_their_own_rank_bin_and_equal_size_bin():
    """Two frequency-rank bins and three equal-size bins: one bootstrap computes both kinds side by
    side, and the intervals are split back per kind. Ranks 1..90 appear 30 times each (in random
    sentences), so the three equal-size bins are exactly ranks 1-30, 31-60, 61-90 and the rank
    bins [1, 4) and [4, 91) hold 90 and 2,610 rows; layer n + 1 is layer n plus noise of sd
    rank / 30, so the five bins change by clearly different amounts. Each bin's estimate is
    computed here from its own mask by the definition (adjacent_change); each interval must
    bracket its own bin's estimate and, at layer pair 0-1, no other bin's."""
    from evolution.analyses.similarity_results import with_intervals
    from evolution.analyses.similarity_tasks import _subsets
    from evolution.config import SimilarityConfig
    from evolution.metrics.similarity import adjacent_change

    rng = np.random.default_rng(11)
    n_sentences, d, n_rep = 225, 4, 40
    sentence = np.repeat(np.arange(n_sentences), 12)
    rank = rng.permutation(np.repeat(np.arange(1, 91), len(sentence) // 90))
    noise = rank / 30.0
    states = [rng.normal(size=(len(sentence), d))]
    for _ in range(2):
        states.append(states[-1] + noise[:, None] * rng.normal(size=(len(sentence), d)))
    rank_bins = [(1, 4), (4, 91)]
    by_hand = {
        "change": [(rank >= lo) & (rank < hi) for lo, hi in rank_bins],
        "change_equal": [(rank >= 1 + 30 * b) & (rank < 31 + 30 * b) for b in range(3)],
    }
    truth = {
        kind: {
            m: np.asarray(v)
            for m, v in adjacent_change(
                states, dict(enumerate(masks)), methods=METHODS, epsilon=1e-6, min_ratio=3.0, name="g"
            )[0].items()
        }
        for kind, masks in by_hand.items()
    }  # (layer pair, bin) per kind

    every, split = _subsets(rank, bins=rank_bins, similarity=SimilarityConfig(equal_bins=3, min_ratio=3.0))
    assert split == (2, 3)
    for got, want in zip(every.values(), by_hand["change"] + by_hand["change_equal"], strict=True):
        np.testing.assert_array_equal(got, want)
    draws = sentence_draws(n_sentences, replicates=n_rep, seed=3)
    got = change_with_replicates(
        states, every, group=sentence, draws=draws, methods=METHODS, epsilon=1e-6, min_ratio=3.0, name="g"
    )
    layers = len(states)
    estimate = {
        "views": [["g", layer] for layer in range(layers)],
        "similarity": {m: np.eye(layers).tolist() for m in METHODS},
        "bins": rank_bins,
        "change": {m: {"g": got["estimate"][m][:, :2].tolist()} for m in METHODS},
        "change_equal": {m: {"g": got["estimate"][m][:, 2:].tolist()} for m in METHODS},
        "equal_sizes": {"n": [900, 900, 900]},
    }
    block = {
        "first": 0,
        "replicates": n_rep,
        "pairs": [],
        "between": {m: np.zeros((n_rep, layers, 0)) for m in METHODS},  # no pair of models here
        "change": {m: {"g": got["replicates"][m]} for m in METHODS},
    }
    interval = with_intervals(estimate, [block])["interval"]
    for m in METHODS:
        every_truth = np.concatenate([truth["change"][m], truth["change_equal"][m]], axis=1)
        for kind, n_bins in (("change", 2), ("change_equal", 3)):
            iv = np.asarray(interval[kind][m]["g"], dtype=float)
            assert iv.shape == (layers - 1, n_bins, 2), (kind, m, iv.shape)
            low, high = iv[..., 0], iv[..., 1]
            inside = (low <= truth[kind][m]) & (truth[kind][m] <= high)
            assert inside.all(), (kind, m, truth[kind][m], iv)
            for b in range(n_bins):  # pair 0-1: the five bins apart, only the bin's own estimate inside
                holds = (low[0, b] <= every_truth[0]) & (every_truth[0] <= high[0, b])
                own = b if kind == "change" else 2 + b
                assert np.flatnonzero(holds).tolist() == [own], (kind, m, b, iv[0, b], every_truth[0])


def test_replicate_chunks_draw_what_one_run_of_all_replicates_draws():
    """The bootstrap's replicates run in chunks (a range per task). Replicate r draws with
    default_rng([seed, r]) whichever chunk it falls in, so the chunks together are one run of every
    replicate: a later chunk that restarted its seeds at 0 would repeat the first chunk's resamples
    (narrower intervals from fewer distinct replicates)."""
    n, seed = 50, 3
    whole = sentence_draws(n, replicates=9, seed=seed)
    assert whole.shape == (9, n)
    for r in range(9):  # the protocol, replicate by replicate
        np.testing.assert_array_equal(whole[r], np.random.default_rng([seed, r]).integers(0, n, n), err_msg=f"r={r}")
    chunks = [sentence_draws(n, replicates=range(a, b), seed=seed) for a, b in ((0, 4), (4, 7), (7, 9))]
    for (a, b), chunk in zip(((0, 4), (4, 7), (7, 9)), chunks, strict=True):
        np.testing.assert_array_equal(chunk, whole[a:b], err_msg=f"replicates {a}..{b - 1} drawn as a chunk")
    assert len({d.tobytes() for d in np.concatenate(chunks)}) == 9  # nine distinct resamples
    counts = sentence_counts(chunks[1])  # each replicate draws n sentences with replacement
    np.testing.assert_array_equal(counts.sum(axis=1), [n] * 3)


def test_directions_beside_the_rank_cut_off_equal_the_resampled_views():
    """The rank cut-off binding: x has four directions of order 1, a fifth at about 3e-6 of the
    largest singular value (kept: above epsilon = 1e-6 x the largest, as layer 0's small
    directions) and a sixth at about 2e-8 (below the cut-off, about 6e-3 of the smallest kept
    one, as float32 rounding), which a unit of y follows closely. Every replicate's PWCCA both
    ways and CKA equal the definition on its resampled rows (a thin SVD that drops the sixth
    direction by the resample's own cut-off): the fast path must carry that direction in its
    basis (left out, the replicates' kept directions move: PWCCA by about 4e-7 here) and still
    drop it in each replicate (kept, PWCCA moves by about 0.06)."""
    from evolution.metrics.similarity import pair_similarity

    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(40), rng.integers(6, 16, 40))
    n = len(group)
    z = rng.normal(size=(n, 4))
    small, tiny = 1e-5 * rng.normal(size=(n, 1)), 6e-8 * rng.normal(size=(n, 1))
    x = np.hstack([z @ rng.normal(size=(4, 4)), small, tiny])
    y = np.hstack(
        [
            z[:, :3] @ rng.normal(size=(3, 4)) + 0.5 * rng.normal(size=(n, 4)),
            small / 1e-5 + rng.normal(size=(n, 1)),
            tiny / 6e-8 + 0.1 * rng.normal(size=(n, 1)),
        ]
    )
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    assert 1e-6 < s[4] / s[0] < 1e-5 and s[5] / s[0] < 1e-7 and 1e-3 < s[5] / s[4] < 1e-2, s / s[0]
    draws = sentence_draws(40, replicates=8, seed=4)
    _, reps = pair_with_replicates(x, y, group=group, draws=draws, epsilon=1e-6, min_ratio=3.0)
    sums = SentenceSums(group, n_groups=40)
    for r in range(8):
        idx = sums.resample_rows(draws[r])
        vx, vy = View(x[idx], min_ratio=3.0), View(y[idx], min_ratio=3.0)
        assert vx.rank == 5  # the resample keeps the fifth direction and drops the sixth
        want = pair_similarity(vx, vy)
        np.testing.assert_allclose(reps[r], want, rtol=0, atol=TOLERANCE, err_msg=f"replicate {r}")


def test_change_replicates_where_a_resample_keeps_a_direction_the_full_data_drops():
    """The change by frequency on rank-deficient views: layer 1 has four directions of order 1, a
    fifth at about 1e-5 of the largest (kept) and a sixth at about 0.94e-6 (below epsilon = 1e-6
    x the largest: dropped) carried unevenly by the sentences, so that a resample of them keeps it
    (its own cut-off: its kept directions differ from the full data's); layers 0 and 2 have a unit
    that follows it. Every replicate of every subset equals the definition (the resampled rows'
    SVDs, bootstrap_replicates) within 1e-8: the views must carry the sixth direction as a spare
    one (margin MARGIN), which a replicate keeps or drops by its own cut-off."""
    rng = np.random.default_rng(0)
    n_sentences, replicates, seed = 40, 16, 4
    group = np.repeat(np.arange(n_sentences), rng.integers(6, 16, n_sentences))
    n = len(group)
    z = rng.normal(size=(n, 4))
    small = 3e-5 * rng.normal(size=(n, 1))
    near = np.exp(rng.normal(size=n_sentences))[group][:, None] * rng.normal(size=(n, 1))
    large = np.hstack([z @ rng.normal(size=(4, 4)), small])
    near *= 0.95e-6 * np.linalg.svd(large - large.mean(0), compute_uv=False)[0] / np.linalg.norm(near - near.mean(0))
    x = np.hstack([large, near])

    def follower():
        unit = near / np.linalg.norm(near - near.mean(0)) * np.sqrt(n)
        return np.hstack(
            [z[:, :3] @ rng.normal(size=(3, 4)) + 0.5 * rng.normal(size=(n, 4)), small / 3e-5, unit]
        ) + 0.1 * rng.normal(size=(n, 6))

    states = [follower(), x, follower()]
    masks = {"all": np.ones(n, bool), "most": rng.random(n) < 0.7}
    draws = sentence_draws(n_sentences, replicates=replicates, seed=seed)
    sums = SentenceSums(group, n_groups=n_sentences)
    assert View(x, min_ratio=3.0).rank == 5
    kept = [View(x[sums.resample_rows(draws[r])], min_ratio=3.0).rank for r in range(replicates)]
    assert 6 in kept and 5 in kept, kept  # some replicates keep the sixth direction, others drop it
    fast = change_with_replicates(
        states, masks, group=group, draws=draws, methods=METHODS, epsilon=1e-6, min_ratio=3.0, name="m"
    )
    ref = bootstrap_replicates(
        read=lambda g, layer: states[layer],
        models=["m"],
        n_layers={"m": 3},
        sentence=group,
        masks=masks,
        methods=METHODS,
        replicates=range(replicates),
        seed=seed,
        epsilon=1e-6,
        min_ratio=3.0,
    )
    for m in METHODS:
        want, got = np.asarray(ref["change"][m]["m"]), fast["replicates"][m]
        assert np.isfinite(want).all() and got.shape == want.shape == (replicates, 2, 2)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE, err_msg=m)


def test_float32_states_give_the_numbers_of_their_float64_copies():
    """change_task hands change_with_replicates float32 states as stored (half the memory):
    every use widens them to float64 itself (View, and the definition for the replicates that
    need it), so estimates and replicates equal those of the same values given as float64, to
    the last bit, fallbacks included; a View of float32 rows equals one of their float64 copy."""
    sentence, states, n_layers, masks = _states(2)
    first = sentence == sentence[0]
    narrow = []
    for x in states["a"]:
        x[:, -1] = np.where(first, np.arange(len(x)) % 5 - 2.0, 0.0)  # replicates that go to the definition
        narrow.append(x.astype(np.float32))
    group = np.unique(sentence, return_inverse=True)[1]
    draws = sentence_draws(group.max() + 1, replicates=8, seed=1)
    kw = {"group": group, "draws": draws, "methods": METHODS, "epsilon": 1e-6, "min_ratio": 3.0, "name": "a"}
    got32 = change_with_replicates(narrow, masks, **kw)
    got64 = change_with_replicates([x.astype(np.float64) for x in narrow], masks, **kw)
    for m in METHODS:
        np.testing.assert_array_equal(got32["estimate"][m], got64["estimate"][m])
        np.testing.assert_array_equal(got32["replicates"][m], got64["replicates"][m])
    assert np.isfinite(got32["replicates"]["pwcca"]).sum() > 0
    v32, v64 = View(narrow[1], margin=MARGIN), View(narrow[1].astype(np.float64), margin=MARGIN)
    for attr in ("basis_all_", "singular_all_", "coords_all_"):
        np.testing.assert_array_equal(getattr(v32, attr), getattr(v64, attr))
    assert v32.basis_all_.flags.c_contiguous and v32.gram_norm_ == v64.gram_norm_
