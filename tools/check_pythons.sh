#!/usr/bin/env bash
# Install the package from pyproject.toml's ranges (no lock) into a fresh virtual environment for
# each given Python and run tools/smoke.py there: every Python version the dependencies support
# installs and works for opening results, figures and the API (fairseq training stays on 3.11).
# Usage: tools/check_pythons.sh python3.12 python3.13 ...   (writes .venv-<version>/)
set -euo pipefail
cd "$(dirname "$0")/.."
for py in "$@"; do
  version=$("$py" -c 'import sys; print(f"{sys.version_info.major}.{sys.version_info.minor}")')
  venv=".venv-$version"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e .
  "$venv/bin/python" -m pip list --format=freeze --disable-pip-version-check > "$venv/installed.txt"
  "$venv/bin/python" tools/smoke.py
done
