"""Content hashes and version records attached to every result.

A result's attributes must let a researcher answer "which code, which data and
which model made these numbers": :func:`versions` records the packages,
:func:`file_hash` / :func:`tree_hash` the inputs, and :func:`config_hash` the
resolved settings (the cache key of a stage).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["config_hash", "file_hash", "tree_hash", "versions", "code_version", "portable"]

_PACKAGES = (
    "evolution",
    "numpy",
    "torch",
    "transformers",
    "fairseq",
    "ve-fairseq",
    "dask",
    "distributed",
    "zarr",
    "xarray",
    "faiss-cpu",
    "scikit-learn",
    "openTSNE",
)


def config_hash(obj: Any, *, length: int = 16) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys), truncated."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@lru_cache(maxsize=256)
def _file_hash_cached(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_hash(path: str | Path) -> str:
    """SHA-256 of a file's bytes (memoised on path, size and mtime)."""
    st = Path(path).stat()
    return _file_hash_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def tree_hash(path: str | Path) -> str:
    """SHA-256 over the relative names and hashes of every file below ``path``
    (a file hashes as itself)."""
    path = Path(path)
    if path.is_file():
        return file_hash(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f.relative_to(path).as_posix().encode())
        h.update(file_hash(f).encode())
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    """The git commit of the checkout (with ``-dirty`` if modified), else the package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return _version("evolution") or "unknown"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Python, platform, the installed versions of the packages that shape results, and the code version."""
    out = {"python": platform.python_version(), "platform": platform.platform(), "code": code_version()}
    for name in _PACKAGES:
        v = _version(name)
        if v is not None:
            out[name] = v
    return out


#: an absolute POSIX path in running text (not a URL, not "</s>" or "and/or")
_ABSOLUTE = re.compile(r"(?<![\w.:/~<-])/(?:[\w.+@-]+/)*[\w.+@-]+")


def portable(obj, base: str | Path):
    """``obj`` (nested dicts, lists, strings) with every absolute path written relative to
    ``base`` (``os.path.relpath``): what results record of where their inputs lay, without
    naming the machine's directories (``/home/me/evolution/runs/x/reps.zarr`` with ``base``
    ``/home/me/evolution/runs/x`` -> ``reps.zarr``; up to two levels above it, ``../../data/sword``;
    farther away only the last component, ``…/site-packages``)."""
    import os

    base = os.path.abspath(str(base))

    def rel(m) -> str:
        path = m.group(0)
        r = os.path.relpath(path, base)
        # up to two levels above the workdir (e.g. the project's data/ and results/): relative;
        # farther (a system directory, a cache): only the last component, after an ellipsis
        return r if not r.startswith(os.path.join("..", "..", "..")) else f"…/{os.path.basename(path.rstrip('/'))}"

    if isinstance(obj, str):
        return _ABSOLUTE.sub(rel, obj)
    if isinstance(obj, dict):
        return {k: portable(v, base) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(portable(v, base) for v in obj)
    return obj
