"""The two training pipelines whose BLEU the pruning analysis compares: ``fairseq-train`` (the
base MT, ``evolution/training/recipe.py``) and the pruning module's own loop
(``evolution/training/pruning.py``: ``_run``, which ``train_with_heads`` calls for the
from-scratch arms). On the tiny trained fixture:

* with the same initial weights, the same batches in the same order and no dropout, the loop
  gives fairseq-train's weights update by update (optimizer, betas, eps, schedule, warm-up,
  loss, its normalisation, label smoothing, padding, tied embeddings: the same training);
* what is left differs: the batches (fairseq fixes each batch's sentences once and only
  reorders the batches each epoch; the loop regroups the sentences every epoch), the initial
  encoder of a shipped model trained from scratch (a fresh draw, not fairseq-train's; the
  embeddings and the decoder are fairseq-train's), and the random streams (dropout);
* the training pairs are the same token ids.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from evolution.models.fairseq import FairseqAdapter
from evolution.training import fairseq_cli, pruning, pruning_batches, recipe

UPDATES = 6


def _languages(paths):
    return (paths.src, paths.tgt)


def _seed(trained) -> int:
    return int(trained["cfg"].seed)


def _train_args(trained, save_dir, *, updates: int, dropout: float | None = None) -> list[str]:
    """What trainer.run_args gives fairseq-train for run ``mt``, into ``save_dir``."""
    cfg, paths = trained["cfg"], trained["paths"]
    args = recipe.train_args(
        cfg.train,
        objective="mt",
        data=paths.data("mt"),
        languages=_languages(paths),
        updates=updates,
        seed=_seed(trained),
        save_dir=save_dir,
        init_encoder=paths.init(_seed(trained)),
        token_dropout=0.0,
        cpu=True,
    )
    if dropout is not None:
        args += ["--dropout", str(dropout)]  # argparse: the last one wins
    return args + ["--log-interval", "1"]


def _fairseq_start(args):
    """What fairseq_cli/train.py builds before its first update: the task, the model (seeded by
    --seed, the encoder from --init-encoder) and the epoch batch iterator of the train split."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from evolution.nets.compat import import_fairseq, quiet
    from evolution.nets.objectives import register

    import_fairseq()
    register()
    with quiet():
        cfg = convert_namespace_to_omegaconf(
            options.parse_args_and_arch(options.get_training_parser(), input_args=args)
        )
        np.random.seed(cfg.common.seed)
        utils.set_torch_seed(cfg.common.seed)
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        task.load_dataset("train", combine=True, epoch=1)
        itr = task.get_batch_iterator(
            dataset=task.dataset("train"),
            max_tokens=cfg.dataset.max_tokens,
            max_sentences=cfg.dataset.batch_size,
            max_positions=utils.resolve_max_positions(
                task.max_positions(), model.max_positions(), cfg.dataset.max_tokens
            ),
            ignore_invalid_inputs=True,
            required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
            seed=cfg.common.seed,
            num_shards=1,
            shard_id=0,
            num_workers=0,
            epoch=1,
        )
    return cfg, task, model, itr


def _fairseq_epochs(itr, epochs: int) -> list[list[list[int]]]:
    """The sample ids of each batch, epoch by epoch, as fairseq_cli/train.py iterates them."""
    out = []
    for _ in range(epochs):
        out.append([s["id"].tolist() for s in itr.next_epoch_itr(shuffle=True)])
    return out


def _items(task, ids):
    """fairseq's training samples as the pruning loop's Items (source with </s>, decoder input
    </s> y1..ym, labels y1..ym </s>)."""
    from evolution.metrics.importance import Item

    ds = task.dataset("train")
    eos = task.target_dictionary.eos()
    out = []
    for i in ids:
        s, t = ds[i]["source"].tolist(), ds[i]["target"].tolist()
        out.append(Item(s, [eos, *t[:-1]], np.arange(len(t)), np.asarray(t)))
    return out


def _no_dropout(model):
    from fairseq.modules import FairseqDropout

    for m in model.modules():
        if isinstance(m, FairseqDropout):
            m.p = 0.0


def _all_heads(adapter):
    return {
        a: torch.ones(len(adapter.output_projections(a)), adapter.attention_modules(a)[0].num_heads)
        for a in adapter.attention_types
    }


def _loop(trained, adapter, directory, *, updates, batches=None):
    """The from-scratch arms' training (train_with_heads' call of _run, every head kept) from the
    adapter's current weights; ``batches``: feed these instead of the loop's own."""
    cfg = trained["cfg"].train
    if batches is not None:
        pruning_batches = iter(batches)
        orig = pruning.BATCHINGS["regrouped"]
        pruning.BATCHINGS["regrouped"] = lambda items, *, max_tokens, seed: pruning_batches
    try:
        return pruning._run(
            adapter,
            [],
            directory=directory,
            updates=updates,
            lr=cfg.lr,
            max_tokens=cfg.max_tokens,
            seed=_seed(trained),
            gates={},
            fixed=_all_heads(adapter),
            lam=0.0,
            save_every=10**6,
            progress=False,
            smoothing=0.1,
            warmup=cfg.warmup_updates,
        )
    finally:
        if batches is not None:
            pruning.BATCHINGS["regrouped"] = orig


def _fairseq_train(args):
    proc = fairseq_cli.run("train", args, threads=1)
    text = proc.stdout + proc.stderr
    logs = [json.loads(m.group(0)) for m in re.finditer(r"\{[^{}]*\"num_updates\"[^{}]*\}", text)]
    return text, logs


@pytest.fixture(scope="module")
def fairseq_run(trained, tmp_path_factory):
    """fairseq-train of run mt for UPDATES updates without dropout, and its starting point."""
    save = tmp_path_factory.mktemp("fairseq-mt")
    args = _train_args(trained, save, updates=UPDATES, dropout=0.0)
    text, logs = _fairseq_train(args)
    final = torch.load(str(save / "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    _, task, model, _ = _fairseq_start(args)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    return {"args": args, "final": final, "task": task, "initial": initial, "log": text, "logs": logs}


#: the attention key projections' biases: their gradient is zero in exact arithmetic (a bias on
#: every key adds one constant to a query's scores, which the softmax removes), so both Adams
#: turn float noise into lr-sized steps that change no output; they are left out of the comparison
FUNCTION_FREE = ("k_proj.bias",)


def _max_diff(a: dict, b: dict) -> float:
    return max(
        float((a[k].float() - b[k].float()).abs().max())
        for k in a
        if a[k].is_floating_point() and not k.endswith(FUNCTION_FREE)
    )


def _loop_from_fairseqs_start(trained, fairseq_run, directory) -> dict:
    """The loop from fairseq-train's initial weights on fairseq-train's batches, without dropout."""
    paths, task = trained["paths"], fairseq_run["task"]
    epochs = _fairseq_epochs(_fairseq_start(fairseq_run["args"])[3], UPDATES)
    order = [b for e in epochs for b in e][:UPDATES]
    adapter = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    adapter._model.load_state_dict(fairseq_run["initial"])
    _no_dropout(adapter._model)
    _loop(trained, adapter, directory, updates=UPDATES, batches=[_items(task, b) for b in order])
    return {k: v.detach() for k, v in adapter._model.state_dict().items()}


def test_with_fairseqs_batches_start_and_no_dropout_the_loop_gives_fairseq_trains_weights(
    trained, fairseq_run, tmp_path, monkeypatch
):
    """Everything but the batches, the initial weights and dropout is the same training: Adam
    (0.9, 0.98), eps 1e-8, no weight decay, no clipping, inverse_sqrt from 1e-7 over the warm-up,
    label smoothing 0.1 over every vocabulary entry with padding excluded, the loss summed over
    target tokens and divided by their number, the tied embeddings trained once. What is left
    (~0.3% of an update) is the Adam implementation: fairseq's adds eps to sqrt(v) before the
    bias correction (fairseq/optim/adam.py), torch's after; with fairseq's Adam in the loop the
    two agree to float rounding."""
    final = fairseq_run["final"]
    assert final["optimizer_history"][-1]["num_updates"] == UPDATES
    want = final["model"]
    moved = _max_diff(want, fairseq_run["initial"])
    diff = _max_diff(_loop_from_fairseqs_start(trained, fairseq_run, tmp_path / "same"), want)
    from fairseq.optim.adam import Adam as FairseqAdamImpl

    monkeypatch.setattr(torch.optim, "Adam", FairseqAdamImpl)
    diff_fairseq_adam = _max_diff(_loop_from_fairseqs_start(trained, fairseq_run, tmp_path / "fairseq-adam"), want)
    monkeypatch.undo()
    print(
        f"\nfairseq-train moved the weights by up to {moved:.3g} in {UPDATES} updates; the loop ends {diff:.3g} "
        f"from them ({diff_fairseq_adam:.3g} with fairseq's Adam)"
    )
    assert moved > 1e-4
    assert diff < 1e-2 * moved
    assert diff_fairseq_adam < 1e-4 * moved

    # the same loop with its own batches (the same start, no dropout) ends elsewhere: the batches differ
    paths = trained["paths"]
    adapter2 = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    adapter2._model.load_state_dict(fairseq_run["initial"])
    _no_dropout(adapter2._model)
    items = pruning.training_items(adapter2, *_train_text(paths), max_tokens=trained["cfg"].train.max_tokens)
    cfg = trained["cfg"].train
    pruning._run(
        adapter2,
        items,
        directory=tmp_path / "own",
        updates=UPDATES,
        lr=cfg.lr,
        max_tokens=cfg.max_tokens,
        seed=_seed(trained),
        gates={},
        fixed=_all_heads(adapter2),
        lam=0.0,
        save_every=10**6,
        progress=False,
        smoothing=0.1,
        warmup=cfg.warmup_updates,
    )
    own = _max_diff({k: v.detach() for k, v in adapter2._model.state_dict().items()}, want)
    print(f"with the loop's own batches it ends {own:.3g} from them")
    assert own > 10 * diff


def _train_text(paths):
    src = (paths.text / f"train.{paths.src}").read_text(encoding="utf-8").split("\n")
    tgt = (paths.text / f"train.{paths.tgt}").read_text(encoding="utf-8").split("\n")
    keep = [
        i for i, (s, t) in enumerate(zip(src, tgt, strict=False)) if s.strip() and t.strip()
    ]  # the analysis' _pairs
    return [src[i] for i in keep], [tgt[i] for i in keep]


def test_the_learning_rate_of_every_update_is_the_same(trained, fairseq_run):
    """fairseq-train's logged rate after update u (the rate of update u + 1) is pruning.inverse_sqrt(u)."""
    cfg = trained["cfg"].train
    logged = {int(r["num_updates"]): float(r["lr"]) for r in fairseq_run["logs"] if "lr" in r and "num_updates" in r}
    assert logged, fairseq_run["log"][-2000:]
    for u, lr in logged.items():
        assert pruning.inverse_sqrt(u, lr=cfg.lr, warmup=cfg.warmup_updates) == pytest.approx(lr, rel=1e-3, abs=1e-9), u


def test_the_training_pairs_are_the_same_token_ids(trained, fairseq_run):
    """The loop's items (raw text through the adapter's SentencePiece and dictionary) are the
    binarised train split that fairseq-train reads, pair for pair."""
    paths, task = trained["paths"], fairseq_run["task"]
    adapter = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    items = pruning.training_items(adapter, *_train_text(paths))
    ds = task.dataset("train")
    binarised = sorted((tuple(ds[i]["source"].tolist()), tuple(ds[i]["target"].tolist())) for i in range(len(ds)))
    ours = sorted((tuple(it.inputs), tuple(int(x) for x in it.labels)) for it in items)
    assert ours == binarised


def test_fairseq_fixes_each_batchs_sentences_the_loop_regroups_them_every_epoch(trained, fairseq_run):
    """fairseq 0.12 (fairseq_task.get_batch_iterator) builds the batches once (indices sorted by
    source then target length, seeded by seed + 1) and only shuffles their order per epoch; the
    loop's _batches draws a new grouping every epoch (default_rng([seed, epoch]), sorted within
    blocks of 2,000 by max(source, target) length)."""
    epochs = _fairseq_epochs(_fairseq_start(fairseq_run["args"])[3], 3)
    groups = [sorted(tuple(sorted(b)) for b in e) for e in epochs]
    assert len(epochs[0]) > 1
    assert groups[0] == groups[1] == groups[2]
    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    items = pruning.training_items(adapter, *_train_text(paths))
    index = {id(it): i for i, it in enumerate(items)}
    stream = pruning_batches._batches(items, max_tokens=trained["cfg"].train.max_tokens, seed=_seed(trained))
    ours = []
    for _ in range(3):
        n, epoch = 0, []
        while n < len(items):
            b = next(stream)
            epoch.append(tuple(sorted(index[id(it)] for it in b)))
            n += len(b)
        ours.append(sorted(epoch))
    assert not (ours[0] == ours[1] == ours[2])


def test_a_shipped_models_scratch_start_shares_fairseq_trains_embeddings_and_decoder_not_its_encoder(
    trained, fairseq_run, tmp_path
):
    """train_with_heads seeds torch with the run's seed and builds the model from the adapter's
    arguments. A shipped model's arguments have no --init-encoder (shipped._MACHINE_PATHS), so
    the encoder is the one EvolutionMT.build_model draws after the decoder, where fairseq-train
    loads the initial encoder (the one fairseq would have drawn before the decoder). A
    checkpoint's arguments keep --init-encoder: its scratch start is fairseq-train's exactly."""
    from evolution.models.shipped_fairseq import ShippedAdapter
    from evolution.models.shipped_format import pack_training

    paths = trained["paths"]
    init = fairseq_run["initial"]
    pack_training(paths.root, out=tmp_path / "shipped", runs=["mt"])
    starts = {}
    for kind, adapter in (
        ("shipped", ShippedAdapter(tmp_path / "shipped" / "mt")),
        ("checkpoint", FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)),
    ):
        pruning.train_with_heads(
            adapter,
            [],
            directory=tmp_path / kind,
            layout=_all_heads(adapter),
            updates=0,
            seed=_seed(trained),
            progress=False,
        )
        starts[kind] = {k: v.detach().clone() for k, v in adapter._model.state_dict().items()}
    assert _max_diff(starts["checkpoint"], init) == 0.0
    s = starts["shipped"]
    same = sorted(k for k in init if init[k].is_floating_point() and torch.equal(s[k], init[k]))
    differ = sorted(
        k
        for k in init
        if init[k].is_floating_point()
        and not torch.equal(s[k], init[k])
        and not torch.all(init[k] == init[k].flatten()[0])
    )  # constants (biases 0, norms 1) are equal
    assert "encoder.embed_tokens.weight" in same and any(k.startswith("decoder.layers.") for k in same)
    assert differ and all(k.startswith("encoder.layers.") for k in differ), differ


def test_fixed_batches_are_fairseq_trains_batches_in_its_order(trained, fairseq_run):
    """pruning.fixed_batches (metrics.pruning.scratch_batches: fixed) on the loop's own items (the
    raw text through the adapter) yields fairseq-train's batches, sentence for sentence, in
    fairseq-train's order, for three epochs: with it the loop's batching is fairseq-train's."""
    epochs = _fairseq_epochs(_fairseq_start(fairseq_run["args"])[3], 3)
    paths = trained["paths"]
    adapter = FairseqAdapter(paths.checkpoint("mt"), data=paths.data("mt"), sentencepiece=paths.spm_model)
    items = pruning.training_items(adapter, *_train_text(paths))
    ds = fairseq_run["task"].dataset("train")
    assert [tuple(it.inputs) for it in items] == [tuple(ds[i]["source"].tolist()) for i in range(len(ds))]
    stream = pruning.fixed_batches(items, max_tokens=trained["cfg"].train.max_tokens, seed=_seed(trained))
    index = {id(it): i for i, it in enumerate(items)}
    ours = [[sorted(index[id(it)] for it in next(stream)) for _ in e] for e in epochs]
    assert ours == [[sorted(b) for b in e] for e in epochs]
    assert len(epochs[0]) > 2 and epochs[0] != epochs[1]  # the order changes, the groups do not
