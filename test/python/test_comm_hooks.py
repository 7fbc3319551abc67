#!/usr/bin/env python3
"""chorus.torch.comm_hooks on DDP over the "chorus" backend, under mpirun at np=2: the
allreduce hook with Compression.none trains exactly as no hook, with int8 and int4 close to it
and the same on every rank; the PowerSGD hook's gradients against the float64 reference
(powersgd_reference.py) fed every rank's gradient, one bucket per parameter (so that a bucket's
Q's wait for the next bucket) and the warm-up; a model trained with it the same on every rank;
a group of new_group; unused parameters; the refusals. Prints 'N passed, N failed' from rank 0."""
import sys

import numpy as np
import torch
import torch.distributed as dist

import chorus.torch as hvd
from chorus.torch import comm_hooks
from checks import check, counts, raises
from powersgd_reference import (FACTORED, RANK, SHAPES, Known, ReferencePowerSGD, close,
                                 gradient, inputs)

def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def train(rank, state=None, hook=None, steps=3, group=None):
    """An MLP trained `steps` steps with DDP on this rank's data; its flat parameters."""
    model = torch.nn.parallel.DistributedDataParallel(mlp(), process_group=group)
    if hook is not None:
        model.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        optimizer.zero_grad()
        x = torch.randn(8, 20, generator=generator)
        model(x).square().mean().backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


class TwoBranches(torch.nn.Module):
    """Each step every rank uses one of two first layers, the ranks different ones."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = (torch.nn.Linear(20, 16), torch.nn.Linear(20, 16),
                                  torch.nn.Linear(16, 4))

    def forward(self, x, branch):
        return self.c((self.a if branch == 0 else self.b)(x))


def unused_parameters(rank):
    """find_unused_parameters=True (DDP's own allreduce of the used parameters comes among the
    hooks' operations) and a bucket per parameter: every rank ends with the same weights."""
    for name, state, hook in (
            ("powersgd_hook", comm_hooks.PowerSGDState(compression=hvd.Compression.powersgd(2)),
             comm_hooks.powersgd_hook),
            ("allreduce_hook int8", comm_hooks.CompressionState(compression=hvd.Compression.int8),
             comm_hooks.allreduce_hook)):
        model = torch.nn.parallel.DistributedDataParallel(TwoBranches(), bucket_cap_mb=1e-5,
                                                          find_unused_parameters=True)
        model.register_comm_hook(state, hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(rank)
        for step in range(4):
            optimizer.zero_grad()
            x = torch.randn(8, 20, generator=generator)
            model(x, (rank + step) % 2).square().mean().backward()
            optimizer.step()
        same_on_every_rank(torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
                           f"{name} with unused parameters")


def same_on_every_rank(flat, what):
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    check(all(torch.equal(g, flat) for g in gathered), f"{what}: ranks' parameters differ")


def as_ddp(plain, hooked, what):
    """DDP divides each gradient by the ranks before it sums, chorus's average after: the same
    bits at 2 ranks (halving is exact), within rounding at more."""
    difference = (plain - hooked).abs().max().item()
    bound = 0.0 if dist.get_world_size() <= 2 else 1e-6 * plain.abs().max().item()
    check(difference <= bound, f"{what}: max difference {difference:.3g} > {bound:.3g}")


def allreduce_hook(rank):
    plain = train(rank)
    none = train(rank, comm_hooks.CompressionState(compression=hvd.Compression.none),
                 comm_hooks.allreduce_hook)
    as_ddp(plain, none, "allreduce_hook with Compression.none is DDP's own")
    for compression, tolerance in ((hvd.Compression.int8, 0.02), (hvd.Compression.int4, 0.2)):
        quantized = train(rank, comm_hooks.CompressionState(compression=compression),
                          comm_hooks.allreduce_hook)
        what = f"allreduce_hook with {compression.__name__}"
        same_on_every_rank(quantized, what)
        error = (quantized - plain).abs().max().item()
        scale = plain.abs().max().item()
        check(0 < error <= tolerance * scale,
              f"{what}: max difference from float32 {error:.3g}, bound {tolerance * scale:.3g}"
              " (and not 0: compressed)")
    # Error feedback: a residual per bucket, kept unless turned off.
    kept = comm_hooks.CompressionState(compression=hvd.Compression.int8)
    train(rank, kept, comm_hooks.allreduce_hook)
    check(len(kept.residuals) > 0 and all(r.abs().sum() > 0 for r in kept.residuals.values()),
          "allreduce_hook with int8 keeps a residual per bucket")
    none_kept = comm_hooks.CompressionState(compression=hvd.Compression.int8,
                                            error_feedback=False)
    train(rank, none_kept, comm_hooks.allreduce_hook)
    check(not none_kept.residuals, "allreduce_hook with error_feedback=False keeps none")
    # topk's own ratio reaches chorus: at 1.0 every value is sent, the average as DDP's.
    whole = train(rank, comm_hooks.CompressionState(compression=hvd.Compression.topk(1.0)),
                  comm_hooks.allreduce_hook)
    difference = (whole - plain).abs().max().item()
    check(difference <= 1e-6 * plain.abs().max().item(),
          f"allreduce_hook with topk(1.0): max difference from float32 {difference:.3g}")
    group = dist.new_group(list(range(dist.get_world_size())))  # a chorus process set of its own
    in_group = train(rank, comm_hooks.CompressionState(group, hvd.Compression.none),
                     comm_hooks.allreduce_hook, group=group)
    as_ddp(plain, in_group, "allreduce_hook on a group of new_group")


def powersgd_against_reference(rank, size, start_iter):
    compression = hvd.Compression.powersgd(RANK, start_iter=start_iter)
    # Buckets of a parameter each (DDP's first bucket takes 1 MiB unless told otherwise).
    first_bucket, dist._DEFAULT_FIRST_BUCKET_BYTES = dist._DEFAULT_FIRST_BUCKET_BYTES, 1
    model = torch.nn.parallel.DistributedDataParallel(Known(touch_unused=True), bucket_cap_mb=1e-5)
    dist._DEFAULT_FIRST_BUCKET_BYTES = first_bucket
    state = comm_hooks.PowerSGDState(compression=compression)
    model.register_comm_hook(state, comm_hooks.powersgd_hook)
    parameters = dict(model.module.named_parameters())
    references = {}
    for step in range(4):
        for p in parameters.values():
            p.grad = None
        model(inputs(step, rank)).backward()
        for name in SHAPES:
            gradients = [gradient(step, r, name).astype(np.float64) for r in range(size)]
            what = f"powersgd_hook (start_iter {start_iter}): step {step} {name}"
            if name not in FACTORED or step < start_iter:
                close(parameters[name].grad, sum(gradients) / size, 1e-6,
                      f"{what} is the plain average")
                continue
            key = state.keys[parameters[name]]
            reference = references.setdefault(name, ReferencePowerSGD(key, RANK, size))
            approximation, q, residuals = reference.step(gradients)
            close(parameters[name].grad, approximation.reshape(SHAPES[name]), 1e-4,
                  f"{what}'s approximation")
            close(state.low_rank.q[key], q, 1e-4, f"{what}'s Q")
            close(state.low_rank.residual[key], residuals[rank], 1e-4, f"{what}'s residual")
    check(state.low_rank.iteration == 4, f"the hook counted {state.low_rank.iteration} steps")

    # state_dict round trip: step 4 again from the state saved before it, the same gradients.
    saved = state.state_dict()

    def step_four():
        for p in parameters.values():
            p.grad = None
        model(inputs(4, rank)).backward()
        return [p.grad.clone() for p in parameters.values()]
    first = step_four()
    state.load_state_dict(saved)
    again = step_four()
    check(all(torch.equal(a, b) for a, b in zip(first, again)),
          f"start_iter {start_iter}: PowerSGDState.load_state_dict of the state before a step "
          "gives that step's gradients again")


def refusals():
    raises(ValueError, lambda: comm_hooks.CompressionState(
        compression=hvd.Compression.powersgd(2)), "CompressionState with PowerSGD")
    raises(ValueError, lambda: comm_hooks.PowerSGDState(compression=hvd.Compression.int8),
           "PowerSGDState with int8")
    raises(ValueError, lambda: comm_hooks.PowerSGDState(compression=hvd.Compression.powersgd),
           "PowerSGDState with Compression.powersgd not called")
    message = raises(ValueError, lambda: comm_hooks.PowerSGDState(hvd.Compression.powersgd(2)),
                     "PowerSGDState with the compressor where the group goes")
    check("compression=" in message, f"the message says where it goes: {message}")


def main():
    dist.init_process_group(backend="chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    allreduce_hook(rank)
    powersgd_against_reference(rank, size, start_iter=0)
    powersgd_against_reference(rank, size, start_iter=2)
    trained = train(rank, comm_hooks.PowerSGDState(compression=hvd.Compression.powersgd(2)),
                    comm_hooks.powersgd_hook, steps=5)
    same_on_every_rank(trained, "powersgd_hook")
    unused_parameters(rank)
    refusals()
    totals = torch.tensor([counts["passed"], counts["failed"]])
    dist.all_reduce(totals)
    if rank == 0:
        print(f"{int(totals[0])} passed, {int(totals[1])} failed")
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
