#!/usr/bin/env python3
"""hvd.DistributedOptimizer(compression=hvd.Compression.powersgd(r)) under mpirun at np 1-3,
against a float64 numpy reference (powersgd_reference.py) fed every rank's gradient, which each
rank computes from (step, rank, parameter): the approximation, the averaged Q and this rank's
residual of each matrix at every step; the error feedback's invariant (the approximations plus
the ranks' average residual add up to the averaged gradients); vectors and small matrices equal
to the plain average; the warm-up; gradient_predivide_factor and backward_passes_per_step;
float64 and bfloat16 gradients; the state in state_dict() (a round trip, a dict without it,
hvd.elastic's TorchState, broadcast_optimizer_state); the refusals. Prints 'N passed, N failed'
from rank 0."""
import copy
import sys

import numpy as np
import torch

import chorus.torch as hvd
from chorus.torch.powersgd import LowRankState
from checks import check, counts, raises
from powersgd_reference import (FACTORED, RANK, SHAPES, Known, ReferencePowerSGD, close,
                                 gradient, inputs)

def backward(model, step, rank):
    model(inputs(step, rank)).backward()


def make(compression, dtype=torch.float32, **options):
    model = Known().to(dtype)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters(),
                                         compression=compression, **options)
    return model, optimizer


def against_reference(rank, size, steps=4, seed=0, error_feedback=True, start_iter=0):
    """Every gradient after each step against the reference; the invariant at the end."""
    compression = hvd.Compression.powersgd(RANK, start_iter=start_iter, seed=seed,
                                           error_feedback=error_feedback)
    model, optimizer = make(compression)
    references = {name: ReferencePowerSGD(name, RANK, size, seed, error_feedback)
                  for name in FACTORED}
    what = f"seed {seed}, error feedback {error_feedback}, start_iter {start_iter}"
    sent = {name: 0.0 for name in FACTORED}
    averaged = {name: 0.0 for name in FACTORED}
    for step in range(steps):
        optimizer.zero_grad()
        backward(model, step, rank)
        optimizer.step()
        for name in SHAPES:
            gradients = [gradient(step, r, name).astype(np.float64) for r in range(size)]
            mean = sum(gradients) / size
            grad = getattr(model, name).grad
            if name not in FACTORED or step < start_iter:
                close(grad, mean, 1e-6, f"{what}: step {step} {name} is the plain average")
                continue
            approximation, q, residuals = references[name].step(gradients)
            close(grad, approximation.reshape(SHAPES[name]), 1e-4,
                  f"{what}: step {step} {name}'s approximation")
            close(optimizer._low_rank.q[name], q, 1e-4, f"{what}: step {step} {name}'s Q")
            if error_feedback:
                close(optimizer._low_rank.residual[name], residuals[rank], 1e-4,
                      f"{what}: step {step} {name}'s residual on rank {rank}")
            else:
                check(name not in optimizer._low_rank.residual,
                      f"{what}: a residual kept without error feedback")
            sent[name] = sent[name] + grad.double().reshape(SHAPES[name][0], -1).numpy()
            averaged[name] = averaged[name] + mean.reshape(SHAPES[name][0], -1)
    if not error_feedback:
        return
    for name in FACTORED:
        # Each rank's residual, averaged over the ranks in float64.
        residual = optimizer._low_rank.residual[name].double()
        mean_residual = hvd.allreduce(residual, op=hvd.Average, name=f"residual.{name}")
        close(sent[name] + mean_residual.numpy(), averaged[name], 2e-6 * steps,
              f"{what}: {name}: approximations + average residual = averaged gradients")


def other_dtypes(rank, size):
    """float64 gradients are computed in float64; bfloat16 ones in float32, the approximation
    rounded to bfloat16."""
    for dtype, tolerance in ((torch.float64, 1e-10), (torch.bfloat16, 1e-2)):
        model, optimizer = make(hvd.Compression.powersgd(RANK), dtype)
        references = {name: ReferencePowerSGD(name, RANK, size) for name in ("w1", "w2")}
        for step in range(2):
            optimizer.zero_grad()
            model({name: x.to(dtype) for name, x in inputs(step, rank).items()}).backward()
            optimizer.step()
            for name, reference in references.items():
                gradients = [torch.from_numpy(gradient(step, r, name)).to(dtype).double()
                             .numpy() for r in range(size)]
                approximation, _, _ = reference.step(gradients)
                grad = getattr(model, name).grad
                check(grad.dtype == dtype, f"{dtype}: {name}'s gradient is {grad.dtype}")
                close(grad.double(), approximation.reshape(SHAPES[name]), tolerance,
                      f"{dtype}: step {step} {name}'s approximation")


def options_honoured(rank, size):
    """gradient_predivide_factor=2 and two backward passes per step: M is the passes' mean,
    averaged over the ranks as without the factor."""
    model, optimizer = make(hvd.Compression.powersgd(RANK), gradient_predivide_factor=2.0,
                            backward_passes_per_step=2)
    reference = ReferencePowerSGD("w1", RANK, size)
    for step in range(2):
        optimizer.zero_grad()
        backward(model, 2 * step, rank)
        backward(model, 2 * step + 1, rank)
        optimizer.step()
        passes = [(gradient(2 * step, r, "w1").astype(np.float64) +
                   gradient(2 * step + 1, r, "w1")) / 2 for r in range(size)]
        approximation, _, _ = reference.step(passes)
        close(model.w1.grad, approximation, 1e-4,
              f"predivide 2, 2 passes: step {step} w1's approximation")
        mean = sum((gradient(2 * step, r, "bias").astype(np.float64) +
                    gradient(2 * step + 1, r, "bias")) / 2 for r in range(size)) / size
        close(model.bias.grad, mean, 1e-6, f"predivide 2, 2 passes: step {step} bias")


def state_round_trip(rank, size):
    model, optimizer = make(hvd.Compression.powersgd(RANK))

    def step(number):
        optimizer.zero_grad()
        backward(model, number, rank)
        optimizer.step()
        return {name: getattr(model, name).grad.clone() for name in SHAPES}

    step(0)
    step(1)
    saved = copy.deepcopy(optimizer.state_dict())
    section = saved.get("powersgd", {})
    numbers = {name: i for i, name in enumerate(SHAPES)}
    check(section.get("iteration") == 2 and
          sorted(section.get("q", {})) == sorted(numbers[n] for n in FACTORED) and
          sorted(section.get("residual", {})) == sorted(numbers[n] for n in FACTORED),
          f"state_dict()['powersgd'] has the steps, Q's and residuals by parameter number: "
          f"{ {k: sorted(v) if isinstance(v, dict) else v for k, v in section.items()} }")
    first = step(2)
    optimizer.load_state_dict(saved)
    again = step(2)
    check(all(torch.equal(first[name], again[name]) for name in SHAPES),
          "after load_state_dict of step 2's commit, step 2 again gives the same gradients")
    optimizer.load_state_dict({"state": saved["state"], "param_groups": saved["param_groups"]})
    check(optimizer._low_rank.iteration == 0 and not optimizer._low_rank.q and
          not optimizer._low_rank.residual,
          "load_state_dict of a dict without PowerSGD's state starts it afresh")

    # hvd.elastic's TorchState keeps it with a commit and restores it.
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer)
    step(0)
    state.save()
    kept = {name: q.clone() for name, q in optimizer._low_rank.q.items()}
    step(1)
    state.restore()
    check(optimizer._low_rank.iteration == 1 and
          all(torch.equal(optimizer._low_rank.q[name], kept[name]) for name in FACTORED),
          "TorchState.restore() brings back the saved step count and Q's")

    # broadcast_optimizer_state: rank 0's Q's and step count everywhere; residuals stay.
    own = {name: optimizer._low_rank.residual[name].clone() for name in FACTORED}
    if rank != 0:
        for name in FACTORED:
            optimizer._low_rank.q[name].fill_(float(rank))
        optimizer._low_rank.iteration = 7
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for name in FACTORED:
        q = optimizer._low_rank.q[name]
        root = hvd.broadcast(q, root_rank=0, name=f"check.q.{name}")
        check(torch.equal(q, root), f"broadcast_optimizer_state: {name}'s Q is rank 0's")
        check(torch.equal(optimizer._low_rank.residual[name], own[name]),
              f"broadcast_optimizer_state: {name}'s residual stays this rank's")
    check(optimizer._low_rank.iteration == 1, "broadcast_optimizer_state: rank 0's step count")


def refusals():
    message = raises(ValueError, lambda: make(hvd.Compression.powersgd),
                     "compression=Compression.powersgd without its rank")
    check("powersgd(rank)" in message, f"the message says how: {message}")
    compression = hvd.Compression.powersgd(2)
    _, optimizer = make(compression, error_feedback=False)
    check(not optimizer._low_rank.options.error_feedback and compression.error_feedback,
          "DistributedOptimizer(error_feedback=False) turns it off, leaving the compressor")
    message = raises(ValueError, lambda: make(hvd.Compression.fp16, error_feedback=True),
                     "error_feedback=True with fp16")
    check("_FP16Compressor" in message, f"the message names the compressor: {message}")
    raises(ValueError, lambda: make(hvd.Compression.powersgd(2), op=hvd.Sum),
           "PowerSGD with op=Sum")
    raises(ValueError, lambda: make(hvd.Compression.powersgd(2), op=hvd.Adasum),
           "PowerSGD with op=Adasum")
    raises(ValueError, lambda: hvd.allreduce(torch.ones(4, 4), name="refused.powersgd",
                                             compression=hvd.Compression.powersgd(2)),
           "one allreduce with PowerSGD")
    raises(ValueError, lambda: hvd.reducescatter(torch.ones(4, 4), name="refused.powersgd.rs",
                                                 compression=hvd.Compression.powersgd(2)),
           "a reducescatter with PowerSGD")
    for options in ({"rank": 0}, {"rank": 2.5}, {"start_iter": -1},
                    {"min_compression_rate": 0}, {"min_compression_rate": float("nan")},
                    {"seed": -1}):
        raises(ValueError, lambda: hvd.Compression.powersgd(**options),
               f"Compression.powersgd({options})")
    state = LowRankState(hvd.Compression.powersgd(2))
    state.load_state_dict({"iteration": 0, "q": {}, "residual": {0: torch.zeros(2, 2)}},
                          lambda index: "w1")
    message = raises(ValueError, lambda: state.begin("w1", torch.zeros(7, 5)),
                     "a residual of another shape than its gradient")
    check("w1" in message and "(2, 2)" in message and "(7, 5)" in message,
          f"the message names the parameter and both shapes: {message}")
    options = hvd.Compression.powersgd(4, min_compression_rate=2.0)
    check(options.factor_rank(torch.zeros(40, 20)) == 4 and
          options.factor_rank(torch.zeros(12, 12)) == 0 and
          options.factor_rank(torch.zeros(100)) == 0 and
          options.factor_rank(torch.zeros(10, 3, 2)) == 0 and
          options.factor_rank(torch.zeros(40, 20, dtype=torch.int32)) == 0,
          "factored where (n + m) * r * min_compression_rate < n * m, floating matrices only")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    against_reference(rank, size)
    against_reference(rank, size, steps=3, seed=5, error_feedback=False, start_iter=1)
    options_honoured(rank, size)
    other_dtypes(rank, size)
    state_round_trip(rank, size)
    refusals()
    totals = hvd.allreduce(torch.tensor([counts["passed"], counts["failed"]]), op=hvd.Sum,
                           name="counts")
    if rank == 0:
        print(f"{int(totals[0])} passed, {int(totals[1])} failed")
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
