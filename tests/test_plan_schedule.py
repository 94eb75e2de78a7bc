"""The extraction plan's wall time (pipelines/plan.py ``_graph_seconds``) against schedules made by
hand: the tasks of whole chunks, longest first, each on the worker that frees first."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evolution.config import ExtractConfig
from pipelines.plan import CONCURRENT_SLOWDOWN, OTHER_SECONDS_PER_TOKEN, WRITE_BYTES_PER_SECOND, _graph_seconds


@pytest.mark.parametrize(
    "workers, busiest",
    [
        (1, 56),  # every task on the one worker
        (2, 32),  # 16 | 16, then 16 on the first (32) and 8 on the second (24)
        (3, 24),  # 16 | 16 | 16, then 8 on the first
        (4, 16),  # a task each
        (8, 16),  # idle workers change nothing
    ],
)
def test_the_extraction_wall_is_the_hand_made_schedule(workers, busiest):
    """56 tokens in chunks of 16 are tasks of 16, 16, 16 and 8 tokens; each token costs the forward
    pass (1 / rate, x the concurrent slowdown with more than one worker), the other per-token work
    and its bytes' write. The wall is the busiest worker's tokens x that cost: 32 tokens on 2
    workers, 24 on 3, where a plan sending each task to the most loaded worker gives all 56."""
    table = SimpleNamespace(offsets=np.arange(0, 57, 8), n_tokens=56)  # 7 sentences of 8 tokens
    config = ExtractConfig(chunk_tokens=16, task_chunks=1, max_batch_tokens=64)
    rate, bytes_per_row = 1000.0, 5e4
    slow = CONCURRENT_SLOWDOWN if workers > 1 else 1.0
    per_token = slow / rate + OTHER_SECONDS_PER_TOKEN + bytes_per_row / WRITE_BYTES_PER_SECOND
    got = _graph_seconds(table, config, rate=rate, workers=workers, bytes_per_row=bytes_per_row)
    assert got == pytest.approx(busiest * per_token, rel=1e-12)
