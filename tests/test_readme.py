"""The README's quick start runs as printed: its first Python block, in a fresh interpreter at the
repository's root, with fairseq made unimportable (the block must need only what ``pip install
-e .`` installs), and prints MI and head entropy for the three shipped models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    assert "pip install -e ." in section.split("```python", 1)[0]  # the install line comes first
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_quick_start_runs_as_printed():
    block = quick_start()
    code = "import sys\nsys.modules['fairseq'] = None  # not installed\n" + block
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for model in ("mt", "lm", "mlm"):
        assert re.search(rf"^{model}(\s+-?\d+\.\d+){{7}}\s*$", out, re.M), out  # MI at each of 7 layers
        assert re.search(rf"^{model}(\s+-?\d+\.\d+){{6}}\s*$", out, re.M), out  # head entropy at 6 blocks
    assert "fairseq" not in done.stderr
