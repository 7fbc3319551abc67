#!/usr/bin/env python3
"""The Python binding's own cost per gradient: the time from a gradient hook firing to its
submit returning (ctypes, descriptor, names included), as DistributedOptimizer's hook spends it,
for a model's worth of small and large gradients. Run under mpirun (np=1 is enough: the submit
only enqueues); prints the median and 90th percentile per tensor.

  mpirun -np 1 /usr/bin/python3 bench/hook_overhead.py [--tensors 161] [--steps 50]
"""
import argparse
import statistics
import time

import torch

import chorus.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=161)  # ResNet-50's gradient count
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64, bias=False)
                                  for _ in range(args.tensors)])
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters())
    parameters = list(model.parameters())
    for p in parameters:
        p.grad = torch.ones_like(p)
    samples = []
    for step in range(args.steps):
        for p in parameters:  # what each hook does once backward has p.grad
            started = time.perf_counter()
            optimizer._allreduce_gradient(p)
            samples.append(time.perf_counter() - started)
        optimizer.synchronize()
        optimizer._synchronized = False
    samples = sorted(samples[len(parameters):])  # the first step warms the caches up
    if hvd.rank() == 0:
        print(f"hook to submit returned, per tensor, np={hvd.size()}, "
              f"{len(samples)} submits: median {statistics.median(samples) * 1e6:.1f} us, "
              f"90th percentile {samples[int(len(samples) * 0.9)] * 1e6:.1f} us")
    hvd.shutdown()


if __name__ == "__main__":
    main()
