"""Which occurrences each metric uses, decided once per model from the token coordinates.

The plan (index arrays) is computed in the client, once per model, with one
random stream for every sampling step; each analysis
(:mod:`evolution.analyses`) writes the part it needs to a file that its
tasks read (:func:`evolution.analyses.base.save_arrays`), so neither the plan
nor the representations travel in the task graph.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from evolution.config import MetricsConfig
from evolution.metrics.mi import select_frequent

logger = logging.getLogger(__name__)

__all__ = [
    "OccurrencePlan",
    "plan_occurrences",
    "text_parts",
    "neighbour_ids",
    "next_token_labels",
    "word_forms",
    "rows_by_sentence",
    "content_ids_by_sentence",
    "END",
]

#: Label of "no token": the next token after the last one (end of sentence),
#: the left neighbour of the first.
END = -1


@dataclass
class OccurrencePlan:
    """Rows of the ``token`` axis (sorted) and their labels, per metric."""

    mi: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # target -> (rows, labels)
    neighbors: dict[str, np.ndarray] = field(default_factory=dict)  # rows, token, position, left, right, sentence
    tsne: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # selection -> rows, token, position
    syntax: dict[str, np.ndarray] = field(default_factory=dict)  # rows, token, position, pos, deprel
    similarity_rows: np.ndarray | None = None
    annotated_rows: np.ndarray | None = None  # rows with a treebank label (None without annotation)
    notes: list[str] = field(default_factory=list)


def neighbour_ids(token_id: np.ndarray, sentence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right neighbour token ids (n,) within the sentence; :data:`END` at the edges."""
    left = np.full(len(token_id), END, dtype=np.int64)
    right = np.full(len(token_id), END, dtype=np.int64)
    same = sentence[1:] == sentence[:-1]
    left[1:][same] = token_id[:-1][same]
    right[:-1][same] = token_id[1:][same]
    return left, right


def next_token_labels(token_id: np.ndarray, sentence: np.ndarray) -> np.ndarray:
    """LM output label of each position: the next token, :data:`END` after the last
    (the representation at t predicts x(t+1); Voita et al. 2019, sec. 4; docs/metrics.md)."""
    return neighbour_ids(token_id, sentence)[1]


WORD_MARKERS = ("\u2581", "\u0120")  # SentencePiece "▁", GPT-2 byte-level "Ġ"


def word_forms(token_str) -> np.ndarray:
    """The word each token *starts*, for matching selections such as ``is``: ``▁is`` / ``Ġis``
    -> ``is``; a piece inside a word (``##is``, or ``is`` in ``h is`` when the vocabulary
    marks word starts) -> ``""``; with no markers at all (whitespace vocabularies) the token itself."""
    tokens = np.asarray(token_str, dtype=object)
    marked = any(str(t).startswith(WORD_MARKERS) for t in tokens)
    out = np.empty(len(tokens), dtype=object)
    for i, t in enumerate(tokens):
        t = str(t)
        if t.startswith(WORD_MARKERS):
            out[i] = t[1:]
        elif t.startswith("##") or marked:
            out[i] = ""
        else:
            out[i] = t
    return out


def rows_by_sentence(sentence: np.ndarray) -> dict[int, np.ndarray]:
    """``{sentence: rows of the token axis}``, each in token-axis order, which is position
    order (extraction writes a sentence's tokens in order)."""
    sentence = np.asarray(sentence)
    order = np.argsort(sentence, kind="stable")
    return {int(sentence[g[0]]): g for g in np.split(order, np.flatnonzero(np.diff(sentence[order])) + 1) if len(g)}


def content_ids_by_sentence(token_id: np.ndarray, sentence: np.ndarray, *, wanted=None) -> dict[int, list[int]]:
    """``{sentence: [token ids in token-axis order]}`` (optionally only the ``wanted`` sentences):
    what an analysis that re-runs the model (influence, MLM output MI) feeds it."""
    keep = None if wanted is None else set(int(w) for w in wanted)
    return {
        s: np.asarray(token_id)[rows].tolist()
        for s, rows in rows_by_sentence(sentence).items()
        if keep is None or s in keep
    }


def text_parts(
    *,
    sentence: np.ndarray,
    token_id: np.ndarray,
    freq_rank: np.ndarray,
    labels: dict[str, np.ndarray] | None,
    annotated_from: int = -1,
    ranks_given: bool = False,
) -> dict:
    """Split the token axis (n,) into the main text and the annotated text after it.

    ``labels`` are the store's annotation coordinates (``upos``, ``xpos``,
    ``deprel``: strings, ``""`` off the annotated text) and ``annotated_from``
    its first sentence (-1 or ``labels`` None: all is main text). Returns
    ``primary`` (n,) bool, the main text's rows; ``annotation`` (None or label
    codes (n,) per name: ``pos`` = PTB tag, ``deprel``, ``upos``;
    :data:`~evolution.labels.NO_LABEL` off the annotated text); and
    ``freq_rank`` counted on the main text only (the given ranks when nothing
    is annotated; 0 on annotated rows). Pass the store's ``train_rank`` as
    ``freq_rank`` to rank by the training split: it is kept (0 on annotated rows).
    """
    from evolution.labels import label_codes
    from evolution.tokens import frequency_ranks

    sentence = np.asarray(sentence)
    if labels is None or annotated_from < 0:
        return {"primary": np.ones(len(sentence), bool), "annotation": None, "freq_rank": np.asarray(freq_rank)}
    primary = sentence < annotated_from
    codes = {name: label_codes(labels[key]) for name, key in (("pos", "xpos"), ("deprel", "deprel"), ("upos", "upos"))}
    rank = np.zeros(len(sentence), dtype=np.int32)
    rank[primary] = np.asarray(freq_rank)[primary] if ranks_given else frequency_ranks(np.asarray(token_id)[primary])
    return {"primary": primary, "annotation": codes, "freq_rank": rank}


def _sample_per_type(rows: np.ndarray, types: np.ndarray, *, max_per_type: int, rng) -> np.ndarray:
    keep = []
    for t in np.unique(types):
        r = rows[types == t]
        keep.append(r if len(r) <= max_per_type else rng.choice(r, max_per_type, replace=False))
    return np.sort(np.concatenate(keep)) if keep else np.empty(0, dtype=np.int64)


def _frequent_rows(labels: np.ndarray, within: np.ndarray, *, top: int, min_count: int) -> np.ndarray:
    """Rows (sorted) among ``within`` whose label is one of the ``top`` most frequent there."""
    return within[select_frequent(labels[within], n_types=top, min_count=min_count)]


def _enough_types(plan: OccurrencePlan, what: str, *, n_types: int, sel, where: str = "", fix: str = "") -> bool:
    """Whether an analysis set has >= 2 token types; notes in ``plan`` when it has
    fewer than 2 (the metric is skipped) or fewer than ``sel.top``."""
    if n_types < 2:
        plan.notes.append(
            f"{what}: fewer than 2 token types with >= {sel.min_count} occurrences{where}; "
            f"lower metrics.tokens.min_count{fix}"
        )
        return False
    if n_types < sel.top:
        plan.notes.append(
            f"{what}: only {n_types} token types have >= {sel.min_count} occurrences{where} (asked for {sel.top})"
        )
    return True


def plan_occurrences(
    *,
    token_id: np.ndarray,
    token_str: np.ndarray,
    sentence: np.ndarray,
    position: np.ndarray,
    objective: str | None,
    cfg: MetricsConfig,
    seed: int,
    sentence_order: np.ndarray | None = None,
    primary: np.ndarray | None = None,
    annotation: dict[str, np.ndarray] | None = None,
    label_strings: dict[str, np.ndarray] | None = None,
) -> OccurrencePlan:
    """Decide the rows of every metric for one model. Deterministic in ``seed``.

    ``sentence_order`` lists sentence ids in corpus order (default: sorted
    unique ids); similarity uses all tokens of its first ``sentences``.
    ``primary`` (n,) bool marks the rows of the main text (default: all);
    every metric but the syntactic neighbour rates uses only those.
    ``annotation`` maps ``pos`` and ``deprel`` to per-row label codes
    (:data:`evolution.labels.NO_LABEL` where a row is not annotated);
    with it, ``plan.syntax`` holds the annotated rows of the most frequent
    types for :func:`~evolution.metrics.neighbors.within_type_measures`.
    ``label_strings`` are the store's annotation strings (``upos``, ``deprel``, ...), for
    t-SNE selections coloured by them.
    """
    rng = np.random.default_rng(seed)
    token_id = np.asarray(token_id, dtype=np.int64)
    sentence = np.asarray(sentence)
    main = np.flatnonzero(np.ones(len(token_id), bool) if primary is None else np.asarray(primary, bool))
    plan = OccurrencePlan()
    if annotation is not None:
        from evolution.labels import NO_LABEL

        plan.annotated_rows = np.flatnonzero(np.asarray(annotation["pos"]) != NO_LABEL)
    sel = cfg.tokens
    targets = {"input": token_id} if cfg.mi is not None else {}  # no MI asked: no MI rows, no notes
    if objective == "lm" and cfg.mi is not None:
        targets["output"] = next_token_labels(token_id, sentence)
    for target, labels in targets.items():
        rows = _frequent_rows(labels, main, top=sel.top, min_count=sel.min_count)
        if not _enough_types(plan, f"MI ({target})", n_types=len(np.unique(labels[rows])), sel=sel):
            continue
        plan.mi[target] = (rows, labels[rows])
    if cfg.neighbors is not None:
        # the neighbour measures' types: the tokens selection, or its neighbors.top most frequent
        nsel = sel if cfg.neighbors.top is None else sel.model_copy(update={"top": cfg.neighbors.top})
        frequent = _frequent_rows(token_id, main, top=nsel.top, min_count=nsel.min_count)
        rows = _sample_per_type(frequent, token_id[frequent], max_per_type=cfg.neighbors.max_per_type, rng=rng)
        left, right = neighbour_ids(token_id, sentence)
        plan.neighbors = {
            "rows": rows,
            "token": token_id[rows],
            "position": np.asarray(position)[rows],
            "left": left[rows],
            "right": right[rows],
            "sentence": sentence[rows],
        }
        if annotation is not None and plan.annotated_rows is not None:  # (both or neither)
            frequent = _frequent_rows(token_id, plan.annotated_rows, top=nsel.top, min_count=nsel.min_count)
            if _enough_types(
                plan,
                "POS / dependency neighbour rates",
                n_types=len(np.unique(token_id[frequent])),
                sel=nsel,
                where=" in the annotated text",
                fix=" or annotate more text",
            ):
                rows = _sample_per_type(frequent, token_id[frequent], max_per_type=cfg.neighbors.max_per_type, rng=rng)
                plan.syntax = {
                    "rows": rows,
                    "token": token_id[rows],
                    "position": np.asarray(position)[rows],
                    "sentence": sentence[rows],
                    **{k: np.asarray(annotation[k])[rows] for k in ("pos", "deprel")},
                }
    if cfg.tsne is not None:
        words = word_forms(token_str)
        for s in cfg.tsne.selections:
            by_label = s.color in ("upos", "deprel")
            if by_label and (label_strings is None or s.color not in label_strings):
                plan.notes.append(f"t-SNE '{s.name}': color {s.color} needs annotated text (corpus.annotated); skipped")
                continue
            if not by_label:
                pool = main
            elif plan.annotated_rows is None:
                raise ValueError(f"t-SNE '{s.name}': color {s.color} needs the annotation codes (annotation)")
            else:
                pool = plan.annotated_rows
            rows = pool[np.isin(words[pool], s.tokens)]
            if len(rows) < 4:
                where = " in the annotated text" if by_label else ""
                plan.notes.append(f"t-SNE '{s.name}': {len(rows)} occurrences of {s.tokens}{where}; skipped")
                continue
            if len(rows) > cfg.tsne.max_points:
                rows = np.sort(rng.choice(rows, cfg.tsne.max_points, replace=False))
            plan.tsne[s.name] = {
                "rows": rows,
                "token": words[rows],
                "position": np.asarray(position)[rows],
                "sentence": sentence[rows],
                "label": (
                    np.asarray(label_strings[s.color])[rows]
                    if by_label and label_strings is not None  # (by_label: checked above)
                    else np.full(len(rows), "", dtype=object)
                ),
            }
    if cfg.similarity is not None:
        order = np.unique(sentence[main]) if sentence_order is None else np.asarray(sentence_order)
        first = order[: cfg.similarity.sentences]
        plan.similarity_rows = np.flatnonzero(np.isin(sentence, first))
    return plan  # its notes are logged by the caller, once for the models that share one


def frequency_bins(edges, *, ranked_types: int, basis: str) -> tuple[list[tuple[int, int]], list[str]]:
    """The bins ``[lo, hi)`` of consecutive ``edges`` that ranks can reach: a bin starting
    beyond the ``ranked_types`` types of the ``basis`` (the training split, or the analysed
    text) is omitted with a note, never filled with other tokens (Voita et al.'s rare bins
    need a larger vocabulary than a small corpus has)."""
    bins = [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    kept = [b for b in bins if b[0] <= ranked_types]
    notes = []
    if len(kept) < len(bins):
        dropped = ", ".join(f"[{lo}, {hi})" for lo, hi in bins[len(kept) :])
        notes.append(f"frequency-rank bins {dropped} omitted: the {basis} has {ranked_types} token types")
    return kept, notes
