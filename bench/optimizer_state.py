#!/usr/bin/env python3
"""Times broadcast_optimizer_state for an Adam state of a given size, and the growth of the
peak resident memory it causes, against the way it was done before (the whole state pickled
and sent as a Python list of ints). Run under mpirun; rank 0 prints one table line per size.

  mpirun -np 2 /usr/bin/python3 bench/optimizer_state.py --method new|old --megabytes 16 64
"""
import argparse
import pickle
import resource
import time

import torch

import chorus.torch as hvd


def old_broadcast_optimizer_state(optimizer, root_rank):
    """The implementation before: the state dict, tensors included, through a list of ints."""
    state = optimizer.state_dict() if hvd.rank() == root_rank else None
    payload = torch.ByteTensor(list(pickle.dumps(state))) if state is not None else None
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    hvd.broadcast_(length, root_rank, name="old.length")
    if payload is None:
        payload = torch.zeros(int(length.item()), dtype=torch.uint8)
    hvd.broadcast_(payload, root_rank, name="old.payload")
    optimizer.load_state_dict(pickle.loads(bytes(payload.tolist())))


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", choices=["new", "old"], default="new")
    parser.add_argument("--megabytes", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    broadcast = (hvd.broadcast_optimizer_state if args.method == "new"
                 else old_broadcast_optimizer_state)
    for megabytes in args.megabytes:
        # Adam keeps two float32 tensors per parameter: 8 bytes of state per parameter.
        parameters = megabytes * 1024 * 1024 // 8
        model = torch.nn.Linear(parameters // 1024, 1024, bias=False)
        optimizer = torch.optim.Adam(model.parameters())
        if hvd.rank() == 0:
            model.weight.grad = torch.ones_like(model.weight)
            optimizer.step()
        before = peak_mib()
        hvd.allreduce(torch.zeros(1), name=f"sync.{megabytes}")
        started = time.perf_counter()
        broadcast(optimizer, root_rank=0)
        elapsed = time.perf_counter() - started
        growth = hvd.allreduce(torch.tensor([peak_mib() - before]), op=hvd.Max,
                               name=f"growth.{megabytes}").item()
        took = hvd.allreduce(torch.tensor([elapsed]), op=hvd.Max, name=f"took.{megabytes}").item()
        state = optimizer.state_dict()["state"]
        assert state and state[0]["exp_avg"].numel() == parameters // 1024 * 1024
        if hvd.rank() == 0:
            print(f"{args.method:>4} {megabytes:5d} MB of Adam state, np={hvd.size()}: "
                  f"{took * 1e3:9.1f} ms, peak memory +{growth:7.1f} MiB (largest rank)",
                  flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
