#!/usr/bin/env python3
"""Elastic data-parallel training with chorus.torch, written as a Horovod elastic script is
(only the import differs): the job survives a lost host and takes in new ones, going on from
its last commit. Run it under the elastic driver:

    chorusrun --elastic --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh \\
        /usr/bin/python3 examples/pytorch_elastic.py
    chorusrun --elastic -np 4 /usr/bin/python3 examples/pytorch_elastic.py   # this machine

Rank 0 prints each epoch's loss and, at the end, whether every rank holds the same weights.
docs/elastic.md describes what happens when hosts change."""
import argparse
import hashlib
import sys

import torch
import torch.nn.functional as F

import chorus.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--samples", type=int, default=4096)
parser.add_argument("--batches-per-commit", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.05, help="per rank (scaled by the ranks)")
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(1234)  # the same synthetic dataset on every rank
features = torch.randn(args.samples, 20, generator=generator)
centers = torch.randn(3, 20, generator=generator) * 2
dataset = torch.utils.data.TensorDataset(features, torch.cdist(features, centers).argmin(dim=1))

model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
# Splits what is left of an epoch among the ranks there are, after every change of hosts.
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                             sampler=state.sampler)
        total, batches = 0.0, 0
        for batch_index, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
            state.sampler.record_batch(batch_index, args.batch_size)
            if batch_index % args.batches_per_commit == 0:
                state.commit()  # where the job goes on from if a host fails
        mean = hvd.allreduce(torch.tensor(total / max(batches, 1)), name="epoch_loss").item()
        if hvd.rank() == 0:
            print(f"epoch {state.epoch + 1}: loss {mean:.4f} on {hvd.size()} ranks", flush=True)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


def on_hosts_changed():
    """The job runs on a new number of ranks: scale the learning rate to it."""
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
state.register_reset_callbacks([on_hosts_changed])
train(state)

digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
identical = len(set(hvd.allgather_object(digest.hexdigest()))) == 1
if hvd.rank() == 0:
    print(f"final weights {'identical' if identical else 'DIFFERENT'} on all {hvd.size()} ranks",
          flush=True)
sys.exit(0 if identical else 1)
