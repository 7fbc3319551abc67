"""One rank of PyTorch's own distributed test body (torch's installed
torch/testing/_internal/distributed/distributed_test.py, DistributedTest._DistTestBase), run
under mpirun by run_torch_distributed.py, with the tests named on the command line run in this
process one after the other.

PyTorch runs that body for gloo and NCCL by spawning processes, and once ran it for its MPI
backend under mpiexec, each process a rank; this is the latter. The test file sees the backend
name in $BACKEND (gloo, or mpi for the tests that only MPI takes), and with --map-to chorus every
process group the tests ask for under that name is made with chorus instead, as PyTorch's own
harness maps a name onto the backend it runs. Each test's outcome is appended to PREFIX<rank>
as `STATUS NAME MESSAGE` the moment it ends, so that a hang leaves the rest behind.

    torch_distributed_rank.py --results PREFIX [--map-to chorus] TEST...
"""
import argparse
import os
import socket
import sys
import time
import traceback
import unittest

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
os.environ.setdefault("RANK", str(rank))
os.environ["WORLD_SIZE"] = str(size)

parser = argparse.ArgumentParser()
parser.add_argument("--results", required=True)
parser.add_argument("--map-to", default=None)
parser.add_argument("tests", nargs="*")
options = parser.parse_args()
sys.argv = sys.argv[:1]  # torch's test helpers read the command line as their own

import torch.distributed as dist  # noqa: E402

if options.map_to == "chorus":
    import chorus.torch  # noqa: E402  (registers the backend "chorus")

    # chorus starts (a collective over MPI) in the first init_process_group, before torch's
    # store: up front instead, so that no rank waits for a store while rank 0 waits in that start
    chorus.torch.init()

    original_init = dist.init_process_group
    original_new_group = dist.new_group
    mapped_names = {os.environ["BACKEND"].lower(), "gloo", "mpi"}

    def mapped(backend):
        return "chorus" if backend is None or str(backend).lower() in mapped_names else backend

    def init_process_group(backend=None, *args, **kwargs):
        # chorus takes rank and size from MPI; torch's env:// store stays as the test set it
        return original_init(mapped(backend), *args, **kwargs)

    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        if backend is not None:
            backend = mapped(backend)
        if timeout is None:
            return original_new_group(ranks, backend=backend, *args, **kwargs)
        return original_new_group(ranks, timeout, backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.new_group = new_group

from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    Barrier, DistributedTest)


FIRST_PORT = int(os.environ.get("MASTER_PORT", "29500"))


def wait_for_store(port, seconds=30):
    """Until rank 0's env:// store listens on `port`. torch's store client that finds no server
    sleeps a whole second before it tries again, which was most of each test's time (both
    backends pay it alike); a rank that connects once the server listens does not."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.002)


class RankTests(DistributedTest._DistTestBase, TestCase):
    """_DistTestBase in this process, as one rank: a process group per test, made before it and
    destroyed after, as TestDistBackend's spawned processes do."""

    rank = rank
    file_name = None

    @property
    def world_size(self):
        return os.environ["WORLD_SIZE"]

    @property
    def init_method(self):
        return "env://"

    tests_begun = 0

    def setUp(self):
        super().setUp()
        # Each test's env:// store on a port of its own: on the last test's port, a rank could
        # reach rank 0's old store while rank 0 was still closing it (broken pipe).
        RankTests.tests_begun += 1
        os.environ["MASTER_PORT"] = str(FIRST_PORT + RankTests.tests_begun % 2000)
        if rank != 0:
            wait_for_store(int(os.environ["MASTER_PORT"]))
        dist.init_process_group(init_method="env://", backend=os.environ["BACKEND"],
                                world_size=size, rank=rank,
                                timeout=distributed_test.timedelta(
                                    seconds=distributed_test.default_pg_timeout))
        try:
            self._barrier()
        except BaseException:
            dist.destroy_process_group()  # tearDown does not run after a failed setUp
            raise

    def tearDown(self):
        try:
            self._barrier()
        finally:  # the next test makes its own group even where this one left the ranks apart
            if dist.is_initialized():
                dist.destroy_process_group()
            super().tearDown()


SKIP_MESSAGES = {skip.exit_code: skip.message
                 for skip in distributed_test.TEST_SKIPS.values()}


def skip_code(result):
    """The exit code of a skip decorator's sys.exit, where the test ended with one."""
    for _, text in result.errors:
        last = text.strip().splitlines()[-1] if text.strip() else ""
        if last.startswith("SystemExit: ") and last[12:].isdigit() and \
                int(last[12:]) in SKIP_MESSAGES:
            return int(last[12:])
    return None


def record(status, name, message=""):
    with open(f"{options.results}{rank}", "a") as f:
        f.write(f"{status} {name} {message}".replace("\n", " ")[:2000] + "\n")
        f.flush()


if rank == 0:
    Barrier.init()
else:
    time.sleep(0.5)  # rank 0 empties the barrier folder first
for name in options.tests:
    result = unittest.TestResult()
    started = time.monotonic()
    try:
        RankTests(name).run(result)
    except BaseException:  # a test's own crash outside unittest's reach
        result.errors.append((name, traceback.format_exc()))
    seconds = f"({time.monotonic() - started:.1f} s)"
    # torch's skip decorators end a spawned test's process with a code that means "skipped"
    exit_code = skip_code(result)
    if exit_code is not None:
        record("SKIP", name, f"{seconds} {SKIP_MESSAGES[exit_code]}")
    elif result.errors or result.failures:
        text = (result.errors + result.failures)[0][1].strip().splitlines()
        record("FAIL", name, f"{seconds} {text[-1] if text else ''}")
    elif result.skipped:
        record("SKIP", name, f"{seconds} {result.skipped[0][1]}")
    else:
        record("PASS", name, seconds)
sys.stdout.flush()
# Every rank has written its results before any exits: mpirun ends the others when one exits.
try:
    Barrier.sync(wait_for=size, timeout=60)
except BaseException:  # a rank that never comes: its results are missing, which says so
    pass
os._exit(0)  # past a failed test, a collective left behind must not hold the exit
