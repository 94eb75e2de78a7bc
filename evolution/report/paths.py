"""Paths on the report's page: relative to the run's workdir, never absolute.

The groups of ``metrics.zarr`` record where their inputs lay (``representations``,
notes, configs) as absolute paths of the machine that made them. A page shows them
relative to the workdir (the parent of the report directory); a path outside the
workdir keeps only its last component, after an ellipsis (``…/sword``), so that no
page names a machine's directories.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["relative_path", "scrub_paths", "ABSOLUTE_PATH"]

#: an absolute POSIX path of two or more components in running text: a "/" not preceded by a
#: word character, a dot, ":" (URLs) or another "/", then name/name...; "</s>", "1/2" and
#: "and/or" do not match
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~<-])/(?:[\w.+@-]+/)+[\w.+@-]*")


def relative_path(path: str | Path, workdir: str | Path) -> str:
    """``path`` relative to ``workdir`` when it lies under it (``.`` for the workdir itself),
    else ``…/`` and its last component."""
    p, w = os.path.normpath(str(path)), os.path.normpath(str(workdir))
    if not os.path.isabs(p):
        return p
    if p == w:
        return "."
    if p.startswith(w.rstrip("/") + "/"):
        return p[len(w.rstrip("/")) + 1 :]
    return _outside(p)


def _outside(path: str) -> str:
    name = os.path.basename(path.rstrip("/"))
    return f"…/{name}" if name else "…"


def scrub_paths(text: str, workdir: str | Path) -> str:
    """``text`` with every absolute path written by :func:`relative_path`: paths under
    ``workdir`` (as given or resolved) lose that prefix, others keep their last component."""
    roots = sorted(
        {os.path.normpath(str(workdir)), os.path.normpath(str(Path(workdir).resolve()))}, key=len, reverse=True
    )
    for root in roots:
        if root == "/":
            continue
        text = re.sub(re.escape(root) + r"/(?=[\w.+@-])", "", text)  # under the workdir: relative
        text = re.sub(re.escape(root) + r"(?![\w.+@/-])", ".", text)  # the workdir itself
    return ABSOLUTE_PATH.sub(lambda m: _outside(m.group(0)), text)
