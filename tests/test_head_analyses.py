"""The head analyses of the metrics stage (metrics.importance, metrics.probes) on the tiny
trained models: what the pipeline stores against the numerics run directly, and the
probes' baseline against a plain loop over the treebank."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from evolution.models.fairseq import FairseqAdapter


@pytest.fixture(scope="module")
def stage(trained, tmp_path_factory):
    from pipelines.run import main

    cfg = tmp_path_factory.mktemp("heads") / "heads.yaml"
    cfg.write_text(
        trained["cfg_path"].read_text() + "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n"
        "  tsne: null\n  influence: null\n  heads: null\n  importance: {sentences: 5}\n"
        "  probes: {max_sentences: 30}\n",
        encoding="utf-8",
    )
    assert main([str(cfg), "--stage", "metrics", "--no-progress"]) == 0
    return trained["cfg"].workdir / "metrics.zarr"


def test_metrics_stage_stores_importance_and_relevance_as_computed_directly(trained, stage):
    """The pipeline's heads_importance group holds, per (model, attention, layer, head), what the
    numerics give on the same sentences (first 5 analysed; MT teacher-forced on their references)."""
    from scipy.stats import spearmanr

    from evolution.analyses.heads.importance import correlations
    from evolution.corpus.layout import load_targets
    from evolution.metrics.importance import importance, mask_gradients, objective_items
    from evolution.metrics.relevance import head_relevance
    from evolution.store import open_representations
    from pipelines.stages import CorpusStage

    workdir = trained["cfg"].workdir
    ds = xr.open_zarr(str(workdir / "metrics.zarr"), group="heads_importance", consolidated=False).load()
    assert set(ds.model.values) == {"mt", "lm", "lm-tokdrop", "mlm"}
    reps = open_representations(str(workdir / "reps.zarr"), "mt")
    sentences = sorted(set(reps.sentence.values.tolist()))[:5]
    ids = [reps.token_id.values[reps.sentence.values == s].tolist() for s in sentences]
    targets_text = load_targets(CorpusStage().directory(trained["ctx"])).sentences
    a = FairseqAdapter(
        trained["paths"].checkpoint("mt"), data=trained["paths"].data("mt"), sentencepiece=trained["paths"].spm_model
    )
    items = objective_items(a, ids, targets=[a.tokenize_target(targets_text[s]).ids for s in sentences])
    grads = mask_gradients(a, items, attentions=a.attention_types)
    rel = head_relevance(a, items, attentions=a.attention_types)["relevance"]
    for att in a.attention_types:
        layers = grads[att].shape[1]  # the MT decoder has fewer layers: the rest of the grid is NaN
        stored = ds.sel(model="mt", attention=att)
        np.testing.assert_allclose(stored.importance.values[:layers], importance(grads[att]), rtol=1e-5)
        np.testing.assert_allclose(stored.relevance.values[:layers], rel[att], rtol=1e-5)
        assert np.isnan(stored.importance.values[layers:]).all()
        # the interval is over sentences of |dL/dxi| (the importance's own samples), scipy's sem
        from scipy.stats import sem

        np.testing.assert_allclose(stored.importance_sem.values[:layers], sem(np.abs(grads[att]), axis=0), rtol=1e-5)
        # layers numbered from 1, as the heads and pruning groups: layer 1 is the first layer's heads
        assert list(stored.layer.values[:layers]) == list(range(1, layers + 1))
        np.testing.assert_allclose(stored.importance.sel(layer=1).values, importance(grads[att])[0], rtol=1e-5)
    assert int(ds.sentences.sel(model="mt")) == 5 and int(ds.steps.sel(model="mt")) == sum(
        len(i.positions) for i in items
    )
    lm = ds.sel(model="lm")
    assert np.isnan(lm.relevance).all() and np.isnan(lm.importance.sel(attention="decoder_self")).all()
    assert np.isfinite(lm.importance.sel(attention="encoder_self")).all()
    norm = ds.importance_normalized.sel(model="mlm", attention="encoder_self").values
    np.testing.assert_allclose((norm**2).sum(-1), 1.0)
    corr = correlations(workdir / "metrics.zarr")
    r, i_ = (ds[v].sel(model="mt", attention="encoder_self").values.ravel() for v in ("relevance", "importance"))
    assert float(corr.rho.sel(model="mt", pair="relevance ~ importance")) == pytest.approx(spearmanr(r, i_).statistic)
    assert np.isnan(corr.rho.sel(model="lm", pair="relevance ~ importance"))  # no relevance for an LM


def test_probes_group_and_right_branching_against_a_plain_loop(trained, stage):
    from evolution.corpus.conllu import read_conllu, resolve_treebank

    ds = xr.open_zarr(str(stage), group="heads_probes", consolidated=False).load()
    assert list(ds.probe.values) == ["attention", "attention_words", "distance_words", "right_branching"]
    a = FairseqAdapter(
        trained["paths"].checkpoint("lm"), data=trained["paths"].data("lm"), sentencepiece=trained["paths"].spm_model
    )
    # the sentences that fit the model and whose pieces map back onto the treebank's words (all
    # models share the vocabulary and the positions)
    test = [
        s
        for s in read_conllu(resolve_treebank("ud-ewt-test"), max_sentences=30)
        if max(a.tokenize(s.text).word_ids) + 1 == len(s) and len(a.tokenize(s.text)) <= a.max_content_tokens
    ]
    assert 25 <= len(test) <= 30
    hit = total = 0
    for s in test:  # every word's head is the next word, the last word's is ROOT; punct not scored
        for i, (head, rel) in enumerate(zip(s.head, s.deprel, strict=True)):
            if rel != "punct":
                total += 1
                hit += head == (i + 2 if i + 1 < len(s) else 0)
    for m in ds.model.values:
        assert int(ds.sentences.sel(model=m, split="test")) == len(test)
        assert float(ds.uas.sel(model=m, probe="right_branching")) == pytest.approx(hit / total)
        assert 0 < float(ds.uas.sel(model=m, probe="attention")) < 1
    # the probes are fitted on the train treebank (UD EWT dev) and scored on test: refit here
    from evolution.analyses.heads.probes import _probe_sentences
    from evolution.metrics.probes import fit_probe, uas

    data = {}
    for split, name in (("train", "ud-ewt-dev"), ("test", "ud-ewt-test")):
        data[split], _ = _probe_sentences(
            a,
            read_conllu(resolve_treebank(name), max_sentences=30),
            max_batch_tokens=trained["cfg"].extract.max_batch_tokens,
        )
    assert len(data["test"]) == len(test) and len(data["train"]) != len(data["test"])
    # fitted on dev (less its held-out share, the default 0.1), not on test
    held = round(0.1 * len(data["train"]))
    assert int(ds.sentences.sel(model="lm", split="held_out")) == held
    assert int(ds.sentences.sel(model="lm", split="train")) == len(data["train"]) - held
    from evolution.metrics.probes import split_held_out

    fit, held_out = split_held_out(data["train"], 0.1, seed=trained["cfg"].seed)
    for kind in ("attention", "attention_words"):
        probe = fit_probe(
            fit, kind=kind, epochs=50, seed=trained["cfg"].seed, shuffle=True, held_out=held_out, patience=3
        )
        assert float(ds.uas.sel(model="lm", probe=kind)) == pytest.approx(uas(probe, data["test"]), abs=1e-12), kind
        # the stored learning curve is the probe's, up to the epoch it stopped at; the kept epoch is its best
        n = len(probe.curve)
        np.testing.assert_allclose(ds.curve_uas.sel(model="lm", probe=kind).values[:n], [c[2] for c in probe.curve])
        assert np.isnan(ds.curve_uas.sel(model="lm", probe=kind).values[n:]).all()
        assert int(ds.best_epoch.sel(model="lm", probe=kind)) == probe.best_epoch
    assert np.isnan(ds.curve_uas.sel(probe="right_branching")).all()


def test_pruning_group_holds_each_runs_bleu_layout_and_the_unpruned_models(trained, tmp_path):
    """metrics.pruning on the tiny MT model: one unpruned row, and per lambda an encoder-only and an
    all-attention run (the latter with its from-scratch control); BLEU of the unpruned model as
    translate + sacrebleu give it directly; encoder-only runs gate no decoder head."""
    from evolution.analyses.heads.pruning import survivor_roles
    from evolution.training import evaluate, pruning
    from pipelines.run import main

    cfg = tmp_path / "prune.yaml"
    cfg.write_text(
        trained["cfg_path"].read_text() + "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n"
        "  tsne: null\n  influence: null\n  heads: null\n  pruning: {lambdas: [0.0, 30.0], updates: 30, "
        "lr: 0.1, gate_lr: 0.1, max_tokens: 256, scratch_updates: 3, test_sentences: 4}\n",
        encoding="utf-8",
    )
    assert main([str(cfg), "--stage", "metrics", "--no-progress"]) == 0
    path = trained["cfg"].workdir / "metrics.zarr"
    ds = xr.open_zarr(str(path), group="heads_pruning", consolidated=False).load()
    assert list(ds.model.values) == ["mt"]
    assert list(ds.run.values) == ["encoder-0", "all-0", "encoder-30", "all-30"]
    enc = ds.kept.sel(model="mt", run="encoder-30")
    assert np.isnan(enc.sel(attention="decoder_self")).all() and np.isnan(enc.sel(attention="encoder_decoder")).all()
    assert set(np.unique(enc.sel(attention="encoder_self").values)) <= {0.0, 1.0}
    # lambda 30 closes more heads than lambda 0
    assert np.nansum(ds.kept.sel(model="mt", run="all-30")) < np.nansum(ds.kept.sel(model="mt", run="all-0"))
    assert np.isfinite(ds.bleu_scratch.sel(model="mt", run="all-30")) and np.isnan(
        ds.bleu_scratch.sel(model="mt", run="encoder-30")
    )
    a = FairseqAdapter(
        trained["paths"].checkpoint("mt"), data=trained["paths"].data("mt"), sentencepiece=trained["paths"].spm_model
    )
    from evolution.corpus.layout import load_targets
    from pipelines.stages import CorpusStage

    directory = CorpusStage().directory(trained["ctx"])
    sources = (directory / "sentences.txt").read_text(encoding="utf-8").splitlines()[:4]
    refs = load_targets(directory).sentences[:4]
    direct = evaluate.bleu_chrf(pruning.translate(a, [a.tokenize(s).ids for s in sources]), refs)
    assert float(ds.chrf_full.sel(model="mt")) == pytest.approx(direct["chrf"])
    # the control fine-tuned without gates: its own BLEU, not the unpruned model's
    assert np.isfinite(ds.bleu_tuned.sel(model="mt")) and float(ds.chrf_tuned.sel(model="mt")) != pytest.approx(
        direct["chrf"]
    )
    assert survivor_roles(path) is None  # no heads group in this run: roles cannot be told
    # every head from scratch (metrics.pruning.scratch_full): the same loop, seed and budget with no
    # head removed, i.e. exactly an unmasked model trained from scratch
    assert np.isfinite(ds.bleu_scratch_full.sel(model="mt")) and np.isfinite(ds.chrf_scratch_full.sel(model="mt"))
    import json

    import torch

    from evolution.analyses.base import load_texts
    from evolution.analyses.heads.pruning_run import _base_schedule, _pairs

    saved = list(trained["cfg"].workdir.rglob("pruning-*.npz"))
    assert len(saved) == 1, saved
    texts = load_texts(str(saved[0]))
    src, tgt = _pairs(texts["train_source"].split("\n"), texts["train_target"].split("\n"))
    plain = FairseqAdapter(
        trained["paths"].checkpoint("mt"), data=trained["paths"].data("mt"), sentencepiece=trained["paths"].spm_model
    )
    lr, warmup = _base_schedule(plain)
    pruning.train_with_heads(
        plain,
        pruning.training_items(plain, src, tgt, max_tokens=256),
        directory=tmp_path / "unmasked",
        layout={},
        updates=3,
        lr=lr,
        warmup=warmup,
        max_tokens=256,
        seed=trained["cfg"].seed,
        progress=False,
    )
    # the run without a pruning run beside it (those of the lambdas train their kept layout)
    full = [p for p in trained["cfg"].workdir.rglob("scratch/result.json") if not (p.parent.parent / "prune").exists()]
    assert len(full) == 1, full
    layout = json.loads(full[0].read_text())["layout"]
    assert set(layout) == {"encoder_self", "decoder_self", "encoder_decoder"}
    assert all(np.all(np.asarray(m) == 1) for m in layout.values())
    trained_full = torch.load(str(full[0].parent / "state.pt"), weights_only=True)["model"]
    for name, value in plain._model.state_dict().items():
        torch.testing.assert_close(trained_full[name], value, rtol=0, atol=0, msg=name)
    direct = evaluate.bleu_chrf(pruning.translate(plain, [plain.tokenize(s).ids for s in sources]), refs)
    assert float(ds.chrf_scratch_full.sel(model="mt")) == pytest.approx(direct["chrf"])
    # the kept layout of lambda 30 trained from scratch: its stored BLEU and chrF are sacrebleu's on
    # the translations of those weights with those heads
    runs = [
        p
        for p in trained["cfg"].workdir.rglob("prune/result.json")
        if json.loads(p.read_text())["lambda"] == 30.0 and len(json.loads(p.read_text())["attentions"]) == 3
    ]
    assert len(runs) == 1, runs
    scratch = FairseqAdapter(
        trained["paths"].checkpoint("mt"), data=trained["paths"].data("mt"), sentencepiece=trained["paths"].spm_model
    )
    scratch._model.load_state_dict(
        torch.load(str(runs[0].parent.parent / "scratch" / "state.pt"), weights_only=True)["model"]
    )
    scratch._model.eval()
    kept = pruning.kept_gates(json.loads(runs[0].read_text()))
    direct = evaluate.bleu_chrf(
        pruning.translate(scratch, [scratch.tokenize(s).ids for s in sources], gates=kept), refs
    )
    assert float(ds.bleu_scratch.sel(model="mt", run="all-30")) == pytest.approx(direct["bleu"])
    assert float(ds.chrf_scratch.sel(model="mt", run="all-30")) == pytest.approx(direct["chrf"])
    # the report's table: each row's cells are the group's numbers under their headers
    from evolution.analyses.heads.pruning import HeadPruning

    ((title, rows, _),) = HeadPruning().tables(path)
    header, body = rows[0], rows[1:]
    by_run = {(r[header.index("lambda")], r[header.index("gated")]): dict(zip(header, r, strict=True)) for r in body}
    for run in ds.run.values:
        lam, scope = f"{float(ds.lam.sel(run=run)):g}", str(ds.scope.sel(run=run).values)
        row = by_run[(lam, scope)]
        assert row["BLEU"] == f"{float(ds.bleu.sel(model='mt', run=run)):.2f}"
        assert row["chrF"] == f"{float(ds.chrf.sel(model='mt', run=run)):.2f}"
        bs = float(ds.bleu_scratch.sel(model="mt", run=run))
        assert row["BLEU from scratch"] == (f"{bs:.2f}" if np.isfinite(bs) else "")
        counts = [int(np.nansum(ds.kept.sel(model="mt", run=run, attention=a))) for a in ds.attention.values]
        assert row["heads kept (enc / dec-self / enc-dec)"].split(" / ")[0] == str(counts[0])
    assert by_run[("-", "none")]["BLEU"] == f"{float(ds.bleu_full.sel(model='mt')):.2f}"
    assert by_run[("0", "none, fine-tuned")]["chrF"] == f"{float(ds.chrf_tuned.sel(model='mt')):.2f}"
    assert (
        by_run[("-", "none, from scratch")]["BLEU from scratch"] == f"{float(ds.bleu_scratch_full.sel(model='mt')):.2f}"
    )


def test_pruning_references_alone_and_the_from_scratch_batches_enter_the_runs_key(trained, tmp_path):
    """metrics.pruning.scratch_batches: fixed trains from scratch on fairseq-train's batches
    (pruning.fixed_batches). Run after the regrouped one in the same workdir, the fixed run
    trains anew exactly the units that train from scratch (every head, and lambda 30's layout),
    each with train_with_heads(batching="fixed")'s weights, not the regrouped run's (which they
    would be if the batching were missing from a unit key); the encoder-only run is reused.
    lambdas [] then gives the references alone (no gated run), and the report is written."""
    import json

    import torch

    from evolution.analyses.base import load_texts
    from evolution.analyses.heads.pruning_run import _base_schedule, _pairs
    from evolution.training import pruning
    from pipelines.run import main

    workdir = tmp_path / "work"
    base = (
        trained["cfg_path"].read_text() + "metrics:\n  mi: null\n  neighbors: null\n  similarity: null\n"
        "  tsne: null\n  influence: null\n  heads: null\n  pruning: {lambdas: %s, control: false, updates: 2, "
        "lr: 0.1, gate_lr: 0.1, max_tokens: 256, scratch_updates: 4, test_sentences: 4, scratch_batches: %s}\n"
    )

    def run(lambdas, batching, stage="metrics"):
        cfg = tmp_path / f"{batching}.yaml"
        cfg.write_text(base % (lambdas, batching), encoding="utf-8")
        assert main([str(cfg), "--stage", stage, "--no-progress", "--workdir", str(workdir)]) == 0
        return xr.open_zarr(str(workdir / "metrics.zarr"), group="heads_pruning", consolidated=False).load()

    states, pruned = {}, set()
    for batching in ("regrouped", "fixed"):
        ds = run("[30.0]", batching)
        assert list(ds.run.values) == ["encoder-30", "all-30"]
        new = [p for p in workdir.rglob("scratch/result.json") if p not in states]
        assert len(new) == 2, (batching, new)  # every head, and lambda 30's kept layout
        runs = set(workdir.rglob("prune/result.json"))
        assert len(runs - pruned) == (2 if batching == "regrouped" else 1)  # the encoder-only run is reused
        pruned |= runs
        texts = load_texts(str(next(workdir.rglob("pruning-*.npz"))))
        src, tgt = _pairs(texts["train_source"].split("\n"), texts["train_target"].split("\n"))
        for p in new:
            states[p] = torch.load(str(p.parent / "state.pt"), weights_only=True)["model"]
            plain = FairseqAdapter(
                trained["paths"].checkpoint("mt"),
                data=trained["paths"].data("mt"),
                sentencepiece=trained["paths"].spm_model,
            )
            lr, warmup = _base_schedule(plain)
            layout = json.loads(p.read_text())["layout"]
            pruning.train_with_heads(
                plain,
                pruning.training_items(plain, src, tgt, max_tokens=256),
                directory=tmp_path / "direct" / batching / p.parent.parent.name,
                layout=layout,
                updates=4,
                lr=lr,
                warmup=warmup,
                max_tokens=256,
                seed=trained["cfg"].seed,
                progress=False,
                batching=batching,
            )
            for name, value in plain._model.state_dict().items():
                torch.testing.assert_close(states[p][name], value, rtol=0, atol=0, msg=name)
    a, b = [states[p] for p in states if not (p.parent.parent / "prune").exists()]  # every head: regrouped, fixed
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())
    ds = run("[]", "fixed", stage="report")
    assert ds.sizes["run"] == 0 and list(ds.model.values) == ["mt"]
    assert np.isfinite(ds.bleu_full.sel(model="mt")) and np.isfinite(ds.chrf_scratch_full.sel(model="mt"))
    assert np.isnan(ds.bleu_tuned.sel(model="mt"))  # control: false
    assert (workdir / "report" / "report.html").is_file()
    with pytest.raises(ValueError, match="batching 'sorted' is not one of"):
        pruning.train_with_heads(plain, [], directory=tmp_path / "bad", layout={}, updates=1, batching="sorted")


def _strings(values):
    from evolution.analyses.base import strings

    return strings(values)


def test_survivor_roles_count_kept_encoder_heads_by_role_on_a_synthetic_store(tmp_path):
    from evolution.analyses.heads.pruning import survivor_roles

    path = str(tmp_path / "metrics.zarr")
    dims = ("model", "layer", "head")
    positional = np.array([[[1, 0, 0], [0, 0, 0]]], dtype=bool)
    syntactic = np.zeros((1, 2, 3, 2), dtype=bool)
    syntactic[0, 0, 1, 1] = True  # layer 1 head 1: obj
    syntactic[0, 0, 0, 0] = True  # positional and syntactic: counted in both
    rare = np.array([[[0.0, 0.1, 0.5], [0.19, np.nan, 0.2]]])  # >= 0.2: layer 1 head 2, layer 2 head 2
    xr.Dataset(
        {
            "positional": (dims, positional),
            "syntactic": ((*dims, "syntactic_relation"), syntactic),
            "rare_token_share": (dims, rare),
        },
        coords={
            "model": _strings(["mt"]),
            "layer": [1, 2],
            "head": [0, 1, 2],
            "syntactic_relation": _strings(["nsubj", "obj"]),
        },
    ).to_zarr(path, group="heads", mode="w")
    kept = np.full((1, 2, 3, 2, 3), np.nan)
    kept[0, 0, 0] = [[1, 1, 1], [1, 0, 1]]  # run 0: all but layer 2 head 1
    kept[0, 1, 0] = [[0, 1, 0], [1, 0, 0]]  # run 1: layer 1 head 1 (syntactic), layer 2 head 0 (none)
    kept[0, 1, 1] = 1  # decoder heads are not counted
    xr.Dataset(
        {"kept": (("model", "run", "attention", "layer", "head"), kept)},
        coords={
            "model": _strings(["mt"]),
            "run": _strings(["encoder-0.1", "all-0.5"]),
            "attention": _strings(["encoder_self", "decoder_self", "encoder_decoder"]),
            "layer": [1, 2],
            "head": [0, 1, 2],
        },
    ).to_zarr(path, group="heads_pruning", mode="a")
    roles = survivor_roles(path)
    # run 0 keeps 5 heads: positional {L1H0}, syntactic {L1H0, L1H1}, rare {L1H2, L2H2}, other {L2H0}
    np.testing.assert_array_equal(roles.heads.sel(model="mt", run="encoder-0.1").values, [1, 2, 2, 1])
    np.testing.assert_array_equal(roles.heads.sel(model="mt", run="all-0.5").values, [0, 1, 0, 1])


def test_the_probes_learning_curves_are_drawn_with_their_numbers(tmp_path):
    """heads_probes with curves of unequal length (one probe stopped earlier): the report draws
    heads_probes_curve and its CSV holds every epoch's held-out UAS, and the kept epochs, as
    stored; a store without curves (version 1) draws no such figure."""
    import pandas as pd

    from evolution.analyses.heads.probes import HeadProbes
    from evolution.metrics.results import write_metrics
    from evolution.report.figures import draw_all

    class _Inputs:
        names = ["mt", "lm"]

    curve = {
        "mt": {
            "attention": [0.20, 0.25, 0.24, 0.23],
            "attention_words": [0.30, 0.31],
            "distance_words": [0.4, 0.5, 0.45],
        },
        "lm": {"attention": [0.22, 0.26, 0.27], "attention_words": [0.35, 0.41, 0.40], "distance_words": [0.5]},
    }
    results = {
        m: {
            "uas": {"attention": 0.3, "attention_words": 0.4, "distance_words": 0.5, "right_branching": 0.3},
            "sentences": {"train": 90, "held_out": 10, "test": 50},
            "curves": {
                k: {"uas": v, "loss": [1.0 - x for x in v], "best_epoch": int(np.argmax(v)) + 1}
                for k, v in curve[m].items()
            },
        }
        for m in ("mt", "lm")
    }
    ds = HeadProbes().datasets(_Inputs(), results)["heads_probes"]
    assert ds.sizes["epoch"] == 4 and np.isnan(ds.curve_uas.sel(model="lm", probe="attention", epoch=4))
    write_metrics(tmp_path / "m.zarr", {"heads_probes": ds}, fingerprint="test")
    drawn = {name for name, _, _ in draw_all(tmp_path / "m.zarr", tmp_path / "fig")}
    assert "heads_probes_curve" in drawn
    table = pd.read_csv(tmp_path / "fig" / "heads_probes_curve.csv")
    uas = table[table.quantity == "held-out UAS"]
    for m, probes in curve.items():
        for p, values in probes.items():
            got = uas[(uas.model == m) & (uas.probe == p)].sort_values("epoch").value.tolist()
            assert got == pytest.approx(values), (m, p)
    best = table[table.quantity == "best epoch"]
    assert float(best[(best.model == "lm") & (best.probe == "attention_words")].value.iloc[0]) == 2
    old = ds.drop_vars(["curve_uas", "curve_loss", "best_epoch"])
    write_metrics(tmp_path / "old.zarr", {"heads_probes": old}, fingerprint="test")
    assert "heads_probes_curve" not in {name for name, _, _ in draw_all(tmp_path / "old.zarr", tmp_path / "fig2")}


def test_every_probe_setting_that_reaches_the_task_changes_its_cache_key(tmp_path):
    """A probes unit's result is cached under its key (unit_key): each metrics.probes setting that
    reaches the task (patience, held_out, epochs, shuffle, max_sentences, the treebanks) and the
    run's seed changes the key, else a run with new settings would read the old settings' probes."""
    from types import SimpleNamespace

    from evolution.analyses.base import unit_key
    from evolution.analyses.heads.probes import HeadProbes
    from evolution.config.metrics import ProbesConfig

    analysis = HeadProbes()

    def unit(seed: int = 0, **settings):
        inputs = SimpleNamespace(
            config=SimpleNamespace(probes=ProbesConfig(**{"max_sentences": 20, **settings})),
            arrays_dir=str(tmp_path),
            models={"lm": SimpleNamespace(name="lm", spec={"name": "lm", "kind": "shipped"}, key="extract-key")},
            seed=seed,
            max_batch_tokens=512,
            torch_threads=1,
        )
        (u,) = analysis.units(inputs)
        return u

    base = unit()
    assert unit_key(analysis, unit()) == unit_key(analysis, base)  # the same settings: the same key
    changes = [
        ({"patience": 5}, "patience"),
        ({"held_out": 0.25}, "held_out"),
        ({"epochs": 7}, "epochs"),
        ({"shuffle": False}, "shuffle"),
        ({"max_sentences": 10}, "max_sentences"),
        ({"train": "ud-ewt-test"}, "train"),
    ]
    for settings, argument in changes:
        other = unit(**settings)
        assert other.kwargs[argument] != base.kwargs[argument], argument  # the task runs with the new value
        assert unit_key(analysis, other) != unit_key(analysis, base), f"{argument} changes the probes, not their key"
    other = unit(seed=1)
    assert other.kwargs["seed"] == 1 and unit_key(analysis, other) != unit_key(analysis, base), "seed"


def test_probe_word_embeddings_are_the_models_layer_0_states():
    """attention_words' word vectors are the model's own layer-0 states (the input layer, where
    Clark et al. 2019 used GloVe) averaged over each word's pieces. For the shipped LM a piece's
    layer-0 state is sqrt(d) x its token embedding plus the sinusoidal encoding (fairseq's: sin on
    the first half of the features, cos on the second, frequencies 10000^(-i / (d/2 - 1))) of its
    position, counted from padding index + 1: computed here from the weights file, word by word."""
    from pathlib import Path

    from safetensors.numpy import load_file

    from evolution.analyses.heads.probes import _probe_sentences
    from evolution.corpus.conllu import read_conllu, resolve_treebank
    from evolution.models.shipped_torch import PlainAdapter

    path = Path(__file__).resolve().parents[1] / "results" / "bible-full" / "models" / "lm"
    adapter = PlainAdapter(path)
    sentences = read_conllu(resolve_treebank("ud-ewt-test"), max_sentences=8)
    got, left_out = _probe_sentences(adapter, sentences, max_batch_tokens=512)
    table = load_file(str(path / "model.safetensors"))["decoder.encoder.embed_tokens.weight"].astype(np.float64)
    d = table.shape[1]
    freq = np.exp(-np.log(10000.0) * np.arange(d // 2) / (d // 2 - 1))
    kept = []
    for s in sentences:
        tok = adapter.tokenize(s.text)
        if 0 < len(tok) <= adapter.max_content_tokens and max(tok.word_ids) + 1 == len(s):
            kept.append((s, tok))
    assert len(kept) == len(got) >= 5 and left_out == len(sentences) - len(kept)
    by_heads = {tuple(s.head): (s, tok) for s, tok in kept}  # the task's order is its batches'
    assert len(by_heads) == len(kept)
    for probe in got:
        s, tok = by_heads[tuple(probe.heads.tolist())]
        ids = adapter.build_input(tok.ids)
        position = adapter.pad_id + 1 + np.arange(len(ids))
        layer0 = np.sqrt(d) * table[ids] + np.hstack(
            [np.sin(position[:, None] * freq), np.cos(position[:, None] * freq)]
        )
        words = np.array(
            [
                layer0[[adapter.content_offset + i for i, w in enumerate(tok.word_ids) if w == word]].mean(axis=0)
                for word in range(len(s))
            ]
        )
        assert probe.embeddings.shape == (len(s), d)
        np.testing.assert_allclose(probe.embeddings, words, rtol=1e-5, atol=1e-4, err_msg=s.text)
