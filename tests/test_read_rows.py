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
        np.r_[np.arange(5, 200), np.arange(700, 990)],  # dense over the range; blocks between hold none
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


def test_the_routes_are_the_ones_named(stored, monkeypatch):
    """The dense cases above read blocks of stored rows (slices), the sparse ones hand zarr the rows."""
    import zarr.core.array

    path, _ = stored
    calls = []
    real = zarr.core.array.Array.get_orthogonal_selection

    def spy(self, selection, *a, **k):  # a selection holding an array of rows: zarr's own fancy route
        calls.extend(1 for s in selection if isinstance(s, np.ndarray))
        return real(self, selection, *a, **k)

    monkeypatch.setattr(zarr.core.array.Array, "get_orthogonal_selection", spy)
    read_rows(path, "m", 0, np.r_[np.arange(5, 200), np.arange(700, 990)])
    assert not calls
    read_rows(path, "m", 0, np.array([999, 3, 512, 3]))
    assert calls


def test_rows_outside_the_store_are_refused(stored):
    path, _ = stored
    for rows in (np.array([0, 1000]), np.array([-1, 5])):
        with pytest.raises(IndexError, match="outside the 1000 stored tokens"):
            read_rows(path, "m", 0, rows)


def test_read_rows_empty(stored):
    path, _ = stored
    assert read_rows(path, "m", 0, np.array([], dtype=np.int64)).shape == (0, 6)


def test_blocks_are_whole_chunks_from_a_chunk_boundary(stored, monkeypatch):
    """Dense reads go a whole number of chunks at a time from a chunk boundary: 64-token chunks,
    block_rows = 100 -> blocks of 64 from 0 (not of 100, not from row 5), so no chunk is decoded
    twice; the values are those of plain slicing."""
    import zarr.core.array

    path, values = stored
    reads = []
    real = zarr.core.array.Array.__getitem__

    def spy(self, selection):
        if isinstance(selection, tuple) and isinstance(selection[1], slice):
            reads.append((selection[1].start, selection[1].stop))
        return real(self, selection)

    monkeypatch.setattr(zarr.core.array.Array, "__getitem__", spy)
    got = read_rows(path, "m", 0, np.arange(5, 200), block_rows=100)
    assert reads == [(0, 64), (64, 128), (128, 192), (192, 200)]
    np.testing.assert_array_equal(got, values[0][5:200].astype(np.float32))
