#!/usr/bin/env python3
"""torch.distributed over the chorus backend after chorus is formed again over the survivors of
a crashed rank, in their own processes (chorus.core.reform, as chorusrun --elastic does).

Every rank checks collectives; the victim (the last rank, or rank 0 with "first") ends its
process; the others are told (chorus.core.peer_lost, as the elastic driver tells them), see
their next collective fail naming the victim, form chorus over themselves, destroy their
process group and make it again with init_process_group("chorus"), which must take the new
rank, world size and rendezvous (rank 0 may be the one that died, with torch's store). Then
collectives, a new group and DDP are checked against references computed from every rank's
known inputs. Run under Open MPI's mpirun --enable-recovery (test/check_survivors.sh), which
keeps the survivors running; the new rank 0 prints the verdict.

    mpirun --enable-recovery -np 3 python3 torch_survivors.py [first]"""
import os
import sys

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend "chorus")
from chorus import core

checks = 0
failures = []


def check(condition, what):
    global checks
    checks += 1
    if not condition:
        failures.append(what)
        print(f"rank {core.rank()}: FAILED: {what}", file=sys.stderr, flush=True)


def values(seed, r, count):
    return torch.rand(count, generator=torch.Generator().manual_seed(seed * 101 + r),
                      dtype=torch.float64)


def collectives(seed, size, rank, what):
    """An allreduce, a broadcast and an allgather of rank-dependent data, checked."""
    for count in (0, 1, 7, 1009):
        t = values(seed + count, rank, count)
        dist.all_reduce(t)
        expected = sum(values(seed + count, r, count) for r in range(size))
        check(torch.allclose(t, expected, rtol=1e-12, atol=1e-12),
              f"{what}: all_reduce of {count}")
    root = size - 1
    t = values(seed, rank, 5)
    dist.broadcast(t, src=root)
    check(torch.equal(t, values(seed, root, 5)), f"{what}: broadcast from {root}")
    rows = [torch.empty(3, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(rows, values(seed + 1, rank, 3))
    check(all(torch.equal(rows[r], values(seed + 1, r, 3)) for r in range(size)),
          f"{what}: all_gather")


def ddp_steps(size, rank):
    """Three DDP steps over the new world: every rank's model ends as the reference's."""
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 2)
    reference = torch.nn.Linear(4, 2)
    reference.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)

    def batch(step, r):
        g = torch.Generator().manual_seed(step * 31 + r)
        return torch.randn(2, 4, generator=g), torch.randn(2, 2, generator=g)

    for step in range(3):
        optimizer.zero_grad()
        x, y = batch(step, rank)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        total = sum(torch.nn.functional.mse_loss(reference(batch(step, r)[0]), batch(step, r)[1])
                    for r in range(size)) / size
        total.backward()
        reference_optimizer.step()
    same = all(torch.allclose(a, b, atol=1e-6)
               for a, b in zip(model.parameters(), reference.parameters()))
    check(same, "DDP over the survivors: the model differs from the reference")


def main():
    victim_first = len(sys.argv) > 1 and sys.argv[1] == "first"
    dist.init_process_group(backend="chorus")
    size, rank = dist.get_world_size(), dist.get_rank()
    collectives(10, size, rank, "before the failure")
    victim = 0 if victim_first else size - 1
    dist.barrier()
    if rank == victim:
        os._exit(9)
    core.peer_lost(victim, "the test ended its process")
    try:
        dist.all_reduce(torch.ones(2))
        check(False, "an all_reduce with the victim gone raised nothing")
    except RuntimeError as error:
        check(f"rank {victim}" in str(error), f"the failure does not name rank {victim}: {error}")
    survivors = [r for r in range(size) if r != victim]
    core.reform(survivors)
    dist.destroy_process_group()
    dist.init_process_group(backend="chorus")
    new_size, new_rank = dist.get_world_size(), dist.get_rank()
    check(new_size == size - 1, f"world size {new_size} after the reform, not {size - 1}")
    check(new_rank == survivors.index(rank), f"rank {rank} became {new_rank}")
    check(int(os.environ["RANK"]) == new_rank, f"RANK={os.environ['RANK']}, not {new_rank}")
    collectives(20, new_size, new_rank, "over the survivors")
    group = dist.new_group(list(range(new_size)))
    t = values(30, new_rank, 6)
    dist.all_reduce(t, group=group, op=dist.ReduceOp.MAX)
    expected = torch.stack([values(30, r, 6) for r in range(new_size)]).max(0).values
    check(torch.equal(t, expected), "all_reduce MAX in a new group over the survivors")
    ddp_steps(new_size, new_rank)
    totals = torch.tensor([checks, len(failures)], dtype=torch.int64)
    dist.all_reduce(totals)
    if new_rank == 0:
        print(f"survivors np={size}, rank {victim} ended, torch.distributed made again: "
              f"{totals[0] - totals[1]} passed, {totals[1]} failed;", flush=True)
    os._exit(0 if totals[1] == 0 else 1)


main()
