"""All-or-nothing directories: write under a temporary name, then move into place."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replace_dir"]


@contextlib.contextmanager
def replace_dir(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``final`` (not yet created); when the
    block succeeds, replace ``final`` by it in one rename. When the block
    raises, the temporary path is removed and ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
