"""Training MT, LM and MLM on identical data with the plugin's one encoder class.

One tiny training (2 layers, d = 16, a few updates per objective) on a
synthetic parallel corpus serves every test of this module.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from evolution.config import load_config
from evolution.corpus import CorpusError
from evolution.training import evaluate, trainer, vocab

ROOT = Path(__file__).resolve().parents[1]
ENCODER_PREFIX = {"mt": "encoder.", "lm": "decoder.encoder.", "mlm": "encoder."}


def _corpus(tmp: Path) -> tuple[Path, Path]:
    """Genesis lines and a 'translation' that is learnable: each word reversed, order kept."""
    lines = [
        ln
        for ln in (ROOT / "evolution/data/web-genesis.en.txt").read_text(encoding="utf-8").splitlines()
        if 3 <= len(ln.split()) <= 25
    ][:400]
    src, tgt = tmp / "corpus.en", tmp / "corpus.xx"
    src.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    tgt.write_text("".join(" ".join(w[::-1] for w in ln.split()) + "\n" for ln in lines), encoding="utf-8")
    return src, tgt


CONFIG = """
workdir: {workdir}
cluster: synchronous
corpus:
  source: parallel
  path: {src}
  target_path: {tgt}
  languages: [en, xx]
  split: {{valid: 0.1, test: 0.1, block_lines: 20}}
  max_sentences: 30
train:
  vocab_size: 300
  layers: 2
  embed_dim: 16
  ffn_dim: 32
  heads: 2
  decoder_layers: 1
  max_positions: 128
  max_tokens: 512
  warmup_updates: 2
  updates: {{mt: 4, lm: 4, mlm: 4}}
  save_interval_updates: 2
  token_dropout: [lm]
  beam: 1
  threads: 1
extract:
  chunk_tokens: 64
  max_batch_tokens: 128
"""


def _encoder_state(checkpoint: Path, objective: str) -> dict[str, torch.Tensor]:
    state = torch.load(str(checkpoint), map_location="cpu", weights_only=False)["model"]
    prefix = ENCODER_PREFIX[objective]
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def test_three_objectives_start_from_identical_encoders(trained):
    """Encoder state dicts at step 0 are equal (built by fairseq with --init-encoder)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from evolution.nets.compat import quiet
    from evolution.nets.objectives import encoder_of, register

    register()
    paths = trained["paths"]
    init = torch.load(str(paths.init(0)), map_location="cpu", weights_only=True)
    for name in ("mt", "lm", "mlm", "lm-tokdrop"):
        args = json.loads((paths.run_dir(name) / "args.json").read_text())
        with quiet():
            ns = options.parse_args_and_arch(options.get_training_parser(), input_args=args)
            cfg = convert_namespace_to_omegaconf(ns)
            task = tasks.setup_task(cfg.task)
        torch.manual_seed(1234 + len(name))  # a different RNG state than the initial encoder's
        state = encoder_of(task.build_model(cfg.model)).state_dict()
        assert state.keys() == init.keys()
        for k in init:
            torch.testing.assert_close(state[k], init[k], rtol=0, atol=0, msg=f"{name}: {k}")


def test_checkpoints_have_identical_encoder_keys_and_shapes(trained):
    paths = trained["paths"]
    init = torch.load(str(paths.init(0)), map_location="cpu", weights_only=True)
    states = {o: _encoder_state(paths.checkpoint(o), o) for o in ("mt", "lm", "mlm")}
    for o, state in states.items():
        assert {k: tuple(v.shape) for k, v in state.items()} == {k: tuple(v.shape) for k, v in init.items()}, o
        moved = state["layers.0.fc1.weight"] - init["layers.0.fc1.weight"]
        assert moved.abs().max() > 0, f"{o}: the encoder did not train"
    assert not torch.equal(states["lm"]["layers.0.fc1.weight"], states["mlm"]["layers.0.fc1.weight"])


def test_one_vocabulary_same_ids_in_every_model(trained):
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    dicts = [paths.bin_mt / "dict.en.txt", paths.bin_mt / "dict.xx.txt", paths.bin_mono / "dict.txt"]
    assert len({d.read_text(encoding="utf-8") for d in dicts}) == 1
    assert dicts[0].read_text(encoding="utf-8").splitlines()[-1].startswith("<mask> ")
    sentence = "In the beginning God created the heavens"
    ids = {}
    for o in ("mt", "lm", "mlm"):
        adapter = FairseqAdapter(paths.checkpoint(o), data=paths.data(o), sentencepiece=paths.spm_model)
        assert adapter.objective == o
        ids[o] = adapter.tokenize(sentence).ids
    assert ids["mt"] == ids["lm"] == ids["mlm"]
    assert 3 not in ids["mt"]  # no <unk>


def test_lm_is_causal_and_mlm_is_not(trained):
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    for o, causal in (("lm", True), ("mlm", False)):
        adapter = FairseqAdapter(paths.checkpoint(o), data=paths.data(o), sentencepiece=paths.spm_model)
        a = adapter.tokenize("God said let there be light").ids
        b = a[:-1] + [a[0] if a[-1] != a[0] else a[1]]  # change the last token only
        ha, _ = adapter.forward([adapter.build_input(a)])
        hb, _ = adapter.forward([adapter.build_input(b)])
        start = len(adapter.prefix)
        before_last = slice(0, start + len(a) - 1)  # every position before the changed token
        same = np.allclose(ha[-1, 0, before_last], hb[-1, 0, before_last], atol=1e-5)
        assert same == causal, o


def test_input_token_dropout_replaces_ordinary_tokens_only_in_training(trained):
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("lm-tokdrop"), data=paths.data("lm"), sentencepiece=paths.spm_model)
    encoder = adapter._stack
    assert encoder.input_token_dropout == pytest.approx(0.1)
    d = adapter.dictionary
    tokens = torch.randint(d.nspecial, len(d) - 1, (200, 50))
    tokens[:, 0] = d.eos()
    tokens[:, -1] = d.pad()
    encoder.train()
    torch.manual_seed(0)
    dropped = encoder._drop_input_tokens(tokens)
    changed = dropped != tokens
    assert not changed[:, 0].any() and not changed[:, -1].any()  # specials never replaced
    rate = changed[:, 1:-1].float().mean().item()
    # replaced with p = 0.1; a replacement may draw the same token (1 / vocabulary)
    assert abs(rate - 0.1 * (1 - 1 / (len(d) - 1 - d.nspecial))) < 0.01
    assert dropped.max() < len(d) - 1  # never <mask>
    encoder.eval()
    assert torch.equal(encoder._drop_input_tokens(tokens), tokens)


def test_interrupted_training_resumes_from_the_last_checkpoint(trained, tmp_path):
    paths = trained["paths"]
    copy = trainer.TrainingPaths(tmp_path / "train", ("en", "xx"))
    shutil.copytree(paths.root, copy.root)
    (copy.run_dir("lm") / "done.json").unlink()  # as if the process had been killed after update 4
    for f in copy.run_dir("lm").glob("args.json"):
        f.unlink()
    cfg = trained["cfg"].train.model_copy(update={"updates": trained["cfg"].train.updates.model_copy(update={"lm": 6})})
    spec = cfg.runs(0)["lm"]
    result = trainer.train_run(copy, cfg, "lm", spec, languages=("en", "xx"), progress=False)
    assert result["resumed_from"] == 4 and result["updates"] == 6
    log = (copy.run_dir("lm") / "train.log").read_text(encoding="utf-8")
    assert "Loaded checkpoint" in log


def test_evaluation_reports_perplexity_unigram_bleu_chrf(trained):
    summary = json.loads((trained["paths"].root / "eval.json").read_text(encoding="utf-8"))
    ev = summary["evaluation"]
    assert ev["unigram_ppl"] > 1
    for o in ("lm", "mlm", "lm-tokdrop"):
        assert 1 < ev[o]["ppl"] < 10 * 300  # a few updates of a tiny model: near uniform, but finite
    assert 0 <= ev["mt"]["bleu"] <= 100 and 0 <= ev["mt"]["chrf"] <= 100
    assert set(summary["timings"]) == {"mt", "lm", "lm-tokdrop", "mlm"}


def test_trained_models_are_extracted(trained):
    import xarray as xr

    store = trained["cfg"].workdir / "reps.zarr"
    for name in ("mt", "lm", "mlm", "lm-tokdrop"):
        ds = xr.open_zarr(store, group=name, consolidated=False)
        assert ds.sizes["layer"] == 3 and ds.sizes["feature"] == 16
        assert ds.attrs["objective"] == name.split("-")[0]


def test_unigram_perplexity_by_hand(tmp_path):
    (tmp_path / "train").write_text("a a b\n", encoding="utf-8")
    (tmp_path / "test").write_text("a c\n", encoding="utf-8")
    # counts a 2, b 1, </s> 1; vocabulary 5 symbols -> total 4 + 5 = 9
    p = [(2 + 1) / 9, (0 + 1) / 9, (1 + 1) / 9]  # a, c, </s>
    expected = math.exp(-sum(math.log(x) for x in p) / 3)
    got = evaluate.unigram_perplexity(tmp_path / "train", tmp_path / "test", vocab_size=5)
    assert got == pytest.approx(expected)


def test_bleu_chrf_of_the_references_is_100():
    refs = ["el perro come", "la casa es roja y grande"]
    scores = evaluate.bleu_chrf(refs, refs)
    assert scores["bleu"] == pytest.approx(100) and scores["chrf"] == pytest.approx(100)
    assert evaluate.bleu_chrf(["x y z", "q"], refs)["bleu"] < 5


def test_vocabulary_larger_than_the_data_supports(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a b c\nb c d\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="train.vocab_size = 5000"):
        vocab.train_sentencepiece([text], tmp_path / "spm", vocab_size=5000)


def test_run_names_of_seeds_and_token_dropout():
    from evolution.config import TrainConfig

    runs = TrainConfig(seeds=[0, 1, 2], token_dropout=["mt", "lm"]).runs(0)
    assert list(runs) == [
        "mt",
        "mt-seed1",
        "mt-seed2",
        "mt-tokdrop",
        "lm",
        "lm-seed1",
        "lm-seed2",
        "lm-tokdrop",
        "mlm",
        "mlm-seed1",
        "mlm-seed2",
    ]
    assert runs["lm-tokdrop"] == {"objective": "lm", "seed": 0, "token_dropout": 0.1}
    assert runs["mlm-seed2"]["seed"] == 2


def test_masked_key_changes_only_what_attends_to_it(trained):
    """Hiding position i from the keys of block n: layers below n are unchanged; in the LM
    positions before i are unchanged at every layer (they never attend to i)."""
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    for o in ("lm", "mlm"):
        adapter = FairseqAdapter(paths.checkpoint(o), data=paths.data(o), sentencepiece=paths.spm_model)
        assert adapter.supports_key_masking
        inp = adapter.build_input(adapter.tokenize("And God saw the light that it was good").ids)
        i, block = len(inp) // 2, 1
        base = adapter.forward([inp])[0][:, 0]
        masked = adapter.forward_masked_keys([inp], masked=[(block, i)])[:, 0]
        np.testing.assert_array_equal(base[: block + 1], masked[: block + 1])  # input and block 0 output
        # one block run from its unmasked input states gives the whole stack's layer, for every block
        rows = [(b, p) for b in range(adapter.num_layers) for p in (1, i, len(inp) - 1)]
        whole = adapter.forward_masked_keys([inp] * len(rows), masked=rows)
        alone = adapter.masked_key_states(inp, base=base, masked=rows)
        np.testing.assert_allclose(
            alone, np.stack([whole[b + 1, r] for r, (b, _) in enumerate(rows)]), rtol=0, atol=1e-5
        )
        changed = np.abs(masked[block + 1] - base[block + 1]).max(axis=-1) > 1e-6
        if o == "lm":
            assert not changed[:i].any() and changed[i + 1 :].all()
        else:
            assert changed[np.arange(len(inp)) != i].all()


def test_mlm_output_states_are_those_of_the_corrupted_input(trained):
    from evolution.metrics.masked import corrupt, masked_states
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mlm"), data=paths.data("mlm"), sentencepiece=paths.spm_model)
    assert adapter.mask_id == len(adapter.dictionary) - 1
    content = {
        s: adapter.tokenize(t).ids
        for s, t in enumerate(
            ["In the beginning God created the heavens and the earth", "God saw the light and it was good"] * 20
        )
    }
    states, labels = masked_states(adapter, content, seed=3)
    assert states.shape[0] == 3 and states.shape[1] == len(labels) > 0
    # recompute sentence 0 by hand: same corruption, the states at its changed positions come first
    # only if sentence 0 sorts first; check instead that every label is an original token and that
    # the first sentence's corrupted forward reproduces its rows
    new, changed = corrupt(
        content[0],
        rng=np.random.default_rng([3, 0]),
        mask_id=adapter.mask_id,
        low=adapter.ordinary_ids[0],
        high=adapter.ordinary_ids[1],
    )
    if len(changed):
        h = adapter.forward([adapter.build_input(new)])[0][:, 0, adapter.content_offset + changed]
        match = [np.flatnonzero(np.isclose(states[-1], h[-1, j], atol=1e-5).all(axis=1)) for j in range(len(changed))]
        assert all(len(m) >= 1 for m in match)
        assert all(labels[m[0]] == content[0][c] for m, c in zip(match, changed, strict=True))
    # the ids fed at the corrupted positions (MI with the input there): BERT's 80 / 10 / 10
    again, labels_again, fed = masked_states(adapter, content, seed=3, return_inputs=True)
    np.testing.assert_array_equal(again, states)
    np.testing.assert_array_equal(labels_again, labels)
    masked, kept = fed == adapter.mask_id, fed == labels
    assert 0.65 < masked.mean() < 0.95 and kept.mean() < 0.25 and (~masked & ~kept).any()
    if len(changed):
        assert all(fed[m[0]] == new[c] for m, c in zip(match, changed, strict=True))


def test_training_key_ignores_what_is_analysed(tmp_path):
    """Analysing another split or adding annotated text reuses the trained models; changing the
    training text (here the length-ratio filter) does not."""
    from pipelines.stages import Context, CorpusStage, TrainStage

    src, tgt = _corpus(tmp_path)
    base = CONFIG.format(workdir=tmp_path / "run", src=src, tgt=tgt)

    def keys(text):
        p = tmp_path / "k.yaml"
        p.write_text(text, encoding="utf-8")
        ctx = Context(config=load_config(p))
        return CorpusStage().key(ctx), TrainStage().key(ctx)

    corpus0, train0 = keys(base)
    for changed in (
        base.replace("max_sentences: 30", "max_sentences: 10"),
        base.replace("max_sentences: 30", "max_sentences: 30\n  analyse: valid"),
        base.replace("max_sentences: 30", "max_sentences: 30\n  annotated: ud-ewt-test"),
    ):
        corpus1, train1 = keys(changed)
        assert corpus1 != corpus0 and train1 == train0
    assert keys(base.replace("max_sentences: 30", "max_sentences: 30\n  max_length_ratio: 3"))[1] != train0


def test_same_seed_trains_the_same_weights(trained, tmp_path):
    """Determinism: training the MLM (random masking, dropout) again from the same
    data, initial encoder and seed gives bit-identical weights."""
    paths = trained["paths"]
    copy = trainer.TrainingPaths(tmp_path / "train", ("en", "xx"))
    shutil.copytree(paths.root, copy.root)
    shutil.rmtree(copy.run_dir("mlm"))
    spec = trained["cfg"].train.runs(0)["mlm"]
    result = trainer.train_run(copy, trained["cfg"].train, "mlm", spec, languages=("en", "xx"), progress=False)
    assert result["resumed_from"] == 0 and result["updates"] == 4
    first = torch.load(str(paths.checkpoint("mlm")), map_location="cpu", weights_only=False)["model"]
    again = torch.load(str(copy.checkpoint("mlm")), map_location="cpu", weights_only=False)["model"]
    assert first.keys() == again.keys()
    for name in first:
        assert torch.equal(first[name], again[name]), name
    init = torch.load(str(paths.init(0)), map_location="cpu", weights_only=True)
    moved = [k for k in init if not torch.equal(init[k], first["encoder." + k])]
    assert len(moved) > len(init) // 2  # the 4 updates changed the weights: the equality above says something


def test_more_corruptions_add_occurrences_and_keep_the_first(trained):
    """``corruptions=3``: the first corruption of each sentence is the one-corruption draw
    (its states and labels are all found again), and there are about 3x as many occurrences."""
    from collections import Counter

    from evolution.metrics.masked import masked_states
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mlm"), data=paths.data("mlm"), sentencepiece=paths.spm_model)
    content = {
        s: adapter.tokenize(t).ids
        for s, t in enumerate(
            ["In the beginning God created the heavens and the earth", "God saw the light and it was good"] * 20
        )
    }
    one, labels_one = masked_states(adapter, content, seed=3)
    three, labels_three = masked_states(adapter, content, seed=3, corruptions=3)
    assert not Counter(labels_one.tolist()) - Counter(labels_three.tolist())
    assert 2 * len(labels_one) < len(labels_three) < 4 * len(labels_one)
    for row, label in zip(one[-1], labels_one, strict=True):
        hits = np.flatnonzero(np.isclose(three[-1], row, atol=1e-5).all(axis=1))
        assert len(hits) and label in labels_three[hits]


def test_norms_of_our_encoder_match_a_materialised_computation(trained):
    """Kobayashi et al. (2020) norms of this project's shared encoder (MT / LM / MLM), against
    the direct (T x T x H x d) computation from the returned hidden states and the weights."""
    from test_models import check_norms_against_materialised, fairseq_norm_reference

    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    for o in ("mt", "lm", "mlm"):
        adapter = FairseqAdapter(paths.checkpoint(o), data=paths.data(o), sentencepiece=paths.spm_model)
        assert adapter.supports_norms and hasattr(adapter._model, "shared_encoder")
        value_input, weights = fairseq_norm_reference(adapter)
        check_norms_against_materialised(
            adapter, value_input, weights, ["And God saw the light that it was good", "In the beginning"]
        )


def test_train_counts_are_counts_in_the_training_split(trained):
    """The store's train_count of every token equals its piece's count in the training split,
    counted here with SentencePiece alone (rare-token heads use it)."""
    from collections import Counter

    import sentencepiece as spm

    from evolution.store import open_representations
    from pipelines.stages import CorpusStage

    ctx, paths = trained["ctx"], trained["paths"]
    sp = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    text = (CorpusStage().directory(ctx) / "text" / "train.en").read_text(encoding="utf-8").splitlines()
    counts = Counter(p for line in text if line.strip() for p in sp.encode(line.strip(), out_type=str))
    for model in ("mt", "lm", "mlm"):
        ds = open_representations(str(ctx.workdir / "reps.zarr"), model)
        assert ds.attrs["train_count_source"].endswith("train.en")
        got = dict(zip(ds.token_str.values.tolist(), ds.train_count.values.tolist(), strict=True))
        assert got == {p: counts[p] for p in got}
        # train_rank: the piece's place when the training split's types are sorted by count (ties: the
        # smaller dictionary id first), 0 for a piece training never saw; train_types counts them
        ids = dict(zip(ds.token_str.values.tolist(), ds.token_id.values.tolist(), strict=True))
        id_of = {
            p: i
            for i, p in enumerate(
                line.split()[0] for line in (paths.root / "dict.txt").read_text(encoding="utf-8").splitlines()
            )
        }
        order = sorted(counts, key=lambda p: (-counts[p], id_of.get(p, 10**9)))
        rank = {p: r for r, p in enumerate(order, start=1)}
        got = dict(zip(ds.token_str.values.tolist(), ds.train_rank.values.tolist(), strict=True))
        assert got == {p: rank.get(p, 0) for p in got}
        assert ds.attrs["train_types"] == len(counts)
        assert len(ids) > 20


def test_extracted_layers_equal_the_encoders_return_all_hiddens(trained):
    """This project's shared encoder: the adapter's hooks (extraction) give the same layers as
    the encoder's own ``return_all_hiddens`` for MT, LM (causal) and MLM."""
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    for o in ("mt", "lm", "mlm"):
        adapter = FairseqAdapter(paths.checkpoint(o), data=paths.data(o), sentencepiece=paths.spm_model)
        inp = adapter.build_input(adapter.tokenize("And God saw the light, that it was good").ids)
        ours = adapter.forward([inp])[0][:, 0]
        with torch.inference_mode():
            states = adapter._model.shared_encoder(torch.as_tensor([inp]), return_all_hiddens=True)["encoder_states"]
        theirs = torch.stack([s[:, 0] for s in states]).float().numpy()
        assert theirs.shape == ours.shape
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_lm_perplexity_is_exp_of_a_direct_evaluation(trained):
    """eval.json's LM perplexity (fairseq-validate, 2 ** base-2 loss) equals exp of the mean
    negative log-likelihood computed here sentence by sentence with the model's own logits:
    input ``</s> x1..xn``, targets ``x1..xn </s>``, every test line of the training split layout."""
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    ev = json.loads((paths.root / "eval.json").read_text(encoding="utf-8"))["evaluation"]
    adapter = FairseqAdapter(paths.checkpoint("lm"), data=paths.data("lm"), sentencepiece=paths.spm_model)
    d, model = adapter.dictionary, adapter._model
    nll, n = 0.0, 0
    for line in (paths.spm_dir / "test.en").read_text(encoding="utf-8").splitlines():
        ids = [d.index(p) for p in line.split()]
        with torch.inference_mode():
            logits = model(torch.as_tensor([[d.eos(), *ids]]))[0][0].double()
        logp = torch.log_softmax(logits, -1)
        targets = torch.as_tensor([*ids, d.eos()])
        nll -= float(logp[torch.arange(len(targets)), targets].sum())
        n += len(targets)
    assert n > 100
    assert ev["lm"]["ppl"] == pytest.approx(math.exp(nll / n), rel=1e-3)  # fairseq logs the loss to 3 decimals


def test_influence_on_the_trained_encoder_against_a_manual_masked_forward(trained):
    """Token influence on this project's trained MT encoder equals PWCCA / CKA distances
    (independent reference implementations) between the other tokens' layer-n states of a plain
    forward and of a forward written out block by block here, in which fairseq's own encoder
    layers get the token as a padding key at block n only."""
    from test_metrics import reference_cka, reference_pwcca

    from evolution.metrics.influence import token_influence
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    enc = adapter._model.shared_encoder
    lines = [ln for ln in (paths.text / "train.en").read_text(encoding="utf-8").splitlines() if ln.strip()][:30]
    content = {s: adapter.tokenize(t).ids[:20] for s, t in enumerate(lines)}
    samples = sorted((s, pos, 0) for s, ids in content.items() for pos in (1, len(ids) // 2) if len(ids) >= 4)
    got = token_influence(
        adapter, content_ids=content, samples=samples, n_bins=1, methods=("pwcca", "cka"), min_ratio=10.0
    )
    L = adapter.num_layers
    normal, masked = {n: [] for n in range(1, L + 1)}, {n: [] for n in range(1, L + 1)}
    for s, pos, _ in samples:
        inp = adapter.build_input(content[s])
        src = torch.as_tensor([inp])
        others = [j for j in range(len(content[s])) if j != pos]
        for n in range(1, L + 1):
            with torch.inference_mode():
                x = enc.forward_embedding(src)[0].transpose(0, 1)
                runs = {"normal": x, "masked": x}
                for i, layer in enumerate(enc.layers):
                    for k in runs:
                        key = torch.zeros(src.shape, dtype=torch.bool)
                        key[0, pos] = k == "masked" and i == n - 1
                        out = layer(runs[k], encoder_padding_mask=key if key.any() else None)
                        runs[k] = out[0] if isinstance(out, tuple) else out
                    if i == n - 1:
                        break
            normal[n].append(runs["normal"][others, 0].double().numpy())
            masked[n].append(runs["masked"][others, 0].double().numpy())
    for n in range(1, L + 1):
        a, b = np.concatenate(normal[n]), np.concatenate(masked[n])
        assert len(a) >= 10 * adapter.d_model
        assert got["distance"]["pwcca"][n - 1][0] == pytest.approx(1 - reference_pwcca(a, b)[0], abs=1e-4)
        assert got["distance"]["cka"][n - 1][0] == pytest.approx(1 - reference_cka(a, b), abs=1e-4)
        assert (
            np.abs(a - b).max() > 1e-3 and got["distance"]["pwcca"][n - 1][0] > 1e-4
        )  # masking one key moves the others


def test_masked_tsne_states_are_those_of_the_masked_word(trained):
    """The masked MLM's t-SNE points: the state at each point equals a forward pass of its
    sentence with that word replaced by <mask> and the rest corrupted with the point's own
    generator (rebuilt here), batched or not."""
    from evolution.analyses.tsne import masked_point_states
    from evolution.metrics.masked import corrupt
    from evolution.models.fairseq import FairseqAdapter

    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mlm"), data=paths.data("mlm"), sentencepiece=paths.spm_model)
    lines = [
        "In the beginning God created the heavens and the earth",
        "God saw the light and it was good",
        "And God said, Let there be light: and there was light",
    ]
    content = {s: adapter.tokenize(t).ids for s, t in enumerate(lines)}
    points = [(0, 2), (1, 0), (2, 5), (2, 6)]
    states = masked_point_states(adapter, content, points, seed=4, max_batch_tokens=64)
    low, high = adapter.ordinary_ids
    for i, (s, pos) in enumerate(points):
        new, _ = corrupt(
            content[s], rng=np.random.default_rng([4, s, pos]), mask_id=adapter.mask_id, low=low, high=high
        )
        new[pos] = adapter.mask_id
        h = adapter.forward([adapter.build_input(new)])[0][:, 0, adapter.content_offset + pos]
        np.testing.assert_allclose(states[:, i], h, atol=1e-5)
        plain = adapter.forward([adapter.build_input(content[s])])[0][:, 0, adapter.content_offset + pos]
        assert np.abs(plain[-1] - states[-1, i]).max() > 1e-3  # masking changed the state


def test_only_the_runs_the_models_name_are_trained(tmp_path):
    """A config whose models take some runs from elsewhere (kind: shipped, huggingface) trains
    only the runs its ``kind: trained`` models name; a later config naming more runs of the same
    train section trains just the missing ones."""
    from evolution.config import load_config
    from pipelines.run import main
    from pipelines.stages import Context, TrainStage

    src, tgt = _corpus(tmp_path)
    text = CONFIG.format(workdir=tmp_path / "run", src=src, tgt=tgt)
    one = tmp_path / "one.yaml"
    one.write_text(text + "models:\n  - {name: lm, kind: trained}\n", encoding="utf-8")
    assert main([str(one), "--stage", "train", "--no-progress"]) == 0
    paths = TrainStage().paths(Context(config=load_config(one)))
    finished = sorted(p.name for p in (paths.root / "runs").iterdir() if (p / "done.json").is_file())
    assert finished == ["lm"]
    assert set(json.loads((paths.root / "eval.json").read_text())["evaluation"]) >= {"lm"}
    assert not {"mt", "mlm", "lm-tokdrop"} & set(json.loads((paths.root / "eval.json").read_text())["evaluation"])
    two = tmp_path / "two.yaml"
    two.write_text(text + "models:\n  - {name: lm, kind: trained}\n  - {name: mt, kind: trained}\n", encoding="utf-8")
    assert TrainStage().pending(Context(config=load_config(two))) == [f"train: mt -> {paths.root}"]
    assert TrainStage().pending(Context(config=load_config(one))) == []


def test_checkpoint_schedule_is_log_spaced_below_the_total():
    from evolution.config import CheckpointSchedule

    assert CheckpointSchedule(first=25, factor=2).updates(600) == [25, 50, 100, 200, 400]
    assert CheckpointSchedule(first=25, factor=2).updates(400) == [25, 50, 100, 200]  # the total is the run itself
    # 1, 1.5, 2.25, 3.4, 5.1, 7.6, 11.4 rounded, each once
    assert CheckpointSchedule(first=1, factor=1.5).updates(12) == [1, 2, 3, 5, 8, 11]
    assert CheckpointSchedule(first=50, factor=4).updates(50) == []


@pytest.mark.parametrize("run", ["mlm", "mt", "lm"])
def test_kept_checkpoints_are_those_of_the_uninterrupted_run(trained, tmp_path, run):
    """``train.checkpoints`` stops the run at each kept update and resumes it: the final
    weights are bit-identical to the uninterrupted run's (every objective; the MLM with its random
    masking and dropout), and the checkpoint kept at update 2 is the model of a run of 2 updates."""
    from evolution.config import CheckpointSchedule
    from evolution.models import load_adapter

    paths = trained["paths"]
    base = trained["cfg"].train
    spec = base.runs(0)[run]

    def fresh(where: Path) -> trainer.TrainingPaths:
        copy = trainer.TrainingPaths(where, ("en", "xx"))
        shutil.copytree(paths.root, copy.root)
        shutil.rmtree(copy.run_dir(run))
        return copy

    kept = fresh(tmp_path / "kept")
    cfg = base.model_copy(update={"checkpoints": CheckpointSchedule(first=1, factor=2)})
    result = trainer.train_run(kept, cfg, run, spec, languages=("en", "xx"), progress=False)
    assert result["kept"] == [1, 2] and result["updates"] == 4

    def weights(p: Path) -> dict[str, torch.Tensor]:
        return torch.load(str(p), map_location="cpu", weights_only=False)["model"]

    def same(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    assert same(weights(kept.checkpoint(run)), weights(paths.checkpoint(run)))
    short = fresh(tmp_path / "short")
    two = base.model_copy(update={"updates": base.updates.model_copy(update={run: 2})})
    trainer.train_run(short, two, run, spec, languages=("en", "xx"), progress=False)
    assert same(weights(kept.kept(run, 2)), weights(short.checkpoint(run)))
    # killed after the segment to update 2, before keeping it: the resumed run keeps it from checkpoint_last
    (short.run_dir(run) / "done.json").unlink()
    again = trainer.train_run(short, cfg, run, spec, languages=("en", "xx"), progress=False)
    assert again["resumed_from"] == 2 and again["kept"] == [2]  # update 1 passed unkept: lost (logged)
    assert same(weights(short.kept(run, 2)), weights(kept.kept(run, 2)))
    assert same(weights(short.checkpoint(run)), weights(paths.checkpoint(run)))
    assert not same(weights(kept.kept(run, 1)), weights(kept.kept(run, 2)))
    state = torch.load(str(kept.kept(run, 2)), map_location="cpu", weights_only=False)
    assert state["last_optimizer_state"] is None  # weights and arguments only
    adapter = load_adapter(
        {
            "kind": "fairseq",
            "path": str(kept.kept(run, 2)),
            "data": str(kept.data(run)),
            "sentencepiece": str(kept.spm_model),
        }
    )
    assert adapter.num_layers == 2  # the kept file loads as a model


def test_bleu_and_chrf_against_their_definitions_by_hand():
    """Corpus BLEU (Papineni et al. 2002: clipped n-gram precisions 1..4 summed over the corpus,
    their geometric mean, the brevity penalty) and corpus chrF (Popovic 2015, sacrebleu's default:
    character n-grams 1..6 without whitespace, statistics summed over the corpus, precision and
    recall averaged over the orders, F with beta = 2), each computed here from the counts: the
    two keys hold the two different scores (about 47.3 and 67.1 here)."""
    from collections import Counter

    hyps = ["the cat sat on the mat today", "a dog ran to the park"]
    refs = ["the cat sat on a mat today", "the dog ran to the big park"]

    def ngrams(seq, n):
        return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))

    log_p = 0.0
    for n in range(1, 5):
        match = sum(
            sum((ngrams(h.split(), n) & ngrams(r.split(), n)).values()) for h, r in zip(hyps, refs, strict=True)
        )
        total = sum(max(len(h.split()) - n + 1, 0) for h in hyps)
        log_p += math.log(match / total) / 4
    c, r = sum(len(h.split()) for h in hyps), sum(len(x.split()) for x in refs)
    bleu = 100 * math.exp(min(0.0, 1 - r / c)) * math.exp(log_p)

    precision = recall = 0.0
    for n in range(1, 7):
        match = hyp = ref = 0
        for h, x in zip(hyps, refs, strict=True):
            a, b = ngrams(h.replace(" ", ""), n), ngrams(x.replace(" ", ""), n)
            match += sum((a & b).values())
            hyp += sum(a.values())
            ref += sum(b.values())
        precision += match / hyp / 6
        recall += match / ref / 6
    chrf = 100 * (1 + 4) * precision * recall / (4 * precision + recall)

    scores = evaluate.bleu_chrf(hyps, refs)
    assert abs(bleu - chrf) > 10  # two different numbers
    assert scores["bleu"] == pytest.approx(bleu, abs=1e-9), (scores, bleu)
    assert scores["chrf"] == pytest.approx(chrf, abs=1e-9), (scores, chrf)
