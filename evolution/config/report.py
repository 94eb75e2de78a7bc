"""``report``: the report page and its attention views."""

from __future__ import annotations

from pydantic import Field

from evolution.config.base import _Section


class ViewsConfig(_Section):
    """Vig (2019) attention views (head, model and neuron view) as one offline HTML page,
    ``report/views.html``, for sentences stored with ``extract.attention``."""

    sentences: list[int] | None = Field(
        None,
        min_length=1,
        description="corpus sentence indices, among those stored with extract.attention; default: the first 3 stored",
    )
    models: list[str] | None = Field(
        None,
        min_length=1,
        description="the models shown (default: every model extracted with attention); each adds its data to the page",
    )
    top_k: int = Field(8, ge=1, description="edges kept per query (keeps long inputs usable)")
    neuron: bool = Field(True, description="the neuron view (re-runs the model for queries and keys)")


class ReportConfig(_Section):
    """What the ``report`` stage writes beside the figures and tables."""

    views: ViewsConfig | None = Field(default_factory=ViewsConfig)
