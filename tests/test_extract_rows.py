"""``extract.rows: needed`` stores only the token rows the enabled analyses read, planned from
the metrics settings and seed before the extraction. Against a full extraction of the same
config: every kept row's states and every attention map are bit for bit the same (each row
comes from the very batch that makes it in a full extraction), every analysis's numbers are
identical, the rows left out have no bytes, the plan's bytes are the kept rows' and the run
writes what it plans; a row that was not kept is refused by name."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import SENTENCES, write_config
from test_conllu import _treebank

#: a main text 3x the shared sentences (reversed and rotated copies: the same words), so that
#: the analyses' rows are a subset of it; tasks of 128 tokens cut through sentences, and a task of
#: kept rows stores chunks of 16 (row_chunk(128))
MAIN = (
    SENTENCES
    + [" ".join(s.split()[::-1]) for s in SENTENCES]
    + [" ".join(s.split()[1:] + s.split()[:1]) for s in SENTENCES]
)

METRICS = """  chunk_tokens: 128
  task_chunks: 1
metrics:
  tokens: {top: 2, min_count: 3}
  mi: {k: 4, restarts: 1, bootstrap: 10}
  neighbors: {k: 3, top: 4, max_per_type: 5, bootstrap: 10}
  similarity: {sentences: 12, min_ratio: 1, freq_bins: [1, 3, 10, 100], bootstrap: 5}
  tsne: {perplexity: 2, max_points: 6, selections: [{name: was, tokens: [was], color: position}]}
report: {views: null}"""


def _run(tmp: Path, model_specs, *, rows: bool) -> Path:
    from pipelines.run import run

    tmp.mkdir(parents=True, exist_ok=True)
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(MAIN) + "\n", encoding="utf-8")
    tb = _treebank(tmp / "tb.conllu", SENTENCES[:8])
    extra = ("  rows: needed\n" if rows else "") + METRICS
    models = [model_specs["translation"], model_specs["language_modeling"], model_specs["gpt2"]]
    cfg = write_config(tmp / "c.yaml", corpus=corpus, models=models, workdir=tmp / "w", extra=extra)
    cfg.write_text(cfg.read_text().replace(f"  path: {corpus}\n", f"  path: {corpus}\n  annotated: {tb}\n"))
    run(cfg, progress=False)
    return tmp / "w"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_specs):
    tmp = tmp_path_factory.mktemp("rows")
    return {"full": _run(tmp / "full", model_specs, rows=False), "needed": _run(tmp / "needed", model_specs, rows=True)}


MODELS = ("translation", "language_modeling", "gpt2")


def _chunk_bytes(store: Path, model: str) -> int:
    root = store / model / "hidden" / "c"
    return sum(os.path.getsize(Path(d) / f) for d, _, fs in os.walk(root) for f in fs) if root.exists() else 0


def test_the_kept_rows_are_those_the_analyses_read_and_equal_a_full_extraction(runs):
    from evolution.analyses.inputs import needed_rows, plan_model
    from evolution.config import load_config
    from evolution.store import open_attention, open_representations, stored_rows

    config = load_config(runs["needed"].parent / "c.yaml")
    for name in MODELS:
        full = open_representations(str(runs["full"] / "reps.zarr"), name)
        some = open_representations(str(runs["needed"] / "reps.zarr"), name)
        kept = stored_rows(str(runs["needed"] / "reps.zarr"), name)
        assert stored_rows(str(runs["full"] / "reps.zarr"), name) is None
        n = full.sizes["token"]
        assert kept is not None and 0 < len(kept) < 0.8 * n, (name, len(kept), n)
        assert some.sizes["token"] == n and some.hidden.dims == ("layer", "stored_token", "feature")
        np.testing.assert_array_equal(some.stored_token.values, kept)
        for c in ("sentence", "position", "token_id", "freq_rank", "upos"):  # every token's coordinates
            np.testing.assert_array_equal(some[c].values, full[c].values)
        # bit for bit the full extraction's states at the kept rows
        np.testing.assert_array_equal(some.hidden.values, full.hidden.values[:, kept])
        # the kept rows: what the plan of the metrics stage reads (made here from the full store's
        # coordinates), and the attention sentences' rows (the first 5 sentences)
        columns = {c: full[c].values for c in full.coords if full[c].dims == ("token",)}
        plan = plan_model(
            columns=columns,
            annotated_from=int(full.attrs["annotated_from"]),
            train_types=None,
            objective=full.attrs.get("objective"),
            config=config.metrics,
            seed=config.seed,
        )["plan"]
        wanted = needed_rows(plan, config=config.metrics)
        heads = np.flatnonzero(full.sentence.values < 5)
        asked = np.union1d(wanted, heads)
        assert np.isin(asked, kept).all()
        # besides them, rows that fill each task's last chunk: a task is a full extraction's (128
        # tokens), and every task but the array's last stores whole chunks of 16 rows
        per_task = np.bincount(kept // 128, minlength=-(-n // 128))
        busy = np.flatnonzero(per_task)
        assert (per_task[busy[:-1]] % 16 == 0).all(), per_task
        extra = np.bincount(np.setdiff1d(kept, asked) // 128, minlength=len(per_task))
        assert (extra < 16).all() and extra.sum() > 0
        a, b = (
            open_attention(str(runs["full"] / "reps.zarr"), name),
            open_attention(str(runs["needed"] / "reps.zarr"), name),
        )
        np.testing.assert_array_equal(a.attention.values, b.attention.values)


def test_every_analysis_gives_the_numbers_of_a_full_extraction(runs):
    from evolution.metrics.results import metrics_groups, open_metrics

    groups = metrics_groups(runs["full"] / "metrics.zarr")
    assert set(groups) == set(metrics_groups(runs["needed"] / "metrics.zarr"))
    for must in ("mi", "neighbors", "similarity", "change_pos", "tsne_was", "heads"):
        assert any(g == must or g.startswith(must) for g in groups), (must, groups)
    compared = 0
    for g in groups:
        full, some = open_metrics(runs["full"] / "metrics.zarr", g), open_metrics(runs["needed"] / "metrics.zarr", g)
        assert set(full.data_vars) == set(some.data_vars), g
        for v in full.data_vars:
            x, y = full[v].values, some[v].values
            if x.dtype.kind == "f":
                np.testing.assert_array_equal(x, y, err_msg=f"{g}/{v}")  # NaN where NaN, else ==
            else:
                assert (x == y).all(), f"{g}/{v}"
            compared += 1
    assert compared > 30


def test_the_plan_counts_the_kept_rows_and_the_run_writes_what_it_plans(runs, model_specs):
    from evolution.config import load_config
    from evolution.store import stored_rows
    from pipelines.plan import plan_extract
    from pipelines.stages import Context, CorpusStage, ExtractStage

    for which in ("full", "needed"):
        config = load_config(runs[which].parent / "c.yaml")
        ctx = Context(config=config, progress=False)
        corpus = CorpusStage().load(ctx)
        for m in config.models:
            plan = plan_extract(
                ExtractStage().spec(ctx, m),
                corpus,
                config.extract,
                name=m.name,
                workers=1,
                annotation=CorpusStage().annotation(ctx),
                select_rows=ExtractStage().select_rows(ctx, m),
            )
            written = _chunk_bytes(runs[which] / "reps.zarr", m.name)
            assert abs(written - plan.hidden_bytes) <= 0.05 * plan.hidden_bytes, (which, m.name, written, plan)
            if which == "needed":
                assert plan.stored_tokens == len(stored_rows(str(runs[which] / "reps.zarr"), m.name))
                sources = plan.row_sources  # what reads the kept rows: the first 5 sentences' maps among them
                assert {"MI", "neighbours", "t-SNE", "similarity sentences", "annotated text"} <= set(sources)
                assert sources["attention sentences"] == sum(len(s.split()) for s in MAIN[:5])
                assert max(sources.values()) <= plan.stored_tokens < sum(sources.values())
    for name in MODELS:  # bytes fall to the kept rows' chunks of 16 (the full store's: chunks of 128)
        kept = len(stored_rows(str(runs["needed"] / "reps.zarr"), name))
        n = zarr.open_array(str(runs["full"] / "reps.zarr"), path=f"{name}/hidden", mode="r").shape[1]
        ratio = _chunk_bytes(runs["needed"] / "reps.zarr", name) / _chunk_bytes(runs["full"] / "reps.zarr", name)
        assert ratio == pytest.approx(-(-kept // 16) * 16 / (-(-n // 128) * 128)), name


def test_a_row_that_was_not_kept_is_refused_by_name(runs):
    from evolution.store import read_rows, stored_rows

    store = str(runs["needed"] / "reps.zarr")
    kept = stored_rows(store, "gpt2")
    rows = kept[[3, 0, 3]]  # any order, repeats
    np.testing.assert_array_equal(
        read_rows(store, "gpt2", 2, rows), read_rows(str(runs["full"] / "reps.zarr"), "gpt2", 2, rows)
    )
    left_out = int(np.setdiff1d(np.arange(kept.max()), kept)[0])
    with pytest.raises(ValueError, match=rf"token rows \(e\.g\. {left_out}\) are not stored.*--force extract"):
        read_rows(store, "gpt2", 1, np.array([kept[0], left_out]))


def test_the_key_follows_the_metrics_settings_only_with_rows_needed(runs):
    from evolution.config import load_config
    from pipelines.stages import Context, ExtractStage

    def key(which, **metrics):
        config = load_config(runs[which].parent / "c.yaml")
        if metrics:
            config = config.model_copy(update={"metrics": config.metrics.model_copy(update=metrics)})
        return ExtractStage().model_key(Context(config=config, progress=False), config.models[0])

    assert key("full") == key("full", tsne=None)
    assert key("needed") != key("needed", tsne=None)
    assert key("needed") != key("full")
    # what the occurrence plan does not read leaves the rows, and the key, as they are
    assert key("needed") == key("needed", heads=None, influence=None, device="cpu")


@pytest.mark.parametrize("share", [0.05, 0.5])
def test_a_task_of_kept_rows_runs_the_full_extractions_batches_whole_and_once(share):
    """On a table of 300 sentences of 1-40 tokens (chunks of 128, tasks of 2 chunks, 16 rows to a
    stored chunk) and a random share of its rows: every batch a task runs is one of the full
    extraction's batches of the same task, whole and with its attention flag, and none runs twice;
    each kept row's sentence is in a batch its task runs; the rows asked for are kept, with fewer
    than 16 more per task; every task but the last stores whole chunks; the attention sentences are
    written once each, by the task holding their first row."""
    from evolution.extract_plan import batches, plan_tasks, row_chunk
    from evolution.tokens import TokenTable

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 41, size=300)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = [list(range(int(n))) for n in lengths]
    table = TokenTable(np.arange(300, dtype=np.int32), offsets, ids, {}, 0, 0)
    asked = np.sort(rng.choice(int(offsets[-1]), size=int(share * offsets[-1]), replace=False))
    inputs = [n + 2 for n in lengths]  # [CLS] ... [SEP]
    kw = dict(chunk_tokens=128, task_chunks=2, attention_sentences=12, max_batch_tokens=96)
    full = plan_tasks(table, **kw)
    tasks = plan_tasks(table, **kw, rows=asked, input_lengths=inputs)
    assert row_chunk(128) == 16
    ran = set()
    for t in tasks:
        k = int(t.rows[0] // 256)
        f = full[k]
        assert (
            (t.rows >= f.start).all()
            and (t.rows < f.stop).all()
            and t.windows == ((f.start, f.stop),) * len(t.sentences)
        )
        made = {
            tuple(f.sentences[i] for i in b): any(f.sentences[i] in f.attention_rows for i in b)
            for b in batches([inputs[s] for s in f.sentences], max_batch_tokens=96)
        }
        for idx, flag in t.batch_plan:
            run = tuple(t.sentences[i] for i in idx)
            assert made.get(run) == flag, (k, run)
            assert (k, run) not in ran
            ran.add((k, run))
        sentence_of = np.searchsorted(offsets, t.rows, side="right") - 1
        assert set(sentence_of.tolist()) <= set(t.sentences)
        assert t.attention_rows == f.attention_rows
        assert [t.sentences[i] for i in t.attention_slots] == list(t.attention_rows)
        mine = asked[(asked >= f.start) & (asked < f.stop)]
        assert np.isin(mine, t.rows).all() and len(t.rows) - len(mine) < 16
    assert [t.start for t in tasks] == list(np.cumsum([0] + [len(t.rows) for t in tasks[:-1]]))
    assert all(len(t.rows) % 16 == 0 for t in tasks[:-1])
    written = [s for t in tasks for s in t.attention_rows]
    assert written == list(range(12))
