"""The repository speaks of itself only: every file that a committed text names exists in the
repository, and no committed result carries an absolute path of the machine that made it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXT = {".md", ".py", ".yaml", ".yml", ".toml", ".ipynb", ".sh", ".txt", ".cfg", ".json", ".html", ".csv"}
#: a path under one of the repository's directories, or one of its top-level files
REFERENCE = re.compile(r"(?<![\w/.-])((?:docs|evolution|pipelines|tests|benchmarks|configs|results|notebooks|tools)"
                       r"/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:md|py|yaml|yml|json|ipynb|html|png|csv|txt|sh|zarr)"
                       r"|README\.md|Makefile|evolution\.yaml|constraints\.txt|environment\.yml|pyproject\.toml)\b")
ABSOLUTE = re.compile(r"(?<![\w.:/-])/(?:root|home|work|tmp|Users|mnt|opt|var|private|scratch)/[\w.-]+")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / p for p in out.split("\0") if p]


def _text_files(paths, *, under: str | None = None):
    for p in paths:
        rel = p.relative_to(REPO).as_posix()
        if under is not None and not rel.startswith(under):
            continue
        if (p.suffix in TEXT or p.name in ("Makefile", "run", "zarr.json")) and p.is_file() and \
                p.stat().st_size < 5_000_000 and "data/ud-ewt" not in rel:
            yield rel, p.read_text(encoding="utf-8", errors="replace")


def test_every_file_a_committed_text_names_exists():
    files = _tracked()
    present = {p.relative_to(REPO).as_posix() for p in files} | {
        p.relative_to(REPO).as_posix() for p in REPO.glob("results/**/*")}
    missing = []
    for rel, text in _text_files(files):
        if rel.startswith(("results/", "tests/test_docs.py")):
            continue
        for ref in set(REFERENCE.findall(text)):
            if ref not in present and not (REPO / ref).exists():
                missing.append(f"{rel}: {ref}")
        if "METHODS.md" in text:
            missing.append(f"{rel}: METHODS.md")
    assert not missing, "\n".join(sorted(missing))


def test_no_committed_result_names_a_machine_path():
    offenders = []
    for rel, text in _text_files(_tracked(), under="results/"):
        for m in set(ABSOLUTE.findall(text)):
            offenders.append(f"{rel}: {m}")
    assert not offenders, "\n".join(sorted(offenders)[:40])
