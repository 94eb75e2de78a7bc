"""The report's figures on a synthetic metrics store whose numbers are known by construction
(seven models of three objectives, two seeds and one token-dropout control; a heads group
with planted roles and a confidence that differs by layer, head and model; MI with
fractions of H(X) that differ by a few per cent), and on the same store in the layout
written before the similarity group had ``same_layer`` / ``pair`` and the mi group its
fractions. Each figure function returns a figure from the path alone; draw_all writes the
PNG, the plotted numbers as CSV (checked against the store and against direct
computations) and SVG on request; the pair-kind bands are the min / max over the pairs of
each kind; colour limits follow the data; figures fit the report's column; legends sit
outside every axes; no text is smaller than the legibility floor."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from evolution.analyses.plotting import FONT, figure_data, open_group, plt
from evolution.metrics.heads import MEASURES
from evolution.metrics.results import write_metrics

MODELS = ["mt", "mt-seed1", "mt-tokdrop", "lm", "lm-seed1", "mlm", "mlm-seed1"]
OBJECTIVES = {m: m.split("-")[0] for m in MODELS}
RUNS = {
    m: {"objective": OBJECTIVES[m], "seed": 1 if "seed1" in m else 0, "token_dropout": 0.1 if "tokdrop" in m else 0.0}
    for m in MODELS
}
ATTRS = {"objectives": OBJECTIVES, "runs": RUNS, "seed": 0}
L = 5  # representation layers 0..4
HL, HH = 4, 3  # heads: layers 1..4, heads 0..2 (not square: a transposed map changes shape)
RELATIONS = ["nsubj", "obj", "amod", "advmod"]
#: the report's column: evolution.report.page.COLUMN less its 16-pixel padding on each side
COLUMN_PX = 1100 - 32
MAX_ASPECT = 3.5
NAN_PAIR, NAN_LAYER = ("mt-seed1", "lm-seed1"), 2  # one pair without a distance at one layer
OUTLIER = 0.95  # one within-model distance far above the rest (0-0.4)


def _similarity(rng) -> tuple[xr.Dataset, np.ndarray]:
    n = len(MODELS)
    d = np.full((2, n, L, n, L), np.nan)
    for q in range(2):
        for i in range(n):
            for j in range(n):
                if i == j:  # within a model: grows with the layer gap, 0 on the diagonal
                    gap = np.abs(np.subtract.outer(np.arange(L), np.arange(L)))
                    d[q, i, :, i, :] = 0.07 * gap + 0.01 * rng.random((L, L)) * (gap > 0)
                else:  # between models: asymmetric (PWCCA weights by one view)
                    d[q, i, :, j, :] = rng.uniform(0.05, 0.4, (L, L))
    d[0, MODELS.index("lm"), 0, MODELS.index("lm"), 4] = OUTLIER
    same = np.diagonal(d, axis1=2, axis2=4)
    same = (same + np.swapaxes(same, 1, 2)) / 2  # (metric, model_a, model_b, layer)
    a, b = MODELS.index(NAN_PAIR[0]), MODELS.index(NAN_PAIR[1])
    same[:, a, b, NAN_LAYER] = same[:, b, a, NAN_LAYER] = np.nan
    d[:, a, NAN_LAYER, b, NAN_LAYER] = d[:, b, NAN_LAYER, a, NAN_LAYER] = np.nan
    return xr.Dataset(
        {"distance": (("metric", "model_a", "layer_a", "model_b", "layer_b"), d)},
        coords={
            "metric": ["pwcca", "cka"],
            "model_a": MODELS,
            "layer_a": np.arange(L),
            "model_b": MODELS,
            "layer_b": np.arange(L),
        },
        attrs=ATTRS,
    ), same


def _new_similarity(rng) -> xr.Dataset:
    from evolution.analyses.similarity import pair_kind

    ds, same = _similarity(rng)
    kinds = [[pair_kind(a, b, objectives=OBJECTIVES, runs=RUNS) for b in MODELS] for a in MODELS]
    width = 0.01 * (1 + np.arange(L))
    iv = np.stack([same - width, same + width], axis=-1)
    return ds.assign(
        same_layer=(("metric", "model_a", "model_b", "layer"), same),
        interval=(("metric", "model_a", "model_b", "layer", "bound"), iv),
    ).assign_coords(
        layer=np.arange(L), bound=["low", "high"], pair=(("model_a", "model_b"), np.array(kinds, dtype=object))
    )


def _mi(rng, *, new: bool) -> xr.Dataset:
    targets = ["input", "output"]
    mi = np.full((len(MODELS), L, 2, 3), np.nan)
    for i, m in enumerate(MODELS):
        # input: 3.2 nats falling by an objective-specific amount; a few per cent of H apart
        fall = {"mt": 0.02, "lm": 0.05, "mlm": 0.035}[OBJECTIVES[m]]
        mi[i, :, 0, :] = (3.2 - fall * np.arange(L) - 0.01 * i)[:, None] + 0.004 * rng.standard_normal((L, 3))
        if OBJECTIVES[m] == "lm":
            mi[i, :, 1, :] = (1.0 + 0.1 * np.arange(L))[:, None] + 0.004 * rng.standard_normal((L, 3))
    shuffled = np.where(np.isnan(mi[..., 0]), np.nan, 0.3 + 0.01 * np.arange(L)[None, :, None])
    entropy = np.array([[3.5, 3.6 if OBJECTIVES[m] == "lm" else np.nan] for m in MODELS])
    ds = xr.Dataset(
        {
            "mi": (("model", "layer", "target", "restart"), mi),
            "mi_shuffled": (("model", "layer", "target"), shuffled),
            "entropy": (("model", "target"), entropy),
        },
        coords={"model": MODELS, "layer": np.arange(L), "target": targets, "restart": np.arange(3)},
        attrs=ATTRS,
    )
    ds["mi_mean"] = ds.mi.mean("restart")
    ds["mi_corrected"] = ds.mi_mean - ds.mi_shuffled
    if new:
        ds["mi_fraction"] = ds.mi_mean / ds.entropy
        ds["mi_corrected_fraction"] = ds.mi_corrected / ds.entropy
        for name, half in (("mi_mean", 0.02), ("mi_corrected_fraction", 0.005)):
            ds[f"{name}_interval"] = xr.concat([ds[name] - half, ds[name] + half], dim="bound").transpose(
                "model", "layer", "target", "bound"
            )
        ds = ds.assign_coords(bound=["low", "high"])
    return ds


def _mi_types() -> xr.Dataset:
    types = [10, 100]
    f = np.array([[[[0.9 - 0.02 * layer - 0.1 * k for k in range(2)]] for layer in range(L)] for _ in MODELS])
    return xr.Dataset(
        {
            "mi_fraction": (("model", "layer", "target", "types"), f),
            "mi_corrected_fraction": (("model", "layer", "target", "types"), f - 0.05),
            "n_types": (("model", "target", "types"), np.array([[[10.0, 90.0]]] * len(MODELS))),
        },
        coords={"model": MODELS, "layer": np.arange(L), "target": ["input"], "types": types},
        attrs=ATTRS,
    )


def _neighbors(rng) -> xr.Dataset:
    measures = ["same_token", "same_left", "same_left_chance", "same_left_ceiling"]
    v = rng.uniform(0.2, 0.9, (len(MODELS), L, len(measures)))
    return xr.Dataset(
        {
            "value": (("model", "layer", "measure"), v),
            "interval": (("model", "layer", "measure", "bound"), np.stack([v - 0.02, v + 0.02], -1)),
        },
        coords={"model": MODELS, "layer": np.arange(L), "measure": measures, "bound": ["low", "high"]},
        attrs=ATTRS,
    )


def _change(rng, groups: str, labels: list[str]) -> xr.Dataset:
    d = rng.uniform(0.01, 0.1, (1, len(MODELS), L - 1, len(labels)))
    return xr.Dataset(
        {"distance": (("metric", "model", "layer_pair", groups), d)},
        coords={
            "metric": ["pwcca"],
            "model": MODELS,
            "layer_pair": [f"{i}-{i + 1}" for i in range(L - 1)],
            "layer_from": ("layer_pair", np.arange(L - 1)),
            groups: labels,
        },
        attrs=ATTRS,
    )


def _influence(rng) -> xr.Dataset:
    d = rng.uniform(1e-4, 3e-3, (1, len(MODELS), L - 1, 3))
    return xr.Dataset(
        {
            "distance": (("metric", "model", "layer", "freq_bin"), d),
            "interval": (("metric", "model", "layer", "freq_bin", "bound"), np.stack([d * 0.9, d * 1.1], -1)),
        },
        coords={
            "metric": ["pwcca"],
            "model": MODELS,
            "layer": np.arange(1, L),
            "freq_bin": ["1-10", "10-100", "100-1000"],
            "bound": ["low", "high"],
        },
        attrs=ATTRS,
    )


def _tsne(rng) -> xr.Dataset:
    points = 12
    tok = np.array([["be" if p % 2 else "is" for p in range(points)]] * len(MODELS), dtype=object)
    return xr.Dataset(
        {
            "xy": (("model", "layer", "point", "component"), rng.normal(size=(len(MODELS), L, points, 2))),
            "token": (("model", "point"), tok),
            "position": (("model", "point"), np.tile(np.arange(points), (len(MODELS), 1))),
            "label": (("model", "point"), np.full((len(MODELS), points), "", dtype=object)),
        },
        coords={"model": MODELS, "layer": np.arange(L), "point": np.arange(points), "component": ["x", "y"]},
        attrs={**ATTRS, "color": "token", "masked": False},
    )


#: planted roles: (model, layer, head) -> letters
ROLES = {
    ("mt", 2, 1): "P",
    ("lm", 3, 0): "S",
    ("mt", 4, 2): "PS",
    ("mlm", 1, 2): "R",
    ("mlm", 2, 2): "R",
    ("mt", 1, 0): "R",
}
#: the relations of the planted syntactic heads (one, or two of the four)
SYNTACTIC = {("lm", 3, 0): ["nsubj"], ("mt", 4, 2): ["obj", "amod"]}
#: rare-token shares around the group's threshold (attribute rare_share = 0.22, not the default 0.2)
RARE = {("mlm", 1, 2): 0.25, ("mlm", 2, 2): 0.22, ("mlm", 3, 2): 0.21, ("mt", 1, 0): 0.5, ("mt", 3, 0): 0.21}
RARE_SHARE_ATTR = 0.22
MISSING_HEAD = ("lm-seed1", 2)  # a model with fewer heads: NaN there


def confidence_value(model: str, layer: int, head: int) -> float:
    return 0.2 + 0.1 * (layer - 1) + 0.02 * head + 0.003 * MODELS.index(model)


def _heads(rng) -> xr.Dataset:
    n = len(MODELS)
    value = rng.uniform(0.05, 0.6, (n, HL, HH, len(MEASURES)))
    value[..., MEASURES.index("entropy")] = rng.uniform(1.0, 2.5, (n, HL, HH))
    value[..., MEASURES.index("uniform_entropy")] = 2.8
    positional = np.zeros((n, HL, HH), bool)
    syntactic = np.zeros((n, HL, HH, len(RELATIONS)), bool)
    rare = np.full((n, HL, HH), 0.05)
    for i, m in enumerate(MODELS):
        for layer in range(1, HL + 1):
            for h in range(HH):
                value[i, layer - 1, h, MEASURES.index("confidence")] = confidence_value(m, layer, h)
    for (m, layer, h), letters in ROLES.items():
        i = MODELS.index(m)
        positional[i, layer - 1, h] = "P" in letters
    for (m, layer, h), rels in SYNTACTIC.items():
        for r in rels:
            syntactic[MODELS.index(m), layer - 1, h, RELATIONS.index(r)] = True
    for (m, layer, h), share in RARE.items():
        rare[MODELS.index(m), layer - 1, h] = share
    i, h = MODELS.index(MISSING_HEAD[0]), MISSING_HEAD[1]
    value[i, :, h] = np.nan
    rare[i, :, h] = np.nan
    shares = rng.uniform(0.0, 0.3, (n, HL, 3))
    return xr.Dataset(
        {
            "value": (("model", "layer", "head", "measure"), value),
            "positional": (
                ("model", "layer", "head"),
                positional,
                {"long_name": ">= 90% of maxima on one relative offset (-1, 0 or +1)"},
            ),
            "syntactic": (("model", "layer", "head", "syntactic_relation"), syntactic),
            "rare_token_share": (("model", "layer", "head"), rare),
            "layer_alpha_share": (("model", "layer", "key_type"), shares),
            "layer_norm_share": (("model", "layer", "key_type"), shares * 0.8),
        },
        coords={
            "model": MODELS,
            "layer": np.arange(1, HL + 1),
            "head": np.arange(HH),
            "measure": list(MEASURES),
            "key_type": ["bos", "eos", "punct"],
            "syntactic_relation": RELATIONS,
        },
        attrs={**ATTRS, "rare_share": RARE_SHARE_ATTR},
    )


def _dependency(rng) -> xr.Dataset:
    from evolution.analyses.heads.dependency import CLARK_DIRECTIONS

    rels = RELATIONS + ["det", "case"]
    shape = (len(MODELS), len(rels), len(CLARK_DIRECTIONS))
    return xr.Dataset(
        {
            "picked_accuracy": (("model", "relation", "direction"), rng.uniform(0.1, 0.5, shape)),
            "baseline_accuracy": (("model", "relation", "direction"), rng.uniform(0.1, 0.5, shape)),
            "arcs": (("model", "split", "relation"), rng.integers(10, 100, (len(MODELS), 2, len(rels)))),
        },
        coords={
            "model": MODELS,
            "relation": rels,
            "direction": list(CLARK_DIRECTIONS),
            "split": ["select", "score"],
            "treebank": ("split", ["ud-ewt-dev", "ud-ewt-test"]),
        },
        attrs=ATTRS,
    )


def _head_map(rng) -> xr.Dataset:
    units = [(m, layer, h) for m in MODELS for layer in range(1, HL + 1) for h in range(HH)]
    return xr.Dataset(
        {"xy": (("unit", "component"), rng.normal(size=(len(units), 2)))},
        coords={
            "unit_model": ("unit", [u[0] for u in units]),
            "unit_layer": ("unit", [u[1] for u in units]),
            "unit_head": ("unit", [u[2] for u in units]),
            "component": ["x", "y"],
        },
        attrs={**ATTRS, "sentences": 20},
    )


def _importance(rng) -> xr.Dataset:
    shape = (2, 3, HL, HH)
    return xr.Dataset(
        {
            "importance_normalized": (("model", "attention", "layer", "head"), rng.random(shape)),
            "relevance": (("model", "attention", "layer", "head"), rng.random(shape)),
        },
        coords={
            "model": ["mt", "lm"],
            "attention": ["encoder_self", "decoder_self", "encoder_decoder"],
            "layer": np.arange(1, HL + 1),
            "head": np.arange(HH),
        },
        attrs=ATTRS,
    )


#: the pruning runs of the figure store: (run, scope, lambda); encoder-only runs gate no decoder head
PRUNING_RUNS = [
    ("encoder-0.1", "encoder", 0.1),
    ("encoder-0.01", "encoder", 0.01),
    ("all-0.1", "all", 0.1),
    ("all-0.2", "all", 0.2),
]


def _pruning(rng) -> xr.Dataset:
    kept = (rng.random((1, len(PRUNING_RUNS), 3, HL, HH)) > 0.4).astype(float)
    kept[0, 0, 0] = [[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 1]]  # keeps the rare (1,0), positional (2,1) and (4,2)
    for j, (_, scope, _) in enumerate(PRUNING_RUNS):
        if scope == "encoder":
            kept[0, j, 1:] = np.nan
    kept[0, 3, 2, 0] = np.nan  # an all-attention run whose encoder-decoder attention has no layer 1 (NaN: absent)
    return xr.Dataset(
        {
            "kept": (("model", "run", "attention", "layer", "head"), kept),
            "bleu": (("model", "run"), [[10.0, 12.0, 11.0, 9.0]]),
            "bleu_full": (("model",), [13.0]),
            "bleu_tuned": (("model",), [14.0]),  # the gate-free control: drawn as a star
            "lam": (("run",), [lam for *_, lam in PRUNING_RUNS]),
            "scope": (("run",), np.array([s for _, s, _ in PRUNING_RUNS], object)),
        },
        coords={
            "model": ["mt"],
            "run": [r for r, *_ in PRUNING_RUNS],
            "attention": ["encoder_self", "decoder_self", "encoder_decoder"],
            "layer": np.arange(1, HL + 1),
            "head": np.arange(HH),
        },
        attrs=ATTRS,
    )


def _write(path, *, new: bool):
    rng = np.random.default_rng(0)
    groups = {
        "similarity": _new_similarity(rng) if new else _similarity(rng)[0],
        "mi": _mi(rng, new=new),
        "mi_types": _mi_types(),
        "neighbors": _neighbors(rng),
        "change": _change(rng, "freq_bin", ["1-10", "10-100", "100-1000"]),
        "change_equal": _change(rng, "freq_bin", ["q1", "q2", "q3"]),
        "change_pos": _change(rng, "pos", ["NOUN", "VERB", "DET"]),
        "influence": _influence(rng),
        "tsne_be": _tsne(rng),
        "heads": _heads(rng),
        "heads_dependency": _dependency(rng),
        "heads_map": _head_map(rng),
        "heads_importance": _importance(rng),
        "heads_pruning": _pruning(rng),
    }
    write_metrics(path, groups, fingerprint="f" * 16)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("figures") / "metrics.zarr", new=True)


@pytest.fixture(scope="module")
def old_store(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("figures_old") / "metrics.zarr", new=False)


@pytest.fixture(scope="module")
def drawn(store, tmp_path_factory):
    """draw_all on the store: (name -> (png, csv), the output directory)."""
    from evolution.report.figures import draw_all

    out = tmp_path_factory.mktemp("report")
    return {name: (f, f.with_suffix(".csv")) for name, f, _ in draw_all(store, out)}, out


EXPECTED = {
    "mi",
    "mi_types",
    "neighbors",
    "similarity_pwcca",
    "similarity_cka",
    "similarity_pairs",
    "similarity_pairs_cka",
    "change_pwcca",
    "change_equal_pwcca",
    "change_pos_pwcca",
    "influence_pwcca",
    "tsne_be",
    "heads_entropy",
    "heads_special",
    "heads_dependency",
    "heads_map",
    "heads_roles",
    "heads_importance",
    "heads_pruning",
    "heads_pruning_roles",
    "heads_pruning_layers",
}


@pytest.fixture(scope="module")
def figs(store):
    """Every figure function called on the path alone, as the report and the notebook call them."""
    from evolution.analyses import figures

    out = {name: fn(store) for name, (fn, _) in figures(store).items()}
    yield out
    for fig in out.values():
        if fig is not None:
            plt().close(fig)


def _csv(drawn, name) -> pd.DataFrame:
    return pd.read_csv(drawn[0][name][1])


# ---- every figure, from the path -------------------------------------------------------------


def test_every_figure_function_returns_a_figure_from_the_path(figs):
    from matplotlib.figure import Figure

    assert EXPECTED <= set(figs)
    for name in EXPECTED:
        assert isinstance(figs[name], Figure), name


def test_draw_all_writes_png_and_csv_and_svg_only_on_request(drawn, store, tmp_path):
    from evolution.report.figures import draw_all

    files, out = drawn
    assert EXPECTED <= set(files)
    for name, (png, csv) in files.items():
        assert png.suffix == ".png" and png.is_file() and csv.is_file(), name
        table = pd.read_csv(csv)
        assert len(table) and not any(str(c).startswith("Unnamed") for c in table.columns), name
    assert not list(out.glob("*.svg"))
    svg = draw_all(store, tmp_path / "svg", svg=True)
    assert {f.suffix for _, f, _ in svg} == {".png"}
    assert {p.stem for p in (tmp_path / "svg").glob("*.svg")} == {n for n, _, _ in svg}
    with pytest.raises(ValueError, match="formats"):
        draw_all(store, tmp_path / "bad", formats=("gif",))


def test_figures_fit_the_report_column_and_stay_within_an_aspect_ratio(drawn):
    from evolution.report.page import png_size

    for name, (png, _) in drawn[0].items():
        w, h = png_size(png)
        assert w <= COLUMN_PX, (name, w)  # shown at its natural size: no shrinking of its labels
        assert w / h <= MAX_ASPECT, (name, w, h)


def _texts(fig):
    from matplotlib.text import Text

    fig.canvas.draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_no_text_is_below_the_legibility_floor(figs):
    for name in EXPECTED:
        small = [(t.get_text(), t.get_fontsize()) for t in _texts(figs[name]) if t.get_fontsize() < FONT - 1e-9]
        assert not small, (name, small[:5])


def _data_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and not hasattr(ax, "_colorbar") and ax.axison]


def test_legends_lie_outside_every_axes(figs):
    from matplotlib.transforms import Bbox

    seen = 0
    for name in EXPECTED:
        fig = figs[name]
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        for legend in legends:
            seen += 1
            box = legend.get_window_extent(renderer)
            for ax in _data_axes(fig):
                inter = Bbox.intersection(box, ax.get_window_extent(renderer))
                assert inter is None or inter.width * inter.height < 1.0, (name, ax.get_title())
    assert seen >= 12


# ---- between-model distances as groups -------------------------------------------------------


def _same_layer(ds: xr.Dataset, metric: str, a: str, b: str) -> np.ndarray:
    """The definition: PWCCA the mean of both directions at the same layer."""
    d = ds.distance.sel(metric=metric)
    return np.array(
        [
            (
                float(d.sel(model_a=a, model_b=b, layer_a=k, layer_b=k))
                + float(d.sel(model_a=b, model_b=a, layer_a=k, layer_b=k))
            )
            / 2
            for k in range(L)
        ]
    )


def _expected_bands(path, metric: str) -> dict[str, dict[str, np.ndarray]]:
    from evolution.analyses.plotting import open_group
    from evolution.analyses.similarity import pair_kind

    ds = open_group(path, "similarity")
    by_kind: dict[str, list] = {}
    for i, a in enumerate(MODELS):
        for b in MODELS[i + 1 :]:
            by_kind.setdefault(pair_kind(a, b, objectives=OBJECTIVES, runs=RUNS), []).append(
                _same_layer(ds, metric, a, b)
            )
    return {
        k: {"min": np.nanmin(v, 0), "max": np.nanmax(v, 0), "mean": np.nanmean(v, 0), "n": len(v)}
        for k, v in by_kind.items()
    }


def test_pair_kind_bands_are_min_and_max_over_the_pairs_of_each_kind(drawn, figs, store):
    expected = _expected_bands(store, "pwcca")
    assert {k: v["n"] for k, v in expected.items()} == {
        "seeds": 3,
        "objectives, shared init": 6,
        "objectives, different inits": 6,
        "token dropout": 1,
        "other": 5,
    }
    table = _csv(drawn, "similarity_pairs")
    kinds = table[table.panel == "pair kinds"]
    assert set(kinds.pair.dropna()) >= {
        "seeds",
        "objectives, shared init",
        "objectives, different inits",
        "token dropout",
    }
    assert "other" not in set(kinds[kinds.quantity == "min"].pair)
    for kind in ("seeds", "objectives, shared init", "objectives, different inits", "token dropout"):
        for stat in ("min", "max", "mean"):
            rows = kinds[(kinds.pair == kind) & (kinds.quantity == stat)].sort_values("layer")
            np.testing.assert_allclose(rows.value.values, expected[kind][stat], rtol=1e-12, err_msg=f"{kind} {stat}")
    # the drawn bands: each kind's fill spans exactly [min, max] at every layer, around its mean line
    ax = figs["similarity_pairs"].axes[0]
    lines = {ln.get_label().split(" (")[0]: ln for ln in ax.get_lines()}
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 4
    for band in bands:
        kind = next(k for k, ln in lines.items() if np.allclose(band.get_facecolor()[0][:3], _rgb(ln.get_color())))
        np.testing.assert_allclose(lines[kind].get_ydata(), expected[kind]["mean"], rtol=1e-12)
        vertices = band.get_paths()[0].vertices
        for layer in range(L):
            at = vertices[np.isclose(vertices[:, 0], layer), 1]
            np.testing.assert_allclose(
                [at.min(), at.max()], [expected[kind]["min"][layer], expected[kind]["max"][layer]], rtol=1e-12
            )


def _rgb(color):
    from matplotlib.colors import to_rgb

    return np.array(to_rgb(color))


def test_old_stores_give_the_same_groups_from_distance_and_attributes(old_store, store):
    """Without ``same_layer`` and ``pair``: the same-layer distance from ``distance`` (mean of both
    directions) and the kinds from the runs in the attributes give the bands of the new layout."""
    from evolution.analyses.plotting import open_group
    from evolution.analyses.similarity_figures import kind_bands, pair_kinds, same_layer

    old, new = open_group(old_store, "similarity"), open_group(store, "similarity")
    assert "same_layer" not in old and "pair" not in old.coords
    assert pair_kinds(old) == pair_kinds(new)
    for metric in ("pwcca", "cka"):
        a, b = (
            kind_bands(same_layer(old, metric), pair_kinds(old)),
            kind_bands(same_layer(new, metric), pair_kinds(new)),
        )
        for stat in ("mean", "min", "max"):
            np.testing.assert_allclose(a[stat].values, b[stat].values, rtol=1e-12)


def test_objective_pairs_are_the_base_models_with_the_range_over_seed_combinations(drawn, store):
    from evolution.analyses.plotting import open_group

    ds = open_group(store, "similarity")
    table = _csv(drawn, "similarity_pairs")
    pairs = table[table.panel == "objective pairs"]
    assert set(pairs.pair) == {"LM-MT", "MT-MLM", "LM-MLM"}
    replicas = {"mt": ["mt", "mt-seed1"], "lm": ["lm", "lm-seed1"], "mlm": ["mlm", "mlm-seed1"]}  # no token dropout
    for name, (first, second) in {"LM-MT": ("lm", "mt"), "MT-MLM": ("mt", "mlm"), "LM-MLM": ("lm", "mlm")}.items():
        rows = pairs[pairs.pair == name]

        def q(stat, rows=rows):
            return rows[rows.quantity == stat].sort_values("layer").value.values

        base = _same_layer(ds, "pwcca", first, second)
        np.testing.assert_allclose(q("distance"), base, rtol=1e-12)
        assert set(rows.model_a) == {first} and set(rows.model_b) == {second}
        combos = np.array([_same_layer(ds, "pwcca", a, b) for a in replicas[first] for b in replicas[second]])
        np.testing.assert_allclose(q("range_min"), np.nanmin(combos, 0), rtol=1e-12)
        np.testing.assert_allclose(q("range_max"), np.nanmax(combos, 0), rtol=1e-12)
        iv = ds.interval.sel(metric="pwcca", model_a=first, model_b=second)
        np.testing.assert_allclose(q("low"), iv.sel(bound="low").values, rtol=1e-12)


# ---- colour scales ---------------------------------------------------------------------------


def test_similarity_heatmap_colours_run_from_zero_to_the_data_99th_percentile(figs, store):
    from evolution.analyses.plotting import open_group

    ds = open_group(store, "similarity")
    within = np.stack([ds.distance.sel(metric="pwcca", model_a=m, model_b=m).values for m in MODELS])
    vmax = np.percentile(within[np.isfinite(within)], 99)
    assert 0.25 < vmax < 0.5 < OUTLIER  # the outlier does not set the scale; nor does a fixed 1
    fig = figs["similarity_pwcca"]
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == len(MODELS)
    for im in images:
        np.testing.assert_allclose(im.get_clim(), (0.0, vmax), rtol=1e-12)
    colorbars = [ax for ax in fig.axes if hasattr(ax, "_colorbar")]
    assert len(colorbars) == 1
    label = colorbars[0].get_ylabel()
    assert f"{vmax:.3g}" in label and "99th percentile" in label


def test_head_roles_heatmap_is_layer_by_head_with_planted_roles_and_a_fitted_scale(figs, drawn, store):
    table = _csv(drawn, "heads_roles")
    exists = [(m, layer, h) for m in MODELS for layer in range(1, HL + 1) for h in range(HH) if (m, h) != MISSING_HEAD]
    assert len(table) == len(exists)  # the missing heads of a smaller model are no rows
    for row in table.itertuples():
        assert row.confidence == pytest.approx(confidence_value(row.model, row.layer, row.head), rel=1e-12)
        key = (row.model, row.layer, row.head)
        roles = "" if not isinstance(row.roles, str) else row.roles
        assert roles == ROLES.get(key, ""), key
        assert (row.positional, row.syntactic, row.rare_token) == tuple(x in roles for x in "PSR"), key
        relations = row.syntactic_relations.split() if isinstance(row.syntactic_relations, str) else []
        assert sorted(relations) == sorted(SYNTACTIC.get(key, [])), key
    conf = np.array([confidence_value(*k) for k in exists])
    lo, hi = np.percentile(conf, 1), np.percentile(conf, 99)
    fig = figs["heads_roles"]
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_images()}
    assert set(panels) == set(MODELS)
    for m, ax in panels.items():
        im = ax.get_images()[0]
        np.testing.assert_allclose(im.get_clim(), (lo, hi), rtol=1e-12)
        grid = np.asarray(im.get_array(), dtype=float)
        assert grid.shape == (HL, HH)  # rows: layers, columns: heads
        for layer in range(1, HL + 1):
            for h in range(HH):
                if (m, h) == MISSING_HEAD:
                    assert np.isnan(grid[layer - 1, h])
                else:
                    assert grid[layer - 1, h] == pytest.approx(confidence_value(m, layer, h), rel=1e-12)
        letters = {
            (int(round(t.get_position()[1])) + 1, int(round(t.get_position()[0]))): t.get_text() for t in ax.texts
        }
        assert letters == {(layer, h): r for (mm, layer, h), r in ROLES.items() if mm == m}


def test_dependency_heatmap_colours_follow_the_accuracy_range(figs, store):
    from evolution.analyses.plotting import open_group

    acc = open_group(store, "heads_dependency").picked_accuracy.values
    fig = figs["heads_dependency"]
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 2  # one panel per direction, one under the other
    for im in images:
        np.testing.assert_allclose(im.get_clim(), (np.percentile(acc, 1), np.percentile(acc, 99)), rtol=1e-12)


# ---- MI: the fraction of H(X) on an axis fit to the data -------------------------------------


def _fraction_lines(fig, target_col: int = 0):
    bottom = [ax for ax in fig.axes if "H(X)" in ax.get_ylabel()][0]
    return bottom, bottom.get_lines()


@pytest.mark.parametrize("which", ["new", "old"])
def test_mi_second_panel_is_the_corrected_fraction_scaled_to_the_data(which, figs, store, old_store):
    from evolution.analyses.mi_figures import mi_by_layer
    from evolution.analyses.plotting import open_group

    path = store if which == "new" else old_store
    fig = figs["mi"] if which == "new" else mi_by_layer(old_store)
    ds = open_group(path, "mi")
    assert ("mi_corrected_fraction" in ds) == (which == "new")
    expected = ((ds.mi.mean("restart") - ds.mi_shuffled) / ds.entropy).sel(target="input")
    bottom, lines = _fraction_lines(fig)
    drawn_lines = [ln for ln in lines if ln.get_linestyle() not in ("None", "none", "")]  # not error-bar caps
    assert len(drawn_lines) == len(MODELS)
    for ln, m in zip(drawn_lines, MODELS, strict=True):
        np.testing.assert_allclose(ln.get_ydata(), expected.sel(model=m).values, rtol=1e-12)
    lo, hi = bottom.get_ylim()
    span = float(expected.max() - expected.min())
    assert span < 0.1  # the claims' gaps: a few per cent of H(X)
    assert hi - lo < 2.5 * span and lo > expected.min() - 0.5 * span and hi < expected.max() + 0.5 * span
    if which == "old":
        plt().close(fig)


def test_mi_csv_holds_the_store_values(drawn, store):
    from evolution.analyses.plotting import open_group

    ds = open_group(store, "mi")
    table = _csv(drawn, "mi")
    for quantity, var in (
        ("mi_corrected_fraction", ds.mi_corrected_fraction),
        ("mi_fraction", ds.mi_fraction),
        ("mi_shuffled", ds.mi_shuffled),
    ):
        for m, layer in (("lm", 3), ("mt-seed1", 0), ("mlm", 4)):
            row = table[
                (table.quantity == quantity) & (table.model == m) & (table.layer == layer) & (table.target == "input")
            ]
            assert len(row) == 1 and row.value.item() == pytest.approx(
                float(var.sel(model=m, layer=layer, target="input")), rel=1e-12
            )
    low = table[
        (table.quantity == "mi_corrected_fraction_low")
        & (table.model == "lm")
        & (table.layer == 2)
        & (table.target == "input")
    ]
    assert low.value.item() == pytest.approx(
        float(ds.mi_corrected_fraction_interval.sel(model="lm", layer=2, target="input", bound="low")), rel=1e-12
    )
    # the output label exists for the LMs only
    assert set(table[table.target == "output"].model) == {"lm", "lm-seed1"}


def test_other_csvs_hold_the_store_values(drawn, store):
    from evolution.analyses.plotting import open_group

    nb = open_group(store, "neighbors")
    t = _csv(drawn, "neighbors")
    row = t[(t.quantity == "value") & (t.model == "mlm") & (t.layer == 3) & (t.measure == "same_left")]
    assert row.value.item() == pytest.approx(float(nb.value.sel(model="mlm", layer=3, measure="same_left")))
    ch = open_group(store, "change_pos")
    t = _csv(drawn, "change_pos_pwcca")
    row = t[(t.model == "lm-seed1") & (t.layer_pair == "2-3") & (t.pos == "VERB")]
    assert row.value.item() == pytest.approx(
        float(ch.distance.sel(metric="pwcca", model="lm-seed1", layer_pair="2-3", pos="VERB"))
    )
    heads = open_group(store, "heads")
    t = _csv(drawn, "heads_entropy")
    row = t[(t.quantity == "entropy") & (t.model == "mt") & (t.layer == 2) & (t["head"] == 1)]
    assert row.value.item() == pytest.approx(float(heads.value.sel(model="mt", layer=2, head=1, measure="entropy")))
    sim = open_group(store, "similarity")
    t = _csv(drawn, "similarity_cka")
    row = t[(t.panel == "layer vs layer") & (t.model == "lm") & (t.layer_a == 1) & (t.layer_b == 3)]
    assert row.value.item() == pytest.approx(
        float(sim.distance.sel(metric="cka", model_a="lm", model_b="lm", layer_a=1, layer_b=3))
    )


def test_figure_data_falls_back_to_the_artists():
    """A figure whose function attaches no numbers (an analysis outside this package) still gets
    its CSV: the points of its lines."""
    fig, ax = plt().subplots()
    ax.plot([0, 1, 2], [3.0, 4.0, 5.5], label="curve")
    ax.set_title("panel")
    t = figure_data(fig)
    plt().close(fig)
    assert list(t.y) == [3.0, 4.0, 5.5] and set(t.series) == {"curve"} and set(t.panel) == {"panel"}


def test_confidence_scale_says_which_definition_the_store_holds():
    """Stores before heads version 4 hold confidence over every key (sinks included); the colour
    bar must not call it content-key confidence."""
    import xarray as xr

    from evolution.analyses.heads.figures import _confidence_label

    old = xr.Dataset(coords={"measure": ["entropy", "confidence"]})
    new = xr.Dataset(coords={"measure": ["entropy", "confidence", "confidence_with_sink"]})
    assert "sinks included" in _confidence_label(old) and "content key" not in _confidence_label(old)
    assert "content key" in _confidence_label(new)


def test_figure_tables_do_not_depend_on_the_order_of_dimensions_and_coordinates():
    """A store lists its coordinates in directory order: the same values with dimensions and
    scalar coordinates in another order give the same CSV, columns by name, value last."""
    import xarray as xr

    from evolution.analyses.plotting import tidy

    values = np.arange(6.0).reshape(2, 3) / 7
    a = xr.DataArray(values, dims=("model", "layer"), coords={"model": ["lm", "mt"], "layer": [0, 1, 2]})
    a = a.assign_coords(measure="same_token", bound="low")
    b = a.transpose("layer", "model").reset_coords(drop=True).assign_coords(bound="low", measure="same_token")
    ta, tb = tidy(a, "value"), tidy(b, "value")
    assert list(ta.columns) == ["quantity", "bound", "layer", "measure", "model", "value"]
    assert ta.to_csv(index=False) == tb.to_csv(index=False)
    row = ta[(ta.model == "mt") & (ta.layer == 2)]
    assert float(row.value.iloc[0]) == values[1, 2]


def test_pruning_roles_count_each_runs_kept_encoder_heads_by_planted_role(drawn, store):
    """Fig. 8: per encoder-only run, the kept encoder heads of each role, counted here by a loop over
    the planted roles (rare-token at the group's threshold 0.22: (3, 0) at 0.21 is not one) and
    the stored layout; all-attention runs are not in it."""
    table = _csv(drawn, "heads_pruning_roles")
    kept = open_group(store, "heads_pruning").kept.sel(model="mt", attention="encoder_self")
    assert set(table.run) == {r for r, scope, _ in PRUNING_RUNS if scope == "encoder"}
    for run in set(table.run):
        k = kept.sel(run=run).values == 1
        letters = {(layer, h): ROLES.get(("mt", layer, h), "") for layer in range(1, HL + 1) for h in range(HH)}
        expected = {
            "positional": sum(k[lay - 1, h] for (lay, h), r in letters.items() if "P" in r),
            "syntactic": sum(k[lay - 1, h] for (lay, h), r in letters.items() if "S" in r),
            "rare_token": sum(k[lay - 1, h] for (lay, h), r in letters.items() if "R" in r),
            "other": sum(k[lay - 1, h] for (lay, h), r in letters.items() if not r),
        }
        rows = table[table.run == run]
        assert dict(zip(rows.role, rows.heads, strict=True)) == expected, run
        assert set(rows.kept_encoder_heads) == {int(k.sum())}
    first = table[table.run == "encoder-0.1"]
    assert dict(zip(first.role, first.heads, strict=True)) == {
        "positional": 2,
        "syntactic": 1,
        "rare_token": 1,
        "other": 3,
    }


def test_pruning_curve_plots_each_encoder_runs_retained_heads_against_its_bleu(drawn, store):
    """Fig. 7: per encoder-only run, the retained (kept = 1) encoder heads counted by a loop over the
    stored layout and the run's BLEU; at all HL x HH heads the unpruned model and the gate-free
    control; the all-attention runs are not on this curve."""
    table = _csv(drawn, "heads_pruning")
    ds = open_group(store, "heads_pruning")
    for run, scope, _ in PRUNING_RUNS:
        row = table[(table.model == "mt") & (table.run == run)]
        if scope != "encoder":
            assert row.empty
            continue
        layout = ds.kept.sel(model="mt", run=run, attention="encoder_self").values
        assert row.kept_encoder_heads.item() == sum(1 for v in layout.ravel() if v == 1)
        assert row.bleu.item() == float(ds.bleu.sel(model="mt", run=run))
    ends = table[table.run.isin(["unpruned", "tuned"])].set_index("run")
    assert list(ends.kept_encoder_heads) == [HL * HH, HL * HH]
    assert ends.bleu.to_dict() == {"unpruned": 13.0, "tuned": 14.0}


def test_pruning_layers_count_the_kept_heads_of_each_layer_of_each_all_attention_run(drawn, store):
    """Figs. 9-10: per all-attention run, attention type and layer, the kept heads (a loop over the
    stored layout) and the layer's heads (absent ones, NaN, are not heads); encoder-only runs are not in it."""
    table = _csv(drawn, "heads_pruning_layers")
    kept = open_group(store, "heads_pruning").kept.sel(model="mt")
    assert set(table.run) == {r for r, scope, _ in PRUNING_RUNS if scope == "all"}
    n = 0
    for run in set(table.run):
        for attention in ("encoder_self", "decoder_self", "encoder_decoder"):
            for layer in range(1, HL + 1):
                values = kept.sel(run=run, attention=attention, layer=layer).values
                row = table[(table.run == run) & (table.attention == attention) & (table.layer == layer)]
                if np.isnan(values).all():
                    assert row.empty
                    continue
                on = sum(1 for v in values if v == 1)
                assert row.kept_heads.item() == on and row.heads.item() == sum(1 for v in values if v == v)
                n += 1
    assert n == 2 * 3 * HL - 1
