"""PyTorch's own distributed test body (the installed torch's
torch/testing/_internal/distributed/distributed_test.py, DistributedTest._DistTestBase) against
the chorus backend, with gloo in the same harness as the baseline: each test alone (one mpirun
per test, as a hang or a test that fails on some ranks only cannot disturb the next) or all in
one mpirun. Ranks run torch_distributed_rank.py; the test file sees BACKEND=gloo and every
process group it asks for is made with chorus (or, with --as-mpi, BACKEND=mpi: the tests only
MPI takes, all_to_all's). PyTorch's test files are torch's own, read where torch is installed:
nothing is fetched or copied.

It prints each test's outcome on both backends, then the counts, and exits 1 when a test that
gloo passes fails (or hangs) on chorus, unless docs/torch-distributed.md lists it as a refusal
with its reason (the EXPECTED table below holds the same list).

    run_torch_distributed.py [--np 2,3] [--backends chorus,gloo] [--each | --together]
                             [--as-mpi] [--timeout S] [--only SUBSTRING,...] [--launcher MPIRUN]
"""
import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))

# Tests gloo passes that chorus refuses, each with why (docs/torch-distributed.md says the same).
EXPECTED = {
    "test_get_backend": "the harness maps the name gloo onto chorus; get_backend says chorus",
}


def python_path():
    """The binding, torch's missing expecttest (torch_shim/), then the caller's path."""
    return os.pathsep.join([os.path.join(SOURCE, "python"), os.path.join(HERE, "torch_shim")] +
                           [p for p in [os.environ.get("PYTHONPATH")] if p])


def free_port():
    """A free port from 20000 to 28000, below the ephemeral ports that connections take: the
    ranks take the next 2000 too, one per test."""
    while True:
        port = random.randrange(20000, 28000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def test_names():
    """Every test of _DistTestBase, read from the installed torch without starting anything."""
    code = ("import os; os.environ.setdefault('BACKEND', 'gloo'); "
            "os.environ.setdefault('WORLD_SIZE', '2'); "
            "from torch.testing._internal.distributed.distributed_test import DistributedTest; "
            "print('\\n'.join(sorted(n for n in dir(DistributedTest._DistTestBase) "
            "if n.startswith('test_'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONPATH=python_path())).stdout
    return out.split()


def run(options, backend, np, tests, work):
    """{test: (status, message)} for `tests` run on `backend` at `np` ranks."""
    results_dir = tempfile.mkdtemp(dir=work)
    temp_dir = tempfile.mkdtemp(dir=work)
    os.mkdir(os.path.join(temp_dir, "barrier"))
    os.mkdir(os.path.join(temp_dir, "test_dir"))  # test_get_rank's, as torch's harness makes
    environment = dict(os.environ, BACKEND="mpi" if options.as_mpi else "gloo",
                       TEMP_DIR=temp_dir, MASTER_ADDR="127.0.0.1",
                       OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       CHORUS_TIMEOUT_SECONDS=str(options.chorus_timeout),
                       PYTHONPATH=python_path())
    # All in one run, but the timeout tests: a timeout stops chorus in its process
    # (docs/torch-distributed.md, Timeouts), where gloo's breaks only its group, and chorus cannot
    # start again in a process whose MPI it finalized; each runs alone after the rest.
    ending = [t for t in tests if "timeout" in t]
    batches = [[t] for t in tests] if options.each else \
        [[t for t in tests if t not in ending]] + [[t] for t in ending]
    outcome = {}
    for batch in batches:
        environment["MASTER_PORT"] = str(free_port())
        for f in os.listdir(os.path.join(temp_dir, "barrier")):
            os.unlink(os.path.join(temp_dir, "barrier", f))
        files = [os.path.join(results_dir, f"rank{r}") for r in range(np)]
        for f in files:
            if os.path.exists(f):
                os.unlink(f)
        # each rank appends to rank<N>
        command = options.launcher + ["-np", str(np), sys.executable,
                                      os.path.join(HERE, "torch_distributed_rank.py"),
                                      "--results", os.path.join(results_dir, "rank")]
        command += ["--map-to", "chorus"] if backend == "chorus" else []
        command += batch
        timeout = options.timeout * len(batch)
        started = time.monotonic()
        try:
            subprocess.run(command, env=environment, capture_output=True, timeout=timeout,
                           start_new_session=True)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            subprocess.run(["pkill", "-9", "-f", "torch_distributed_rank.py"])
        per_rank = []
        for f in files:
            lines = open(f).read().splitlines() if os.path.exists(f) else []
            per_rank.append({line.split(" ", 2)[1]: (line.split(" ", 2) + [""])[::2]
                             for line in lines if len(line.split(" ")) >= 2})
        for test in batch:
            statuses = [rank.get(test, ["HANG", ""]) for rank in per_rank]
            kinds = {s[0] for s in statuses}
            if "FAIL" in kinds:
                status = "FAIL"
            elif "HANG" in kinds:
                status = "HANG" if hung or time.monotonic() - started > timeout else "CRASH"
            elif kinds == {"SKIP"}:
                status = "SKIP"
            elif "PASS" in kinds:
                status = "PASS"
            else:
                status = "SKIP"
            message = next((s[1] for s in statuses if s[0] == status), "")
            outcome[test] = (status, message.strip())
    shutil.rmtree(results_dir, ignore_errors=True)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--np", default="2,3")
    parser.add_argument("--backends", default=None,
                        help="chorus,gloo (chorus alone with --as-mpi: gloo has no all_to_all)")
    parser.add_argument("--together", dest="each", action="store_false", default=True)
    parser.add_argument("--each", dest="each", action="store_true")
    parser.add_argument("--as-mpi", action="store_true")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a test may take")
    parser.add_argument("--chorus-timeout", type=float, default=30)
    parser.add_argument("--only", default="", help="tests whose names hold one of these "
                        "comma-separated substrings")
    parser.add_argument("--launcher", default="mpirun --oversubscribe --bind-to none")
    options = parser.parse_args()
    options.launcher = options.launcher.split()
    if options.backends is None:
        options.backends = "chorus" if options.as_mpi else "chorus,gloo"
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        print("torch distributed suite: skipped: torch is not installed for", sys.executable)
        return 77
    wanted = options.only.split(",")
    tests = [t for t in test_names() if any(w in t for w in wanted)]
    if options.as_mpi:
        tests = [t for t in tests if "all_to_all" in t]
    work = tempfile.mkdtemp()
    regressions = []
    try:
        for np in [int(n) for n in options.np.split(",")]:
            chosen = tests
            if options.as_mpi and np < 3:
                # skip_if_small_worldsize lets BACKEND=mpi through, but the group these make
                # is ranks [1, 2]: torch runs its MPI tests at 3 ranks
                chosen = [t for t in tests
                          if not t.endswith("_group") or t.endswith("_full_group")]
                print(f"\n# np={np}: {len(tests) - len(chosen)} *_group tests left out "
                      "(their group is ranks 1 and 2)")
            outcomes = {b: run(options, b, np, chosen, work)
                        for b in options.backends.split(",")}
            counts = {b: {} for b in outcomes}
            print(f"\n# np={np}, BACKEND={'mpi' if options.as_mpi else 'gloo'}, "
                  f"{'each test alone' if options.each else 'all tests in one run'}")
            for test in chosen:
                row = []
                for backend, outcome in outcomes.items():
                    status, message = outcome[test]
                    counts[backend][status] = counts[backend].get(status, 0) + 1
                    row.append(f"{backend} {status}")
                gloo = outcomes.get("gloo", {}).get(test, ("?", ""))[0]
                chorus = outcomes.get("chorus", {}).get(test, ("?", ""))
                note = ""
                # with no gloo in the run (--as-mpi), every failure on chorus counts
                if chorus[0] in ("FAIL", "HANG", "CRASH") and gloo in ("PASS", "?"):
                    if test in EXPECTED:
                        note = f"  (expected: {EXPECTED[test]})"
                    else:
                        regressions.append(f"np={np} {test}: {chorus[0]} {chorus[1]}")
                        note = f"  <- {chorus[1][:300]}"
                if any(not r.endswith("SKIP") for r in row):
                    print(f"{test:70s} {'  '.join(row)}{note}")
            for backend, count in counts.items():
                print(f"# np={np} {backend}: " +
                      ", ".join(f"{count.get(k, 0)} {k.lower()}"
                                for k in ("PASS", "FAIL", "HANG", "CRASH", "SKIP")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntorch distributed suite: {len(regressions)} test(s) gloo passes fail on chorus "
          "beyond the documented refusals")
    for line in regressions:
        print("  " + line)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
