#!/usr/bin/env python3
"""The usual synthetic benchmark of data-parallel training: a torchvision model (no pretrained
weights) on random images, warm-up batches, then timed iterations of several batches; images/s
per rank and in total. The same script runs with chorus.torch's DistributedOptimizer (as a
Horovod script would), with torch.nn.parallel.DistributedDataParallel over gloo ("ddp"), or with
DistributedDataParallel over chorus's torch.distributed backend ("ddp-chorus"), so that they can
be compared on the same machine.

Run: mpirun -np 2 /usr/bin/python3 examples/pytorch_synthetic_benchmark.py [--backend ddp]
Rank 0's last line is "result: backend=... model=... np=... step_ms=... img_per_s_total=..."
(bench/synthetic_vs_ddp.py runs the backends at several rank counts and tabulates them)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:
    import torchvision.models
except ImportError:
    sys.exit("pytorch_synthetic_benchmark: needs torchvision (apt-get install python3-torchvision)")


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["chorus", "ddp", "ddp-chorus"], default="chorus")
    parser.add_argument("--model", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=3)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads per rank (default: the host's cores / its ranks)")
    parser.add_argument("--master-port", type=int, default=29511, help="ddp only")
    return parser.parse_args()


def launcher_rank_and_size():
    """The rank, size and local size that mpirun (Open MPI) or Slurm gave this process."""
    environment = os.environ
    for prefix in ("OMPI_COMM_WORLD_", "PMI_", "SLURM_"):
        rank = environment.get(prefix + "RANK", environment.get(prefix + "PROCID"))
        size = environment.get(prefix + "SIZE", environment.get(prefix + "NTASKS"))
        if rank is not None and size is not None:
            local = environment.get("OMPI_COMM_WORLD_LOCAL_SIZE",
                                    environment.get("MPI_LOCALNRANKS", size))
            return int(rank), int(size), int(local)
    return 0, 1, 1


class Backend:
    """What differs between chorus and DDP: start-up, wrapping and collectives for the report."""

    def __init__(self, name, model, args):
        self.name = name
        rank, size, self.local_size = launcher_rank_and_size()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if name == "chorus":
            import chorus.torch as hvd
            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            self.optimizer = hvd.DistributedOptimizer(
                optimizer, named_parameters=model.named_parameters())
            self.model = model
        elif name == "ddp-chorus":
            import chorus.torch  # noqa: F401  (registers the backend "chorus")
            import torch.distributed as dist
            dist.init_process_group("chorus")  # rank and size from the MPI job
            self.dist = dist
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            self.model = torch.nn.parallel.DistributedDataParallel(model)
            self.optimizer = optimizer
        else:
            import torch.distributed as dist
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(args.master_port))
            dist.init_process_group("gloo", rank=rank, world_size=size)
            self.dist = dist
            self.rank, self.size = rank, size
            self.model = torch.nn.parallel.DistributedDataParallel(model)
            self.optimizer = optimizer

    def mean_over_ranks(self, value):
        tensor = torch.tensor([float(value)], dtype=torch.float64)
        if self.name == "chorus":
            return self.hvd.allreduce(tensor, name="benchmark.report", op=self.hvd.Average).item()
        self.dist.all_reduce(tensor)
        return tensor.item() / self.size

    def shutdown(self):
        if self.name == "chorus":
            self.hvd.shutdown()
        elif self.name == "ddp-chorus":
            self.dist.destroy_process_group()
        else:
            # A barrier rather than destroy_process_group: torch 1.13's gloo teardown spun
            # forever on rank 0 here once its peer had exited.
            self.dist.barrier()


def main():
    args = parse_arguments()
    _, _, local_size = launcher_rank_and_size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_size)
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    model = getattr(torchvision.models, args.model)(weights=None)
    backend = Backend(args.backend, model, args)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))

    losses = []

    def train_step():
        backend.optimizer.zero_grad()
        loss = F.cross_entropy(backend.model(data), target)
        loss.backward()
        backend.optimizer.step()
        losses.append(loss.item())

    for _ in range(args.num_warmup_batches):
        train_step()
    step_times = []
    for _ in range(args.num_iters):
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            train_step()
        step_times.append((time.perf_counter() - start) / args.num_batches_per_iter)
    step = statistics.median(step_times)
    # The slowest rank sets the pace; report the mean of every rank's median step.
    mean_step = backend.mean_over_ranks(step)
    per_rank = args.batch_size / mean_step
    if backend.rank == 0:
        print(f"# {args.model}, batch {args.batch_size} x {args.image_size}px per rank, "
              f"{backend.size} ranks, {threads} torch thread(s) per rank, {args.backend}; "
              f"median of {args.num_iters} iterations of {args.num_batches_per_iter} steps",
              flush=True)
        print(f"result: backend={args.backend} model={args.model} np={backend.size} "
              f"batch={args.batch_size} image={args.image_size} threads={threads} "
              f"step_ms={mean_step * 1e3:.1f} img_per_s_per_rank={per_rank:.2f} "
              f"img_per_s_total={per_rank * backend.size:.2f} last_loss={losses[-1]:.9g}",
              flush=True)
    backend.shutdown()


if __name__ == "__main__":
    main()
