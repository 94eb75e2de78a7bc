"""``ev.from_activations`` (activations computed elsewhere) and ``ev.compare``, without
TransformerLens or nnsight: the states of a plain Hugging Face loop stored through the door
must equal the project's own extraction; bad input fails before anything is written, naming
the sentence, the layer and the fix; ``compare`` against the textbook definitions."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from conftest import SENTENCES

import evolution.api as ev
from evolution.activations import ActivationsError, check_activations


@pytest.fixture(scope="module")
def plain(hf_lm_specs):
    """States and attention of ``gpt2_lm`` on :data:`SENTENCES` from a plain transformers loop,
    one sentence at a time: (states, ids, strs, attention, path)."""
    import torch
    import transformers as tf

    path = hf_lm_specs["gpt2_lm"]["path"]
    model = tf.GPT2Model.from_pretrained(path, attn_implementation="eager").eval()
    tok = tf.AutoTokenizer.from_pretrained(path)
    states, ids, strs, maps = [], [], [], []
    for s in SENTENCES:
        x = tok(s)["input_ids"]
        with torch.no_grad():
            out = model(torch.tensor([x]), output_hidden_states=True, output_attentions=True)
        states.append(torch.stack(out.hidden_states)[:, 0].numpy())
        maps.append(torch.stack(out.attentions)[:, 0].numpy())
        ids.append(x)
        strs.append(tok.convert_ids_to_tokens(x))
    return states, ids, strs, maps, path


def test_plain_states_through_the_door_equal_our_extraction(plain):
    states, ids, strs, maps, path = plain
    own = ev.represent(ev.load(path, name="own"), SENTENCES, attention=True, norms=False)
    got = ev.from_activations(states, token_ids=ids, token_strs=strs, attention=maps, objective="lm", name="acts")
    a, b = own["own"], got["acts"]
    for c in ("sentence", "position", "token_id", "token_str", "word_id", "freq_rank"):
        assert np.array_equal(a[c].values, b[c].values), c
    assert np.abs(a["hidden"].values - b["hidden"].values).max() < 1e-5
    assert np.allclose(
        own.attention("own")["attention"].values, got.attention("acts")["attention"].values, atol=1e-6, equal_nan=True
    )
    ref, mi = (
        ev.mi(own, k=4, bootstrap=0, tokens={"top": 10, "min_count": 3}),
        ev.mi(got, k=4, bootstrap=0, tokens={"top": 10, "min_count": 3}),
    )
    assert np.allclose(mi["mi"].values, ref["mi"].values, atol=1e-9)


def test_a_list_of_layers_and_a_tokenizer_do_as_well(plain):
    import transformers as tf

    states, ids, strs, _, path = plain
    tok = tf.AutoTokenizer.from_pretrained(path)
    by_layer = [list(x) for x in states]  # per sentence, a list of (tokens, d) arrays
    a = ev.from_activations(states, token_ids=ids, token_strs=strs)
    b = ev.from_activations(by_layer, token_ids=ids, tokenizer=tok)
    assert np.array_equal(a["activations"]["hidden"].values, b["activations"]["hidden"].values)
    assert list(a["activations"]["token_str"].values) == list(b["activations"]["token_str"].values)


def test_added_tokens_stay_in_the_attention_and_leave_the_states(plain):
    states, ids, strs, maps, _ = plain
    bos = 0  # a made-up BOS in front of every sentence
    st = [np.concatenate([np.full((x.shape[0], 1, x.shape[2]), 7.0, np.float32), x], axis=1) for x in states]
    att = []
    for a in maps:  # the BOS key takes half of every query's weight; its own row attends to itself
        t = a.shape[-1] + 1
        m = np.zeros(a.shape[:2] + (t, t), np.float32)
        m[..., 1:, 1:] = a / 2
        m[..., 1:, 0] = 0.5
        m[..., 0, 0] = 1.0
        att.append(m)
    reps = ev.from_activations(
        st, token_ids=[[bos, *x] for x in ids], token_strs=[["<s>", *x] for x in strs], attention=att, added=(1, 0)
    )
    ds = reps["activations"]
    assert np.array_equal(ds["hidden"].values, np.concatenate(states, axis=1))  # the BOS column left out
    assert ds["position"].values[0] == 0 and ds["token_id"].values[0] == ids[0][0]
    stored = reps.attention("activations")
    assert stored.attrs["special_ids"] == [bos]
    assert int(stored["length"].values[0]) == len(ids[0]) + 1
    assert stored["input_id"].values[0, 0] == bos
    heads = ev.heads(reps)  # the head statistics read the stored maps: half of the weight on the BOS
    n, s = sum(len(x) for x in ids), len(ids)  # content queries give the BOS 0.5, the BOS query itself 1
    assert np.allclose(heads["value"].sel(measure="to_bos").values, (0.5 * n + s) / (n + s), atol=1e-6)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("flat", "states[1] has shape"),
        ("layers", "states[2] has 2 layers"),
        ("nan", "states[1] layer 2: 3 NaN or inf"),
        ("tokens", "sentence 0: states have"),
        ("scores", "attention[0] layer 1: rows are not distributions"),
        ("added", "sentence 1: the added tokens"),
        ("ints", "dtype int64"),
        ("heads", "attention[1] has shape"),
    ],
)
def test_bad_input_is_refused_at_the_door_and_nothing_is_written(plain, tmp_path, case, expected):
    states, ids, strs, maps, _ = plain
    states = [x.copy() for x in states[:3]]
    ids, strs, maps = [list(x) for x in ids[:3]], [list(x) for x in strs[:3]], [a.copy() for a in maps[:3]]
    if case == "flat":
        states[1] = states[1][0]
    elif case == "layers":
        states[2] = states[2][:2]
    elif case == "nan":
        states[1][2, 0, :3] = np.nan
    elif case == "tokens":
        ids[0] = ids[0][:-1]
    elif case == "scores":
        maps[0] = maps[0] * 3.0
    elif case == "added":
        ids[1][0] = ids[0][0] + 1
    elif case == "ints":
        states[0] = states[0].astype(np.int64)
    elif case == "heads":
        maps[1] = maps[1][:, :, :-1]
    store = tmp_path / "acts.zarr"
    with pytest.raises(ActivationsError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        ev.from_activations(
            states,
            token_ids=ids,
            token_strs=strs,
            attention=maps,
            store=store,
            added=(1, 0) if case == "added" else (0, 0),
        )
    assert not store.exists()


def test_a_stored_result_reopens_like_any_store(plain, tmp_path):
    states, ids, strs, maps, _ = plain
    path = tmp_path / "acts.zarr"
    reps = ev.from_activations(states, token_ids=ids, token_strs=strs, attention=maps, store=path, name="run")
    again = ev.open_store(path)
    assert list(again) == ["run"]
    assert np.array_equal(again["run"]["hidden"].values, reps["run"]["hidden"].values)
    assert xr.open_zarr(path, group="run", consolidated=False)["hidden"].dims == ("layer", "token", "feature")
    nb = ev.neighbors(again)
    assert np.isfinite(nb["value"].sel(measure="same_token").values).all()
    with pytest.raises(Exception, match="already holds a model 'run'"):
        ev.from_activations(states, token_ids=ids, token_strs=strs, store=path, name="run")


def test_a_store_at_a_relative_path_reopens_with_its_maps(plain, tmp_path, monkeypatch):
    """The model a store from activations records finds the store again from another directory: the
    head statistics reopen it through the stored adapter."""
    states, ids, strs, maps, _ = plain
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    ev.from_activations(states, token_ids=ids, token_strs=strs, attention=maps, store="runs/acts.zarr", name="r")
    monkeypatch.chdir(tmp_path / "runs")
    again = ev.open_store("acts.zarr")
    assert ev.heads(again)["value"].sizes["layer"] == 2


def test_a_patched_run_gets_its_own_key(plain):
    states, ids, strs, _, _ = plain
    a = ev.from_activations(states, token_ids=ids, token_strs=strs)
    patched = [x.copy() for x in states]
    patched[0][2, 1, 0] += 1.0
    b = ev.from_activations(patched, token_ids=ids, token_strs=strs)
    assert a.extract_keys["activations"] != b.extract_keys["activations"]
    assert ev.from_activations(states, token_ids=ids, token_strs=strs).extract_keys == a.extract_keys


# ---- ev.compare against the definitions -------------------------------------------------------


def _synthetic(seed: int = 0, n_sentences: int = 60, length: int = 12, d: int = 8, layers: int = 4):
    """Per sentence (layers, length, d) states with a token signal: a token's state is its type's
    centre plus noise; 20 types."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(layers, 20, d)) * 3
    ids = [rng.integers(0, 20, length) for _ in range(n_sentences)]
    states = [centres[:, x] + rng.normal(size=(layers, length, d)) for x in ids]
    return states, ids, [[f"t{i}" for i in x] for x in ids]


def _plain_cka(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _plain_same_token(x: np.ndarray, ids: np.ndarray, k: int) -> float:
    from sklearn.neighbors import NearestNeighbors

    found = NearestNeighbors(n_neighbors=k + 1).fit(x).kneighbors(x, return_distance=False)[:, 1:]
    return float(np.mean([(ids[f] == ids[i]).mean() for i, f in enumerate(found)]))


def test_compare_against_the_definitions():
    states, ids, strs = _synthetic()
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    changed = []
    for x in states:
        y = x.copy()
        y[1] = x[1] + rng.normal(size=x[1].shape) * 1e-4 * x[1].std()  # layer 1: noise far below the signal
        y[2] = x[2] @ q  # layer 2 rotated: CKA and the neighbours cannot see it
        y[3] = x[3] + rng.normal(size=x[3].shape) * 4  # layer 3 drowned in noise
        changed.append(y)
    a = ev.from_activations(states, token_ids=ids, token_strs=strs)
    b = ev.from_activations(changed, token_ids=ids, token_strs=strs)
    out = ev.compare(a, b, k=10, neighbors=5, bootstrap=40, tokens={"top": 20, "min_count": 5})
    xa, xb = a["activations"]["hidden"].values, b["activations"]["hidden"].values
    tid = a["activations"]["token_id"].values
    for m in ("pwcca_distance", "cka_distance", "mi_change", "same_token_change"):
        assert out[m].sel(layer=0).item() == 0.0  # identical: 0 by definition
    for m in ("pwcca_distance", "cka_distance"):  # noise at 1e-4: a distance near 0, not the identical route's 0
        assert 0.0 < out[m].sel(layer=1).item() < 1e-6
    for m in ("mi_change", "same_token_change"):  # and no change the interval can tell from none
        lo, hi = out[f"{m}_interval"].sel(layer=1).values
        assert lo <= 0.0 <= hi, m
    assert out["cka_distance"].sel(layer=2).item() == pytest.approx(0.0, abs=1e-9)
    assert out["same_token_change"].sel(layer=2).item() == pytest.approx(0.0, abs=1e-12)
    for layer in (1, 2, 3):
        want_cka = 1 - _plain_cka(xa[layer], xb[layer])
        assert out["cka_distance"].sel(layer=layer).item() == pytest.approx(want_cka, abs=1e-9)
        want = _plain_same_token(xb[layer], tid, 5) - _plain_same_token(xa[layer], tid, 5)
        assert out["same_token_change"].sel(layer=layer).item() == pytest.approx(want, abs=1e-9)
    assert out["same_token_change"].sel(layer=3).item() < -0.1  # noise hides the tokens
    assert out["mi_change_interval"].sel(layer=3, bound="high").item() < 0
    lo, hi = out["same_token_change_interval"].sel(layer=3).values
    assert lo < out["same_token_change"].sel(layer=3).item() < hi < 0
    # b against a is a against b with the sign of the changes turned
    back = ev.compare(b, a, k=10, neighbors=5, bootstrap=40, tokens={"top": 20, "min_count": 5})
    assert np.allclose(back["same_token_change"], -out["same_token_change"], atol=1e-12)
    assert np.allclose(back["mi_change"], -out["mi_change"], atol=1e-12)
    assert np.allclose(back["cka_distance"], out["cka_distance"], atol=1e-9)


def test_mis_interval_holds_the_restarts_spread():
    """The MI change's interval is the bootstrap's widened by the restarts' standard error, in
    quadrature: recomputed here from the parts."""
    from scipy.stats import norm

    from evolution.metrics.compare import compare_layer
    from evolution.metrics.mi import bootstrap_mi, centred_interval, kmeans_labels, mutual_information

    states, ids, _ = _synthetic(seed=3)
    x = np.concatenate(states, axis=1)
    rng = np.random.default_rng(2)
    xa, xb = x[1], x[1] + rng.normal(size=x[1].shape) * 0.5
    tid = np.concatenate(ids)
    sent = np.repeat(np.arange(len(ids)), [len(i) for i in ids])
    rows = np.ones(len(tid), bool)
    out = compare_layer(xa, xb, token_id=tid, sentence=sent, mi_rows=rows, k=10, restarts=4, bootstrap=30, seed=7)
    per = {}
    boot = {}
    for name, v in (("a", xa), ("b", xb)):
        cl = [kmeans_labels(v, k=10, seed=7 + r) for r in range(4)]
        per[name] = np.array([mutual_information(tid, c) for c in cl])
        boot[name] = bootstrap_mi(tid, cl, sent, replicates=30, seed=7)["mi"].mean(axis=1)
    est = per["b"].mean() - per["a"].mean()
    assert out["mi_change"] == pytest.approx(est, abs=1e-12)
    lo, hi = centred_interval(boot["b"] - boot["a"], est, 0.95)
    extra = norm.ppf(0.975) * np.sqrt((per["a"].var(ddof=1) + per["b"].var(ddof=1)) / 4)
    want = [est - np.hypot(est - lo, extra), est + np.hypot(hi - est, extra)]
    assert out["mi_change_interval"] == pytest.approx(want, abs=1e-12)
    assert want[1] - want[0] > hi - lo  # wider than the bootstrap's alone
    with pytest.raises(ValueError, match="at least 2 k-means restarts"):
        compare_layer(xa, xb, token_id=tid, sentence=sent, mi_rows=rows, k=10, restarts=1)


def test_compare_refuses_runs_on_other_tokens():
    states, ids, strs = _synthetic()
    a = ev.from_activations(states, token_ids=ids, token_strs=strs)
    other = [x.copy() for x in ids]
    other[3][5] = (other[3][5] + 1) % 20
    b = ev.from_activations(states, token_ids=other, token_strs=strs)
    with pytest.raises(ValueError, match="differ in token_id"):
        ev.compare(a, b)


def test_the_api_never_imports_transformer_lens_or_nnsight():
    """They are an extra: the API and ev.from_activations on plain arrays run without them."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, evolution.api as ev\n"
        "x = [np.random.default_rng(0).normal(size=(3, 5, 4)).astype('float32') for _ in range(3)]\n"
        "reps = ev.from_activations(x, token_ids=[[1, 2, 3, 4, 5]] * 3, token_strs=[list('abcde')] * 3)\n"
        "assert reps['activations'].sizes['token'] == 15\n"
        "print(sorted(m for m in ('transformer_lens', 'nnsight') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_views_and_tsne_take_stored_activations(plain):
    """The views read the stored maps through the stored-activations adapter (no queries and keys:
    no neuron view); t-SNE reads the states."""
    from evolution.report.views import views_data

    states, ids, strs, maps, _ = plain
    reps = ev.from_activations(states, token_ids=ids, token_strs=strs, attention=maps, objective="lm")
    data = views_data(reps.store, reps.specs, sentences=[2], top_k=3, neuron=True, word_rule="mean")
    item = data["models"][0]["sentences"][0]
    assert item["levels"]["subword"]["tokens"] == strs[2] and "neuron" not in item
    strongest = item["levels"]["subword"]["edges"]["alpha"][1][0]  # block 2, head 0: [query, key, weight]
    for q, k, w in strongest:
        assert maps[2][1, 0, q].argsort()[::-1][:3].tolist().count(k) == 1
        assert w == pytest.approx(maps[2][1, 0, q, k] / maps[2][1, 0, q].sum(), abs=1 / 510 + 1e-6)  # in 1/255
    assert "<html" in ev.views(reps).html[:200].lower()
    sel = [{"name": "the", "tokens": ["the"], "color": "position"}]
    out = ev.analyse(reps, {"tsne": {"perplexity": 5, "max_points": 40, "selections": sel}})
    xy = next(v for k, v in out.items() if k.startswith("tsne"))
    assert np.isfinite(xy[[n for n in xy.data_vars][0]].values).any()


# ---- what a reviewer's planted bugs showed untested (each case's truth: the input sliced by hand, a
# textbook formula, or the parts of an interval) ----------------------------------------------------------


def _toy(n=3, t=6, L=2, d=4, H=2, seed=0):
    """Per sentence (L+1, t, d) states, ids with a BOS 100 and an EOS 101 around the text, maps."""
    rng = np.random.default_rng(seed)
    states = [rng.normal(size=(L + 1, t, d)).astype(np.float32) for _ in range(n)]
    ids = [[100, *rng.integers(0, 50, t - 2).tolist(), 101] for _ in range(n)]
    strs = [["<s>", *[f"w{i}" for i in x[1:-1]], "</s>"] for x in ids]
    att = []
    for _ in range(n):
        a = rng.random(size=(L, H, t, t)).astype(np.float32)
        att.append(a / a.sum(-1, keepdims=True))
    return states, ids, strs, att


def test_one_bad_row_or_one_negative_weight_is_refused():
    states, ids, strs, att = _toy()
    bad = [a.copy() for a in att]
    bad[1][1, 0, 2] *= 1.5  # one row of one head sums to 1.5; every other row to 1
    with pytest.raises(ActivationsError, match=r"attention\[1\] layer 2: rows are not distributions"):
        check_activations(states, token_ids=ids, token_strs=strs, attention=bad)
    neg = [a.copy() for a in att]
    neg[0][0, 1, 3] = 0.0
    neg[0][0, 1, 3, :2] = [1.2, -0.2]  # sums to 1, but a weight < 0
    with pytest.raises(ActivationsError, match=r"attention\[0\] layer 1: rows are not distributions"):
        check_activations(states, token_ids=ids, token_strs=strs, attention=neg)


def test_inf_states_and_nan_attention_are_refused():
    states, ids, strs, att = _toy()
    st = [x.copy() for x in states]
    st[2][1, 3, 0] = np.inf
    with pytest.raises(ActivationsError, match=r"states\[2\] layer 1: 1 NaN or inf"):
        check_activations(st, token_ids=ids, token_strs=strs)
    at = [a.copy() for a in att]
    at[0][1, 0, 2, 2] = np.nan
    with pytest.raises(ActivationsError, match=r"attention\[0\] layer 2: NaN or inf"):
        check_activations(states, token_ids=ids, token_strs=strs, attention=at)


def test_the_key_tells_other_attention_and_other_pieces_apart():
    states, ids, strs, att = _toy()

    def key(strs=strs, att=att):
        return ev.from_activations(states, token_ids=ids, token_strs=strs, attention=att).extract_keys["activations"]

    base = key()
    assert key() == base
    att2 = [a.copy() for a in att]
    att2[0][0, 0, 1] = att2[0][0, 0, 1][::-1]  # still a distribution: a patched attention pattern
    assert key(att=att2) != base
    strs2 = [list(s) for s in strs]
    strs2[1][2] = "other"
    assert key(strs=strs2) != base


def test_a_bos_and_an_eos_round_trip(tmp_path):
    from evolution.stored_adapter import StoredAdapter

    states, ids, strs, att = _toy()
    path = tmp_path / "s.zarr"
    reps = ev.from_activations(
        states, token_ids=ids, token_strs=strs, attention=att, added=(1, 1), store=path, name="x"
    )
    ds = reps["x"]
    assert np.array_equal(ds["hidden"].values, np.concatenate([x[:, 1:-1] for x in states], axis=1))
    assert ds["token_id"].values.tolist() == [i for x in ids for i in x[1:-1]]
    assert list(ds["token_str"].values) == [p for s in strs for p in s[1:-1]]
    assert list(ds.attrs["prefix_ids"]) == [100] and list(ds.attrs["suffix_ids"]) == [101]
    assert list(ds.attrs["prefix_pieces"]) == ["<s>"] and list(ds.attrs["suffix_pieces"]) == ["</s>"]
    ad = StoredAdapter(str(path), group="x")
    hidden, maps = ad.forward([ids[1], ids[0]], attention=True)
    assert np.isnan(hidden[:, 0, 0]).all() and np.isnan(hidden[:, 0, -1]).all()  # added: not stored
    assert np.array_equal(hidden[:, 0, 1:-1], states[1][:, 1:-1])
    assert np.array_equal(hidden[:, 1, 1:-1], states[0][:, 1:-1])
    assert np.allclose(maps[:, 0], att[1]) and np.allclose(maps[:, 1], att[0])
    assert ad.pieces(ids[2]) == strs[2]
    bos = ev.from_activations(states, token_ids=ids, token_strs=strs, added=(1, 0))["activations"]
    assert list(bos.attrs["suffix_pieces"]) == []


def test_a_left_padded_batch_with_a_mask_and_tuple_outputs():
    rng = np.random.default_rng(0)
    layers = [rng.normal(size=(2, 5, 3)).astype(np.float32) for _ in range(3)]
    tokens = np.array([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    maps = []
    for _ in range(2):
        a = rng.random(size=(2, 2, 5, 5)).astype(np.float32)
        maps.append(a)
    for a in maps:  # each sentence's rows a distribution over its own keys
        a[0, :, :, :2] = 0.0
        a /= a.sum(-1, keepdims=True)
    strs = [["c", "d", "e"], list("fghij")]
    reps = ev.from_nnsight([(x, None) for x in layers], tokens, attentions=maps, mask=mask, token_strs=strs)
    ds = reps["nnsight"]
    assert ds["token_id"].values.tolist() == [5, 6, 7, 8, 9, 10, 11, 12]
    assert np.array_equal(ds["hidden"].values[:, :3], np.stack([x[0, 2:] for x in layers]))
    assert np.array_equal(ds["hidden"].values[:, 3:], np.stack([x[1] for x in layers]))
    stored = reps.attention("nnsight")["attention"].values
    assert np.allclose(stored[0, :, :, :3, :3], np.stack([a[0, :, 2:, 2:] for a in maps]))


def _plain_pwcca_distance(x, y):
    """Morcos et al. 2018: CCA of the centred views, each canonical correlation weighted by its
    direction's summed absolute projections onto x's own units."""
    x, y = x - x.mean(0), y - y.mean(0)
    qx, _ = np.linalg.qr(x)
    qy, _ = np.linalg.qr(y)
    u, rho, _ = np.linalg.svd(qx.T @ qy)
    alpha = np.abs((qx @ u).T @ x).sum(axis=1)
    return 1 - float((alpha * rho).sum() / alpha.sum())


def _plain_half_sample_interval(xa, xb, tid, sent, *, k, replicates, seed, level):
    """The same-token change's interval by its definition (docs/interop.md): half-sample r keeps
    the first S // 2 of ``default_rng([seed, r]).permutation(S)`` of the S sentences; on its rows
    each run's rate with the k nearest kept others (sklearn, brute force), b minus a; the changes'
    deviations from their mean scaled by sqrt(m / (S - m)) (m kept), their central ``level``
    percentile interval moved onto the whole data's change."""
    from sklearn.neighbors import NearestNeighbors

    def rate(x, t):
        found = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(x).kneighbors(x, return_distance=False)
        return np.mean([(t[f[1:]] == t[f[0]]).mean() for f in found])

    sentences = np.unique(sent)
    s = len(sentences)
    m = s // 2
    diff = []
    for r in range(replicates):
        kept = np.isin(sent, sentences[np.random.default_rng([seed, r]).permutation(s)[:m]])
        diff.append(rate(xb[kept], tid[kept]) - rate(xa[kept], tid[kept]))
    diff = np.array(diff)
    change = rate(xb, tid) - rate(xa, tid)
    spread = np.sqrt(m / (s - m)) * (diff - diff.mean())
    return change, np.percentile(spread, [50 * (1 - level), 50 * (1 + level)]) + change


def test_pwcca_weights_from_a_and_the_same_token_interval_from_half_samples():
    from evolution.metrics.compare import compare_layer

    rng = np.random.default_rng(4)
    tid = rng.integers(0, 20, 600)
    sent = np.sort(rng.integers(0, 51, 600)) * 3 + 7  # 51 sentences of unequal length, ids not 0..50
    assert len(np.unique(sent)) == 51  # odd: the scale sqrt(25 / 26) is not 1
    centres = rng.normal(size=(20, 8)) * 3
    xa = centres[tid] + rng.normal(size=(600, 8)) * np.linspace(0.2, 3, 8)
    xb = xa @ rng.normal(size=(8, 8)) + rng.normal(size=(600, 8)) * 2
    out = compare_layer(
        xa,
        xb,
        token_id=tid,
        sentence=sent,
        mi_rows=np.ones(600, bool),
        k=10,
        neighbors=5,
        restarts=2,
        bootstrap=30,
        level=0.9,
        seed=7,
    )
    want, other = _plain_pwcca_distance(xa, xb), _plain_pwcca_distance(xb, xa)
    assert abs(want - other) > 1e-3  # the data tell the weighting view apart
    assert out["pwcca_distance"] == pytest.approx(want, abs=1e-9)
    change, interval = _plain_half_sample_interval(xa, xb, tid, sent, k=5, replicates=30, seed=7, level=0.9)
    assert out["same_token_change"] == pytest.approx(change, abs=1e-12)
    assert out["same_token_change_interval"] == pytest.approx(list(interval), abs=1e-12)
    assert out["same_token_change"] < 0  # b hides the tokens: an asymmetric change, where a sign error shows
    for name, x in (("same_token_a", xa), ("same_token_b", xb)):
        assert out[name] == pytest.approx(_plain_same_token(x, tid, 5), abs=1e-12)


def test_compare_keys_negative_layers_and_sentence_boundaries():
    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 10, 12) for _ in range(20)]
    states = [rng.normal(size=(3, 12, 4)) + x[None, :, None] for x in ids]
    strs = [[f"t{i}" for i in x] for x in ids]
    a = ev.from_activations(states, token_ids=ids, token_strs=strs, name="a")
    b = ev.from_activations([x + rng.normal(size=x.shape) for x in states], token_ids=ids, token_strs=strs, name="b")
    out = ev.compare(a, b, layers=[-1], k=4, bootstrap=5, restarts=2, tokens={"top": 10, "min_count": 5})
    assert out.layer.values.tolist() == [2]
    assert out.attrs["a_key"] == a.extract_keys["a"] and out.attrs["b_key"] == b.extract_keys["b"]
    assert out.attrs["a_key"] != out.attrs["b_key"]
    # the same token ids in another sentence split: not the same tokens
    merged = [np.concatenate(states[:2], axis=1), *states[2:]]
    c = ev.from_activations(
        merged, token_ids=[np.concatenate(ids[:2]), *ids[2:]], token_strs=[strs[0] + strs[1], *strs[2:]], name="c"
    )
    with pytest.raises(ValueError, match="differ in sentence"):
        ev.compare(a, c, k=4, bootstrap=5, restarts=2)
