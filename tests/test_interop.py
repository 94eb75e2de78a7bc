"""Activations from TransformerLens and nnsight against the project's own extraction.

One small GPT-2 built from a config (random weights with non-zero biases and LayerNorm
weights, no hub; a word-level vocabulary of 150 Genesis verses) is run three ways on the same
token ids: through the project's Hugging Face adapter (``ev.represent``), through a
TransformerLens ``TransformerBridge`` wrapping the same module (``run_with_cache``, no weight
processing), and through nnsight's ``LanguageModel`` wrapping it (saved layer outputs). The
states must agree within 1e-5 and the statistics computed on them (MI with the token, the
same-token rate, PWCCA) within 1e-6; then one head is ablated with a TransformerLens hook and
``ev.compare`` must put every layer below it at distance 0 exactly and move the next.
"""

from __future__ import annotations

import numpy as np
import pytest

import evolution.api as ev

tl = pytest.importorskip("transformer_lens", reason="the interop extra: pip install -e '.[interop]'")
nnsight = pytest.importorskip("nnsight", reason="the interop extra: pip install -e '.[interop]'")

N_SENTENCES = 150
ABLATED_BLOCK, ABLATED_HEAD = 1, 0  # block index (0-based): store layer 2 is its output


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(directory, sentences, padded ids (batch, pos), lengths) of a 3-block GPT-2, d = 32, 4 heads."""
    import torch
    import transformers as tf

    from evolution.fixtures.random_init import make_hf_model, vocabulary_of

    sentences = [" ".join(s.split()[:40]) for s in ev.example_sentences(N_SENTENCES)]
    path = make_hf_model(
        tmp_path_factory.mktemp("interop") / "gpt2",
        arch="gpt2",
        words=vocabulary_of(sentences),
        layers=3,
        d_model=32,
        heads=4,
        max_positions=64,
        seed=5,
    )
    config = tf.AutoConfig.from_pretrained(path)
    config.initializer_range = 0.2
    torch.manual_seed(5)
    model = tf.GPT2LMHeadModel(config).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # no term of a formula vanishes: biases N(0, 0.5), LayerNorm weights U(0.5, 1.5)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
    model.save_pretrained(path)
    tok = tf.AutoTokenizer.from_pretrained(path)
    ids = [tok(s)["input_ids"] for s in sentences]
    lengths = [len(x) for x in ids]
    pad = tok.pad_token_id
    batch = torch.tensor([x + [pad] * (max(lengths) - len(x)) for x in ids])
    return path, sentences, batch, lengths


def _hf(path):
    import transformers as tf

    return tf.GPT2LMHeadModel.from_pretrained(
        path, attn_implementation="eager"
    ).eval(), tf.AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def routes(gpt2):
    """The three routes' Representations, and the TransformerLens bridge."""
    from transformer_lens.model_bridge import TransformerBridge

    path, sentences, batch, lengths = gpt2
    own = ev.represent(ev.load(path, name="own"), sentences, attention=True, norms=False)
    hf, tok = _hf(path)
    bridge = TransformerBridge.boot_transformers(str(path), hf_model=hf, tokenizer=tok)
    _, cache = bridge.run_with_cache(batch)
    lens = ev.from_transformer_lens(cache, batch, lengths=lengths, tokenizer=tok, name="lens")
    lm = nnsight.LanguageModel(_hf(path)[0], tokenizer=tok)
    with lm.trace(batch, output_attentions=True):
        emb = lm.transformer.drop.output.save()
        b0 = lm.transformer.h[0].output.save()
        b1 = lm.transformer.h[1].output.save()
        final = lm.transformer.ln_f.output.save()
        out = lm.output.save()
    # the last block's output is read after the final layer norm, as Hugging Face's hidden_states
    sight = ev.from_nnsight(
        [emb, b0, b1, final],
        batch,
        attentions=out.attentions,
        lengths=lengths,
        tokenizer=tok,
        name="sight",
        objective="lm",
    )
    return own, lens, sight, bridge


def test_states_and_attention_equal_the_projects_own_extraction(routes):
    own, lens, sight, _ = routes
    ref = own["own"]
    worst = {}
    for reps, name in ((lens, "lens"), (sight, "sight")):
        ds = reps[name]
        for c in ("sentence", "position", "token_id", "token_str", "word_id"):
            assert np.array_equal(ds[c].values, ref[c].values), (name, c)
        worst[name] = float(np.abs(ds["hidden"].values - ref["hidden"].values).max())
        assert worst[name] < 1e-5, (name, worst[name])
        a, b = own.attention("own")["attention"].values, reps.attention(name)["attention"].values
        assert np.allclose(a, b, atol=1e-6, equal_nan=True), name
    print("largest state difference:", worst)


@pytest.mark.slow
def test_statistics_from_the_two_routes_equal_our_own(routes):
    own, lens, sight, _ = routes
    ref_mi = ev.mi(own, k=20, bootstrap=0)
    ref_nb = ev.neighbors(own)
    ref_sim = ev.similarity(own, bootstrap=0)
    for reps, name in ((lens, "lens"), (sight, "sight")):
        mi = ev.mi(reps, k=20, bootstrap=0)
        assert np.allclose(mi["mi"].values, ref_mi["mi"].values, atol=1e-6, rtol=0), name
        nb = ev.neighbors(reps)
        same, ref_same = nb["value"].sel(measure="same_token"), ref_nb["value"].sel(measure="same_token")
        assert np.allclose(same.values, ref_same.values, atol=1e-6, rtol=0), name
        sim = ev.similarity(reps, bootstrap=0)
        got, ref = sim["distance"].sel(metric="pwcca").values, ref_sim["distance"].sel(metric="pwcca").values
        assert np.isfinite(ref).sum() >= 12
        assert np.allclose(got, ref, atol=1e-6, rtol=0, equal_nan=True), name
        print(
            name,
            "largest differences: MI",
            float(np.nanmax(np.abs(mi["mi"].values - ref_mi["mi"].values))),
            "same-token rate",
            float(np.abs(same.values - ref_same.values).max()),
            "PWCCA",
            float(np.nanmax(np.abs(got - ref))),
        )


@pytest.mark.slow
def test_head_statistics_run_on_stored_attention(routes):
    """The head statistics re-run each sentence through the model; from activations they read the
    stored maps instead, and must give the numbers of the model run."""
    own, lens, _, _ = routes
    ref = ev.heads(own)
    got = ev.heads(lens)
    shared = [v for v in ref.data_vars if v in got.data_vars and ref[v].dtype.kind == "f" and "model" in ref[v].dims]
    assert shared
    for v in shared:
        assert np.allclose(got[v].values, ref[v].values, atol=1e-6, equal_nan=True), v


def test_an_ablated_head_moves_its_layer_and_nothing_below(gpt2, routes):
    path, sentences, batch, lengths = gpt2
    _, lens, _, bridge = routes

    def ablate(z, hook):
        z[:, :, ABLATED_HEAD] = 0.0
        return z

    with bridge.hooks(fwd_hooks=[(f"blocks.{ABLATED_BLOCK}.attn.hook_z", ablate)]):
        _, cache = bridge.run_with_cache(batch)
    ablated = ev.from_transformer_lens(cache, batch, lengths=lengths, tokenizer=bridge.tokenizer, name="ablated")
    out = ev.compare(lens, ablated, k=20, bootstrap=50)
    moved = ABLATED_BLOCK + 1  # the block's output
    for layer in range(moved):
        for m in ("pwcca_distance", "cka_distance", "mi_change", "same_token_change"):
            assert out[m].sel(layer=layer).item() == 0.0, (layer, m)
            assert out[f"{m}_interval"].sel(layer=layer).values.tolist() == [0.0, 0.0]
    for layer in range(moved, int(out.layer.max()) + 1):
        assert out["pwcca_distance"].sel(layer=layer).item() > 1e-3, layer
        assert out["cka_distance"].sel(layer=layer).item() > 0, layer
    for m in ("pwcca_distance", "cka_distance", "mi_change", "same_token_change"):
        lo, hi = out[f"{m}_interval"].sel(bound="low").values, out[f"{m}_interval"].sel(bound="high").values
        assert np.all(lo <= out[m].values + 1e-12) and np.all(out[m].values <= hi + 1e-12), m
    # the run's own values: a's MI is the clean run's, b's the ablated run's
    assert np.allclose(out["mi_b"] - out["mi_a"], out["mi_change"], atol=1e-12)


def test_a_filtered_cache_with_the_embeddings_as_two_hooks(gpt2, routes):
    """A cache that kept only ``hook_embed`` and ``hook_pos_embed`` for layer 0 gives the same states;
    one without the hooks a layer needs is refused, naming them."""
    path, sentences, batch, lengths = gpt2
    _, lens, _, bridge = routes

    def keep(name: str) -> bool:
        return name in ("hook_embed", "hook_pos_embed", "ln_final.hook_out") or name.endswith(
            ("hook_resid_post", "attn.hook_pattern")
        )

    _, cache = bridge.run_with_cache(batch, names_filter=keep)
    assert "blocks.0.hook_resid_pre" not in cache.keys()
    again = ev.from_transformer_lens(cache, batch, lengths=lengths, tokenizer=bridge.tokenizer, name="again")
    assert np.abs(again["again"]["hidden"].values - lens["lens"]["hidden"].values).max() < 1e-6
    _, bare = bridge.run_with_cache(batch, names_filter=lambda n: n.endswith("hook_resid_post"))
    with pytest.raises(KeyError, match="blocks.0.hook_resid_pre.*ln_final.hook_out.*hook_pattern"):
        ev.from_transformer_lens(bare, batch, lengths=lengths, tokenizer=bridge.tokenizer)
    with pytest.raises(KeyError, match="blocks.0.hook_resid_pre"):  # the residual stream alone still lacks layer 0
        ev.from_transformer_lens(
            bare, batch, lengths=lengths, tokenizer=bridge.tokenizer, final_norm=False, attention=False
        )


def test_the_reported_door_cases_on_the_real_routes(gpt2, routes):
    """The cases that once went through: a right-padded batch without ``lengths`` (GPT-2's pad id is
    its BOS/EOS, which became the most frequent "type"), through TransformerLens and nnsight, with
    and without attention; the blocks' outputs alone given to nnsight with the model at hand (every
    label one off); a cache of blocks 0-1 plus the final norm of a 3-block model; a bfloat16 cache."""
    import torch

    path, sentences, batch, lengths = gpt2
    *_, bridge = routes
    tok = bridge.tokenizer
    few, few_lengths = batch[:12], lengths[:12]
    _, cache = bridge.run_with_cache(few)
    for attention in (True, False):
        with pytest.raises(ValueError, match="right-padded batch would be analysed as text.*lengths="):
            ev.from_transformer_lens(cache, few, tokenizer=tok, attention=attention)
    lm = nnsight.LanguageModel(_hf(path)[0], tokenizer=tok)
    with lm.trace(few, output_attentions=True):
        emb = lm.transformer.drop.output.save()
        b0 = lm.transformer.h[0].output.save()
        b1 = lm.transformer.h[1].output.save()
        b2 = lm.transformer.h[2].output.save()
        out = lm.output.save()
    blocks = [b0, b1, b2]
    with pytest.raises(ValueError, match="right-padded"):
        ev.from_nnsight([emb, *blocks], few, attentions=out.attentions, tokenizer=tok)
    with pytest.raises(ValueError, match="holds 3 layers and the model has 3 blocks: the embeddings are missing"):
        ev.from_nnsight(blocks, few, lengths=few_lengths, tokenizer=tok, config=lm)
    assert (
        ev.from_nnsight([emb, *blocks], few, lengths=few_lengths, tokenizer=tok, config=lm)["nnsight"].sizes["layer"]
        == 4
    )
    _, short = bridge.run_with_cache(few, names_filter=lambda n: n in SHORT_HOOKS)
    with pytest.raises(KeyError, match=r"blocks 0\.\.1 but the model has 3 blocks"):
        ev.from_transformer_lens(short, few, lengths=few_lengths, tokenizer=tok, attention=False)
    half = {k: v.to(torch.bfloat16) for k, v in cache.items() if k in SHORT_HOOKS or "hook_resid" in k}
    got = ev.from_transformer_lens(half, few, lengths=few_lengths, tokenizer=tok, attention=False, name="bf16")
    ref = ev.from_transformer_lens(cache, few, lengths=few_lengths, tokenizer=tok, attention=False, name="f32")
    diff = np.abs(got["bf16"]["hidden"].values - ref["f32"]["hidden"].values)
    scale = np.abs(ref["f32"]["hidden"].values).max()
    assert 0 < diff.max() <= scale * 2**-8  # bfloat16's 8 bits of mantissa, read exactly as float32


SHORT_HOOKS = ("blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "ln_final.hook_out")
