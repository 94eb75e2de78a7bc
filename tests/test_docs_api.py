"""docs/api.md's examples run as written (from the repository's root, after `make setup`):
every ```python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_api_examples_run(monkeypatch):
    pytest.importorskip("all_minilm_l6_v2", reason="MiniLM package not installed (make setup installs it)")
    import matplotlib

    matplotlib.use("Agg")
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(REPO)
    (REPO / "runs").mkdir(exist_ok=True)
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"docs/api.md, python block {i + 1} failed: {exc!r}\n{block}") from exc
    mi, reps = namespace["mi"], namespace["reps"]
    assert set(mi.model.values) == {"mt", "lm", "minilm"} and sorted(reps) == ["lm", "minilm", "mt"]
    assert (REPO / "runs" / "head_view.html").stat().st_size > 10_000
    curves = namespace["traj"]["curves"]  # the series block: two series of 3 members, settling
    assert list(curves["checkpoint"].values) == [0, 20, 40] and list(curves["series"].values) == ["gpt2", "bert"]
    assert float(curves["to_final"].sel(metric="pwcca", checkpoint=0).min()) > 0.05
