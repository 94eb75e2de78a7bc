"""Extraction: task planning, and stored arrays against direct one-by-one forward passes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from conftest import SENTENCES, write_config

from evolution.extract_plan import batches, plan_tasks
from evolution.models import load_adapter
from evolution.store import open_attention, open_representations
from evolution.tokens import build_token_table
from pipelines.run import run


def test_batches_cover_everything_within_budget():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, size=200).tolist()
    out = batches(lengths, max_batch_tokens=100)
    assert sorted(i for b in out for i in b) == list(range(200))
    for b in out:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 100
    assert batches(lengths, max_batch_tokens=100) == out  # deterministic


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for p in _partitions(rest):
        for k in range(len(p)):
            yield p[:k] + [[first] + p[k]] + p[k + 1 :]
        yield [[first]] + p


def test_batches_least_cost_against_every_partition():
    """The dynamic programme over the length order reaches the least cost (padded tokens plus
    a fixed cost per batch) of all feasible groupings, found by enumerating every partition;
    filling batches greedily to the budget does not."""

    def cost(lengths, parts, overhead):
        return sum(overhead + len(b) * max(lengths[i] for i in b) for b in parts)

    def feasible(lengths, parts, budget):
        return all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget for b in parts)

    rng = np.random.default_rng(0)
    beaten = 0
    for _ in range(150):
        n = int(rng.integers(1, 8))
        lengths = rng.integers(1, 12, size=n).tolist()
        budget, overhead = int(rng.integers(4, 40)), float(rng.choice([0, 1, 3, 8]))
        least = min(cost(lengths, p, overhead) for p in _partitions(list(range(n))) if feasible(lengths, p, budget))
        out = batches(lengths, max_batch_tokens=budget, overhead_tokens=overhead)
        assert sorted(i for b in out for i in b) == list(range(n)) and feasible(lengths, out, budget)
        assert cost(lengths, out, overhead) == pytest.approx(least)
        # the greedy fill (start a batch only when the next sentence does not fit)
        greedy, width = [], 0
        for i in sorted(range(n), key=lambda i: (-lengths[i], i)):
            if greedy and max(width, lengths[i]) * (len(greedy[-1]) + 1) <= budget:
                greedy[-1].append(i)
                width = max(width, lengths[i])
            else:
                greedy.append([i])
                width = lengths[i]
        beaten += cost(lengths, greedy, overhead) > least + 1e-9
    assert beaten > 10  # the cases are not all ones where filling to the budget is already best


@pytest.mark.parametrize("task_chunks", [1, 3])
def test_plan_tasks_partition_tokens(model_specs, task_chunks):
    a = load_adapter(model_specs["bert"])
    table = build_token_table(SENTENCES, a)
    tasks = plan_tasks(table, chunk_tokens=7, task_chunks=task_chunks, attention_sentences=10)
    covered = np.zeros(table.n_tokens, dtype=int)
    for t in tasks:
        assert t.start % 7 == 0 and (t.stop % 7 == 0 or t.stop == table.n_tokens)  # whole chunks
        assert t.stop - t.start <= 7 * task_chunks
        covered[t.start : t.stop] += 1
        for s in t.sentences:  # every listed sentence overlaps the task's range
            assert table.offsets[s] < t.stop and table.offsets[s + 1] > t.start
    assert (covered == 1).all()
    owners = sorted(s for t in tasks for s in t.attention_rows)
    assert owners == list(range(10))  # each attention row written by exactly one task


def _reference(adapter, sentences):
    """Hidden states (content tokens only) and attention, one sentence at a time."""
    hidden, attention = [], []
    for s in sentences:
        ids = adapter.tokenize(s).ids
        h, a = adapter.forward([adapter.build_input(ids)], attention=True)
        hidden.append(h[:, 0, adapter.content_offset : adapter.content_offset + len(ids)])
        attention.append(a[:, 0])
    return np.concatenate(hidden, axis=1), attention


@pytest.mark.parametrize(
    "names", [["bert", "gpt2"], ["marian", "t5"], ["translation", "language_modeling", "masked_lm"]]
)
def test_pipeline_matches_one_by_one_forward(tmp_path, corpus_file, model_specs, names):
    cfg = write_config(
        tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs[n] for n in names], workdir=tmp_path / "w"
    )
    run(cfg, progress=False)
    store = str(tmp_path / "w" / "reps.zarr")
    for name in names:
        ds = open_representations(store, name)
        assert ds.hidden.dims == ("layer", "token", "feature")
        adapter = load_adapter(model_specs[name])
        ref_h, ref_a = _reference(adapter, SENTENCES)
        np.testing.assert_allclose(ds.hidden.values, ref_h, atol=1e-5)
        assert ds.attrs["objective"] == adapter.objective and ds.attrs["versions"]["torch"]
        att = open_attention(store, name)
        assert att.attention.sizes["sentence"] == 5
        for k in range(5):
            t = int(att.length[k])
            np.testing.assert_allclose(att.attention.values[k, :, :, :t, :t], ref_a[k], atol=2e-3)  # float16
            assert np.isnan(att.attention.values[k, :, :, t:, :]).all()
        assert ("summed_norm" in att) == adapter.supports_norms  # gpt2, marian, t5: maps only
        if adapter.supports_norms:  # the norms of each stored sentence, as forward_norms gives them alone
            for k in range(5):
                t = int(att.length[k])
                _, _, norms = adapter.forward_norms([att.input_id.values[k, :t].tolist()])
                np.testing.assert_allclose(
                    att.value_norm.values[k, :, :, :t], norms["value_norm"][:, 0], rtol=2e-3, atol=2e-3
                )
                for name in ("weighted_norm", "summed_norm"):
                    np.testing.assert_allclose(
                        att[name].values[k, ..., :t, :t], norms[name][:, 0], rtol=2e-3, atol=2e-3
                    )
                    assert np.isnan(att[name].values[k, ..., t:, :]).all()


def test_float16_storage_and_plain_xarray(tmp_path, corpus_file, model_specs):
    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=[model_specs["bert"]],
        workdir=tmp_path / "w",
        extra="  dtype: float16",
    )
    run(cfg, progress=False)
    ds = xr.open_zarr(tmp_path / "w" / "reps.zarr", group="bert", consolidated=False)
    assert ds.hidden.dtype == np.float16
    ref, _ = _reference(load_adapter(model_specs["bert"]), SENTENCES)
    np.testing.assert_allclose(ds.hidden.values.astype(np.float32), ref, atol=2e-2, rtol=1e-2)
    # selections researchers make: all occurrences of one token at one layer
    ds = open_representations(str(tmp_path / "w" / "reps.zarr"), "bert")
    the = ds.hidden.sel(layer=1).where(ds.token_str == "the", drop=True)
    assert the.sizes["token"] == sum(s.split().count("the") for s in SENTENCES)


@pytest.mark.slow
def test_local_cluster_equals_single_process(tmp_path, corpus_file, model_specs):
    models = [model_specs["bert"], model_specs["translation"]]
    single = write_config(tmp_path / "a.yaml", corpus=corpus_file, models=models, workdir=tmp_path / "a")
    cluster = write_config(
        tmp_path / "b.yaml",
        corpus=corpus_file,
        models=models,
        workdir=tmp_path / "b",
        cluster="{kind: local, n_workers: 2}",
    )
    run(single, progress=False)
    run(cluster, progress=False)
    for m in ("bert", "translation"):
        a = open_representations(str(tmp_path / "a" / "reps.zarr"), m)
        b = open_representations(str(tmp_path / "b" / "reps.zarr"), m)
        np.testing.assert_array_equal(a.hidden.values, b.hidden.values)
        np.testing.assert_array_equal(
            open_attention(str(tmp_path / "a" / "reps.zarr"), m).attention.values,
            open_attention(str(tmp_path / "b" / "reps.zarr"), m).attention.values,
        )


def test_float16_states_are_the_float32_states_rounded(tmp_path, corpus_file, model_specs):
    """The task buffer holds the stored dtype (half a worker's buffer with float16, which the plan
    counts): the states are rounded as they are copied in, bit for bit as the float32 states
    rounded afterwards."""
    from evolution.extract_task import release_buffers, task_buffer

    stores = {}
    for dtype in ("float32", "float16"):
        cfg = write_config(
            tmp_path / f"{dtype}.yaml",
            corpus=corpus_file,
            models=[model_specs["gpt2"]],
            workdir=tmp_path / dtype,
            extra=f"  dtype: {dtype}",
        )
        run(cfg, stage="extract", progress=False)
        stores[dtype] = open_representations(str(tmp_path / dtype / "reps.zarr"), "gpt2").hidden.values
    assert stores["float16"].dtype == np.float16
    np.testing.assert_array_equal(stores["float16"], stores["float32"].astype(np.float16))
    assert task_buffer((3, 4, 5), "float16").dtype == np.float16 and task_buffer((3, 4, 5)).dtype == np.float32
    release_buffers()
