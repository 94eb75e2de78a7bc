"""Attention-head statistics: word-level maps by hand, per-head sums on maps with known
answers, scipy's entropy as a reference, and the heads analysis end to end."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from evolution.metrics.heads import (
    COUNTS,
    MEASURES,
    OFFSETS,
    dependency_hits,
    head_sums,
    is_punctuation,
    js_divergence_sums,
    key_shares,
    word_attention,
    word_units,
)


def test_word_attention_by_hand():
    # positions: [CLS] play ##ing [SEP] -> units 0, 1, 1, 2
    alpha = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.2, 0.2], [0.0, 0.6, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25]])
    units = [0, 1, 1, 2]
    mean = word_attention(alpha, units)
    # to the word: sum over its pieces (columns 1 and 2); from the word: mean of rows 1 and 2
    expected = np.array([[0.1, 0.5, 0.4], [(0.5 + 0.0) / 2, (0.3 + 0.8) / 2, (0.2 + 0.2) / 2], [0.25, 0.5, 0.25]])
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


def test_word_units_put_special_tokens_in_units_of_their_own():
    np.testing.assert_array_equal(word_units([0, 0, 1, 2, 2], n_prefix=1, n_suffix=1), [0, 1, 1, 2, 3, 3, 4])
    np.testing.assert_array_equal(word_units([0, 1], n_prefix=0, n_suffix=1), [0, 1, 2])


def test_dependency_hits_by_hand():
    # "the cat sat": the -> cat (det), cat -> sat (nsubj), sat = root
    heads, rels = [2, 3, 0], [0, 1, 2]  # codes: det, nsubj, root
    a = np.array(
        [
            [0.1, 0.8, 0.1],  # the: most to cat (its head)
            [0.2, 0.1, 0.7],  # cat: most to sat (its head)
            [0.1, 0.3, 0.6],
        ]
    )  # sat: itself excluded, then cat (its nsubj dependent)
    other = np.array(
        [
            [0.1, 0.1, 0.8],  # the: sat (wrong head)
            [0.9, 0.05, 0.05],  # cat: the (its dependent, not its head)
            [0.5, 0.4, 0.1],
        ]
    )  # sat: the (not a dependent of sat)
    hits, arcs, offset_hits = dependency_hits(np.stack([a, other])[None], heads, rels, 3)
    np.testing.assert_array_equal(arcs, [1, 1, 0])  # the root's arc is not counted
    # directions: dependent_to_head (row of the dependent), head_to_dependent (row of the head),
    # head_to_dependent_clark (column of the dependent: who attends most to it)
    # head 0 rows: both dependents find their head; sat -> cat is nsubj from the head's row; cat's max is sat.
    # Columns: 'the' is attended most by cat (0.2 > 0.1): its head, det hit; 'cat' by the (0.8 > 0.3): miss
    np.testing.assert_array_equal(hits[0, 0], [[1, 0, 1], [1, 1, 0], [0, 0, 0]])
    # head 1 rows: the -> sat misses det; cat -> the is the det arc from the head's row; sat -> the misses nsubj.
    # Columns: 'the' is attended most by cat (0.9): det hit; 'cat' by sat (0.4 > 0.1): nsubj hit
    np.testing.assert_array_equal(hits[0, 1], [[0, 1, 1], [0, 0, 1], [0, 0, 0]])
    # offsets: the +1 = cat (det dependent-to-head), cat +1 = sat (nsubj), cat -1 = the (det head-to-dependent);
    # Clark's baseline predicts the head from the dependent, whatever the direction
    plus, minus = OFFSETS.index(1), OFFSETS.index(-1)
    np.testing.assert_array_equal(offset_hits[plus], [[1, 0, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(offset_hits[minus], [[0, 1, 0], [0, 1, 0], [0, 0, 0]])


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
    # confidence: content queries 1..4, their largest weight on a content key (1..4): for the
    # previous-token head query 1 has all its weight on BOS, so 0 there; 1 for queries 2, 3, 4
    np.testing.assert_allclose(_measure(sums, counts, "confidence")[0], [1 / T, 3 / 4])
    # the old definition, kept beside it: every key, EOS query excluded (queries 0..4, each 1.0)
    np.testing.assert_allclose(_measure(sums, counts, "confidence_with_sink")[0], [1 / T, 1.0])
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
    ref = np.array(
        [
            [np.mean([scipy_entropy(causal[layer, h, i, : i + 1]) for i in range(T)]) for h in range(3)]
            for layer in range(2)
        ]
    )
    np.testing.assert_allclose(_measure(sums, counts, "entropy"), ref, rtol=1e-12)
    np.testing.assert_allclose(_measure(sums, counts, "uniform_entropy"), np.mean(np.log(np.arange(1, T + 1))))


def test_norm_shares_are_per_query_shares():
    norm = np.array([[3.0, 1.0, 0.0], [1.0, 1.0, 2.0], [0.0, 0.0, 5.0]])
    bos = np.array([True, False, False])
    out = key_shares(norm, [bos, ~bos])
    np.testing.assert_allclose(out, [0.75 + 0.25 + 0.0, 0.25 + 0.75 + 1.0])


def test_js_divergence_matches_scipy():
    from scipy.spatial.distance import jensenshannon

    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(5), size=(4, 5))  # 4 heads, 5 queries over 5 keys
    got = js_divergence_sums(p)
    ref = np.array([[sum(jensenshannon(p[a, i], p[b, i]) ** 2 for i in range(5)) for b in range(4)] for a in range(4)])
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_js_divergence_in_blocks_of_heads_equals_all_at_once():
    """The blocked sums (a few heads' mixtures at a time, bounded memory) are the all-at-once
    definition's numbers exactly, for blocks that divide the heads and blocks that do not."""
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(6), size=(7, 6))  # 7 heads, 6 queries over 6 keys
    mix = (p[:, None] + p[None]) / 2
    ent = -(p * np.log(p)).sum(-1)
    whole = (-(mix * np.log(mix)).sum(-1) - (ent[:, None] + ent[None]) / 2).sum(-1)
    for heads_per_block in (1, 2, 3, 7):
        got = js_divergence_sums(p, block_bytes=heads_per_block * 7 * p[0].nbytes)
        np.testing.assert_array_equal(got, whole, err_msg=f"{heads_per_block} heads a block")
    np.testing.assert_array_equal(js_divergence_sums(p), whole)


def test_punctuation_pieces():
    # Clark et al.'s released code counts "." and "," only (the default)
    assert is_punctuation(".") and is_punctuation("▁,") and is_punctuation("Ġ.") and is_punctuation("##,")
    assert not is_punctuation("##!") and not is_punctuation("Ġ?") and not is_punctuation("▁;")
    assert not is_punctuation("...") and not is_punctuation(".,")
    # the broad rule: every character Unicode punctuation
    assert is_punctuation("##!", rule="unicode") and is_punctuation("Ġ?", rule="unicode")
    assert is_punctuation("...", rule="unicode") and is_punctuation("“", rule="unicode")
    for rule in ("clark", "unicode"):
        assert not any(is_punctuation(p, rule=rule) for p in ("▁a", "", "▁", "a.", "▁1"))
    with pytest.raises(ValueError, match="metrics.heads.punctuation"):
        is_punctuation(".", rule="ascii")


@pytest.mark.slow
def test_heads_analysis_end_to_end(tmp_path, corpus_file, model_specs, caplog):
    """The heads group of a run equals a direct computation from the models' attention (scipy
    entropy, numpy shares), for a model with norms (translation) and one without (gpt2)."""
    from conftest import write_config
    from test_conllu import TREEBANK_SENTENCES, _treebank
    from test_metrics_stage import METRICS

    from evolution.metrics.results import open_metrics
    from pipelines.run import run

    dev = _treebank(tmp_path / "dev.conllu", TREEBANK_SENTENCES[:8])
    test = _treebank(tmp_path / "test.conllu", TREEBANK_SENTENCES[3:])
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        workdir=tmp_path / "w",
        extra=METRICS + f"\n  heads: {{select: {dev}, score: {test}}}",
        models=[model_specs["translation"], model_specs["gpt2"]],
    )
    with caplog.at_level(logging.WARNING, logger="evolution.analyses.heads"):
        run(cfg, progress=False)
    # of Voita et al.'s relations, the toy treebank lacks obj and advmod: one warning naming them and the key
    assert any(
        "['obj', 'advmod'] do not occur" in r.getMessage() and "metrics.heads.relations" in r.getMessage()
        for r in caplog.records
    )
    heads = open_metrics(tmp_path / "w" / "metrics.zarr", "heads").load()
    assert heads.value.dims == ("model", "layer", "head", "measure") and list(heads.layer.values) == [1, 2]
    # the statistics stream over every sentence of the analysis set: recompute from the adapter's own
    # attention, one sentence at a time, with scipy's entropy
    from evolution.models import load_adapter
    from evolution.store import open_representations

    store = str(tmp_path / "w" / "reps.zarr")
    for model in ("translation", "gpt2"):
        reps = open_representations(store, model)
        adapter = load_adapter(model_specs[model])
        ent, eos_share = [], []
        for s in np.unique(reps.sentence.values):
            rows = np.flatnonzero(reps.sentence.values == s)
            inp = adapter.build_input(reps.token_id.values[rows[np.argsort(reps.position.values[rows])]].tolist())
            _, att = adapter.forward([inp], attention=True)
            ent += [scipy_entropy(row) for row in att[1, 0, 0]]  # layer 2, head 0
            eos_share += list(att[0, 0, 1, :, -1])  # layer 1, head 1: weight on the last input position
        assert heads.value.sel(model=model, layer=2, head=0, measure="entropy").item() == pytest.approx(
            np.mean(ent), rel=1e-6
        )
        assert heads.sentences.sel(model=model).item() == len(np.unique(reps.sentence.values))
        if model == "translation":  # the MT encoder's input ends in </s>
            assert heads.alpha_share.sel(model=model, layer=1, head=1, key_type="eos").item() == pytest.approx(
                np.mean(eos_share), rel=1e-6
            )
    # the MT encoder's input has no BOS: attention to it is NaN, the rest finite
    assert np.isnan(heads.norm_share.sel(model="translation", key_type="bos")).all()
    assert np.isnan(heads.alpha_share.sel(model="translation", key_type="bos")).all()
    assert np.isfinite(heads.norm_share.sel(model="translation", key_type=["eos", "punct"])).all()
    assert np.isnan(heads.norm_share.sel(model="gpt2")).all()  # gpt2: no norms, maps only
    assert heads.positional.dtype == bool
    # dependency heads: the head picked on dev is scored on test; with the paper's rule (pick on test)
    # beside it, which can only be as good or better
    dep = open_metrics(tmp_path / "w" / "metrics.zarr", "heads_dependency").load()
    acc = dep.accuracy.sel(model="translation")
    for rel in ("det", "amod"):
        for d in dep.direction.values:
            layer = dep.picked_layer.sel(model="translation", relation=rel, direction=d).item()
            head = dep.picked_head.sel(model="translation", relation=rel, direction=d).item()
            dev_acc = acc.sel(split="select", relation=rel, direction=d)
            assert dev_acc.sel(layer=layer, head=head).item() == dev_acc.max().item()
            picked = dep.picked_accuracy.sel(model="translation", relation=rel, direction=d).item()
            assert picked == acc.sel(split="score", relation=rel, direction=d, layer=layer, head=head).item()
            assert dep.best_accuracy.sel(model="translation", relation=rel, direction=d).item() >= picked
    # the toy treebank's det arcs all point at word 1 from word 2... so offset -1 finds every "the cat" arc
    assert dep.arcs.sel(model="translation", split="score", relation="det").item() > 0
    off = dep.offset_accuracy.values
    assert ((off[np.isfinite(off)] >= 0) & (off[np.isfinite(off)] <= 1)).all()
    assert np.isnan(dep.offset_accuracy.sel(relation="root")).all()  # the root has no arc to a word
    assert set(dep.syntactic_relation.values) == {"nsubj", "amod"}  # of nsubj, obj, amod, advmod: in the toy treebank
    voita = ["dependent_to_head", "head_to_dependent"]  # syntactic heads: not Clark's transposed map
    margin = dep.accuracy.sel(split="score", direction=voita).max("direction") - dep.offset_accuracy.sel(
        split="score", direction=voita
    ).max(("offset", "direction"))
    np.testing.assert_array_equal(dep.syntactic.values, (margin >= 0.1).sel(relation=["nsubj", "amod"]).values)
    np.testing.assert_array_equal(
        heads.syntactic.sel(model="translation").values, dep.syntactic.sel(model="translation").values
    )
    assert (tmp_path / "w" / "report" / "heads_dependency.png").is_file()
    # Jensen-Shannon distances: a metric's diagonal is 0 and it is symmetric; every head of both models
    hm = open_metrics(tmp_path / "w" / "metrics.zarr", "heads_map").load()
    d = hm.js_distance.values
    assert d.shape == (2 * 2 * 2, 2 * 2 * 2) and np.allclose(np.diag(d), 0, atol=1e-6) and np.allclose(d, d.T)
    assert (d[~np.eye(len(d), dtype=bool)] > 0).all() and (d <= np.sqrt(np.log(2)) + 1e-9).all()
    assert set(hm.unit_model.values) == {"translation", "gpt2"}
    # Kobayashi: Spearman correlations are correlations
    sp = heads.spearman.sel(model="translation").values
    assert np.isfinite(sp).all() and (np.abs(sp) <= 1).all()
    assert np.isnan(heads.spearman.sel(model="gpt2", quantity="value_norm")).all()
    assert (tmp_path / "w" / "report" / "heads_roles.png").is_file()
    assert (tmp_path / "w" / "report" / "heads_entropy.png").is_file()
    report = (tmp_path / "w" / "report" / "report.md").read_text()
    assert "### Head roles" in report and "### Dependency heads" in report and "### Spearman correlation" in report
    assert (tmp_path / "w" / "report" / "heads_special.png").is_file()


def test_rare_token_hit_by_hand():
    """Which key holds most of a head's maxima, over content queries only, against the
    sentence's rarest token(s); tied modal keys share the hit."""
    from evolution.analyses.heads import rare_token_hit
    from evolution.analyses.heads.statistics import rarest_positions

    # input: BOS, four content tokens (positions 1-4), EOS; the rarest token at position 2
    T = 6
    special = np.isin(np.arange(T), [0, T - 1])
    rare = np.arange(T) == 2
    onehot = np.eye(T)
    # content queries 1, 2 -> key 2 (rare), 3, 4 -> key 2 and key 4; BOS and EOS queries -> key 4:
    # over the content queries key 2 holds 3 maxima, key 4 one: a hit. Counting the EOS query
    # (key 4: 2) keeps it; counting BOS and EOS (key 4: 3 against 3) would halve it
    to_rare = onehot[[4, 2, 2, 2, 4, 4]]
    # content queries: two maxima on key 2, two on key 3: a tie, half a hit
    tied = onehot[[0, 2, 3, 2, 3, 0]]
    # content queries 1, 2 on key 2; 3, 4 on key 1 and the EOS query on key 1: without EOS a
    # tie (0.5), with EOS key 1 wins (0.0)
    eos_decides = onehot[[0, 2, 2, 1, 1, 1]]
    got = rare_token_hit(np.stack([to_rare, tied, eos_decides])[None], rare=rare, queries=~special)
    np.testing.assert_allclose(got, [[1.0, 0.5, 0.5]])
    # every tied rarest token counts: positions 2 and 3 both rarest, the tied head is a full hit
    got = rare_token_hit(tied[None, None], rare=np.isin(np.arange(T), [2, 3]), queries=~special)
    np.testing.assert_allclose(got, [[1.0]])
    # the rarest positions of a sentence's training counts: ties kept; nothing to tell when all tie
    np.testing.assert_array_equal(rarest_positions([5, 1, 7, 1]), [False, True, False, True])
    assert rarest_positions([3, 3, 3]) is None and rarest_positions([4]) is None


def test_attention_to_a_special_token_the_input_lacks_is_nan():
    """The MT encoder's input has no BOS and the LM's no EOS: attention to them is NaN (it
    does not exist), not 0; the norm shares likewise; punctuation absent from a sentence is 0."""
    rng = np.random.default_rng(5)
    T = 5
    alpha = rng.dirichlet(np.ones(T), size=(2, 3, T))
    none = np.zeros(T, bool)
    eos = np.arange(T) == T - 1
    sums, counts, norm_sums = head_sums(alpha, bos=none, eos=eos, punct=none, causal=False, norm=alpha * 2.0)
    assert np.isnan(_measure(sums, counts, "to_bos")).all() and np.isnan(norm_sums[..., 0]).all()
    np.testing.assert_allclose(_measure(sums, counts, "to_eos"), alpha[..., -1].mean(-1))
    np.testing.assert_allclose(norm_sums[..., 1] / T, alpha[..., -1].mean(-1))
    np.testing.assert_array_equal(_measure(sums, counts, "to_punct"), 0.0)
    np.testing.assert_array_equal(norm_sums[..., 2], 0.0)  # no punctuation in this sentence: 0, not NaN
    lm_sums, lm_counts, _ = head_sums(alpha, bos=np.arange(T) == 0, eos=none, punct=none, causal=True)
    assert np.isnan(_measure(lm_sums, lm_counts, "to_eos")).all()
    assert np.isfinite(_measure(lm_sums, lm_counts, "to_bos")).all()


def test_decoder_attention_matches_fairseq_and_a_manual_softmax(model_specs):
    """Teacher-forced decoder maps of a fairseq translation model: the encoder-decoder
    attention averaged over heads equals fairseq's own alignment output (``alignment_layer``)
    layer by layer; the self-attention equals softmax(q k^T / sqrt(d_head)) recomputed from
    the layer's query input with a causal mask; a padded batch equals one sentence at a time."""
    import torch

    from evolution.models import load_adapter

    adapter = load_adapter(model_specs["translation"])
    assert adapter.supports_decoder and not load_adapter(model_specs["masked_lm"]).supports_decoder
    sources = [adapter.build_input(adapter.tokenize(s).ids) for s in ("the cat sat on the mat", "a dog ran")]
    targets = [adapter.build_decoder_input(adapter.tokenize_target(s).ids) for s in ("the dog sat", "a cat sat on it")]
    own, cross = adapter.forward_decoder(sources, targets)
    model = adapter._model
    L, H = len(model.decoder.layers), model.decoder.layers[0].self_attn.num_heads
    assert own.shape[:3] == (L, 2, H) and cross.shape[-1] == max(map(len, sources))
    for b in range(2):
        src = torch.as_tensor([sources[b]])
        tgt = torch.as_tensor([targets[b]])
        ts, tt = len(sources[b]), len(targets[b])
        one_own, one_cross = adapter.forward_decoder([sources[b]], [targets[b]])
        np.testing.assert_allclose(own[:, b, :, :tt, :tt], one_own[:, 0], atol=1e-5)
        np.testing.assert_allclose(cross[:, b, :, :tt, :ts], one_cross[:, 0], atol=1e-5)
        queries = []
        hooks = [
            layer.self_attn.register_forward_pre_hook(
                lambda m, a, k, queries=queries: queries.append(k.get("query", a[0] if a else None)),
                with_kwargs=True,
            )
            for layer in model.decoder.layers
        ]
        with torch.inference_mode():
            enc = model.encoder(src, src_lengths=torch.as_tensor([ts]))
            for layer in range(L):
                _, extra = model.decoder(tgt, encoder_out=enc, alignment_layer=layer)
                np.testing.assert_allclose(extra["attn"][0][0].numpy(), one_cross[layer, 0].mean(0), atol=1e-5)
        for h in hooks:
            h.remove()
        for layer in range(L):  # queries[:L]: the first of the L passes above
            m = model.decoder.layers[layer].self_attn
            x = queries[layer][:, 0]  # (T, d) the layer's self-attention input
            d_head = m.embed_dim // m.num_heads
            with torch.inference_mode():
                q = (m.q_proj(x) * d_head**-0.5).view(tt, m.num_heads, d_head).transpose(0, 1)
                k = m.k_proj(x).view(tt, m.num_heads, d_head).transpose(0, 1)
                scores = q @ k.transpose(1, 2) + torch.triu(torch.full((tt, tt), float("-inf")), diagonal=1)
            np.testing.assert_allclose(one_own[layer, 0], torch.softmax(scores, -1).numpy(), atol=1e-5)


def test_cross_head_sums_against_a_loop():
    """Encoder-decoder statistics: each measure recomputed query by query with scipy's entropy;
    the measures that need the query's own position in the keys are NaN."""
    from evolution.metrics.heads import cross_head_sums

    rng = np.random.default_rng(3)
    alpha = rng.dirichlet(np.ones(5) * 0.3, size=(2, 3, 4))  # (L, H, Tq=4, Tk=5)
    bos = np.array([1, 0, 0, 0, 0], bool)
    eos = np.array([0, 0, 0, 0, 1], bool)
    punct = np.array([0, 0, 1, 1, 0], bool)
    sums, counts = cross_head_sums(alpha, bos=bos, eos=eos, punct=punct)
    for layer, head in [(0, 0), (1, 2)]:
        rows = alpha[layer, head]
        expect = {
            "entropy": np.mean([scipy_entropy(r) for r in rows]),
            "uniform_entropy": np.log(5),
            "to_bos": rows[:, 0].mean(),
            "to_eos": rows[:, 4].mean(),
            "to_punct": rows[:, 2:4].sum(1).mean(),
            "confidence": np.mean([max(r[1:4]) for r in rows]),  # source keys 1-3: BOS and </s> left out
            "confidence_with_sink": rows.max(1).mean(),
        }
        for name, value in expect.items():
            assert _measure(sums[layer, head], counts, name) == pytest.approx(value)
    # a source without BOS (the MT encoder's input): attention to it is NaN
    no_bos, _ = cross_head_sums(alpha, bos=np.zeros(5, bool), eos=eos, punct=punct)
    assert np.isnan(no_bos[..., MEASURES.index("to_bos")]).all()
    for name in ("to_self", "to_prev", "to_next", "max_prev", "max_self", "max_next"):
        assert np.isnan(sums[..., MEASURES.index(name)]).all()


@pytest.mark.slow
def test_decoder_heads_end_to_end(tmp_path, model_specs):
    """A translation model on a parallel corpus: the ``heads_decoder`` group equals the
    adapter's teacher-forced maps pooled by hand over every analysed sentence with its own
    reference line (scipy's entropy; numpy shares), and the report has its table."""
    from conftest import SENTENCES

    from evolution.corpus import layout
    from evolution.metrics.results import open_metrics
    from evolution.models import load_adapter
    from evolution.store import open_representations
    from pipelines.run import run

    src, tgt = tmp_path / "c.en", tmp_path / "c.xx"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    tgt.write_text("".join(" ".join(reversed(s.split())) + " .\n" for s in SENTENCES), encoding="utf-8")
    spec = model_specs["translation"]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"""workdir: {tmp_path / "w"}
cluster: synchronous
corpus: {{source: parallel, path: {src}, target_path: {tgt}, languages: [en, xx],
          split: {{valid: 0.125, test: 0.5, block_lines: 4}}}}
extract: {{chunk_tokens: 32, max_batch_tokens: 64, attention: {{sentences: 3}}}}
metrics:
  tokens: {{top: 4, min_count: 2}}
  mi: {{k: 3, restarts: 1}}
  neighbors: {{k: 2}}
  tsne: {{selections: []}}
models:
  - {{name: mt, kind: fairseq, path: {spec["path"]}, data: {spec["data"]}}}
""",
        encoding="utf-8",
    )
    run(cfg, progress=False)
    dec = open_metrics(tmp_path / "w" / "metrics.zarr", "heads_decoder").load()
    assert dec.value.dims == ("model", "attention", "layer", "head", "measure")
    corpus_dir = next((tmp_path / "w" / "corpus").iterdir())
    targets = layout.load_targets(corpus_dir).sentences
    reps = open_representations(str(tmp_path / "w" / "reps.zarr"), "mt")
    adapter = load_adapter(spec)
    ent, eos, conf, conf_sink, self_prev = [], [], [], [], []
    sentences = np.unique(reps.sentence.values)
    assert len(targets) == len(sentences) == dec.sentences.sel(model="mt").item()
    for s in sentences:
        rows = np.flatnonzero(reps.sentence.values == s)
        source = adapter.build_input(reps.token_id.values[rows[np.argsort(reps.position.values[rows])]].tolist())
        assert " ".join(reps.token_str.values[rows]) == " ".join(reversed(targets[s][:-2].split()))  # its own line
        own, cross = adapter.forward_decoder(
            [source], [adapter.build_decoder_input(adapter.tokenize_target(targets[s]).ids)]
        )
        ent += [scipy_entropy(row) for row in cross[0, 0, 1]]  # layer 1, head 1
        eos += list(cross[0, 0, 0, :, -1])  # layer 1, head 0: the source's </s>
        conf += [max(row[1 : q + 1]) for q, row in enumerate(own[0, 0, 1]) if q > 0]  # the start symbol left out
        conf_sink += list(own[0, 0, 1].max(-1))
        self_prev += list(np.diagonal(own[0, 0, 0], offset=-1))
    v = dec.value.sel(model="mt", layer=1)
    assert v.sel(attention="encoder_decoder", head=1, measure="entropy").item() == pytest.approx(np.mean(ent), rel=1e-6)
    assert v.sel(attention="encoder_decoder", head=0, measure="to_eos").item() == pytest.approx(np.mean(eos), rel=1e-6)
    assert v.sel(attention="decoder_self", head=1, measure="confidence").item() == pytest.approx(
        np.mean(conf), rel=1e-6
    )
    assert v.sel(attention="decoder_self", head=1, measure="confidence_with_sink").item() == pytest.approx(
        np.mean(conf_sink), rel=1e-6
    )
    assert np.isnan(v.sel(attention="decoder_self", measure="to_eos")).all()  # the decoder's input has no EOS
    assert v.sel(attention="decoder_self", head=0, measure="to_prev").item() == pytest.approx(
        np.mean(self_prev), rel=1e-6
    )
    assert np.isnan(v.sel(attention="encoder_decoder", measure="to_self")).all()
    assert not dec.positional.sel(attention="encoder_decoder").any()
    assert "### Decoder heads of the translation model" in (tmp_path / "w" / "report" / "report.md").read_text()
