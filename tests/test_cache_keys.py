"""Cache keys that cannot forget a setting.

Every field of every ``metrics`` section an analysis reads (nested models too: the t-SNE
selections) is changed, one at a time, to another valid value; the inputs are planned again
(``load_inputs``: the occurrence plan follows the config) and every analysis lists its units
(``units()`` only plans, it computes nothing). Two rules:

* the analyses that read the section get other unit keys (:data:`VARIANTS`), unless the field
  is in :data:`NO_EFFECT` with the reason it cannot change a unit's result;
* a unit of *any* analysis whose task arguments changed (the config object it is handed, the
  index arrays it reads, ...) gets another key, unless :data:`IGNORED` says why its task does
  not read what changed.

A field missing from both lists fails the test: a new setting has to be classified. The same
for the extraction key (``extract`` section and the model's fields) and the pruning units
(which need a translation model and a parallel corpus, built by hand as in test_analyses.py).
Two tiny models (a Hugging Face BERT and a fairseq masked LM, so that the MLM-output, masked
t-SNE and influence units exist) on the conftest sentences; the BERT gets a fake UPOS
annotation for the change-by-POS units.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from conftest import SENTENCES
from pydantic import BaseModel

import evolution.api as ev
from evolution.analyses import ANALYSES
from evolution.analyses.base import unit_key
from evolution.fixtures.random_init import make_fairseq_model, make_hf_model, vocabulary_of

#: the metrics config every variation starts from (small, every analysis on)
BASE: dict = {
    "tokens": {"top": 50, "min_count": 2},
    "mi": {"k": 6, "restarts": 2, "niter": 5, "bootstrap": 5},
    "neighbors": {"k": 3, "bootstrap": 5, "max_per_type": 50},
    "similarity": {"sentences": 24, "min_ratio": 1.0, "bootstrap": 2, "equal_bins": 2, "freq_bins": [1, 5, 10, 100]},
    "tsne": {
        "perplexity": 5.0,
        "max_points": 20,
        "selections": [{"name": "cat", "tokens": ["cat", "dog"], "color": "token", "masked": True}],
    },
    "influence": {"max_per_bin": 5, "bootstrap": 2, "min_ratio": 1.0, "freq_bins": [1, 5, 10, 100]},
    "heads": {"select": "ud-ewt-dev", "score": "ud-ewt-test", "max_sentences": 5},
    "importance": {"sentences": 5},
    "probes": {"max_sentences": 5, "epochs": 2},
}

#: field -> another valid value
VARIANTS: dict[str, object] = {
    "tokens.top": 3,
    "tokens.min_count": 4,
    "mi.k": 5,
    "mi.restarts": 3,
    "mi.niter": 6,
    "mi.mlm_corruptions": 2,
    "mi.algorithm": "two_level",
    "mi.bootstrap": 6,
    "mi.types": [3],
    "neighbors.k": 4,
    "neighbors.metric": "cosine",
    "neighbors.index": "ivf",
    "neighbors.max_per_type": 3,
    "neighbors.bootstrap": 6,
    "neighbors.top": 3,
    "neighbors.queries_per_unit": 8192,
    "similarity.methods": ["cka"],
    "similarity.sentences": 20,
    "similarity.min_ratio": 1.5,
    "similarity.epsilon": 1e-5,
    "similarity.freq_bins": [1, 3, 100],
    "similarity.bootstrap": 3,
    "similarity.equal_bins": 3,
    "tsne.perplexity": 6.0,
    "tsne.max_points": 10,
    "tsne.selections": [
        {"name": "cat", "tokens": ["cat", "dog"], "color": "token", "masked": True},
        {"name": "red", "tokens": ["red"]},
    ],
    "tsne.selections.0.name": "cats",
    "tsne.selections.0.tokens": ["cat"],
    "tsne.selections.0.color": "position",
    "tsne.selections.0.masked": False,
    "influence.max_per_bin": 4,
    "influence.bootstrap": 3,
    "influence.methods": ["cka"],
    "influence.min_ratio": 1.5,
    "influence.epsilon": 1e-5,
    "influence.freq_bins": [1, 3, 100],
    "heads.select": "ud-ewt-test",
    "heads.score": "ud-ewt-dev",
    "heads.max_sentences": 4,
    "heads.sentences": 3,
    "heads.word_rule": "first",
    "heads.punctuation": "unicode",
    "importance.sentences": 4,
    "importance.relevance": False,
    "probes.train": "ud-ewt-test",
    "probes.test": "ud-ewt-dev",
    "probes.max_sentences": 4,
    "probes.epochs": 3,
    "probes.held_out": 0.2,
    "probes.patience": 2,
    "probes.shuffle": False,
}

_IN_DATASETS = (
    "applied in Heads.datasets() (evolution/analyses/heads/analysis.py) to the cached unit results, "
    "not by a unit; metrics.zarr is rebuilt when it changes (MetricsStage.fingerprint keys the whole "
    "metrics section)"
)

#: fields that cannot change any unit's result, with the reason
NO_EFFECT: dict[str, tuple[object, str]] = {
    "heads.positional_share": (0.8, _IN_DATASETS),
    "heads.syntactic_margin": (0.2, _IN_DATASETS),
    "heads.relations": (["nsubj"], _IN_DATASETS),
}

#: (analysis, unit name pattern, field) -> why that unit's task does not read the changed argument
IGNORED: dict[tuple[str, str, str], str] = {
    ("mi", r".*-\d+", "mi.mlm_corruptions"): "the layer task reads no corruption; only the MLM-output unit does",
    **{
        ("similarity", r"^(?!change-).*", f"similarity.{f}"): "similarity_task (the estimates between "
        "models) reads no frequency bins; the change units, keyed by them, do"
        for f in ("freq_bins", "equal_bins")
    },
    **{
        ("heads", r".*-dependency-.*", f"heads.{f}"): "dependency_task reads heads.max_sentences and "
        "heads.word_rule only (both keyed)"
        for f in ("positional_share", "syntactic_margin", "relations", "punctuation", "sentences")
    },
    ("heads", r".*-dependency-score", "heads.select"): "a dependency unit reads its own split's treebank "
    "(keyed by its file hash), not the other's",
    ("heads", r".*-dependency-select", "heads.score"): "a dependency unit reads its own split's treebank "
    "(keyed by its file hash), not the other's",
}

#: (analysis, field) -> a real omission, skipped by the walk and tested on its own (none left: the
#: t-SNE key missed the neighbour sampling that moves its occurrences until it held their hash;
#: test_tsne_unit_keys_follow_the_neighbour_sampling_that_moves_their_occurrences)
KNOWN: dict[tuple[str, str], str] = {}


# -- the walk ---------------------------------------------------------------------------------------------


def _fields(model: BaseModel, prefix: str) -> list[str]:
    """Dotted paths of every field of a pydantic ``model``, nested models and the first model of a
    list of models included (beside the field itself)."""
    out = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{prefix}.{name}"
        out.append(path)
        if isinstance(value, BaseModel):
            out += _fields(value, path)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            out += _fields(value[0], f"{path}.0")
    return out


def _with(raw: dict, path: str, value) -> dict:
    out = copy.deepcopy(raw)
    *head, last = path.split(".")
    node = out
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def _same(a, b) -> bool:
    """Deep equality of task arguments (arrays, pydantic sections, containers)."""
    if isinstance(a, BaseModel) or isinstance(b, BaseModel):
        return type(a) is type(b) and a.model_dump(mode="json") == b.model_dump(mode="json")
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _plan(analyses, inputs) -> dict[str, dict[str, tuple[str, dict]]]:
    """analysis -> unit name -> (cache key, task arguments)."""
    return {a.name: {u.name: (unit_key(a, u), u.kwargs) for u in a.units(inputs)} for a in analyses}


def _problems(
    field: str, base: dict, changed: dict, readers: set[str], effect: bool, *, known: bool = False
) -> list[str]:
    """What breaks the two rules (module docstring) when ``field`` changes; the :data:`KNOWN`
    omissions only with ``known``."""
    out = []
    for analysis, units in base.items():
        other = changed[analysis]
        keys_moved = {n: k for n, (k, _) in units.items()} != {n: k for n, (k, _) in other.items()}
        if analysis in readers and effect and not keys_moved:
            out.append(f"{field}: no unit key of {analysis} changed")
        for name, (key, kwargs) in units.items():
            if name not in other or other[name][0] != key or _same(kwargs, other[name][1]):
                continue
            if any(a == analysis and f == field and re.fullmatch(p, name) for (a, p, f) in IGNORED):
                continue
            if (analysis, field) in KNOWN and not known:
                continue
            what = [k for k in kwargs if not _same(kwargs[k], other[name][1].get(k))]
            out.append(f"{field}: {analysis} unit {name} gets other {what} under the same key")
    return out


# -- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cache-keys")
    words = vocabulary_of(SENTENCES)
    bert = make_hf_model(
        tmp / "bert", arch="bert", words=words, layers=2, d_model=16, heads=2, max_positions=32, seed=1
    )
    ckpt, data = make_fairseq_model(
        tmp / "mlm", task="masked_lm", words=words, layers=2, d_model=16, heads=2, max_positions=32, seed=1
    )
    models = [ev.load(str(bert), name="bert"), ev.load(str(ckpt), data=str(data), name="mlm")]
    return ev.represent(models, SENTENCES, attention=5)


def _inputs(reps, raw: dict):
    from evolution.api.analyses import inputs_for
    from evolution.config import MetricsConfig

    config = MetricsConfig.model_validate(raw, context={"base_dir": Path.cwd()})
    inputs = inputs_for(reps, config, seed=3)
    bert = inputs.models["bert"]  # a fake UPOS annotation of its main text: the change-by-POS units
    rows = np.flatnonzero(bert.primary)
    bert.annotation = {"upos": np.asarray(bert.coords["token_id"]) % 3}
    bert.coords["upos"] = np.array(["NOUN", "VERB", "DET"], dtype=object)[np.asarray(bert.coords["token_id"]) % 3]
    bert.plan.annotated_rows = rows
    return inputs


def test_every_metrics_field_reaches_the_keys_of_what_it_changes(reps):
    from evolution.config import MetricsConfig

    analyses = [a for a in ANALYSES if a.section not in (None, "pruning")]
    base_config = MetricsConfig.model_validate(BASE, context={"base_dir": Path.cwd()})
    walked = [f for s in BASE for f in _fields(getattr(base_config, s), s)]
    assert sorted(walked) == sorted([*VARIANTS, *NO_EFFECT]), "classify every field: VARIANTS or NO_EFFECT"

    base = _plan(analyses, _inputs(reps, BASE))
    assert all(base[a.name] for a in analyses), {a: list(u) for a, u in base.items()}  # every analysis has units
    assert any(n.endswith("mlm-output") for n in base["mi"]) and "mlm" in base["influence"]
    readers = {s: {a.name for a in analyses if a.section == s} for s in BASE}
    readers["tokens"] = {"mi", "neighbors"}
    problems = []
    for field, value in [*VARIANTS.items(), *((f, v) for f, (v, _) in NO_EFFECT.items())]:
        changed = _plan(analyses, _inputs(reps, _with(BASE, field, value)))
        problems += _problems(field, base, changed, readers[field.split(".")[0]], field in VARIANTS)
    assert not problems, "\n".join(problems)


def test_tsne_unit_keys_follow_the_neighbour_sampling_that_moves_their_occurrences(reps):
    analyses = [a for a in ANALYSES if a.name == "tsne"]
    base = _plan(analyses, _inputs(reps, BASE))
    field = "neighbors.max_per_type"
    changed = _plan(analyses, _inputs(reps, _with(BASE, field, VARIANTS[field])))
    problems = _problems(field, base, changed, set(), True, known=True)
    assert not problems, "\n".join(problems)


# -- pruning -------------------------------------------------------------------------------------------------

PRUNING_BASE = {"lambdas": [0.5, 0.25], "updates": 2, "scratch_updates": 4}
PRUNING_VARIANTS = {
    "pruning.lambdas": [0.5],
    "pruning.updates": 3,
    "pruning.lr": 2e-4,
    "pruning.gate_lr": None,
    "pruning.control": False,
    "pruning.max_tokens": 128,
    "pruning.scratch_updates": 5,
    "pruning.scratch_lambdas": [0.5],
    "pruning.scratch_full": False,
    "pruning.scratch_batches": "fixed",
    "pruning.test_sentences": 1,
    "pruning.models": ["other"],
}
#: (unit name pattern, field) -> why that unit's run does not read the changed argument
PRUNING_IGNORED = {
    (r".*-scratch", "pruning.updates"): "the scratch run trains for scratch_updates (keyed), not updates",
    (r".*-scratch", "pruning.lr"): "the scratch run takes the model's own learning-rate schedule, not lr",
    (r".*-(full|tuned|encoder-.*)", "pruning.scratch_batches"): "only runs trained from scratch batch by it",
    (r".*-(full|tuned|encoder-.*)", "pruning.scratch_lambdas"): "only the all-attention runs train from scratch",
    (r".*-(full|tuned|encoder-.*)", "pruning.scratch_updates"): "only the all-attention runs train from scratch",
}


def test_every_pruning_field_reaches_the_keys_of_its_runs(tmp_path):
    from evolution.analyses.base import Inputs, ModelInputs
    from evolution.analyses.heads.pruning import HeadPruning
    from evolution.config import MetricsConfig

    corpus = tmp_path / "corpus"
    (corpus / "data").mkdir(parents=True)
    (corpus / "data" / "train.en").write_text("a b\nc d\n", encoding="utf-8")
    (corpus / "data" / "train.es").write_text("x y\nz w\n", encoding="utf-8")
    (corpus / "sentences.txt").write_text("a b\nc d\n", encoding="utf-8")
    weights = tmp_path / "mt.pt"
    weights.write_bytes(b"weights")
    arrays = tmp_path / "work" / "arrays"
    arrays.mkdir(parents=True)

    def plan(pruning: dict) -> dict:
        model = ModelInputs(
            name="mt",
            kind="fairseq",
            objective="mt",
            key="k",
            spec={"kind": "fairseq", "path": str(weights)},
            n_layers=2,
            d_model=4,
            coords={},
            primary=np.ones(0, bool),
            annotation=None,
            freq_rank=np.zeros(0, int),
            plan=None,
        )
        inputs = Inputs(
            store="unused",
            models={"mt": model},
            config=MetricsConfig(pruning=pruning),
            seed=3,
            torch_threads=1,
            arrays_dir=str(arrays),
            targets=SimpleNamespace(training_text=corpus / "data" / "train.es", sentences=["x y", "z w"]),
        )
        return _plan([HeadPruning()], inputs)

    walked = _fields(MetricsConfig(pruning=PRUNING_BASE).pruning, "pruning")
    assert sorted(walked) == sorted(PRUNING_VARIANTS)
    base = plan(PRUNING_BASE)
    assert len(base[HeadPruning.name]) == 7  # scratch, full, tuned, encoder and all per lambda
    problems = []
    for field, value in PRUNING_VARIANTS.items():
        changed = plan(_with({"pruning": PRUNING_BASE}, field, value)["pruning"])
        found = _problems(field, base, changed, {HeadPruning.name}, True)
        problems += [
            p
            for p in found
            if not any(f == field and re.search(rf"unit {pat} gets", p) for (pat, f) in PRUNING_IGNORED)
        ]
    assert not problems, "\n".join(problems)


# -- the extraction key --------------------------------------------------------------------------------------

EXTRACT_VARIANTS = {
    "extract.dtype": "float16",
    "extract.chunk_tokens": 64,
    "extract.task_chunks": 3,
    "extract.compressor": "zstd",
    "extract.max_batch_tokens": 128,
    "extract.too_long": "skip",
    "extract.attention": None,
    "extract.attention.sentences": 4,
    "extract.attention.dtype": "float32",
    "extract.attention.norms": False,
    "extract.torch_threads": 2,
    "extract.device": "cpu",
    "extract.layers": [0, -1],  # keyed when set; left out while null (the keys of every earlier run)
    "extract.rows": "needed",  # keyed when set, with the metrics settings and seed (tests/test_extract_rows.py)
}
EXTRACT_EXEMPT = {
    "extract.store": (
        "memory://elsewhere/reps.zarr",
        "where the store lies is not what it holds (ExtractStage.model_key sets it to None)",
    ),
    "extract.memory_check": (
        "warn",
        "whether a plan over the memory limit stops the run changes nothing stored (ExtractConfig.keyed drops it)",
    ),
}


def _config_file(tmp: Path, raw: dict, name: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _extract_key(path: Path, model: str = "bert") -> str:
    from evolution.config import load_config
    from pipelines.stages import Context, ExtractStage

    ctx = Context(config=load_config(path))
    return ExtractStage().model_key(ctx, next(m for m in ctx.config.models if m.name == model))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("extract-keys")
    words = vocabulary_of(SENTENCES)
    for name, seed in (("bert", 1), ("bert2", 2)):
        make_hf_model(tmp / name, arch="bert", words=words, layers=2, d_model=16, heads=2, max_positions=32, seed=seed)
    ckpt, data = make_fairseq_model(
        tmp / "lm", task="language_modeling", words=words, layers=2, d_model=16, heads=2, max_positions=32, seed=1
    )
    other = tmp / "lm2"
    other.mkdir()
    (other / "dict.txt").write_text((data / "dict.txt").read_text(encoding="utf-8") + "extra 1\n", encoding="utf-8")
    (tmp / "spm.model").write_bytes(b"not a real model: only its hash counts here")
    (tmp / "corpus.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    raw = {
        "workdir": str(tmp / "w"),
        "corpus": {"path": str(tmp / "corpus.txt")},
        "extract": {"chunk_tokens": 32, "attention": {"sentences": 5}},
        "models": [
            {"name": "bert", "kind": "huggingface", "path": str(tmp / "bert")},
            {"name": "lm", "kind": "fairseq", "path": str(ckpt), "data": str(data)},
        ],
    }
    return SimpleNamespace(tmp=tmp, raw=raw, other_data=other)


def test_every_extract_field_reaches_the_extraction_key(project):
    from evolution.config import load_config

    base_path = _config_file(project.tmp, project.raw, "base")
    extract = load_config(base_path).extract
    walked = _fields(extract, "extract")
    assert sorted(walked) == sorted([*EXTRACT_VARIANTS, *EXTRACT_EXEMPT])
    base = _extract_key(base_path)
    for i, (field, value) in enumerate([*EXTRACT_VARIANTS.items(), *((f, v) for f, (v, _) in EXTRACT_EXEMPT.items())]):
        raw = _with(project.raw, field, value)
        if field == "extract.layers":  # some layers only: an analysis that compares them all is refused
            raw = _with(raw, "metrics.similarity", None)  # (metrics settings are not in the extraction key)
        key = _extract_key(_config_file(project.tmp, raw, f"x{i}"))
        assert (key != base) == (field in EXTRACT_VARIANTS), field


#: model field -> (model, another valid value); None: the field is in MODEL_EXEMPT
MODEL_VARIANTS = {
    "name": ("bert", "bert_b"),
    "objective": ("bert", "mlm"),
    "hub_id": ("bert", "org/bert-tiny"),
    "path": ("bert", "bert2"),  # another model's files
    "series": ("bert", "bert"),
    "step": ("bert", 100),
    "revision": ("bert", "step100"),
    "data": ("lm", "lm2"),  # another dictionary
    "sentencepiece": ("lm", "spm.model"),
}
MODEL_EXEMPT = {
    "kind": "another kind needs other files (path, data), whose change is tested by itself",
    "run": "kind: trained only: its key is the train stage's (TrainStage.key) and the run's name",
    "update": "kind: trained only (keyed with the run, ExtractStage.model_key)",
    "revisions": "declares a series (evolution/series.py), which is expanded into members before any "
    "extraction; each member's revision / step are keyed",
    "checkpoints": "declares a series, as revisions",
}


def test_every_model_field_reaches_the_extraction_key(project):
    from evolution.config import ModelConfig

    walked = [
        f.split(".", 1)[1] for f in _fields(ModelConfig(name="m", kind="huggingface", path=project.tmp / "bert"), "m")
    ]
    assert sorted(walked) == sorted([*MODEL_VARIANTS, *MODEL_EXEMPT])
    base = {m: _extract_key(_config_file(project.tmp, project.raw, "models"), m) for m in ("bert", "lm")}
    for i, (field, (model, value)) in enumerate(MODEL_VARIANTS.items()):
        raw = copy.deepcopy(project.raw)
        entry = next(m for m in raw["models"] if m["name"] == model)
        if field in ("path", "data", "sentencepiece"):
            value = str(project.tmp / value)
        entry[field] = value
        key = _extract_key(_config_file(project.tmp, raw, f"m{i}"), entry["name"])
        assert key != base[model], field
