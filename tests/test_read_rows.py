"""``evolution.store.read_rows``, the one way every metrics unit reads states, against plain NumPy
indexing of the whole stored array: any order, repeats, both the dense (blockwise) and the sparse
(orthogonal selection) route, and blocks that end inside a chunk or hold none of the rows."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from evolution.store import hidden_path, read_rows


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A float16 (layer 3, token 1000, feature 6) array in 64-token chunks, as extraction writes."""
    path = str(tmp_path_factory.mktemp("store") / "reps.zarr")
    rng = np.random.default_rng(3)
    values = rng.normal(size=(3, 1000, 6)).astype(np.float16)
    arr = zarr.create_array(path, name=hidden_path("m"), shape=values.shape, chunks=(1, 64, 6), dtype="float16")
    arr[:] = values
    return path, values


@pytest.mark.parametrize(
    "rows",
    [
        np.arange(1000)[::-1],  # dense, reversed: every block, output order not stored order
        np.r_[np.arange(130, 700), np.arange(150, 160), [699, 130]],  # dense with repeats
        np.r_[np.arange(5, 60), np.arange(900, 990)],  # dense over the range; blocks between hold none
        np.array([999, 3, 512, 3]),  # sparse: orthogonal selection, a repeat
        np.array([17]),
    ],
    ids=["reversed", "repeats", "gap", "sparse", "one"],
)
@pytest.mark.parametrize("block_rows", [1, 100, 65536])  # below a chunk, not a multiple of it, all at once
def test_read_rows_equals_indexing(stored, rows, block_rows):
    path, values = stored
    for layer in range(values.shape[0]):
        got = read_rows(path, "m", layer, rows, block_rows=block_rows)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, values[layer][rows].astype(np.float32))


def test_read_rows_empty(stored):
    path, _ = stored
    assert read_rows(path, "m", 0, np.array([], dtype=np.int64)).shape == (0, 6)
