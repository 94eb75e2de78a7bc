"""The numbers that docs/metrics.md, docs/heads.md and the results READMEs quote from a committed
store, report or benchmark result, read back from it, so that a recompute cannot leave stale
text behind (the rest are in tests/test_docs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _prose(*parts: str) -> str:
    """The text of the repository file at ``parts``, its line breaks and runs of spaces made one space."""
    return " ".join(REPO.joinpath(*parts).read_text(encoding="utf-8").split())


def _cells(row: str) -> list[str]:
    """The stripped cells of one Markdown table row."""
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _csv_rows(path: Path) -> dict[str, list[float]]:
    """model -> the per-layer values of a report table (CSV; "0.975 [0.973, 0.977]" reads 0.975)."""
    import csv

    with path.open(encoding="utf-8") as f:
        return {r["model"]: [float(r[str(i)].split()[0]) for i in range(7)] for r in csv.DictReader(f)}


def test_docs_metrics_from_scratch_table_quotes_the_committed_report():
    """docs/metrics.md's table of the from-scratch models (layers 0 -> 6) is the committed
    results/from-scratch/report's tables: MI with the input token and with the output label, the
    same-token rate among the 50 nearest neighbours, PWCCA to the same layer of the MT; the
    paragraph above it (occurrences, types, k, restarts and their spread) and the controls."""
    import csv
    import json

    report = REPO / "results" / "from-scratch" / "report"
    mi = _csv_rows(report / "tab-mi-with-the-input-token.csv")
    out = _csv_rows(report / "tab-mi-with-the-output-label-next-token-for-an-lm-original-token-for-an-mlm.csv")
    same = _csv_rows(report / "tab-neighbours-same-token-top-k-neighbours-of-the-same-type.csv")
    with (report / "similarity_pwcca.csv").open(encoding="utf-8") as f:
        pw = {}
        for r in csv.DictReader(f):
            if r["quantity"] == "distance" and r["panel"] == "pair kinds" and r["model_a"] == "mt":
                pw.setdefault(r["model_b"], []).append(float(r["value"]))

    def row(xs):
        return " ".join(f"{x:.2f}" for x in xs)

    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    cells = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
        for line in text.splitlines()
        if line.startswith("| MI(")
        or line.startswith("| same token among")
        or line.startswith("| PWCCA to the same layer")
    }
    mt, lm, mlm = cells[next(k for k in cells if k.startswith("MI(input)"))]
    assert mt == row(mi["mt"]) and lm == row(mi["lm"])
    assert mlm == f"{mi['mlm'][0]:.2f} -> {mi['mlm'][-1]:.2f} (flat)" and max(mi["mlm"]) - min(mi["mlm"]) < 0.02
    _, lm, mlm = cells["MI(output)"]
    assert lm.startswith(row(out["lm"]) + " (control") and mlm.startswith(row(out["mlm"]) + " (control")
    mt, lm, mlm = cells["same token among 50-NN"]
    assert mt == row(same["mt"]) and lm == f"{same['lm'][0]:.2f} ... {row(same['lm'][-3:])}"
    assert mlm == "1.00 throughout" and min(same["mlm"]) >= 0.995
    _, lm, mlm = cells["PWCCA to the same layer of MT"]
    assert lm == row(pw["lm"]) and mlm == row(pw["mlm"])
    # the paragraph above the table and the controls in its cells: mi.csv, report.md, the provenance's config
    with (report / "mi.csv").open(encoding="utf-8") as f:
        v = {(r["quantity"], r["target"], r["model"], r["layer"]): float(r["value"]) for r in csv.DictReader(f)}
    spread = max(x - v[("mi_restart_min", *k[1:])] for k, x in v.items() if k[0] == "mi_restart_max")
    cfg = json.loads((report / "provenance.json").read_text())["config"]
    md = (report / "report.md").read_text(encoding="utf-8")
    k, n = re.search(r"H\(X\) = [\d.]+ for every model\. k = (\d+), occurrences = ([\d,]+)\.", md).groups()
    prose = " ".join(text.split())
    assert (
        f"MI on the {n} occurrences of the {cfg['tokens']['top']} most frequent types (>= "
        f"{cfg['tokens']['min_count']} occurrences each), k = {cfg['mi']['k']}, {cfg['mi']['restarts']} restarts, "
        f"at most {spread:.3f} nats apart)"
    ) in prose and int(k) == cfg["mi"]["k"]
    assert f"MI(input), H = {v[('entropy', 'input', 'mt', '')]:.3f}" in cells
    masked = f"{v[('entropy', 'masked_input', 'mlm', '')]:.3f}"  # the MI with the token fed at corrupted positions
    fed = re.search(rf"H\(X\) = {masked} for every model\. k = \d+, occurrences = ([\d,]+)\.", md)[1]

    def control(m):
        c = [x for key, x in v.items() if key[:3] == ("mi_shuffled", "output", m)]
        return f"(control {min(c):.2f}-{max(c):.2f}"

    _, lm, mlm = cells["MI(output)"]
    assert lm == f"{row(out['lm'])} {control('lm')})"
    assert mlm == f"{row(out['mlm'])} {control('mlm')}; {cfg['mi']['mlm_corruptions']} corruptions, {fed} positions)"
    timings = json.loads((report.parent / "eval.json").read_text())["timings"]
    updates = " / ".join(f"{timings[m]['updates']:,}" for m in ("mt", "lm", "mlm"))
    assert f"At this budget ({updates} updates)" in prose
    mlm_out = {
        layer: tuple(v[(q, "output", "mlm", f"{layer}.0")] for q in ("mi_mean", "mi_shuffled")) for layer in (0, 6)
    }
    excess = {layer: m - c for layer, (m, c) in mlm_out.items()}
    assert (
        f"a curve whose excess over the control grows from {excess[0]:.2f} to {excess[6]:.2f} nats. Layer 0 stays "
        f"flagged (control {mlm_out[0][1]:.2f} of {mlm_out[0][0]:.2f})"
    ) in prose


def test_docs_metrics_mi_sentences_quote_bible_full():
    """The sentences of docs/metrics.md on the bible-full MI: the share of H(X) the MT and LM keep
    (100 types) and the MT's MI at layer 6."""
    from evolution.metrics.results import open_metrics

    ds = open_metrics(REPO / "results" / "bible-full" / "metrics.zarr", "mi").load()
    frac = ds.mi_fraction.sel(target="input", model=["mt", "mt-seed1", "lm", "lm-seed1"])
    low, high = float(frac.min()), float(frac.max())
    text = _prose("docs", "metrics.md")
    where = frac.where(frac == frac.min(), drop=True)
    model, layer = str(where.model.values[0]), int(where.layer.values[0])
    assert (
        f"keep {int(low * 100)}-{round(high * 100)}% of H(X) at every layer (bible-full: the lowest {low:.1%}, "
        f"`{model}` at layer {layer})"
    ) in text
    six = float(ds.mi_mean.sel(model="mt", layer=6, target="input"))
    assert f"MI {six:.2f} at layer 6 on the `bible-full` MT" in text


def test_the_similarity_benchmark_texts_quote_its_committed_result():
    """results/scale/README.md and benchmarks/README.md quote results/scale/similarity.json: the
    point estimates' time, with the replicates, their ratio, the definition per replicate and the
    largest difference between the two routes."""
    import json

    b = json.loads((REPO / "results" / "scale" / "similarity.json").read_text())
    for doc in (REPO / "results" / "scale" / "README.md", REPO / "benchmarks" / "README.md"):
        text = _prose(*doc.relative_to(REPO).parts)
        for number in (
            f"{b['estimates_s']:.1f} s",
            f"{b['with_replicates_s']:.1f} s",
            f"{b['ratio']:.2f}x",
            f"{b['definition_s_per_replicate']:.1f} s per replicate",
            f"{b['max_difference']:.2e}",
            f"{b['n_occurrences']:,} occurrences",
            b["date"],
        ):
            assert number in text, (doc.name, number)


def test_docs_heads_from_scratch_paragraph_quotes_the_committed_report():
    """docs/heads.md's paragraph on the from-scratch models' heads: the sentences, mean and uniform
    entropy per model, no positional head, the rare-token maxima, the LM's dependency heads above
    their offset baselines (every one, by margin) and the MT's and MLM's below theirs, read from
    results/from-scratch/report's CSVs; the updates per model from eval.json."""
    import csv
    import json

    report = REPO / "results" / "from-scratch" / "report"

    def read(name):
        with (report / name).open(encoding="utf-8") as f:
            return list(csv.DictReader(f))

    ent: dict = {}
    for r in read("heads_entropy.csv"):
        ent.setdefault((r["model"], r["measure"]), []).append(float(r["value"]))
    (sentences,) = {r["sentences"] for r in read("heads_entropy.csv")}
    roles = read("heads_roles.csv")
    rare = {m: max(float(r["rare_token_share"]) for r in roles if r["model"] == m) for m in ("mt", "lm", "mlm")}
    dep = {
        (r["model"], r["quantity"], r["direction"], r["relation"]): float(r["value"])
        for r in read("heads_dependency.csv")
    }
    text = _prose("docs", "heads.md")
    timings = json.loads((report.parent / "eval.json").read_text())["timings"]
    updates = sorted({int(t["updates"]) for t in timings.values()})
    assert (
        f"### The from-scratch models (`configs/from-scratch.yaml`, the default run until decision 22; "
        f"{updates[0]:,}-{updates[-1]:,} updates)"
    ) in text
    assert f"Attention is still diffuse at this budget (all {int(sentences):,} analysed sentences)" in text
    mean = {m: sum(ent[(m, "entropy")]) / len(ent[(m, "entropy")]) for m in ("mt", "lm", "mlm")}
    uni = {m: sum(ent[(m, "uniform_entropy")]) / len(ent[(m, "uniform_entropy")]) for m in ("mt", "lm", "mlm")}
    assert (
        f"mean entropy {mean['mt']:.2f} (MT), {mean['lm']:.2f} (LM), {mean['mlm']:.2f} (MLM) nats against "
        f"uniform {uni['mt']:.2f} / {uni['lm']:.2f} / {uni['mlm']:.2f}"
    ) in text
    assert not any(r["positional"] == "True" for r in roles) and "no positional head;" in text
    assert f"at most {rare['mt']:.1%} / {rare['lm']:.1%} / {rare['mlm']:.1%} of sentences" in text

    def above(model, direction):  # (relation, picked, baseline) where the picked head beats the baseline
        out = [
            (k[3], v, dep[(model, "baseline_accuracy", direction, k[3])])
            for k, v in dep.items()
            if k[:3] == (model, "picked_accuracy", direction)
        ]
        return sorted([x for x in out if x[1] > x[2]], key=lambda x: x[2] - x[1])

    def quote(rows):
        return ", ".join(f"{r} {v:.2f} against {b:.2f}" for r, v, b in rows)

    lm = {d: above("lm", d) for d in ("head_to_dependent_clark", "dependent_to_head")}
    relations = {r for rows in lm.values() for r, _, _ in rows}
    scored = {k[3] for k in dep if k[0] == "lm"}
    assert (
        f"for {len(relations)} of the {len(scored)} relations, by margin (head -> dependent, Clark et al.'s "
        f"transposed map: {quote(lm['head_to_dependent_clark'])}; dependent -> head: "
        f"{quote(lm['dependent_to_head'])})"
    ) in text
    assert (
        not above("mt", "head_to_dependent_clark")
        + above("mt", "dependent_to_head")
        + above("mlm", "head_to_dependent_clark")
        + above("mlm", "dependent_to_head")
    )
    picked = [v for k, v in dep.items() if k[0] in ("mt", "mlm") and k[1] == "picked_accuracy"]
    assert (
        f"every MT and MLM head picked stays below its baseline (picked heads {min(picked):.2f}-{max(picked):.2f})"
    ) in text


def test_docs_heads_minilm_bullets_quote_the_committed_minilm_store():
    """docs/heads.md's MiniLM bullets (the table above them is a generated block): the [CLS] and
    [SEP] shares, C2 under both rules, the norm shares, the frequency correlation, the dependency
    heads against their baselines, the positional and syntactic heads; read from
    results/minilm-paper (its store and head_verdicts.json)."""
    import csv
    import json

    from evolution.metrics.results import open_metrics

    root = REPO / "results" / "minilm-paper"
    ds = open_metrics(root / "metrics.zarr", "heads").load().sel(model="minilm")
    text = _prose("docs", "heads.md")
    assert f"the statistics over the first {ds.attrs['config']['heads']['sentences']:,} verses" in text
    assert f"(`heads.punctuation: {ds.attrs['punctuation']}`)" in text
    alpha, norm = ds.layer_alpha_share, ds.layer_norm_share
    middle = [2, 3, 4, 5]

    def span(x, f="{:.2f}"):
        return f"{f.format(float(x.min()))}-{f.format(float(x.max()))}"

    cls = alpha.sel(key_type="bos")
    assert float(cls.sel(layer=middle).min()) > float(cls.drop_sel(layer=middle).max())
    assert (
        f"({span(cls.sel(layer=middle))} of every query's weight in layers 2-5), [SEP] gets "
        f"{span(alpha.sel(key_type='eos'))}"
    ) in text
    c2 = next(c for c in json.loads((root / "report" / "head_verdicts.json").read_text()) if c["number"] == "C2")
    low, rest, p = re.fullmatch(r"minilm: (\S+) vs (\S+) of uniform, p = (\S+)", c2["measured"]).groups()
    assert c2["verdict"] == "holds" and c2["earlier"]["verdict"] == "does not hold"
    assert (
        f"layer 1's heads have {low} of the uniform attention's entropy, the other layers' {rest} (one-sided "
        f"Mann-Whitney p = {p}; `results/minilm-paper/report/head_verdicts.json`). Under the earlier rule "
        "(the lower half of the layers against the upper half) it does not hold"
    ) in text
    share = norm.sel(key_type="bos", layer=middle)
    assert (
        f"the large weight on [CLS] in layers 2-5 shrinks to {span(share * 100, '{:.0f}')}% of the vector norm"
    ) in text
    above = (norm.sel(key_type="punct") > alpha.sel(key_type="punct")).values
    assert list(above) == [True] * 5 + [False]
    assert (
        "its share of the norm is above its share of the weights in layers 1-5, and below it only in layer 6"
    ) in text
    rho = ds.spearman.sel(quantity="value_norm")
    assert float(rho.sel(layer=1)) <= 0 < float(rho.sel(layer=[2, 3, 4, 5, 6]).min())
    assert f"from layer 2 on, {float(rho.sel(layer=6)):.2f} in layer 6" in text
    with (root / "report" / "heads_dependency.csv").open(encoding="utf-8") as f:
        dep = {
            (r["quantity"], r["relation"]): float(r["value"])
            for r in csv.DictReader(f)
            if r["direction"] == "dependent_to_head"
        }

    def pair(rel):
        return f"{dep[('picked_accuracy', rel)]:.2f} ({dep[('baseline_accuracy', rel)]:.2f})"

    assert (
        f"the verb of an object {dep[('picked_accuracy', 'obj')]:.2f} of the time on test (offset baseline "
        f"{dep[('baseline_accuracy', 'obj')]:.2f}), the verb of a subject {pair('nsubj')}; amod {pair('amod')}, "
        f"advmod {pair('advmod')}"
    ) in text
    positional = ds.value.where(ds.positional).sel(measure="max_prev")
    assert int(ds.positional.sum()) == 1
    assert f"One positional head ({float(positional.max()):.0%} of its maxima on the previous token)" in text
    count = ds.syntactic.sum(["layer", "head"])
    assert (
        f"{int(count.sel(syntactic_relation='nsubj'))} syntactic nsubj and "
        f"{int(count.sel(syntactic_relation='obj'))} syntactic obj heads"
    ) in text


def test_the_bible_heads_readme_counts_quote_its_store():
    """results/bible-heads/README.md's counts: the sentences head importance used per model and
    the relations scored for every model and direction (the means it quotes are over those)."""
    import numpy as np

    from evolution.metrics.results import open_metrics

    store = REPO / "results" / "bible-heads" / "metrics.zarr"
    imp = open_metrics(store, "heads_importance").load()
    dep = open_metrics(store, "heads_dependency").load()
    n = dict(zip((str(m) for m in imp.model.values), (int(x) for x in imp.sentences.values), strict=True))
    scored = int(np.isfinite(dep.best_accuracy).all([d for d in dep.best_accuracy.dims if d != "relation"]).sum())
    text = _prose("results", "bible-heads", "README.md")
    assert f"on the first {n['mt']} analysed sentences" in text and n["mt"] == n["lm"]
    assert f"for the MLM the {n['mlm']} of them in which the corruption picked a position" in text
    assert f"mean over the {scored} relations scored for every model and direction (of {dep.relation.size})" in text


def test_the_bible_full_pruning_prose_quotes_the_store():
    """results/bible-full/README.md's sentences under the encoder pruning table: what half, all
    but five and all of the encoder heads cost against the gate-free fine-tuning (differences of
    the table's two-decimal BLEU), and the kept heads' mean relevance, importance and confidence
    against the pruned ones' at lambda 0.06."""
    import numpy as np

    from evolution.metrics.results import open_metrics

    store = REPO / "results" / "bible-full" / "metrics.zarr"
    p = open_metrics(store, "heads_pruning").load().sel(model="mt")
    imp = open_metrics(store, "heads_importance").load().sel(model="mt", attention="encoder_self")
    heads = open_metrics(store, "heads").load().sel(model="mt")
    tuned = round(float(p.bleu_tuned), 2)
    cost = {}
    for r in p.run.values:
        if str(p.scope.sel(run=r).values) == "encoder":
            cost[int(np.nansum(p.kept.sel(run=r, attention="encoder_self")))] = tuned - round(
                float(p.bleu.sel(run=r)), 2
            )
    text = _prose("results", "bible-full", "README.md")
    assert (
        f"Half the heads cost {cost[12]:.2f} BLEU, all but five {cost[5]:.2f}, all {cost[0]:.2f} against the same "
        "fine-tuning without gates"
    ) in text
    kept = p.kept.sel(run="encoder-0.06", attention="encoder_self").transpose("layer", "head").values == 1

    def split(x, fmt):
        x = x.transpose("layer", "head").values
        return f"{x[kept].mean():{fmt}} against {x[~kept].mean():{fmt}}"

    assert f"mean LRP relevance is {split(imp.relevance, '.3f')} for the pruned ones" in text
    assert f"mask importance {split(imp.importance, '.4f')}" in text
    assert f"confidence {split(heads.value.sel(measure='confidence'), '.3f')}" in text


def test_the_bible_paper_mi_types_table_and_losses_quote_its_store():
    """results/bible-paper/README.md's table of MI against the number of types (fraction of H(X),
    layer 0 -> 6, and minus the shuffled control; the MLM at layers 0, 3, 6) and the losses its text
    draws from it (the top layer against layer 0, minus the control) are the store's ``mi_types``."""
    from evolution.metrics.results import open_metrics

    ds = open_metrics(REPO / "results" / "bible-paper" / "metrics.zarr", "mi_types").load().sel(target="input")
    f, c = ds.mi_fraction, ds.mi_corrected_fraction

    def at(x, m, t, layer):
        return f"{float(x.sel(model=m, types=t, layer=layer)):.3f}"

    lines = (REPO / "results" / "bible-paper" / "README.md").read_text(encoding="utf-8").splitlines()
    for t in ds.types.values:
        t = int(t)
        start = f"| {t:,} ({float(ds.entropy.sel(model='mt', types=t)):.2f}) |"
        row = next(line for line in lines if line.startswith(start))
        cells = [x.strip() for x in row[len(start) :].strip(" |").split("|")]
        for m, cell in zip(("mt", "lm"), cells, strict=False):
            assert cell == (f"{at(f, m, t, 0)} -> {at(f, m, t, 6)} ({at(c, m, t, 0)} -> {at(c, m, t, 6)})"), (t, m)
        assert cells[2] == (
            ", ".join(at(f, "mlm", t, k) for k in (0, 3, 6))
            + " ("
            + ", ".join(at(c, "mlm", t, k) for k in (0, 3, 6))
            + ")"
        ), t
    text = " ".join(lines)

    def loss(m):
        x = ds.mi_corrected.sel(model=m)
        return [f"{float(1 - x.sel(layer=6, types=t) / x.sel(layer=0, types=t)):.1%}" for t in ds.types.values]

    lm, mt = loss("lm"), loss("mt")
    assert (
        f"the LM's top layer loses {lm[0]} of layer 0's MI at 100 types, {lm[1]} at 250, {lm[2]} at 500 and "
        f"{lm[3]} at 1,000"
    ) in text
    assert f"the MT's {mt[0]}, {mt[1]}, {mt[2]} and {mt[3]}" in text


def test_the_bible_paper_verdicts_paragraph_quotes_its_scorecard():
    """results/bible-paper/README.md's verdicts: the claims that hold, their count, and the numbers
    quoted for claims 3, 6 and 8 are the committed report/scorecard.json's."""
    import json

    cards = json.loads((REPO / "results" / "bible-paper" / "report" / "scorecard.json").read_text())
    main = [c for c in cards if c.get("part", "") != "b" and c["claim"].find("reverses") < 0]
    by = {c["number"]: c for c in main}
    holds = [c["number"] for c in main if c["verdict"] == "holds"]
    text = _prose("results", "bible-paper", "README.md")
    assert f"**{len(holds)} of {len(by)} hold**" in text
    assert "claims " + ", ".join(str(n) for n in holds if n not in (3,)) + " hold, as before" in text
    assert by[3]["verdict"] == "holds" and by[6]["verdict"] == "does not hold" and by[8]["verdict"] == "does not hold"
    mt, lm = re.findall(r"(\d\.\d\d) H", by[3]["measured"])
    assert f"MT {mt} H against LM {lm} H at the top layer" in text
    rates = dict(re.findall(r"(\w+) (\d\.\d{3}) \[", by[6]["measured"]))
    assert f"MLM {rates['mlm']}, MT {rates['mt']}, LM {rates['lm']}" in text
    first, top = re.findall(r"(\d\.\d{3}) \[", by[8]["measured"])
    assert f"the LM's same-left-token rate rises, {first} -> {top}" in text


def test_docs_metrics_bible_paper_paragraph_quotes_its_store():
    """docs/metrics.md's paragraph on the paper-sized set: the shuffled control's range, MI minus
    the control at layers 0 -> 6 per model (the MLM's minimum layer), the LM's next-token MI and the
    MLM's original and fed token at its corrupted positions, from results/bible-paper's ``mi``."""
    from evolution.metrics.results import open_metrics

    ds = open_metrics(REPO / "results" / "bible-paper" / "metrics.zarr", "mi").load()
    mi = ds.mi_corrected
    control = (ds.mi_mean - ds.mi_corrected).sel(target="input")

    def ends(m, t):
        x = mi.sel(model=m, target=t)
        return f"{float(x.sel(layer=0)):.2f} -> {float(x.sel(layer=6)):.2f}"

    text = _prose("docs", "metrics.md")
    low = int(mi.sel(model="mlm", target="input").argmin("layer"))
    assert f"The shuffled control of MI(input) is {float(control.min()):.2f}-{float(control.max()):.2f} nats" in text
    assert (
        f"is MT {ends('mt', 'input')}, LM {ends('lm', 'input')}, MLM {ends('mlm', 'input')} (its minimum at "
        f"layer {int(mi.layer[low])})"
    ) in text
    assert f"MI(next token) of the LM {ends('lm', 'output')}" in text
    assert f"the original token {ends('mlm', 'output')} and the token fed {ends('mlm', 'masked_input')}" in text


def test_docs_metrics_bible_paper_syntax_sentence_quotes_its_store():
    """docs/metrics.md's syntax rates on the paper-sized set (chance and ceiling of the same-POS and
    same-relation rates, each model's rate at layer 0 -> 6) are results/bible-paper's ``neighbors``."""
    from evolution.metrics.results import open_metrics

    v = open_metrics(REPO / "results" / "bible-paper" / "metrics.zarr", "neighbors").load().value

    def at(m, measure, layer):
        return f"{float(v.sel(model=m, measure=measure, layer=layer)):.3f}"

    def ends(m, measure):
        return f"{at(m, measure, 0)} -> {at(m, measure, 6)}"

    text = _prose("docs", "metrics.md")
    assert (
        f"chance: POS {at('mt', 'same_pos_chance', 0)}, relation {at('mt', 'same_deprel_chance', 0)}; ceiling "
        f"{at('mt', 'same_pos_ceiling', 0)}, {at('mt', 'same_deprel_ceiling', 0)}"
    ) in text
    assert f"same POS MT {ends('mt', 'same_pos')}, LM {ends('lm', 'same_pos')}, MLM {ends('mlm', 'same_pos')}" in text
    assert (
        f"same relation MT {ends('mt', 'same_deprel')}, LM {ends('lm', 'same_deprel')}, MLM "
        f"{ends('mlm', 'same_deprel')}"
    ) in text
    pos = v.sel(model="mlm", measure="same_pos")
    assert float(pos.sel(layer=6) - pos.sel(layer=4)) > float(pos.sel(layer=4) - pos.sel(layer=0))
    assert f"MLM {ends('mlm', 'same_pos')} (most of it in layers 5-6: {at('mlm', 'same_pos', 4)} at layer 4)" in text


def test_the_scale_table_quotes_scale_json():
    """results/scale/README.md's table: each stage's wall time and peak RSS at both corpus sizes and
    the ratio of the peaks, from results/scale/scale.json."""
    import json

    runs = json.loads((REPO / "results" / "scale" / "scale.json").read_text())
    small, full = (runs[k]["stages"] for k in sorted(runs, key=int))
    lines = (REPO / "results" / "scale" / "README.md").read_text(encoding="utf-8").splitlines()
    for stage in ("corpus", "extract", "metrics", "report"):
        row = next(line for line in lines if line.startswith(f"| {stage} |"))
        a, b = small[stage], full[stage]
        assert row == (
            f"| {stage} | {a['seconds']:,.1f} s, {a['peak_rss_gib']:.2f} GiB | {b['seconds']:,.1f} s, "
            f"{b['peak_rss_gib']:.2f} GiB | x{b['peak_rss_gib'] / a['peak_rss_gib']:.2f} |"
        ), stage
    text = " ".join(lines)
    assert all(f"{runs[k]['tokens_per_model']:,}" in text for k in runs)


def test_the_from_scratch_verdict_table_quotes_the_trajectory_store():
    """results/from-scratch/README.md's table of verdicts per kept update (and final), with the
    first update at which each claim holds and the one since which it holds, is the committed
    trajectory.zarr's ``verdicts`` group."""
    import xarray as xr

    ds = xr.open_zarr(
        REPO / "results" / "from-scratch" / "trajectory.zarr", group="verdicts", consolidated=False
    ).load()
    short = {"holds": "yes", "does not hold": "no", "not measurable here": "n/m"}
    lines = (REPO / "results" / "from-scratch" / "README.md").read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| claim |"))
    assert _cells(header)[1:-2] == [str(s) for s in ds.snapshot.values]
    for claim in ds.claim.values:
        row = next(line for line in lines if line.startswith(f"| {claim} "))
        cells = _cells(row)[1:]
        want = [short[str(v)] for v in ds.verdict.sel(claim=claim).values]
        want += [
            str(int(x)) if int(x) >= 0 else "never" for x in (ds.first.sel(claim=claim), ds.since.sel(claim=claim))
        ]
        assert cells == want, claim


def test_the_minilm_paper_tables_quote_scale_json_and_the_profile():
    """results/minilm-paper/README.md's stage table (seconds and peak summed RSS, from scale.json)
    and its table of metrics units (count, summed seconds, longest, from profile.jsonl)."""
    import json

    root = REPO / "results" / "minilm-paper"
    stages = next(iter(json.loads((root / "scale.json").read_text()).values()))["stages"]
    lines = (root / "README.md").read_text(encoding="utf-8").splitlines()
    for stage in ("corpus", "extract", "metrics", "report"):
        row = next(line for line in lines if line.startswith(f"| {stage} "))
        cells = _cells(row)
        assert cells[1:] == [f"{stages[stage]['seconds']:,.1f}", f"{stages[stage]['peak_rss_gib']:.2f}"], stage
    units: dict = {}
    for line in (root / "profile.jsonl").read_text().splitlines():
        if line.strip():
            u = json.loads(line)
            units.setdefault(u["analysis"], []).append(u["wall"])
    for analysis, walls in units.items():
        row = next(line for line in lines if line.startswith(f"| {analysis} "))
        cells = _cells(row)
        assert cells[1:] == [str(len(walls)), f"{sum(walls):,.1f}", f"{max(walls):,.1f}"], analysis


def test_the_minilm_paper_head_verdicts_paragraph_quotes_its_json():
    """results/minilm-paper/README.md's head verdicts: which hold and the numbers of C1, C2 and C3,
    from report/head_verdicts.json."""
    import json

    cards = {
        c["number"]: c
        for c in json.loads((REPO / "results" / "minilm-paper" / "report" / "head_verdicts.json").read_text())
    }
    text = _prose("results", "minilm-paper", "README.md")
    assert [n for n, c in cards.items() if c["verdict"] == "holds"] == ["C2", "C3", "V1", "K1", "K2"]
    assert cards["C1"]["verdict"] == "does not hold" and cards["V2"]["verdict"] == "not measurable here"
    low, high, p = re.search(r"(\d\.\d\d) vs (\d\.\d\d) of uniform, p = (\S+)", cards["C2"]["measured"]).groups()
    assert f"layer 1's heads {low} of the uniform attention's entropy against {high}, p = {p}" in text
    obj = re.search(r"obj \+(\d\.\d+)", cards["C3"]["measured"])[1]
    assert f"obj heads beat the offset baseline by {obj}" in text
    first, last = re.search(r"(\d\.\d\d) -> (\d\.\d\d)", cards["C1"]["measured"]).groups()
    assert f"the sinks' share rises from {first} to {last}" in text


def test_docs_metrics_corpus_counts_quote_the_bible_paper_store():
    """docs/metrics.md's counts of bible-paper's analysis set: the occurrences of its 1,000 types
    and H(X) over them and over the 100 most frequent (group mi_types)."""
    from evolution.metrics.results import open_metrics

    ds = open_metrics(REPO / "results" / "bible-paper" / "metrics.zarr", "mi_types").load()
    sel = ds.sel(model="mt", target="input")
    n, h1000, h100 = int(sel.n.sel(types=1000)), float(sel.entropy.sel(types=1000)), float(sel.entropy.sel(types=100))
    text = _prose("docs", "metrics.md")
    assert (
        f"the 1,000 most frequent ({n:,} occurrences in all; H(X) = {h1000:.2f} nats, against {h100:.2f} "
        "for the 100 most frequent)"
    ) in text
    seconds = json.loads((REPO / "results" / "method-checks" / "bootstrap_checks.json").read_text())[
        "mi_replicate_seconds"
    ]
    assert f"a replicate costs a few weighted bincounts, {seconds:.2f} s at {n:,} occurrences, 1,000 types" in text
    k = ds.attrs["config"]["mi"]["k"]
    assert f"Here that leaves {n / 10_000:.0f} occurrences per cluster." in text  # the paper's 10 per type
    assert (
        f"`configs/bible-paper.yaml` uses k = {k:,}: two clusters per type" in text
        and f"{n / k:.0f} occurrences per cluster (the earlier configuration, the 100 most frequent types at k = "
        f"1,000, had {int(sel.n.sel(types=100)) / 1000:.0f})"
        in text
    )


def test_docs_metrics_change_bins_sentence_quotes_both_stores():
    """docs/metrics.md's sizes of figure 4's rank bins: the occurrences of the similarity set and of
    its most and least frequent rank bins, on bible-full's test books and bible-paper's sentences."""
    from evolution.metrics.results import open_metrics

    def sizes(run):
        store = REPO / "results" / run / "metrics.zarr"
        occ = open_metrics(store, "change").n_occurrences.sel(model="mt").load()
        total = int(open_metrics(store, "similarity").attrs["n_occurrences"])
        return total, int(occ.sel(freq_bin="1-10")), int(occ.sel(freq_bin="2500-5000"))

    full, paper = sizes("bible-full"), sizes("bible-paper")
    first = open_metrics(REPO / "results" / "bible-paper" / "metrics.zarr", "similarity").attrs["config"]
    text = _prose("docs", "metrics.md")
    assert (
        f"on the test books ({full[0]:,} pieces, ranks from the training split) {full[1]:,} for ranks 1-10 "
        f"and {full[2]:,} for 2500-5000; on the first {first['similarity']['sentences']:,} sentences of the "
        f"whole corpus {paper[1]:,} and "
        f"{paper[2]:,}."
    ) in text


def test_docs_metrics_neighbour_bounds_quote_both_stores():
    """docs/metrics.md's chance and ceiling of the left / right rates at the default cap of 1,000
    per type, the occurrences they are averaged over, and the share of left queries that have no
    left token (1 - left queries / same-token queries), from both stores."""
    from evolution.metrics.results import open_metrics

    def read(run):
        store = REPO / "results" / run / "metrics.zarr"
        ds = open_metrics(store, "neighbors").load().sel(model="mt")
        v = ds.value.sel(layer=0)
        bounds = {
            m: float(v.sel(measure=m))
            for m in ("same_left_chance", "same_right_chance", "same_left_ceiling", "same_right_ceiling")
        }
        q = ds.queries
        cfg = ds.attrs["config"]
        top, cap = cfg["neighbors"]["top"] or cfg["tokens"]["top"], cfg["neighbors"]["max_per_type"]
        # every occurrence of the same types: MI's rows where the neighbour types are the tokens selection
        whole = (
            int(open_metrics(store, "mi").n.sel(model="mt", target="input")[0]) if top == cfg["tokens"]["top"] else None
        )
        n = int(q.sel(measure="same_token"))
        return bounds, n, 1 - int(q.sel(measure="same_left")) / n, top, cap, whole

    (paper, n_paper, gap_paper, top_paper, cap_paper, _), (full, n_full, gap_full, top_full, cap_full, whole) = (
        read("bible-paper"),
        read("bible-full"),
    )
    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = {_cells(line)[0]: _cells(line)[1:] for line in text.splitlines() if line.startswith("| bible-")}

    def pair(b, what):
        return f"{b[f'same_left_{what}']:.3f} / {b[f'same_right_{what}']:.3f}"

    at_cap, chance, ceiling = rows[f"bible-paper, cap {cap_paper:,} (`configs/bible-paper.yaml`)"]
    assert n_paper == top_paper * cap_paper and at_cap == f"{top_paper} of {top_paper}"
    assert (chance, ceiling) == (pair(paper, "chance"), pair(paper, "ceiling"))
    at_cap, chance, ceiling = rows[f"bible-full, cap {cap_full:,} (`configs/bible-full.yaml`)"]
    assert at_cap.endswith(f"of {top_full} ({n_full:,} of their {whole:,} occurrences)") and n_full < whole
    assert (chance, ceiling) == (pair(full, "chance"), pair(full, "ceiling"))
    prose = " ".join(text.split())
    assert f"there it takes {n_full:,} of the {whole:,} occurrences of its {top_full} types" in prose
    assert f"({gap_full:.1%} of the left queries on bible-full, {gap_paper:.1%} on bible-paper)" in prose
    assert f"limits the ceiling ({full['same_left_ceiling']:.2f})" in prose


def test_each_committed_resolved_config_is_the_one_its_store_was_computed_with():
    """results/<run>/config.resolved.yaml ("every setting of the analysis run, defaults filled in")
    holds the metrics settings that the committed report's provenance records (the store's own
    config attribute); only ``reuse``, a source of cached results, is not recorded there, and a
    setting that a later version added (with its default) is not in an older store's record."""
    import json

    import yaml

    def differ(resolved, stored, where=""):
        if isinstance(stored, dict) and isinstance(resolved, dict):
            return [d for k in stored for d in differ(resolved.get(k, "<missing>"), stored[k], f"{where}.{k}")]
        return [] if resolved == stored else [where]

    runs = [
        d
        for d in sorted((REPO / "results").iterdir())
        if (d / "config.resolved.yaml").is_file() and (d / "report" / "provenance.json").is_file()
    ]
    assert len(runs) >= 4
    for d in runs:
        resolved = yaml.safe_load((d / "config.resolved.yaml").read_text(encoding="utf-8"))["metrics"]
        stored = json.loads((d / "report" / "provenance.json").read_text(encoding="utf-8"))["config"]
        resolved.pop("reuse", None), stored.pop("reuse", None)
        assert not differ(resolved, stored), (d.name, differ(resolved, stored))


def test_docs_metrics_replication_paragraphs_quote_the_stores():
    """docs/metrics.md's sentences around the bible-full scorecard and on the paper-sized set: the
    models and analysed text (provenance, similarity), MI's restarts, k, occurrences and share of
    H(X), bible-paper's MI selection, its losses by type count (mi_types), the same-token ceiling
    and the annotated types (the store's note); and the similarity route's largest difference
    (results/scale/similarity.json)."""
    import json

    from evolution.metrics.results import open_metrics

    text = _prose("docs", "metrics.md")
    scale = json.loads((REPO / "results" / "scale" / "similarity.json").read_text())
    assert f"`benchmarks/similarity.py`: {scale['max_difference']:.2e} on the default run's text" in text
    full = REPO / "results" / "bible-full"
    corpus = json.loads((full / "report" / "provenance.json").read_text())["corpus"]
    mi = open_metrics(full / "metrics.zarr", "mi").load()
    pieces = int(open_metrics(full / "metrics.zarr", "similarity").attrs["n_occurrences"])
    assert (
        f"the {mi.sizes['model']} well-trained models (MT, LM, MLM, a second seed of each, MT and LM with 10% "
        f"input token dropout), analysed on the {corpus['splits']['test']['pairs']:,} held-out test verses "
        f"({pieces:,} pieces) and {corpus['annotated']['n_sentences']:,} UD EWT test sentences"
    ) in text
    cfg = mi.attrs["config"]
    frac = mi.mi_fraction.sel(target="input", model=["mt", "mt-seed1", "lm", "lm-seed1"])
    assert float(frac.min()) >= 0.95 and f"over {mi.sizes['restart']} k-means restarts" in text
    (k,) = {int(x) for x in mi.k.sel(target="input").values.ravel()}
    assert k == cfg["mi"]["k"]
    assert (
        f"MI(input) stays within 5% of H(X) for MT and LM at this analysis-set size (k = {k} for "
        f"{int(mi.n.sel(model='mt', target='input')[0]):,} occurrences of {cfg['tokens']['top']} types)"
    ) in text
    paper = REPO / "results" / "bible-paper" / "metrics.zarr"
    pm = open_metrics(paper, "mi").load()
    assert (
        f"MI over the {pm.attrs['config']['tokens']['top']:,} most frequent types, "
        f"{int(pm.n.sel(model='mt', target='input')[0]):,} occurrences, k = {pm.attrs['config']['mi']['k']:,}, "
        f"H(X) = {float(pm.entropy.sel(model='mt', target='input')):.2f} nats"
    ) in text
    types = open_metrics(paper, "mi_types").load().sel(target="input")

    def loss(m, t):
        x = types.mi_corrected.sel(model=m, types=t)
        return f"{float(1 - x.sel(layer=6) / x.sel(layer=0)):.1%}"

    low, high = int(types.types.min()), int(types.types.max())
    assert (
        f"(100 -> 1,000: the LM's loss from layer 0 grows from {loss('lm', low)} to {loss('lm', high)}, the MT's "
        f"from {loss('mt', low)} to {loss('mt', high)})"
    ) in text and (low, high) == (100, 1000)
    same = open_metrics(paper, "neighbors").load().value.sel(measure="same_token", layer=6)
    assert (
        f"MT and MLM both sit at the same-token ceiling, {float(same.sel(model='mt')):.3f} and "
        f"{float(same.sel(model='mlm')):.3f})"
    ) in text
    n, count = re.search(
        r"only (\d+) token types have >= (\d+) occurrences in the annotated text", pm.attrs["notes"][0]
    ).groups()
    assert f"Syntax on the UD text ({n} types with >= {count} occurrences;" in text


def test_the_minilm_paper_split_section_quotes_its_artefacts():
    """results/minilm-paper/README.md's section on the split change: the stage's seconds and peak
    from split/scale.json, the largest unit and its share, and the simulated table from
    split/scaling.json (recomputed here from split/profile.jsonl by evolution.schedule)."""
    import json

    from evolution.schedule import list_schedule, longest_first, lower_bound

    root = REPO / "results" / "minilm-paper" / "split"
    text = (REPO / "results" / "minilm-paper" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The change by frequency split by bin") :]
    metrics = next(iter(json.loads((root / "scale.json").read_text()).values()))["stages"]["metrics"]
    assert f"took {metrics['seconds']:,.1f} s with a peak of {metrics['peak_rss_gib']:.2f} GiB" in section
    scaling = json.loads((root / "scaling.json").read_text())
    units = [json.loads(line) for line in (root / "profile.jsonl").read_text().splitlines() if line.strip()]
    walls = [u["wall"] for u in sorted(units, key=lambda u: u["start"])]
    flat = " ".join(section.split())
    assert f"{scaling['largest_unit_s']:,.1f} of {scaling['summed_unit_s']:,.1f} s" in flat
    assert f"`{scaling['largest_rss_unit']}`, {scaling['largest_rss_gib']:.2f}" in flat
    for row in scaling["simulated"]:
        w = row["workers"]
        cells = [f"{list_schedule(walls, workers=w):,.1f}", f"{longest_first(walls, workers=w):,.1f}"]
        cells.append(f"{lower_bound(walls, workers=w):,.1f}")
        assert f"| {w} | {' | '.join(cells)} |" in section, w


def _metrics_plan():
    """benchmarks/metrics_plan.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("metrics_plan", REPO / "benchmarks" / "metrics_plan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_minilm_paper_parts_section_quotes_its_artefacts():
    """results/minilm-paper/README.md's section on the neighbour split and the metrics plan: the
    stage's seconds and peak (parts/scale.json), the largest unit, the simulated table recomputed
    from parts/profile.jsonl, the plan table recomputed from parts/plan.json with the library's
    efficiencies, and the projection onto real shapes (benchmarks/metrics_plan.py)."""
    import json

    from evolution.analyses.cost import EFFICIENCY
    from evolution.schedule import list_schedule, longest_first, lower_bound

    bench = _metrics_plan()
    root = REPO / "results" / "minilm-paper" / "parts"
    text = (REPO / "results" / "minilm-paper" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The neighbour search split by queries") :]
    flat = " ".join(section.split())
    metrics = next(iter(json.loads((root / "scale.json").read_text()).values()))["stages"]["metrics"]
    assert f"took {metrics['seconds']:,.1f} s with a peak of {metrics['peak_rss_gib']:.2f} GiB" in flat
    units = [json.loads(line) for line in (root / "profile.jsonl").read_text().splitlines() if line.strip()]
    units.sort(key=lambda u: u["start"])
    walls = [u["wall"] for u in units]
    top = max(units, key=lambda u: u["wall"])
    assert f"`{top['analysis']} {top['unit']}`, {top['wall']:,.1f} of {sum(walls):,.1f} s" in flat
    assert f"{100 * top['wall'] / sum(walls):.1f}%" in flat
    for w in (1, 2, 8, 32):
        cells = [f(walls, workers=w) for f in (list_schedule, longest_first, lower_bound)]
        assert f"| {w} | {' | '.join(f'{c:,.1f}' for c in cells)} |" in section, w
    plan = json.loads((root / "plan.json").read_text())
    out = bench.compare(plan, units, efficiency=EFFICIENCY)
    names = {
        "neighbors": "neighbours",
        "mi": "MI",
        "change": "change by frequency",
        "similarity": "similarity estimate",
    }
    for family, label in names.items():
        f = out["families"][family]
        row = f"| {label} | {f['units']} | {f['planned_s']:,.0f} | {f['measured_s']:,.0f} | {f['ratio']:.2f} |"
        assert row in section, row
        assert 1 / 1.5 < f["ratio"] < 1.5  # the bound on planned seconds
    s = out["stage"]
    assert f"| stage on 2 workers | | {s['planned_s']:,.0f} | {s['measured_s']:,.0f} | {s['ratio']:.2f} |" in section
    for shape, label in (
        ("bert-base", "BERT-base, GPT-2 small"),
        ("pythia-410m", "Pythia-410M"),
        ("pythia-1b", "Pythia-1B"),
    ):
        layers, d = bench.SHAPES[shape]
        fam = bench.project(plan, layers=7, d=384, to_layers=layers, to_d=d, efficiency=EFFICIENCY)
        cells = " | ".join(f"{fam[f]:,.0f}" for f in ("neighbors", "mi", "similarity", "change"))
        assert f"| {label} | {layers} x {d} | {cells} | {sum(fam.values()):,.0f} |" in section, shape


def test_the_minilm_paper_memory_section_quotes_its_artefacts():
    """results/minilm-paper/README.md's memory section: the stage's seconds and peak under 8 GiB
    (memory/scale.json), the worker RSS per family (memory/profile.jsonl), each unit's held memory
    against its plan with its result equal to the run's (memory/unit_memory.json), the plan's
    seconds and the memory projected onto real shapes, recomputed from memory/plan_memory.json and
    the profile (benchmarks/metrics_plan.py), and the default config's units (docs/decisions.md
    #30, results/scale/plan/unit_memory.json)."""
    import json

    from evolution.analyses.runner import read_profile

    bench = _metrics_plan()
    root = REPO / "results" / "minilm-paper" / "memory"
    text = (REPO / "results" / "minilm-paper" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Memory under 8 GiB") :]
    flat = " ".join(section.split())
    metrics = next(iter(json.loads((root / "scale.json").read_text()).values()))["stages"]["metrics"]
    assert f"took {metrics['seconds']:,.1f} s with a peak of **{metrics['peak_rss_gib']:.2f} GiB**" in flat
    assert metrics["peak_rss_gib"] < 8
    profile = read_profile(root / "profile.jsonl")
    rss = {}
    for r in profile:
        family = "change" if "change-" in r["unit"] else r["analysis"]
        rss.setdefault(family, []).append(r["rss_peak"] / 2**30)
    assert f"| similarity estimate | 5.99 GiB | {max(rss['similarity']):.2f} GiB |" in section
    assert f"| MI, one layer | 4.54-5.01 GiB | {min(rss['mi']):.2f}-{max(rss['mi']):.2f} GiB |" in section
    assert f"| change by frequency, one bin | up to 5.39 GiB | up to {max(rss['change']):.2f} GiB |" in section
    units = json.loads((root / "unit_memory.json").read_text())["units"]
    for u in units:
        assert u["equal"], u["unit"]
        assert 1 / 1.25 < u["held_over_planned"] < 1.25, u  # the plan within 25% of what a unit holds
        row = f"| `{u['unit']}` | {u['held_gib']:.2f} | {u['planned_gib']:.2f} | {u['held_over_planned']:.2f} | yes |"
        assert row in section, row
    plan = json.loads((root / "plan_memory.json").read_text())
    out = bench.compare(plan, profile)
    for family, label in (("neighbors", "neighbours"), ("mi", "MI"), ("change", "change by frequency")):
        f = out["families"][family]
        assert (
            f"| {label} | {f['units']} | {f['planned_s']:,.0f} | {f['measured_s']:,.0f} | {f['ratio']:.2f} |" in section
        )
    for shape, label in (
        ("bert-base", "BERT-base, GPT-2 small"),
        ("pythia-410m", "Pythia-410M"),
        ("pythia-1b", "Pythia-1B"),
    ):
        layers, d = bench.SHAPES[shape]
        mem = bench.project_memory(plan, layers=7, d=384, to_layers=layers, to_d=d)
        cells = " | ".join(f"{mem[f] / 2**30:.2f}" for f in ("neighbors", "mi", "similarity", "change"))
        assert f"| {label} | {layers} x {d} | {cells} |" in section, shape
    default = json.loads((REPO / "results" / "scale" / "plan" / "unit_memory.json").read_text())["units"]
    ratios = [u["held_over_planned"] for u in default]
    decisions = " ".join((REPO / "docs" / "decisions.md").read_text(encoding="utf-8").split())
    assert f"the largest unit of each family) {min(ratios):.2f}-{max(ratios):.2f}." in decisions
    assert all(u["equal"] for u in default)


def test_the_real_shapes_metrics_section_quotes_its_artefacts():
    """benchmarks/README.md's metrics plan on real shapes: each row recomputed from the run's
    plan and the replan against the same profile (benchmarks/metrics_plan.py), the replanned
    MI and stage within the issue's factor of 1.5, the unit memory within 25% of its plan with
    results equal to the run's, and the rates the text quotes from the two plans."""
    import json

    bench = _metrics_plan()
    root = REPO / "results" / "shapes" / "metrics"
    text = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### The metrics stage's plan on real shapes") :]
    section = section[: section.index("On 2 CPU cores with 24 GiB")]
    flat = " ".join(section.split())
    profile = [json.loads(line) for line in (root / "profile.jsonl").read_text().splitlines() if line.strip()]
    run = bench.compare(json.loads((root / "plan.json").read_text()), profile)
    replan = bench.compare(json.loads((root / "replan" / "plan.json").read_text()), profile)
    for label, ran, re_ in (
        ("neighbours", run["families"]["neighbors"], replan["families"]["neighbors"]),
        ("MI (flat k-means, k = 100)", run["families"]["mi"], replan["families"]["mi_flat"]),
    ):
        assert ran["measured_s"] == re_["measured_s"] and ran["units"] == re_["units"]
        row = (
            f"| {label} | {ran['units']} | {ran['measured_s']:,.0f} | {ran['planned_s']:,.0f} | {ran['ratio']:.2f} "
            f"| {re_['planned_s']:,.0f} | {re_['ratio']:.2f} |"
        )
        assert row in section, row
        assert 1 / 1.5 < re_["ratio"] < 1.5
    a, b = run["stage"], replan["stage"]
    heads = run["families"]["heads (not modelled)"]["measured_s"]
    assert (
        f"| the stage on 2 workers (heads at their measured {heads:,.0f} s) | | {a['measured_s']:,.0f} | "
        f"{a['planned_s']:,.0f} | {a['ratio']:.2f} | {b['planned_s']:,.0f} | {b['ratio']:.2f} |"
    ) in section
    assert 1 / 1.5 < b["ratio"] < 1.5
    assert f"{json.loads((root / 'plan.json').read_text())['rate'] / 1e9:.1f} G float64" in flat
    after = json.loads((root / "rate-after-start" / "plan.json").read_text())["rate"]
    assert f"{after / 1e9:.1f} G/s (`rate-after-start/plan.json`" in flat
    for u in json.loads((root / "unit_memory.json").read_text())["units"]:
        assert u["equal"] and 1 / 1.25 < u["held_over_planned"] < 1.25, u
        label = "MI" if u["family"].startswith("mi") else "neighbours"
        assert f"{label} {u['held_over_planned']:.2f}" in flat, u


def test_the_one_and_two_worker_runs_quote_their_artefacts():
    """benchmarks/README.md's section on the 1- and 2-worker runs: each run's measured wall against
    the other run's units list-scheduled on its workers (recomputed here from the profiles by
    evolution.schedule, in the order each run started its units), within 20%; and each family's
    measured / planned from the runs' plan_check.json, recomputed from replan.json and the
    profiles by benchmarks/metrics_plan.py."""
    import json

    from evolution.schedule import list_schedule

    root = REPO / "results" / "scale" / "workers"
    text = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### The metrics stage on 1 and 2 workers") :]
    section = section[: section.index("\nOn 2 CPU cores")]
    runs = {}
    for w in (1, 2):
        units = [json.loads(line) for line in (root / str(w) / "profile.jsonl").read_text().splitlines() if line]
        units.sort(key=lambda u: u["start"])
        runs[w] = {
            "walls": [u["wall"] for u in units],
            "measured": max(u["end"] for u in units) - min(u["start"] for u in units),
            "workers": len({u["worker"] for u in units}),
        }
        assert runs[w]["workers"] == w and len(units) == 140
    for w, other in ((1, 2), (2, 1)):
        simulated = list_schedule(runs[other]["walls"], workers=w)
        ratio = runs[w]["measured"] / simulated
        assert 0.8 <= ratio <= 1.2, (w, ratio)
        row = f"| {runs[w]['measured']:,.1f} | {simulated:,.1f} (the {other}-worker run's) | {ratio:.3f} |"
        assert row in section, row
    bench = _metrics_plan()
    names = {
        "mi_flat": "MI (flat k-means)",
        "mlm_output": "MLM output MI",
        "neighbors": "neighbours",
        "change": "change by frequency",
        "similarity": "similarity estimate (one unit)",
    }
    checks = {}
    for w in (1, 2):
        plan = json.loads((root / str(w) / "replan.json").read_text())
        profile = [json.loads(line) for line in (root / str(w) / "profile.jsonl").read_text().splitlines() if line]
        checks[w] = bench.compare(plan, profile)
        stored = json.loads((root / str(w) / "plan_check.json").read_text())
        assert abs(stored["stage"]["ratio"] - checks[w]["stage"]["ratio"]) < 1e-9
    for family, name in names.items():
        cells = [f"{checks[w]['families'][family]['ratio']:.2f}" for w in (1, 2)]
        assert f"| {name} | {cells[0]} | {cells[1]} |" in section, family
    cells = [f"{checks[w]['stage']['ratio']:.2f}" for w in (1, 2)]
    assert f"| **the stage** | **{cells[0]}** | **{cells[1]}** |" in section


def test_the_rows_needed_page_quotes_its_comparison():
    """results/rows/README.md: every group equal, the count of groups and variables, and each
    model's rows and bytes, from results/rows/compare.json; the written bytes equal the plan's."""
    import json

    root = REPO / "results" / "rows"
    text = (root / "README.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    data = json.loads((root / "compare.json").read_text())
    assert all(not g["differ"] for g in data["groups"].values())
    n = sum(g["variables"] for g in data["groups"].values())
    assert f"{n} variables in the {len(data['groups'])} groups" in flat
    for g in data["groups"]:
        assert f"`{g}`" in flat, g
    for name, m in data["models"].items():
        assert m["written_bytes"] == m["planned_bytes"]
        row = (
            f"| {name} | {m['tokens']:,} | {m['kept_rows']:,} | {100 * m['kept_share']:.1f}% | "
            f"{m['planned_bytes']:,} | {m['written_bytes']:,} | {m['written_over_full']:.4f} |"
        )
        assert row in text, row
        assert f"The full store holds {m['full_bytes']:,} bytes per model" in flat
        assert m["states_equal"] is True


def test_the_larger_shape_point_quotes_its_artefact():
    """benchmarks/README.md's larger point of the extraction's plan: tokens, bytes and seconds
    planned and written from results/shapes/larger.json, the seconds within 25% of the plan."""
    import json

    run = json.loads((REPO / "results" / "shapes" / "larger.json").read_text())["configs/shapes-large.yaml"]
    (m,) = run["models"]
    flat = " ".join((REPO / "benchmarks" / "README.md").read_text(encoding="utf-8").split())
    assert 0.75 <= m["seconds_ratio"] <= 1.25 and abs(m["bytes_ratio"] - 1) < 0.05
    assert f"{m['tokens']:,} tokens" in flat
    assert f"planned {m['planned_bytes'] / 1e9:.3f} GB and {m['planned_seconds']:.0f} s" in flat
    assert f"wrote {m['written_bytes'] / 1e9:.3f} GB ({m['bytes_ratio']:.3f}) in {m['measured_seconds']:.0f} s" in flat
    assert f"({m['seconds_ratio']:.2f} of the plan" in flat
    assert f"{m['million_tokens_seconds'] / 3600:.2f} hours" in flat
