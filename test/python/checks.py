"""The checks of the Python tests: each counts as passed or failed, and a failure is printed
with the rank (where chorus runs). The scripts add up the counts over ranks at the end."""
import sys

import chorus

counts = {"passed": 0, "failed": 0}


def check(condition, what):
    if condition:
        counts["passed"] += 1
    else:
        counts["failed"] += 1
        who = f"rank {chorus.rank()}: " if chorus.is_initialized() else ""
        print(f"{who}FAILED: {what}", file=sys.stderr, flush=True)


def raises(kind, call, what):
    """Checks that call() raises `kind`; returns its message, or "" where it did not."""
    try:
        call()
    except kind as error:
        check(True, what)
        return str(error)
    except Exception as error:  # noqa: BLE001 (the wrong kind is a failure, with its name)
        check(False, f"{what}: raised {type(error).__name__}: {error}")
        return ""
    check(False, f"{what}: did not raise")
    return ""
