"""Stores use data types that the Zarr v3 specification covers (the core numeric types and
the ``string`` extension), so that Zarr readers other than zarr-python open them: a whole
run writes no array of a type zarr-python warns about (``fixed_length_utf32``,
``null_terminated_bytes``), and the text coordinates read back as the strings written."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import zarr
from conftest import write_config

from evolution.store import portable_strings

#: the data types of the Zarr v3 core specification, plus its ``string`` extension
PORTABLE = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "string",
}


def _data_types(root: Path) -> dict[str, str]:
    out = {}
    for meta in root.rglob("zarr.json"):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") == "array":
            dt = doc["data_type"]
            out[str(meta.parent.relative_to(root))] = dt if isinstance(dt, str) else dt.get("name", str(dt))
    return out


def test_a_run_writes_only_portable_types(tmp_path, corpus_file, model_specs):
    from pipelines.run import run

    cfg = write_config(
        tmp_path / "c.yaml",
        corpus=corpus_file,
        models=[model_specs["bert"], model_specs["gpt2"]],
        workdir=tmp_path / "w",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(cfg, progress=False)
    unstable = [str(w.message)[:120] for w in caught if "Zarr V3 specification" in str(w.message)]
    assert not unstable, unstable
    for store in ("reps.zarr", "metrics.zarr"):
        types = _data_types(tmp_path / "w" / store)
        assert types and set(types.values()) <= PORTABLE, {k: v for k, v in types.items() if v not in PORTABLE}
    ds = xr.open_zarr(tmp_path / "w" / "reps.zarr", group="bert", consolidated=False)
    assert "cat" in set(map(str, ds.token_str.values))


def test_portable_strings_round_trip():
    ds = xr.Dataset(
        {"label": (("x",), np.array(["a", "ñandú", "c"])), "v": (("x",), [1.0, 2.0, 3.0])},
        coords={"model": ("m", ["mt", "lm"]), "raw": ("x", np.array([b"p", b"q", b"r"]))},
    )
    store = zarr.storage.MemoryStore()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        portable_strings(ds).to_zarr(store, zarr_format=3, consolidated=False)
    back = xr.open_zarr(store, consolidated=False)
    assert list(back.label.values) == ["a", "ñandú", "c"]
    assert list(back.model.values) == ["mt", "lm"] and list(back.raw.values) == ["p", "q", "r"]
    np.testing.assert_array_equal(back.v.values, ds.v.values)
