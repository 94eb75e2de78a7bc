"""The head statistics of docs/heads.md's bible-full section, read from the committed store.

    python results/bible-full/heads_numbers.py [results/bible-full/metrics.zarr]

Per model: mean entropy and its uniform baseline, confidence (and with the sinks), the most
positional head, the highest rare-token share, syntactic heads per relation, the dev-picked
dependency heads against the offset baseline; per decoder layer of the translation models:
the means over heads of the decoder-heads table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import xarray as xr


def main(path: str) -> None:
    def group(name: str) -> xr.Dataset:
        return xr.open_zarr(path, group=name, consolidated=False).load()

    h = group("heads")
    v = h.value
    models = [str(m) for m in h.model.values]
    print("model", *models, sep="\t")
    for label, measure in (
        ("mean entropy", "entropy"),
        ("uniform entropy", "uniform_entropy"),
        ("confidence", "confidence"),
        ("confidence_with_sink", "confidence_with_sink"),
    ):
        x = v.sel(measure=measure).mean(["layer", "head"])
        print(label, *(f"{float(x.sel(model=m)):.2f}" for m in models), sep="\t")
    offsets = v.sel(measure=["max_prev", "max_self", "max_next"]).transpose("model", "measure", "layer", "head")
    best = []
    for m in models:
        p = offsets.sel(model=m)
        i = np.unravel_index(int(np.nanargmax(p.values)), p.shape)
        best.append(f"{float(p.values[i]):.2f} ({str(p.measure.values[i[0]])[4:]})")
    print("most positional head", *best, sep="\t")
    print("rare-token share, max", *(f"{float(h.rare_token_share.sel(model=m).max()):.2f}" for m in models), sep="\t")
    syn = h.syntactic.sum(["layer", "head"])
    print(
        "syntactic heads " + " / ".join(str(r) for r in syn.syntactic_relation.values),
        *(" / ".join(str(int(x)) for x in syn.sel(model=m).values) for m in models),
        sep="\t",
    )
    d = group("heads_dependency")
    for r in ("obj", "amod"):
        acc = d.picked_accuracy.sel(relation=r, direction="dependent_to_head")
        base = float(d.baseline_accuracy.sel(model=models[0], relation=r, direction="dependent_to_head"))
        print(
            f"{r} dependent -> head (baseline {base:.2f})",
            *(f"{float(acc.sel(model=m)):.2f}" for m in models),
            sep="\t",
        )
    dec = group("heads_decoder")
    print("\ndecoder heads, per layer: " + " / ".join(str(m) for m in dec.model.values))
    rows = [
        ("decoder self: entropy", "decoder_self", "entropy", "mean"),
        ("decoder self: uniform entropy", "decoder_self", "uniform_entropy", "mean"),
        ("decoder self: confidence", "decoder_self", "confidence", "mean"),
        ("decoder self: highest rare-token share", "decoder_self", None, "rare"),
        ("decoder self: most maxima on itself", "decoder_self", "max_self", "max"),
        ("decoder self: most maxima on the previous token", "decoder_self", "max_prev", "max"),
        ("encoder-decoder: entropy", "encoder_decoder", "entropy", "mean"),
        ("encoder-decoder: uniform entropy", "encoder_decoder", "uniform_entropy", "mean"),
        ("encoder-decoder: confidence", "encoder_decoder", "confidence", "mean"),
        ("encoder-decoder: to the source's </s>", "encoder_decoder", "to_eos", "mean"),
    ]
    for label, attention, measure, how in rows:
        if how == "rare":
            x = dec.rare_token_share.sel(attention=attention).max("head")
        else:
            x = dec.value.sel(attention=attention, measure=measure)
            x = x.max("head") if how == "max" else x.mean("head")
        print(
            label,
            *(
                " / ".join(f"{float(x.sel(model=m, layer=layer)):.2f}" for m in dec.model.values)
                for layer in dec.layer.values
            ),
            sep="\t",
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("metrics.zarr")))
