"""Attention heads across objectives: Clark et al. (2019) statistics, Voita et al.
(ACL 2019) confidence and positional heads, Kobayashi et al. (2020) attention
weights against vector norms (docs/heads.md; :mod:`evolution.metrics.heads`).

One unit per model re-runs it over every sentence of the analysis set (the
store's token ids, so truncation is the extraction's) and pools per-head sums
over every query, keeping no map; the head map reads the stored maps (the first
``extract.attention.sentences`` sentences) of every model; the dependency
units re-run each model on two treebanks; a translation model's decoder unit
re-runs it teacher-forced on the reference translations.

============================  ==============================  ==========================================
``heads/value``               (model, layer, head, measure)   entropy (nats) and its uniform baseline,
                                                              attention to BOS / [CLS] (``to_bos``),
                                                              EOS / [SEP] (``to_eos``), punctuation,
                                                              self, previous, next token; confidence;
                                                              share of maxima at offset -1 / 0 / +1
``heads/positional``          (model, layer, head)            >= heads.positional_share (90%) of maxima
                                                              on one offset
``heads/alpha_share``,        (model, layer, head, key_type)  share of each query's attention weight /
``heads/norm_share``                                          of its ||alpha f(x)|| going to bos, eos,
                                                              punct keys
``heads/layer_alpha_share``,  (model, layer, key_type)        the same per layer: weights averaged over
``heads/layer_norm_share``                                    heads / ||sum_h alpha f(x)||
============================  ==============================  ==========================================

``heads/rare_token_share``     (model, layer, head)            share of sentences whose maxima go mostly
                                                              to the least frequent token (training-split
                                                              counts; trained models only)
``heads/spearman``             (model, layer, quantity)        Spearman correlation of ||f(x)|| / of the
                                                              attention a token receives with its
                                                              frequency rank (Kobayashi et al. 2020)
``heads/syntactic``            (model, layer, head,            dependency accuracy >= the best offset
                              syntactic_relation)             baseline + heads.syntactic_margin
``heads_map/js_distance``     (unit, unit_b)                  Jensen-Shannon distance between all heads
``heads_map/xy``              (unit, component)               their 2-D MDS map; unit_model, unit_layer,
                                                              unit_head say which head a unit is
``heads_dependency/...``      (model, split, layer, head,     dependency accuracy (Clark et al.), the
                              relation, direction)            offset baseline, the head picked on the
                                                              select treebank and its score accuracy
``heads_decoder/value``,      (model, attention, layer,       translation models: the statistics above
``positional``,               head[, measure])                for the decoder self-attention and the
``rare_token_share``                                          encoder-decoder attention, teacher-forced
                                                              on the reference (parallel corpora)

``layer`` runs 1..L (blocks), ``head`` 0..H-1; models with fewer layers or
heads are padded with NaN. Select the head dimension as ``ds["head"]``
(``ds.head`` is xarray's method).

Submodules, one concept each:

* :mod:`~evolution.analyses.heads.statistics`: the per-head statistics unit
  (:func:`heads_task`, :func:`rare_token_hit`, :data:`KEY_TYPES`);
* :mod:`~evolution.analyses.heads.dependency`: dependency heads on two treebanks
  (:func:`treebank_text`, :func:`dependency_task`, :data:`DIRECTIONS`, :data:`SPLITS`);
* :mod:`~evolution.analyses.heads.decoder`: a translation model's decoder heads
  (:func:`decoder_text`, :func:`decoder_task`, :data:`ATTENTIONS`);
* :mod:`~evolution.analyses.heads.head_map`: the Jensen-Shannon map of all heads
  (:func:`head_map_task`);
* :mod:`~evolution.analyses.heads.analysis`: the :class:`Heads` analysis (its units
  and the ``heads``, ``heads_map``, ``heads_decoder``, ``heads_dependency`` groups);
* :mod:`~evolution.analyses.heads.report`: its tables and figures;
* :mod:`~evolution.analyses.heads.importance`: which heads matter, the
  :class:`HeadImportance` analysis (mask importance, LRP relevance; ``metrics.importance``);
* :mod:`~evolution.analyses.heads.probes`: Clark et al.'s attention parsing probes, the
  :class:`HeadProbes` analysis (``metrics.probes``);
* :mod:`~evolution.analyses.heads.pruning`: L0 head pruning with the from-scratch control,
  the :class:`HeadPruning` analysis (``metrics.pruning``); its task, one gated fine-tuning or
  from-scratch run, in :mod:`~evolution.analyses.heads.pruning_run`.
"""

# every name the module had before the split stays importable from here (Dask task graphs
# name the task functions by import path)
from evolution.analyses.heads.analysis import Heads, logger  # noqa: F401  # re-exported: importable from here as before
from evolution.analyses.heads.decoder import ATTENTIONS, decoder_task, decoder_text  # noqa: F401  # re-exported: importable from here as before
from evolution.analyses.heads.dependency import DIRECTIONS, SPLITS, dependency_task, treebank_text  # noqa: F401  # re-exported: importable from here as before
from evolution.analyses.heads.head_map import head_map_task  # noqa: F401  # re-exported: importable from here as before
from evolution.analyses.heads.report import (  # noqa: F401  # re-exported: importable from here as before
    FIGURES,
    _tables,
    dependency_heatmap,
    entropy_by_head,
    head_map,
    head_roles,
    special_tokens_by_layer,
)
from evolution.analyses.heads.statistics import KEY_TYPES, heads_task, rare_token_hit  # noqa: F401  # re-exported: importable from here as before

__all__ = [
    "Heads",
    "heads_task",
    "dependency_task",
    "entropy_by_head",
    "special_tokens_by_layer",
    "dependency_heatmap",
    "head_roles",
]
