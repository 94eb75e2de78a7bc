"""Attention-head statistics: word-level maps by hand, per-head sums on maps with known
answers, scipy's entropy as a reference, and the heads analysis end to end."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from evolution.metrics.heads import COUNTS, MEASURES, head_sums, is_punctuation, key_shares, word_attention


def test_word_attention_by_hand():
    # positions: [CLS] play ##ing [SEP] -> units 0, 1, 1, 2
    alpha = np.array([[0.1, 0.2, 0.3, 0.4],
                      [0.5, 0.1, 0.2, 0.2],
                      [0.0, 0.6, 0.2, 0.2],
                      [0.25, 0.25, 0.25, 0.25]])
    units = [0, 1, 1, 2]
    mean = word_attention(alpha, units)
    # to the word: sum over its pieces (columns 1 and 2); from the word: mean of rows 1 and 2
    expected = np.array([[0.1, 0.5, 0.4],
                         [(0.5 + 0.0) / 2, (0.3 + 0.8) / 2, (0.2 + 0.2) / 2],
                         [0.25, 0.5, 0.25]])
    np.testing.assert_allclose(mean, expected)
    first = word_attention(alpha, units, rule="first")
    np.testing.assert_allclose(first[1], [0.5, 0.3, 0.2])  # the first piece's row only
    np.testing.assert_allclose(mean.sum(-1), 1.0)
    # leading axes (layer, head) pass through
    stacked = word_attention(np.stack([alpha, alpha[::-1, ::-1]])[None], units)
    assert stacked.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(stacked[0, 0], mean)
    with pytest.raises(ValueError, match="rule"):
        word_attention(alpha, units, rule="last")


def _measure(sums, counts, name):
    return sums[..., MEASURES.index(name)] / counts[COUNTS[name]]


def test_head_sums_on_maps_with_known_answers():
    T = 6
    idx = np.arange(T)
    uniform = np.full((T, T), 1 / T)
    prev = np.zeros((T, T))
    prev[idx[1:], idx[1:] - 1] = 1
    prev[0, 0] = 1  # the first token has no previous token: it attends to itself
    alpha = np.stack([uniform, prev])[None]  # (L=1, H=2, T, T)
    bos, eos = idx == 0, idx == T - 1
    punct = idx == 3
    sums, counts, _ = head_sums(alpha, bos=bos, eos=eos, punct=punct, causal=False)
    assert sums.shape == (1, 2, len(MEASURES))
    ent = _measure(sums, counts, "entropy")[0]
    np.testing.assert_allclose(ent, [np.log(T), 0.0])
    np.testing.assert_allclose(_measure(sums, counts, "uniform_entropy")[0], np.log(T))
    np.testing.assert_allclose(_measure(sums, counts, "to_bos")[0], [1 / T, 2 / T])  # queries 0 and 1 -> key 0
    np.testing.assert_allclose(_measure(sums, counts, "to_eos")[0], [1 / T, 0.0])
    np.testing.assert_allclose(_measure(sums, counts, "to_punct")[0], [1 / T, 1 / T])  # query 4 -> key 3
    np.testing.assert_allclose(_measure(sums, counts, "to_prev")[0], [1 / T, 1.0])
    np.testing.assert_allclose(_measure(sums, counts, "to_next")[0], [1 / T, 0.0])
    np.testing.assert_allclose(_measure(sums, counts, "to_self")[0], [1 / T, 1 / T])
    np.testing.assert_allclose(_measure(sums, counts, "confidence")[0], [1 / T, 1.0])  # EOS query excluded
    # where the maxima go: the previous-token head has T - 1 of T maxima at offset -1
    np.testing.assert_allclose(_measure(sums, counts, "max_prev")[0, 1], (T - 1) / T)
    np.testing.assert_allclose(_measure(sums, counts, "max_self")[0, 1], 1 / T)


def test_entropy_matches_scipy_and_causal_baseline():
    rng = np.random.default_rng(0)
    T = 7
    causal = np.tril(rng.dirichlet(np.ones(T), size=(2, 3, T)))
    causal /= causal.sum(-1, keepdims=True)  # each query over keys <= itself
    mask = np.zeros(T, bool)
    sums, counts, _ = head_sums(causal, bos=mask, eos=mask, punct=mask, causal=True)
    ref = np.array([[np.mean([scipy_entropy(causal[l, h, i, :i + 1]) for i in range(T)]) for h in range(3)]
                    for l in range(2)])
    np.testing.assert_allclose(_measure(sums, counts, "entropy"), ref, rtol=1e-12)
    np.testing.assert_allclose(_measure(sums, counts, "uniform_entropy"), np.mean(np.log(np.arange(1, T + 1))))


def test_norm_shares_are_per_query_shares():
    norm = np.array([[3.0, 1.0, 0.0], [1.0, 1.0, 2.0], [0.0, 0.0, 5.0]])
    bos = np.array([True, False, False])
    out = key_shares(norm, [bos, ~bos])
    np.testing.assert_allclose(out, [0.75 + 0.25 + 0.0, 0.25 + 0.75 + 1.0])


def test_punctuation_pieces():
    assert is_punctuation(".") and is_punctuation("▁,") and is_punctuation("##!") and is_punctuation("Ġ?")
    assert not is_punctuation("▁a") and not is_punctuation("") and not is_punctuation("▁") and not is_punctuation("a.")


@pytest.mark.slow
def test_heads_analysis_end_to_end(tmp_path, corpus_file, model_specs):
    """The heads group of a run equals a direct computation from the stored maps (scipy entropy,
    numpy shares), for a model with norms (translation) and one without (gpt2)."""
    from evolution.metrics.results import open_metrics
    from evolution.store import open_attention
    from pipelines.run import run

    from conftest import write_config
    from test_metrics_stage import METRICS

    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, workdir=tmp_path / "w", extra=METRICS,
                       models=[model_specs["translation"], model_specs["gpt2"]])
    run(cfg, progress=False)
    heads = open_metrics(tmp_path / "w" / "metrics.zarr", "heads").load()
    assert heads.value.dims == ("model", "layer", "head", "measure") and list(heads.layer.values) == [1, 2]
    store = str(tmp_path / "w" / "reps.zarr")
    for model in ("translation", "gpt2"):
        att = open_attention(store, model).load()
        rows = [att.attention.values[k, layer, head, :int(att.length[k]), :int(att.length[k])]
                for k in range(att.sizes["sentence"]) for layer, head in [(1, 0)]]
        ent = np.mean(np.concatenate([[scipy_entropy(r) for r in m] for m in rows]))
        got = heads.value.sel(model=model, layer=2, head=0, measure="entropy").item()
        assert got == pytest.approx(ent, rel=1e-6)
    # the MT encoder's input ends in </s>: its share of attention is the mean over queries of the last column
    att = open_attention(store, "translation").load()
    eos = np.mean(np.concatenate([att.attention.values[k, 0, 1, :int(att.length[k]), int(att.length[k]) - 1]
                                  for k in range(att.sizes["sentence"])]))
    assert heads.alpha_share.sel(model="translation", layer=1, head=1, key_type="eos").item() == pytest.approx(eos)
    assert np.isfinite(heads.norm_share.sel(model="translation")).all()
    assert np.isnan(heads.norm_share.sel(model="gpt2")).all()  # gpt2: no norms, maps only
    assert heads.positional.dtype == bool
    assert (tmp_path / "w" / "report" / "heads_entropy.png").is_file()
    assert (tmp_path / "w" / "report" / "heads_special.png").is_file()
