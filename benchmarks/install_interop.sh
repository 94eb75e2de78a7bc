#!/usr/bin/env bash
# The interop extra's install time (docs/interop.md): in a fresh virtual environment with a fresh pip
# cache, the CPU route of docs/install.md first (torch's CPU wheel, then pip install -e .), then the
# extra alone, timed: pip install -e '.[interop]' (TransformerLens and nnsight with what they pull).
# Prints one JSON line. Usage: bash benchmarks/install_interop.sh [CPU_TORCH_SPEC] >> results/install/interop.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
CPU_TORCH=${1:-torch==2.13.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
export PIP_CACHE_DIR=$work/cache
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
"$venv/bin/python" -m pip install -q $CPU_TORCH >/dev/null 2>&1
"$venv/bin/python" -m pip install -q -e . >/dev/null 2>&1
mb0=$(du -sm "$venv" | cut -f1)
t0=$(date +%s.%N)
"$venv/bin/python" -m pip install -q -e '.[interop]' >/dev/null 2>&1
t1=$(date +%s.%N)
mb1=$(du -sm "$venv" | cut -f1)
versions=$("$venv/bin/python" -c 'from importlib.metadata import version as v; print(v("transformer-lens"), v("nnsight"), v("torch"))')
printf '{"extra": "interop", "seconds": %.0f, "added_mb": %s, "transformer_lens nnsight torch": "%s", "python": "%s", "date": "%s", "commit": "%s"}\n' \
  "$(echo "$t1 - $t0" | bc)" "$((mb1 - mb0))" "$versions" "$("$PYTHON" -V 2>&1)" "$(date -u +%F)" "$(git rev-parse --short HEAD)"
