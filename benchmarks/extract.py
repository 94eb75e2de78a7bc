"""Extraction speed and memory, as ratios against plain baselines in the same run.

    python benchmarks/extract.py [--tokens 200000] [--d-model 256] [--layers 6] [--repeat 3]

Prints:

* throughput: pipeline tokens/s (``python -m pipelines.run``'s extract stage
  on a LocalCluster of one single-threaded worker per core) divided by a bare
  loop's tokens/s (tokenised inputs, batches from a global length sort,
  ``adapter.forward`` on all cores, results discarded). Target >= 0.85.
  The headline ratio uses the extraction task graph's wall time (forward
  passes, Zarr writes, scheduling, stragglers), like the bare loop without
  tokenisation or model loading; the end-to-end ratio (stage wall time,
  tokenisation in the client and workers' model loading included) is
  printed beside it. The machine's speed drifts by several percent from
  minute to minute, so bare loop and pipeline run in alternation ``--repeat``
  times and the median ratio of those pairs is the result (every pair printed).
* peak RSS of the pipeline (synchronous scheduler, one process, so that
  ``ru_maxrss`` covers everything) at N/2 and N tokens, next to a naive loop
  that keeps every hidden state in memory and concatenates. Target: the
  pipeline's flat, the naive loop's growing with N.

The model is a randomly initialised fairseq translation encoder (speed does
not depend on the weights).

    python benchmarks/extract.py --heads [--sentences 1000]

measures what the attention-head analyses add per sentence, as ratios against
extracting hidden states alone in the same run: the forward pass with
attention maps, with maps and the Kobayashi norms (``forward_norms``), and
the per-head statistics of one sentence's maps (``head_sums``, word-level
maps and dependency hits).

    python benchmarks/extract.py --batch-cost

fits the time of one forward pass (one thread) as ``c0 + c1 * B * T + c2 * B * T**2``
over batch shapes and prints ``c0 / c1``, the fixed cost of a pass in tokens
(``evolution.extract_plan.BATCH_OVERHEAD_TOKENS``), and

    python benchmarks/extract.py --worker-profiler

runs the single-threaded bare loop inside a one-worker LocalCluster, with
distributed's statistical profiler on (distributed's default) and off (what
``pipelines/cluster.py`` sets), and prints the CPU the worker's other threads
used meanwhile, as a share of the loop's own CPU.

With ``--discard-writes`` the pipeline's workers skip storing ``hidden``
(``benchmarks/discard_hidden_writes.py``, a worker preload): everything else
of the task graph runs, so the ratio shows what the graph costs apart from
the bytes it stores.

    python benchmarks/extract.py --write-cost

writes as many bytes as extraction stores for ``--tokens`` tokens (float32
``(layers + 1) x tokens x d``) as 4 MiB files with plain ``os.write``, no Zarr,
and prints the wall and CPU seconds (user, system) next to the CPU seconds of
the bare forward loop over as many tokens: what storing the states costs on
the machine it runs on, whatever writes them.

    python benchmarks/extract.py --padding

the cost (padded tokens plus that overhead per batch) of extraction's batches
over the unpadded tokens, for a global length sort and within tasks of 8k-32k
tokens, with batches filled to the budget and with ``evolution.extract_plan.batches``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: where the models run, in the bare loops and the pipeline alike (``--device``; extract.device)
DEVICE = "cpu"


def make_corpus(path: Path, n_tokens: int, words: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    lines, total = [], 0
    while total < n_tokens:
        n = int(rng.integers(8, 60))
        lines.append(" ".join(rng.choice(words, n)))
        total += n
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_config(
    path: Path, *, corpus: Path, model: Path, data: Path, workdir: Path, cluster: str, task_chunks: int = 4
) -> Path:
    path.write_text(
        f"""workdir: {workdir}
cluster: {cluster}
corpus: {{path: {corpus}}}
extract: {{chunk_tokens: 4096, task_chunks: {task_chunks}, device: {DEVICE}}}
models:
  - {{name: mt, kind: fairseq, path: {model}, data: {data}}}
""",
        encoding="utf-8",
    )
    return path


def bare_loop(model: Path, data: Path, corpus: Path, *, threads: int, keep: bool, max_batch_tokens: int = 4096) -> dict:
    """Forward passes only (keep=False), or keep-everything-in-memory (keep=True)."""
    import torch

    from evolution.extract_plan import batches
    from evolution.models import load_adapter

    torch.set_num_threads(threads)
    adapter = load_adapter({"kind": "fairseq", "path": str(model), "data": str(data), "device": DEVICE})
    sentences = corpus.read_text(encoding="utf-8").splitlines()
    inputs = [adapter.build_input(adapter.tokenize(s).ids) for s in sentences]
    n_specials = len(adapter.prefix) + len(adapter.suffix)
    off = adapter.content_offset
    n_tokens = sum(len(x) - n_specials for x in inputs)
    kept = []
    t0 = time.perf_counter()
    for batch in batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens):
        hidden, _ = adapter.forward([inputs[i] for i in batch])
        if keep:
            for b, i in enumerate(batch):
                kept.append(hidden[:, b, off : len(inputs[i]) - n_specials + off].copy())
    if keep:
        np.concatenate(kept, axis=1)
    seconds = time.perf_counter() - t0
    return {
        "tokens": n_tokens,
        "seconds": seconds,
        "tokens_per_s": n_tokens / seconds,
        "max_batch_tokens": max_batch_tokens,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def pipeline(config: Path, *, discard_writes: bool = False) -> dict:
    import dask
    import xarray as xr

    from pipelines.run import run
    from pipelines.stages import STAGES

    preload = [str(REPO / "benchmarks" / "discard_hidden_writes.py")] if discard_writes else []
    t0 = time.perf_counter()
    with dask.config.set({"distributed.worker.preload": preload}):
        ctx = run(config, progress=False, stage="extract")
    seconds = time.perf_counter() - t0
    n = xr.open_zarr(STAGES["extract"].store(ctx), group="mt", consolidated=False).sizes["token"]
    stats = ctx.timings["extract.mt"]
    return {
        "tokens": n,
        "seconds": seconds,
        "tokens_per_s": n / seconds,
        "graph_tokens_per_s": n / stats["seconds"],
        "stage_tokens_per_s": n / stats["stage_seconds"],
        "timings": stats,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def heads_cost(model: Path, data: Path, corpus: Path, *, threads: int, max_batch_tokens: int = 1024) -> dict:
    """Seconds per sentence of: hidden states only, + attention maps, + Kobayashi norms, and the
    per-head statistics of the maps (computed on the maps of the attention pass)."""
    import torch

    from evolution.extract_plan import batches
    from evolution.metrics.heads import dependency_hits, head_sums, word_attention, word_units
    from evolution.models import load_adapter

    torch.set_num_threads(threads)
    adapter = load_adapter({"kind": "fairseq", "path": str(model), "data": str(data), "device": DEVICE})
    sentences = corpus.read_text(encoding="utf-8").splitlines()
    toks = [adapter.tokenize(s) for s in sentences]
    inputs = [adapter.build_input(t.ids) for t in toks]
    plan = batches([len(x) for x in inputs], max_batch_tokens=max_batch_tokens)
    out, maps = {}, []
    for x in inputs[:8]:  # warm-up: the first passes allocate
        adapter.forward([x]), adapter.forward_norms([x])
    for mode in ("hidden", "attention", "norms", "hidden"):  # hidden twice: the baseline bracketing the others
        t0 = time.perf_counter()
        for batch in plan:
            xs = [inputs[i] for i in batch]
            if mode == "hidden":
                adapter.forward(xs)
            elif mode == "attention":
                _, att = adapter.forward(xs, attention=True)
                if len(maps) < 200:
                    maps += [(att[:, b, :, : len(inputs[i]), : len(inputs[i])], toks[i]) for b, i in enumerate(batch)]
            else:
                adapter.forward_norms(xs)
        out[mode] = min(out.get(mode, np.inf), (time.perf_counter() - t0) / len(inputs))
    t0 = time.perf_counter()
    for alpha, tok in maps:
        t = alpha.shape[-1]
        mask = np.zeros(t, bool)
        head_sums(alpha, bos=mask, eos=np.arange(t) == t - 1, punct=mask, causal=False)
        n = max(tok.word_ids) + 1
        w = word_attention(alpha, word_units(tok.word_ids, n_prefix=0, n_suffix=1))[..., :n, :n]
        dependency_hits(w, [0] + [1] * (n - 1), [0] * n, 1)
    out["statistics"] = (time.perf_counter() - t0) / len(maps)
    out["sentences"] = len(inputs)
    return out


def batch_cost(model: Path, data: Path, *, reps: int = 7) -> dict:
    """Fit of one forward pass's seconds (one thread, best of ``reps``) to c0 + c1*B*T + c2*B*T^2,
    least squares of the relative error."""
    import torch

    from evolution.models import load_adapter

    torch.set_num_threads(1)
    adapter = load_adapter({"kind": "fairseq", "path": str(model), "data": str(data), "device": DEVICE})
    token = adapter.build_input(adapter.tokenize("the").ids)[0]
    rows = []
    for t in (8, 16, 32, 64, 128):
        for b in (1, 4, 16, 64):
            if b * t > 4096:
                continue
            x = [[token] * t] * b
            adapter.forward(x)
            best = np.inf
            for _ in range(reps):
                t0 = time.perf_counter()
                adapter.forward(x)
                best = min(best, time.perf_counter() - t0)
            rows.append((b, t, best))
    r = np.array(rows)
    design = np.c_[np.ones(len(r)), r[:, 0] * r[:, 1], r[:, 0] * r[:, 1] ** 2]
    w = 1 / r[:, 2:]  # relative errors: the small batches, which show the fixed cost, count as much as the large
    c0, c1, c2 = np.linalg.lstsq(design * w, r[:, 2] * w[:, 0], rcond=None)[0]
    return {"c0_s": c0, "c1_s": c1, "c2_s": c2, "overhead_tokens": c0 / c1, "shapes": len(rows)}


def padding_table(lengths: list[int], *, budgets=(1024, 2048), task_tokens=(8192, 16384, 32768)) -> list[tuple]:
    """Cost of the batches (padded tokens + BATCH_OVERHEAD_TOKENS each) over the unpadded tokens:
    global sort and per task, filled to the budget or from :func:`evolution.extract_plan.batches`."""
    from evolution.extract_plan import BATCH_OVERHEAD_TOKENS, batches

    def filled(ls, budget):
        out, width = [], 0
        for i in sorted(range(len(ls)), key=lambda i: (-ls[i], i)):
            if out and max(width, ls[i]) * (len(out[-1]) + 1) <= budget:
                out[-1].append(i)
                width = max(width, ls[i])
            else:
                out.append([i])
                width = ls[i]
        return out

    def cost(ls, parts):
        return sum(BATCH_OVERHEAD_TOKENS + len(b) * max(ls[i] for i in b) for b in parts)

    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = []
    for size in (None, *task_tokens):
        spans = [(0, offsets[-1])] if size is None else [(a, a + size) for a in range(0, offsets[-1], size)]
        groups = [[lengths[i] for i in np.flatnonzero((offsets[:-1] < b) & (offsets[1:] > a))] for a, b in spans]
        for budget in budgets:
            rows.append(
                (
                    size,
                    budget,
                    sum(cost(g, filled(g, budget)) for g in groups) / sum(lengths),
                    sum(cost(g, batches(g, max_batch_tokens=budget)) for g in groups) / sum(lengths),
                )
            )
    return rows


def _loop_in_worker(model: str, data: str, corpus: str) -> dict:
    import logging

    logging.disable(logging.INFO)
    p0, t0 = time.process_time(), time.thread_time()
    r = bare_loop(Path(model), Path(data), Path(corpus), threads=1, keep=False, max_batch_tokens=1024)
    r["process_cpu_s"], r["thread_cpu_s"] = time.process_time() - p0, time.thread_time() - t0
    return r


def worker_profiler(model: Path, data: Path, corpus: Path, *, repeat: int = 3) -> list[dict]:
    """The bare loop (one thread) in a one-worker LocalCluster, profiler on and off, alternating."""
    import dask
    from distributed import Client, LocalCluster

    from pipelines.cluster import worker_environ

    out = []
    for _ in range(repeat):
        for enabled in (True, False):
            with (
                dask.config.set(
                    {
                        "distributed.nanny.pre-spawn-environ": worker_environ(1),
                        "distributed.worker.profile.enabled": enabled,
                    }
                ),
                LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c,
                Client(c) as client,
            ):
                r = client.submit(_loop_in_worker, str(model), str(data), str(corpus), pure=False).result()
            out.append({"profiler": enabled, **r})
    return out


def write_cost(directory: Path, n_bytes: int, *, file_bytes: int = 4 << 20) -> dict:
    """Wall and CPU seconds of writing ``n_bytes`` as new files of ``file_bytes`` with ``os.write``."""
    block = np.random.default_rng(0).random(file_bytes // 8).tobytes()
    directory.mkdir()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for k in range(-(-n_bytes // file_bytes)):
        fd = os.open(directory / str(k), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, block)
        finally:
            os.close(fd)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    shutil.rmtree(directory)
    return {
        "bytes": n_bytes,
        "seconds": t1 - t0,
        "user_s": r1.ru_utime - r0.ru_utime,
        "system_s": r1.ru_stime - r0.ru_stime,
    }


def in_subprocess(fn: str) -> dict:
    code = (
        f"import json, sys; sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'benchmarks')!r});"
        f"import logging; logging.disable(logging.INFO);"
        f"from extract import *; from pathlib import Path;"
        f"print('RESULT', json.dumps({fn}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=200_000)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", action="store_true", help="the cost of the attention-head analyses per sentence")
    p.add_argument("--sentences", type=int, default=1000, help="with --heads: sentences measured")
    p.add_argument("--task-chunks", type=int, default=None, help="extract.task_chunks (default: the config's)")
    p.add_argument("--repeat", type=int, default=3, help="bare loop / pipeline pairs measured (median ratio)")
    p.add_argument("--batch-cost", action="store_true", help="fit a forward pass's fixed cost, in tokens")
    p.add_argument("--worker-profiler", action="store_true", help="CPU taken by distributed's worker profiler")
    p.add_argument("--discard-writes", action="store_true", help="workers do not store hidden (diagnostic)")
    p.add_argument("--write-cost", action="store_true", help="CPU of writing the states' bytes, without Zarr")
    p.add_argument("--padding", action="store_true", help="batching cost over unpadded tokens, by plan")
    p.add_argument("--device", default="cpu", help="where models run: cpu (default), cuda, cuda:N (both sides)")
    args = p.parse_args()
    global DEVICE
    DEVICE = args.device

    from evolution.fixtures.random_init import vocabulary_of

    words = vocabulary_of((REPO / "evolution/data/web-genesis.en.txt").read_text().splitlines(), max_size=8000)
    tmp = Path(tempfile.mkdtemp(prefix="bench-extract-"))
    try:  # each pipeline run writes ~1.4 GB of states: nothing is left behind
        measure(args, tmp, words)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args: argparse.Namespace, tmp: Path, words: list[str]) -> None:
    from evolution.fixtures.random_init import make_fairseq_model
    from pipelines.cluster import default_workers

    model, data = make_fairseq_model(
        tmp / "model",
        task="translation",
        words=words,
        layers=args.layers,
        d_model=args.d_model,
        heads=max(1, args.d_model // 64),
        max_positions=256,
    )
    cores = default_workers()
    print(f"model: fairseq translation encoder, {args.layers} layers, d={args.d_model}; {cores} core(s)")
    if args.batch_cost:
        r = in_subprocess(f"batch_cost(Path({str(model)!r}), Path({str(data)!r}))")
        print(f"one forward pass, one thread, fitted over {r['shapes']} batch shapes B x T:")
        print(f"  {1e3 * r['c0_s']:.2f} ms + {1e6 * r['c1_s']:.1f} us per token + {1e9 * r['c2_s']:.1f} ns * B * T^2")
        print(f"  fixed cost of a pass: {r['overhead_tokens']:.0f} tokens (BATCH_OVERHEAD_TOKENS)")
        return
    if args.worker_profiler:
        corpus = tmp / "profiler.txt"
        make_corpus(corpus, 50_000, words)
        rows = in_subprocess(f"worker_profiler(Path({str(model)!r}), Path({str(data)!r}), Path({str(corpus)!r}))")
        print("\nsingle-threaded forward loop over 50k tokens in a LocalCluster worker:")
        for r in rows:
            other = r["process_cpu_s"] - r["thread_cpu_s"]
            print(
                f"  profiler {'on ' if r['profiler'] else 'off'}: {r['tokens_per_s']:7,.0f} tokens/s; loop thread "
                f"{r['thread_cpu_s']:5.2f} s CPU, the worker's other threads {other:5.2f} s "
                f"({100 * other / r['thread_cpu_s']:.1f}%)"
            )
        return
    if args.write_cost:
        corpus = tmp / "write.txt"
        make_corpus(corpus, args.tokens, words)
        bare = in_subprocess(
            f"bare_loop(Path({str(model)!r}), Path({str(data)!r}), Path({str(corpus)!r}), "
            f"threads={cores}, keep=False, max_batch_tokens=1024)"
        )
        n_bytes = (args.layers + 1) * bare["tokens"] * args.d_model * 4
        rows = [in_subprocess(f"write_cost(Path({str(tmp / f'write{k}')!r}), {n_bytes})") for k in range(3)]
        loop_cpu = cores * bare["seconds"]
        print(
            f"\nbare forward loop over {bare['tokens']:,} tokens: {bare['seconds']:.1f} s x {cores} threads "
            f"= {loop_cpu:.1f} core-s"
        )
        print(f"writing their states, {n_bytes / 2**30:.2f} GiB as new 4 MiB files (os.write, no Zarr):")
        for r in rows:
            cpu = r["user_s"] + r["system_s"]
            print(
                f"  {r['seconds']:5.2f} s wall, {r['user_s']:.2f} s user + {r['system_s']:.2f} s system CPU "
                f"= {100 * cpu / loop_cpu:.1f}% of the loop's core-seconds"
            )
        return
    if args.padding:
        from evolution.models import load_adapter

        corpus = tmp / "padding.txt"
        make_corpus(corpus, args.tokens, words)
        adapter = load_adapter({"kind": "fairseq", "path": str(model), "data": str(data), "device": DEVICE})
        lengths = [
            len(adapter.build_input(adapter.tokenize(s).ids)) for s in corpus.read_text(encoding="utf-8").splitlines()
        ]
        print(
            f"\ncost of the batches over the {sum(lengths):,} unpadded tokens of 8-60 word lines "
            "(padded tokens + BATCH_OVERHEAD_TOKENS per batch):"
        )
        print(f"  {'sorted within':<22}{'budget':>8}{'filled to budget':>18}{'batches()':>12}")
        for size, budget, filled, least in padding_table(lengths):
            where = "the whole corpus" if size is None else f"tasks of {size:,} tokens"
            print(f"  {where:<22}{budget:>8,}{filled:>18.3f}{least:>12.3f}")
        return
    if args.heads:
        corpus = tmp / "heads.txt"
        make_corpus(corpus, args.sentences * 34, words)  # 8-60 words a line: ~34 on average
        r = in_subprocess(
            f"heads_cost(Path({str(model)!r}), Path({str(data)!r}), Path({str(corpus)!r}), threads={cores})"
        )
        base = r["hidden"]
        print(f"\nper sentence, {r['sentences']:,} sentences of 8-60 words ({cores} threads):")
        print(f"  forward, hidden states only (extraction): {1e3 * base:8.2f} ms  x1.00")
        for label, key in (
            ("forward with attention maps", "attention"),
            ("forward with maps and Kobayashi norms", "norms"),
            ("per-head statistics of one map (added)", "statistics"),
        ):
            print(f"  {label:<41} {1e3 * r[key]:8.2f} ms  x{r[key] / base:.2f}")
        return

    sizes = {"half": args.tokens // 2, "full": args.tokens}
    corpora = {}
    for name, n in sizes.items():
        corpora[name] = tmp / f"{name}.txt"
        make_corpus(corpora[name], n, words)

    # the baseline at its fastest batch budget, so the ratio cannot be flattered by a slow baseline;
    # bare loop and pipeline alternate, so that drifts of the machine's speed hit both
    pairs = []
    for rep in range(args.repeat):
        bare = max(
            (
                in_subprocess(
                    f"bare_loop(Path({str(model)!r}), Path({str(data)!r}), "
                    f"Path({str(corpora['full'])!r}), threads={cores}, keep=False, max_batch_tokens={m})"
                )
                for m in (1024, 2048, 4096)
            ),
            key=lambda r: r["tokens_per_s"],
        )
        (tmp / f"local{rep}").mkdir()
        cfg = write_config(
            tmp / f"local{rep}" / "c.yaml",
            corpus=corpora["full"],
            model=model,
            data=data,
            workdir=tmp / f"local{rep}" / "w",
            cluster="local",
            **({"task_chunks": args.task_chunks} if args.task_chunks else {}),
        )
        piped = in_subprocess(f"pipeline(Path({str(cfg)!r}), discard_writes={args.discard_writes})")
        shutil.rmtree(tmp / f"local{rep}")
        pairs.append((bare, piped))
        t = piped["timings"]
        print(
            f"  pair {rep + 1}: bare {bare['tokens_per_s']:,.0f} tokens/s (max_batch_tokens "
            f"{bare['max_batch_tokens']}), pipeline task graph {piped['graph_tokens_per_s']:,.0f} tokens/s "
            f"(summed over tasks: forward {t['forward_s']:.1f} s, Zarr write {t['write_s']:.1f} s), ratio "
            f"{piped['graph_tokens_per_s'] / bare['tokens_per_s']:.3f}",
            flush=True,
        )
    ratios = [p["graph_tokens_per_s"] / b["tokens_per_s"] for b, p in pairs]
    bare, piped = pairs[int(np.argsort(ratios)[len(ratios) // 2])]  # the median pair
    print(f"\nthroughput on {bare['tokens']:,} tokens (the median of {len(pairs)} pairs)")
    print(
        f"  bare forward loop ({cores} threads, best of max_batch_tokens 1024/2048/4096 = "
        f"{bare['max_batch_tokens']}): {bare['tokens_per_s']:10,.0f} tokens/s"
    )
    t = piped["timings"]
    print(
        f"  pipeline task graph (LocalCluster, {cores} workers): {piped['graph_tokens_per_s']:10,.0f} tokens/s "
        f"(summed over tasks: forward {t['forward_s']:.1f} s, Zarr write {t['write_s']:.1f} s, "
        f"model load {t['load_s']:.1f} s)"
    )
    print(
        f"  pipeline extract stage, end to end:      {piped['stage_tokens_per_s']:10,.0f} tokens/s "
        "(+ tokenisation in the client, model loading on workers)"
    )
    print(f"  whole run (+ cluster start, imports):     {piped['tokens_per_s']:10,.0f} tokens/s")
    print(
        f"  ratio pipeline task graph / bare: {piped['graph_tokens_per_s'] / bare['tokens_per_s']:.3f}  "
        f"(target >= 0.85; the {len(pairs)} pairs: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    print(f"  ratio extract stage end to end / bare: {piped['stage_tokens_per_s'] / bare['tokens_per_s']:.3f}")

    if args.discard_writes:
        return
    print("\npeak RSS (MB)        " + "".join(f"{n:>14,} tok" for n in sizes.values()))
    rows = {"pipeline (synchronous)": [], "naive keep-all loop": []}
    for name in sizes:
        d = tmp / f"sync-{name}"
        d.mkdir()
        c = write_config(
            d / "c.yaml", corpus=corpora[name], model=model, data=data, workdir=d / "w", cluster="synchronous"
        )
        rows["pipeline (synchronous)"].append(in_subprocess(f"pipeline(Path({str(c)!r}))")["peak_rss_mb"])
        shutil.rmtree(d)
        rows["naive keep-all loop"].append(
            in_subprocess(
                f"bare_loop(Path({str(model)!r}), Path({str(data)!r}), Path({str(corpora[name])!r}), "
                f"threads={cores}, keep=True)"
            )["peak_rss_mb"]
        )
    for label, values in rows.items():
        growth = values[1] / values[0]
        print(f"  {label:<24}" + "".join(f"{v:18,.0f}" for v in values) + f"   x{growth:.2f} for 2x tokens")


if __name__ == "__main__":
    main()
