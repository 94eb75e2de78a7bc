"""Attention parsing probes (Clark et al. 2019, section 5) for every model
(``metrics.probes``): trained on one treebank (UD English-EWT dev), scored on
another (test), punctuation excluded, against the right-branching baseline and
the distance-plus-embeddings baseline (:mod:`evolution.metrics.probes`).

Group ``heads_probes``: ``uas`` (model, probe) for ``attention`` (every head's
attention in both directions), ``attention_words`` (plus the model's own
layer-0 states averaged over each word's pieces, where the paper used frozen
GloVe), ``distance_words`` and ``right_branching``; ``sentences`` (model, split).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from evolution.analyses.base import Analysis, Inputs, Unit, load_texts, save_texts

__all__ = ["HeadProbes", "probe_task", "PROBES"]

PROBES = ("attention", "attention_words", "distance_words", "right_branching")
SPLITS = ("train", "test")


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
            out.append(ProbeSentence(attention=maps.astype(np.float32), heads=np.asarray(s.head),
                                     punct=np.asarray([r == "punct" for r in s.deprel]), embeddings=emb))
    return out, len(sentences) - len(kept)


def probe_task(*, spec: dict, texts: str, train: str, test: str, max_sentences: int | None, epochs: int, seed: int,
               max_batch_tokens: int, torch_threads: int = 1) -> dict[str, Any]:
    """UAS of each probe and baseline for one model (``texts``: the two treebanks saved by
    :func:`~evolution.analyses.base.save_texts` under ``train`` / ``test``)."""
    import torch

    from evolution.corpus.conllu import read_conllu, resolve_treebank
    from evolution.metrics.probes import fit_probe, right_branching, uas
    from evolution.models import cached_adapter

    torch.set_num_threads(torch_threads)
    adapter = cached_adapter(spec)
    conllu = load_texts(texts)
    data, left_out = {}, {}
    for split, name in (("train", train), ("test", test)):
        sentences = read_conllu(resolve_treebank(name), max_sentences=max_sentences, text=conllu[split])
        data[split], left_out[split] = _probe_sentences(adapter, sentences, max_batch_tokens=max_batch_tokens)
    scores = {kind: uas(fit_probe(data["train"], kind=kind, epochs=epochs, seed=seed), data["test"])
              for kind in PROBES[:3]}
    scores["right_branching"] = uas([right_branching(len(s.heads)) for s in data["test"]], data["test"])
    notes = [f"{spec['name']}: {n} sentence(s) of the {split} treebank left out (too long, or not aligned word "
             "by word)" for split, n in left_out.items() if n]
    return {"uas": scores, "sentences": {split: len(v) for split, v in data.items()}, "notes": notes}


class HeadProbes(Analysis):
    name = "heads_probes"
    version = 1
    section = "probes"

    def units(self, inputs: Inputs) -> list[Unit]:
        import gzip

        from evolution.corpus.conllu import resolve_treebank
        from evolution.provenance import file_hash

        cfg = inputs.config.probes
        texts = {}
        for split in SPLITS:
            path = resolve_treebank(getattr(cfg, split))
            with (gzip.open if str(path).endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
                texts[split] = f.read()
        saved = save_texts(inputs.arrays_dir, "probes", texts)
        key = {split: file_hash(resolve_treebank(getattr(cfg, split))) for split in SPLITS}
        return [Unit(m.name, probe_task,
                     dict(spec=m.spec, texts=saved, train=cfg.train, test=cfg.test, max_sentences=cfg.max_sentences,
                          epochs=cfg.epochs, seed=inputs.seed, max_batch_tokens=inputs.max_batch_tokens,
                          torch_threads=inputs.torch_threads),
                     key={"model": m.key, **key, "max_sentences": cfg.max_sentences, "epochs": cfg.epochs,
                          "seed": inputs.seed})
                for m in inputs.models.values()]

    def datasets(self, inputs: Inputs, results: dict[str, dict]) -> dict[str, xr.Dataset]:
        models = [n for n in inputs.names if n in results]
        if not models:
            return {}
        uas = np.array([[results[m]["uas"][p] for p in PROBES] for m in models], dtype=float)
        sentences = np.array([[results[m]["sentences"][s] for s in SPLITS] for m in models])
        ds = xr.Dataset({"uas": (("model", "probe"), uas, {"long_name": "unlabelled attachment score, punct excluded"}),
                         "sentences": (("model", "split"), sentences)},
                        coords={"model": np.array(models, dtype=object), "probe": np.array(PROBES, dtype=object),
                                "split": np.array(SPLITS, dtype=object)})
        return {"heads_probes": ds}

    def tables(self, path):
        from evolution.analyses.plotting import open_group

        ds = open_group(path, "heads_probes")
        if ds is None:
            return []
        rows = [["model", *[str(p).replace("_", " ") for p in ds.probe.values], "train / test sentences"]]
        for m in ds.model.values:
            rows.append([str(m), *[f"{float(ds.uas.sel(model=m, probe=p)):.3f}" for p in ds.probe.values],
                         " / ".join(str(int(v)) for v in ds.sentences.sel(model=m).values)])
        return [("Attention parsing probes (Clark et al. 2019, Table 3)", rows,
                 "UAS on the test treebank of probes trained on the train treebank, punctuation excluded. "
                 "'attention words' adds the model's own layer-0 states where the paper used GloVe.")]
