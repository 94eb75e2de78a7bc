"""Attention parsing probes (Clark et al. 2019, section 5) for every model
(``metrics.probes``): trained on one treebank (UD English-EWT dev), scored on
another (test), punctuation excluded, against the right-branching baseline and
the distance-plus-embeddings baseline (:mod:`evolution.metrics.probes`).

Group ``heads_probes``: ``uas`` (model, probe) for ``attention`` (every head's
attention in both directions), ``attention_words`` (plus the model's own
layer-0 states averaged over each word's pieces, where the paper used frozen
GloVe), ``distance_words`` and ``right_branching``; ``sentences`` (model, split:
train = the sentences fitted on, held_out, test). Each probe (the baseline
included) trains until the loss on ``metrics.probes.held_out`` of the training
treebank stops falling; ``curve_uas`` and ``curve_loss`` (model, probe, epoch)
hold its held-out UAS and mean loss per word after each epoch (NaN after it
stopped, and for right branching), ``best_epoch`` (model, probe) the epoch kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_texts, required, save_texts
from evolution.analyses.plotting import figure

__all__ = ["HeadProbes", "probe_task", "PROBES"]

PROBES = ("attention", "attention_words", "distance_words", "right_branching")
SPLITS = ("train", "test")
#: the sentence counts stored: fitted on, held out for early stopping (both from the train treebank), scored on
COUNTS = ("train", "held_out", "test")


def _probe_sentences(adapter, sentences, *, max_batch_tokens: int):
    """:class:`~evolution.metrics.probes.ProbeSentence` of every treebank sentence the model's
    tokenizer keeps word by word (others are counted as left out)."""
    from evolution.extract import batches
    from evolution.metrics.probes import ProbeSentence, word_level_attention, word_level_embeddings

    kept = []
    for s in sentences:
        tok = adapter.tokenize(s.text)
        if 0 < len(tok) <= adapter.max_content_tokens and max(tok.word_ids) + 1 == len(s):
            kept.append((s, tok))
    inputs = [adapter.build_input(tok.ids) for _, tok in kept]
    out = []
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        hidden, att = adapter.forward([inputs[i] for i in batch], attention=True)
        for b, i in enumerate(batch):
            s, tok = kept[i]
            t = len(inputs[i])
            word_ids = [-1] * adapter.content_offset + list(tok.word_ids) + [-1] * len(adapter.suffix)
            maps = word_level_attention(att[:, b, :, :t, :t].reshape(-1, t, t), word_ids)
            emb = word_level_embeddings(hidden[0, b, :t], word_ids)
            out.append(
                ProbeSentence(
                    attention=maps.astype(np.float32),
                    heads=np.asarray(s.head),
                    punct=np.asarray([r == "punct" for r in s.deprel]),
                    embeddings=emb,
                )
            )
    return out, len(sentences) - len(kept)


def probe_task(
    *,
    spec: dict,
    texts: str,
    train: str,
    test: str,
    max_sentences: int | None,
    epochs: int,
    seed: int,
    max_batch_tokens: int,
    held_out: float = 0.0,
    patience: int = 3,
    shuffle: bool = False,
    torch_threads: int = 1,
) -> dict[str, Any]:
    """UAS of each probe and baseline for one model (``texts``: the two treebanks saved by
    :func:`~evolution.analyses.base.save_texts` under ``train`` / ``test``), with each probe's
    held-out learning curve."""
    import torch

    from evolution.corpus.conllu import read_conllu, resolve_treebank
    from evolution.metrics.probes import KINDS, fit_probe, right_branching, split_held_out, uas
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    conllu = load_texts(texts)
    data, left_out = {}, {}
    for split, name in (("train", train), ("test", test)):
        sentences = read_conllu(resolve_treebank(name), max_sentences=max_sentences, text=conllu[split])
        data[split], left_out[split] = _probe_sentences(adapter, sentences, max_batch_tokens=max_batch_tokens)
    fit, held = split_held_out(data["train"], held_out, seed=seed)
    scores: dict[str, float] = {}
    curves: dict[str, dict[str, Any]] = {}
    for kind in KINDS:  # PROBES but the baseline
        probe = fit_probe(
            fit, kind=kind, epochs=epochs, seed=seed, shuffle=shuffle, held_out=held or None, patience=patience
        )
        scores[kind] = uas(probe, data["test"])
        curves[kind] = {
            "loss": [c[1] for c in probe.curve],
            "uas": [c[2] for c in probe.curve],
            "best_epoch": probe.best_epoch,
        }
    scores["right_branching"] = uas([right_branching(len(s.heads)) for s in data["test"]], data["test"])
    notes = [
        f"{spec['name']}: {n} sentence(s) of the {split} treebank left out (too long, or not aligned word by word)"
        for split, n in left_out.items()
        if n
    ]
    notes += [
        f"{spec['name']}: probe {kind} ran all {epochs} epochs without its held-out loss levelling off "
        "(raise metrics.probes.epochs)"
        for kind, c in curves.items()
        if held and len(c["loss"]) == epochs and c["best_epoch"] == epochs
    ]
    return {
        "uas": scores,
        "sentences": {"train": len(fit), "held_out": len(held), "test": len(data["test"])},
        "curves": curves,
        "notes": notes,
    }


class HeadProbes(Analysis):
    name = "heads_probes"
    version = 2  # 2: early stopping on a held-out part of the training treebank, learning curves
    section = "probes"

    def units(self, inputs: Inputs) -> list[Unit]:
        import gzip

        from evolution.corpus.conllu import resolve_treebank
        from evolution.provenance import file_hash

        cfg = required(inputs.config.probes, "probes")
        texts = {}
        for split in SPLITS:
            path = resolve_treebank(getattr(cfg, split))
            with (gzip.open if str(path).endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
                texts[split] = f.read()
        saved = save_texts(inputs.arrays_dir, "probes", texts)
        key = {split: file_hash(resolve_treebank(getattr(cfg, split))) for split in SPLITS}
        return [
            Unit(
                m.name,
                probe_task,
                dict(
                    spec=m.spec,
                    texts=saved,
                    train=cfg.train,
                    test=cfg.test,
                    max_sentences=cfg.max_sentences,
                    epochs=cfg.epochs,
                    seed=inputs.seed,
                    max_batch_tokens=inputs.max_batch_tokens,
                    held_out=cfg.held_out,
                    patience=cfg.patience,
                    shuffle=cfg.shuffle,
                    torch_threads=inputs.torch_threads,
                ),
                key={
                    "model": m.key,
                    **key,
                    "max_sentences": cfg.max_sentences,
                    "epochs": cfg.epochs,
                    "held_out": cfg.held_out,
                    "patience": cfg.patience,
                    "shuffle": cfg.shuffle,
                    "seed": inputs.seed,
                },
            )
            for m in inputs.models.values()
        ]

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        models = [n for n in inputs.names if n in results]
        if not models:
            return {}
        uas = np.array([[results[m]["uas"][p] for p in PROBES] for m in models], dtype=float)
        sentences = np.array([[results[m]["sentences"].get(s, 0) for s in COUNTS] for m in models])
        n_epochs = max([len(c["loss"]) for m in models for c in results[m].get("curves", {}).values()] + [0])
        curve = {q: np.full((len(models), len(PROBES), n_epochs), np.nan) for q in ("uas", "loss")}
        best = np.full((len(models), len(PROBES)), np.nan)
        for i, m in enumerate(models):
            for j, p in enumerate(PROBES):
                c = results[m].get("curves", {}).get(p)
                if c is None:
                    continue
                for q in ("uas", "loss"):
                    curve[q][i, j, : len(c[q])] = c[q]
                if c["best_epoch"] is not None:
                    best[i, j] = c["best_epoch"]
        dims = ("model", "probe", "epoch")
        ds = xr.Dataset(
            {
                "uas": (("model", "probe"), uas, {"long_name": "unlabelled attachment score, punct excluded"}),
                "sentences": (("model", "split"), sentences),
                "curve_uas": (dims, curve["uas"], {"long_name": "held-out UAS after each epoch"}),
                "curve_loss": (dims, curve["loss"], {"long_name": "held-out cross-entropy per word after each epoch"}),
                "best_epoch": (
                    ("model", "probe"),
                    best,
                    {"long_name": "the epoch whose weights the probe keeps (lowest held-out loss)"},
                ),
            },
            coords={
                "model": np.array(models, dtype=object),
                "probe": np.array(PROBES, dtype=object),
                "split": np.array(COUNTS, dtype=object),
                "epoch": np.arange(1, n_epochs + 1),
            },
        )
        return {"heads_probes": ds}

    def tables(self, path):
        from evolution.analyses.plotting import open_group

        ds = open_group(path, "heads_probes")
        if ds is None:
            return []
        splits = [str(x) for x in ds.split.values]
        rows = [
            [
                "model",
                *[str(p).replace("_", " ") for p in ds.probe.values],
                " / ".join(x.replace("_", "-") for x in splits) + " sentences",
                "epochs kept",
            ]
        ]
        for m in ds.model.values:
            kept = (
                " / ".join("-" if not np.isfinite(e) else str(int(e)) for e in ds.best_epoch.sel(model=m).values[:3])
                if "best_epoch" in ds
                else "1"
            )
            rows.append(
                [
                    str(m),
                    *[f"{float(ds.uas.sel(model=m, probe=p)):.3f}" for p in ds.probe.values],
                    " / ".join(str(int(v)) for v in ds.sentences.sel(model=m).values),
                    kept,
                ]
            )
        return [
            (
                "Attention parsing probes (Clark et al. 2019, Table 3)",
                rows,
                "UAS on the test treebank of probes trained on the train treebank, punctuation excluded. "
                "'attention words' adds the model's own layer-0 states where the paper used GloVe. Each probe "
                "(and the distance baseline) trains until its loss on the held-out part of the train treebank "
                "stops falling (metrics.probes.held_out, patience) and keeps its best epoch ('epochs kept': "
                "attention / attention words / distance words; figure 'Parsing probes: learning curves').",
            )
        ]


@figure
def probe_curves(path):
    """Held-out UAS of each probe after each epoch, one line per model, a dot at the epoch whose
    weights the probe keeps (lowest held-out loss); None without learning curves."""
    from evolution.analyses.plotting import WIDTH, concat, open_group, plt, tidy

    ds = open_group(path, "heads_probes")
    if ds is None or "curve_uas" not in ds or not ds.sizes.get("epoch") or not np.isfinite(ds.curve_uas).any():
        return None
    kinds = [p for p in PROBES[:3] if np.isfinite(ds.curve_uas.sel(probe=p)).any()]
    pyplot = plt()
    fig, axes = pyplot.subplots(1, len(kinds), figsize=(WIDTH, 3.0), squeeze=False, layout="constrained", sharey=True)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for m in ds.model.values:
            y = ds.curve_uas.sel(model=m, probe=kind).values
            (line,) = ax.plot(ds.epoch.values, y, label=str(m), lw=1.2)
            best = float(ds.best_epoch.sel(model=m, probe=kind))
            if np.isfinite(best):
                ax.plot([best], [y[int(best) - 1]], "o", color=line.get_color(), ms=4)
        ax.set_title(kind.replace("_", " "))
        ax.set_xlabel("epoch")
    axes[0][0].set_ylabel("held-out UAS")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    frames = [
        tidy(ds.curve_uas, "held-out UAS"),
        tidy(ds.curve_loss, "held-out loss per word"),
        tidy(ds.best_epoch, "best epoch"),
    ]
    return fig, concat(frames)


HeadProbes.figures = {
    "heads_probes_curve": (
        probe_curves,
        "Learning curves of the parsing probes: UAS on the held-out part of the "
        "training treebank after each epoch (metrics.probes.held_out), one line per "
        "model; the dot marks the epoch whose weights the probe keeps (its lowest "
        "held-out loss), after which training ran metrics.probes.patience epochs.",
    ),
}
