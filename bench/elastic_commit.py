#!/usr/bin/env python3
"""What an elastic commit costs: hvd.elastic.TorchState.commit() for a torchvision model and its
SGD-with-momentum state (ResNet-50 by default: 25.6 M parameters, about 205 MB of model and
optimizer state), against a training step of the same model, on the same ranks.

A commit saves the state in memory (a deep copy, as Horovod's does), writes it to the commit
store by one rank per host (torch.save into CHORUS_ELASTIC_STORE, /dev/shm under chorusrun
--elastic) and, under the driver, agrees with the other ranks on host updates (one small
broadcast). The figure that matters is the commit's share of the steps between two commits.

Run under the elastic driver, so that every part of the commit runs as in a job:
    chorusrun --elastic -np 2 -H localhost:2 /usr/bin/python3 bench/elastic_commit.py
Rank 0 prints one line per phase (medians over --repeats, each the slowest rank's) and
    result: model=resnet50 np=2 step_ms=... commit_ms=... commit_every=10 share=...%"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision.models

import chorus.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="resnet50")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--commit-every", type=int, default=10)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()

hvd.init()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
model = getattr(torchvision.models, args.model)()
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
    named_parameters=model.named_parameters())
images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
labels = torch.randint(0, 1000, (args.batch_size,))


def slowest(seconds):
    """The slowest rank's time: what every rank waits for."""
    return max(hvd.allgather_object(seconds))


def step():
    optimizer.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()


@hvd.elastic.run
def measure(state):
    step()  # momentum buffers exist from the first step on
    steps, commits = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        step()
        steps.append(slowest(time.perf_counter() - started))
        started = time.perf_counter()
        state.commit()
        commits.append(slowest(time.perf_counter() - started))
    return statistics.median(steps), statistics.median(commits)


state = hvd.elastic.TorchState(model, optimizer, batch=0)
step_s, commit_s = measure(state)
parameters = sum(p.numel() for p in model.parameters())
if hvd.rank() == 0:
    share = commit_s / (args.commit_every * step_s)
    print(f"model {args.model}: {parameters / 1e6:.1f} M parameters, batch {args.batch_size} "
          f"per rank, {hvd.size()} ranks, {args.threads} thread(s) each")
    print(f"step (median of {args.repeats}, slowest rank): {step_s * 1e3:.0f} ms")
    print(f"commit (median of {args.repeats}, slowest rank): {commit_s * 1e3:.0f} ms")
    print(f"result: model={args.model} np={hvd.size()} step_ms={step_s * 1e3:.0f} "
          f"commit_ms={commit_s * 1e3:.0f} commit_every={args.commit_every} "
          f"share={share * 100:.2f}%", flush=True)
