"""The whole config, and reading it from YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from evolution.config.base import ConfigError, _resolve, _Section
from evolution.config.cluster import ClusterConfig, _coerce_cluster
from evolution.config.corpus import CorpusConfig
from evolution.config.extract import ExtractConfig
from evolution.config.metrics import MetricsConfig
from evolution.config.models import ModelConfig
from evolution.config.report import ReportConfig
from evolution.config.train import TrainConfig


class EvolutionConfig(_Section):
    """The whole run: ``workdir``, ``seed``, ``cluster``, ``corpus``, ``train``, ``extract``, ``metrics``,
    ``report``, ``models``."""

    workdir: Path = Field(
        Path("runs/default"), validate_default=True, description="where every stage writes; relative to the config file"
    )
    seed: int = 0
    cluster: Annotated[ClusterConfig, Field(default_factory=ClusterConfig)]
    corpus: CorpusConfig
    extract: Annotated[ExtractConfig, Field(default_factory=ExtractConfig)]
    metrics: Annotated[MetricsConfig, Field(default_factory=MetricsConfig)]
    report: Annotated[ReportConfig, Field(default_factory=ReportConfig)]
    train: TrainConfig | None = Field(None, description="train MT/LM/MLM on the corpus (needs a parallel corpus)")
    models: list[ModelConfig] = Field(default_factory=list, description="default: every run of `train`")
    #: ``series name -> its members by ascending step`` (:mod:`evolution.series`), set by validation
    _series: dict[str, list[ModelConfig]] = PrivateAttr(default_factory=dict)

    @field_validator("workdir", mode="before")
    @classmethod
    def _workdir(cls, v: Any, info: ValidationInfo) -> Path:
        return _resolve(v, info)

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster(cls, v: Any) -> Any:
        return _coerce_cluster(v)

    @model_validator(mode="after")
    def _expand_series(self) -> EvolutionConfig:
        """Each checkpoint series among ``models`` becomes its last member (the others are the
        trajectory's, :meth:`series`)."""
        from evolution.series import SeriesError, expand

        if not any(m.is_series for m in self.models):
            return self
        models, series = [], {}
        for i, m in enumerate(self.models):
            if not m.is_series:
                models.append(m)
                continue
            try:
                series[m.name] = expand(m)
            except SeriesError as exc:
                raise ValueError(f"models.{i}: {exc}") from None
            models.append(series[m.name][-1])
        object.__setattr__(self, "models", models)
        self._series = series
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> EvolutionConfig:
        if not self.models:
            if self.train is None:
                raise ValueError(
                    "models: list at least one model to analyse, or add a train section (its runs are then analysed)"
                )
            object.__setattr__(
                self, "models", [ModelConfig(name=n, kind="trained") for n in self.train.runs(self.seed)]
            )
        if self.train is not None and not self.corpus.parallel:
            raise ValueError(
                "train needs a parallel corpus (corpus.source: bible or parallel); "
                "corpus.source: text has no target side to translate into"
            )
        trained = [m for m in self.models if m.kind == "trained"]
        if trained and self.train is None:
            raise ValueError(f"models {[m.name for m in trained]} are kind: trained but there is no train section")
        if trained and self.train is not None:
            runs = self.train.runs(self.seed)
            unknown = [m.run_name for m in trained if m.run_name not in runs]
            if unknown:
                raise ValueError(f"models: no training run named {unknown}; the train section defines {list(runs)}")
            for m in trained:
                if m.update is None:
                    continue
                kept = self.train.kept_updates(runs[m.run_name]["objective"])
                if m.update not in kept:
                    raise ValueError(
                        f"model {m.name!r}: run {m.run_name!r} keeps no checkpoint at update {m.update}; "
                        f"train.checkpoints keeps {kept or 'none'} (the final model: leave out 'update')"
                    )
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"models: names must be unique, {dupes} appear more than once")
        if (
            self.metrics.trajectory is not None
            and (self.train is None or self.train.checkpoints is None)
            and not self._series
        ):
            raise ValueError(
                "metrics.trajectory analyses the checkpoints kept in training or a checkpoint series: "
                "add train.checkpoints (e.g. {first: 25, factor: 2}) or a model with 'revisions' or "
                "'checkpoints' (docs/series.md), or set metrics.trajectory: null"
            )
        for key, listed in (
            ("metrics.pruning.models", self.metrics.pruning and self.metrics.pruning.models),
            ("report.views.models", self.report.views and self.report.views.models),
        ):
            unknown = [n for n in listed or [] if n not in names]
            if unknown:
                hint = "".join(
                    f"; {n} is a checkpoint series: name its last member, {self._series[n][-1].name}"
                    for n in unknown
                    if n in self._series
                )
                raise ValueError(f"{key}: no model named {unknown}; the models are {names}{hint}")
        if self.extract.max_batch_tokens < 2:
            raise ValueError("extract.max_batch_tokens must be at least 2")
        every = [
            what
            for what, on in (
                ("metrics.similarity", self.metrics.similarity is not None),
                ("metrics.trajectory", self.metrics.trajectory is not None),
                (f"checkpoint series {', '.join(self._series)} (models[].revisions / checkpoints)", bool(self._series)),
            )
            if on
        ]
        if self.extract.layers is not None and every:
            verb = "compare" if len(every) > 1 else "compares"
            raise ValueError(
                f"extract.layers stores layers {self.extract.layers} only, and {' and '.join(every)} {verb} "
                "every layer (PWCCA / CKA between layers, change by frequency and by part of speech, "
                "distance to the final model): set extract.layers: null to store every layer, or else "
                + " and ".join(self._every_layer_fixes())
            )
        moving = [w for w in every if not w.startswith("metrics.similarity")]
        if self.extract.rows == "needed" and moving:
            raise ValueError(
                f"extract.rows: needed keeps the rows the analyses of the final models read, and {moving[0]} "
                "extracts other checkpoints as well: set extract.rows: null, or leave that analysis out"
            )
        self._stores_apart()
        return self

    def _every_layer_fixes(self) -> list[str]:
        """What turns off each part of the config that compares every layer (for extract.layers):
        an analysis set to null, a checkpoint series replaced by its last member."""
        on = {"metrics.similarity": self.metrics.similarity, "metrics.trajectory": self.metrics.trajectory}
        fixes = [f"set {key}: null" for key, section in on.items() if section is not None]
        for name, members in self._series.items():
            last = members[-1]
            fixes.append(
                f"remove series {name}'s revisions: list (model {name} is then its hub id's default revision alone)"
                if last.revision is not None
                else f"analyse series {name}'s last member alone (replace its checkpoints: by path: {last.path})"
            )
        return fixes

    def _stores_apart(self) -> None:
        """The metrics store is replaced whole on every write: it must not be, hold or sit inside
        the representation store, the metrics tasks' inputs, or the workdir."""
        from evolution import location

        reps = self.extract.store or str(self.workdir / "reps.zarr")
        metrics = self.metrics.store or str(self.workdir / "metrics.zarr")

        def norm(p: str) -> str:
            return p.rstrip("/") if location.is_url(p) else str(Path(p).resolve())

        def within(a: str, b: str) -> bool:  # a is b or lies under b
            return a == b or a.startswith(b.rstrip("/") + "/")

        m = norm(metrics)
        for name, other in (
            ("extract.store", reps),
            ("the metrics inputs", location.inputs_dir(reps)),
            ("workdir", str(self.workdir)),
        ):
            o = norm(other)
            if within(o, m) or (within(m, o) and name != "workdir"):
                raise ValueError(
                    f"metrics.store {metrics} overlaps {name} ({other}); writing the metrics "
                    "replaces the whole metrics store, so give it a location of its own, e.g. "
                    f"{location.join(location.parent(reps), 'metrics.zarr')}"
                )

    def series(self) -> dict[str, list[ModelConfig]]:
        """``series name -> members by ascending step`` of the checkpoint series among ``models``
        (``revisions`` / ``checkpoints``; :mod:`evolution.series`); the last member is in ``models``."""
        return dict(self._series)

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r}; configured: {[m.name for m in self.models]}")


def _format_errors(err: ValidationError, source: str) -> str:
    from evolution.config.base import error_lines

    return "\n".join([f"{source}: the config cannot be run:", *(f"  {x}" for x in error_lines(err, EvolutionConfig))])


def _yaml_error(path: Path, exc: Exception) -> str:
    """``file:line:column: what`` for a YAML syntax error (PyYAML names the text ``<unicode string>``)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = " ".join(x for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x) or str(exc)
    line = ""
    if mark is not None:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if mark.line < len(lines):
            line = f"\n  {lines[mark.line]}\n  {' ' * mark.column}^"
    return (
        f"{where}: not valid YAML: {what}{line}\n  check the brackets, quotes and indentation there "
        "(evolution.yaml is a complete example)"
    )


def load_config(path: str | Path, *, overrides: dict[str, Any] | None = None) -> EvolutionConfig:
    """Read and validate a YAML config.

    Parameters
    ----------
    path
        The YAML file. Relative paths inside it are resolved against its directory.
    overrides
        Keys that replace those in the file: top-level (the CLI's ``--workdir``) or dotted into
        sections (the CLI's ``--set metrics.pruning=null``: ``{"metrics.pruning": None}``).

    Raises
    ------
    ConfigError
        With one line per problem, naming the key and what to do.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(path, exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (workdir, corpus, models, ...)")
    for key, value in (overrides or {}).items():
        _override(data, key, value, path=path)
    try:
        return EvolutionConfig.model_validate(data, context={"base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(path))) from None


def _override(data: dict, key: str, value: Any, *, path: Path) -> None:
    """Set the dotted ``key`` (``metrics.pruning``) of ``data`` to ``value``, creating sections
    that the file leaves out."""
    *parents, last = key.split(".")
    if not all(parents + [last]):
        raise ConfigError(f"override {key!r}: a key is dotted section names, e.g. metrics.pruning")
    node = data
    for i, part in enumerate(parents):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(_not_a_section(key, parents[: i + 1], child, value, path=path))
        node = child
    node[last] = value


def _not_a_section(key: str, section: list[str], found: Any, value: Any, *, path: Path) -> str:
    """What to pass instead of ``--set KEY=VALUE`` where a section on ``KEY``'s way is a plain value
    in the file: for a shorthand (``cluster: local``), the exact ``--set`` of the whole section."""
    import shlex

    name = ".".join(section)
    expanded = _coerce_cluster(found) if name == "cluster" else None
    if not isinstance(expanded, dict):
        return (
            f"override {key!r}: {name} in {path} is not a section (it is {found!r}); override it as a "
            f"whole instead: --set {shlex.quote(name + '=VALUE')}"
        )
    node = whole = dict(expanded)
    for part in key.split(".")[len(section) : -1]:
        node = node.setdefault(part, {})
    node[key.split(".")[-1]] = value
    flow = yaml.safe_dump(whole, default_flow_style=True, sort_keys=False, width=1_000_000).strip()
    return (
        f"override {key!r}: {name} in {path} is the shorthand {found!r}, not a section; override the "
        f"section whole, with the shorthand's keys: --set {shlex.quote(name + '=' + flow)}"
    )


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["metrics.pruning=null", "seed=1"]`` -> ``{"metrics.pruning": None, "seed": 1}``: each
    value read as YAML (the CLI's ``--set``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write KEY=VALUE, e.g. --set metrics.pruning=null")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not YAML ({exc})") from None
    return out


def resolved_dict(section: BaseModel) -> dict[str, Any]:
    """A JSON-compatible dict of a config section with every default filled in."""
    return section.model_dump(mode="json")
