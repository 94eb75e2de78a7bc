"""Neighbour measures against hand-computed answers and plain loops: the chance level and
the ceiling of a within-type rate, queries without a left / right token left out, and the
cluster bootstrap over sentences (unequal sentences, unequal types)."""

from __future__ import annotations

import numpy as np
import pytest

from evolution.config import NeighborsConfig
from evolution.metrics.neighbors import bootstrap_interval, normalized, within_type_measures

END = -1  # no left token (sentence start) / no right token (sentence end)


def test_chance_and_ceiling_by_hand_with_a_sentence_initial_query():
    """One type, 7 occurrences on a line; left tokens A A A B B C and one sentence-initial
    occurrence (END). k = 2. By hand, over the 6 queries that have a left token:
    neighbours: each A -> the other two A (rate 1); each B -> the other B and A at 0.2
    (rate 1/2 each); C at 20.5 -> the two B (0); the END occurrence sits at 40.
    rate = (3 + 1 + 0) / 6 = 2/3.
    chance = (c_q - 1) / (m - 1): A 2/6, B 1/6, C 0 -> (1 + 1/3) / 6 = 2/9.
    ceiling = min(c_q - 1, k) / k: A 1, B 1/2, C 0 -> (3 + 1) / 6 = 2/3 (this layout is
    ordered by left token, so the rate reaches the ceiling).
    Counting the sentence-initial query as a miss would give 4/7, 4/21, 4/7; counting the
    query among its own candidates ((c_q) / m) would give chance (9/7 + 4/7 + 1/7) / 6 = 1/3."""
    x = np.array([0.0, 0.1, 0.2, 10.0, 10.1, 20.5, 40.0])[:, None].astype(np.float32)
    A, B, C = 11, 12, 13
    left = np.array([A, A, A, B, B, C, END])
    out, per_query = within_type_measures(
        x, types=np.zeros(7, int), position=np.arange(7), annotations={"left": left}, k=2, chance=True, per_query=True
    )
    assert out["same_left"] == pytest.approx(2 / 3)
    assert out["same_left_chance"] == pytest.approx(2 / 9)
    assert out["same_left_ceiling"] == pytest.approx(2 / 3)
    assert normalized(out["same_left"], out["same_left_chance"], out["same_left_ceiling"]) == pytest.approx(1.0)
    # the sentence-initial query is not counted in any of the three
    for name in ("same_left", "same_left_chance", "same_left_ceiling"):
        assert np.isnan(per_query[name][-1]) and np.isfinite(per_query[name][:-1]).all()
    # position distance keeps every query
    assert np.isfinite(per_query["position_distance"]).all()


def test_sentence_end_queries_are_left_out_of_the_right_rate():
    """Right tokens: the occurrence at a sentence end has none. Two types of unequal size:
    the rate averages over each type's counted queries, then over types."""
    x = np.array([0.0, 1.0, 2.5, 4.0, 0.0, 1.0, 2.5])[:, None].astype(np.float32)
    types = np.array([5, 5, 5, 5, 6, 6, 6])
    right = np.array([1, 1, END, 2, 3, 3, END])
    out = within_type_measures(x, types=types, position=np.zeros(7), annotations={"right": right}, k=1, chance=True)
    # type 5: query 0 -> nb 1 (same: 1); query 1 -> nb 0 (1); query 3 -> nb 2 (END: 0); query 2 left
    # out. Mean (1 + 1 + 0) / 3 = 2/3.
    # type 6: query 4 -> 5 (1), query 5 -> 4 (1), query 6 left out: 1. Over types: (2/3 + 1) / 2.
    assert out["same_right"] == pytest.approx((2 / 3 + 1) / 2)
    # chance: type 5: 1/3, 1/3, 0 -> 2/9; type 6: 1/2, 1/2 -> 1/2
    assert out["same_right_chance"] == pytest.approx((2 / 9 + 1 / 2) / 2)
    # ceiling (k' = 1): type 5: 1, 1, 0 -> 2/3; type 6: 1, 1 -> 1
    assert out["same_right_ceiling"] == pytest.approx((2 / 3 + 1) / 2)


def _brute_within(x, types, labels, k):
    """Rate, chance and ceiling of one annotation by explicit loops over types and queries."""
    rate, chance, ceiling = [], [], []
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        if len(rows) < 2:
            continue
        kk = min(k, len(rows) - 1)
        r_q, c_q, e_q = [], [], []
        for q in rows:
            if labels[q] < 0:
                continue
            others = [o for o in rows if o != q]
            dist = [float(((x[o] - x[q]) ** 2).sum()) for o in others]
            nearest = [others[i] for i in np.argsort(dist, kind="stable")[:kk]]
            r_q.append(sum(labels[o] == labels[q] for o in nearest) / kk)
            matches = sum(labels[o] == labels[q] for o in others)
            c_q.append(matches / len(others))
            e_q.append(min(matches, kk) / kk)
        if r_q:
            rate.append(np.mean(r_q))
            chance.append(np.mean(c_q))
            ceiling.append(np.mean(e_q))
    return np.mean(rate), np.mean(chance), np.mean(ceiling)


def test_rate_chance_and_ceiling_against_a_brute_force_loop():
    """Random data: types of unequal size (one smaller than k + 1, so k' < k), labels with
    sentence-edge queries (-1) and skewed counts; a representation that partly encodes the label."""
    rng = np.random.default_rng(5)
    types = np.repeat([0, 1, 2, 3], [40, 25, 6, 60])
    labels = rng.choice([END, 0, 1, 2, 3], p=[0.15, 0.45, 0.25, 0.1, 0.05], size=len(types))
    x = (np.eye(5)[labels + 1] * 1.5 + rng.normal(size=(len(types), 5))).astype(np.float32)
    got = within_type_measures(
        x, types=types, position=np.zeros(len(types)), annotations={"left": labels}, k=8, chance=True
    )
    rate, chance, ceiling = _brute_within(x.astype(np.float64), types, labels, 8)
    assert got["same_left"] == pytest.approx(rate, abs=1e-9)
    assert got["same_left_chance"] == pytest.approx(chance, abs=1e-12)
    assert got["same_left_ceiling"] == pytest.approx(ceiling, abs=1e-12)
    assert chance < got["same_left"] < ceiling  # the representation encodes the label, imperfectly


def _boot_loop(values, sentence, groups, n_boot, seed):
    """Percentile interval by a plain loop: replicate r draws the sentences
    default_rng([seed, r]).integers(0, S, S) among the sorted distinct sentences, pools
    their queries (a sentence drawn twice counts twice) and takes the mean over queries,
    or the mean over groups of each group's mean."""
    ids = np.unique(sentence)
    members = [[i for i in np.flatnonzero(sentence == s) if not np.isnan(values[i])] for s in ids]
    stats = []
    for r in range(n_boot):
        picked = np.random.default_rng([seed, r]).integers(0, len(ids), len(ids))
        rows = [i for k in picked for i in members[k]]
        pooled_v = values[rows]
        pooled_g = groups[rows] if groups is not None else np.zeros(len(rows))
        stats.append(np.mean([pooled_v[pooled_g == g].mean() for g in np.unique(pooled_g)]))
    return np.percentile(stats, [2.5, 97.5])


def test_bootstrap_interval_with_unequal_sentences_against_a_loop():
    """Sentences of unequal size whose size goes with the value: 60 one-query sentences near 0,
    40 sentences of 6-14 queries near 1 (mean over queries ~0.88, over sentences ~0.4). The
    interval is the loop's; one that weighs every sentence alike (ignoring their sizes) or
    resamples queries instead of sentences is far from it."""
    rng = np.random.default_rng(0)
    sizes = np.concatenate([np.ones(60, int), rng.integers(6, 15, size=40)])
    centre = np.concatenate([np.zeros(60), np.ones(40)])
    sentence = np.repeat(rng.permutation(np.arange(1000, 1100)), sizes)  # ids neither 0-based nor in order
    values = np.repeat(centre + rng.normal(0, 0.3, size=100), sizes) + rng.normal(0, 0.05, size=sizes.sum())
    values[rng.random(len(values)) < 0.1] = np.nan  # queries without a value: not counted
    lo, hi = bootstrap_interval(values, sentence=sentence, n_boot=400, seed=3)
    ref = _boot_loop(values, sentence, None, 400, 3)
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-10)
    point = np.nanmean(values)
    assert lo < point < hi
    # what the alternatives would give, as the meaning check: the mean of sentence means is ~0.4
    sent_means = [
        np.mean(values[(sentence == s) & ~np.isnan(values)])
        for s in np.unique(sentence)
        if (~np.isnan(values[sentence == s])).any()
    ]
    assert np.mean(sent_means) < lo - 0.2
    # resampling single queries gives a much narrower interval (queries of a sentence are correlated)
    by_query = bootstrap_interval(values, sentence=np.arange(len(values)), n_boot=400, seed=3)
    assert by_query[1] - by_query[0] < 0.6 * (hi - lo)


def test_bootstrap_interval_over_types_of_unequal_size_against_a_loop():
    """With groups (token types of 10, 40 and 150 queries whose values differ): the statistic is
    the mean of the type means (as the point value), not the pooled mean over queries."""
    rng = np.random.default_rng(1)
    groups = np.repeat([7, 3, 9], [10, 40, 150])
    values = np.select([groups == 7, groups == 3], [0.9, 0.5], 0.1) + rng.normal(0, 0.15, size=200)
    sentence = rng.integers(0, 45, size=200)
    lo, hi = bootstrap_interval(values, sentence=sentence, groups=groups, n_boot=300, seed=2)
    np.testing.assert_allclose([lo, hi], _boot_loop(values, sentence, groups, 300, 2), rtol=1e-10)
    point = np.mean([values[groups == g].mean() for g in (3, 7, 9)])
    assert lo < point < hi and values.mean() < lo  # the pooled mean (0.26) lies below the interval


def _synthetic_layer(seed: int = 0, sentences: int = 80, extra: int = 0):
    """Occurrences of 4 types in ``sentences`` sentences of unequal length, with sentence effects:
    each sentence shifts its occurrences' vectors, so neighbours and their same-token share vary
    by sentence (``extra`` noise features beside the 6)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 12, size=sentences)
    sentence = np.repeat(np.arange(sentences), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    token = rng.choice([3, 4, 5, 6], p=[0.4, 0.3, 0.2, 0.1], size=len(sentence))
    left = np.where(position == 0, END, rng.integers(10, 14, size=len(sentence)))
    right = np.where(np.r_[sentence[1:] != sentence[:-1], True], END, rng.integers(10, 14, size=len(sentence)))
    shift = rng.normal(0, 1.5, size=(sentences, 6))
    x = (
        np.eye(6)[token - 3] * 2
        + shift[sentence]
        + np.eye(6)[left % 6] * 0.8 * (left >= 0)[:, None]
        + rng.normal(0, 0.7, size=(len(sentence), 6))
    ).astype(np.float32)
    if extra:
        x = np.hstack([x, rng.normal(0, 0.7, size=(len(x), extra)).astype(np.float32)])
    a = {
        "neighbors/rows": np.arange(len(sentence)),
        "neighbors/token": token,
        "neighbors/position": position,
        "neighbors/left": left,
        "neighbors/right": right,
        "neighbors/sentence": sentence,
    }
    return x, a


def test_layer_intervals_resample_sentences_against_a_loop():
    """The analysis's intervals of the pooled same-token rate and of the within-type rates:
    the same-sentence resamples redone by a loop on per-query values from a brute-force
    neighbour search. An interval over token types (4 clusters) or queries differs."""
    from evolution.analyses.neighbors import layer_measures

    x, a = _synthetic_layer()
    n_boot, seed = 300, 11
    out = layer_measures(x, a, neighbors=NeighborsConfig(k=5, bootstrap=n_boot), seed=seed)
    token, sentence, left = a["neighbors/token"], a["neighbors/sentence"], a["neighbors/left"]
    d = ((x[:, None].astype(np.float64) - x[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    same_token = np.array([np.mean(token[np.argsort(d[i], kind="stable")[:5]] == token[i]) for i in range(len(x))])
    assert out["same_token"] == pytest.approx(same_token.mean(), abs=1e-9)
    np.testing.assert_allclose(
        out["interval"]["same_token"], _boot_loop(same_token, sentence, None, n_boot, seed), rtol=1e-9
    )
    same_left = np.full(len(x), np.nan)
    for t in np.unique(token):
        rows = np.flatnonzero(token == t)
        sub = d[np.ix_(rows, rows)]
        for j, q in enumerate(rows):
            if left[q] >= 0:
                nb = rows[np.argsort(sub[j], kind="stable")[:5]]
                same_left[q] = np.mean(left[nb] == left[q])
    by_type = np.nanmean([np.nanmean(same_left[token == t]) for t in np.unique(token)])
    assert out["same_left"] == pytest.approx(by_type, abs=1e-9)
    ref = _boot_loop(same_left, sentence, token, n_boot, seed)
    np.testing.assert_allclose(out["interval"]["same_left"], ref, rtol=1e-9)
    assert out["queries"]["same_left"] == int(np.isfinite(same_left).sum()) < len(x)  # sentence starts left out
    # the chance level does not depend on the vectors; its interval reflects sentences only
    lo, hi = out["interval"]["same_left_chance"]
    assert lo <= out["same_left_chance"] <= hi
    # normalized = (rate - chance) / (ceiling - chance), interval from paired resamples
    assert out["same_left_normalized"] == pytest.approx(
        (out["same_left"] - out["same_left_chance"]) / (out["same_left_ceiling"] - out["same_left_chance"])
    )
    lo, hi = out["interval"]["same_left_normalized"]
    assert lo < out["same_left_normalized"] < hi


def test_layer_chance_and_ceiling_do_not_depend_on_the_layer():
    """Two unrelated representations of the same occurrences: the rates differ, chance and
    ceiling (and their intervals, from the same resamples) do not."""
    from evolution.analyses.neighbors import layer_measures

    x, a = _synthetic_layer(1)
    y = np.random.default_rng(9).normal(size=x.shape).astype(np.float32)
    cfg = NeighborsConfig(k=5, bootstrap=50)
    one, two = layer_measures(x, a, neighbors=cfg, seed=4), layer_measures(y, a, neighbors=cfg, seed=4)
    assert one["same_left"] != two["same_left"]
    for name in ("same_left_chance", "same_left_ceiling", "same_right_chance", "same_right_ceiling"):
        assert one[name] == two[name]
        assert one["interval"][name] == two["interval"][name]
    assert one["same_left_chance"] < one["same_left_ceiling"] <= 1


def test_query_parts_are_whole_search_blocks():
    from evolution.metrics.neighbors import SPLIT_ALIGN, query_parts

    assert query_parts(5, per_part=SPLIT_ALIGN) == [(0, 5)]
    assert query_parts(3 * SPLIT_ALIGN, per_part=SPLIT_ALIGN) == [(0, 8192), (8192, 16384), (16384, 24576)]
    # a tail shorter than one block joins the part before it; a longer one stands alone
    assert query_parts(2 * SPLIT_ALIGN + 100, per_part=SPLIT_ALIGN) == [(0, 8192), (8192, 16484)]
    assert query_parts(16384 + 9000, per_part=16384) == [(0, 16384), (16384, 25384)]
    with pytest.raises(ValueError, match="multiple of 8192"):
        query_parts(10, per_part=5000)


def test_a_split_search_without_faiss_equals_one_search(monkeypatch):
    """The NumPy route (no faiss): the parts' neighbours are the whole search's."""
    import evolution.metrics.search as search
    from evolution.metrics.neighbors import knn, query_parts

    monkeypatch.setattr(search, "faiss_or_none", lambda: None)
    x = _synthetic_layer(4, sentences=2600, extra=2)[0]
    parts = query_parts(len(x), per_part=8192)
    assert len(parts) == 2
    np.testing.assert_array_equal(np.concatenate([knn(x, k=5, queries=q) for q in parts]), knn(x, k=5))


def test_a_layer_split_by_queries_equals_one_search():
    """Issue 50: the pooled same-token search of one layer split into units of
    ``queries_per_unit`` queries gives every number of the whole search, intervals included,
    exactly (parts start at multiples of the search's query block), whichever order the parts
    come back in; a missing part is refused, not averaged over."""
    from evolution.analyses.neighbors import combine_layer, layer_measures, layer_part
    from evolution.metrics.neighbors import knn, query_parts

    x, a = _synthetic_layer(3, sentences=4200, extra=10)  # 16 features: each part on faiss's BLAS route
    cfg = NeighborsConfig(k=7, bootstrap=40, queries_per_unit=8192)
    parts = query_parts(len(x), per_part=cfg.queries_per_unit)
    assert len(parts) == 3 and parts[-1][1] - parts[-1][0] > 8192  # a short tail joined
    whole = knn(x, k=7)
    np.testing.assert_array_equal(np.concatenate([knn(x, k=7, queries=q) for q in parts]), whole)
    one = layer_measures(x, a, neighbors=cfg, seed=5)
    got = [layer_part(x, a, neighbors=cfg, seed=5, queries=q) for q in parts]
    assert ["within" in g for g in got] == [True, False, False]  # the within-type measures once
    split = combine_layer(got[::-1], sentence=a["neighbors/sentence"], neighbors=cfg, seed=5)
    assert split == one
    assert 0.3 < one["same_token"] < 0.95  # neither trivial nor perfect
    lo, hi = one["interval"]["same_token"]
    assert lo < one["same_token"] < hi
    with pytest.raises(ValueError, match="do not cover"):
        combine_layer(got[:2], sentence=a["neighbors/sentence"], neighbors=cfg, seed=5)


def test_the_analysis_splits_a_layer_and_joins_its_parts(monkeypatch, tmp_path):
    """Through the analysis: Neighbors.units with each layer split in three (query_parts patched:
    the data are small), every part's result through JSON as the runner caches it, then
    Neighbors.datasets: each value and interval equals layer_measures of the whole layer with that
    layer's seed (the run's seed + layer). A missing part, or a layer without any, is refused."""
    import json
    from types import SimpleNamespace

    import evolution.analyses.neighbors as nb
    import evolution.store
    from evolution.analyses.neighbors import Neighbors, layer_measures
    from evolution.analyses.runner import _jsonable
    from evolution.config import MetricsConfig

    x, a = _synthetic_layer(5, sentences=300, extra=10)  # 16 features: split
    states = [x, (x @ np.random.default_rng(1).normal(size=(16, 16))).astype(np.float32)]
    monkeypatch.setattr(evolution.store, "read_rows", lambda store, model, layer, rows: states[layer][rows])
    monkeypatch.setattr(nb, "query_parts", lambda n, per_part: [(0, 100), (100, 250), (250, n)])
    cfg = NeighborsConfig(k=5, bootstrap=30)
    plan = SimpleNamespace(neighbors={k.split("/")[1]: v for k, v in a.items()}, syntax=None)
    model = SimpleNamespace(name="m", key="k", n_layers=2, layers=[0, 1], d_model=16, plan=plan)
    inputs = SimpleNamespace(
        config=MetricsConfig(neighbors=cfg),
        models={"m": model},
        store="unused",
        arrays_dir=str(tmp_path),
        seed=7,
        names=["m"],
        max_layers=2,
    )
    units = Neighbors().units(inputs)
    assert [u.name for u in units] == ["m-0[0]", "m-0[1]", "m-0[2]", "m-1[0]", "m-1[1]", "m-1[2]"]
    results = {u.name: json.loads(json.dumps(u.fn(**u.kwargs), default=_jsonable)) for u in units}
    ds = Neighbors().datasets(inputs, results)["neighbors"]
    for layer in (0, 1):
        ref = layer_measures(states[layer], a, neighbors=cfg, seed=7 + layer)
        for name in ds.measure.values:
            got = ds.sel(model="m", layer=layer, measure=name)
            assert float(got.value) == ref[name], (layer, name)
            assert list(got.interval.values) == list(ref["interval"][name]), (layer, name)
    assert ds.value.sel(layer=0, measure="same_token") != ds.value.sel(layer=1, measure="same_token")
    with pytest.raises(ValueError, match="do not cover"):
        Neighbors().datasets(inputs, {k: v for k, v in results.items() if k != "m-1[1]"})
    with pytest.raises(ValueError, match="no result for m layer 1"):
        Neighbors().datasets(inputs, {k: v for k, v in results.items() if not k.startswith("m-1")})


def _plain_knn(x: np.ndarray, k: int) -> np.ndarray:
    """The stated rule as a plain loop: each row's k other rows by ascending sum of squared
    differences (float64, summed left to right: the same bits as NumPy's for d < 8 features),
    ties by the smaller index; each row's k in ascending index order."""
    x = x.astype(np.float64)
    out = []
    for i in range(len(x)):
        keyed = sorted((sum((x[i, f] - x[j, f]) ** 2 for f in range(x.shape[1])), j) for j in range(len(x)) if j != i)
        out.append(sorted(j for _, j in keyed[:k]))
    return np.array(out)


def _tied_rows(seed: int = 0) -> np.ndarray:
    """(420, 6) float32 rows full of ties: small integers (exact distances, many equal), a block
    of 40 copies of one row (more copies than k), pairs and triples of copies (fewer), and rows
    of one 'token' plus a sinusoid of 'position' whose distances are equal in exact arithmetic
    (they depend on the position gap only) and differ in their last bits after rounding."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 3, size=(200, 6)).astype(np.float32)
    many = np.repeat(rng.normal(size=(1, 6)), 40, axis=0)
    few = np.repeat(rng.normal(size=(30, 6)), [2, 3] * 15, axis=0)
    pos = np.arange(105)[:, None] * np.array([0.1, 0.03, 0.01])
    sinus = 0.2 * np.concatenate([np.sin(pos), np.cos(pos)], axis=1) + rng.normal(size=6)
    x = np.concatenate([ints, many, few, sinus]).astype(np.float32)
    return x[rng.permutation(len(x))]


@pytest.mark.parametrize("k", [5, 45])
def test_exact_neighbours_follow_the_stated_rule_whatever_the_route(monkeypatch, k):
    """Issue 61: one rule, whatever runs it: every way of cutting the queries into parts, faiss
    with one thread or two, NumPy without faiss, equal the plain loop row for row, on rows with
    duplicates (more and fewer than k), exact ties and rounding-level near-ties."""
    import evolution.metrics.search as search
    from evolution.metrics.neighbors import knn

    faiss = pytest.importorskip("faiss")
    x = _tied_rows()
    want = _plain_knn(x, k)
    got = {}
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        got[f"faiss, {threads} thread(s)"] = knn(x, k=k)
        got[f"faiss, parts, {threads} thread(s)"] = np.concatenate(
            [knn(x, k=k, queries=q) for q in [(0, 7), (7, 200), (200, 201), (201, len(x))]]
        )
    monkeypatch.setattr(search, "faiss_or_none", lambda: None)
    got["numpy"] = knn(x, k=k)
    got["numpy, parts"] = np.concatenate([knn(x, k=k, queries=(a, min(a + 64, len(x)))) for a in range(0, len(x), 64)])
    for route, ids in got.items():
        np.testing.assert_array_equal(ids, want, err_msg=route)


def test_near_ties_are_broken_by_the_rule_not_by_the_candidates_order(monkeypatch):
    """A fast search that hands its candidates back in another order, or with float32 distances
    that differ in the last bits, changes nothing: the exact distances and the index decide."""
    import evolution.metrics.search as search
    from evolution.metrics.neighbors import knn

    x = _tied_rows(1)
    want = knn(x, k=5)
    real = search.nearest

    def shuffled(base, queries, c):
        d, i = real(base, queries, c)
        rng = np.random.default_rng(0)
        flip = rng.permutation(c)
        noise = (1 + 1e-7 * rng.standard_normal(d.shape)).astype(np.float32)
        return (d * noise)[:, flip], i[:, flip]

    monkeypatch.setattr(search, "nearest", shuffled)
    np.testing.assert_array_equal(knn(x, k=5), want)
    np.testing.assert_array_equal(want, _plain_knn(x, 5))


def test_the_rounding_bound_holds_where_norms_dwarf_distances():
    """The float32 route's distances against the float64 definition on GPT-2-like rows (a common
    offset of squared norm ~1e6 in a few features, d = 768): the largest error observed is well
    inside the bound the certification uses, and the neighbours still equal a float64 brute force
    (ties by index)."""
    from evolution.metrics.neighbors import _rounding, knn, squared_distances
    from evolution.metrics.search import nearest

    rng = np.random.default_rng(2)
    n, d = 600, 768
    x = rng.normal(size=(n, d)) + rng.integers(0, 40, n)[:, None] * rng.normal(size=(1, d)) * 0.5
    x[:, :4] += 500.0  # massive activations: the same few features in every row
    x = x.astype(np.float32)
    d32, idx = nearest(x, x, 30)
    exact = squared_distances(x[:, None, :], x[idx])
    norms = (x.astype(np.float64) ** 2).sum(1)
    bound = _rounding(norms, norms.max(), d)
    assert np.abs(d32 - exact).max() < 0.25 * bound.min()
    full = np.stack([squared_distances(row, x) for row in x])
    np.fill_diagonal(full, np.inf)
    want = np.sort(np.lexsort((np.broadcast_to(np.arange(n), full.shape), full), axis=1)[:, :10], axis=1)
    np.testing.assert_array_equal(knn(x, k=10), want)
