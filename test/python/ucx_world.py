"""chorus.torch on worlds without MPI (chorus.core.World, init_world: chorus over UCX), as an
elastic job uses them, with this script's parent process in the driver's part: it starts 4
ranks on two made-up hosts (ranks 0 and 1 on host-a, 2 and 3 on host-b), collects their
addresses and hands every rank the table. The ranks check allreduces (sum and average, odd
counts) and a broadcast against references computed from every rank's seed in float64. Then the
parent SIGKILLs host-a's ranks (rank 0's host) and checks that:
  - each survivor's next allreduce raises HorovodInternalError naming a lost rank, within
    seconds (CHORUS_TIMEOUT_SECONDS is 60: the bound is not what found it);
  - the survivors, in the same processes (their pids unchanged), shut down, open world 1 and
    start on it with a rank of an added host (host-c, started beforehand, as the driver starts
    a listed host's ranks, waiting to join): the survivors first, old rank 2 becoming rank 0;
    hvd.rank() and hvd.size() are the new world's;
  - the new rank takes the survivors' state from the new rank 0 (broadcast_object), and the
    checks pass again on the new world.
Prints the times from the kill to the failures and to the first good step on the new world.
Usage: ucx_world.py (the parent); ucx_world.py rank (a rank: lines on stdin and stdout)."""
import os
import signal
import subprocess
import sys
import time

from checks import check, counts
from rank_lines import heard, say

COUNTS = (0, 1, 3, 7, 1013)
LOST = "host-a"  # the host whose ranks the parent kills: rank 0's


def inputs(seed, count):
    import numpy as np
    return np.random.default_rng(seed).standard_normal(count)


# ---------------------------------------------------------------------------------------------
# A rank: its lines to the parent start with "@" (anything else on stdout is the library's).


def hear():
    line = sys.stdin.readline()
    if not line:
        os._exit(3)  # the parent is gone
    return line.split()


def join(world_number):
    """Opens world `world_number`, gives the parent its address, starts chorus on the table the
    parent sends; returns the world."""
    import chorus.core as core
    world = core.World(world_number)
    say("address", world.address.hex())
    rank, size, host, *table = hear()
    core.init_world(world, int(rank), int(size), [bytes.fromhex(a) for a in table], host=host)
    return world


def run_checks(hvd, world_number, step):
    """Allreduce and broadcast against float64 references; returns the failures' texts."""
    import numpy as np
    import torch
    failures = []
    rank, size = hvd.rank(), hvd.size()
    for count in COUNTS:
        seeds = [1000 * world_number + 97 * r + count for r in range(size)]
        mine = torch.from_numpy(inputs(seeds[rank], count))
        reference = np.sum([inputs(s, count) for s in seeds], axis=0) if count else np.zeros(0)
        for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / size)):
            out = hvd.allreduce(mine, op=op, name=f"w{world_number}.s{step}.{count}.{op}")
            error = np.max(np.abs(out.numpy() - reference * scale), initial=0.0)
            if out.shape != mine.shape or error > 1e-9 * np.max(np.abs(reference), initial=1):
                failures.append(f"allreduce {op} of {count}: off by {error}")
        root = size - 1
        sent = torch.from_numpy(inputs(seeds[root], count))
        got = hvd.broadcast(mine if rank != root else sent, root_rank=root,
                            name=f"w{world_number}.b{step}.{count}")
        if not torch.equal(got, sent):
            failures.append(f"broadcast of {count} from {root}")
    return failures


def rank_main():
    import chorus.torch as hvd
    import torch
    first = join(0)
    say("started", hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(),
        hvd.cross_size(), os.getpid())
    failures = run_checks(hvd, 0, 0)
    say("checked", len(failures), *failures[:1])
    hear()  # go: host-a's ranks are killed now (or this is one of them)
    tensor = torch.ones(1 << 16, dtype=torch.float64)
    try:
        hvd.allreduce(tensor, name="after.kill")
        say("failure", "none")
    except hvd.HorovodInternalError as e:
        say("failure", f"{time.time():.6f}", str(e).replace("\n", " ")[:300])
    hvd.shutdown()
    second = join(1)
    state = hvd.broadcast_object({"commit": 7, "held": hvd.size()}, root_rank=0)
    failures = run_checks(hvd, 1, 1)
    say("rejoined", f"{time.time():.6f}", hvd.rank(), hvd.size(), os.getpid(), state["commit"],
        len(failures), *failures[:1])
    hear()  # every rank is done with world 1
    hvd.shutdown()
    say("shut")
    hear()  # every rank shut down: closing now cannot look like a loss to the others
    second.close()
    first.close()
    say("closed")


def new_rank_main():
    """A rank started for an added host: joins world 1 only."""
    import chorus.torch as hvd
    second = join(1)
    state = hvd.broadcast_object(None, root_rank=0)
    failures = run_checks(hvd, 1, 1)
    say("rejoined", f"{time.time():.6f}", hvd.rank(), hvd.size(), os.getpid(), state["commit"],
        len(failures), *failures[:1])
    hear()
    hvd.shutdown()
    say("shut")
    hear()
    second.close()
    say("closed")


# ---------------------------------------------------------------------------------------------
# The parent: the driver's part.

class Rank:
    def __init__(self, role, host):
        environment = dict(os.environ, CHORUS_TIMEOUT_SECONDS="60")
        environment.setdefault("UCX_NET_DEVICES", "lo")
        environment.setdefault("UCX_LOG_LEVEL", "error")
        self.host = host
        self.process = subprocess.Popen([sys.executable, __file__, role], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=environment)

    def hear(self, kind):
        """The rank's next line of kind `kind` (its words after it), or None if it ended."""
        return heard(self.process, kind)

    def say(self, *words):
        self.process.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.process.stdin.flush()


def form(ranks):
    """Collects the ranks' addresses and hands each the table (ranks in their new order)."""
    addresses = [r.hear("address") for r in ranks]
    check(all(addresses), "every rank gave its address")
    table = [a[0] for a in addresses if a]
    for number, r in enumerate(ranks):
        r.say(number, len(ranks), r.host, *table)


def main():
    signal.alarm(240)
    ranks = [Rank("rank", host) for host in ("host-a", "host-a", "host-b", "host-b")]
    # The added host's rank starts now, as the driver starts it when discovery lists its host,
    # and joins the next world that forms (its start-up is not the survivors' to wait for).
    added = Rank("new", "host-c")
    form(ranks)
    started = [r.hear("started") for r in ranks]
    check(all(started), "every rank started chorus")
    pids = [int(s[5]) for s in started if s]
    check([s[:5] for s in started] == [[str(n), "4", str(n % 2), "2", "2"] for n in range(4)],
          f"rank, size, local rank and size, hosts: {started}")
    checked = [r.hear("checked") for r in ranks]
    check(all(c and c[0] == "0" for c in checked), f"allreduce and broadcast on 4 ranks: {checked}")

    victims = [r for r in ranks if r.host == LOST]
    survivors = [r for r in ranks if r.host != LOST]
    killed = time.time()
    for r in victims:
        r.process.kill()
    for r in victims:
        r.process.wait()
    for r in survivors:
        r.say("go")
    failures = [r.hear("failure") for r in survivors]
    for number, f in zip((2, 3), failures):
        ok = f is not None and f[0] != "none" and any(f"rank {lost} lost" in " ".join(f) for lost in (0, 1))
        check(ok, f"old rank {number}'s next allreduce failed naming a lost rank: {f}")
    detected = [float(f[0]) - killed for f in failures if f and f[0] != "none"]
    check(detected and max(detected) < 10, f"the failures came from UCX, not the bound: {detected}")

    form(survivors + [added])
    rejoined = [r.hear("rejoined") for r in survivors + [added]]
    check(all(rejoined), "every rank of world 1 reported")
    if all(rejoined):
        numbering = [(int(j[1]), int(j[2])) for j in rejoined]
        check(numbering == [(0, 3), (1, 3), (2, 3)], f"world 1's ranks and size: {numbering}")
        check([int(j[3]) for j in rejoined[:2]] == pids[2:], "the survivors kept their processes")
        check(all(j[4] == "7" for j in rejoined), "the added rank took the survivors' state")
        check(all(j[5] == "0" for j in rejoined), f"the checks on world 1: {rejoined}")
        first_step = max(float(j[0]) for j in rejoined[:2]) - killed
        print(f"kill to failure: {', '.join(f'{d * 1000:.0f} ms' for d in detected)}; kill to "
              f"world 1's checks done on the survivors: {first_step:.2f} s", flush=True)
    for r in survivors + [added]:
        r.say("done")
    check(all(r.hear("shut") is not None for r in survivors + [added]), "every rank shut down")
    for r in survivors + [added]:
        r.say("close")
    check(all(r.hear("closed") is not None for r in survivors + [added]), "every rank closed")
    for r in survivors + [added]:
        check(r.process.wait(timeout=30) == 0, "every rank ended well")
    print(f"ucx_world: {counts['passed']} passed, {counts['failed']} failed", flush=True)
    sys.exit(1 if counts["failed"] else 0)


if __name__ == "__main__":
    if sys.argv[1:] == ["rank"]:
        rank_main()
    elif sys.argv[1:] == ["new"]:
        new_rank_main()
    else:
        main()
