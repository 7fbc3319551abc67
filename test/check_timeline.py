#!/usr/bin/env python3
"""Runs mpi_timeline with CHORUS_TIMELINE and checks the Chrome trace rank 0 wrote: valid JSON
(also when the program stops without shutting down), a row per tensor, and the phases that each
kind of operation must have. Usage: check_timeline.py "MPIRUN [OPTIONS]" PROGRAM NP [abort|packed]. With
"packed" the ring is forced, so fused tensors are copied into a fusion buffer and back; else, on
one host, the hierarchical algorithm reduces them where they lie (no copy phases)."""
import json
import os
import subprocess
import sys
import tempfile

mpirun, program, np = sys.argv[1], sys.argv[2], sys.argv[3]
mode = sys.argv[4] if len(sys.argv) > 4 else ""
abort, packed = mode == "abort", mode == "packed"
path = os.path.join(tempfile.mkdtemp(), "timeline.json")
env = dict(os.environ, CHORUS_TIMELINE=path, CHORUS_ALLREDUCE_ALGO="ring" if packed else "auto")
command = mpirun.split() + ["-np", np, program] + (["abort"] if abort else [])
result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
if not abort and result.returncode != 0:
    sys.exit(f"mpi_timeline failed:\n{result.stdout}\n{result.stderr}")

failures = []
with open(path) as file:
    events = json.load(file)  # raises (test fails) if the file is not valid JSON
rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
phases = {}
for event in events:
    if event.get("ph") == "X":
        assert event["dur"] >= 0 and event["ts"] >= 0, event
        phases.setdefault(rows[event["tid"]], set()).add(event["name"])
expected = {
    "small.0": {"negotiate", "queue", "allreduce"} | ({"copy in", "copy out"} if packed else set()),
    "large": {"negotiate", "queue", "allreduce"},
    "weights": {"negotiate", "queue", "broadcast"},
    "rows": {"negotiate", "queue", "allgather"},
}
for tensor, wanted in expected.items():
    missing = wanted - phases.get(tensor, set())
    if missing:
        failures.append(f"{tensor}: missing phases {sorted(missing)} (has {sorted(phases.get(tensor, []))})")
fused = [e for e in events if e["name"] == "allreduce" and "fused_tensors" in e.get("args", {})]
if not fused or max(e["args"]["fused_tensors"] for e in fused) < 2:
    failures.append("no fused allreduce recorded")
elif any(e["args"].get("in_place", False) == packed for e in fused):
    failures.append(f"fused allreduces should {'not ' if packed else ''}be reduced in place")
ready = [e for e in events if e["name"] == "negotiate"][0]["args"]
if len(ready) != int(np):
    failures.append(f"negotiation names {len(ready)} ranks, expected {np}: {ready}")
for failure in failures:
    print("FAILED:", failure)
print(f"timeline{f' ({mode})' if mode else ''} np={np}: {len(events)} events, "
      f"{len(expected) - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
