"""``metrics``: the analyses and their settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from evolution.config.base import _resolve, _Section, _store_location, _treebank

#: a similarity method (Morcos et al. 2018's PWCCA, Kornblith et al. 2019's linear CKA)
Method = Literal["pwcca", "cka"]
#: an analysis that a trajectory snapshot can repeat
SnapshotAnalysis = Literal["mi", "neighbors", "similarity", "heads"]


def _methods(*names: Method) -> list[Method]:
    return list(names)


def _snapshot_analyses() -> list[SnapshotAnalysis]:
    return ["mi", "neighbors", "similarity", "heads"]


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
        1,
        ge=1,
        description="independent BERT corruptions of each sentence for MI with the MLM's output label "
        "(each ~15% of positions; more for small corpora, where one leaves the estimate "
        "mostly bias)",
    )
    algorithm: Literal["auto", "flat", "two_level"] = Field(
        "auto",
        description="k-means: flat faiss, or two-level (4 sqrt(k) coarse cells + one refinement pass; "
        "auto from k >= 2000)",
    )
    bootstrap: int = Field(
        200,
        ge=0,
        description="resamples of whole sentences (each restart's clusters fixed) "
        "for 95% intervals of MI, MI minus the control and both as "
        "fractions of H(X) (0: none)",
    )
    types: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=list,
        description="also MI of the same clusters on the occurrences of the N most frequent "
        "types, for each N listed (group mi_types; empty: none)",
    )


class NeighborsConfig(_Section):
    """kNN token identity, position and context measures (``docs/metrics.md``)."""

    k: int = Field(50, ge=1)
    metric: Literal["euclidean", "cosine"] = "euclidean"
    index: Literal["exact", "ivf"] = Field("exact", description="faiss flat index, or IVF (approximate) for large N")
    max_per_type: int = Field(
        1000,
        ge=2,
        description="occurrences sampled per token type (bounds the cost); the "
        "ceiling of the same left / right rates grows with it "
        "(same_left_ceiling: with k = 50 among 200 occurrences a "
        "perfect ordering by left token scores only ~0.23)",
    )
    bootstrap: int = Field(
        200, ge=0, description="bootstrap replicates over sentences for each rate's 95% interval (0: none)"
    )
    queries_per_unit: int = Field(
        16384,
        ge=8192,
        multiple_of=8192,
        description="pooled same-token queries one unit searches: a layer with more is split into "
        "units a cluster shares, whose neighbours equal one whole search's (a multiple of 8,192: "
        "evolution.metrics.neighbors.SPLIT_ALIGN; index: ivf searches a layer in one unit)",
    )
    top: int | None = Field(
        None,
        ge=2,
        description="the neighbour measures on the N most frequent types of the "
        "token selection only (null: all of metrics.tokens.top); a "
        "paper-sized MI selection of 1,000 types has few types with "
        "max_per_type occurrences and a pooled search over ~1M",
    )


class SimilarityConfig(_Section):
    """PWCCA / linear CKA between layers and models, and change by frequency (Voita et al. 2019,
    sec. 4; ``docs/metrics.md``)."""

    methods: list[Method] = Field(default_factory=lambda: _methods("pwcca", "cka"), min_length=1)
    sentences: int = Field(5000, ge=1, description="all tokens of the first N sentences (Voita et al.: 5,000)")
    min_ratio: float = Field(10.0, gt=0, description="refuse fewer than min_ratio x d occurrences")
    epsilon: float = Field(1e-6, gt=0, description="relative singular-value threshold for rank deficiency")
    freq_bins: list[int] = Field(
        default_factory=lambda: [1, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000],
        min_length=2,
        description="frequency-rank bin edges [lo, hi) (Voita et al., figure 4)",
    )
    bootstrap: int = Field(
        20,
        ge=0,
        description="bootstrap replicates over sentences for 95% intervals of the "
        "same-layer distances between models and of the change by "
        "frequency (0: none; each replicate redoes their SVDs)",
    )
    equal_bins: int = Field(
        10,
        ge=0,
        description="also change by frequency in this many bins holding equal "
        "numbers of occurrences, by frequency rank (group change_equal; "
        "0: none)",
    )


class InfluenceConfig(_Section):
    """Token influence (``docs/metrics.md``): mask one occurrence out of the attention keys at
    layer n; PWCCA/CKA distance of the other tokens' layer-n states, per frequency-rank
    bin of the masked token. Needs this project's trained models (key masking)."""

    max_per_bin: int = Field(
        500,
        ge=1,
        description="masked occurrences sampled per frequency bin, each at every "
        "layer (a bin with fewer is taken whole; influence/available)",
    )
    bootstrap: int = Field(
        100,
        ge=0,
        description="bootstrap replicates over sentences for each distance's 95% "
        "interval (influence/interval; 0: none; each redoes the PWCCA / "
        "CKA from per-sentence cross-products)",
    )
    methods: list[Method] = Field(default_factory=lambda: _methods("pwcca"), min_length=1)
    min_ratio: float = Field(10.0, gt=0, description="rows per bin needed, as a multiple of d")
    epsilon: float = Field(1e-6, gt=0)
    freq_bins: list[int] = Field(
        default_factory=lambda: [1, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000], min_length=2
    )


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
    selections: list[TSNESelection] = Field(
        default_factory=lambda: [
            TSNESelection(name="be", tokens=["is", "are", "were", "was"], color="token", masked=True),
            TSNESelection(name="it", tokens=["it"], color="position"),
        ]
    )


class HeadsConfig(_Section):
    """Per-head attention statistics on the stored attention maps (docs/heads.md; needs
    ``extract.attention``): Clark et al. (2019), Voita et al. (ACL 2019), Kobayashi et al. (2020)."""

    positional_share: float = Field(
        0.9,
        gt=0,
        le=1,
        description="a positional head puts at least this share of its maxima on one relative offset (Voita et al.)",
    )
    select: str | None = Field(
        None,
        description="treebank on which the best head per relation is picked "
        "(embedded name, e.g. ud-ewt-dev, or a CoNLL-U file); null: no "
        "dependency analysis",
    )
    score: str | None = Field(None, description="treebank on which the picked head is scored (e.g. ud-ewt-test)")
    max_sentences: int | None = Field(None, ge=1, description="use only the first N sentences of each treebank")
    sentences: int | None = Field(
        None,
        ge=1,
        description="the per-head statistics over the first N analysed "
        "sentences only (they re-run every model with its "
        "attention maps); null: every sentence",
    )
    word_rule: Literal["mean", "first"] = Field(
        "mean",
        description="attention from a word: mean over its pieces (Clark et al.), or its first piece "
        "(the released attention-analysis code)",
    )
    syntactic_margin: float = Field(
        0.10,
        ge=0,
        le=1,
        description="a syntactic head beats the best offset baseline by this much (Voita et al.: 10 points)",
    )
    relations: list[str] = Field(
        default_factory=lambda: ["nsubj", "obj", "amod", "advmod"],
        min_length=1,
        description="relations for which syntactic heads are counted (Voita et al.)",
    )
    punctuation: Literal["clark", "unicode"] = Field(
        "clark",
        description="which pieces count as punctuation for attention to punctuation: '.' and ',' "
        "(clark: Clark et al.'s released code) or every piece of Unicode punctuation "
        "characters (unicode)",
    )

    @field_validator("select", "score", mode="before")
    @classmethod
    def _treebanks(cls, v: Any, info: ValidationInfo) -> str | None:
        return _treebank(v, info, f"metrics.heads.{info.field_name}")

    @model_validator(mode="after")
    def _both(self) -> HeadsConfig:
        if (self.select is None) != (self.score is None):
            raise ValueError(
                "metrics.heads.select and metrics.heads.score go together: set both treebanks "
                "(e.g. ud-ewt-dev and ud-ewt-test) or both to null"
            )
        return self


class ImportanceConfig(_Section):
    """Which heads matter (docs/heads.md): head-mask importance (Michel et al. 2019) for fairseq
    models and for Hugging Face models with their pretraining head (masked or causal LM; a bare
    encoder is reported as not measurable), LRP head relevance (Voita et al. ACL 2019) for
    translation models."""

    sentences: int | None = Field(
        500,
        ge=1,
        description="the first N analysed sentences (null: all); each costs "
        "a forward and backward pass, and LRP one per target token",
    )
    relevance: bool = Field(True, description="LRP relevance of translation models' heads")


class ProbesConfig(_Section):
    """Attention parsing probes (Clark et al. 2019, section 5; docs/heads.md): trained on one
    treebank, scored on another, punctuation excluded."""

    train: str = Field("ud-ewt-dev", description="treebank the probes are trained on (embedded name or CoNLL-U file)")
    test: str = Field("ud-ewt-test", description="treebank they are scored on")
    max_sentences: int | None = Field(None, ge=1, description="use only the first N sentences of each treebank")
    epochs: int = Field(
        50,
        ge=1,
        description="at most this many passes over the training treebank (Clark et al.: 1, "
        "about 2,000 Adam steps, far from converged); with held_out > 0 "
        "training stops earlier, when the held-out loss stops falling",
    )
    held_out: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="share of the training treebank's sentences held out (drawn "
        "with the run's seed) for early stopping and the learning "
        "curve; 0: no early stopping, every epoch runs",
    )
    patience: int = Field(
        3,
        ge=1,
        description="epochs without a lower held-out loss before training stops; the probe keeps its lowest-loss epoch",
    )
    shuffle: bool = Field(True, description="visit the sentences in a new random order every epoch")

    @field_validator("train", "test", mode="before")
    @classmethod
    def _treebanks(cls, v: Any, info: ValidationInfo) -> str | None:
        return _treebank(v, info, f"metrics.probes.{info.field_name}")


#: the gates' learning rate: in 1,000 updates at 1e-4 the bible-full MT's gates stay open (docs/decisions.md)
GATE_LR = 0.02


class PruningConfig(_Section):
    """L0 pruning of translation models' heads with Hard-Concrete gates (Voita et al. ACL 2019,
    sec. 6; docs/heads.md): per lambda, gates on the encoder self-attention and on all three
    attention types, the latter also trained from scratch with the kept layout."""

    lambdas: list[float] = Field(
        default_factory=lambda: [0.02, 0.04, 0.06, 0.1],
        description="L0 penalty weights (lambda x mean over gated layers of open heads); "
        "[]: no gated run, only the references",
    )
    updates: int = Field(1000, ge=1, description="fine-tuning updates per run")
    lr: float = Field(1e-4, gt=0, description="Adam's learning rate while fine-tuning (constant)")
    gate_lr: float | None = Field(
        GATE_LR,
        gt=0,
        description="Adam's learning rate of the gates' log alpha (constant; "
        "null: lr, as the released code; docs/decisions.md)",
    )
    control: bool = Field(
        True,
        description="also fine-tune the model without gates for the same updates: the "
        "unpruned reference that had the same extra training",
    )
    max_tokens: int = Field(4096, ge=64, description="padded tokens per batch")
    scratch_updates: int | None = Field(
        None,
        ge=1,
        description="from-scratch control's updates (the base model's "
        "budget, e.g. 3800 for bible-full); null: no control",
    )
    scratch_lambdas: list[float] | None = Field(
        None,
        description="the lambdas whose all-attention layout is also "
        "trained from scratch (null: every lambda); each "
        "costs a base model's training",
    )
    scratch_full: bool = Field(
        True,
        description="with scratch_updates, also train every head from scratch by the "
        "same loop: the from-scratch column's reference, which separates the "
        "layout's effect from the training recipe's",
    )
    scratch_batches: Literal["regrouped", "fixed"] = Field(
        "regrouped",
        description="the from-scratch runs' batches: regrouped by length every epoch (the loop's), or "
        "fixed, fairseq-train's (cut once, reordered each epoch; docs/decisions.md, "
        "'The 1.2 BLEU gap')",
    )
    test_sentences: int | None = Field(None, ge=1, description="translate the first N analysed sentences (null: all)")
    models: list[str] | None = Field(None, description="MT models to prune (default: every MT model)")

    @model_validator(mode="after")
    def _scratch_lambdas(self) -> PruningConfig:
        unknown = [x for x in self.scratch_lambdas or [] if x not in self.lambdas]
        if unknown:
            raise ValueError(
                f"metrics.pruning.scratch_lambdas {unknown} are not in metrics.pruning.lambdas "
                f"{self.lambdas}: the from-scratch control trains a layout that pruning found"
            )
        return self


class TrajectoryConfig(_Section):
    """The analyses repeated on every checkpoint that ``train.checkpoints`` keeps, for the
    base model of each objective (docs/trajectory.md): each checkpoint gets the scorecard,
    and the curves of MI, the same-token rate and the distance to the final model per layer."""

    analyses: list[SnapshotAnalysis] = Field(
        default_factory=_snapshot_analyses,
        min_length=1,
        description="the analyses per checkpoint, with this metrics section's settings",
    )
    intervals: bool = Field(
        False,
        description="bootstrap intervals per checkpoint too (off: point values, "
        "the scorecard says so; the bootstraps cost most of the time)",
    )
    methods: list[Method] = Field(
        default_factory=lambda: _methods("pwcca", "cka"),
        min_length=1,
        description="distances of each checkpoint to its final model",
    )


class MetricsConfig(_Section):
    """Which metrics the ``metrics`` stage computes, and how. A section set
    to ``null`` is skipped."""

    added_later = ("trajectory", "reuse", "device")

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
    trajectory: TrajectoryConfig | None = Field(
        None, description="the analyses on the checkpoints kept in training (train.checkpoints); off by default"
    )
    reuse: list[Path] | None = Field(
        None,
        description="directories of unit results to reuse read-only (files named "
        "as in <workdir>/metrics/cache, e.g. results/bible-full/units): "
        "a unit whose result is there, for the same inputs and settings, "
        "is copied instead of computed",
    )
    store: str | None = Field(
        None,
        description="Zarr store path or fsspec URL of the metrics (s3://...; credentials "
        "from the environment); default <workdir>/metrics.zarr",
    )
    device: str | None = Field(
        None,
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="where the analyses' dense products, SVDs, k-means and nearest neighbours "
        "run: cpu (null), auto, cuda, cuda:N (torch); the same numbers to float "
        "rounding, so not part of any result's key",
    )

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any, info: ValidationInfo) -> str | None:
        return _store_location(v, info, "metrics.store")

    @field_validator("reuse", mode="before")
    @classmethod
    def _reuse(cls, v: Any, info: ValidationInfo) -> list[Path] | None:
        if v is None:
            return None
        if isinstance(v, (str, Path)):
            v = [v]
        out = []
        for d in v:
            path = _resolve(d, info)
            if not path.is_dir():
                raise ValueError(
                    f"metrics.reuse: {str(d)!r} is not a directory of unit results (relative paths "
                    "are resolved against the config file's directory); fix the path or drop it"
                )
            out.append(path)
        return out
