"""Every layer's hidden states of MiniLM-L6 (a real BERT) for a corpus, three ways, side by side:

    python benchmarks/peers.py [--sizes analysis whole] [--out results/peers]

(a) this project: ``python -m pipelines.run``'s extract stage into Zarr (a LocalCluster of one
    single-threaded worker per core; the states stream to disk);
(b) nnsight (PyPI ``nnsight``): a trace per batch that saves every layer's output, kept in memory;
(c) a plain ``transformers`` loop, ``output_hidden_states=True``, kept in memory.

(b) and (c) run the model on all cores (torch threads = cores) over the same batches (longest
first, at most 1,024 padded tokens, :func:`evolution.extract_plan.batches`). Each runs in its own
process; its whole process tree's resident memory is sampled every 0.2 s. Sizes: ``analysis``,
the analysed text of configs/bible-full.yaml (the test books), and ``whole``, every English verse
of the corpus (about 13x more tokens). Printed and written to ``<out>/peers.json``: tokens/s,
peak RSS (GiB) and, per method, the largest absolute difference of its states from (c)'s on the
first 20 sentences (the numbers are the same computation; only float rounding may differ).
Goals (docs/api.md): (a)'s peak memory flat in the corpus size while (b)'s and (c)'s grow, and
(a)'s throughput at least 0.9 of (c)'s. Needs ``make setup`` and ``pip install nnsight``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from scale import tree_rss  # benchmarks/ is on the path of a script run from it

REPO = Path(__file__).resolve().parent.parent
SAMPLE = 20  # sentences whose states are compared across methods


def measured(cmd: list[str], *, env: dict | None = None) -> tuple[dict, float]:
    """Run ``cmd`` (it prints ``RESULT <json>``); return its result and the peak tree RSS (GiB)."""
    peak = 0
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        peak = max(peak, tree_rss(ps))
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{err[-3000:]}")
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :]), peak / 2**30


def _batches(tokenizer, sentences: list[str]):
    from evolution.extract_plan import batches

    enc = [tokenizer(s, truncation=True, max_length=512)["input_ids"] for s in sentences]
    return enc, batches([len(x) for x in enc], max_batch_tokens=1024)


def _pad(enc, batch):
    import torch

    t = max(len(enc[i]) for i in batch)
    ids = torch.zeros((len(batch), t), dtype=torch.long)
    mask = torch.zeros((len(batch), t), dtype=torch.long)
    for b, i in enumerate(batch):
        ids[b, : len(enc[i])] = torch.as_tensor(enc[i])
        mask[b, : len(enc[i])] = 1
    return ids, mask


def run_plain(model_dir: str, corpus: str, sample: str) -> dict:
    """(c): transformers' forward with output_hidden_states, every state kept (content tokens)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(os.cpu_count())
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    sentences = Path(corpus).read_text(encoding="utf-8").splitlines()
    enc, order = _batches(tok, sentences)
    kept: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    with torch.inference_mode():
        for batch in order:
            ids, mask = _pad(enc, batch)
            hs = torch.stack(model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states)
            for b, i in enumerate(batch):
                kept[i] = hs[:, b, 1 : len(enc[i]) - 1].numpy().copy()  # content tokens: drop [CLS], [SEP]
    seconds = time.perf_counter() - t0
    tokens = sum(v.shape[1] for v in kept.values())
    np.savez(sample, *[kept[i] for i in range(min(SAMPLE, len(sentences)))])
    return {"tokens": tokens, "seconds": seconds}


def run_nnsight(model_dir: str, corpus: str, sample: str) -> dict:
    """(b): nnsight traces that .save() the embeddings' and every layer's output, kept."""
    import torch
    from nnsight import NNsight
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(os.cpu_count())
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = NNsight(AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval())
    sentences = Path(corpus).read_text(encoding="utf-8").splitlines()
    enc, order = _batches(tok, sentences)
    layers = model.encoder.layer
    kept: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    for batch in order:
        ids, mask = _pad(enc, batch)
        saved = []  # filled inside the trace (nnsight runs its body apart: no comprehension, no rebinding)
        with torch.inference_mode():
            with model.trace(input_ids=ids, attention_mask=mask):
                saved.append(model.embeddings.output.save())
                for layer in layers:
                    saved.append(layer.output.save())
        values = [getattr(s, "value", s) for s in saved]
        hs = torch.stack(
            [v[0] if isinstance(v, tuple) else v for v in values]
        )  # BertLayer: tuple before transformers 5
        for b, i in enumerate(batch):
            kept[i] = hs[:, b, 1 : len(enc[i]) - 1].numpy().copy()
    seconds = time.perf_counter() - t0
    tokens = sum(v.shape[1] for v in kept.values())
    np.savez(sample, *[kept[i] for i in range(min(SAMPLE, len(sentences)))])
    return {"tokens": tokens, "seconds": seconds}


def run_pipeline(model_dir: str, corpus: str, sample: str, workdir: str) -> dict:
    """(a): the extract stage into Zarr on a local cluster; the graph's seconds (as the bare
    loops: no model loading, no tokenisation)."""
    import xarray as xr

    from evolution.metrics.plan import rows_by_sentence
    from pipelines.run import run

    Path(workdir).mkdir(parents=True, exist_ok=True)
    cfg = Path(workdir) / "peers.yaml"
    cfg.write_text(
        f"workdir: {workdir}\ncluster: local\ncorpus: {{path: {corpus}}}\n"
        "extract: {device: cpu}\n"
        f"models:\n  - {{name: minilm, kind: huggingface, path: {model_dir}}}\n",
        encoding="utf-8",
    )
    ctx = run(cfg, progress=False, stage="extract")
    stats = ctx.timings["extract.minilm"]
    ds = xr.open_zarr(Path(workdir) / "reps.zarr", group="minilm", consolidated=False)
    rows = rows_by_sentence(ds.sentence.values)
    hidden = ds.hidden
    np.savez(sample, *[hidden[:, rows[s]].values for s in range(min(SAMPLE, len(rows)))])
    return {"tokens": int(ds.sizes["token"]), "seconds": stats["seconds"], "stage_seconds": stats["stage_seconds"]}


def corpora(tmp: Path) -> dict[str, Path]:
    """The two corpus sizes, from the corpus stage of configs/bible-full.yaml (run if needed)."""
    from evolution.config import load_config
    from pipelines.run import run
    from pipelines.stages import STAGES, Context

    cfg = load_config(REPO / "configs" / "bible-full.yaml")
    run(REPO / "configs" / "bible-full.yaml", stage="corpus", progress=False)
    directory = STAGES["corpus"].directory(Context(config=cfg))
    analysis = directory / "sentences.txt"
    whole = tmp / "whole.txt"
    text = [
        line
        for split in ("train", "valid", "test")
        for line in (directory / "text" / f"{split}.en").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    whole.write_text("\n".join(text) + "\n", encoding="utf-8")
    main = tmp / "analysis.txt"  # the main text only: sentences.txt appends the annotated UD sentences
    n_main = len(json.loads((directory / "meta.json").read_text())["refs"])
    lines = analysis.read_text(encoding="utf-8").splitlines()
    main.write_text("\n".join(lines[:n_main]) + "\n", encoding="utf-8")
    return {"analysis": main, "whole": whole}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["analysis", "whole"], choices=["analysis", "whole"])
    p.add_argument("--out", default=str(REPO / "results" / "peers"))
    args = p.parse_args()
    from evolution.fixtures.minilm import unpack

    model = str(unpack(REPO / "data" / "minilm"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = corpora(tmp)
        for size in args.sizes:
            corpus = str(texts[size])
            row = {}
            for method in ("plain", "nnsight", "pipeline"):
                sample = str(tmp / f"{size}-{method}.npz")
                extra = f", {str(tmp / f'{size}-work')!r}" if method == "pipeline" else ""
                code = (
                    f"import json, sys, logging; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); "
                    f"sys.path.insert(0, {str(REPO)!r}); logging.disable(logging.WARNING); "
                    f"from peers import run_{method}; "
                    f"print('RESULT', json.dumps(run_{method}({model!r}, {corpus!r}, {sample!r}{extra})))"
                )
                result, peak = measured([sys.executable, "-c", code])
                result.update(peak_rss_gib=round(peak, 2), tokens_per_s=round(result["tokens"] / result["seconds"]))
                row[method] = result
                print(size, method, result, flush=True)
            reference = np.load(str(tmp / f"{size}-plain.npz"))
            for method in ("nnsight", "pipeline"):
                other = np.load(str(tmp / f"{size}-{method}.npz"))
                row[method]["max_abs_diff_vs_plain"] = float(
                    max(np.abs(other[k].astype(np.float64) - reference[k]).max() for k in reference.files)
                )
            row["pipeline"]["throughput_vs_plain"] = round(
                row["pipeline"]["tokens_per_s"] / row["plain"]["tokens_per_s"], 3
            )
            results[size] = row
    (out / "peers.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
