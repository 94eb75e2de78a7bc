"""The numbers that results/bible-full/README.md and docs/heads.md's bible-full section quote from
the committed results/bible-full (metrics.zarr, report/, units/, models/, eval.json,
gpu_timings.json), read back from there, so that a recompute cannot leave stale text behind (the
rest of its tables and pruning sentences are in tests/test_docs.py and tests/test_docs_stores.py).
Numbers no committed file holds (the wall times of the whole runs, the training times of the
shipped weights, the earlier store's values, the papers' numbers) are not checked."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from test_docs import GAP_UNITS, _docs_blocks, _heads_numbers
from test_docs_stores import REPO, _cells, _prose

FULL = REPO / "results" / "bible-full"
WORDS = ("none", "one", "two", "three", "four", "five")
#: units of configs/bible-full-pruning-gap.yaml (tests/test_docs.py: GAP_UNITS): every head from scratch on
#: fairseq-train's batches (seed 0) and on the loop's own (seed 1)
FIXED, SEED1 = "heads_pruning-mt-scratch-b46219aec195d7fe.json", "heads_pruning-mt-seed1-scratch-794bb1171a7bf47e.json"


def _readme() -> str:  # read at each test, so that a test sees the text as it is then
    return _prose("results", "bible-full", "README.md")


def _row(path: Path, start: str) -> list[str]:
    """The cells of the one table row of ``path`` that begins with ``start``."""
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith(start)]
    assert len(rows) == 1, (path.name, start, len(rows))
    return _cells(rows[0])


def _json(*parts: str):
    return json.loads(FULL.joinpath(*parts).read_text(encoding="utf-8"))


def _group(name: str):
    from evolution.metrics.results import open_metrics

    return open_metrics(FULL / "metrics.zarr", name).load()


def _span(xs, fmt: str) -> str:
    """ "lo-hi" of ``xs``, each formatted as the text formats it."""
    return f"{min(xs):{fmt}}-{max(xs):{fmt}}"


def _mb(*paths: Path) -> str:
    """The size of the files, in MB (10^6 bytes) to one decimal place."""
    return f"{sum(p.stat().st_size for p in paths) / 1e6:.1f} MB"


def _pruning_units() -> dict[str, dict]:
    """The unit results of results/bible-full/units that the store's ``heads_pruning`` group holds
    (each gated run, the gate-free fine-tuning ``tuned``, the unpruned model ``full`` and every head
    from scratch ``scratch``), found by their values."""
    import numpy as np

    p = _group("heads_pruning").sel(model="mt")
    # each unit's values as the store holds them (a gated run that trained its layout from scratch with
    # other batches, e.g. configs/bible-full-pruning-seeds.yaml's, has the same bleu and another bleu_scratch)
    want = {
        str(r): {"bleu": float(p.bleu.sel(run=r))}
        | ({"bleu_scratch": float(p.bleu_scratch.sel(run=r))} if np.isfinite(p.bleu_scratch.sel(run=r)) else {})
        for r in p.run.values
    }
    want |= {
        "tuned": {"bleu": float(p.bleu_tuned)},
        "full": {"bleu": float(p.bleu_full)},
        "scratch": {"bleu_scratch": float(p.bleu_scratch_full)},
    }
    found: dict[str, dict] = {}
    for name, values in want.items():
        for f in (FULL / "units").glob(f"heads_pruning-mt-{name}-*.json"):
            unit = json.loads(f.read_text())
            if all(unit.get(k) == v for k, v in values.items()):
                assert name not in found, name
                found[name] = unit
    assert set(found) == set(want)
    return found


def test_the_bible_full_readme_verdicts_and_claim_numbers_quote_the_scorecard():
    """The claims that hold and those that do not (twice), and claims 2, 6, 7, 8 and 10's numbers."""
    by = {f"{c['number']}{c.get('part', '')}": c for c in _json("report", "scorecard.json")}
    held = _docs_blocks()._ranges([k for k, c in by.items() if c["verdict"] == "holds"])
    rest = [k for k, c in by.items() if c["verdict"] != "holds"]
    text = _readme()
    assert f"The verdicts are those of the store before (claims {held} hold)" in text
    assert (
        f"Verdicts (`report/scorecard.json`): claims {held} hold; {', '.join(rest[:-1])} and {rest[-1]} do not" in text
    )
    claim = {k: f"claim {c['number']}" for k, c in by.items()}
    low = re.search(r"mlm: .*?minimum (\d\.\d\d) H", by["2"]["measured"])[1]
    assert f"{claim['2']}'s MLM minimum 0.72 -> {low} H" in text
    r = dict(re.findall(r"(\S+) (\d\.\d{3}) \[", by["6"]["measured"]))
    assert f"{claim['6']}'s top-layer same-token rates MLM {r['mlm']} / MT {r['mt']} / LM {r['lm']}" in text
    d = {
        m: (v, f"[{lo}, {hi}]")
        for m, v, lo, hi in re.findall(r"(\S+) (\d+\.\d\d) \[(\d+\.\d\d), (\d+\.\d\d)\]", by["7"]["measured"])
    }
    assert (
        f"{claim['7']}'s position distance MT {' '.join(d['mt'])} against LM {d['lm'][0]} and MLM {d['mlm'][0]}" in text
    )
    first, top = re.search(r"^lm: layer 1 (\d\.\d{3}) \[.*?-> top (\d\.\d{3})", by["8"]["measured"]).groups()
    layers = _json("models", "lm", "model.json")["model"]["decoder_layers"]
    assert f"{claim['8']}: the LM's same-left-token rate rises, {first} -> {top} (layer 1 -> {layers})" in text
    seeds, objectives = re.search(
        r"layer 1: seeds <= (\d\.\d{3}), objectives >= (\d\.\d{3})", by["10"]["measured"]
    ).groups()
    assert (
        f"{claim['10']}: seeds are up to {seeds} apart at layer 1, where objectives sharing an initial encoder "
        f"are {objectives} apart"
    ) in text


def test_the_bible_full_readme_versions_units_and_views_quote_the_store_and_report():
    """Analysis versions, the pruning units reused and the others, the encoder heads, views.html."""
    text = _readme()
    version = {g: _group(g).attrs["analysis_version"] for g in ("similarity", "mi", "heads_probes", "heads_importance")}
    assert f"(similarity analysis version {version['similarity']}:" in text
    assert f"MI version {version['mi']}:" in text
    assert f"(`heads_probes` version {version['heads_probes']})" in text
    assert f"(`heads_importance` version {version['heads_importance']})" in text
    others = [f for f in (FULL / "units").glob("*.json") if not f.name.startswith("heads_pruning-")]
    assert (
        f"reused the {len(_pruning_units())} pruning units of `units/` (computed in parts, below) and "
        f"recomputed the other {len(others)}:"
    ) in text
    imp = _group("heads_importance")
    assert f"Spearman correlations over the {imp.sizes['layer'] * imp.sizes['head']} encoder heads" in text
    views = (FULL / "report" / "views.html").read_text(encoding="utf-8")
    models = re.findall(r'"name":"([^"]+)"', views)
    sentences = sorted({int(s) for s in re.findall(r'"sentence":(\d+),"levels"', views)})
    assert sentences == list(range(len(sentences)))
    assert (
        f"views of {', '.join(models[:-1])} and {models[-1]} on the first {len(sentences)} analysed verses, the "
        f"MT's decoder self-attention and cross-attention too, {_mb(FULL / 'report' / 'views.html')}, offline"
    ) in text


def test_the_bible_full_readme_probe_sentences_quote_the_store():
    """The converged UAS and each objective's ranges under the probes table, and the order they claim."""
    uas = _group("heads_probes").uas

    def u(probe, prefix=""):
        return [float(uas.sel(model=m, probe=probe)) for m in uas.model.values if str(m).startswith(prefix)]

    (rb,) = set(u("right_branching"))
    words, dist = "attention_words", _span(u("distance_words"), ".3f")
    text = _readme()
    assert (
        f"(the MT's attention + words 0.301 -> {u(words, 'mt')[0]:.3f}, the MLM's attention only 0.303 -> "
        f"{u('attention', 'mlm')[0]:.3f}, distance + words 0.461-0.495 -> {dist})"
    ) in text
    mlms, lms, mts = u("attention", "mlm"), u("attention", "lm"), u("attention", "mt")
    assert (
        f"the attention-only probes of the MLMs ({', '.join(f'{x:.3f}' for x in mlms)}) are above those of the "
        f"LMs ({_span(lms, '.3f')}), which reach right branching ({rb:.3f}), and the MTs' stay below it "
        f"({_span(mts, '.3f')}); with the words added, LM and MLM are level "
        f"({_span(u(words, 'lm') + u(words, 'mlm'), '.3f')}) and the MT behind ({_span(u(words, 'mt'), '.3f')}); "
        f"no probe on attention beats distance + words ({dist})"
    ) in text
    assert min(mlms) > max(lms) and round(min(lms), 3) >= round(rb, 3) and max(mts) < rb
    assert max(u("attention") + u(words)) < min(u("distance_words"))


def test_the_bible_full_readme_pruning_gates_and_layouts_quote_the_store_and_units():
    """The set-up, P(open) at 0.06, the rare-token head (2, 2) (0.297), the layers and heads lost, the
    from-scratch budget and the BLEU each arm is read against (store, scores.json, gap units)."""
    from evolution.report.heads_card.voita import RARE_SHARE

    p = _group("heads_pruning").sel(model="mt")
    cfg, lam = p.attrs["config"]["pruning"], {str(r): f"{float(p.lam.sel(run=r)):g}" for r in p.run.values}
    text = _readme()
    assert (
        f"Hard-Concrete gates, {cfg['updates']:,} updates of fine-tuning at lr {cfg['lr']:.0e} with the gates "
        f"at {cfg['gate_lr']:g}"
    ).replace("e-0", "e-") in text
    prob = sorted(x for row in _pruning_units()["encoder-0.06"]["prob_open"]["encoder_self"] for x in row)
    middle = max(prob, key=lambda x: min(x, 1 - x))
    low = max(x for x in prob if x < 0.5 and x != middle)
    high = min(x for x in prob if x >= 0.5 and x != middle)
    assert (
        f"(at {lam['encoder-0.06']} every P(open) is below {-(-low * 100 // 1) / 100:.2f} or above "
        f"{high * 100 // 1 / 100:.2f} but one at {middle:.2f})"
    ) in text
    assert f"at lambda {lam['encoder-0.06']} their mean LRP relevance" in text
    h = _group("heads").sel(model="mt")
    rare = (h.rare_token_share >= RARE_SHARE).transpose("layer", "head").values
    ((layer, head),) = zip(*rare.nonzero(), strict=True)
    rel = _group("heads_importance").relevance.sel(model="mt", attention="encoder_self").transpose("layer", "head")
    assert rel.values[layer].argmax() == head
    enc = [r for r in p.run.values if str(p.scope.sel(run=r).values) == "encoder"]
    kept = {
        float(p.lam.sel(run=r)): float(p.kept.sel(run=r, attention="encoder_self").values[layer, head]) for r in enc
    }
    survives = min(x for x, k in kept.items() if k == 0)
    assert all(k == 1 for x, k in kept.items() if x < survives)
    assert (
        f"the MT has {WORDS[int(rare.sum())]} rare-token head, ({int(h.layer[layer])}, {int(h['head'][head])}), "
        f"the most relevant of its layer ({float(rel.values[layer, head]):.3f}), and it survives every lambda "
        f"below {survives:g}"
    ) in text
    assert int(h.positional.sum()) == 0 and int(h.syntactic.sum()) == 0
    alls = [r for r in p.run.values if str(p.scope.sel(run=r).values) == "all"]
    layers = {a: int(p.kept.sel(run=alls[0], attention=a).notnull().any("head").sum()) for a in p.attention.values}
    assert layers["encoder_self"] * 2 == sum(layers.values())  # "half as much as in the encoder-only runs"
    assert f"the penalty is the mean over {sum(layers.values())} gated layers" in text
    dec = {int(p.kept.sel(run=r, attention="decoder_self").sum()) for r in alls}
    assert dec == {layers["decoder_self"] * p.sizes["head"]}
    assert f"the decoder self-attention keeps all {dec.pop()} at every lambda" in text
    ((run, at, n),) = [
        (r, int(x.layer), int(p.sizes["head"] - x))
        for r in alls
        for x in p.kept.sel(run=r, attention="encoder_decoder").sum("head", min_count=1)
        if x.notnull() and x < p.sizes["head"]
    ]
    assert (
        f"the encoder-decoder attention loses {WORDS[n]} of layer {at}'s {WORDS[p.sizes['head']]} at {lam[run]}" in text
    )
    mt = _json("models", "mt", "model.json")
    assert mt["updates"] == cfg["scratch_updates"]
    assert (
        f"the base model's {mt['updates']:,} updates at its learning rate and warm-up "
        f"({mt['model']['lr'][0]:.0e}, {mt['model']['warmup_updates']})"
    ).replace("e-0", "e-") in text
    assert (
        f"trains every head from the same initialisation (seed {mt['model']['seed']}), for the same "
        f"{cfg['scratch_updates']:,} updates" in text
    )
    f2 = "{:.2f}".format
    full, every = float(p.bleu_full), float(p.bleu_scratch_full)
    fixed, seed1 = (_json("units", f)["bleu_scratch"] for f in (FIXED, SEED1))
    assert f"It reaches {f2(every)} BLEU, against {f2(full)} for the base model" in text
    assert f"the rest, {f2(fixed - full)}, is of the order of the seed spread" in text
    base = [_json("units", GAP_UNITS[("fairseq-train", s)][0])["bleu"] for s in (0, 1, 2)]
    spreads = (max(base) - min(base), abs(every - seed1))
    assert (
        f"the three base MT seeds span {f2(spreads[0])} BLEU ({', '.join(map(f2, base))}; the third is "
        f"`mt-seed2` of `configs/bible-full-pruning-seeds.yaml`, not shipped) and the loop's two every-head "
        f"seeds are {f2(spreads[1])} apart ({f2(every)}, {f2(seed1)})"
    ) in text
    gain = {r: float(p.bleu_scratch.sel(run=r)) - every for r in alls if p.bleu_scratch.sel(run=r).notnull()}
    best, layout = max(gain.values()), min(gain, key=gain.get)
    assert best > 2 * max(spreads) and 0.5 * max(spreads) < abs(gain[layout]) < 1.5 * min(spreads)
    missing = int(p.kept.sel(run=layout).count() - p.kept.sel(run=layout).sum())
    assert (
        f"so the {best:+.2f} is more than twice either spread while the {gain[layout]:+.2f} is about one, and "
        f"the {gain[layout]:+.2f} layout differs from every head by {WORDS[missing]} head"
    ) in text


def test_the_bible_full_readme_pruning_tables_heads_and_scratch_chrf_quote_the_store():
    """The columns tests/test_docs.py leaves: the kept heads (layer from 1, head from 0), the heads of
    the unpruned, gate-free and every-head rows, the from-scratch chrF."""
    import numpy as np

    p = _group("heads_pruning").sel(model="mt")
    rows: dict[str, list] = {}
    for line in (FULL / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and len(_cells(line)) >= 4:
            rows.setdefault(_cells(line)[0], []).append(_cells(line))
    scope = {str(r): str(p.scope.sel(run=r).values) for r in p.run.values}
    some = p.kept.sel(run=next(r for r, s in scope.items() if s == "all"))
    heads = [int(some.sel(attention=a).count()) for a in p.attention.values]
    for label in ("unpruned, not fine-tuned", "0 (no gates, fine-tuned as long)"):
        assert [r[1] for r in rows[label]] == [str(heads[0]), " / ".join(map(str, heads))], label
    every = rows["every head, from scratch (`pruning.scratch_full`)"][0]
    assert [every[1], every[5]] == [" / ".join(map(str, heads)), f"{float(p.chrf_scratch_full):.2f}"]
    for run, s in scope.items():
        cells = rows[f"{float(p.lam.sel(run=run)):g}"][0 if s == "encoder" else 1]
        if s == "all":
            chrf = float(p.chrf_scratch.sel(run=run))
            assert cells[5] == (f"{chrf:.2f}" if np.isfinite(chrf) else ""), run
            continue
        kept = p.kept.sel(run=run, attention="encoder_self").transpose("layer", "head")
        where = [
            f"({int(kept.layer[i])},{int(kept['head'][j])})" for i, j in zip(*np.nonzero(kept.values == 1), strict=True)
        ]
        assert cells[4] == ("all" if len(where) == heads[0] else " ".join(where) or "none"), run


def test_the_bible_full_readme_pruning_run_times_quote_the_units():
    """Fine-tuning (per run, per update), from-scratch training and translation times of the pruning runs."""
    units = _pruning_units()
    cfg = _group("heads_pruning").attrs["config"]["pruning"]
    enc = [u for name, u in units.items() if name.startswith("encoder-")]
    alls = [u for name, u in units.items() if name.startswith("all-")]
    tune = [u["prune_seconds"] for u in enc]
    translate = [u["seconds"] - u["prune_seconds"] for u in enc]
    text = _readme()
    assert (
        f"Each run took {_span(tune, ',.0f')} s ({_span([t / cfg['updates'] for t in tune], '.1f')} s per update, "
        f"the cores shared with other runs for the slower ones) plus {_span(translate, '.0f')} s of translation"
    ) in text
    scratch = [u["scratch_seconds"] for u in alls if "scratch_seconds" in u]
    (rate,) = {f"{s / cfg['scratch_updates']:.1f}" for s in scratch}
    every = units["scratch"]["scratch_seconds"]
    assert (
        f"The all-attention fine-tunings took {_span([u['prune_seconds'] for u in alls], ',.0f')} s each, the "
        f"from-scratch trainings {scratch[0]:,.0f} and {scratch[1]:,.0f} s ({rate} s per update, one thread "
        f"each, the two in parallel on the 2 cores) and {every:,.0f} s for every head "
        f"({every / cfg['scratch_updates']:.1f} s per update"
    ) in text
    per_model = [
        (u["seconds"] - u["prune_seconds"] - u.get("scratch_seconds", 0)) / (2 if "scratch_seconds" in u else 1)
        for u in alls
    ] + [units["scratch"]["seconds"] - every]
    assert f"plus about {round(sum(per_model) / len(per_model), -1):.0f} s of translation per model" in text


def test_the_bible_full_readme_gpu_run_times_quote_gpu_timings():
    """The earlier store's GPU runs: count, day, preparation, initial encoders, MT and LM runs, wall time."""
    t, runs = _json("gpu_timings.json"), _json("eval.json")["runs"]

    def took(objective):
        return _span([t["runs"][r]["result"]["seconds"] for r, c in runs.items() if c["objective"] == objective], ".0f")

    together = t["parallel"][0]
    day = datetime.fromtimestamp(t["prepare"]["start"], tz=UTC).date().isoformat()
    text = _readme()
    assert f"computed from {len(t['runs'])} runs trained on one NVIDIA H100 GPU on {day}" in text
    assert (
        f"preparation {t['prepare']['prepare_s']} s, initial encoders {t['prepare']['init_s']} s; MT runs "
        f"{took('mt')} s each, LM runs {took('lm')} s, all {len(together['runs'])} together "
        f"{together['wall_s']:.0f} s of wall time"
    ) in text


def test_the_bible_full_readme_model_sizes_and_updates_quote_the_shipped_models():
    """Number of models, dtype, sizes (MB of 10^6 bytes), updates, the MLM's unchanged share."""
    models = FULL / "models"
    meta = {d.name: json.loads((d / "model.json").read_text()) for d in models.iterdir() if (d / "model.json").exists()}
    size = {m: _mb(models / m / "model.safetensors") for m in meta}
    up = {m: f"{meta[m]['updates']:,}" for m in meta}
    assert {m["dtype"] for m in meta.values()} == {"float32"} and size["lm"] == size["mlm"]
    text = _readme()
    assert (
        f"float32: `mt` {size['mt']}, `lm` and `mlm` {size['lm']} each, `vocab` "
        f"{sum(p.stat().st_size for p in (models / 'vocab').iterdir()) / 1e6:.2f} MB"
    ) in text
    assert (
        f"`mt` {up['mt']} updates, `lm` {up['lm']} (interrupted after the checkpoint of update "
        f"{meta['lm']['updates'] - 1:,}; resuming took one more step), `mlm` {up['mlm']} ("
    ) in text
    assert f"`mt-tokdrop` ({up['mt-tokdrop']} updates) and `lm-tokdrop` ({up['lm-tokdrop']})" in text
    assert f"on 2026-11-24: {size['mt-tokdrop']} and {size['lm-tokdrop']}." in text
    assert f"`mlm-seed1` ({up['mlm-seed1']} updates, {size['mlm-seed1']};" in text
    for m in ("lm-seed1", "mt-seed1"):  # the training time between them is in no committed file
        assert re.search(re.escape(f"`{m}` ({up[m]} updates in ") + r"[\d,]+" + re.escape(f" s, {size[m]};"), text), m
    n = len(meta)
    assert {
        len(_json("eval.json")["runs"]),
        _group("mi").sizes["model"],
        len(_json("states-sample.json")["store_models"]),
    } == {n}
    for phrase in (
        f"The weights of its {n} models",
        f"every analysis of the {n} models",
        f"the weights of all {n} models",
        f"timings of the {n} GPU-trained runs",
        f"for all {n} shipped models",
        f"All {n} models: {_mb(*(p for p in models.rglob('*') if p.is_file()))}.",
    ):
        assert phrase in text, phrase
    unchanged = meta["mlm"]["model"]["leave_unmasked_prob"]
    assert f"also scores the {unchanged:.0%} of chosen positions left unchanged" in text


def test_the_bible_full_readme_test_scores_quote_scores_json_and_eval_json():
    """Test books and verses, scoring times, the BLEU / chrF and perplexity tables and the seed controls
    against eval.json's GPU-trained models, the rounding docs/training.md quotes, the unigram baseline."""
    s, g = _json("models", "scores.json"), _json("eval.json")["evaluation"]
    books = _json("report", "provenance.json")["corpus"]["splits"]["test"]
    assert {x["sentences"] for x in s.values()} == {books["pairs"]}
    text = _readme()
    assert f"Test books ({', '.join(books['group_names'])}; {books['pairs']:,} verses), `models/scores.json`" in text
    day1 = [m for m in s if "seed1" not in m]  # the models scored on 2026-11-24 (the seed controls on the 25th)
    assert f"; {_span([s[m]['seconds'] for m in day1 if 'bleu' in s[m]], '.0f')} s per model on 2 cores)" in text
    assert (
        f"from the loaded weights, {_span([s[m]['seconds'] for m in day1 if 'ppl' in s[m]], '.0f')} s per model;"
        in text
    )
    f2 = "{:.2f}".format
    for m in ("mt", "mt-tokdrop", "mt-seed1", "lm", "lm-tokdrop", "lm-seed1", "mlm"):
        cells = _row(FULL / "README.md", f"| `{m}` " + ("(2026-11-25) |" if "seed1" in m else "|"))
        want = (
            [f2(s[m]["bleu"]), f2(s[m]["chrf"]), f"{f2(g[m]['bleu'])} / {f2(g[m]['chrf'])}"]
            if "bleu" in s[m]
            else [f2(s[m]["ppl"]), f2(g[m]["ppl"])]
        )
        assert [c.split(" (")[0] for c in cells[1:]] == want, m
    assert f"at commit 528cc62 ({s['mt']['bleu']:.1f} / {s['mt']['chrf']:.1f})" in text
    assert f"Unigram baseline: {g['unigram_ppl']:.1f}." in text
    assert f"test perplexity {f2(s['mlm-seed1']['ppl'])} against `mlm`'s {f2(s['mlm']['ppl'])})" in text
    assert (
        f"{f2(s['lm-seed1']['ppl'])} against `lm`'s {f2(s['lm']['ppl'])}; the GPU-trained `lm-seed1` had "
        f"{f2(g['lm-seed1']['ppl'])})"
    ) in text
    assert (
        f"BLEU / chrF {f2(s['mt-seed1']['bleu'])} / {f2(s['mt-seed1']['chrf'])} against `mt`'s "
        f"{f2(s['mt']['bleu'])} / {f2(s['mt']['chrf'])}; the GPU-trained one had {f2(g['mt-seed1']['bleu'])} / "
        f"{f2(g['mt-seed1']['chrf'])})"
    ) in text


def test_docs_heads_bible_full_counts_quote_the_store():
    """docs/heads.md: models, token dropout, sentences, analysis version, decoder verses, pieces and
    heads, the decoder table's uniform entropies, the BLEU of "Not done yet"."""
    heads, dec = _group("heads"), _group("heads_decoder")
    (n,), (verses,), (pieces,) = (
        {int(x) for x in c.values} for c in (heads.sentences, dec.sentences, dec.target_tokens)
    )
    (drop,) = {_json("models", m, "model.json")["model"]["input_token_dropout"] for m in ("mt-tokdrop", "lm-tokdrop")}
    text = _prose("docs", "heads.md")
    models = heads.sizes["model"]
    assert (
        f"The {models} models of `results/bible-full/` (the shipped weights, trained on 2 CPU cores: base, seed 1, "
        f"{drop:.0%} token dropout), their heads"
    ) in text
    assert f"The head verdicts on these {models} models" in text
    assert f"statistics over all {n:,} analysed sentences, rare tokens by training-split counts" in text
    from evolution.metrics.results import open_metrics

    minilm = open_metrics(REPO / "results" / "minilm-paper" / "metrics.zarr", "heads").attrs["analysis_version"]
    from evolution.analyses.heads.analysis import Heads

    assert minilm == heads.attrs["analysis_version"] == Heads.version  # the current definitions
    assert (
        f"`results/minilm-paper/metrics.zarr` and `results/bible-full/metrics.zarr` (analysis version "
        f"{heads.attrs['analysis_version']}, the current definitions)"
    ) in text
    assert (
        f"Decoder heads of the three translation models (`heads_decoder`; {verses:,} test verses teacher-forced "
        f"on their {pieces:,} reference target pieces;"
    ) in text
    assert f"means over the {dec.sizes['head']} heads of each layer" in text
    script = _heads_numbers()
    for row in ("decoder self", "encoder-decoder"):
        (uniform,) = set(re.split(r"\t| / ", script[f"{row}: uniform entropy"]))
        assert len(_row(REPO / "docs" / "heads.md", f"| {row}: entropy (uniform {uniform}) |")) == 4, row


def test_the_three_seed_pruning_sentences_quote_the_seed_table():
    """results/bible-full/README.md's and docs/heads.md's reading of the three-seed pruning run
    (configs/bible-full-pruning-seeds.yaml) are the committed seed table's and V3's numbers."""
    import csv
    import json

    folder = REPO / "results" / "bible-full" / "pruning-seeds"
    with (folder / _docs_blocks().SEEDS_CSV).open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    def arm(lam, gated, start):
        row = next(
            r
            for r in rows
            if r["lambda"] == lam and r["gated"] == gated and r["arm (BLEU difference)"].startswith(start)
        )
        mean, interval = row["mean [95% t interval]"].split(" ", 1)
        return (
            mean,
            [float(x) for x in interval.strip("[]").split(",")],
            row[next(k for k in row if k.startswith("per seed"))],
        )

    v3 = next(c for c in json.loads((folder / "head_verdicts.json").read_text()) if c["number"] == "V3")
    assert v3["verdict"] == "does not hold"
    d = {lam: arm(lam, "all", "d =") for lam in ("0.04", "0.06")}
    assert all(float(m) <= 0 and lo < 0 < hi for m, (lo, hi), _ in d.values())  # below 0, interval holds 0
    readme = " ".join((REPO / "results" / "bible-full" / "README.md").read_text(encoding="utf-8").split())
    pruned = [arm(lam, "all", "pruned (hard")[0] for lam in ("0.04", "0.06")]
    scratch = [arm(lam, "all", "layout from scratch")[0] for lam in ("0.04", "0.06")]
    assert (
        f"The pruned models lose {pruned[0]} and {pruned[1]} BLEU against their gate-free fine-tuning, while the "
        f"same layouts trained from scratch change by {scratch[0]} and {scratch[1]} against every head"
    ) in readme
    seeds = arm("0.06", "all", "layout from scratch")[2].split(", ")
    assert f"({seeds[0]}, {seeds[1]} and {seeds[2]} at lambda 0.06)" in readme
    gate = [float(v.split(": ")[-1].split()[0]) for v in v3["details"] if "continuous test-time gate" in v]
    assert f"moves the pruned arm by {gate[0]:+.2f} and {gate[1]:+.2f} BLEU against the hard 0/1 layout" in readme
    encoder = [arm(lam, "encoder", "pruned (hard")[0] for lam in ("0.04", "0.06")]
    assert f"Gating the encoder alone costs {encoder[0]} and {encoder[1]}." in readme
    heads = " ".join((REPO / "docs" / "heads.md").read_text(encoding="utf-8").split())
    assert f"V3 does not hold: the mean d is below 0 at both lambdas ({d['0.04'][0]} and {d['0.06'][0]})." in heads
