"""The typed schema of ``evolution.yaml``.

Every section is a pydantic model that forbids unknown keys, so a typo fails
before any work starts with a message that names the key and the fix.
Relative paths are resolved against the directory of the config file, and
files that must exist are checked at load time.

The fully resolved config (defaults filled in, paths absolute) is what the
pipeline hashes for caching and stores as provenance; see
:func:`resolved_dict`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ConfigError",
    "ClusterConfig",
    "CorpusConfig",
    "ExtractConfig",
    "MetricsConfig",
    "AttentionConfig",
    "HeadsConfig",
    "ReportConfig",
    "ViewsConfig",
    "ModelConfig",
    "TrainConfig",
    "EvolutionConfig",
    "load_config",
    "resolved_dict",
]


class ConfigError(ValueError):
    """A config file that cannot be run; the message names the key and the fix."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _resolve(path: str | Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return p.resolve() if base is not None else p


def _treebank(v: Any, info: ValidationInfo, key: str) -> str | None:
    """An embedded treebank's name, or an existing CoNLL-U file's resolved path."""
    from evolution.corpus.conllu import EMBEDDED

    if v is None or str(v) in EMBEDDED:
        return v
    path = _resolve(v, info)
    if not path.is_file():
        raise ValueError(f"{key} {str(v)!r} is neither an embedded treebank ({', '.join(EMBEDDED)}) "
                         "nor an existing CoNLL-U file (relative paths are resolved against the config "
                         "file's directory)")
    return str(path)


def _store_location(v: Any, info: ValidationInfo, key: str) -> str | None:
    """A store's location: an fsspec URL as given (credentials refused, its filesystem
    package required), or a local path resolved against the config file's directory."""
    from evolution import location

    if v is None:
        return None
    if location.is_url(v):
        location.check_url(str(v), key=key)
        return str(v)
    return str(_resolve(v, info))


def _must_exist(path: Path, what: str) -> Path:
    if not path.exists():
        raise ValueError(f"{what} {str(path)!r} does not exist; fix the path (relative paths are "
                         "resolved against the config file's directory)")
    return path


class ClusterConfig(_Section):
    """Where the Dask task graphs run.

    ``kind: local`` starts a :class:`distributed.LocalCluster` of worker
    processes sized to the machine (one single-threaded worker per core unless
    ``n_workers`` says otherwise); ``kind: address`` connects to a running
    scheduler; ``kind: synchronous`` runs every task in this process, which is
    what a debugger wants.
    """

    kind: Literal["local", "address", "synchronous"] = "local"
    address: str | None = Field(None, description="scheduler address, e.g. tcp://host:8786")
    n_workers: int | None = Field(None, ge=1, description="local workers; default: one per core")
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = Field("auto", description="per local worker, as distributed accepts it")

    @model_validator(mode="after")
    def _address_iff_kind(self) -> "ClusterConfig":
        if self.kind == "address" and not self.address:
            raise ValueError("cluster.kind is 'address' but cluster.address is empty; "
                             "give the scheduler address, e.g. address: tcp://host:8786")
        if self.kind != "address" and self.address:
            raise ValueError(f"cluster.address is set but cluster.kind is {self.kind!r}; "
                             "set kind: address or remove the address")
        return self


def _coerce_cluster(value: Any) -> Any:
    # Shorthands: `cluster: local`, `cluster: synchronous`, `cluster: {address: tcp://...}`.
    if isinstance(value, str):
        if value.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
            return {"kind": "address", "address": value}
        return {"kind": value}
    if isinstance(value, dict) and "address" in value and "kind" not in value:
        return {"kind": "address", **value}
    return value


class SplitConfig(_Section):
    """Which whole groups (Bible books; blocks of ``block_lines`` lines of
    plain files) are held out. Either group names or fractions of the pairs."""

    valid: list[str] | float | None = Field(
        None, description="group names, or a fraction of the pairs; default: Bible books below, else 0.02")
    test: list[str] | float | None = Field(
        None, description="group names, or a fraction of the pairs; default: Bible books below, else 0.08")
    block_lines: int = Field(100, ge=1, description="lines per group for plain parallel files")


#: The default held-out books of the Bible corpus: both testaments, several genres
#: (~2% valid, ~9% test of the 30,460 verse pairs).
BIBLE_VALID = ["Ruth", "Lam", "Eph", "Jas", "1Pet"]
BIBLE_TEST = ["Josh", "Prov", "Mark", "Rom"]


class CorpusConfig(_Section):
    """The sentences that models are trained on and analysed with.

    * ``source: text``: one sentence per line from ``path`` (analysis only:
      nothing to train on).
    * ``source: parallel``: a parallel corpus from ``path`` + ``target_path``
      (line-aligned files) or from a TSV ``path`` with ``columns``.
    * ``source: bible``: the embedded default, two SWORD modules (World
      English Bible and Reina-Valera 1909 from Debian's ``sword-text-web`` and
      ``sword-text-sparv``; ``make setup`` fetches them into ``data/sword``).

    Parallel corpora are filtered by ``max_length_ratio`` (characters) and
    split into train/valid/test by whole groups (``split``); the ``analyse``
    split's source side is what the analyses read.
    """

    source: Literal["text", "parallel", "bible"] = "text"
    path: Path | None = Field(None, description="text: the sentences; parallel: source-side file or TSV")
    target_path: Path | None = Field(None, description="parallel: the target-side file, line-aligned")
    columns: dict[str, str] | None = Field(
        None, description="parallel TSV: {source: en, target: es[, ref: ref][, group: book]}")
    sword_root: Path = Field(Path("data/sword"), validate_default=True,
                             description="bible: SWORD root with mods.d/ and modules/")
    modules: tuple[str, str] = Field(("engWEB2015eb", "spaRV1909eb"), description="bible: source, target module")
    languages: tuple[str, str] = Field(("en", "es"), description="source and target language codes (file suffixes)")
    max_length_ratio: float = Field(2.2, gt=1, description="drop pairs whose longer side has more characters")
    split: Annotated[SplitConfig, Field(default_factory=SplitConfig)]
    analyse: Literal["train", "valid", "test", "all"] = Field(
        "test", description="the split whose source side is analysed; all: the whole corpus in its order "
                            "(Voita et al.'s analysis-set size; trained models have seen its training part)")
    max_sentences: int | None = Field(None, ge=1, description="analyse only the first N sentences")
    annotated: str | None = Field(
        None, description="annotated text analysed beside the main one, for POS / dependency neighbour rates: "
        "an embedded treebank (ud-ewt-test, ud-ewt-dev) or a CoNLL-U file; null = none")
    annotated_sentences: int | None = Field(None, ge=1, description="use only the first N annotated sentences")

    @field_validator("annotated", mode="before")
    @classmethod
    def _annotated(cls, v: Any, info: ValidationInfo) -> str | None:
        return _treebank(v, info, "corpus.annotated")

    @field_validator("path", "target_path", mode="before")
    @classmethod
    def _path(cls, v: Any, info: ValidationInfo) -> Path | None:
        return None if v is None else _must_exist(_resolve(v, info), f"corpus.{info.field_name}")

    @field_validator("sword_root", mode="before")
    @classmethod
    def _root(cls, v: Any, info: ValidationInfo) -> Path:
        return _resolve(v, info)

    @model_validator(mode="after")
    def _source_fields(self) -> "CorpusConfig":
        if self.source in ("text", "parallel") and self.path is None:
            raise ValueError(f"corpus.source is {self.source!r} but corpus.path is missing")
        if self.source == "parallel" and (self.target_path is None) == (self.columns is None):
            raise ValueError("corpus.source is 'parallel': give either target_path (two line-aligned files) "
                             "or columns (a TSV with a header), not both or neither")
        if self.columns is not None and not {"source", "target"} <= set(self.columns):
            raise ValueError("corpus.columns needs at least 'source' and 'target' column names")
        bible = self.source == "bible"
        split = self.split.model_copy(update={
            "valid": self.split.valid if self.split.valid is not None else (BIBLE_VALID if bible else 0.02),
            "test": self.split.test if self.split.test is not None else (BIBLE_TEST if bible else 0.08)})
        object.__setattr__(self, "split", split)
        return self

    @property
    def parallel(self) -> bool:
        return self.source in ("parallel", "bible")


class AttentionConfig(_Section):
    """Which attention maps to store: all heads of all layers for the first
    ``sentences`` sentences (attention grows with length squared, so the
    analyses of Clark et al. 2019 use a few hundred to a thousand sentences)."""

    sentences: int = Field(1000, ge=1)
    dtype: Literal["float16", "float32"] = "float16"
    norms: bool = Field(True, description="also the vector norms of Kobayashi et al. (2020) beside the maps, "
                                          "where the model supports them (fairseq Transformers, BERT-like encoders)")


class ExtractConfig(_Section):
    """How representations are extracted.

    ``chunk_tokens`` is the Zarr chunk length along ``token``; one task
    computes ``task_chunks`` whole chunks, so a worker's memory is bounded by
    ``(layers + 1) * task_chunks * chunk_tokens * d_model`` floats whatever
    the corpus size. Larger tasks batch sentences of more similar length
    (on random 8-60 word lines, batching costs 9.5% over the unpadded tokens
    with 8,192-token tasks, 6.7% with 16,384, 3.4% with one global length
    sort: ``python benchmarks/extract.py --padding``).
    """

    store: str | None = Field(None, description="Zarr store path or fsspec URL (s3://bucket/prefix/reps.zarr; "
                                                "credentials from the environment); default <workdir>/reps.zarr")
    dtype: Literal["float32", "float16"] = "float32"
    chunk_tokens: int = Field(4096, ge=16)
    task_chunks: int = Field(4, ge=1, description="Zarr chunks computed by one task")
    compressor: Literal["none", "zstd"] = Field(
        "none", description="codec of the hidden array; float32 states barely compress (8% with zstd)")
    max_batch_tokens: int = Field(1024, ge=16, description="padded tokens per forward pass (1,024 was fastest on CPU: benchmarks/extract.py)")
    too_long: Literal["truncate", "skip", "error"] = Field(
        "truncate", description="what to do with a sentence longer than the model's maximum positions")
    attention: AttentionConfig | None = None
    torch_threads: int = Field(1, ge=1, description="torch intra-op threads in each task")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                        description="where models run for extraction and every analysis that re-runs them: auto "
                                    "(a CUDA GPU where one is visible, else the CPU), cpu, cuda, cuda:N; LRP "
                                    "relevance and pruning run on the CPU")

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any, info: ValidationInfo) -> str | None:
        return _store_location(v, info, "extract.store")


class TokenSelection(_Section):
    """The analysis set of MI and neighbours: the ``top`` most frequent token
    types with at least ``min_count`` occurrences (Voita et al.: 1,000 and
    1,000; scale down for small corpora)."""

    top: int = Field(1000, ge=2)
    min_count: int = Field(1000, ge=2)


class MIConfig(_Section):
    """MI with the input token and the output label via k-means (Voita et al. 2019, sec. 4;
    ``docs/metrics.md``)."""

    k: int = Field(10_000, ge=2, description="clusters; capped at occurrences / 10 (logged)")
    restarts: int = Field(3, ge=1, description="k-means restarts; mean and spread are reported")
    niter: int = Field(20, ge=1, description="Lloyd iterations")
    mlm_corruptions: int = Field(
        1, ge=1, description="independent BERT corruptions of each sentence for MI with the MLM's output label "
                             "(each ~15% of positions; more for small corpora, where one leaves the estimate "
                             "mostly bias)")
    algorithm: Literal["auto", "flat", "two_level"] = Field(
        "auto", description="k-means: flat faiss, or two-level (4 sqrt(k) coarse cells + one refinement pass; auto from k >= 2000)")
    bootstrap: int = Field(200, ge=0, description="resamples of whole sentences (each restart's clusters fixed) "
                                                 "for 95% intervals of MI, MI minus the control and both as "
                                                 "fractions of H(X) (0: none)")
    types: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=list, description="also MI of the same clusters on the occurrences of the N most frequent "
                                          "types, for each N listed (group mi_types; empty: none)")


class NeighborsConfig(_Section):
    """kNN token identity, position and context measures (``docs/metrics.md``)."""

    k: int = Field(50, ge=1)
    metric: Literal["euclidean", "cosine"] = "euclidean"
    index: Literal["exact", "ivf"] = Field("exact", description="faiss flat index, or IVF (approximate) for large N")
    max_per_type: int = Field(1000, ge=2, description="occurrences sampled per token type (bounds the cost); the "
                                                      "ceiling of the same left / right rates grows with it "
                                                      "(same_left_ceiling: with k = 50 among 200 occurrences a "
                                                      "perfect ordering by left token scores only ~0.23)")
    bootstrap: int = Field(200, ge=0, description="bootstrap replicates over sentences for each rate's 95% "
                                                 "interval (0: none)")
    top: int | None = Field(None, ge=2, description="the neighbour measures on the N most frequent types of the "
                                                    "token selection only (null: all of metrics.tokens.top); a "
                                                    "paper-sized MI selection of 1,000 types has few types with "
                                                    "max_per_type occurrences and a pooled search over ~1M")


class SimilarityConfig(_Section):
    """PWCCA / linear CKA between layers and models, and change by frequency (Voita et al. 2019,
    sec. 4; ``docs/metrics.md``)."""

    methods: list[Literal["pwcca", "cka"]] = Field(default_factory=lambda: ["pwcca", "cka"], min_length=1)
    sentences: int = Field(5000, ge=1, description="all tokens of the first N sentences (Voita et al.: 5,000)")
    min_ratio: float = Field(10.0, gt=0, description="refuse fewer than min_ratio x d occurrences")
    epsilon: float = Field(1e-6, gt=0, description="relative singular-value threshold for rank deficiency")
    freq_bins: list[int] = Field(
        default_factory=lambda: [1, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000],
        min_length=2, description="frequency-rank bin edges [lo, hi) (Voita et al., figure 4)")
    bootstrap: int = Field(20, ge=0, description="bootstrap replicates over sentences for 95% intervals of the "
                                                 "same-layer distances between models and of the change by "
                                                 "frequency (0: none; each replicate redoes their SVDs)")
    equal_bins: int = Field(10, ge=0, description="also change by frequency in this many bins holding equal "
                                                  "numbers of occurrences, by frequency rank (group change_equal; "
                                                  "0: none)")


class InfluenceConfig(_Section):
    """Token influence (``docs/metrics.md``): mask one occurrence out of the attention keys at
    layer n; PWCCA/CKA distance of the other tokens' layer-n states, per frequency-rank
    bin of the masked token. Needs this project's trained models (key masking)."""

    max_per_bin: int = Field(500, ge=1, description="masked occurrences sampled per frequency bin, each at every "
                                                    "layer (a bin with fewer is taken whole; influence/available)")
    bootstrap: int = Field(100, ge=0, description="bootstrap replicates over sentences for each distance's 95% "
                                                  "interval (influence/interval; 0: none; each redoes the PWCCA / "
                                                  "CKA from per-sentence cross-products)")
    methods: list[Literal["pwcca", "cka"]] = Field(default_factory=lambda: ["pwcca"], min_length=1)
    min_ratio: float = Field(10.0, gt=0, description="rows per bin needed, as a multiple of d")
    epsilon: float = Field(1e-6, gt=0)
    freq_bins: list[int] = Field(
        default_factory=lambda: [1, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000], min_length=2)


class TSNESelection(_Section):
    """Occurrences of ``tokens`` (word forms) laid out per layer. ``color: upos`` or
    ``deprel`` takes them from the annotated text (``corpus.annotated``) and colours
    them by their gold label; ``masked: true`` adds, for masked LMs, the layout of the
    same occurrences with the word replaced by ``<mask>`` and 15% of the rest of the
    sentence corrupted as in training (Voita et al. 2019, the MLM's t-SNE)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    tokens: list[str] = Field(min_length=1)
    color: Literal["token", "position", "upos", "deprel"] = "token"
    masked: bool = False


class TSNEConfig(_Section):
    """openTSNE layouts of selected occurrences (Voita et al. 2019, figs. 6-8; docs/metrics.md)."""

    perplexity: float = Field(30.0, gt=0)
    max_points: int = Field(1000, ge=4, description="occurrences sampled per selection")
    selections: list[TSNESelection] = Field(default_factory=lambda: [
        TSNESelection(name="be", tokens=["is", "are", "were", "was"], color="token", masked=True),
        TSNESelection(name="it", tokens=["it"], color="position")])


class HeadsConfig(_Section):
    """Per-head attention statistics on the stored attention maps (docs/heads.md; needs
    ``extract.attention``): Clark et al. (2019), Voita et al. (ACL 2019), Kobayashi et al. (2020)."""

    positional_share: float = Field(0.9, gt=0, le=1, description="a positional head puts at least this share of "
                                                                 "its maxima on one relative offset (Voita et al.)")
    select: str | None = Field(None, description="treebank on which the best head per relation is picked "
                                                 "(embedded name, e.g. ud-ewt-dev, or a CoNLL-U file); null: no "
                                                 "dependency analysis")
    score: str | None = Field(None, description="treebank on which the picked head is scored (e.g. ud-ewt-test)")
    max_sentences: int | None = Field(None, ge=1, description="use only the first N sentences of each treebank")
    word_rule: Literal["mean", "first"] = Field(
        "mean", description="attention from a word: mean over its pieces (Clark et al.), or its first piece "
                            "(the released attention-analysis code)")
    syntactic_margin: float = Field(0.10, ge=0, le=1, description="a syntactic head beats the best offset "
                                                                  "baseline by this much (Voita et al.: 10 points)")
    relations: list[str] = Field(default_factory=lambda: ["nsubj", "obj", "amod", "advmod"], min_length=1,
                                 description="relations for which syntactic heads are counted (Voita et al.)")
    punctuation: Literal["clark", "unicode"] = Field(
        "clark", description="which pieces count as punctuation for attention to punctuation: '.' and ',' "
                             "(clark: Clark et al.'s released code) or every piece of Unicode punctuation "
                             "characters (unicode)")

    @field_validator("select", "score", mode="before")
    @classmethod
    def _treebanks(cls, v: Any, info: ValidationInfo) -> str | None:
        return _treebank(v, info, f"metrics.heads.{info.field_name}")

    @model_validator(mode="after")
    def _both(self) -> "HeadsConfig":
        if (self.select is None) != (self.score is None):
            raise ValueError("metrics.heads.select and metrics.heads.score go together: set both treebanks "
                             "(e.g. ud-ewt-dev and ud-ewt-test) or both to null")
        return self


class ImportanceConfig(_Section):
    """Which heads matter (docs/heads.md): head-mask importance (Michel et al. 2019) for fairseq
    models and for Hugging Face models with their pretraining head (masked or causal LM; a bare
    encoder is reported as not measurable), LRP head relevance (Voita et al. ACL 2019) for
    translation models."""

    sentences: int | None = Field(500, ge=1, description="the first N analysed sentences (null: all); each costs "
                                                        "a forward and backward pass, and LRP one per target token")
    relevance: bool = Field(True, description="LRP relevance of translation models' heads")


class ProbesConfig(_Section):
    """Attention parsing probes (Clark et al. 2019, section 5; docs/heads.md): trained on one
    treebank, scored on another, punctuation excluded."""

    train: str = Field("ud-ewt-dev", description="treebank the probes are trained on (embedded name or CoNLL-U file)")
    test: str = Field("ud-ewt-test", description="treebank they are scored on")
    max_sentences: int | None = Field(None, ge=1, description="use only the first N sentences of each treebank")
    epochs: int = Field(1, ge=1, description="passes over the training treebank (Clark et al.: 1)")

    @field_validator("train", "test", mode="before")
    @classmethod
    def _treebanks(cls, v: Any, info: ValidationInfo) -> str:
        return _treebank(v, info, f"metrics.probes.{info.field_name}")


class PruningConfig(_Section):
    """L0 pruning of translation models' heads with Hard-Concrete gates (Voita et al. ACL 2019,
    sec. 6; docs/heads.md): per lambda, gates on the encoder self-attention and on all three
    attention types, the latter also trained from scratch with the kept layout."""

    lambdas: list[float] = Field(default_factory=lambda: [0.05, 0.1, 0.2, 0.5], min_length=1,
                                 description="L0 penalty weights (lambda x mean over gated layers of open heads)")
    updates: int = Field(1000, ge=1, description="fine-tuning updates per run")
    lr: float = Field(1e-4, gt=0, description="Adam's learning rate while fine-tuning (constant)")
    max_tokens: int = Field(4096, ge=64, description="padded tokens per batch")
    scratch_updates: int | None = Field(None, ge=1, description="from-scratch control's updates (the base model's "
                                                               "budget, e.g. 3800 for bible-full); null: no control")
    scratch_lambdas: list[float] | None = Field(None, description="the lambdas whose all-attention layout is also "
                                                                 "trained from scratch (null: every lambda); each "
                                                                 "costs a base model's training")
    test_sentences: int | None = Field(None, ge=1, description="translate the first N analysed sentences (null: all)")
    models: list[str] | None = Field(None, description="MT models to prune (default: every MT model)")

    @model_validator(mode="after")
    def _scratch_lambdas(self) -> "PruningConfig":
        unknown = [x for x in self.scratch_lambdas or [] if x not in self.lambdas]
        if unknown:
            raise ValueError(f"metrics.pruning.scratch_lambdas {unknown} are not in metrics.pruning.lambdas "
                             f"{self.lambdas}: the from-scratch control trains a layout that pruning found")
        return self


class MetricsConfig(_Section):
    """Which metrics the ``metrics`` stage computes, and how. A section set
    to ``null`` is skipped."""

    tokens: Annotated[TokenSelection, Field(default_factory=TokenSelection)]
    mi: MIConfig | None = Field(default_factory=MIConfig)
    neighbors: NeighborsConfig | None = Field(default_factory=NeighborsConfig)
    similarity: SimilarityConfig | None = Field(default_factory=SimilarityConfig)
    tsne: TSNEConfig | None = Field(default_factory=TSNEConfig)
    influence: InfluenceConfig | None = Field(default_factory=InfluenceConfig)
    heads: HeadsConfig | None = Field(default_factory=HeadsConfig)
    importance: ImportanceConfig | None = Field(None, description="head importance and relevance; off by default")
    probes: ProbesConfig | None = Field(None, description="attention parsing probes; off by default")
    pruning: PruningConfig | None = Field(None, description="L0 head pruning of MT models; off by default")
    store: str | None = Field(None, description="Zarr store path or fsspec URL of the metrics (s3://...; credentials "
                                                "from the environment); default <workdir>/metrics.zarr")

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any, info: ValidationInfo) -> str | None:
        return _store_location(v, info, "metrics.store")


class ViewsConfig(_Section):
    """Vig (2019) attention views (head, model and neuron view) as one offline HTML page,
    ``report/views.html``, for sentences stored with ``extract.attention``."""

    sentences: list[int] | None = Field(None, min_length=1,
                                        description="corpus sentence indices, among those stored with "
                                                    "extract.attention; default: the first 3 stored")
    top_k: int = Field(8, ge=1, description="edges kept per query (keeps long inputs usable)")
    neuron: bool = Field(True, description="the neuron view (re-runs the model for queries and keys)")


class ReportConfig(_Section):
    """What the ``report`` stage writes beside the figures and tables."""

    views: ViewsConfig | None = Field(default_factory=ViewsConfig)


class ObjectiveBudget(_Section):
    """Training updates per objective (a fixed count, so that a run is reproducible;
    the defaults were measured to fit the budget in docs/training.md)."""

    mt: int = Field(500, ge=1)
    lm: int = Field(800, ge=1)
    mlm: int = Field(1300, ge=1)


class TrainConfig(_Section):
    """Training MT, LM and MLM on the corpus with fairseq (Voita et al. 2019, sec. 2; docs/training.md).

    All three share one encoder class, the vocabulary (a joint SentencePiece
    BPE of ``vocab_size`` pieces trained on both sides of the training split)
    and the initial encoder weights of their seed. Runs are named ``mt``,
    ``lm``, ``mlm``; extra ``seeds`` add ``mt-seed1`` ...; ``token_dropout``
    adds ``mt-tokdrop`` ... trained with ``token_dropout_p`` random input
    token replacement (the paper's controls).
    """

    objectives: list[Literal["mt", "lm", "mlm"]] = Field(default_factory=lambda: ["mt", "lm", "mlm"], min_length=1)
    seeds: list[int] = Field(default_factory=list, description="extra seeds per objective (the 'init' baselines)")
    token_dropout: list[Literal["mt", "lm", "mlm"]] = Field(default_factory=list,
                                                            description="objectives also trained with input token dropout")
    token_dropout_p: float = Field(0.1, ge=0, lt=1)
    vocab_size: int = Field(8000, ge=16, description="joint SentencePiece BPE pieces")
    layers: int = Field(6, ge=1, description="encoder blocks (Voita et al.: 6)")
    embed_dim: int = Field(128, ge=8)
    ffn_dim: int = Field(512, ge=8)
    heads: int = Field(4, ge=1)
    normalize_before: bool = Field(False, description="pre-norm blocks (fairseq's Transformer default is post-norm)")
    dropout: float = Field(0.1, ge=0, lt=1)
    decoder_layers: int = Field(3, ge=1, description="MT decoder blocks")
    max_positions: int = Field(256, ge=8)
    max_tokens: int = Field(4096, ge=64, description="tokens per batch")
    lr: float = Field(1e-3, gt=0)
    warmup_updates: int = Field(400, ge=0)
    updates: Annotated[ObjectiveBudget, Field(default_factory=ObjectiveBudget)]
    save_interval_updates: int = Field(200, ge=1, description="checkpoint_last.pt every N updates (resume point)")
    threads: int = Field(2, ge=1, description="torch threads per training process")
    beam: int = Field(4, ge=1, description="beam size for the MT test translation (BLEU/chrF)")

    @model_validator(mode="after")
    def _divisible(self) -> "TrainConfig":
        if self.embed_dim % self.heads:
            raise ValueError(f"train.embed_dim ({self.embed_dim}) must be divisible by train.heads ({self.heads})")
        bad = [o for o in self.token_dropout if o not in self.objectives]
        if bad:
            raise ValueError(f"train.token_dropout names {bad}, which are not in train.objectives")
        return self

    def runs(self, base_seed: int) -> dict[str, dict]:
        """Every training run: ``name -> {objective, seed, token_dropout}``."""
        out = {}
        for objective in self.objectives:
            out[objective] = {"objective": objective, "seed": base_seed, "token_dropout": 0.0}
            for seed in self.seeds:
                if seed != base_seed:
                    out[f"{objective}-seed{seed}"] = {"objective": objective, "seed": seed, "token_dropout": 0.0}
            if objective in self.token_dropout:
                out[f"{objective}-tokdrop"] = {"objective": objective, "seed": base_seed,
                                               "token_dropout": self.token_dropout_p}
        return out


class ModelConfig(_Section):
    """One model to analyse.

    * ``kind: trained``: a model of this config's ``train`` section; ``run``
      names it (default: ``name``), e.g. ``mt``, ``lm-seed1``, ``mlm-tokdrop``.
    * ``kind: huggingface``: ``path`` is a local directory with ``config.json``,
      weights and a tokenizer (BERT-like encoders, GPT-2-like decoders, and the
      encoder of Marian/T5-like encoder-decoders), or a hub id (``bert-base-uncased``)
      found in, or downloaded into, the Hugging Face cache (:mod:`evolution.models.hub`;
      ``HF_HUB_OFFLINE=1`` uses the cache alone).
    * ``kind: fairseq``: ``path`` is a checkpoint file of the ``translation``,
      ``language_modeling`` or ``masked_lm`` task (or of this project's
      plugin); ``data`` is the directory holding its ``dict*.txt``;
      ``sentencepiece`` optionally names the subword model applied to raw text
      (otherwise text is split on spaces).
    * ``kind: shipped``: ``path`` is a directory written by
      ``python -m evolution.models.shipped`` (``model.safetensors`` and
      ``model.json``; e.g. ``results/bible-full/models/mt``): a trained model
      loaded without unpickling, its vocabulary found through ``model.json``.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["trained", "huggingface", "fairseq", "shipped"]
    run: str | None = Field(None, description="trained: the training run (default: name)")
    hub_id: str | None = Field(None, description="huggingface: the hub id that ``path`` was given as (set when "
                                                 "loading; ``path`` is then its snapshot in the local cache)")
    path: Path | None = None
    data: Path | None = None
    sentencepiece: Path | None = None
    objective: Literal["mt", "lm", "mlm"] | None = Field(
        None, description="recorded as provenance; inferred from the model when omitted")

    @model_validator(mode="before")
    @classmethod
    def _hub_id(cls, data: Any, info: ValidationInfo) -> Any:
        """``kind: huggingface`` with a ``path`` that is no local directory but looks like a hub id
        (``bert-base-uncased``): resolved through the Hugging Face cache (:mod:`evolution.models.hub`)."""
        if not isinstance(data, dict) or data.get("kind") != "huggingface" or data.get("hub_id"):
            return data
        raw = data.get("path")
        if raw is None or Path(str(raw)).is_absolute():
            return data
        from evolution.models.base import ModelLoadError
        from evolution.models.hub import looks_like_hub_id, resolve

        if _resolve(raw, info).exists() or not looks_like_hub_id(str(raw)):
            return data
        try:
            local = resolve(str(raw))
        except ModelLoadError as exc:
            raise ValueError(f"model {data.get('name')!r}: {exc}") from None
        return {**data, "hub_id": str(raw), "path": str(local)}

    @field_validator("path", "data", "sentencepiece", mode="before")
    @classmethod
    def _paths(cls, v: Any, info: ValidationInfo) -> Path | None:
        if v is None:
            return None
        return _must_exist(_resolve(v, info), f"models[].{info.field_name}")

    @model_validator(mode="after")
    def _kind_fields(self) -> "ModelConfig":
        if self.kind == "trained":
            if self.path is not None or self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: a trained model's files come from the train stage; "
                                 "remove path/data/sentencepiece (or use kind: fairseq for files of your own)")
            return self
        if self.run is not None:
            raise ValueError(f"model {self.name!r}: 'run' is for kind: trained only")
        if self.path is None:
            raise ValueError(f"model {self.name!r}: kind {self.kind!r} needs 'path'")
        if self.kind == "shipped":
            if not (self.path / "model.json").is_file() or not (self.path / "model.safetensors").is_file():
                raise ValueError(f"model {self.name!r}: a shipped model path must be a directory with "
                                 f"model.json and model.safetensors, got {str(self.path)!r}")
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: a shipped model names its vocabulary in model.json; "
                                 "remove 'data' and 'sentencepiece'")
        elif self.kind == "huggingface":
            if not self.path.is_dir():
                raise ValueError(f"model {self.name!r}: a huggingface model path must be a directory "
                                 f"with config.json, got the file {str(self.path)!r}")
            if self.data is not None or self.sentencepiece is not None:
                raise ValueError(f"model {self.name!r}: 'data' and 'sentencepiece' are fairseq-only; "
                                 "a huggingface directory carries its own tokenizer")
        else:
            if self.path.is_dir():
                raise ValueError(f"model {self.name!r}: a fairseq model path must be a checkpoint "
                                 f"file (e.g. checkpoint_best.pt), got the directory {str(self.path)!r}")
            if self.data is None:
                raise ValueError(f"model {self.name!r}: fairseq models need 'data', the directory "
                                 "with the dictionary (dict.txt or dict.<lang>.txt) used in training")
        return self

    @property
    def run_name(self) -> str:
        return self.run or self.name


class EvolutionConfig(_Section):
    """The whole run: ``workdir``, ``seed``, ``cluster``, ``corpus``, ``train``, ``extract``, ``metrics``,
    ``report``, ``models``."""

    workdir: Path = Field(Path("runs/default"), validate_default=True,
                          description="where every stage writes; relative to the config file")
    seed: int = 0
    cluster: Annotated[ClusterConfig, Field(default_factory=ClusterConfig)]
    corpus: CorpusConfig
    extract: Annotated[ExtractConfig, Field(default_factory=ExtractConfig)]
    metrics: Annotated[MetricsConfig, Field(default_factory=MetricsConfig)]
    report: Annotated[ReportConfig, Field(default_factory=ReportConfig)]
    train: TrainConfig | None = Field(None, description="train MT/LM/MLM on the corpus (needs a parallel corpus)")
    models: list[ModelConfig] = Field(default_factory=list, description="default: every run of `train`")

    @field_validator("workdir", mode="before")
    @classmethod
    def _workdir(cls, v: Any, info: ValidationInfo) -> Path:
        return _resolve(v, info)

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster(cls, v: Any) -> Any:
        return _coerce_cluster(v)

    @model_validator(mode="after")
    def _unique_names(self) -> "EvolutionConfig":
        if not self.models:
            if self.train is None:
                raise ValueError("models: list at least one model to analyse, or add a train section "
                                 "(its runs are then analysed)")
            object.__setattr__(self, "models", [ModelConfig(name=n, kind="trained")
                                                for n in self.train.runs(self.seed)])
        if self.train is not None and not self.corpus.parallel:
            raise ValueError("train needs a parallel corpus (corpus.source: bible or parallel); "
                             "corpus.source: text has no target side to translate into")
        trained = [m for m in self.models if m.kind == "trained"]
        if trained and self.train is None:
            raise ValueError(f"models {[m.name for m in trained]} are kind: trained but there is no train section")
        if trained:
            runs = self.train.runs(self.seed)
            unknown = [m.run_name for m in trained if m.run_name not in runs]
            if unknown:
                raise ValueError(f"models: no training run named {unknown}; the train section defines {list(runs)}")
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"models: names must be unique, {dupes} appear more than once")
        if self.extract.max_batch_tokens < 2:
            raise ValueError("extract.max_batch_tokens must be at least 2")
        self._stores_apart()
        return self

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
        for name, other in (("extract.store", reps), ("the metrics inputs", location.inputs_dir(reps)),
                            ("workdir", str(self.workdir))):
            o = norm(other)
            if within(o, m) or (within(m, o) and name != "workdir"):
                raise ValueError(f"metrics.store {metrics} overlaps {name} ({other}); writing the metrics "
                                 "replaces the whole metrics store, so give it a location of its own, e.g. "
                                 f"{location.join(location.parent(reps), 'metrics.zarr')}")

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r}; configured: {[m.name for m in self.models]}")


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"{source}: the config cannot be run:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling against docs/config.md"
        elif e["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


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
    return (f"{where}: not valid YAML: {what}{line}\n  check the brackets, quotes and indentation there "
            "(evolution.yaml is a complete example)")


def load_config(path: str | Path, *, overrides: dict[str, Any] | None = None) -> EvolutionConfig:
    """Read and validate a YAML config.

    Parameters
    ----------
    path
        The YAML file. Relative paths inside it are resolved against its directory.
    overrides
        Top-level keys that replace those in the file (the CLI's ``--workdir``).

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
    data.update(overrides or {})
    try:
        return EvolutionConfig.model_validate(data, context={"base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(path))) from None


def resolved_dict(section: BaseModel) -> dict[str, Any]:
    """A JSON-compatible dict of a config section with every default filled in."""
    return section.model_dump(mode="json")
