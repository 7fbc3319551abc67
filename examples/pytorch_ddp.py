#!/usr/bin/env python3
"""A torch.distributed training script as PyTorch users write it (DistributedDataParallel,
DistributedSampler), on chorus's backend: the only chorus line is the import. A small network
learns y = A x on synthetic data; at the end every rank checks that its weights are identical to
every other rank's and that the loss fell, and rank 0 prints both verdicts.

    chorusrun -np 4 /usr/bin/python3 examples/pytorch_ddp.py [--epochs 3] [--backend chorus]

(--backend gloo runs the same script on gloo, started by torchrun or with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set.)"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import chorus.torch  # noqa: F401  (registers the backend "chorus")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--backend", default="chorus")
    args = parser.parse_args()
    dist.init_process_group(backend=args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    truth = torch.randn(4, 16)
    inputs = torch.randn(args.samples, 16)
    dataset = TensorDataset(inputs, inputs @ truth.t())
    sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(x), len(x)])
        dist.all_reduce(total)
        losses.append((total[0] / total[1]).item())
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(copies, flat)
    identical = all(torch.equal(c, flat) for c in copies)
    fell = len(losses) < 2 or losses[-1] < losses[0]
    if rank == 0:
        print(f"backend {dist.get_backend()}: final weights "
              f"{'identical' if identical else 'DIFFERENT'} on all {size} ranks; loss "
              f"{'fell' if fell else 'DID NOT FALL'} from {losses[0]:.4f} to {losses[-1]:.4f}",
              flush=True)
    dist.destroy_process_group()
    sys.exit(0 if identical and fell else 1)


if __name__ == "__main__":
    main()
