"""pyproject.toml and environment.yml pin the same packages at the same versions."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def _norm(req: str) -> tuple[str, str]:
    name, version = req.split("==")
    return name.strip().lower().replace("_", "-"), version.strip()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    assert all("==" in r for r in reqs), "every dependency is pinned exactly"
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert dict(map(_norm, pip)) == dict(map(_norm, reqs))
    assert "python=3.11" in env["dependencies"]


def test_fairseq_pin_is_shared_by_makefile_and_ci():
    makefile = (REPO / "Makefile").read_text()
    assert "ve-fairseq==0.12.3" in makefile
    assert "make test" in (REPO / ".ci" / "run").read_text()
