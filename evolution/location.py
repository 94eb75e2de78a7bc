"""Where stores live: a local path or an fsspec URL (``s3://bucket/prefix``, ``gs://...``).

The representation store (``extract.store``), the metrics store
(``metrics.store``) and the arrays that metrics tasks read
(:func:`inputs_dir`) may sit on object storage, so that workers on several
machines share them. Zarr and xarray open such URLs themselves; this module
holds the few file operations the pipeline does around them (exists,
remove, read and write one object, join) so that no other module tells
paths from URLs.

Credentials never come from the config: fsspec's filesystems read the usual
environment (for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ``AWS_PROFILE`` / ``~/.aws``) or fsspec's own
configuration (``FSSPEC_S3_*`` variables, ``~/.config/fsspec/*.json``);
:func:`check_url` refuses a URL that carries a secret.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "is_url",
    "join",
    "parent",
    "exists",
    "is_dir",
    "listdir",
    "remove",
    "read_bytes",
    "write_bytes",
    "check_url",
    "inputs_dir",
]

#: Query parameters that would put a secret into a config file (and the logs).
_SECRET_PARAMS = {
    "key",
    "secret",
    "token",
    "password",
    "access_key",
    "secret_key",
    "session_token",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "sas_token",
    "account_key",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
}

#: Object stores whose first URL component is a bucket (a store needs a prefix below it).
_BUCKETS = {"s3", "s3a", "gs", "gcs", "abfs", "az", "adl", "oss"}


def is_url(location: str | Path) -> bool:
    """Whether ``location`` is an fsspec URL (``protocol://...``) rather than a local path."""
    return "://" in str(location) and not str(location).startswith("file://")


def _local(location: str | Path) -> Path:
    s = str(location)
    return Path(s[len("file://") :] if s.startswith("file://") else s)


def _fs(location: str):
    import fsspec

    return fsspec.core.url_to_fs(location)


def join(base: str | Path, *names: str) -> str:
    """``base/name/...`` as a string (URLs keep their protocol; ``Path`` would fold ``//``)."""
    if is_url(base):
        return "/".join([str(base).rstrip("/"), *names])
    return str(_local(base).joinpath(*names))


def parent(location: str | Path) -> str:
    """The directory (or URL prefix) that holds ``location``."""
    if is_url(location):
        parts = urlsplit(str(location).rstrip("/"))
        head = parts.path.rpartition("/")[0]
        return f"{parts.scheme}://{parts.netloc}{head}"
    return str(_local(location).resolve().parent)


def exists(location: str | Path) -> bool:
    if is_url(location):
        fs, path = _fs(str(location))
        return bool(fs.exists(path))
    return _local(location).exists()


def is_dir(location: str | Path) -> bool:
    """A directory, or a URL prefix with objects under it."""
    if is_url(location):
        fs, path = _fs(str(location))
        return bool(fs.isdir(path))
    return _local(location).is_dir()


def listdir(location: str | Path) -> list[str]:
    """Names directly under ``location`` ([] when there is nothing)."""
    if is_url(location):
        fs, path = _fs(str(location))
        try:
            return sorted(p.rstrip("/").rpartition("/")[2] for p in fs.ls(path, detail=False))
        except FileNotFoundError:
            return []
    path = _local(location)
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def remove(location: str | Path) -> None:
    """Remove ``location`` and everything under it; nothing when it does not exist."""
    if is_url(location):
        fs, path = _fs(str(location))
        if fs.exists(path):
            fs.rm(path, recursive=True)
        return
    shutil.rmtree(_local(location), ignore_errors=True)


def read_bytes(location: str | Path) -> bytes:
    if is_url(location):
        fs, path = _fs(str(location))
        with fs.open(path, "rb") as f:
            return f.read()
    return _local(location).read_bytes()


def write_bytes(location: str | Path, data: bytes) -> None:
    """Write one file all or nothing: locally under a temporary name, then renamed; on object
    storage one PUT, which readers see whole or not at all."""
    if is_url(location):
        fs, path = _fs(str(location))
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    path = _local(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def check_url(url: str, *, key: str) -> None:
    """Refuse a store URL that carries credentials or whose filesystem is not installed.

    ``key`` names the config entry in the message. Raises ValueError.
    """
    if not is_url(url):
        return
    parts = urlsplit(url)
    secrets = sorted(_SECRET_PARAMS & {k.lower() for k in parse_qs(parts.query)})
    if parts.password is not None or secrets:
        raise ValueError(
            f"{key}: the URL carries credentials ({'user:secret@' if not secrets else ', '.join(secrets)}); "
            "remove them and set them in the environment instead (for S3: AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, or an AWS profile), so that they never reach "
            "the config file, the provenance attributes or the logs"
        )
    import fsspec

    try:
        fsspec.get_filesystem_class(parts.scheme)
    except ValueError:
        raise ValueError(f"{key}: {parts.scheme}:// is not a protocol fsspec knows") from None
    except ImportError as exc:
        extra = "pip install 'evolution[s3]' (s3fs)" if parts.scheme in ("s3", "s3a") else str(exc)
        raise ValueError(
            f"{key}: {parts.scheme}:// needs a filesystem package that is not installed: {extra}"
        ) from None
    if parts.scheme in _BUCKETS and not parts.path.strip("/"):
        raise ValueError(
            f"{key}: {url} is a bucket's root; give a prefix below it, e.g. "
            f"{parts.scheme}://{parts.netloc}/evolution/{'reps' if 'extract' in key else 'metrics'}.zarr"
        )


def inputs_dir(representations: str | Path) -> str:
    """Where the metrics stage writes the index arrays its tasks read
    (:func:`evolution.analyses.base.save_arrays`): ``metrics-inputs`` beside the
    representation store, so that every worker that reads the store reaches them."""
    return join(parent(representations), "metrics-inputs")
