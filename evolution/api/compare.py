"""``ev.compare(a, b)``: what an intervention does to each layer, for two :class:`Representations`
of the same tokens (a clean and a patched run from :func:`~evolution.api.interop.from_transformer_lens`;
two models on the same sentences). The numbers are :func:`evolution.metrics.compare.compare_layer`'s."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import xarray as xr

from evolution.api.represent import Representations

__all__ = ["compare"]

logger = logging.getLogger(__name__)


def _one(reps: Representations, name: str | None, which: str) -> str:
    reps.check_open()
    names = list(reps.specs)
    if name is None:
        if len(names) != 1:
            raise ValueError(f"{which} holds models {names}: name the one to compare with models=(name_a, name_b)")
        return names[0]
    if name not in names:
        raise KeyError(f"{which} has no model {name!r}; it holds {names}")
    return name


def _stored_in_both(
    a: Representations, na: str, b: Representations, nb: str, wanted: list[int], *, given: bool, depth: int
) -> list[int]:
    """``wanted`` (layer numbers) kept to the layers whose states both runs stored: a store made with
    ``extract.layers`` (``ev.represent(..., layers=[...])``) never writes the others (NaN). Layers given
    (``given``) that a run did not store are refused, naming each run's stored layers and the fixes;
    by default the layers stored in both are compared (none: refused)."""
    from evolution.store import n_layers, stored_layers

    kept = {}
    for which, reps, name in (("a", a, na), ("b", b, nb)):
        stored = stored_layers(reps.store, name)
        if stored is not None and stored != list(range(n_layers(reps.store, name) or 0)):
            kept[f"{which}[{name!r}]"] = stored
    if not kept:
        return wanted
    both = [x for x in range(depth) if all(x in held for held in kept.values())]
    held = "; ".join(f"{w}'s store holds layers {h} only" for w, h in kept.items())
    how = "extract.layers, or ev.represent(..., layers=[...])"
    every = "ev.represent(..., layers=None) stores every layer; in a run, extract.layers: null"
    if not both:
        raise ValueError(
            f"compare: no layer is stored in both runs: {held} ({how}); re-extract one run with the other's "
            f"layers ({every})"
        )
    missing = [x for x in wanted if x not in both]
    if given and missing:
        raise ValueError(
            f"compare: layers {missing} are not stored in both runs: {held} ({how}); pass layers= among {both}, "
            f"the layers stored in both (or leave layers= out: those), or re-extract the missing layers ({every})"
        )
    if missing:
        logger.info("compare: %s; comparing the layers stored in both, %s", held, both)
    return [x for x in wanted if x in both]


def compare(
    a: Representations,
    b: Representations,
    *,
    models: tuple[str, str] | None = None,
    layers: Sequence[int] | None = None,
    tokens: dict | None = None,
    k: int = 100,
    neighbors: int = 10,
    restarts: int = 5,
    bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
    min_ratio: float = 1.0,
    progress: bool = False,
) -> xr.Dataset:
    """Per layer, how far run ``b`` is from run ``a`` on the same tokens.

    Returns a Dataset on ``layer`` (and ``bound``: low, high): ``pwcca_distance`` (weights from
    ``a``, the reference) and ``cka_distance`` between the runs' states of every token;
    ``mi_change`` (MI with the input token, b minus a, nats: the mean over ``restarts`` k-means
    runs of ``k`` clusters, capped at 1 per 10 occurrences; its interval holds the restarts'
    spread too) on the occurrences of ``tokens`` (default: the 100 most frequent types with at
    least 5 occurrences, as the API's MI); ``same_token_change`` (the share of each token's
    ``neighbors`` nearest others that are the same token, b minus a); each with
    ``<name>_interval`` over ``bootstrap`` resamples of whole sentences (paired), and the runs'
    own ``mi_a``, ``mi_b``, ``same_token_a``, ``same_token_b``. Layers where the states are
    identical are 0 exactly (interval [0, 0]).

    ``models``: ``(name in a, name in b)`` when either holds more than one model. The two must
    hold the same tokens (ids, sentences and positions), else a ``ValueError`` says where they
    part.

    ``layers``: layer numbers (0: the embeddings; negative: from the top); default every layer of
    both. A run whose store holds some layers only (``extract.layers``; ``ev.represent(...,
    layers=[...])``) is compared on the layers stored in both runs; ``layers=`` naming another is
    refused with each run's stored layers named.
    """
    from tqdm.auto import tqdm

    from evolution.api.analyses import API_TOKENS
    from evolution.metrics.compare import MEASURES, compare_layer
    from evolution.metrics.mi import select_frequent

    na = _one(a, models[0] if models else None, "a")
    nb = _one(b, models[1] if models else None, "b")
    da, db = a[na], b[nb]
    for name, d in ((na, da), (nb, db)):
        if "stored_token" in d.dims:
            raise ValueError(
                f"{name}: its store keeps some token rows only (extract.rows: needed), and compare reads every "
                "token's states; extract it with extract.rows: null"
            )
    for coord in ("sentence", "position", "token_id"):
        va, vb = da[coord].values, db[coord].values
        if len(va) != len(vb) or not np.array_equal(va, vb):
            where = (
                f"{len(va)} and {len(vb)} tokens" if len(va) != len(vb) else f"token {int(np.flatnonzero(va != vb)[0])}"
            )
            raise ValueError(
                f"a[{na!r}] and b[{nb!r}] differ in {coord} ({where}): compare runs on the same tokens (the same "
                "sentences, tokenised alike, with the same added tokens)"
            )
    depth = min(da.sizes["layer"], db.sizes["layer"])
    if da.sizes["layer"] != db.sizes["layer"]:
        logger.info(
            "compare: %s has %d layers, %s %d; comparing 0..%d", na, da.sizes["layer"], nb, db.sizes["layer"], depth - 1
        )
    wanted = list(range(depth)) if layers is None else [int(x) if int(x) >= 0 else depth + int(x) for x in layers]
    bad = [x for x in wanted if not 0 <= x < depth]
    if bad:
        raise KeyError(f"layers {bad} are not layers of both runs: valid are 0..{depth - 1}, or -{depth}..-1")
    wanted = _stored_in_both(a, na, b, nb, wanted, given=layers is not None, depth=depth)
    sel = {**API_TOKENS, **(tokens or {})}
    token_id, sentence = da["token_id"].values, da["sentence"].values
    mi_rows = select_frequent(token_id, n_types=int(sel["top"]), min_count=int(sel["min_count"]))
    n_mi = int(mi_rows.sum())
    if n_mi < 20:
        raise ValueError(
            f"compare: {n_mi} occurrences of types with at least {sel['min_count']} occurrences; MI needs more: "
            "pass more sentences, or tokens={'top': ..., 'min_count': ...} lower"
        )
    k_used = min(k, max(2, n_mi // 10))
    if k_used < k:
        logger.warning("compare: MI's k = %d capped to %d for %d occurrences (>= 10 per cluster)", k, k_used, n_mi)
    rows = []
    for layer in tqdm(wanted, desc="compare", disable=not progress):
        xa = np.asarray(da["hidden"].isel(layer=layer).values, dtype=np.float64)
        xb = np.asarray(db["hidden"].isel(layer=layer).values, dtype=np.float64)
        rows.append(
            compare_layer(
                xa,
                xb,
                token_id=token_id,
                sentence=sentence,
                mi_rows=mi_rows,
                k=k_used,
                neighbors=neighbors,
                restarts=restarts,
                bootstrap=bootstrap,
                level=level,
                seed=seed,
                min_ratio=min_ratio,
            )
        )
    data: dict[str, tuple] = {}
    for m in MEASURES:
        data[m] = ("layer", [r[m] for r in rows])
        data[f"{m}_interval"] = (("layer", "bound"), [r[f"{m}_interval"] for r in rows])
    for m in ("mi_a", "mi_b", "same_token_a", "same_token_b"):
        data[m] = ("layer", [r[m] for r in rows])
    return xr.Dataset(
        data,
        coords={"layer": np.array(wanted, dtype=np.int32), "bound": ["low", "high"]},
        attrs={
            "a": na,
            "b": nb,
            "a_key": a.extract_keys[na],
            "b_key": b.extract_keys[nb],
            "k": k_used,
            "neighbors": neighbors,
            "restarts": restarts,
            "bootstrap": bootstrap,
            "level": level,
            "seed": seed,
            "tokens": sel,
            "mi_occurrences": n_mi,
            "pwcca_weights": "a",
        },
    )
