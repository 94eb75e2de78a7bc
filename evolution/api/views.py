"""Vig (2019) attention views of any sentence, inline in Jupyter: the pipeline's views page
(:mod:`evolution.report.views`: head, model and neuron view, subword or word level, weights
alpha or ||alpha f(x)||) built from :func:`~evolution.api.represent.represent` and shown in an
``<iframe srcdoc>``: self-contained, no script from anywhere else, works offline. Long inputs
stay usable: each query keeps its ``top_k`` strongest edges."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evolution.api.model import Model
from evolution.api.represent import Representations, represent

__all__ = ["ViewPage", "views", "head_view", "model_view", "neuron_view"]


@dataclass(frozen=True)
class ViewPage:
    """One views page: ``html`` (a whole document), shown inline by Jupyter, ``save(path)`` to a file."""

    html: str
    height: int = 720

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:{self.height}px;'
            'border:1px solid #ddd" sandbox="allow-scripts"></iframe>'
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path


def views(
    models: Model | Sequence[Model] | Representations,
    sentences: str | Sequence[str] | None = None,
    *,
    top_k: int = 8,
    neuron: bool = True,
    word_rule: Literal["mean", "first"] = "mean",
    only: str | None = None,
    title: str = "attention views",
    height: int | None = None,
) -> ViewPage:
    """The head, model and neuron views of ``sentences`` for ``models`` (or of the first
    sentences stored with attention in existing :class:`Representations`); translation models
    also their decoder's self-attention and its attention over the source, on their greedy
    translation. ``height``: of the inline frame in pixels (default: the page's height up to
    :data:`MAX_HEIGHT`, a screen's worth; a longer page scrolls inside the frame)."""
    from evolution.report.views import views_data, views_html

    if isinstance(models, Representations):
        reps = models
        which = None
    else:
        if sentences is None:
            raise ValueError("give the sentence(s) to show")
        sentences = [sentences] if isinstance(sentences, str) else list(sentences)
        reps = represent(models, sentences, attention=True, norms=True)
        which = list(range(len(sentences)))
    data = views_data(reps.store, reps.specs, sentences=which, top_k=top_k, neuron=neuron, word_rule=word_rule)
    return ViewPage(views_html(data, title=title, only=only), height=height or _height(data, only))


#: the tallest inline frame ``views`` gives by default (pixels): about what a laptop's screen shows of
#: a notebook; a taller page scrolls inside its frame rather than stretching the notebook
MAX_HEIGHT = 900


def _height(data: dict, only: str | None) -> int:
    """Pixels that show the head view's two columns of the longest sentence (16 per token), the
    model view (84 per layer) and the neuron view (15 per key), but no more than
    :data:`MAX_HEIGHT`: a short sentence's frame fits its page, a long one's a screen."""
    tokens = max(
        (len(v["tokens"]) for m in data["models"] for it in m["sentences"] for v in it["levels"].values()), default=10
    )
    tokens = max(
        [tokens] + [len(it["decoder"]["tokens"]) for m in data["models"] for it in m["sentences"] if "decoder" in it]
    )
    layers = max((m["layers"] for m in data["models"]), default=6)
    parts = {"head": 16 * tokens + 140, "model": 84 * layers + 90, "neuron": 15 * tokens + 120}
    return min(MAX_HEIGHT, 160 + (parts[only] if only else sum(parts.values())))


def head_view(models, sentence: str, **kwargs) -> ViewPage:
    """bertviz's head view: lines from each token to the tokens it attends to, per layer and head."""
    return views(models, sentence, only="head", neuron=False, **kwargs)


def model_view(models, sentence: str, **kwargs) -> ViewPage:
    """bertviz's model view: every layer x head as a thumbnail."""
    return views(models, sentence, only="model", neuron=False, **kwargs)


def neuron_view(models, sentence: str, **kwargs) -> ViewPage:
    """bertviz's neuron view: queries, keys, q.k / sqrt(d) and the softmax of one head and query."""
    return views(models, sentence, only="neuron", neuron=True, **kwargs)
