"""Head gates, head-mask importance (Michel et al. 2019) and Hard-Concrete gates (Voita et al.
ACL 2019) on the tiny trained models: gradients against finite differences and a plain loop,
aggregation against hand-computed values, a gate of 0 against the head physically removed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evolution.metrics.importance import (
    importance,
    mask_gradients,
    normalize_by_layer,
    objective_items,
    sentence_losses,
)
from evolution.models.fairseq import FairseqAdapter
from evolution.nets.gates import HardConcreteGate, head_gates, remove_heads

SOURCES = ["And God said, Let there be light", "and there was light.", "The earth was without form and void"]
TARGETS = ["dnA doG dias", "dna ereht saw", "ehT htrae saw tuohtiw"]


def _adapter(trained, run, *, double=True):
    paths = trained["paths"]
    objective = run.split("-")[0]
    a = FairseqAdapter(paths.checkpoint(run), data=paths.data(objective), sentencepiece=paths.spm_model)
    if double:
        a._model.double()
    return a


def _items(a, seed=0):
    sources = [a.tokenize(s).ids for s in SOURCES]
    targets = [a.tokenize_target(t).ids for t in TARGETS] if a.objective == "mt" else None
    return [it for it in objective_items(a, sources, targets=targets, seed=seed) if it is not None]


def _loss_with_shared_gates(a, items, gates: dict) -> float:
    import contextlib

    with contextlib.ExitStack() as stack, torch.no_grad():
        for att, g in gates.items():
            stack.enter_context(head_gates(a.output_projections(att), g))
        return float(sentence_losses(a, items).sum())


@pytest.mark.parametrize("run", ["mt", "lm", "mlm"])
def test_mask_gradient_equals_central_finite_differences(trained, run):
    a = _adapter(trained, run)
    items = _items(a)[:1]
    attentions = a.attention_types
    grads = mask_gradients(a, items, attentions=attentions)
    eps = 1e-3  # fairseq's attention softmax runs in float32 even in a float64 model: below ~1e-4 the
    # differences are rounding noise; at 1e-3 the central difference's O(eps^2) error is ~1e-6 relative
    for att in attentions:
        L, H = grads[att].shape[1:]
        assert (L, H) == (len(a.output_projections(att)), a.attention_modules(att)[0].num_heads)
        fd = np.zeros((L, H))
        for layer in range(L):
            for h in range(H):
                up, down = (
                    {
                        x: torch.ones(L if x == att else len(a.output_projections(x)), H, dtype=torch.float64)
                        for x in attentions
                    }
                    for _ in range(2)
                )
                up[att][layer, h] += eps
                down[att][layer, h] -= eps
                fd[layer, h] = (_loss_with_shared_gates(a, items, up) - _loss_with_shared_gates(a, items, down)) / (
                    2 * eps
                )
        np.testing.assert_allclose(grads[att][0], fd, rtol=2e-3, atol=1e-6)
        assert np.abs(fd).max() > 1e-4  # the heads matter to the loss at all


def test_batched_per_sentence_gradients_equal_one_sentence_at_a_time(trained):
    a = _adapter(trained, "mt")
    items = _items(a)
    assert len({len(it.inputs) for it in items}) > 1  # padding is exercised
    together = mask_gradients(a, items, attentions=a.attention_types, max_batch_tokens=10_000)
    for i, it in enumerate(items):
        alone = mask_gradients(a, [it], attentions=a.attention_types)
        for att in a.attention_types:
            np.testing.assert_allclose(together[att][i], alone[att][0], rtol=1e-5, atol=1e-9)  # float32 softmax
    # different sentences have different gradients (the batch is not one sentence repeated)
    assert not np.allclose(together["encoder_self"][0], together["encoder_self"][1])
    # the weights are frozen only while the masks' gradients are taken: the model trains after
    a._model.frozen_probe = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # one the user froze
    before = {n: p.requires_grad for n, p in a._model.named_parameters()}
    assert set(before.values()) == {True, False}
    mask_gradients(a, items[:1], attentions=a.attention_types)
    assert {n: p.requires_grad for n, p in a._model.named_parameters()} == before


def test_lm_labels_are_the_next_tokens_and_mlm_labels_the_corrupted_originals(trained):
    lm = _adapter(trained, "lm", double=False)
    ids = lm.tokenize(SOURCES[0]).ids
    (item,) = objective_items(lm, [ids])
    assert item.inputs == lm.build_input(ids) and list(item.labels) == [*ids, lm.dictionary.eos()]
    assert list(item.positions) == list(range(len(ids) + 1))
    mlm = _adapter(trained, "mlm", double=False)
    long = mlm.tokenize(" ".join(SOURCES)).ids
    (item,) = objective_items(mlm, [long], seed=3)
    changed = item.positions - mlm.content_offset
    assert len(changed) > 0
    assert all(item.inputs[p] != lab for p, lab in zip(item.positions, item.labels, strict=True))
    assert list(item.labels) == [long[c] for c in changed]
    # sentence s is corrupted by default_rng([seed, s]), as the MLM output MI: the same sentence twice
    # gets two corruptions, each the one metrics.masked.corrupt gives with that sentence's generator
    from evolution.metrics.masked import corrupt

    pair = objective_items(mlm, [long, long], seed=3)
    low, high = mlm.ordinary_ids
    for s, it in enumerate(pair):
        new, changed = corrupt(long, rng=np.random.default_rng([3, s]), mask_id=mlm.mask_id, low=low, high=high)
        assert list(it.positions) == list(mlm.content_offset + changed)
        assert list(it.inputs) == list(mlm.build_input(new))
    assert list(pair[0].positions) != list(pair[1].positions)
    assert objective_items(mlm, [long], seed=3)[0].inputs == item.inputs  # seeded


def test_importance_is_the_mean_of_absolute_gradients_and_layers_normalise_to_unit_norm():
    g = np.array([[[2.0, -1.0, 0.5]], [[-2.0, 3.0, 0.5]], [[1.0, -2.0, -0.5]]])  # (N=3, L=1, H=3)
    np.testing.assert_allclose(importance(g), [[5 / 3, 2.0, 0.5]])
    scores = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(normalize_by_layer(scores), [[0.6, 0.8], [0.0, 0.0], [2**-0.5, 2**-0.5]])
    # a head the model does not have (NaN in a padded store) stays NaN and is left out of its layer's norm
    padded = np.array([[3.0, np.nan, 4.0], [np.nan, np.nan, np.nan], [0.0, 2.0, np.nan]])
    np.testing.assert_allclose(normalize_by_layer(padded), [[0.6, np.nan, 0.8], [np.nan] * 3, [0.0, 1.0, np.nan]])


def test_gate_of_zero_equals_the_head_physically_removed(trained):
    a = _adapter(trained, "mt")
    b = _adapter(trained, "mt")
    x = [a.build_input(a.tokenize(s).ids) for s in SOURCES]
    L, H = len(a.output_projections()), a.num_heads
    gates = torch.ones(L, H, dtype=torch.float64)
    gates[0, 1] = 0.0
    gates[1, 0] = 0.0
    with head_gates(a.output_projections(), gates) as calls:
        gated = a.forward(x)[0]
    assert calls == [1] * L
    remove_heads(b.attention_modules()[0], [True, False])
    remove_heads(b.attention_modules()[1], [False, True])
    removed = b.forward(x)[0]
    np.testing.assert_allclose(gated, removed, rtol=1e-10, atol=1e-10)
    assert not np.allclose(gated, a.forward(x)[0])  # removing them changed something


def test_hard_concrete_gate_probabilities_against_sampling():
    torch.manual_seed(0)
    gate = HardConcreteGate(3, temperature=0.33, stretch=0.1)
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor([-1.5, 0.2, 2.0]))
    gate.train()
    samples = torch.stack([gate() for _ in range(40_000)])
    assert float(samples.min()) == 0.0 and float(samples.max()) == 1.0  # stretched and clipped
    open_freq = (samples > 0).double().mean(0)
    np.testing.assert_allclose(open_freq.numpy(), gate.prob_open().detach().numpy(), atol=0.01)
    # P(open) = sigmoid(log_a - beta * log(-l / r)), by hand for the middle gate
    assert float(gate.prob_open()[1]) == pytest.approx(1 / (1 + math.exp(-(0.2 - 0.33 * math.log(0.1 / 1.1)))))
    assert float(gate.penalty()) == pytest.approx(float(gate.prob_open().sum()))
    gate.eval()
    expected = np.clip(1 / (1 + np.exp(-np.array([-1.5, 0.2, 2.0]))) * 1.2 - 0.1, 0, 1)
    np.testing.assert_allclose(gate().detach().numpy(), expected, rtol=1e-6)
    assert gate.kept().tolist() == [False, True, True]
    with torch.no_grad():
        gate.log_a.copy_(torch.tensor([-0.85, -0.75, 0.0]))  # P(open) = 0.5 at log_a = 0.33 log(1/11) = -0.791
    assert gate.kept().tolist() == [False, True, True]


# -- Hugging Face models: a BertForMaskedLM and a GPT2LMHeadModel with non-zero biases, built locally
# (tests/conftest.py: hf_lm_specs), and a bare BertModel without its pretraining head (model_specs) --

HF_SENTENCES = [
    "the cat sat on the mat and the dog ran to the red mat",
    "a dog ran to the cat",
    "the mat was red and the dog was blue",
    "on the mat sat a red cat",
]


def _hf(specs, name, *, double=True):
    from evolution.models import load_adapter

    a = load_adapter(specs[name])
    if double:
        a.lm_model.double()
    return a


def _hf_items(a, seed=0):
    items = [it for it in objective_items(a, [a.tokenize(s).ids for s in HF_SENTENCES], seed=seed) if it is not None]
    assert len(items) >= 3
    return items


@pytest.mark.parametrize("name", ["bert_mlm", "gpt2_lm"])
def test_hf_mask_gradient_equals_central_finite_differences(hf_lm_specs, name):
    """Every head of a tiny BertForMaskedLM (masked-LM loss) and GPT2LMHeadModel (next-token
    loss): the summed per-sentence gradients of a padded batch against central differences."""
    a = _hf(hf_lm_specs, name)
    items = _hf_items(a)[:2]
    assert len(items[0].inputs) != len(items[1].inputs)  # padding is exercised
    assert a.attention_types == ("encoder_self",)
    grads = mask_gradients(a, items, attentions=a.attention_types)["encoder_self"]
    L, H = grads.shape[1:]
    assert (L, H) == (a.num_layers, a.num_heads) == (2, 2)
    eps = 1e-5  # transformers' eager attention computes in the model's dtype: float64 throughout
    fd = np.zeros((L, H))
    for layer in range(L):
        for h in range(H):
            up, down = torch.ones(L, H, dtype=torch.float64), torch.ones(L, H, dtype=torch.float64)
            up[layer, h] += eps
            down[layer, h] -= eps
            fd[layer, h] = (
                _loss_with_shared_gates(a, items, {"encoder_self": up})
                - _loss_with_shared_gates(a, items, {"encoder_self": down})
            ) / (2 * eps)
    np.testing.assert_allclose(grads.sum(0), fd, rtol=1e-6, atol=1e-9)
    assert np.abs(fd).max() > 1e-2 and np.abs(fd).min() > 1e-5  # every head matters to the loss


@pytest.mark.parametrize("name", ["bert_mlm", "gpt2_lm"])
def test_hf_batched_per_sentence_gradients_equal_one_sentence_at_a_time(hf_lm_specs, name):
    a = _hf(hf_lm_specs, name)
    items = _hf_items(a)
    together = mask_gradients(a, items, attentions=a.attention_types, max_batch_tokens=10_000)["encoder_self"]
    for i, it in enumerate(items):
        alone = mask_gradients(a, [it], attentions=a.attention_types)["encoder_self"]
        np.testing.assert_allclose(together[i], alone[0], rtol=1e-9, atol=1e-12)
    assert not np.allclose(together[0], together[1])


def test_hf_losses_are_the_libraries_own_pretraining_losses(hf_lm_specs):
    """The loss whose gradient is taken is the model's own: transformers' masked-LM loss on the
    corrupted positions (labels -100 elsewhere) and GPT-2's shifted next-token loss."""
    bert = _hf(hf_lm_specs, "bert_mlm")
    tok = bert.tokenizer
    long = bert.tokenize(HF_SENTENCES[0]).ids
    (item,) = objective_items(bert, [long], seed=5)
    fed = tok.convert_ids_to_tokens(item.inputs)
    assert fed[0] == "[CLS]" and fed[-1] == "[SEP]" and len(item.positions) > 0
    assert [tok.convert_ids_to_tokens(int(i)) for i in item.labels] == [
        HF_SENTENCES[0].split()[p - 1] for p in item.positions
    ]  # the original words
    assert all(fed[p] != HF_SENTENCES[0].split()[p - 1] for p in item.positions)
    assert all(fed[p] == "[MASK]" or fed[p] not in tok.all_special_tokens for p in item.positions)
    labels = torch.full((1, len(item.inputs)), -100)
    labels[0, torch.as_tensor(item.positions)] = torch.as_tensor(item.labels)
    with torch.no_grad():
        theirs = bert.lm_model(input_ids=torch.as_tensor([item.inputs]), labels=labels).loss
        ours = sentence_losses(bert, [item])
    assert float(ours[0]) == pytest.approx(float(theirs), rel=1e-6)  # transformers: loss in float32
    gpt2 = _hf(hf_lm_specs, "gpt2_lm")
    ids = gpt2.tokenize(HF_SENTENCES[1]).ids
    (item,) = objective_items(gpt2, [ids])
    assert item.inputs == ids and list(item.labels) == ids[1:] and list(item.positions) == list(range(len(ids) - 1))
    with torch.no_grad():
        theirs = gpt2.lm_model(input_ids=torch.as_tensor([ids]), labels=torch.as_tensor([ids])).loss
        ours = sentence_losses(gpt2, [item])
    assert float(ours[0]) == pytest.approx(float(theirs), rel=1e-6)  # transformers: loss in float32


def test_hf_gates_multiply_each_heads_output(hf_lm_specs):
    """BERT: the gated adapter's masked-LM logits equal a forward pass written out from the
    checkpoint with each head's output scaled (tests/test_models.py: plain_bert). GPT-2: a gate
    of 0 equals the head's value projection set to zero (the head then adds nothing)."""
    from test_models import plain_bert

    bert = _hf(hf_lm_specs, "bert_mlm")
    inp = _hf_items(bert)[0].inputs
    gates = torch.tensor([[0.3, 1.7], [0.0, 1.2]], dtype=torch.float64)
    with head_gates(bert.output_projections(), gates) as calls, torch.no_grad():
        logits = bert.logits([inp])[0].numpy()
    assert calls == [1, 1]
    ref = plain_bert(hf_lm_specs["bert_mlm"]["path"], inp, gates=gates.numpy())["logits"].numpy()
    np.testing.assert_allclose(logits, ref, rtol=1e-8, atol=1e-8)
    assert np.abs(plain_bert(hf_lm_specs["bert_mlm"]["path"], inp)["logits"].numpy() - ref).max() > 0.1

    gpt2, cut = _hf(hf_lm_specs, "gpt2_lm"), _hf(hf_lm_specs, "gpt2_lm")
    ids = gpt2.tokenize(HF_SENTENCES[2]).ids
    gates = torch.ones(2, 2, dtype=torch.float64)
    gates[1, 0] = 0.0
    with head_gates(gpt2.output_projections(), gates), torch.no_grad():
        gated = gpt2.logits([ids])
    d, dh = cut.d_model, cut.d_model // cut.num_heads
    c_attn = cut.lm_model.transformer.h[1].attn.c_attn  # Conv1D: y = x W + b, W (d, 3d) = [q | k | v]
    with torch.no_grad():
        c_attn.weight[:, 2 * d : 2 * d + dh] = 0.0
        c_attn.bias[2 * d : 2 * d + dh] = 0.0
        removed = cut.logits([ids])
        plain = gpt2.logits([ids])
    np.testing.assert_allclose(gated.numpy(), removed.numpy(), rtol=1e-10, atol=1e-10)
    assert np.abs(plain.numpy() - gated.numpy()).max() > 1e-2


def test_a_model_without_its_pretraining_head_says_why(model_specs):
    """A bare BertModel (as a sentence-embedding encoder such as MiniLM ships) has no masked-LM
    head, an encoder-decoder's decoder is not loaded: no importance, a stated reason, no crash."""
    from evolution.metrics.importance import unavailable
    from evolution.models import ModelLoadError, load_adapter

    bare = load_adapter(model_specs["bert"])
    assert "no masked-LM head" in unavailable(bare) and "cls.predictions" in unavailable(bare)
    with pytest.raises(ModelLoadError, match="no masked-LM head.*leave this model out of metrics.importance"):
        bare.logits([bare.build_input(bare.tokenize("the cat").ids)])
    assert "translation model" in unavailable(load_adapter(model_specs["marian"]))
    gpt2 = load_adapter(model_specs["gpt2"])  # a GPT2Model checkpoint: its LM head is the tied embedding
    assert unavailable(gpt2) is None


@pytest.fixture(scope="module")
def hf_stage(tmp_path_factory, hf_lm_specs, model_specs):
    """The metrics stage with importance on for the tiny BertForMaskedLM, GPT2LMHeadModel and a
    bare BertModel (no pretraining head)."""
    from conftest import SENTENCES, write_config

    from pipelines.run import main

    tmp = tmp_path_factory.mktemp("hf-importance")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    extra = (
        "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n  tsne: null\n  influence: null\n"
        "  importance: {sentences: 6}"
    )
    cfg = write_config(
        tmp / "c.yaml",
        corpus=corpus,
        workdir=tmp / "w",
        extra=extra,
        models=[hf_lm_specs["bert_mlm"], hf_lm_specs["gpt2_lm"], model_specs["bert"]],
    )
    assert main([str(cfg), "--stage", "metrics", "--no-progress"]) == 0
    return cfg


def test_metrics_stage_stores_hf_importance_as_computed_directly(hf_stage, hf_lm_specs):
    """The heads_importance group holds the Hugging Face models' importance as the numerics give
    it on the first 6 analysed sentences; the bare encoder is left out with its reason logged;
    Spearman rho between importance and confidence per model as scipy computes it."""
    import xarray as xr
    from scipy.stats import spearmanr

    from evolution.analyses.heads.importance import correlations
    from evolution.config import load_config
    from evolution.models import load_adapter
    from evolution.store import open_representations

    cfg = load_config(hf_stage)
    workdir = cfg.workdir
    ds = xr.open_zarr(str(workdir / "metrics.zarr"), group="heads_importance", consolidated=False).load()
    assert set(ds.model.values) == {"bert_mlm", "gpt2_lm"}
    for name in ("bert_mlm", "gpt2_lm"):
        reps = open_representations(str(workdir / "reps.zarr"), name)
        sentences = sorted(set(reps.sentence.values.tolist()))[:6]
        ids = [reps.token_id.values[reps.sentence.values == s].tolist() for s in sentences]
        a = load_adapter(hf_lm_specs[name])
        items = [it for it in objective_items(a, ids, seed=cfg.seed) if it is not None]
        grads = mask_gradients(a, items, attentions=a.attention_types)["encoder_self"]
        stored = ds.sel(model=name, attention="encoder_self")
        np.testing.assert_allclose(stored.importance.values, importance(grads), rtol=1e-5)
        assert int(ds.sentences.sel(model=name)) == len(items)
        assert np.isnan(ds.sel(model=name, attention="decoder_self").importance).all()
        assert np.isnan(stored.relevance).all()  # LRP: translation models only
    log = "\n".join(p.read_text() for p in (workdir / "logs").glob("*.log"))
    assert "heads_importance: bert: the checkpoint has no masked-LM head" in log
    corr = correlations(workdir / "metrics.zarr")
    heads = xr.open_zarr(str(workdir / "metrics.zarr"), group="heads", consolidated=False).load()
    for name in ("bert_mlm", "gpt2_lm"):
        conf = heads.value.sel(model=name, measure="confidence").values.ravel()
        imp = ds.importance.sel(model=name, attention="encoder_self").values.ravel()
        assert float(corr.rho.sel(model=name, pair="importance ~ confidence")) == pytest.approx(
            spearmanr(imp, conf).statistic
        )


def test_sentence_losses_are_each_items_mean_nll_over_its_own_positions():
    """A batch of items with 2, 3 and 1 predicted positions: each loss is the mean negative
    log-probability of that item's labels at that item's positions (a plain loop)."""
    from evolution.metrics.importance import Item

    logits = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    class Stub:
        def logits(self, inputs, decoder_inputs=None):
            return logits

    items = [
        Item([1], None, np.array([0, 3]), np.array([5, 1])),
        Item([1], None, np.array([1, 2, 3]), np.array([0, 2, 4])),
        Item([1], None, np.array([2]), np.array([3])),
    ]
    logp = torch.log_softmax(logits, -1).numpy()
    expected = [
        np.mean([-logp[b, p, y] for p, y in zip(it.positions, it.labels, strict=True)]) for b, it in enumerate(items)
    ]
    np.testing.assert_allclose(sentence_losses(Stub(), items).numpy(), expected, rtol=1e-12)


# -- the per-batch estimator (Hugging Face's run_bertology.py rule) beside Michel et al.'s eq. 2 --


def test_batch_importance_against_a_plain_loop_with_a_shorter_last_batch():
    """7 sentences with unequal token counts in batches of 3 (3, 3, 1): per batch, the gradient of
    the batch's mean token NLL is the token-weighted mean of its sentences' gradients; the
    importance is the mean over batches of its absolute value. With batches of 1 it is
    importance(); with one batch of all, the absolute value of the token-weighted mean."""
    from evolution.metrics.importance import BATCH_SIZE, batch_importance

    rng = np.random.default_rng(4)
    g = rng.normal(size=(7, 2, 3))
    tokens = np.array([3, 9, 1, 5, 12, 2, 7])
    expected = np.zeros((2, 3))
    batches = [[0, 1, 2], [3, 4, 5], [6]]
    for batch in batches:
        for layer in range(2):
            for h in range(3):
                loss_gradient = sum(tokens[i] * g[i, layer, h] for i in batch) / sum(tokens[i] for i in batch)
                expected[layer, h] += abs(loss_gradient) / len(batches)
    np.testing.assert_allclose(batch_importance(g, tokens, batch_size=3), expected, rtol=1e-12)
    np.testing.assert_allclose(batch_importance(g, tokens, batch_size=1), importance(g), rtol=1e-14)
    np.testing.assert_allclose(
        batch_importance(g, tokens, batch_size=100),
        np.abs((g * tokens[:, None, None]).sum(0) / tokens.sum()),
        rtol=1e-12,
    )
    assert BATCH_SIZE == 16  # experiments/MT/prune_wmt.sh --batch-size 16
    assert not np.allclose(batch_importance(g, tokens, batch_size=3), importance(g))
    with pytest.raises(ValueError, match="one count per sentence"):
        batch_importance(g, tokens[:-1])
    with pytest.raises(ValueError, match="at least one predicted token"):
        batch_importance(g, np.array([3, 0, 1, 5, 12, 2, 7]))


def test_batch_importance_signs_cancel_within_a_batch_by_hand():
    """Two sentences of 2 and 3 predicted tokens in one batch, two heads. Head 0: gradients +0.5
    and -0.3, batch gradient (2 x 0.5 - 3 x 0.3) / 5 = 0.02 against 0.4 per sentence; head 1: +0.2
    and +0.3 (same sign), (0.4 + 0.9) / 5 = 0.26 against 0.25. Per sentence head 0 ranks first, per
    batch head 1."""
    from evolution.metrics.importance import batch_importance

    g = np.array([[[0.5, 0.2]], [[-0.3, 0.3]]])  # (N=2, L=1, H=2)
    tokens = [2, 3]
    np.testing.assert_allclose(importance(g), [[0.4, 0.25]], rtol=1e-14)
    np.testing.assert_allclose(batch_importance(g, tokens, batch_size=16), [[0.02, 0.26]], rtol=1e-12)
    np.testing.assert_allclose(batch_importance(g, tokens, batch_size=2), [[0.02, 0.26]], rtol=1e-12)
    np.testing.assert_allclose(batch_importance(g, tokens, batch_size=1), [[0.4, 0.25]], rtol=1e-14)
    np.testing.assert_allclose(
        normalize_by_layer(batch_importance(g, tokens)), [[0.02, 0.26]] / np.hypot(0.02, 0.26), rtol=1e-12
    )


def test_heads_importance_group_stores_both_estimators_and_reads_units_without_the_per_batch_one(tmp_path):
    """datasets(): a unit result with importance_batch (heads_importance version 3) stores it and its
    per-layer l2 normalisation; one computed before (no such key) loads with NaN. The Spearman
    table names each estimator and gives the per-batch rows only where they are stored."""
    from types import SimpleNamespace

    from scipy.stats import spearmanr

    from evolution.analyses.heads.importance import HeadImportance
    from evolution.metrics.results import write_metrics

    per_sentence = [[0.4, 0.1, 0.3], [0.2, 0.6, 0.5]]
    per_batch = [[0.1, 0.05, 0.3], [0.25, 0.2, 0.5]]
    new = {
        "attentions": ["encoder_self"],
        "sentences": 20,
        "importance": {"encoder_self": per_sentence},
        "importance_sem": {"encoder_self": [[0.01] * 3] * 2},
        "importance_batch": {"encoder_self": per_batch},
        "batch_size": 16,
    }
    old = {k: v for k, v in new.items() if k not in ("importance_batch", "batch_size")}
    ds = HeadImportance().datasets(SimpleNamespace(names=["new", "old"]), {"new": new, "old": old})["heads_importance"]
    enc = dict(attention="encoder_self")
    np.testing.assert_allclose(ds.importance_batch.sel(model="new", **enc).values, per_batch)
    rows = np.array(per_batch)
    np.testing.assert_allclose(
        ds.importance_batch_normalized.sel(model="new", **enc).values,
        rows / np.sqrt((rows**2).sum(1, keepdims=True)),
        rtol=1e-12,
    )
    assert (
        np.isnan(ds.importance_batch.sel(model="old")).all()
        and np.isnan(ds.importance_batch_normalized.sel(model="old")).all()
    )
    np.testing.assert_allclose(ds.importance.sel(model="old", **enc).values, per_sentence)
    assert np.isnan(ds.importance_batch.sel(model="new", attention="decoder_self")).all()
    assert ds.importance_batch.attrs["batch_size"] == 16
    assert ds.importance_batch.dims == ds.importance.dims == ds.importance_batch_normalized.dims
    write_metrics(tmp_path / "m.zarr", {"heads_importance": ds}, fingerprint="test")
    ((title, table, caption),) = HeadImportance().tables(tmp_path / "m.zarr")
    both = (
        "mask importance per sentence (Michel et al. eq. 2) ~ mask importance per batch of 16 (Hugging Face's "
        "run_bertology.py)"
    )
    assert table[1:] == [["new", both, f"{spearmanr(np.ravel(per_sentence), np.ravel(per_batch)).statistic:+.2f}", "6"]]
    assert "per sentence" in caption and "per batch of 16" in caption and "importance_batch" in caption


def test_metrics_stage_stores_the_per_batch_estimator_of_the_hf_models(hf_stage, hf_lm_specs):
    """The stored importance_batch of the Hugging Face models is batch_importance of their
    per-sentence gradients, weighted by each item's number of labels, in batches of 16."""
    import xarray as xr

    from evolution.config import load_config
    from evolution.metrics.importance import batch_importance
    from evolution.models import load_adapter
    from evolution.store import open_representations

    cfg = load_config(hf_stage)
    ds = xr.open_zarr(str(cfg.workdir / "metrics.zarr"), group="heads_importance", consolidated=False).load()
    for name in ("bert_mlm", "gpt2_lm"):
        reps = open_representations(str(cfg.workdir / "reps.zarr"), name)
        sentences = sorted(set(reps.sentence.values.tolist()))[:6]
        ids = [reps.token_id.values[reps.sentence.values == s].tolist() for s in sentences]
        a = load_adapter(hf_lm_specs[name])
        items = [it for it in objective_items(a, ids, seed=cfg.seed) if it is not None]
        grads = mask_gradients(a, items, attentions=a.attention_types)["encoder_self"]
        stored = ds.importance_batch.sel(model=name, attention="encoder_self").values
        np.testing.assert_allclose(
            stored, batch_importance(grads, [len(it.labels) for it in items], batch_size=16), rtol=1e-5
        )
        assert len({len(it.labels) for it in items}) > 1  # the weights matter
