#!/usr/bin/env python3
"""The gradient exchange of one training step through hvd.DistributedOptimizer, with each
compression in turn (none, fp16, int8, powersgd(rank)), on a model's gradient shapes from
../shared/data (one tensor a line: count, name, shape). Every rank's gradients are fixed random
values; each timed step restores them, then times optimizer.synchronize() (every allreduce, and
PowerSGD's arithmetic). The variants take turns (interleaved rounds); medians are printed with
the values each step sends per rank.

    chorusrun -np 2 --bind core /usr/bin/python3 bench/powersgd_step.py \\
        --shapes ../shared/data/resnet50_grads.txt [--rounds 5] [--steps 3] [--rank 4]

It measures time, not accuracy: PowerSGD's approximation differs from the average by design."""
import argparse
import statistics
import time

import torch

import chorus.torch as hvd


def read_shapes(path):
    shapes = []
    for line in open(path, encoding="utf-8"):
        if line.startswith("#") or not line.strip():
            continue
        _, name, shape = line.split()
        shapes.append((name, tuple(int(extent) for extent in shape.split("x"))))
    return shapes


def values_sent(compression, gradients):
    """Values a step sends per rank (before the wire's own compression)."""
    factor_rank = getattr(compression, "factor_rank", None)
    total = 0
    for p in gradients:
        r = factor_rank(p) if factor_rank else 0
        total += (p.shape[0] + p.numel() // p.shape[0]) * r if r else p.numel()
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round and variant")
    parser.add_argument("--rank", type=int, default=4)
    args = parser.parse_args()
    hvd.init()
    shapes = read_shapes(args.shapes)
    generator = torch.Generator().manual_seed(1000 + hvd.rank())
    gradients = [torch.randn(shape, generator=generator) for _, shape in shapes]
    variants = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
                "int8": hvd.Compression.int8,
                f"powersgd({args.rank})": hvd.Compression.powersgd(args.rank)}
    # Parameters of each variant's own, so that each keeps its gradients where its optimizer
    # puts them (the shared heap, for the allreduces in place on one host).
    parameters = {name: [torch.nn.Parameter(torch.zeros(shape)) for _, shape in shapes]
                  for name in variants}
    optimizers = {name: hvd.DistributedOptimizer(
        torch.optim.SGD(parameters[name], lr=0.0),
        named_parameters=[(label, p) for (label, _), p in zip(shapes, parameters[name])],
        compression=compression) for name, compression in variants.items()}
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, optimizer in optimizers.items():
            for _ in range(args.steps):
                for p, g in zip(parameters[name], gradients):
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
                hvd.barrier()
                start = time.perf_counter()
                optimizer.synchronize()
                times[name].append(time.perf_counter() - start)
    if hvd.rank() == 0:
        total = sum(g.numel() for g in gradients)
        print(f"# {args.shapes}: {len(gradients)} tensors, {total} values; np={hvd.size()}; "
              f"medians of {args.rounds} interleaved rounds x {args.steps} steps")
        print(f"#{'variant':>13} {'ms/step':>9} {'vs none':>8} {'values sent':>12} "
              f"{'vs none':>8}")
        base = statistics.median(times["none"])
        for name, compression in variants.items():
            median = statistics.median(times[name])
            sent = values_sent(compression, gradients)
            print(f"{name:>14} {median * 1e3:9.1f} {median / base:8.2f} {sent:12d} "
                  f"{sent / total:8.4f}")


if __name__ == "__main__":
    main()
