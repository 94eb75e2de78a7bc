"""The README's quick start runs as printed: its first Python block, in a fresh interpreter at the
repository's root, with fairseq made unimportable (the block must need only what ``pip install
-e .`` installs), prints the kNN same-token rate and head entropy of the three shipped models,
exactly the output the README shows, and nothing on stderr."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def quick_start() -> str:
    section = quick_start_section()
    assert "pip install -e ." in section.split("```python", 1)[0]  # the install line comes first
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_quick_start_runs_as_printed():
    block = quick_start()
    code = "import sys\nsys.modules['fairseq'] = None  # not installed\n" + block
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for model in ("mt", "lm", "mlm"):
        assert re.search(rf"^{model}(\s+-?\d+\.\d+){{7}}\s*$", out, re.M), out  # a rate at each of 7 layers
        assert re.search(rf"^{model}(\s+-?\d+\.\d+){{6}}\s*$", out, re.M), out  # head entropy at 6 blocks
    assert done.stderr == "", done.stderr  # no warning, no log line, no progress bar: a clean first example
    printed = re.search(r"It prints.*?```\n(.*?)```", quick_start_section(), re.S).group(1)
    assert out == printed  # the output the README shows is the block's own
