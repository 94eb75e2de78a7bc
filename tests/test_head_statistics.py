"""The per-head statistics unit (:func:`heads_task`) and the ``heads`` group on a stub model
whose attention maps and value vectors the test sets, against plain loops and scipy:
confidence over non-sink keys, NaN for a special token the input lacks, punctuation rules,
Kobayashi et al.'s Spearman signs and per-layer norm shares (the norm of the summed vector),
rare-token shares (content queries, main text only, ties), positional flags at the threshold,
and the head map's Jensen-Shannon distance against scipy."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import xarray as xr

import evolution.extract  # noqa: F401 - binds the real cached_adapter before any test patches it
from evolution.config import HeadsConfig

LAYOUTS = {"mt": ([], [2]), "mlm": ([0], [2]), "lm": ([2], [])}  # prefix, suffix of the model's input
N_SENTENCES, ANNOTATED_FROM = 9, 6  # sentences 6-8: the annotated treebank analysed beside the main text
PIECES = {3: ".", 4: "!", 5: ","}  # other ids: ordinary words


def train_count(token_id):
    return 2000 - 40 * np.asarray(token_id)  # a higher id is rarer


class StubModel:
    """Attention maps (L=2, H=2) and value vectors f_h(x_j) set per sentence (keyed by its
    input ids); ``forward_norms`` returns Kobayashi et al.'s norms computed from them."""

    num_layers, num_heads, d = 2, 2, 4
    supports_norms = True

    def __init__(self, layout: str, sentences: list[list[int]], seed: int = 0):
        self.prefix, self.suffix = LAYOUTS[layout]
        self.maps, self.values = {}, {}
        rng = np.random.default_rng(seed)
        n_pre = len(self.prefix)
        for s, ids in enumerate(sentences):
            x = self.build_input(ids)
            t, n = len(x), len(ids)
            content = np.arange(n_pre, n_pre + n)
            counts = train_count(ids)
            rare, common = n_pre + int(np.argmin(counts)), n_pre + int(np.argmax(counts))
            special = np.setdiff1d(np.arange(t), content)
            a = rng.dirichlet(np.full(t, 2.0), size=(2, 2, t))
            # layer 1 head 0: every query on the rarest token in the main text, on the most
            # frequent one in the annotated text
            a[0, 0, :, rare if s < ANNOTATED_FROM else common] += 3.0
            # layer 1 head 1: half the content queries on the rarest token, the other half and the
            # special tokens' queries on the most frequent one
            a[0, 1, content[: n // 2], rare] += 3.0
            a[0, 1, content[n // 2 :], common] += 3.0
            a[0, 1, special, common] += 3.0
            # layer 2, heads 0 and 1: sink heads, every query on the first special token
            a[1, :, :, special[0]] += 3.0
            self.maps[tuple(x)] = a / a.sum(-1, keepdims=True)
            direction = rng.normal(size=(2, 2, t, self.d))
            direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
            scale = np.full(t, 3.0)
            scale[content] = 0.5 + 0.05 * np.asarray(ids) + 0.4 * rng.random(n)  # grows with rarity, noisy
            f = direction * scale[:, None]
            f[:, 1, special] = -f[:, 0, special]  # the heads' vectors of a special token cancel
            self.values[tuple(x)] = f

    def build_input(self, ids):
        return [*self.prefix, *ids, *self.suffix]

    @property
    def content_offset(self):
        return len(self.prefix)

    def _stack(self, xs, fn, shape):
        t = max(len(x) for x in xs)
        out = np.zeros(shape(len(xs), t))
        for b, x in enumerate(xs):
            v = fn(tuple(x))
            out[(slice(None), b) + tuple(slice(0, k) for k in v.shape[1:])] = v
        return out

    def forward(self, xs, *, attention=False):
        return None, self._stack(xs, self.maps.get, lambda b, t: (2, b, 2, t, t))

    def forward_norms(self, xs):
        att = self._stack(xs, self.maps.get, lambda b, t: (2, b, 2, t, t))
        norms = {
            "value_norm": self._stack(xs, lambda x: np.linalg.norm(self.values[x], axis=-1), lambda b, t: (2, b, 2, t)),
            "weighted_norm": self._stack(
                xs,
                lambda x: self.maps[x] * np.linalg.norm(self.values[x], axis=-1)[:, :, None, :],
                lambda b, t: (2, b, 2, t, t),
            ),
            "summed_norm": self._stack(
                xs,
                lambda x: np.linalg.norm(np.einsum("lhqk,lhkd->lqkd", self.maps[x], self.values[x]), axis=-1),
                lambda b, t: (2, b, t, t),
            ),
        }
        return None, att, norms


def _sentences(seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 40, size=int(n)).tolist() for n in rng.choice([4, 6, 8], size=N_SENTENCES)]


def _store(sentences, *, with_counts: bool) -> xr.Dataset:
    ids = np.concatenate(sentences)
    coords = {
        "sentence": ("token", np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])),
        "token_id": ("token", ids),
        "token_str": ("token", np.array([PIECES.get(int(i), f"\u2581w{i}") for i in ids], dtype=object)),
        "freq_rank": ("token", ids - 2),
    }  # 1 = most frequent
    if with_counts:
        coords["train_count"] = ("token", train_count(ids))
    return xr.Dataset(coords=coords, attrs={"annotated_from": ANNOTATED_FROM})


def _run(monkeypatch, layout, *, with_counts=True, punctuation="clark"):
    import evolution.models
    import evolution.store
    from evolution.analyses.heads import Heads
    from evolution.analyses.heads.statistics import heads_task

    sentences = _sentences()
    model = StubModel(layout, sentences)
    monkeypatch.setattr(evolution.models, "cached_adapter", lambda spec: model)
    monkeypatch.setattr(
        evolution.store, "open_representations", lambda store, name: _store(sentences, with_counts=with_counts)
    )
    result = heads_task(
        store="stub", model="stub", spec={}, causal=layout == "lm", max_batch_tokens=24, punctuation=punctuation
    )
    inputs = SimpleNamespace(names=["stub"], config=SimpleNamespace(heads=HeadsConfig(punctuation=punctuation)))
    ds = Heads().datasets(inputs, {"stub": result})["heads"].sel(model="stub")
    return ds, model, sentences


def _inputs(model, ids):
    x = tuple(model.build_input(ids))
    n_pre = len(model.prefix)
    content = np.zeros(len(x), bool)
    content[n_pre : n_pre + len(ids)] = True
    return model.maps[x], model.values[x], content


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_confidence_leaves_out_the_sink_keys_and_keeps_the_old_value_beside(monkeypatch, layout):
    ds, model, sentences = _run(monkeypatch, layout)
    conf, with_sink = [[[] for _ in range(2)] for _ in range(2)], [[[] for _ in range(2)] for _ in range(2)]
    for ids in sentences:
        a, _, content = _inputs(model, ids)
        eos = np.zeros(len(content), bool)
        eos[len(model.prefix) + len(ids) :] = True
        for layer in range(2):
            for h in range(2):
                for q in range(len(content)):
                    if content[q]:  # a content query: its largest weight on a content key
                        conf[layer][h].append(max(a[layer, h, q, k] for k in np.flatnonzero(content)))
                    if not eos[q]:  # the old value: any key, every query but EOS
                        with_sink[layer][h].append(max(a[layer, h, q]))
    value = ds.value
    np.testing.assert_allclose(
        value.sel(measure="confidence").values, [[np.mean(x) for x in row] for row in conf], rtol=1e-12
    )
    np.testing.assert_allclose(
        value.sel(measure="confidence_with_sink").values, [[np.mean(x) for x in row] for row in with_sink], rtol=1e-12
    )
    # the sink head (layer 2, head 0): most of its weight on a special token, so its confidence
    # falls well below the old value
    sink = value.sel(layer=2, head=0)
    assert float(sink.sel(measure="confidence_with_sink")) > 0.5 > float(sink.sel(measure="confidence")) + 0.2


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_attention_to_a_special_token_the_model_lacks_is_nan(monkeypatch, layout):
    ds, model, sentences = _run(monkeypatch, layout)
    for key, measure, present in (("bos", "to_bos", bool(model.prefix)), ("eos", "to_eos", bool(model.suffix))):
        for var in (
            ds.value.sel(measure=measure),
            ds.alpha_share.sel(key_type=key),
            ds.norm_share.sel(key_type=key),
            ds.layer_alpha_share.sel(key_type=key),
            ds.layer_norm_share.sel(key_type=key),
        ):
            assert np.isfinite(var.values).all() if present else np.isnan(var.values).all(), (key, var.name)
    # punctuation the model has, absent from some sentences: 0 there, so the pooled shares are finite
    assert any(not {3, 5} & set(ids) for ids in sentences)
    for var in (
        ds.value.sel(measure="to_punct"),
        ds.norm_share.sel(key_type="punct"),
        ds.layer_norm_share.sel(key_type="punct"),
    ):
        assert np.isfinite(var.values).all()


@pytest.mark.parametrize("layout", ["mt", "mlm"])
def test_layer_norm_share_is_the_norm_of_the_summed_vector(monkeypatch, layout):
    """Kobayashi et al.: per layer, the share of ||sum_h alpha_h f_h(x_j)|| going to the special
    tokens, per query, averaged over queries; the heads' vectors of a special token cancel, so
    the norm of their sum is far below the sum of their norms."""
    ds, model, sentences = _run(monkeypatch, layout)
    shares, by_head_sum = [[], []], [[], []]
    for ids in sentences:
        a, f, content = _inputs(model, ids)
        special = ~content
        for layer in range(2):
            for q in range(len(content)):
                summed = [
                    np.linalg.norm(sum(a[layer, h, q, k] * f[layer, h, k] for h in range(2)))
                    for k in range(len(content))
                ]
                heads = [
                    sum(a[layer, h, q, k] * np.linalg.norm(f[layer, h, k]) for h in range(2))
                    for k in range(len(content))
                ]
                shares[layer].append(sum(np.array(summed)[special]) / sum(summed))
                by_head_sum[layer].append(sum(np.array(heads)[special]) / sum(heads))
    got = ds.layer_norm_share.sel(key_type=["bos", "eos"]).sum("key_type", min_count=1).values
    np.testing.assert_allclose(got, [np.mean(s) for s in shares], rtol=1e-9)
    assert (np.array([np.mean(s) for s in by_head_sum]) > 1.5 * got).all()  # the wrong definition differs


@pytest.mark.parametrize("with_counts", [True, False])
def test_spearman_sign_rarer_tokens_have_larger_value_norms(monkeypatch, with_counts):
    from scipy.stats import spearmanr

    ds, model, sentences = _run(monkeypatch, "mlm", with_counts=with_counts)
    norms, received, rarity = [[], []], [[], []], []
    for ids in sentences:
        a, f, content = _inputs(model, ids)
        rarity += list(-train_count(ids) if with_counts else np.asarray(ids) - 2)  # both grow with rarity
        for layer in range(2):
            norms[layer] += list(np.linalg.norm(f[layer], axis=-1).mean(0)[content])
            received[layer] += list(a[layer].mean(axis=(0, 1))[content])
    for layer in range(2):
        rho = spearmanr(norms[layer], rarity).statistic
        assert rho > 0.5  # the stub's norms grow with rarity: a clear positive correlation
        assert float(ds.spearman.sel(layer=layer + 1, quantity="value_norm")) == pytest.approx(rho, rel=1e-12)
        assert float(ds.spearman.sel(layer=layer + 1, quantity="alpha_received")) == pytest.approx(
            spearmanr(received[layer], rarity).statistic, rel=1e-12
        )


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_rare_token_share_counts_content_queries_of_the_main_text(monkeypatch, layout):
    """Layer 1 head 0 points to the rarest token in every main-text sentence (share 1.0; the
    annotated sentences, where it does not, are left out); layer 1 head 1 splits its content
    queries evenly between the rarest and the most frequent token (a tie: 0.5 a sentence), and
    its special-token queries, which do not count, would tip it to the frequent one. The other
    heads against a plain loop with the tie rule."""
    ds, model, sentences = _run(monkeypatch, layout)
    share = ds.rare_token_share.values
    assert share[0, 0] == pytest.approx(1.0) and share[0, 1] == pytest.approx(0.5)
    expect = np.zeros((2, 2))
    for ids in sentences[:ANNOTATED_FROM]:
        a, _, content = _inputs(model, ids)
        counts = train_count(ids)
        rarest = {len(model.prefix) + k for k in range(len(ids)) if counts[k] == counts.min()}
        for layer in range(2):
            for h in range(2):
                tally = {}
                for q in np.flatnonzero(content):
                    k = int(np.argmax(a[layer, h, q]))
                    tally[k] = tally.get(k, 0) + 1
                modal = [k for k, v in tally.items() if v == max(tally.values())]
                expect[layer, h] += sum(k in rarest for k in modal) / len(modal)
    np.testing.assert_allclose(share, expect / ANNOTATED_FROM, rtol=1e-12)
    ds, _, _ = _run(monkeypatch, layout, with_counts=False)  # no training counts: no rare-token heads
    assert np.isnan(ds.rare_token_share.values).all()


def test_punctuation_rule_of_the_config(monkeypatch):
    """Clark et al.'s '.' and ',' by default; every Unicode punctuation piece ('!' too) with
    metrics.heads.punctuation: unicode."""
    sums = {}
    for rule in ("clark", "unicode"):
        ds, model, sentences = _run(monkeypatch, "mlm", punctuation=rule)
        sums[rule] = ds.value.sel(measure="to_punct").values
        assert ds.attrs["punctuation"] == rule
        marks = {"clark": (3, 5), "unicode": (3, 4, 5)}[rule]
        per_query = [[[] for _ in range(2)] for _ in range(2)]
        for ids in sentences:
            a, _, content = _inputs(model, ids)
            keys = [len(model.prefix) + k for k, i in enumerate(ids) if i in marks]
            for layer in range(2):
                for h in range(2):
                    per_query[layer][h] += list(a[layer, h][:, keys].sum(-1))
        np.testing.assert_allclose(sums[rule], [[np.mean(x) for x in row] for row in per_query], rtol=1e-12)
    assert (sums["unicode"] > sums["clark"]).all()


def test_positional_flag_at_the_threshold():
    """Voita et al.: positional when >= 90% of a head's maxima sit on one offset; 85% is not."""
    from evolution.analyses.heads import Heads
    from evolution.metrics.heads import head_sums

    T = 20
    maps = []
    for on_prev in (17, 18, 19):  # 85%, 90%, 95% of the 20 queries' maxima on the previous token
        a = np.full((T, T), 0.01)
        for q in range(T):
            a[q, q - 1 if 0 < q <= on_prev else (q + 2) % T] = 1.0
        maps.append(a / a.sum(-1, keepdims=True))
    none = np.zeros(T, bool)
    sums, counts, _ = head_sums(np.stack(maps)[None], bos=none, eos=np.arange(T) == T - 1, punct=none, causal=False)
    inputs = SimpleNamespace(names=["m"], config=SimpleNamespace(heads=HeadsConfig()))
    ds = Heads().datasets(
        inputs, {"m": {"sums": sums, "counts": counts, "sentences": 1, "spearman": np.full((1, 2), np.nan)}}
    )["heads"]
    np.testing.assert_allclose(ds.value.sel(model="m", layer=1, measure="max_prev").values, [0.85, 0.9, 0.95])
    np.testing.assert_array_equal(ds.positional.sel(model="m", layer=1).values, [False, True, True])


@pytest.mark.parametrize("share, expected", [(0.9, [False, True, True]), (0.95, [False, False, True])])
def test_decoder_positional_flag_at_the_configured_threshold(share, expected):
    """The ``heads_decoder`` group flags a decoder self-attention head positional when its share of
    maxima on one offset reaches ``heads.positional_share``. Three causal heads put 85%, 90% and 95%
    of their 20 queries' maxima on the previous token (the rest two tokens back, query 0 on itself):
    at the default 0.9 only the 85% head is not positional, at 0.95 only the 95% head is. A fixed
    threshold (0.8, say) would flag all three in both cases; encoder-decoder attention never is."""
    from evolution.analyses.heads import Heads
    from evolution.metrics.heads import cross_head_sums, head_sums

    T, S = 20, 6
    maps = []
    for on_prev in (17, 18, 19):  # queries 1..on_prev look back one token, later ones two
        a = np.zeros((T, T))
        for q in range(T):
            a[q, : q + 1] = 0.01  # causal: keys up to the query only
            a[q, 0 if q == 0 else q - 1 if q <= on_prev else q - 2] = 1.0
        maps.append(a / a.sum(-1, keepdims=True))
    own = np.stack(maps)[None]  # (L=1, H=3, T, T)
    first = np.arange(T) == 0
    s_own, c_own, _ = head_sums(own, bos=first, eos=np.zeros(T, bool), punct=np.zeros(T, bool), causal=True)
    cross = np.random.default_rng(0).dirichlet(np.ones(S), size=(1, 3, T))
    s_cross, c_cross = cross_head_sums(cross, bos=np.zeros(S, bool), eos=np.arange(S) == S - 1, punct=np.zeros(S, bool))
    result = {
        "sums": np.stack([s_own, s_cross]),
        "counts": {"decoder_self": c_own, "encoder_decoder": c_cross},
        "rare_hits": np.zeros((2, 1, 3)),
        "rare_sentences": [0, 0],
        "sentences": 1,
        "target_tokens": T - 1,
        "notes": [],
    }
    inputs = SimpleNamespace(names=["m"], config=SimpleNamespace(heads=HeadsConfig(positional_share=share)))
    ds = Heads().datasets(inputs, {"m-decoder": result})["heads_decoder"]
    own_v = ds.value.sel(model="m", attention="decoder_self", layer=1)
    np.testing.assert_allclose(own_v.sel(measure="max_prev").values, [0.85, 0.9, 0.95])
    np.testing.assert_allclose(own_v.sel(measure="max_self").values, [0.05, 0.05, 0.05])
    np.testing.assert_array_equal(ds.positional.sel(model="m", attention="decoder_self", layer=1).values, expected)
    assert not ds.positional.sel(attention="encoder_decoder").any()


def test_head_map_distance_is_the_square_root_of_the_mean_js_divergence(monkeypatch):
    """Two models with different special tokens and piece splits, word-level maps among content
    words (to a word: sum over its pieces; from a word: mean; rows renormalised), against
    scipy's Jensen-Shannon distance (whose square is the divergence) averaged over the queries."""
    from scipy.spatial.distance import jensenshannon

    import evolution.store
    from evolution.analyses.heads.head_map import head_map_task

    rng = np.random.default_rng(7)
    words = [4, 3, 5]  # words per sentence
    splits = {
        "a": [[0, 1, 1, 2, 3], [0, 0, 1, 2], [0, 1, 2, 3, 4, 4]],  # word id of each piece
        "b": [[0, 1, 2, 3], [0, 1, 1, 2, 2], [0, 1, 1, 2, 3, 4]],
    }
    layout = {"a": (1, 1, 1, 2), "b": (0, 1, 2, 1)}  # prefix, suffix, layers, heads
    stores, maps = {}, {}
    for m, wids in splits.items():
        pre, suf, L, H = layout[m]
        t_max = max(len(w) for w in wids) + pre + suf
        att = np.zeros((len(wids), L, H, t_max, t_max))
        for s, w in enumerate(wids):
            t = len(w) + pre + suf
            att[s, :, :, :t, :t] = rng.dirichlet(np.ones(t) * 0.7, size=(L, H, t))
        maps[m] = att
        stores[m] = (
            xr.Dataset(
                coords={
                    "sentence": ("token", np.repeat(np.arange(3), [len(w) for w in wids])),
                    "word_id": ("token", np.concatenate(wids)),
                },
                attrs={"prefix_ids": [9] * pre, "suffix_ids": [8] * suf},
            ),
            xr.Dataset(
                {"length": ("sentence", [len(w) + pre + suf for w in wids])},
                coords={"sentence": [0, 1, 2], "layer": np.arange(L), "head": np.arange(H)},
            ),
        )
    monkeypatch.setattr(evolution.store, "open_representations", lambda store, m: stores[m][0])
    monkeypatch.setattr(evolution.store, "open_attention", lambda store, m: stores[m][1])
    monkeypatch.setattr(evolution.store, "open_attention_array", lambda store, m: maps[m])
    out = head_map_task(store="stub", models=["a", "b"], seed=0)

    def word_rows(m, s, layer, h):  # (n, n) by plain loops
        pre, suf = layout[m][:2]
        w = splits[m][s]
        a = maps[m][s, layer, h]
        n = words[s]
        rows = np.zeros((n, n))
        for i in range(n):
            pieces_i = [pre + p for p, wid in enumerate(w) if wid == i]
            for j in range(n):
                pieces_j = [pre + p for p, wid in enumerate(w) if wid == j]
                rows[i, j] = np.mean([sum(a[q, k] for k in pieces_j) for q in pieces_i])
        return rows / rows.sum(1, keepdims=True)

    units = [(m, layer, h) for m in ("a", "b") for layer in range(layout[m][2]) for h in range(layout[m][3])]
    assert [(u[0], u[1] - 1, u[2]) for u in out["units"]] == units
    expect = np.zeros((len(units), len(units)))
    for x, ux in enumerate(units):
        for y, uy in enumerate(units):
            js = [
                jensenshannon(p, q) ** 2
                for s in range(3)
                for p, q in zip(word_rows(ux[0], s, *ux[1:]), word_rows(uy[0], s, *uy[1:]), strict=True)
            ]
            expect[x, y] = np.sqrt(np.mean(js))
    assert out["queries"] == sum(words)
    np.testing.assert_allclose(out["distance"], expect, atol=1e-6)
    assert 0.1 < expect[~np.eye(len(units), dtype=bool)].min()  # a distance and its square differ here
