"""All-or-nothing directory replacement."""

from __future__ import annotations

import pytest

from evolution.atomic import replace_dir


def test_replace_dir_swaps_in_on_success_and_keeps_the_old_on_failure(tmp_path):
    final = tmp_path / "out"
    with replace_dir(final) as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("1")
        assert not final.exists()  # nothing visible until the block ends
    assert (final / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError):
        with replace_dir(final) as tmp:
            tmp.mkdir()
            (tmp / "a.txt").write_text("2")
            raise RuntimeError("crash mid-write")
    assert (final / "a.txt").read_text() == "1"  # the previous complete output survives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial directory left behind
