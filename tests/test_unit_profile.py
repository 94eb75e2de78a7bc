"""A unit's recorded cost: its wall and CPU time and the worker's peak resident memory while it
ran (what profile.jsonl keeps per unit, so that the unit that peaks can be found). Run in a fresh
interpreter: a long-lived one (the test session) may hand the unit pages it already holds, which
do not raise its resident memory. The unit holds an anonymous mapping and unmaps it: whether
malloc gives freed memory back to the system is the allocator's choice (it kept 400 MB after
``del`` on one CI machine), an unmapped page is gone."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, mmap, time
import psutil
from evolution.analyses.runner import logged

def hold(mb, seconds):
    m = mmap.mmap(-1, mb * 2**20)
    page = bytes([1]) * 2**20
    for _ in range(mb):
        m.write(page)  # touched: resident
    time.sleep(seconds)
    total = float(sum(m[:10]))
    m.close()  # unmapped: given back
    return {"sum": total}

logged(hold, mb=1, seconds=0.1)  # imports what a unit's wrapper imports
base = psutil.Process().memory_info().rss
big = logged(hold, mb=400, seconds=0.5)
small = logged(hold, mb=1, seconds=0.5)
print(json.dumps({"base": base, "big": big, "small": small}))
"""


def test_the_peak_memory_of_a_unit_is_what_it_held():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    base, big, small = got["base"], got["big"], got["small"]
    assert big["result"] == {"sum": 10.0}
    assert big["time"]["rss_peak"] - base > 350 * 2**20  # the 400 MB it held
    assert small["time"]["rss_peak"] - base < 150 * 2**20  # freed before: not counted again
    assert big["time"]["wall"] >= 0.5 and big["time"]["cpu"] >= 0
