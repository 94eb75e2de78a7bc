"""The scheduling arithmetic behind benchmarks/scaling.py against known answers and a brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evolution.schedule import list_schedule, longest_first, lower_bound


def _optimum(seconds, workers):
    """The best makespan over every assignment of units to workers (small cases only)."""
    best = float("inf")
    for assign in itertools.product(range(workers), repeat=len(seconds)):
        load = np.zeros(workers)
        for s, w in zip(seconds, assign, strict=True):
            load[w] += s
        best = min(best, load.max())
    return best


def test_known_makespans():
    assert list_schedule([3, 1, 2], workers=1) == 6  # one worker: the sum
    assert list_schedule([3, 1, 2], workers=5) == 3  # a worker each: the longest
    assert list_schedule([2.0] * 7, workers=3) == 6.0  # ceil(7 / 3) rounds of 2 s
    # in order: 1 -> w0, 1 -> w1, 4 -> w0 (free at 1), 4 -> w1: both end at 5
    assert list_schedule([1, 1, 4, 4], workers=2) == 5
    # the order matters: 1, 1, 1, 3 on 2 workers ends at 4 (3 starts at 1 after the third 1)
    assert list_schedule([1, 1, 1, 3], workers=2) == 4
    assert longest_first([1, 1, 1, 3], workers=2) == 3
    assert lower_bound([1, 1, 1, 3], workers=2) == 3
    assert lower_bound([1, 1, 1, 1], workers=2) == 2
    with pytest.raises(ValueError, match="at least 1"):
        list_schedule([1], workers=0)


def test_against_the_optimum_and_grahams_bounds():
    """Every makespan lies between the optimum (brute force) and Graham's factor of it; the
    lower bound never exceeds the optimum."""
    rng = np.random.default_rng(0)
    for _ in range(40):
        n, m = int(rng.integers(2, 8)), int(rng.integers(2, 4))
        s = rng.uniform(0.1, 5, n).round(2).tolist()
        opt = _optimum(s, m)
        assert lower_bound(s, workers=m) <= opt + 1e-12
        assert opt - 1e-12 <= list_schedule(s, workers=m) <= (2 - 1 / m) * opt + 1e-9
        assert opt - 1e-12 <= longest_first(s, workers=m) <= (4 / 3 - 1 / (3 * m)) * opt + 1e-9
