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

from evolution.atomic import replace_dir

__all__ = ["write_metrics", "open_metrics", "metrics_groups", "metrics_fingerprint"]


def write_metrics(path: Path, datasets: dict[str, xr.Dataset], *, fingerprint: str) -> None:
    """Write all groups to ``path`` under a temporary name, then move it into place."""
    import json

    import zarr

    with replace_dir(path) as tmp:
        zarr.open_group(tmp, mode="w", zarr_format=3)  # the root exists even when no metric had enough data
        for group, ds in datasets.items():
            ds = ds.copy()
            # attributes as JSON would store them (tuples -> lists, paths -> strings)
            ds.attrs = json.loads(json.dumps(ds.attrs, default=str))
            ds.to_zarr(tmp, group=group, mode="w", zarr_format=3, consolidated=False)
        zarr.open_group(tmp, mode="r+", zarr_format=3).attrs.update({"evolution_fingerprint": fingerprint,
                                                                     "groups": sorted(datasets)})


def metrics_fingerprint(path: Path) -> str | None:
    import zarr

    try:
        return zarr.open_group(path, mode="r", zarr_format=3).attrs.get("evolution_fingerprint")
    except Exception:  # noqa: BLE001 - a missing or unreadable store is simply not done
        return None


def open_metrics(path: str | Path, group: str) -> xr.Dataset:
    """One group of a metrics store written by the pipeline, lazily
    (``xr.open_zarr(path, group=group, consolidated=False)``)."""
    return xr.open_zarr(path, group=group, consolidated=False)


def metrics_groups(path: str | Path) -> list[str]:
    """The groups of a metrics store ([] when there is none)."""
    import zarr

    try:
        return list(zarr.open_group(path, mode="r", zarr_format=3).attrs.get("groups", []))
    except Exception:  # noqa: BLE001 - a missing or unreadable store has no groups
        return []
