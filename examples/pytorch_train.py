#!/usr/bin/env python3
"""Data-parallel training of a small PyTorch classifier with chorus.torch, written as a Horovod
script would be (only the import differs). Each rank trains on its own shard of a synthetic
dataset; gradients are averaged by DistributedOptimizer as backward produces them.

Checks: the loss falls, and at the end every rank holds bit-identical weights.

Run: mpirun -np 4 /usr/bin/python3 examples/pytorch_train.py [--epochs N]"""
import argparse
import hashlib
import sys
import time

import torch

import chorus.torch as hvd


def synthetic_dataset(samples, features=20, classes=3, seed=1234):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    centers = torch.randn(classes, features, generator=generator) * 2
    y = torch.cdist(x, centers).argmin(dim=1)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42 + hvd.rank())  # different on purpose: broadcast_parameters aligns them
    x, y = synthetic_dataset(args.samples)
    shard = slice(hvd.rank(), None, hvd.size())  # this rank's samples
    x, y = x[shard], y[shard]

    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    losses = []
    for epoch in range(args.epochs):
        start = time.time()
        total, batches = 0.0, 0
        for begin in range(0, len(x) - args.batch_size + 1, args.batch_size):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[begin:begin + args.batch_size]),
                                                     y[begin:begin + args.batch_size])
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        epoch_loss = hvd.allreduce(torch.tensor(total / batches), name=f"loss.{epoch}").item()
        losses.append(epoch_loss)
        if hvd.rank() == 0:
            rate = batches * args.batch_size * hvd.size() / (time.time() - start)
            print(f"epoch {epoch + 1}: loss {epoch_loss:.4f}, {rate:.0f} samples/s", flush=True)

    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).digest()
    fingerprint = torch.tensor([int.from_bytes(digest[:7], "little")], dtype=torch.int64)
    low = hvd.allreduce(fingerprint, op=hvd.Min, name="fingerprint.min")
    high = hvd.allreduce(fingerprint, op=hvd.Max, name="fingerprint.max")
    identical = bool(low.item() == high.item())
    falling = losses[-1] < losses[0]
    if hvd.rank() == 0:
        print(f"final weights {'identical' if identical else 'DIFFERENT'} on all {hvd.size()} "
              f"ranks; loss {'fell' if falling else 'did NOT fall'} from {losses[0]:.4f} to "
              f"{losses[-1]:.4f}", flush=True)
    hvd.shutdown()
    sys.exit(0 if identical and falling else 1)


if __name__ == "__main__":
    main()
