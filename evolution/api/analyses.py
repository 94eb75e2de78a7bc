"""The pipeline's analyses on :class:`~evolution.api.represent.Representations`: each function
runs the same :class:`~evolution.analyses.base.Analysis` units the ``metrics`` stage runs
(:func:`evolution.analyses.runner.run_analyses`, synchronously, results cached in
``reps.cache``) and returns its ``metrics.zarr`` group as an in-memory xarray Dataset.

Every function takes ``models=`` (the names to analyse; default all) and ``layers=`` (the
layers to return; default all) beside its options, the keys of the config's ``metrics``
section (``docs/config.md``): ``mi(reps, k=100)`` is ``metrics: {mi: {k: 100}}``. ``tokens``
selects the types of MI and the neighbours; for a few sentences the default here is the 100 most
frequent types with at least 5 occurrences (the pipeline's default, 1,000 types with 1,000 occurrences, suits corpora).

On a store of some layers (``ev.represent(..., layers=[...])``, a run's ``extract.layers``), as in
the pipeline: MI, the neighbours and t-SNE compute the stored layers only, their groups keeping
every layer with NaN at the others; ``layers=`` naming a layer that is not stored is refused with
the stored ones named; the similarity and the change (PWCCA / CKA between every pair of layers)
refuse the model (:func:`check_stored_layers`, :func:`check_every_layer_stored`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from evolution.api.represent import Representations

__all__ = [
    "analyse",
    "inputs_of",
    "metrics_config",
    "mi",
    "neighbors",
    "similarity",
    "change",
    "influence",
    "heads",
    "dependency_heads",
    "importance",
    "probes",
    "API_TOKENS",
    "PER_LAYER",
    "partial_layers",
    "check_stored_layers",
    "check_every_layer_stored",
]

logger = logging.getLogger(__name__)

#: the token selection of the API's MI and neighbours unless ``tokens=`` says otherwise
API_TOKENS = {"top": 100, "min_count": 5}

#: the ``metrics`` sections whose analyses read the stored states one layer at a time (on a store of
#: some layers, the stored ones); ``similarity`` reads every layer, the others read no states
PER_LAYER = ("mi", "neighbors", "tsne")

#: how a store of some layers came to be, and how to store every layer, for the messages
_HOW = "extract.layers, or ev.represent(..., layers=[...])"
_EVERY = "ev.represent(..., layers=None) stores every layer; in a run, extract.layers: null"


def metrics_config(sections: dict[str, dict | None], *, tokens: dict | None = None):
    """The validated ``MetricsConfig`` of the ``metrics`` sections given (others off) and the
    token selection ``tokens`` (default :data:`API_TOKENS`)."""
    from pathlib import Path

    from pydantic import ValidationError

    from evolution.analyses import SECTIONS
    from evolution.config import ConfigError, MetricsConfig
    from evolution.config.base import error_lines

    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown analyses {unknown}; these exist: {list(SECTIONS)}")
    raw: dict[str, Any] = {s: None for s in SECTIONS}
    raw.update({s: (o or {}) for s, o in sections.items()})
    raw["tokens"] = tokens or API_TOKENS
    try:
        return MetricsConfig.model_validate(raw, context={"base_dir": Path.cwd()})
    except ValidationError as exc:
        raise ConfigError("; ".join(error_lines(exc, MetricsConfig))) from None


def inputs_of(
    reps: Representations,
    sections: dict[str, dict | None],
    *,
    tokens: dict | None = None,
    seed: int = 0,
    models: list[str] | None = None,
):
    """The analyses' :class:`~evolution.analyses.base.Inputs` for ``models`` of ``reps`` under the
    ``metrics`` sections given (others off; :func:`metrics_config`), its ``config`` the validated
    ``MetricsConfig``."""
    return inputs_for(reps, metrics_config(sections, tokens=tokens), seed=seed, models=models)


def inputs_for(reps: Representations, config, *, seed: int = 0, models: list[str] | None = None):
    """The analyses' :class:`~evolution.analyses.base.Inputs` for ``models`` of ``reps`` under the
    validated ``MetricsConfig`` ``config`` (:func:`inputs_of` builds it from sections)."""
    from evolution import location
    from evolution.analyses.inputs import ModelSource, load_inputs

    reps.check_open()
    names = list(models) if models is not None else list(reps.specs)
    unknown_models = [n for n in names if n not in reps.specs]
    if unknown_models or not names:
        raise KeyError(
            f"models={names!r}: {unknown_models or 'none'} not in these representations; they hold {list(reps.specs)}"
        )
    sources = [
        ModelSource(
            name=n,
            kind=reps.specs[n]["kind"],
            key=reps.extract_keys[n],
            spec=reps.specs[n],
            objective=reps.specs[n].get("objective"),
        )
        for n in names
    ]
    attrs = {
        # the keyed metrics section, as the pipeline's groups carry it (where they go and run left out)
        "config": {k: v for k, v in config.keyed().items() if k not in ("store", "device", "reuse")},
        "seed": seed,
        "representations": reps.store,
        "runs": _runs(reps, names),
        "extract_keys": {n: reps.extract_keys[n] for n in names},
    }
    inputs = load_inputs(
        store=reps.store,
        models=sources,
        config=config,
        seed=seed,
        torch_threads=1,
        arrays_dir=location.inputs_dir(reps.store),
        attrs=attrs,
    )
    return inputs


def analyse(
    reps: Representations,
    sections: dict[str, dict | None],
    *,
    tokens: dict | None = None,
    seed: int = 0,
    models: list[str] | None = None,
    progress: bool = False,
    client=None,
) -> dict[str, xr.Dataset]:
    """Run the analyses whose ``metrics`` config sections are given (others off) on ``reps`` and
    return every group they write, by name (e.g. ``{"similarity": ..., "change": ...}``).
    ``client``: a ``distributed.Client`` whose workers compute the analyses' tasks (as the
    pipeline's metrics stage does; default: this process, one task after another)."""
    from evolution.analyses import ANALYSES
    from evolution.analyses.runner import run_analyses

    inputs = inputs_of(reps, sections, tokens=tokens, seed=seed, models=models)
    config = inputs.config
    if config.similarity is not None:
        check_every_layer_stored(inputs)
        check_similarity(inputs, config.similarity)
    wanted = [a for a in ANALYSES if a.enabled(config)]
    return run_analyses(wanted, inputs, cache=reps.cache, client=client, progress=progress)


def check_similarity(inputs, scfg) -> None:
    """PWCCA / CKA need at least ``min_ratio`` x d occurrences: a model with fewer would be left
    NaN; refuse it here, naming the model, the counts and the fixes."""
    for m in inputs.models.values():
        n = len(m.plan.similarity_rows)
        if n < scfg.min_ratio * m.d_model:
            raise ValueError(
                f"similarity: {m.name} has {n} occurrences in the first {scfg.sentences} sentences for "
                f"{m.d_model} features; PWCCA / CKA need at least min_ratio x d = "
                f"{scfg.min_ratio:g} x {m.d_model} = {int(scfg.min_ratio * m.d_model)}: pass more "
                "sentences, leave the model out (models=[...]), or lower min_ratio= knowingly "
                "(CCA overfits below about 10 per dimension)"
            )


def partial_layers(reps: Representations, models: Sequence[str] | None = None) -> dict[str, list[int]]:
    """``model -> the layers its store holds`` for the models of ``reps`` (or ``models``) whose store
    holds some of their layers only (``extract.layers``; ``ev.represent(..., layers=[...])``);
    models holding every layer are left out (an empty dict: no model is partial)."""
    from evolution.store import n_layers, stored_layers

    out = {}
    for n in list(models) if models is not None else list(reps.specs):
        kept, total = stored_layers(reps.store, n), n_layers(reps.store, n)
        if kept is not None and total is not None and kept != list(range(total)):
            out[n] = kept
    return out


def check_stored_layers(
    reps: Representations, layers: Sequence[int], *, models: Sequence[str] | None = None, what: str
) -> None:
    """Refuse ``layers`` (layer numbers, resolved) naming a layer whose states a model analysed
    did not store: a ``ValueError`` naming ``what`` (the analysis), each such model with the layers
    it holds, and the fixes (``layers=`` among them, or a re-extraction of every layer)."""
    partial = partial_layers(reps, models)
    missing = {n: [x for x in layers if x not in kept] for n, kept in partial.items()}
    missing = {n: xs for n, xs in missing.items() if xs}
    if not missing:
        return
    held = "; ".join(
        f"{n}'s store holds layers {partial[n]} only, not {', '.join(map(str, xs))}" for n, xs in missing.items()
    )
    kept = sorted(set.intersection(*(set(x) for x in partial.values())))
    among = f"pass layers= among {kept}" if kept else "analyse one model at a time (models=[...])"
    raise ValueError(
        f"{what}: layers={list(layers)}: {held} ({_HOW}); {among} (or leave layers= out: the stored layers), "
        f"or re-extract the missing layers ({_EVERY})"
    )


def check_every_layer_stored(inputs) -> None:
    """Refuse the similarity and the change (PWCCA / CKA between every pair of layers; the change
    by frequency and part of speech between adjacent ones) on a model whose store holds some
    layers only: a ``ValueError`` naming the model, its stored layers and the fixes."""
    partial = {m.name: list(m.stored) for m in inputs.models.values() if m.stored is not None}
    if not partial:
        return
    held = "; ".join(f"{n}'s store holds layers {kept} only" for n, kept in partial.items())
    others = [n for n in inputs.models if n not in partial]
    leave = f", or analyse the others only (models={others})" if others else ""
    raise ValueError(
        f"similarity (ev.similarity, ev.change) reads every layer of {', '.join(partial)}: it compares the "
        f"layers with each other (PWCCA, CKA; the change between adjacent layers), and {held} ({_HOW}); "
        f"re-extract every layer ({_EVERY}){leave}"
    )


def _runs(reps: Representations, names: list[str]) -> dict[str, dict]:
    """What the scorecard needs of models that record their training run (shipped models):
    objective, seed, token dropout."""
    from evolution.models.kinds import kind_of

    out = {}
    for n in names:
        kind = kind_of(reps.specs[n]["kind"])
        if kind.recorded_run is not None:
            out[n] = kind.recorded_run(Path(reps.specs[n]["path"]))
    return out


def select_layers(ds: xr.Dataset, layers: Sequence[int] | None) -> xr.Dataset:
    """``ds`` on ``layers`` only, along whichever of ``layer``, ``layer_a``, ``layer_b`` it has
    (and the ``layer_pair`` s between two of them); unknown layers are named in a ``KeyError``."""
    if layers is None:
        return ds
    layers = [int(x) for x in layers]
    out = ds
    for dim in ("layer", "layer_a", "layer_b"):
        if dim in ds.dims:
            have = [int(x) for x in ds[dim].values]
            missing = [x for x in layers if x not in have]
            if missing:
                raise KeyError(f"layers {missing} are not in this group; it has {dim} {have}")
            out = out.sel({dim: layers})
    if "layer_pair" in ds.dims and "layer_from" in ds.coords:
        keep = [
            i
            for i, (a, b) in enumerate(zip(ds.layer_from.values, ds.layer_to.values, strict=True))
            if int(a) in layers and int(b) in layers
        ]
        out = out.isel(layer_pair=keep)
    return out


def _one(
    reps: Representations,
    section: str,
    group: str,
    options: dict[str, Any],
    *,
    layers: Sequence[int] | None = None,
    first_layer: int = 0,
    **kw,
) -> xr.Dataset:
    """Group ``group`` of the analysis of ``metrics.<section>`` with ``options``; ``layers`` checked
    against the models before any work (``first_layer``: 0 where the group has the embeddings as
    layer 0, 1 where its layers are the attention blocks 1..L)."""
    reps.check_open()
    layers = resolve_layers(reps, layers, models=kw.get("models"), first=first_layer)
    if layers is not None and section in PER_LAYER:
        check_stored_layers(reps, layers, models=kw.get("models"), what=section)
    out = analyse(reps, {section: options}, **kw)
    if group not in out:
        raise ValueError(
            f"{section}: nothing to compute on these representations (too few occurrences or "
            f"models for {group}; see the log, and the tokens= / options given)"
        )
    return select_layers(out[group], layers)


def resolve_layers(
    reps: Representations, layers: Sequence[int] | None, *, models: Sequence[str] | None = None, first: int = 0
) -> list[int] | None:
    """``layers`` as layer numbers of the models analysed, checked before any computation: ``first``
    .. L (L: the deepest model's number of blocks), or negative, counted from the top as in Python
    (-1: layer L). A ``KeyError`` names what is out of range and the valid ones."""
    from operator import index

    from evolution.store import n_layers

    if layers is None:
        return None
    if isinstance(layers, (int, str)):
        raise TypeError(f"layers={layers!r}: give a list of layer numbers, e.g. layers=[0, -1]")
    names = list(models) if models is not None else list(reps.specs)
    depths = {n: (n_layers(reps.store, n) or 1) - 1 for n in names if n in reps.specs}
    if not depths:
        return [index(x) for x in layers]
    top = max(depths.values())
    out, bad = [], []
    for x in layers:
        try:
            i = index(x)
        except TypeError:
            raise TypeError(f"layers={list(layers)!r}: {x!r} is not a layer number (an integer)") from None
        if i < 0 and len(set(depths.values())) > 1:
            raise KeyError(
                f"layers={list(layers)!r}: {i} counts from the top, but the models differ in depth "
                f"({depths}); give layer numbers from {first}"
            )
        j = top + 1 + i if i < 0 else i
        if first <= j <= top:
            out.append(j)
        else:
            bad.append(i)
    if bad:
        what = "0 the embeddings, " if first == 0 else ""
        raise KeyError(
            f"layers {bad} are not layers of {', '.join(depths)}: valid are {first}..{top} ({what}{top} the last "
            f"block), or {first - top - 1}..-1 counted from the top"
        )
    return out


def mi(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    tokens: dict | None = None,
    seed: int = 0,
    **options,
) -> xr.Dataset:
    """MI with the input token (and the output label) per layer via k-means (Voita et al. 2019,
    sec. 4): the ``mi`` group. Options: ``metrics.mi`` (``k``, ``restarts``, ``bootstrap``, ...)."""
    options.setdefault("k", 100)
    return _one(reps, "mi", "mi", options, tokens=tokens, seed=seed, models=models, layers=layers)


def neighbors(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    tokens: dict | None = None,
    seed: int = 0,
    **options,
) -> xr.Dataset:
    """Nearest-neighbour rates per layer (same token, position distance, same left / right token
    with chance and ceiling; Voita et al. 2019, sec. 5): the ``neighbors`` group."""
    return _one(reps, "neighbors", "neighbors", options, tokens=tokens, seed=seed, models=models, layers=layers)


def similarity(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    seed: int = 0,
    **options,
) -> xr.Dataset:
    """PWCCA / CKA distances between every (model, layer) pair: the ``similarity`` group."""
    options.setdefault("min_ratio", 1.0)
    return _one(reps, "similarity", "similarity", options, seed=seed, models=models, layers=layers)


def change(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    seed: int = 0,
    **options,
) -> xr.Dataset:
    """Change between adjacent layers by frequency-rank bin: the ``change`` group (computed with
    :func:`similarity`, cached: calling both costs one run)."""
    options.setdefault("min_ratio", 1.0)
    return _one(reps, "similarity", "change", options, seed=seed, models=models, layers=layers)


def influence(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    seed: int = 0,
    **options,
) -> xr.Dataset:
    """Token influence by frequency bin (this project's models: fairseq and shipped): ``influence``."""
    options.setdefault("min_ratio", 1.0)
    return _one(reps, "influence", "influence", options, seed=seed, models=models, layers=layers, first_layer=1)


def heads(
    reps: Representations, *, models: Sequence[str] | None = None, layers: Sequence[int] | None = None, **options
) -> xr.Dataset:
    """Per-head statistics (Clark et al. 2019; Voita et al. ACL 2019) and the Kobayashi et al.
    (2020) norms on the stored attention: the ``heads`` group."""
    return _one(reps, "heads", "heads", options, models=models, layers=layers, first_layer=1)


def dependency_heads(
    reps: Representations,
    *,
    models: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    select: str = "ud-ewt-dev",
    score: str = "ud-ewt-test",
    max_sentences: int | None = 500,
    **options,
) -> xr.Dataset:
    """The best head per dependency relation, picked on ``select`` and scored on ``score`` against
    the best offset baseline (Clark et al. 2019): the ``heads_dependency`` group."""
    return _one(
        reps,
        "heads",
        "heads_dependency",
        {"select": select, "score": score, "max_sentences": max_sentences, **options},
        models=models,
        layers=layers,
        first_layer=1,
    )


def importance(
    reps: Representations, *, models: Sequence[str] | None = None, layers: Sequence[int] | None = None, **options
) -> xr.Dataset:
    """Head-mask importance (Michel et al. 2019) and, for translation models, LRP relevance
    (Voita et al. ACL 2019): the ``heads_importance`` group."""
    return _one(reps, "importance", "heads_importance", options, models=models, layers=layers, first_layer=1)


def probes(
    reps: Representations, *, models: Sequence[str] | None = None, layers: Sequence[int] | None = None, **options
) -> xr.Dataset:
    """Attention parsing probes (Clark et al. 2019, sec. 5) on UD EWT: the ``heads_probes`` group."""
    return _one(reps, "probes", "heads_probes", options, models=models, layers=layers)
