"""hvd.elastic.run on worlds without MPI (CHORUS_ELASTIC_WORLDS=ucx), with this script's parent in
the elastic driver's part, speaking the driver's protocol over TCP (chorus.launcher.protocol;
the numbering and tables of chorus.launcher.worlds): it starts 4 ranks on two made-up hosts
(ranks 0 and 1 on host-a, 2 and 3 on host-b) and the rank of an added host (host-c), which
waits to be told which world to join. The ranks train with ObjectState(step, total): each step
allreduces a 1 (the sum is the world's size), adds it to total, and commits. After step 5's
commit the parent SIGKILLs host-a's ranks (rank 0's host) and checks that:
  - the survivors' next allreduce fails and they report it to the driver ("lost in-place");
  - told to open world 1, the survivors and the added rank form it (old rank 2 becoming rank 0,
    the added rank last), the survivors in their own processes (pids unchanged), restore the
    commit of step 5 and the added rank takes it from the new rank 0;
  - training ends on every rank with step 10 and total 5 * 4 + 5 * 3 = 35 (no step lost or
    counted twice); as its process ends, every rank shuts chorus down, says so and waits for
    the driver's close before closing its worlds.
Prints the time from the kill to the survivors' first step on world 1.
Usage: elastic_worlds.py (the parent); elastic_worlds.py rank (a rank)."""
import os
import signal
import socket
import subprocess
import sys
import time

from checks import check, counts
from rank_lines import heard, say

STEPS = 10
KILLED_AFTER = 5  # the step after whose commit host-a's ranks are killed
TOKEN = "elastic-worlds-test"


# ---------------------------------------------------------------------------------------------
# A rank: an ordinary elastic script.

def rank_main():
    import torch

    import chorus.torch as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, total=0.0)
    first_steps = []

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            total = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="one").item()
            if not first_steps or first_steps[-1][1] != hvd.size():
                first_steps.append((time.time(), hvd.size()))
            state.total += total
            state.step += 1
            state.commit()
            if state.step == KILLED_AFTER and hvd.size() == 4:
                say("waiting", hvd.rank())
                if not sys.stdin.readline():  # the parent's go: host-a's ranks are gone now
                    os._exit(3)

    train(state)
    resumed = [f"{t:.6f}" for t, size in first_steps if size == 3]
    say("done", state.step, state.total, os.getpid(), resumed[0] if resumed else "none")


# ---------------------------------------------------------------------------------------------
# The parent: the driver's part.

class Member:
    """A rank's process and its connection to the driver."""

    def __init__(self, host, rank, size):
        self.host = host
        environment = dict(os.environ, CHORUS_TIMEOUT_SECONDS="60",
                           CHORUS_ELASTIC_DRIVER=f"{TOKEN}@127.0.0.1:{PORT}",
                           CHORUS_ELASTIC_WORLDS="ucx", CHORUS_ELASTIC_HOST=host,
                           CHORUS_ELASTIC_RANK=str(rank), CHORUS_ELASTIC_SIZE=str(size),
                           CHORUS_ELASTIC_STORE=STORE)
        environment.setdefault("UCX_NET_DEVICES", "lo")
        environment.setdefault("UCX_LOG_LEVEL", "error")
        self.process = subprocess.Popen([sys.executable, __file__, "rank"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=environment)
        self.connection = None
        self.buffer = b""

    def output(self, kind):
        """The words after '@ KIND' on the rank's standard output, or None if it ended."""
        return heard(self.process, kind)

    def message(self, kind, timeout=60.0):
        """The next driver message of `kind` from this rank, or None."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = protocol.parse(line.decode())
                if message is not None and message.kind == kind:
                    return message
            self.connection.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.connection.recv(65536)
            except OSError:
                return None
            if not data:
                return None
            self.buffer += data

    def send(self, line):
        self.connection.sendall(line.encode())


def form(number, members):
    """Forms world `number` over `members` (in rank order) as the driver does."""
    forming = worlds.WorldForming(number, members)
    for m in members:
        m.send(forming.opening())
    for m in members:
        message = m.message("address")
        check(message is not None and forming.address(m, int(message.fields[0]),
                                                      message.fields[1]),
              f"world {number}: the address of the rank on {m.host}")
    check(forming.complete(), f"world {number}: every address came")
    for m, line in forming.tables():
        m.send(line)


def main():
    signal.alarm(240)
    listener = socket.create_server(("127.0.0.1", PORT))
    first = [Member(host, r, 4) for r, host in enumerate(("host-a", "host-a", "host-b",
                                                         "host-b"))]
    added = Member("host-c", 2, 3)
    by_pid = {m.process.pid: m for m in first + [added]}
    for _ in range(5):
        connection, _ = listener.accept()
        hello = protocol.parse(connection.makefile().readline())
        check(hello is not None and hello.kind == "hello" and hello.fields[0] == TOKEN,
              f"a rank's first word is the job's hello: {hello}")
        by_pid[int(hello.fields[4])].connection = connection
    form(0, first)
    waiting = [m.output("waiting") for m in first]
    check(waiting == [[str(r)] for r in range(4)], f"4 ranks trained to step 5: {waiting}")

    survivors = [m for m in first if m.host != "host-a"]
    killed = time.time()
    for m in first:
        if m.host == "host-a":
            m.process.kill()
    for m in survivors:
        m.process.stdin.write("go\n")
        m.process.stdin.flush()
    lost = [m.message("lost") for m in survivors]
    check(all(message is not None and message.fields[0] == "in-place" for message in lost),
          f"the survivors reported the failed collective, able to go on: {lost}")
    form(1, worlds.member_order([(3, survivors[1]), (2, survivors[0])], [added]))
    resumed = survivors[0].message("resumed")
    check(resumed is not None and resumed.fields[0] == str(KILLED_AFTER),
          f"the new rank 0 resumed from the commit of step {KILLED_AFTER}: {resumed}")
    members = survivors + [added]
    check(all(m.message("bye") is not None for m in members), "every rank said it is done")
    done = [m.output("done") for m in members]
    check(all(m.message("shut") is not None for m in members),
          "every rank shut chorus down as its process ended, and waits for the driver's close")
    for m in members:
        m.send(protocol.close(2))
    check(all(d is not None and d[:2] == [str(STEPS), "35.0"] for d in done),
          f"every rank ended with step {STEPS} and total 35: {done}")
    if all(done):
        check([int(d[2]) for d in done[:2]] == [m.process.pid for m in survivors],
              "the survivors kept their processes")
        steps = [float(d[3]) - killed for d in done[:2] if d[3] != "none"]
        check(len(steps) == 2, f"the survivors stepped on world 1: {done}")
        if steps:
            print(f"kill to the survivors' first step on world 1: {max(steps):.2f} s",
                  flush=True)
    for m in members:
        check(m.process.wait(timeout=30) == 0, f"the rank on {m.host} ended well")
    print(f"elastic_worlds: {counts['passed']} passed, {counts['failed']} failed", flush=True)
    sys.exit(1 if counts["failed"] else 0)


if __name__ == "__main__":
    if sys.argv[1:] == ["rank"]:
        rank_main()
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python", "chorus"))
        from launcher import protocol, worlds  # noqa: E402 (the launcher stands alone)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            PORT = probe.getsockname()[1]
        STORE = f"/tmp/chorus-elastic-worlds-{os.getpid()}"
        main()
