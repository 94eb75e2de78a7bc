"""The metrics store, ``metrics.zarr``: its one writer and reader (zarr v3, opened by xarray).

One group per result family, each owned by an analysis of
:mod:`evolution.analyses`, whose module docstring lists the group's variables
and dimensions: ``mi``, ``neighbors``, ``similarity`` and ``change``,
``change_pos``, ``influence``, ``tsne_<selection>``. Every group carries the
metrics config, seed, library versions, the extraction keys of its inputs,
and the name and version of its analysis as attributes. The root's
attributes list the groups (``groups``) and the fingerprint of the config
that made them. Models with fewer layers are padded with NaN along ``layer``.

Open a group with :func:`open_metrics` (the report, the notebooks and the
tests do).
"""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from evolution import location
from evolution.atomic import replace_dir

__all__ = ["write_metrics", "open_metrics", "metrics_groups", "metrics_fingerprint", "check_metrics_store"]

#: Root attribute of every metrics store this pipeline writes (set first; the fingerprint is set last).
_MARK = "evolution_metrics"
_FINGERPRINT = "evolution_fingerprint"


def write_metrics(path: str | Path, datasets: dict[str, xr.Dataset], *, fingerprint: str) -> None:
    """Write all groups to ``path``; the root's fingerprint, which readers trust, last.

    A local store is written under a temporary name and moved into place (the
    previous one stays readable until then). On object storage (an fsspec URL),
    which has no rename, the previous store's fingerprint is removed first, then
    the store, and the new one is written in place: an interrupted write leaves a
    store without fingerprint, which :func:`metrics_fingerprint` reports as not
    done and :func:`check_metrics_store` still recognises as this pipeline's.
    """
    check_metrics_store(path)  # again at write time: something may have appeared since the plan
    if location.is_url(path):
        _untrust(str(path))
        location.remove(path)
        _write_groups(str(path), datasets, fingerprint)
        return
    with replace_dir(path) as tmp:
        _write_groups(str(tmp), datasets, fingerprint, final=str(path))


def _untrust(store: str) -> None:
    """Drop the root's fingerprint (nothing when there is no readable root)."""
    import zarr

    try:
        root = zarr.open_group(store, mode="r+", zarr_format=3)
    except Exception:  # noqa: BLE001 - no root: nothing to untrust
        return
    attrs = dict(root.attrs)
    if attrs.pop(_FINGERPRINT, None) is not None:
        root.attrs.clear()
        root.attrs.update(attrs)


def _write_groups(store: str, datasets: dict[str, xr.Dataset], fingerprint: str, final: str | None = None) -> None:
    import json

    import zarr

    from evolution.provenance import portable
    from evolution.store import portable_strings

    # the root (with its mark, in one write) exists even when no metric had enough data
    zarr.open_group(store, mode="w", zarr_format=3, attributes={_MARK: True})
    for group, ds in datasets.items():
        ds = ds.copy()
        # attributes as JSON would store them (tuples -> lists, paths -> strings), and paths relative
        # to the store's directory (the run's workdir): results name no directory of the machine
        ds.attrs = json.loads(json.dumps(ds.attrs, default=str))
        if not location.is_url(store):
            ds.attrs = portable(ds.attrs, Path(final or store).parent)
        portable_strings(ds).to_zarr(store, group=group, mode="w", zarr_format=3, consolidated=False)
    zarr.open_group(store, mode="r+", zarr_format=3).attrs.update(
        {_FINGERPRINT: fingerprint, "groups": sorted(datasets)}
    )


def metrics_fingerprint(path: str | Path) -> str | None:
    import zarr

    try:
        fingerprint = zarr.open_group(str(path), mode="r", zarr_format=3).attrs.get(_FINGERPRINT)
    except Exception:  # noqa: BLE001 - a missing or unreadable store is simply not done
        return None
    return fingerprint if isinstance(fingerprint, str) else None


def _attrs(store: str) -> dict | None:
    """The attributes of the Zarr group at ``store``, or None where there is none."""
    import zarr

    try:
        return dict(zarr.open_group(store, mode="r", zarr_format=3).attrs)
    except Exception:  # noqa: BLE001 - zarr raises many types for what is not a group
        return None


def check_metrics_store(path: str | Path) -> None:
    """Refuse a metrics store path that holds something this pipeline did not write (it
    would be replaced): a file, or a non-empty directory / URL prefix that is neither a
    metrics store of this pipeline (root marked) nor what is left of one whose root was
    lost in an interrupted write (every entry a group written by an analysis). Nothing is
    modified. Raises :class:`evolution.store.StoreError`, also when the location cannot be
    read (credentials, endpoint)."""
    from evolution.store import StoreError, store_entries

    entries = store_entries(str(path), key="metrics.store")
    if not entries:
        return
    root = _attrs(str(path))
    if root is not None and (_MARK in root or _FINGERPRINT in root):
        return
    if root is None and all((_attrs(location.join(path, e)) or {}).get("analysis") for e in entries):
        return  # the groups of a store whose root was removed or not yet rewritten
    raise StoreError(
        f"{path}: metrics.store holds something this pipeline did not write, which "
        "writing the metrics would replace; point metrics.store elsewhere, or move it away if it "
        "is not needed"
    )


def open_metrics(path: str | Path, group: str) -> xr.Dataset:
    """One group of a metrics store written by the pipeline, lazily
    (``xr.open_zarr(path, group=group, consolidated=False)``; ``path`` may be an fsspec URL)."""
    return xr.open_zarr(str(path), group=group, consolidated=False)


def metrics_groups(path: str | Path) -> list[str]:
    """The groups of a metrics store ([] when there is none)."""
    import zarr

    try:
        groups = zarr.open_group(str(path), mode="r", zarr_format=3).attrs.get("groups", [])
    except Exception:  # noqa: BLE001 - a missing or unreadable store has no groups
        return []
    return [str(g) for g in groups] if isinstance(groups, list | tuple) else []
