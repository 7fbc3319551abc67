"""The checks of the Python tests: each counts as passed or failed, and a failure is printed
with the rank. The scripts add up the counts over ranks at the end."""
import sys

import chorus

counts = {"passed": 0, "failed": 0}


def check(condition, what):
    if condition:
        counts["passed"] += 1
    else:
        counts["failed"] += 1
        print(f"rank {chorus.rank()}: FAILED: {what}", file=sys.stderr, flush=True)
