"""Where each figure and table goes on the report's page, under which human heading.

The page is grouped as the papers are: the representations (Voita, Sennrich & Titov,
EMNLP 2019: MI, neighbours, similarity, change, influence, t-SNE) and the attention
heads (Clark et al. 2019; Voita et al., ACL 2019; Kobayashi et al. 2020: statistics,
roles, dependency heads, norms, decoder, importance). Figures are named by their
identifier (:func:`evolution.analyses.figures`), tables by their heading
(:meth:`evolution.analyses.base.Analysis.tables`). An identifier this module does not
know goes under "Other", its heading a readable form of the name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SectionSpec", "GROUPS", "SECTIONS", "figure_place", "table_place", "readable", "slug"]


@dataclass(frozen=True)
class SectionSpec:
    """One subsection of the page: its anchor, its group (a top-level section) and heading."""

    id: str
    group: str
    heading: str
    intro: str = ""


#: top-level sections of the analyses, in page order: id -> heading
GROUPS: dict[str, str] = {
    "representations": "Representations (Voita, Sennrich & Titov 2019)",
    "heads": "Attention heads",
    "other": "Other",
}

#: subsections in page order
SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec(
        "mi",
        "representations",
        "Mutual information with the tokens",
        "How much of the input token (and of the output label) a layer's k-means clusters keep "
        "(paper section 3, figures 1-2).",
    ),
    SectionSpec(
        "neighbours",
        "representations",
        "Nearest neighbours",
        "Who are a token's nearest neighbours in a layer (paper section 5, figure 5).",
    ),
    SectionSpec(
        "similarity",
        "representations",
        "Distances between layers and models",
        "PWCCA and CKA distances between the layers of one model and between models (paper figure 3).",
    ),
    SectionSpec(
        "change",
        "representations",
        "Change between adjacent layers",
        "How much a token's representation changes from one layer to the next, by frequency and by POS tag "
        "(paper figure 4).",
    ),
    SectionSpec(
        "influence",
        "representations",
        "Influence of a token on the others",
        "How much masking one token changes the representations of the other tokens, by its frequency "
        "(paper section 5).",
    ),
    SectionSpec(
        "tsne",
        "representations",
        "t-SNE of selected tokens",
        "Occurrences of a few tokens placed by t-SNE per model and layer, coloured by a label.",
    ),
    SectionSpec(
        "heads-statistics",
        "heads",
        "Head statistics",
        "Entropy and spread of each head's attention (Clark et al. 2019).",
    ),
    SectionSpec(
        "heads-roles", "heads", "Head roles", "Positional, rare-token and syntactic heads (Voita et al., ACL 2019)."
    ),
    SectionSpec(
        "heads-dependency",
        "heads",
        "Dependency heads",
        "Dependency relations found by one head against the fixed-offset baseline (Clark et al. 2019).",
    ),
    SectionSpec(
        "heads-norms",
        "heads",
        "Special tokens and vector norms",
        "Attention weights against the norms of the weighted vectors (Kobayashi et al. 2020).",
    ),
    SectionSpec("heads-decoder", "heads", "Decoder heads", "The translation model's decoder."),
    SectionSpec(
        "heads-importance",
        "heads",
        "Importance, pruning and probes",
        "Which heads matter (Voita et al., ACL 2019; Michel et al. 2019) and attention parsing probes "
        "(Clark et al. 2019).",
    ),
    SectionSpec("other", "other", "Other"),
)

_SECTION = {s.id: s for s in SECTIONS}

#: figure identifier -> (subsection, title)
FIGURES: dict[str, tuple[str, str]] = {
    "mi": ("mi", "MI by layer"),
    "neighbors": ("neighbours", "Nearest neighbours by layer"),
    "heads_entropy": ("heads-statistics", "Attention entropy per head"),
    "mi_types": ("mi", "MI by the number of most frequent types"),
    "similarity_pairs": ("similarity", "Distances between models, by what they differ in (PWCCA)"),
    "similarity_pairs_cka": ("similarity", "Distances between models, by what they differ in (CKA)"),
    "change_equal_pwcca": ("change", "Change between adjacent layers by frequency, bins of equal size (PWCCA)"),
    "heads_map": ("heads-statistics", "Map of the heads"),
    "heads_special": ("heads-norms", "Attention and norms to special tokens"),
    "heads_roles": ("heads-roles", "Confidence and roles of every head"),
    "heads_dependency": ("heads-dependency", "Dependency relations by head"),
    "heads_decoder": ("heads-decoder", "Decoder heads"),
    "heads_importance": ("heads-importance", "Head importance"),
    "heads_pruning": ("heads-importance", "Pruning heads"),
    "heads_pruning_roles": ("heads-importance", "Roles of the heads that pruning keeps"),
    "heads_pruning_layers": ("heads-importance", "Heads kept per attention type and layer"),
    "heads_probes": ("heads-importance", "Attention parsing probes"),
    "heads_probes_curve": ("heads-importance", "Parsing probes: learning curves"),
}

#: families of figures, one per metric or selection: prefix -> (subsection, title before the suffix)
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("similarity_", "similarity", "Distances between layers and models"),
    ("change_pos_", "change", "Change between adjacent layers by POS tag"),
    ("change_", "change", "Change between adjacent layers by frequency"),
    ("influence_", "influence", "Influence by frequency"),
    ("tsne_", "tsne", "t-SNE"),
)

#: table heading prefix -> subsection (tables the analyses write; first match wins)
TABLES: tuple[tuple[str, str], ...] = (
    ("MI with", "mi"),
    ("Neighbours", "neighbours"),
    ("PWCCA distance", "similarity"),
    ("CKA distance", "similarity"),
    ("Head roles", "heads-roles"),
    ("Dependency heads", "heads-dependency"),
    ("Decoder heads", "heads-decoder"),
    ("Spearman correlation with frequency", "heads-norms"),
    ("Which heads matter", "heads-importance"),
    ("Attention parsing probes", "heads-importance"),
    ("Pruning heads", "heads-importance"),
)

_METRICS = {"pwcca": "PWCCA", "cka": "CKA", "svcca": "SVCCA"}


def readable(name: str) -> str:
    """An identifier as words: ``mean_norm`` -> "Mean norm", ``tsne_be`` -> "Tsne be"."""
    words = re.sub(r"[_\-]+", " ", str(name)).strip()
    return words[:1].upper() + words[1:] if words else str(name)


def slug(text: str) -> str:
    """An anchor-safe form of ``text`` (lower case letters, digits and '-')."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "x"


def figure_place(name: str) -> tuple[SectionSpec, str]:
    """(subsection, title) of the figure ``name``; unknown names go under "Other"."""
    if name in FIGURES:
        sid, title = FIGURES[name]
        return _SECTION[sid], title
    for prefix, sid, title in FAMILIES:
        if name.startswith(prefix) and len(name) > len(prefix):
            rest = name[len(prefix) :]
            if sid == "tsne":
                masked = rest.endswith("_masked")
                sel = rest[: -len("_masked")] if masked else rest
                return _SECTION[sid], f"t-SNE of the '{sel}' selection" + (" at masked positions" if masked else "")
            return _SECTION[sid], f"{title} ({_METRICS.get(rest, readable(rest))})"
    return _SECTION["other"], readable(name)


#: analysis name -> subsection of its tables whose heading :data:`TABLES` does not know
ANALYSIS_SECTIONS: dict[str, str] = {
    "mi": "mi",
    "neighbors": "neighbours",
    "similarity": "similarity",
    "change_pos": "change",
    "influence": "influence",
    "tsne": "tsne",
    "heads": "heads-statistics",
    "heads_importance": "heads-importance",
    "heads_probes": "heads-importance",
    "heads_pruning": "heads-importance",
}


def table_place(heading: str, analysis: str = "") -> SectionSpec:
    """The subsection of a table by its heading, else by the analysis that wrote it; unknown
    tables go under "Other"."""
    for prefix, sid in TABLES:
        if heading.startswith(prefix):
            return _SECTION[sid]
    return _SECTION[ANALYSIS_SECTIONS.get(analysis, "other")]
