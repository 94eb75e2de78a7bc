"""Hugging Face hub ids (``bert-base-uncased``, ``sentence-transformers/all-MiniLM-L6-v2``) resolved
to a local snapshot directory through ``huggingface_hub``'s own cache, the one transformers uses.

* A model already in the cache (``HF_HUB_CACHE`` / ``HF_HOME``, default
  ``~/.cache/huggingface/hub``) is used as it is, also offline (``HF_HUB_OFFLINE=1``).
* Otherwise, unless offline, its configuration, tokenizer and safetensors weights are
  downloaded into that cache (pickled ``.bin`` weights are never fetched: a repository
  without safetensors is refused).
* A model that is neither cached nor reachable raises :class:`HubModelNotFound`, which
  says both and what to do.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from evolution.models.base import ModelLoadError

logger = logging.getLogger(__name__)

__all__ = ["looks_like_hub_id", "resolve", "HubModelNotFound"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: the files a model needs: configuration, tokenizer, weights (safetensors first)
_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "tokenizer*", "merges.txt", "vocab.*"]


class HubModelNotFound(ModelLoadError):
    """A hub id that is neither in the local cache nor reachable."""


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` or ``name``: no path separators beyond one slash, no leading ``.`` or ``/``."""
    return bool(_HUB_ID.match(str(name))) and not str(name).startswith((".", "/"))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve(hub_id: str, *, revision: str | None = None) -> Path:
    """The local snapshot directory of ``hub_id`` (downloaded into the cache if needed and allowed).

    Raises
    ------
    HubModelNotFound
        Neither cached nor reachable; the message names the cache and the remedies.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE

    cache = os.environ.get("HF_HUB_CACHE") or HF_HUB_CACHE
    try:
        path = snapshot_download(hub_id, revision=revision, local_files_only=True, cache_dir=cache)
        if (Path(path) / "config.json").is_file():
            return Path(path)
    except Exception:  # noqa: BLE001 - not cached (huggingface_hub raises several types)
        pass
    if _offline():
        raise HubModelNotFound(
            f"{hub_id!r} is not a local directory and not in the Hugging Face cache {cache}, and HF_HUB_OFFLINE is "
            'set: download it once with network access (python -c "import huggingface_hub; '
            f"huggingface_hub.snapshot_download('{hub_id}')\"), point HF_HUB_CACHE at a cache that has it, or give "
            "the path of a local model directory"
        )
    try:
        logger.info("%s: downloading into the Hugging Face cache %s", hub_id, cache)
        path = snapshot_download(hub_id, revision=revision, cache_dir=cache, allow_patterns=_PATTERNS)
    except Exception as exc:  # noqa: BLE001 - network, authentication, unknown repository
        raise HubModelNotFound(
            f"{hub_id!r} is not a local directory, not in the Hugging Face cache {cache}, and could not be "
            f"downloaded ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): check the id and "
            "the network, log in for a gated model, or give the path of a local model directory"
        ) from None
    if not any(Path(path).glob("*.safetensors")):
        raise HubModelNotFound(
            f"{hub_id!r}: the repository has no safetensors weights; this project loads no "
            "pickled weights from the hub. Convert them, or give a local directory"
        )
    return Path(path)
