"""What the report says before its findings and after them: one paragraph on what was
run on what (the models with their objective, seed and token-dropout role, the corpus,
how much of it was analysed), and the provenance as a short table with the full record
beside it (``provenance.json``).

Everything comes from what the run stored: the groups' attributes of ``metrics.zarr``
(``objectives``, ``runs``, ``seed``, ``config``, ``versions``, ``extract_keys``,
``representations``), the corpus stage's ``meta.json`` and the train stage's
``eval.json`` where the caller passes them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from evolution.provenance import config_hash
from evolution.report.paths import relative_path

__all__ = ["group_attrs", "run_paragraph", "provenance"]

_OBJECTIVES = {"mt": "translation (MT)", "lm": "language model (LM)", "mlm": "masked language model (MLM)"}
#: the packages named in the short provenance table (all of them are in the full record)
MAIN_PACKAGES = (
    "python",
    "torch",
    "transformers",
    "ve-fairseq",
    "fairseq",
    "numpy",
    "xarray",
    "zarr",
    "scikit-learn",
    "faiss-cpu",
    "openTSNE",
    "dask",
)


def group_attrs(path) -> dict[str, dict]:
    """group -> its attributes, for every group of the metrics store at ``path``."""
    from evolution.metrics.results import metrics_groups, open_metrics

    out = {}
    for g in metrics_groups(path):
        try:
            out[g] = dict(open_metrics(path, g).attrs)
        except (FileNotFoundError, KeyError, ValueError, OSError):
            continue
    return out


def _first(attrs: dict[str, dict], key: str, default=None):
    return next((a[key] for a in attrs.values() if key in a), default)


def _models(path, attrs: dict[str, dict]) -> list[str]:
    objectives = _first(attrs, "objectives", {}) or {}
    if objectives:
        return list(objectives)
    from evolution.analyses.plotting import open_group

    for g in attrs:
        ds = open_group(path, g)
        if ds is not None and "model" in ds.coords:
            return [str(m) for m in ds.model.values]
    return []


def _model_list(path, attrs: dict[str, dict]) -> str:
    objectives = _first(attrs, "objectives", {}) or {}
    runs = _first(attrs, "runs", {}) or {}
    models = _models(path, attrs)
    if not models:
        return "This report found no models in the metrics store."
    by_objective: dict[str, list[str]] = {}
    for m in models:
        run = runs.get(m, {})
        role = [f"seed {run['seed']}"] if "seed" in run else []
        if run.get("token_dropout", 0.0):
            role.append(f"token dropout {run['token_dropout']:g}")
        by_objective.setdefault(objectives.get(m) or "", []).append(f"{m} ({', '.join(role)})" if role else m)
    kinds = "; ".join((f"{_OBJECTIVES.get(o, o)}: " if o else "") + ", ".join(ms) for o, ms in by_objective.items())
    n_obj = len([o for o in by_objective if o])
    return (
        f"This report analyses {len(models)} model{'s' if len(models) != 1 else ''}"
        + (f" of {n_obj} objective{'s' if n_obj != 1 else ''}" if n_obj else "")
        + f": {kinds}."
    )


def _corpus_sentence(corpus: dict | None, *, trained: bool) -> str:
    if not corpus:
        return ""
    cfg = corpus.get("config", {})
    source = cfg.get("source")
    if source == "bible":
        what = f"the Bible (SWORD modules {', '.join(cfg.get('modules', []))})"
    elif cfg.get("path"):
        what = f"{'the parallel corpus' if source == 'parallel' else 'the text'} {os.path.basename(str(cfg['path']))}"
    else:
        what = "the corpus"
    langs = corpus.get("languages") or cfg.get("languages")
    if langs and len(langs) == 2 and source in ("bible", "parallel"):
        what += f", {langs[0]} → {langs[1]}"
    annotated = corpus.get("annotated") or {}
    n_main = annotated.get("first", corpus.get("n_sentences"))
    split = corpus.get("analysed_split")
    counts = corpus.get("splits", {}).get(split, {}) if split else {}
    if split and split != "all" and counts:
        names = counts.get("group_names") or []
        analysed = (
            f"its {split} split" + (f" ({', '.join(map(str, names))})" if names else "") + f": {n_main:,} sentences"
            if isinstance(n_main, int)
            else f"its {split} split"
        )
        if counts.get("source_words"):
            analysed += f", {counts['source_words']:,} {langs[0] if langs else 'source'} words"
    else:
        analysed = f"{n_main:,} sentences" if isinstance(n_main, int) else "its sentences"
    text = f"Corpus: {what}; analysed: {analysed}"
    if annotated.get("n_sentences"):
        treebank = cfg.get("annotated")
        name = os.path.basename(str(treebank)) if treebank else "a treebank"
        text += f", plus {annotated['n_sentences']:,} annotated sentences of {name}" + (
            f" ({annotated['n_words']:,} words)" if annotated.get("n_words") else ""
        )
    train = corpus.get("splits", {}).get("train", {})
    if trained and train.get("pairs"):
        text += f"; the models train on {train['pairs']:,} sentence pairs of the train split"
    return text + "."


def _analysed_counts(path, attrs: dict[str, dict]) -> str:
    """How much the analyses measured, where stored: MI occurrences, similarity occurrences,
    head statistics' sentences."""
    from evolution.analyses.plotting import open_group

    parts = []
    if "mi" in attrs:
        mi = open_group(path, "mi")
        if mi is not None and "n" in mi and np.isfinite(mi.n.values).any():
            top = (attrs["mi"].get("config", {}).get("tokens") or {}).get("top")
            parts.append(
                f"MI on up to {int(np.nanmax(mi.n.values)):,} occurrences"
                + (f" of the {top} most frequent types" if top else "")
            )
    occ = attrs.get("similarity", {}).get("n_occurrences")
    if isinstance(occ, (int, np.integer)):
        parts.append(f"PWCCA / CKA on {int(occ):,} occurrences")
    if "heads" in attrs:
        heads = open_group(path, "heads")
        if heads is not None and "sentences" in heads.coords:
            parts.append(f"head statistics on up to {int(np.nanmax(heads.sentences.values)):,} sentences")
    return ("Measured: " + "; ".join(parts) + ".") if parts else ""


def run_paragraph(path, attrs: dict[str, dict], *, corpus: dict | None = None, trained: bool = False) -> str:
    """One paragraph: the models (objective, seed, token-dropout role), the corpus and what was
    analysed of it (``trained``: the models were trained on its train split). No dict is
    written raw."""
    parts = [_model_list(path, attrs), _corpus_sentence(corpus, trained=trained), _analysed_counts(path, attrs)]
    return " ".join(p for p in parts if p)


def _short(key: Any) -> str:
    return str(key)[:8]


def provenance(
    path, attrs: dict[str, dict], *, workdir: Path, corpus: dict | None = None, training: dict | None = None
) -> tuple[list[list[str]], dict]:
    """(rows of the short table, header first; the full record). The record keeps every
    group's ``config``, ``versions`` and ``extract_keys`` once when they agree, per group
    where they do not."""
    from evolution.metrics.results import metrics_fingerprint

    record: dict[str, Any] = {"metrics_key": metrics_fingerprint(path)}
    for key in ("seed", "representations", "config", "versions", "extract_keys"):
        values = {g: a[key] for g, a in attrs.items() if key in a}
        distinct = {config_hash(v) for v in values.values()}
        if len(distinct) == 1:
            record[key] = next(iter(values.values()))
        elif values:
            record[key] = {"by_group": values}
    if corpus:
        record["corpus"] = {
            k: corpus[k]
            for k in (
                "key",
                "inputs",
                "config",
                "versions",
                "created",
                "splits",
                "analysed_split",
                "annotated",
                "n_sentences",
            )
            if k in corpus
        }
    if training:
        record["training"] = {k: training[k] for k in ("key", "config", "versions") if k in training}
    versions = record.get("versions")
    if not isinstance(versions, dict):
        versions = {}
    if "by_group" in versions:
        versions = next(iter(versions["by_group"].values()))
    rows = [["what", "value"]]
    if versions.get("code"):
        rows.append(["code version", str(versions["code"])])
    if versions.get("evolution"):
        rows.append(["evolution", str(versions["evolution"])])
    libs = [f"{k} {versions[k]}" for k in MAIN_PACKAGES if versions.get(k)]
    if libs:
        rows.append(["libraries", ", ".join(libs)])
    if "by_group" in (record.get("versions") or {}):
        rows.append(["note", "the groups were computed with different versions: see the full record"])
    if "seed" in record:
        rows.append(["seed", str(record["seed"])])
    if record["metrics_key"]:
        rows.append(["metrics store key", str(record["metrics_key"])])
    cfg = record.get("config")
    if isinstance(cfg, dict) and "by_group" not in cfg:
        rows.append(["metrics config", f"hash {config_hash(cfg)}; sections {', '.join(map(str, cfg))}"])
    keys = record.get("extract_keys")
    if isinstance(keys, dict) and "by_group" not in keys:
        rows.append(["extraction keys", ", ".join(f"{m} {_short(k)}" for m, k in keys.items())])
    rep = record.get("representations")
    if isinstance(rep, str):
        rows.append(["representations", relative_path(rep, workdir)])
    if corpus and corpus.get("key"):
        rows.append(["corpus key", f"{corpus['key']} ({len(corpus.get('inputs', {}))} input(s) hashed)"])
    if training and training.get("key"):
        code = (training.get("versions") or {}).get("code")
        rows.append(["training key", str(training["key"]) + (f" (code {code})" if code else "")])
    return rows, record
