"""What comes through the door of ``ev.from_transformer_lens`` / ``ev.from_nnsight`` /
``ev.from_activations`` that would give wrong numbers without a word: padding read as text,
special tokens read as text, layer labels shifted by one, a cache that stops short of its final
norm, bfloat16 caches, token strings where ids belong. Plain arrays and dict caches (a cache is
read by its hook names), a made-up tokenizer: no model runs, so each case's answer is known."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import evolution.api as ev
from evolution.activations import ActivationsError

PAD, BOS = 0, 1


class Tokenizer:
    """The parts of a Hugging Face tokenizer the door reads: pad and special ids, id -> piece."""

    pad_token_id = PAD
    all_special_ids = [PAD, BOS]

    def convert_ids_to_tokens(self, ids):
        return ["<pad>" if i == PAD else "<s>" if i == BOS else f"w{i}" for i in ids]


def _batch(lengths, *, left=False, bos=False, seed=0):
    """A padded batch of random word ids (2..49; with ``bos`` the BOS id first), its mask, and
    (L + 1 = 3) per-layer (batch, pos, d = 4) states."""
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.full((len(lengths), width), PAD, dtype=np.int64)
    mask = np.zeros_like(ids)
    for s, n in enumerate(lengths):
        row = rng.permutation(np.arange(2, 50))[:n]
        if bos:
            row[0] = BOS
        cols = slice(width - n, width) if left else slice(0, n)
        ids[s, cols], mask[s, cols] = row, 1
    layers = [rng.normal(size=(len(lengths), width, 4)).astype(np.float32) for _ in range(3)]
    return ids, mask, layers


def _cache(layers, *, blocks=None):
    """A TransformerLens-like cache (hook name -> (batch, pos, d)) of len(layers) - 1 blocks."""
    cache = {"blocks.0.hook_resid_pre": layers[0]}
    for b, x in enumerate(layers[1:]):
        cache[f"blocks.{b}.hook_resid_post"] = x
    cache["ln_final.hook_out"] = layers[-1] * 2.0
    for b in range(len(layers) - 1, blocks or 0):  # hooks of blocks whose output the cache did not keep
        cache[f"blocks.{b}.attn.hook_pattern"] = np.zeros(1)
    return cache


@pytest.mark.parametrize("route", ["transformer_lens", "nnsight"])
@pytest.mark.parametrize("tokenizer", [True, False], ids=["pad id known", "pad id unknown"])
def test_a_right_padded_batch_without_lengths_is_refused(route, tokenizer):
    ids, _, layers = _batch([9, 5, 7])
    kw = {"tokenizer": Tokenizer()} if tokenizer else {"token_strs": [[f"w{i}" for i in row] for row in ids]}
    with pytest.raises(ValueError, match=r"sentence 1 of the batch ends with 4 copies of id 0.*right-padded.*lengths="):
        if route == "transformer_lens":
            ev.from_transformer_lens(_cache(layers), ids, attention=False, **kw)
        else:
            ev.from_nnsight(layers, ids, **kw)


def test_padding_is_found_before_the_attention_rows_are_blamed():
    ids, mask, layers = _batch([6, 3])
    maps = []
    for _ in range(2):  # softmax over the sentence's own keys: pad keys get 0, pad queries a uniform row
        a = np.where(mask[:, None, None, :] == 1, 1.0, 0.0) * np.ones((2, 2, 6, 6))
        maps.append((a / a.sum(-1, keepdims=True)).astype(np.float32))
    with pytest.raises(ValueError, match="right-padded"):
        ev.from_nnsight(layers, ids, attentions=maps, tokenizer=Tokenizer())
    reps = ev.from_nnsight(layers, ids, attentions=maps, tokenizer=Tokenizer(), mask=mask)
    assert reps["nnsight"]["token_id"].values.tolist() == ids[0].tolist() + ids[1, :3].tolist()


def test_a_left_padded_batch_with_lengths_is_refused_and_with_its_mask_taken():
    ids, mask, layers = _batch([4, 7, 6], left=True)
    with pytest.raises(ValueError, match=r"begins with 3 copies.*left-padded and lengths=.*pass mask="):
        ev.from_transformer_lens(_cache(layers), ids, lengths=[4, 7, 6], attention=False, tokenizer=Tokenizer())
    reps = ev.from_transformer_lens(_cache(layers), ids, mask=mask, attention=False, tokenizer=Tokenizer())
    ds = reps["transformer_lens"]
    assert ds["token_id"].values.tolist() == [int(i) for row in ids for i in row if i != PAD]
    assert np.array_equal(ds["hidden"].values[0, :4], layers[0][0, 3:])
    assert np.array_equal(ds["hidden"].values[2, 4:11], 2.0 * layers[2][1])  # the final norm's output on top


def test_lengths_that_leave_padding_are_refused():
    ids, _, layers = _batch([5, 3])
    with pytest.raises(ValueError, match="sentence 1 of the batch ends with 2 copies.*lengths= given leaves padding"):
        ev.from_nnsight(layers, ids, lengths=[5, 5], tokenizer=Tokenizer())


def test_text_that_repeats_a_token_at_its_end_is_not_padding():
    # "w7 w7" closes sentence 0 but w7 also occurs inside sentence 1: text, not padding; and a
    # single EOS that is also the pad id (GPT-2) at the end of every sentence is an added token
    ids = np.array([[5, 6, 7, 7], [7, 8, 9, 3]])
    layers = [np.ones((2, 4, 4), np.float32) * k for k in range(3)]
    reps = ev.from_nnsight(layers, ids, token_strs=[[f"w{i}" for i in r] for r in ids])
    assert reps["nnsight"].sizes["token"] == 8
    eos = np.array([[5, 6, 7, PAD], [8, 9, 3, PAD]])
    reps = ev.from_nnsight(layers, eos, tokenizer=Tokenizer(), added=(0, 1))
    assert reps["nnsight"]["token_id"].values.tolist() == [5, 6, 7, 8, 9, 3]


def test_an_unannounced_bos_is_a_warning_naming_added(caplog):
    ids, mask, layers = _batch([5, 5, 5], bos=True)
    with caplog.at_level(logging.WARNING, logger="evolution.activations"):
        ev.from_nnsight(layers, ids, tokenizer=Tokenizer())
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "opens with '<s>' (id 1)" in record.getMessage() and "added=(1, 0)" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evolution.activations"):
        reps = ev.from_nnsight(layers, ids, tokenizer=Tokenizer(), added=(1, 0))
        # the same first word in every sentence is text: no warning
        same = ids.copy()
        same[:, 0] = 7
        ev.from_nnsight(layers, same, token_strs=[[f"w{i}" for i in r] for r in same])
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert reps["nnsight"].sizes["token"] == 12
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evolution.activations"):  # no tokenizer: the piece reads special
        ev.from_nnsight(layers, ids, token_strs=[["[CLS]"] + [f"w{i}" for i in r[1:]] for r in ids])
    assert any("added=(1, 0)" in r.getMessage() for r in caplog.records)


def test_the_blocks_outputs_alone_are_refused_as_missing_embeddings():
    ids, _, layers = _batch([4, 4])

    class Config:
        num_hidden_layers = 3

    class LanguageModel:  # nnsight's wrapper exposes the model's config
        config = Config()

    blocks = layers + [layers[0]]  # 4 entries: what saving blocks 0..3 gives for a 4-block model
    for config in (Config(), LanguageModel(), {"n_layer": 4}):
        n = 4 if isinstance(config, dict) else 3
        got = blocks[:n]
        if isinstance(config, dict):
            config = type("C", (), config)()
        with pytest.raises(ValueError, match=f"holds {n} layers and the model has {n} blocks: the embeddings are"):
            ev.from_nnsight(got, ids, tokenizer=Tokenizer(), config=config)
    ok = ev.from_nnsight(blocks, ids, tokenizer=Tokenizer(), config=type("C", (), {"n_layer": 3})())
    assert ok["nnsight"].sizes["layer"] == 4
    maps = [np.full((2, 1, 4, 4), 0.25, np.float32)] * 3  # as many maps as states: no room for the embeddings
    with pytest.raises(ValueError, match="holds 3 layers and the model has 3 blocks: the embeddings are missing"):
        ev.from_nnsight(layers, ids, attentions=maps, tokenizer=Tokenizer())
    with pytest.raises(ValueError, match="the embeddings are missing"):
        ev.from_activations(
            [np.stack([x[s] for x in layers]) for s in range(2)],
            token_ids=ids,
            tokenizer=Tokenizer(),
            config=type("C", (), {"num_hidden_layers": 3})(),
        )


def test_a_cache_that_stops_short_of_its_final_norm_is_refused():
    ids, _, layers = _batch([4, 4])
    with pytest.raises(KeyError, match=r"blocks 0\.\.1 but the model has 4 blocks.*final_norm=False"):
        ev.from_transformer_lens(_cache(layers, blocks=4), ids, attention=False, tokenizer=Tokenizer())

    class Cache(dict):  # a TransformerLens ActivationCache holds its model, whose cfg counts the blocks
        model = type("Model", (), {"cfg": type("Cfg", (), {"n_layers": 5})()})()

    with pytest.raises(KeyError, match="the model has 5 blocks"):
        ev.from_transformer_lens(Cache(_cache(layers)), ids, attention=False, tokenizer=Tokenizer())
    kept = ev.from_transformer_lens(
        Cache(_cache(layers)), ids, attention=False, tokenizer=Tokenizer(), final_norm=False
    )
    assert np.array_equal(kept["transformer_lens"]["hidden"].values[2, :4], layers[2][0])  # the residual stream


def test_a_bfloat16_cache_is_read_as_float32():
    torch = pytest.importorskip("torch")
    ids, _, layers = _batch([4, 4])
    bf = {k: torch.tensor(v).to(torch.bfloat16) if v.ndim == 3 else v for k, v in _cache(layers).items()}
    reps = ev.from_transformer_lens(bf, torch.tensor(ids), attention=False, tokenizer=Tokenizer())
    want = torch.tensor(layers[1]).to(torch.bfloat16).float().numpy()
    assert np.array_equal(reps["transformer_lens"]["hidden"].values[1, :4], want[0])


def test_token_strings_where_ids_belong_are_named():
    _, _, layers = _batch([3, 3])
    with pytest.raises(ValueError, match="tokens holds strings: pass the token ids"):
        ev.from_nnsight(layers, [["a", "b", "c"], ["d", "e", "f"]], token_strs=[list("abc"), list("def")])
    with pytest.raises(ValueError, match="tokens holds strings"):
        ev.from_nnsight(layers, "a b c", token_strs=[list("abc")])
    with pytest.raises(ActivationsError, match=r"token_ids\[0\] holds strings"):
        ev.from_activations([np.zeros((3, 3, 4))], token_ids=[["a", "b", "c"]], token_strs=[list("abc")])


def test_an_attention_row_short_of_one_names_the_padding_and_one_over_the_scores():
    states = [np.zeros((2, 3, 4), np.float32)]
    ids, strs = [[5, 6, 7]], [["a", "b", "c"]]
    short = np.full((1, 1, 3, 3), 0.25, np.float32)  # a quarter went to a key that was cut off
    with pytest.raises(ActivationsError, match="sum to less than 1.*lengths= or mask="):
        ev.from_activations(states, token_ids=ids, token_strs=strs, attention=[short])
    with pytest.raises(ActivationsError, match="not the scores"):
        ev.from_activations(states, token_ids=ids, token_strs=strs, attention=[short * 5])


def test_asymmetric_added_tokens_and_the_offsets_they_give():
    rng = np.random.default_rng(3)
    ids = [[1, 2, 10, 11, 12, 3], [1, 2, 13, 14, 3]]
    strs = [["<s>", "<x>", "a", "b", "c", "</s>"], ["<s>", "<x>", "d", "e", "</s>"]]
    states = [rng.normal(size=(3, len(x), 4)) for x in ids]
    ds = ev.from_activations(states, token_ids=ids, token_strs=strs, added=(2, 1))["activations"]
    assert ds.attrs["content_offset"] == 2
    assert list(ds.attrs["prefix_ids"]) == [1, 2] and list(ds.attrs["suffix_ids"]) == [3]
    assert list(ds.attrs["prefix_pieces"]) == ["<s>", "<x>"] and list(ds.attrs["suffix_pieces"]) == ["</s>"]
    assert ds["token_id"].values.tolist() == [10, 11, 12, 13, 14]
    assert np.allclose(ds["hidden"].values[:, 3:], states[1][:, 2:4])


def test_the_heads_of_a_store_with_asymmetric_added_tokens_split_its_prefix_and_suffix():
    """Two added tokens before the text and one after (added=(2, 1)): the stored model reads its
    offset from the prefix (2), not the suffix (1). Every query gives 0.3 and 0.2 to the two prefix
    keys, 0.1 to the suffix key and 0.4 evenly to the text, so by hand the share to the prefix
    (to_bos) is 0.5 and to the suffix (to_eos) 0.1 in every head; an offset of 1 would give 0.3."""
    rng = np.random.default_rng(4)
    ids = [[1, 2, 10, 11, 12, 13, 3], [1, 2, 14, 15, 16, 3]]
    strs = [["<s>", "<x>", "a", "b", "c", "d", "</s>"], ["<s>", "<x>", "e", "f", "g", "</s>"]]
    states = [rng.normal(size=(3, len(x), 4)).astype(np.float32) for x in ids]
    maps = []
    for x in ids:
        t = len(x)
        row = np.concatenate([[0.3, 0.2], np.full(t - 3, 0.4 / (t - 3)), [0.1]])
        maps.append(np.broadcast_to(row, (2, 2, t, t)).astype(np.float32).copy())
    reps = ev.from_activations(states, token_ids=ids, token_strs=strs, attention=maps, added=(2, 1))
    stored = reps["activations"]
    assert stored["hidden"].values.shape[1] == 4 + 3
    np.testing.assert_array_equal(stored["hidden"].values[:, 4:], states[1][:, 2:5])
    heads = ev.heads(reps)["value"]
    np.testing.assert_allclose(heads.sel(measure="to_bos").values, 0.5, atol=1e-6)
    np.testing.assert_allclose(heads.sel(measure="to_eos").values, 0.1, atol=1e-6)


def test_a_sentence_of_added_tokens_only_is_refused():
    ids = [[1, 5, 6, 3], [1, 3]]
    strs = [["<s>", "a", "b", "</s>"], ["<s>", "</s>"]]
    states = [np.zeros((2, len(x), 4)) for x in ids]
    with pytest.raises(ActivationsError, match=r"sentence 1: 2 tokens, of which added=\(1, 1\) are not text"):
        ev.from_activations(states, token_ids=ids, token_strs=strs, added=(1, 1))
