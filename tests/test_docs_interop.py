"""docs/interop.md's worked example runs as written (from the repository's root, after `make
setup`, which installs the interop extra): every ```python block, in order, in one namespace;
then the layers below the ablated block are at distance 0 exactly and its output moved."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_interop_example_runs(monkeypatch):
    pytest.importorskip("transformer_lens", reason="the interop extra: pip install -e '.[interop]'")
    pytest.importorskip("nnsight", reason="the interop extra: pip install -e '.[interop]'")
    import matplotlib

    matplotlib.use("Agg")
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "interop.md").read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 5
    monkeypatch.chdir(REPO)
    (REPO / "runs" / "interop").mkdir(parents=True, exist_ok=True)
    namespace: dict = {}
    for i, block in enumerate(blocks):
        name = f"docs/interop.md block {i + 1}"
        # nnsight reads a trace's `with` body back from its source, as from a file or a notebook cell
        linecache.cache[name] = (len(block), None, block.splitlines(True), name)
        try:
            exec(compile(block, name, "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"docs/interop.md, python block {i + 1} failed: {exc!r}\n{block}") from exc
    change = namespace["change"]
    for m in ("pwcca_distance", "cka_distance", "mi_change", "same_token_change"):
        assert change[m].sel(layer=[0, 1]).values.tolist() == [0.0, 0.0], m
    assert (change["pwcca_distance"].sel(layer=[2, 3, 4]).values > 5e-4).all()
    lo, hi = change["pwcca_distance_interval"].sel(bound="low"), change["pwcca_distance_interval"].sel(bound="high")
    assert np.all(lo.values <= change["pwcca_distance"].values) and np.all(change["pwcca_distance"].values <= hi.values)
    assert (REPO / "runs" / "interop" / "ablation.png").stat().st_size > 10_000
    assert "heads" in namespace and "value" in namespace["heads"]
