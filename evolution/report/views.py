"""Vig (2019) attention views as one static, offline HTML page: head view, model view
(layers x heads thumbnails) and neuron view (query, key, their element-wise product,
q . k / sqrt(d), softmax), for chosen sentences of every model, at subword or word level,
weighted by the attention alpha or by ||alpha f(x)|| (Kobayashi et al. 2020).

The page carries its data as JSON, edges and queries / keys packed into deflated binary
(:mod:`evolution.report.views_payload`: a 150-piece sentence of the shipped MT with decoder
and neuron view in about 0.8 MB), and draws it with the plain JavaScript of ``views_page/`` (no
script from anywhere else). Long inputs stay usable: only each query's ``top_k`` strongest
edges are kept. Maps come from the representation store's attention group (the sentences
extracted with ``extract.attention``); the neuron view re-runs the model for its queries
and keys (:meth:`evolution.models.Adapter.forward_qk`), unscaled, as bertviz's neuron view
shows them (``transformers_neuron_view/modeling_bert.py``: ``query_layer``, ``key_layer``).

What an edge weighs, per query q (a row):

* ``alpha``: the attention weight alpha_qk (rows are distributions already);
* ``norm``: ||alpha_qk f(x_k)|| / sum_j ||alpha_qj f(x_j)|| (Kobayashi et al. 2020's weighted
  norm, stored as ``weighted_norm``, divided by its row sum so that its lines are drawn on the
  attention's scale);
* word level: attention *to* a word is the sum over its pieces' columns, attention *from* a
  word the mean over its pieces' rows (``word_rule="mean"``, Clark et al. 2019, the default of
  ``heads.word_rule``) or its first piece's row (``"first"``); special tokens are units of
  their own. Rows stay distributions.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evolution.report.views_payload import compact, read_payload, unpack_payload

logger = logging.getLogger(__name__)

__all__ = ["views_data", "views_html", "write_views", "unpack_payload", "read_payload"]


def _edges(maps: np.ndarray, top_k: int) -> list:
    """(L, H, T, T) row-normalised weights -> per layer, per head, [[query, key, weight], ...]
    with each query's ``top_k`` largest weights of at least 0.005, queries in order, each query's
    keys strongest first; weights rounded to multiples of 1/255, as the page carries and draws
    them (a line's opacity has 256 levels), so that the data and the page agree exactly."""
    L, H, T, _ = maps.shape
    k = min(top_k, T)
    out = []
    for layer in range(L):
        per_head = []
        for h in range(H):
            m = maps[layer, h]
            keys = np.argsort(-m, axis=1, kind="stable")[:, :k]
            per_head.append(
                [[q, int(j), round(float(m[q, j]) * 255) / 255] for q in range(T) for j in keys[q] if m[q, j] >= 0.005]
            )
        out.append(per_head)
    return out


def _row_normalised(w: np.ndarray) -> np.ndarray:
    w = np.nan_to_num(np.asarray(w, dtype=np.float64))
    return w / np.maximum(w.sum(-1, keepdims=True), 1e-30)


def views_data(
    store: str,
    specs: dict[str, dict],
    *,
    sentences: Sequence[int] | None = None,
    top_k: int = 8,
    neuron: bool = True,
    word_rule: Literal["mean", "first"] = "mean",
    decoder: bool = True,
) -> dict[str, Any]:
    """The page's data: per model and sentence, tokens and top-k edges for every
    (level, weight) (``levels[level]["edges"][weight][layer][head]``: ``[query, key, weight]``
    lists, weights in multiples of 1/255: :func:`_edges`), and queries / keys ``(L, H, T, d_head)``
    for the neuron view (float16 values). The page holds exactly these numbers
    (:func:`evolution.report.views_payload.unpack_payload` of its payload equals them).

    ``specs`` maps model names to adapter specs (for token strings and the neuron view);
    ``sentences`` None: the first 3 sentences every model has stored; ``decoder``: for
    translation models also the decoder's self-attention and its attention over the source
    (``item["decoder"]``: the tokens of the model's greedy translation, ``</s>`` first as the
    decoder reads them, and top-k edges of both, subword level, alpha); ``word_rule`` how
    attention from a word is formed (module docstring; :func:`evolution.metrics.heads.word_attention`). Raises
    ``ValueError`` naming the model and the sentences that are stored when a
    requested sentence was not extracted with attention.
    """
    from evolution.metrics.heads import word_attention, word_units
    from evolution.metrics.plan import rows_by_sentence
    from evolution.models import cached_adapter
    from evolution.store import open_attention, open_representations

    if sentences is None:
        common = sorted(
            set.intersection(*(set(int(s) for s in open_attention(store, n)["sentence"].values) for n in specs))
        )
        sentences = common[:3]
    models = []
    for name, spec in specs.items():
        att, reps = open_attention(store, name), open_representations(store, name)
        stored = [int(s) for s in att["sentence"].values]
        missing = [s for s in sentences if s not in stored]
        if missing:
            raise ValueError(
                f"model {name!r}: sentence(s) {missing} were not extracted with attention; the store "
                f"holds corpus sentences {stored[0]}..{stored[-1]} ({len(stored)}): choose among them in "
                "report.views.sentences, or raise extract.attention.sentences and rerun"
            )
        adapter = cached_adapter(spec)
        rows_of = rows_by_sentence(reps["sentence"].values)
        n_prefix, n_suffix = adapter.content_offset, len(adapter.suffix)
        items = []
        for s in sentences:
            k = stored.index(s)
            t = int(att["length"].values[k])
            ids = att["input_id"].values[k, :t].tolist()
            alpha = np.asarray(att["attention"][k, :, :, :t, :t].values, dtype=np.float64)
            weights = {"alpha": _row_normalised(alpha)}
            if "weighted_norm" in att:
                weights["norm"] = _row_normalised(att["weighted_norm"][k, :, :, :t, :t].values)
            word_id = reps["word_id"].values[rows_of[s]]
            pieces = adapter.pieces(ids)
            texts = _texts(reps, rows_of[s], pieces, n_prefix)
            units = word_units(word_id, n_prefix=n_prefix, n_suffix=n_suffix)
            n_words = int(word_id.max()) + 1 if len(word_id) else 0
            words, word_texts = [], []
            for u in range(int(units.max()) + 1):
                idx = np.flatnonzero(units == u)
                inside = n_prefix <= u < n_prefix + n_words
                words.append(_join(pieces, idx) if inside else pieces[idx[0]])
                if texts is not None:
                    word_texts.append(_join(texts, idx) if inside else texts[idx[0]])
            levels = {
                "subword": {
                    "tokens": pieces,
                    "edges": {w: _edges(m, top_k) for w, m in weights.items()},
                    **({"texts": texts} if texts is not None else {}),
                },
                "word": {
                    "tokens": words,
                    "edges": {w: _edges(word_attention(m, units, rule=word_rule), top_k) for w, m in weights.items()},
                    **({"texts": word_texts} if texts is not None else {}),
                },
            }
            item: dict[str, Any] = {"sentence": s, "levels": levels}
            if neuron and adapter.supports_norms:
                q, kk = adapter.forward_qk([ids])
                # float16, as the page carries them (views_html), so that data and page agree exactly
                item["neuron"] = {
                    "q": q[:, 0].astype(np.float16).astype(float).tolist(),
                    "k": kk[:, 0].astype(np.float16).astype(float).tolist(),
                }
            if decoder and getattr(adapter, "supports_decoder", False) and hasattr(adapter, "translate"):
                item["decoder"] = _decoder_view(adapter, ids, top_k)
            items.append(item)
        models.append(
            {"name": name, "layers": int(att.sizes["layer"]), "heads": int(att.sizes["head"]), "sentences": items}
        )
    return {"models": models, "top_k": top_k, "word_rule": word_rule}


def _texts(reps, rows: np.ndarray, pieces: list[str], n_prefix: int) -> list[str] | None:
    """Per input position the text of the piece (``token_text``) where it differs from what the
    model saw (an ``<unk>``); None when nothing differs or the store has no ``token_text``."""
    if "token_text" not in reps.coords:
        return None
    texts = list(pieces)
    content = [str(t) for t in reps["token_text"].values[rows]]
    unknown = reps["is_unknown"].values[rows] if "is_unknown" in reps.coords else np.zeros(len(rows), bool)
    for i, (text, unk) in enumerate(zip(content, unknown, strict=True)):
        if unk:
            texts[n_prefix + i] = text
    return texts if texts != pieces else None


def _decoder_view(adapter, ids: list[int], top_k: int) -> dict[str, Any]:
    """The decoder attention of one source sentence over the model's greedy translation: tokens
    (the decoder's input, ``</s> y1 .. ym``), ``self`` and ``cross`` top-k edges per layer and head."""
    target = adapter.translate([ids], max_len_a=1.5, max_len_b=10)[0][: max(1, adapter.max_target_tokens - 1)]
    dec = adapter.build_decoder_input(target)
    own, cross = adapter.forward_decoder([ids], [dec])  # (L, 1, H, T, T), (L, 1, H, T, S)
    return {
        "tokens": adapter.pieces(dec),
        "layers": int(own.shape[0]),
        "self": _edges(_row_normalised(own[:, 0]), top_k),
        "cross": _edges(_row_normalised(cross[:, 0]), top_k),
    }


def _join(pieces: list[str], idx: np.ndarray) -> str:
    """A word from its pieces (SentencePiece ``▁`` / GPT-2 ``Ġ`` / WordPiece ``##`` / subword-nmt ``@@``
    markers removed)."""
    out = ""
    for i in idx:
        p = pieces[i]
        p = p[:-2] if p.endswith("@@") else p
        out += p[2:] if p.startswith("##") else p.lstrip("\u2581\u0120")
    return out


def views_html(data: dict[str, Any], *, title: str = "attention views", only: str | None = None) -> str:
    """The page as one self-contained HTML string (data inlined as JSON; ``</`` escaped so the
    data cannot end the script): what :func:`write_views` writes and notebooks display.
    ``only``: ``head``, ``model`` or ``neuron`` shows that view alone."""
    payload = json.dumps(compact(data), separators=(",", ":")).replace("</", "<\\/")
    rule = _WORD_RULES.get(data.get("word_rule", "mean"), "")
    page = (
        _page_template().replace("%TITLE%", html.escape(title)).replace("%WORDRULE%", rule).replace("%DATA%", payload)
    )
    if only is not None:
        if only not in ("head", "model", "neuron"):
            raise ValueError(f"only={only!r}: one of head, model, neuron")
        hide = ",".join(f"#panel-{p}" for p in ("head", "model", "neuron") if p != only)
        page = page.replace("</style>", f"{hide}{{display:none}}</style>", 1)
    return page


def write_views(path: str | Path, data: dict[str, Any], *, title: str = "attention views") -> Path:
    """Write the page of :func:`views_html` to ``path`` (under a temporary name, then renamed)."""
    path = Path(path)
    page = views_html(data, title=title)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


_WORD_RULES = {
    "mean": "Word level: attention to a word is the sum over its pieces, from a word the mean over its "
    "pieces (Clark et al. 2019).",
    "first": "Word level: attention to a word is the sum over its pieces, from a word its first "
    "piece's (Clark et al.'s released code).",
}


def _page_template() -> str:
    """The page without its data: ``views_page/page.html`` with ``views.css`` and ``views.js``
    (package data) put in, placeholders ``%TITLE%``, ``%WORDRULE%`` and ``%DATA%`` left."""
    from importlib.resources import files

    folder = files("evolution.report").joinpath("views_page")
    html, css, js = (folder.joinpath(f).read_text(encoding="utf-8") for f in ("page.html", "views.css", "views.js"))
    return html.replace("%STYLE%", css, 1).replace("%SCRIPT%", js, 1)
