#!/usr/bin/env python3
"""An allreduce in a process set of every rank against the same allreduce of the whole job, in
interleaved rounds, through the Python binding (its overhead is in both columns): a set's
collectives should cost what the job's do. Run under mpirun, e.g.
  mpirun --bind-to core -np 2 /usr/bin/python3 bench/process_sets.py
Prints, from rank 0, the median microseconds per allreduce of each size."""
import statistics
import time

import torch

import chorus.torch as hvd

ROUNDS, WARMUP, ITERATIONS = 5, 5, 50


def main():
    hvd.init()
    everyone = hvd.add_process_set(list(range(hvd.size())))
    columns = (("job", None), ("set of every rank", everyone))
    if hvd.rank() == 0:
        print(f"# allreduce (sum, float32), np={hvd.size()}, median of {ROUNDS} interleaved "
              f"rounds of {ITERATIONS}")
        print(f"#{'size (B)':>11} {'job (us)':>10} {'set (us)':>10} {'set/job':>8}")
    for numel in (16 << 10, 256 << 10, 4 << 20):
        tensor = torch.ones(numel)
        times = {label: [] for label, _ in columns}
        for _ in range(ROUNDS):
            for label, process_set in columns:
                for _ in range(WARMUP):
                    hvd.allreduce_(tensor, name=f"warm.{label}", op=hvd.Sum,
                                   process_set=process_set)
                hvd.barrier()
                start = time.perf_counter()
                for _ in range(ITERATIONS):
                    hvd.allreduce_(tensor, name=f"timed.{label}", op=hvd.Sum,
                                   process_set=process_set)
                times[label].append((time.perf_counter() - start) / ITERATIONS * 1e6)
        if hvd.rank() == 0:
            job, in_set = (statistics.median(times[label]) for label, _ in columns)
            print(f" {numel * 4:>11} {job:>10.0f} {in_set:>10.0f} {in_set / job:>8.2f}")
    hvd.remove_process_set(everyone)


main()
