"""Write ``states-sample.npz`` / ``states-sample.json``: the stored hidden states of one analysed
sentence for each shipped model of a run's representation store, so that a test
(``tests/test_shipped.py::test_shipped_weights_give_the_stored_states``) can check that the
committed weights give the committed results.

    python results/bible-full/sample_states.py runs/default/reps.zarr [--sentence 0]

Arrays in the npz, per model ``<m>``: ``<m>.hidden`` (layer, token, feature) and
``<m>.token_id`` (token,) of that sentence, as the extraction stored them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    from evolution.store import open_representations

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", help="a run's reps.zarr whose models are shipped (kind: shipped)")
    parser.add_argument("--sentence", type=int, default=0, help="index of the analysed sentence (default 0)")
    args = parser.parse_args(argv)
    arrays, meta = {}, {"store_models": {}, "sentence_index": args.sentence}
    for name in sorted(p.name for p in Path(args.store).iterdir() if (p / "hidden").is_dir()):
        reps = open_representations(args.store, name)
        model = reps.attrs["model_config"]
        if model.get("kind") != "shipped":
            continue
        rows = np.flatnonzero(reps["sentence"].values == args.sentence)
        sel = reps.isel(token=rows)
        directory = Path(args.store).parent / model["path"]  # stored relative to the workdir
        weights = json.loads((directory / "model.json").read_text(encoding="utf-8"))["weights_sha256"]
        arrays[f"{name}.hidden"] = sel.hidden.values
        arrays[f"{name}.token_id"] = sel.token_id.values
        meta["store_models"][name] = {
            "shipped": directory.name,
            "weights_sha256": weights,
            "corpus_key": reps.attrs["corpus_key"],
            "versions": reps.attrs["versions"],
        }
    if not arrays:
        raise SystemExit(f"{args.store}: no model of kind: shipped")
    meta["text"] = _sentence(Path(args.store).parent, meta, args.sentence)
    np.savez_compressed(HERE / "states-sample.npz", **arrays)
    (HERE / "states-sample.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {HERE / 'states-sample.npz'}: {sorted(meta['store_models'])}, sentence {args.sentence!r}")
    return 0


def _sentence(workdir: Path, meta: dict, index: int) -> str:
    key = next(iter(meta["store_models"].values()))["corpus_key"]
    return (workdir / "corpus" / key / "sentences.txt").read_text(encoding="utf-8").splitlines()[index]


if __name__ == "__main__":
    raise SystemExit(main())
