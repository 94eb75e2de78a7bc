#!/usr/bin/env bash
# The two pip routes of docs/install.md, each in a fresh virtual environment with a fresh pip cache:
#   default: pip install -e .                      (pip picks torch's default build; on Linux a CUDA one)
#   cpu:     pip install <torch CPU wheel>, then pip install -e .
# Prints one JSON line per route: seconds, the venv's size in MB, the torch it installed and whether it
# has CUDA. Usage: bash benchmarks/install_routes.sh [CPU_TORCH_SPEC] > results/install/routes.jsonl
# CPU_TORCH_SPEC: what installs torch's CPU build here (default "torch==2.13.0", the lock's CPU wheel;
# elsewhere: "torch --index-url https://download.pytorch.org/whl/cpu", as PyTorch's selector gives it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
CPU_TORCH=${1:-torch==2.13.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
route() {
  local name=$1; shift
  local venv=$work/$name cache=$work/cache-$name
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
  local t0=$(date +%s.%N)
  for cmd in "$@"; do
    # shellcheck disable=SC2086
    PIP_CACHE_DIR=$cache "$venv/bin/python" -m pip install -q $cmd >/dev/null 2>&1
  done
  local t1=$(date +%s.%N)
  local mb=$(du -sm "$venv" | cut -f1)
  local torch=$("$venv/bin/python" -c 'import torch; print(torch.__version__, torch.version.cuda)')
  printf '{"route": "%s", "commands": "%s", "seconds": %.0f, "venv_mb": %s, "torch": "%s", "python": "%s", "date": "%s", "commit": "%s"}\n' \
    "$name" "$*" "$(echo "$t1 - $t0" | bc)" "$mb" "$torch" "$("$PYTHON" -V 2>&1)" "$(date -u +%F)" "$(git rev-parse --short HEAD)"
  rm -rf "$venv" "$cache"
}
route cpu "$CPU_TORCH" "-e ."
route default "-e ."
