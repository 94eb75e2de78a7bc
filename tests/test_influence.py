"""Token influence against plain loops: the bootstrap over sentences redone by a loop that
masks one key at a time and recomputes the distance from the resampled views, the bins'
sizes counted directly, and the stored group's intervals per (model, layer, bin). (Its
replicates' route, from weighted cross-products, is tested against the resampled views in
test_similarity_bootstrap.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evolution.metrics.influence import bin_occurrences, sample_influencers, token_influence
from evolution.metrics.similarity import View, cka, pwcca


class _Adapter:
    """A 'model' with 2 layers, d = 4: a token's state at layer n is a fixed vector per
    (token, layer) plus one per (position, layer); masking the key of a token u at block
    n - 1 adds effect(u) x a fixed vector per (u, other token, layer) to the other
    positions' states from layer n on. Deterministic per row, so one masked row at a time
    gives what a batch gives."""

    num_layers, content_offset, d_model, supports_key_masking = 2, 1, 4, True

    def __init__(self, effect):
        rng = np.random.default_rng(0)
        self.effect = effect
        self.token = rng.normal(size=(50, 3, 4))
        self.position = rng.normal(size=(40, 3, 4)) * 0.5
        self.delta = rng.normal(size=(50, 50, 3, 4))

    def build_input(self, ids):
        return [0, *ids]  # a BOS at position 0: content_offset 1

    def forward(self, inputs):
        h = np.stack([self.token[np.asarray(x)] + self.position[: len(x)] for x in inputs])  # (B, T, L+1, d)
        return h.transpose(2, 0, 1, 3), None

    def forward_masked_keys(self, inputs, *, masked):
        h = self.forward(inputs)[0].copy()
        for b, (block, pos) in enumerate(masked):
            u = inputs[b][pos]
            for t, v in enumerate(inputs[b]):
                if t != pos:
                    h[block + 1 :, b, t] += self.effect(u) * self.delta[u, v, block + 1 :]
        return h

    def masked_key_states(self, inputs, *, base, masked):  # the adapters' default: from forward_masked_keys
        from evolution.models.base import Adapter

        return Adapter.masked_key_states(self, inputs, base=base, masked=masked)


def _corpus(n_sent=70, seed=2):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 11, size=n_sent)  # some sentences too short (< 3) to be sampled
    content = {s: rng.integers(1, 50, size=n).tolist() for s, n in enumerate(lengths)}
    sentence = np.repeat(np.arange(n_sent), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    token = np.concatenate([content[s] for s in range(n_sent)])
    return content, sentence, position, token


BINS = [(1, 6), (6, 20), (20, 50)]  # token id = frequency rank here


def _effect(u):
    return 0.6 if u < 6 else 0.2 if u < 20 else 0.05


def _loop_reference(adapter, content, samples, *, n_boot, seed, method):
    """Distances per (layer, bin) on every resample by a plain loop: each sample masked
    alone (one forward per (sample, layer)), the rows of each drawn sentence's samples of the
    bin concatenated as often as it is drawn, the distance from the views (SVD route)."""
    fn = {"pwcca": pwcca, "cka": cka}[method]
    L = adapter.num_layers
    rows = {}  # (sample, layer) -> (normal, masked) states of the other tokens
    for s, pos, _ in samples:
        inp = adapter.build_input(content[s])
        base = adapter.forward([inp])[0][:, 0]
        others = [1 + j for j in range(len(content[s])) if j != pos]
        for n in range(1, L + 1):
            hidden = adapter.forward_masked_keys([inp], masked=[(n - 1, 1 + pos)])[:, 0]
            rows[(s, pos, n)] = (base[n, others], hidden[n, others])
    universe = sorted({s for s, _, _ in samples})

    def distances(sentences):
        out = np.full((L, len(BINS)), np.nan)
        for n in range(1, L + 1):
            for b in range(len(BINS)):
                parts = [rows[(s, p, n)] for s in sentences for (s2, p, b2) in samples if s2 == s and b2 == b]
                x, y = np.concatenate([a for a, _ in parts]), np.concatenate([c for _, c in parts])
                out[n - 1, b] = 1 - fn(View(x, min_ratio=2), View(y, min_ratio=2))
        return out

    point = distances(universe)
    boot = np.stack(
        [
            distances([universe[k] for k in np.random.default_rng([seed, r]).integers(0, len(universe), len(universe))])
            for r in range(n_boot)
        ]
    )
    return point, boot


@pytest.mark.parametrize("method", ["pwcca", "cka"])
def test_influence_bootstrap_against_a_plain_loop(method):
    """The point distance, every replicate and the 95% interval per (layer, bin) equal a loop
    that masks one occurrence at a time and recomputes the distance on the resampled
    sentences' rows; the bins differ (rare tokens have the largest effect), so an interval
    taken from another bin's rows differs."""
    content, sentence, position, token = _corpus()
    samples = sample_influencers(
        sentence=sentence, position=position, freq_rank=token, bins=BINS, max_per_bin=25, seed=1
    )
    adapter = _Adapter(_effect)
    got = token_influence(
        adapter,
        content_ids=content,
        samples=samples,
        n_bins=3,
        methods=(method,),
        min_ratio=2,
        bootstrap=40,
        seed=5,
        max_rows=7,
    )
    point, boot = _loop_reference(adapter, content, samples, n_boot=40, seed=5, method=method)
    np.testing.assert_allclose(got["distance"][method], point, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(got["replicates"][method], boot, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(
        got["interval"][method], np.moveaxis(np.percentile(boot, [2.5, 97.5], axis=0), 0, -1), rtol=1e-7, atol=1e-12
    )
    iv = np.asarray(got["interval"][method])
    d = np.asarray(got["distance"][method])
    assert ((iv[..., 0] <= d) & (d <= iv[..., 1])).all()
    # the rare bin's layer-1 interval lies above the frequent bins' points (known effects 0.6 > 0.2 > 0.05)
    assert iv[0, 0, 0] > d[0, 1] > d[0, 2]


def test_influence_sizes_per_bin_are_counted():
    """Occurrences available per bin (sentences of >= 3 tokens), masked, their sentences and
    the rows pooled (other tokens of each masked occurrence's sentence), counted directly."""
    content, sentence, position, token = _corpus()
    lengths = np.bincount(sentence)
    samples = sample_influencers(
        sentence=sentence, position=position, freq_rank=token, bins=BINS, max_per_bin=25, seed=1
    )
    avail = bin_occurrences(sentence=sentence, freq_rank=token, bins=BINS)
    for b, (lo, hi) in enumerate(BINS):
        assert avail[b] == sum(1 for s, t in zip(sentence, token, strict=True) if lo <= t < hi and lengths[s] >= 3)
        assert sum(1 for *_, k in samples if k == b) == min(25, avail[b])
    got = token_influence(_Adapter(_effect), content_ids=content, samples=samples, n_bins=3, min_ratio=2)
    for b in range(3):
        mine = [(s, p) for s, p, k in samples if k == b]
        assert got["sentences"][b] == len({s for s, _ in mine})
        assert got["samples"][0][b] == got["samples"][1][b] == len(mine)
        assert got["rows"][0][b] == sum(len(content[s]) - 1 for s, _ in mine)
    assert "replicates" not in got and "interval" not in got  # bootstrap 0: none


def test_influence_group_stores_each_bins_interval():
    """The analysis's group: influence/interval (metric, model, layer, freq_bin, bound) and the
    replicates, sizes and available occurrences of each model and bin as computed, for two
    models with different effects (MT-like and LM-like)."""
    from evolution.analyses.influence import Influence, _bin_size_table
    from evolution.config import InfluenceConfig

    content, sentence, position, token = _corpus()
    samples = sample_influencers(
        sentence=sentence, position=position, freq_rank=token, bins=BINS, max_per_bin=25, seed=1
    )
    effects = {"mt": _effect, "lm": lambda u: 0.1 if u < 6 else 0.4}
    icfg = InfluenceConfig(max_per_bin=25, min_ratio=2, freq_bins=[1, 6, 20, 50], bootstrap=30)
    results = {
        m: token_influence(
            _Adapter(f), content_ids=content, samples=samples, n_bins=3, min_ratio=2, bootstrap=30, seed=0
        )
        for m, f in effects.items()
    }
    model = SimpleNamespace(
        primary=np.ones(len(sentence), bool),
        coords={"sentence": sentence},
        freq_rank=token,
        ranked_types=49,
        frequency="analysed text",
    )
    inputs = SimpleNamespace(
        names=["mt", "lm"], models={"mt": model, "lm": model}, config=SimpleNamespace(influence=icfg)
    )
    ds = Influence().datasets(inputs, results)["influence"]
    assert ds.interval.dims == ("metric", "model", "layer", "freq_bin", "bound")
    assert list(ds.freq_bin.values) == ["1-6", "6-20", "20-50"]
    avail = bin_occurrences(sentence=sentence, freq_rank=token, bins=BINS)
    for m in effects:
        r = results[m]
        for b, name in enumerate(ds.freq_bin.values):
            assert int(ds.available.sel(model=m, freq_bin=name)) == avail[b]
            assert int(ds.sentences.sel(model=m, freq_bin=name)) == r["sentences"][b]
            for n in (1, 2):
                cell = dict(metric="pwcca", model=m, layer=n, freq_bin=name)
                assert float(ds.distance.sel(**cell)) == r["distance"]["pwcca"][n - 1][b]
                np.testing.assert_array_equal(ds.interval.sel(**cell).values, r["interval"]["pwcca"][n - 1][b])
                lo, hi = np.percentile(ds.distance_replicates.sel(**cell).values, [2.5, 97.5])
                assert (
                    float(ds.interval.sel(**cell, bound="low")),
                    float(ds.interval.sel(**cell, bound="high")),
                ) == pytest.approx((lo, hi))
    table = _bin_size_table(ds)  # the report's sizes table: the same for both models here
    assert table[1] == [
        "1-6",
        f"{avail[0]:,}",
        f"{min(25, avail[0]):,}",
        str(results["mt"]["sentences"][0]),
        f"{results['mt']['rows'][0][0]:,}",
    ]
    # the two models: the rare bin leads in mt, trails in lm (their intervals say so at layer 1)
    iv = ds.interval.sel(metric="pwcca", layer=1)
    assert float(iv.sel(model="mt", freq_bin="1-6", bound="low")) > float(
        iv.sel(model="mt", freq_bin="6-20", bound="high")
    )
    assert float(iv.sel(model="lm", freq_bin="1-6", bound="high")) < float(
        iv.sel(model="lm", freq_bin="6-20", bound="low")
    )
