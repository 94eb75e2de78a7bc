"""Config validation: every bad input fails before work starts, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolution.config import ConfigError, load_config


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.fixture()
def good(tmp_path, model_specs):
    (tmp_path / "c.txt").write_text("a b\n")
    spec = model_specs["translation"]
    return (
        "corpus: {path: c.txt}\nmodels:\n"
        f"  - {{name: m, kind: fairseq, path: {spec['path']}, data: {spec['data']}}}\n"
    )


def test_defaults_and_relative_paths(tmp_path, good):
    cfg = load_config(_write(tmp_path, good))
    assert cfg.corpus.path == (tmp_path / "c.txt").resolve()
    assert cfg.workdir == (tmp_path / "runs/default").resolve()
    assert cfg.cluster.kind == "local" and cfg.extract.too_long == "truncate" and cfg.extract.attention is None


@pytest.mark.parametrize(
    "edit, message",
    [
        ("corpus: {path: c.txt, colour: red}", r"corpus\.colour: unknown key"),
        ("corpus: {path: missing.txt}", r"corpus\.path: .*missing\.txt' does not exist"),
        ("extract: {chunk_tokens: many}", r"extract\.chunk_tokens: .*integer"),
        (
            "extract: {too_long: crop}",
            r"extract\.too_long: 'crop' is not a choice; the choices are truncate, skip or error$",
        ),
        # a Literal | None field: null is one of the choices (it said "Input should be 'needed'")
        ("extract: {rows: all}", r"extract\.rows: 'all' is not a choice; the choices are needed or null$"),
        ("cluster: {kind: lokal}", r"cluster\.kind: 'lokal' is not a choice; the choices are local, address, "),
        ("cluster: {kind: address}", r"cluster: .*give the scheduler address"),
        ("seeed: 3", r"seeed: unknown key"),
        (
            "metrics: {pruning: {models: [mtt]}}",
            r"metrics\.pruning\.models: no model named \['mtt'\]; the models are \['m'\]",
        ),
    ],
)
def test_errors_name_the_key(tmp_path, good, edit, message):
    key = edit.split(":")[0]
    text = "\n".join(line for line in good.splitlines() if not line.startswith(key + ":")) + "\n" + edit + "\n"
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text))


def test_impossible_model_combinations(tmp_path, model_specs):
    (tmp_path / "c.txt").write_text("a\n")
    fs = model_specs["translation"]
    cases = {
        f"- {{name: m, kind: fairseq, path: {fs['path']}}}": "fairseq models need 'data'",
        f"- {{name: m, kind: huggingface, path: {fs['path']}}}": "must be a directory",
        f"- {{name: m, kind: fairseq, path: {fs['data']}, data: {fs['data']}}}": "must be a checkpoint file",
        f"- {{name: m, kind: fairseq, path: {tmp_path}/nope.pt, data: {fs['data']}}}": (
            r"models\.0\.path: .*does not exist"
        ),
    }
    for model, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config(_write(tmp_path, f"corpus: {{path: c.txt}}\nmodels:\n  {model}\n"))
    dup = f"  - {{name: m, kind: fairseq, path: {fs['path']}, data: {fs['data']}}}\n"
    with pytest.raises(ConfigError, match="unique"):
        load_config(_write(tmp_path, "corpus: {path: c.txt}\nmodels:\n" + dup + dup))


def test_cluster_shorthands(tmp_path, good):
    assert load_config(_write(tmp_path, good + "cluster: tcp://10.0.0.1:8786\n")).cluster.kind == "address"
    assert load_config(_write(tmp_path, good + "cluster: synchronous\n")).cluster.kind == "synchronous"


def test_not_a_mapping_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "a: [\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_shipped_configs_load():
    """evolution.yaml analyses the shipped base models of bible-full (trains nothing) with the same
    analysis settings as configs/from-scratch.yaml, which trains the same architecture as bible-full
    (bible-full longer and with the paper's controls); wmt.yaml names the missing data."""
    from evolution.config import ConfigError, load_config

    root = Path(__file__).resolve().parents[1]
    default = load_config(root / "evolution.yaml")
    assert default.train is None and [(m.name, m.kind) for m in default.models] == [
        ("mt", "shipped"),
        ("lm", "shipped"),
        ("mlm", "shipped"),
    ]
    assert all((m.path / "model.safetensors").is_file() for m in default.models)  # committed: a fresh clone has them
    scratch = load_config(root / "configs" / "from-scratch.yaml")
    assert [m.name for m in scratch.models] == ["mt", "lm", "mlm"] and scratch.train.layers == 6
    for section in ("corpus", "extract", "report"):
        assert getattr(scratch, section) == getattr(default, section), section
    # the same analyses; from-scratch also repeats them on the checkpoints it keeps
    assert scratch.metrics.model_copy(update={"trajectory": None}) == default.metrics
    assert default.metrics.trajectory is None and scratch.metrics.trajectory is not None
    assert scratch.train.kept_updates("mt") == [25, 50, 100, 200, 400]
    full = load_config(root / "configs" / "bible-full.yaml")
    assert [m.path for m in full.models if m.kind == "shipped"][:1] == [default.models[0].path]
    budget = {"updates", "warmup_updates", "save_interval_updates", "seeds", "token_dropout", "checkpoints"}
    assert full.train.model_dump(exclude=budget) == scratch.train.model_dump(exclude=budget)
    assert list(full.train.runs(full.seed)) == [
        "mt",
        "mt-seed1",
        "mt-tokdrop",
        "lm",
        "lm-seed1",
        "lm-tokdrop",
        "mlm",
        "mlm-seed1",
    ]
    with pytest.raises(ConfigError, match="corpus.path"):
        load_config(root / "configs" / "wmt.yaml")


def test_bible_full_trajectory_config_trains_what_bible_full_trains():
    """configs/bible-full-trajectory.yaml trains mt, lm and mlm exactly as configs/bible-full-train.yaml
    does (the controls aside), keeps 7 log-spaced checkpoints of each, and analyses the final models
    as configs/bible-full.yaml does, without its head-importance, probe and pruning runs."""
    from evolution.config import load_config

    root = Path(__file__).resolve().parents[1]
    traj = load_config(root / "configs" / "bible-full-trajectory.yaml")
    train = load_config(root / "configs" / "bible-full-train.yaml")
    full = load_config(root / "configs" / "bible-full.yaml")
    assert [(m.name, m.kind) for m in traj.models] == [("mt", "trained"), ("lm", "trained"), ("mlm", "trained")]
    controls = {"seeds", "token_dropout", "checkpoints"}
    assert traj.train.model_dump(exclude=controls) == train.train.model_dump(exclude=controls)
    assert list(traj.train.runs(traj.seed)) == ["mt", "lm", "mlm"]
    for objective in ("mt", "lm", "mlm"):
        assert traj.train.kept_updates(objective) == [50, 100, 200, 400, 800, 1600, 3200]
    for section in ("corpus", "extract", "seed"):
        assert getattr(traj, section) == getattr(full, section), section
    heavy = {"importance": None, "probes": None, "pruning": None, "reuse": None}  # reuse: bible-full's own units
    assert traj.metrics.model_copy(update={**heavy, "trajectory": None}) == full.metrics.model_copy(update=heavy)
    assert traj.metrics.trajectory is not None and traj.workdir != full.workdir


def test_train_needs_a_parallel_corpus(tmp_path):
    from evolution.config import ConfigError, load_config

    (tmp_path / "c.txt").write_text("a b\n")
    (tmp_path / "c.yaml").write_text("corpus: {path: c.txt}\ntrain: {}\n")
    with pytest.raises(ConfigError, match="train needs a parallel corpus"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("corpus: {path: c.txt}\nmodels: [{name: mt, kind: trained}]\n")
    with pytest.raises(ConfigError, match="no train section"):
        load_config(tmp_path / "c.yaml")


def test_set_overrides_replace_one_nested_key_and_leave_the_rest(tmp_path, good):
    """``--set metrics.pruning=null`` turns one analysis off; its sibling keys keep the file's values."""
    from evolution.config import parse_overrides

    path = _write(tmp_path, good + "seed: 3\nmetrics:\n  mi: {k: 7, restarts: 2}\n  pruning: {lambdas: [0.1]}\n")
    assert load_config(path).metrics.pruning.lambdas == [0.1]
    overrides = parse_overrides(
        ["metrics.pruning=null", "metrics.mi.k=11", "seed=5", "extract.attention={sentences: 4}"]
    )
    assert overrides == {"metrics.pruning": None, "metrics.mi.k": 11, "seed": 5, "extract.attention": {"sentences": 4}}
    cfg = load_config(path, overrides=overrides)
    assert cfg.metrics.pruning is None
    assert (cfg.metrics.mi.k, cfg.metrics.mi.restarts) == (11, 2)  # restarts from the file
    assert cfg.seed == 5 and cfg.extract.attention.sentences == 4  # a section the file left out
    with pytest.raises(ConfigError, match=r"metrics\.mi\.kk: unknown key"):
        load_config(path, overrides={"metrics.mi.kk": 1})
    with pytest.raises(ConfigError, match=r"seed in .* is not a section \(it is 3\); override it as a whole instead: "):
        load_config(path, overrides={"seed.x": 1})


def test_a_key_of_a_shorthand_section_gets_the_exact_set_of_the_whole(tmp_path, good):
    """``--set cluster.memory_limit=3GiB`` on ``cluster: local`` said to override the section whole
    but not how: now it names the exact ``--set``, which runs."""
    import shlex

    from evolution.config import parse_overrides

    path = _write(tmp_path, good + "cluster: local\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides=parse_overrides(["cluster.memory_limit=3GiB"]))
    message = str(caught.value)
    assert message.endswith(
        "cluster in " + str(path) + " is the shorthand 'local', not a section; override the section whole, "
        "with the shorthand's keys: --set 'cluster={kind: local, memory_limit: 3GiB}'"
    ), message
    suggested = shlex.split(message.rpartition(" --set ")[2])
    cfg = load_config(path, overrides=parse_overrides(suggested))
    assert (cfg.cluster.kind, cfg.cluster.memory_limit) == ("local", "3GiB")
    with pytest.raises(ConfigError, match=r"KEY=VALUE"):
        parse_overrides(["metrics.pruning"])
