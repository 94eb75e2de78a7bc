"""Dependencies: ranges in pyproject.toml (lower bounds, so that the package installs beside an
existing stack), the exact lock in constraints.txt, used by the Makefile, environment.yml and
CI; the lock satisfies every range."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def _lock() -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            out[canonicalize_name(name)] = version
    return out


def test_pyproject_gives_ranges_and_the_lock_satisfies_them():
    lock = _lock()
    for req in _requirements():
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: a range, not an exact pin"
        assert any(s.operator == ">=" for s in req.specifier), f"{req}: states its tested lower bound"
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is not locked in constraints.txt"
        assert req.specifier.contains(lock[name], prereleases=True), f"{req.name}=={lock[name]} violates {req}"


def test_every_install_uses_the_lock():
    makefile = (REPO / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "$(PIP) install" in line and "--upgrade pip" not in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-c constraints.txt" in pip and any(p.startswith("-e .[") and "train" in p for p in pip)
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_fairseq_pin_is_shared_by_makefile_lock_and_messages():
    from evolution.nets.compat import FAIRSEQ_PIN, INSTALL_TRAIN

    assert f"FAIRSEQ := {FAIRSEQ_PIN}" in (REPO / "Makefile").read_text()
    name, version = FAIRSEQ_PIN.split("==")
    assert _lock()[canonicalize_name(name)] == version
    assert f"--no-deps {FAIRSEQ_PIN}" in INSTALL_TRAIN and "'.[train]'" in INSTALL_TRAIN
    assert FAIRSEQ_PIN in (REPO / "environment.yml").read_text()


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
