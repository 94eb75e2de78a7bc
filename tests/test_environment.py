"""pyproject.toml and environment.yml pin the same packages at the same versions."""

from __future__ import annotations

import pytest

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
    from evolution.nets.compat import FAIRSEQ_PIN, INSTALL_TRAIN

    makefile = (REPO / "Makefile").read_text()
    assert f"FAIRSEQ := {FAIRSEQ_PIN}" in makefile
    assert "make test" in (REPO / ".ci" / "run").read_text()
    # a pip user who lacks fairseq is told the exact commands; environment.yml says the same
    assert f"--no-deps {FAIRSEQ_PIN}" in INSTALL_TRAIN and "'.[train]'" in INSTALL_TRAIN
    assert f"--no-deps -e . {FAIRSEQ_PIN}" in (REPO / "environment.yml").read_text()


def test_missing_fairseq_names_the_install_commands(monkeypatch):
    import builtins

    from evolution.nets import compat

    real = builtins.__import__

    def no_fairseq(name, *args, **kwargs):
        if name == "fairseq" or name.startswith("fairseq."):
            raise ImportError("No module named 'fairseq'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fairseq)
    with pytest.raises(ImportError) as err:
        compat.import_fairseq()
    assert compat.INSTALL_TRAIN in str(err.value)
