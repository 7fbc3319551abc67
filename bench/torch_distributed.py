#!/usr/bin/env python3
"""dist.all_reduce through chorus's torch.distributed backend against the gloo backend, in one
job: the default group is chorus's, a second group over the same ranks is gloo's, and for every
size the two take turns (interleaved rounds, medians reported). Prints a table as nccl-tests
does (size, count, time, algbw, busbw) for each, and chorus's time as a fraction of gloo's;
every result is checked (a sum of rank-dependent values) before the timing.

    chorusrun -np 2 --bind core /usr/bin/python3 bench/torch_distributed.py \\
        [--min-bytes 8] [--max-bytes 256M] [--rounds 5]

While gloo runs, chorus's background thread idles (it sleeps after 2 ms without work), and while
chorus runs gloo has nothing in flight."""
import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend "chorus")


def size_value(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units \
        else int(text)


def timed(tensor, group, iterations):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", type=size_value, default=8)
    parser.add_argument("--max-bytes", type=size_value, default=256 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes-per-round", type=size_value, default=64 << 20,
                        help="traffic per round and backend, which sets the iterations")
    args = parser.parse_args()
    dist.init_process_group(backend="chorus")
    gloo = dist.new_group(backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    groups = {"chorus": None, "gloo": gloo}
    if rank == 0:
        print(f"# dist.all_reduce (float32, sum) at {size} ranks: chorus backend (ordered path) "
              f"against gloo in the same job; medians of {args.rounds} interleaved rounds")
        print(f"#{'size (B)':>11} {'count':>11} | {'chorus us':>10} {'algbw':>7} {'busbw':>7} "
              f"| {'gloo us':>10} {'algbw':>7} {'busbw':>7} | {'chorus/gloo':>11}")
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = max(nbytes // 4, 1)
        tensor = torch.full((count,), float(rank + 1))
        for name, group in groups.items():
            check = torch.full((count,), float(rank + 1))
            dist.all_reduce(check, group=group)
            expected = size * (size + 1) / 2
            if not torch.all(check == expected):
                sys.exit(f"torch_distributed: {name}'s all_reduce of {count} is wrong")
        iterations = max(3, min(20000, args.bytes_per_round // max(nbytes, 1)))
        times = {name: [] for name in groups}
        for _ in range(args.rounds):
            for name, group in groups.items():
                tensor.fill_(1.0)
                elapsed = torch.tensor([timed(tensor, group, iterations)], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)
                times[name].append(elapsed.item())
        if rank == 0:
            row = f"{count * 4:>12} {count:>11}"
            medians = {}
            for name in groups:
                seconds = statistics.median(times[name])
                medians[name] = seconds
                algbw = count * 4 / seconds / 1e9
                busbw = algbw * 2 * (size - 1) / size
                row += f" | {seconds * 1e6:>10.1f} {algbw:>7.2f} {busbw:>7.2f}"
            row += f" | {medians['chorus'] / medians['gloo']:>11.2f}"
            print(row, flush=True)
        nbytes *= args.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
