"""One run per workdir: ``<workdir>/run.lock``.

Two runs writing the same stores, caches and report would overwrite each other's
work. A run takes an exclusive ``fcntl.flock`` on ``<workdir>/run.lock`` for its
whole duration and writes who holds it (process id, host, start time, command)
into the file. The kernel releases the lock when the process ends, however it
ends, so a lock file left by a run that was killed (``kill -9``, a crash, a
power cut) is recognised as stale (the file is there, nobody holds the lock)
and taken over, with a log line naming the dead run.

``flock`` locks are per machine; on a network filesystem shared by several
machines start one run per workdir yourself (NFS may or may not forward them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["WorkdirBusy", "workdir_lock", "LOCK_NAME"]

LOCK_NAME = "run.lock"


class WorkdirBusy(RuntimeError):
    """Another live run holds the workdir's lock; the message names it and what to do."""


def _holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    return (
        f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')} "
        f"({holder.get('command', '?')})"
    )


@contextlib.contextmanager
def workdir_lock(workdir: str | Path):
    """Hold ``<workdir>/run.lock`` while the block runs.

    Raises
    ------
    WorkdirBusy
        When a live process holds it: wait for that run, stop it, or use another ``--workdir``.
    """
    import fcntl

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkdirBusy(
                f"{workdir} is in use by another run: {_describe(_holder(path))}. Wait for it to finish, stop it "
                f"(its outputs are resumable), or give this run its own --workdir"
            ) from None
        previous = _holder(path)
        if previous:
            logger.info(
                "workdir lock: taking over %s, from a run that ended without releasing it (%s)",
                path,
                _describe(previous),
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(["python", *sys.argv])[:300],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # a cleanly finished run leaves an empty (free) lock file
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
