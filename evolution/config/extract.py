"""``extract``: how the hidden states and attention are stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from evolution.config.base import _Section, _store_location


class AttentionConfig(_Section):
    """Which attention maps to store: all heads of all layers for the first
    ``sentences`` sentences (attention grows with length squared, so the
    analyses of Clark et al. 2019 use a few hundred to a thousand sentences)."""

    sentences: int = Field(1000, ge=1)
    dtype: Literal["float16", "float32"] = "float16"
    norms: bool = Field(
        True,
        description="also the vector norms of Kobayashi et al. (2020) beside the maps, "
        "where the model supports them (fairseq Transformers, BERT-like encoders)",
    )


class ExtractConfig(_Section):
    """How representations are extracted.

    ``chunk_tokens`` is the Zarr chunk length along ``token``; one task
    computes ``task_chunks`` whole chunks, so a worker's task buffer is bounded by
    ``(layers + 1) * task_chunks * chunk_tokens * d_model`` values of ``dtype`` whatever
    the corpus size. Larger tasks batch sentences of more similar length
    (on random 8-60 word lines, batching costs 9.5% over the unpadded tokens
    with 8,192-token tasks, 6.7% with 16,384, 3.4% with one global length
    sort: ``python benchmarks/extract.py --padding``).
    """

    added_later = ("layers", "rows")

    store: str | None = Field(
        None,
        description="Zarr store path or fsspec URL (s3://bucket/prefix/reps.zarr; "
        "credentials from the environment); default <workdir>/reps.zarr",
    )
    dtype: Literal["float32", "float16"] = "float32"
    chunk_tokens: int = Field(4096, ge=16)
    task_chunks: int = Field(4, ge=1, description="Zarr chunks computed by one task")
    compressor: Literal["none", "zstd"] = Field(
        "none", description="codec of the hidden array; float32 states barely compress (8% with zstd)"
    )
    max_batch_tokens: int = Field(
        1024, ge=16, description="padded tokens per forward pass (1,024 was fastest on CPU: benchmarks/extract.py)"
    )
    too_long: Literal["truncate", "skip", "error"] = Field(
        "truncate", description="what to do with a sentence longer than the model's maximum positions"
    )
    attention: AttentionConfig | None = None
    layers: list[int] | None = Field(
        None,
        description="the layers whose states are stored (0: the embeddings, L: the last block; "
        "negative counts from the end, -1 = L), e.g. [0, 4, 8, -1]; null: all. The layer axis "
        "keeps 0..L; a layer left out is never written (no bytes; NaN when read with xarray). "
        "MI, neighbours and t-SNE run on the stored layers; what compares every layer "
        "(metrics.similarity with the change by frequency and by part of speech, "
        "metrics.trajectory, checkpoint series) is refused with it",
    )
    rows: Literal["needed"] | None = Field(
        None,
        description="needed: store only the token rows the enabled analyses read (MI's types, the "
        "neighbour queries and candidates, t-SNE's rows, the similarity sentences, the annotated rows "
        "of the change by part of speech, the attention sentences), planned from the metrics "
        "settings and seed before the extraction; every token's coordinates are kept, and hidden "
        "becomes (layer, stored_token, feature). Changing the metrics settings then redoes the "
        "extraction. null: every token's states",
    )
    memory_check: Literal["stop", "warn"] = Field(
        "stop",
        description="a worker's planned peak over the point where its nanny stops it (the workers' memory "
        "limit x distributed.worker.memory.terminate): stop (the run stops before it extracts, exit 2, naming "
        "what lowers the peak) or warn (a WARNING, and the run goes on); --plan warns either way. Not part of "
        "any cache key",
    )
    torch_threads: int = Field(1, ge=1, description="torch intra-op threads in each task")
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="where models run for extraction and every analysis that re-runs them: auto "
        "(a CUDA GPU where one is visible, else the CPU), cpu, cuda, cuda:N; LRP "
        "relevance and pruning run on the CPU",
    )

    def keyed(self) -> dict[str, Any]:
        """As :meth:`_Section.keyed`, without ``memory_check`` (what a run does when the plan is over
        the memory limit changes nothing it stores)."""
        out = super().keyed()
        out.pop("memory_check", None)
        return out

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not v:
            raise ValueError("empty: list the layers to store, e.g. [0, -1], or null for all")
        return v

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any, info: ValidationInfo) -> str | None:
        return _store_location(v, info, "extract.store")
