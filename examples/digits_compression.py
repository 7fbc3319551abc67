#!/usr/bin/env python3
"""Data-parallel training on real data with compressed gradients: the handwritten digits of
scikit-learn (1,797 8x8 images, shipped with Debian's python3-sklearn, no download), a fixed
stratified train/test split, a small MLP, hvd.DistributedOptimizer with the compression named on
the command line, with or without error feedback.

Prints, on rank 0, one line a script can read:
  accuracy: compression=int8 error_feedback=on seed=1 epochs=30 ranks=4 test=0.9711 loss=0.0712
and, with --check-floor X, exits 1 when the test accuracy is below X. Every rank must end with
bit-identical weights (checked: a rank that differs fails the run).

Run: mpirun -np 4 /usr/bin/python3 examples/digits_compression.py --compression int8
Table of 5 seeds x every compression: bench/compression-accuracy."""
import argparse
import hashlib
import sys

import torch

import chorus.torch as hvd

COMPRESSIONS = ("none", "fp16", "bf16", "int8", "int4", "topk", "powersgd")


def digits_split():
    """The digits as float32 tensors, pixels scaled to [0, 1]; 75% train, 25% test, stratified,
    the same split for every run (random_state=0)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        print("scikit-learn is missing (Debian: apt-get install python3-sklearn)", file=sys.stderr)
        sys.exit(77)  # a skip, for meson
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data / 16.0, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
    as_x = lambda a: torch.tensor(a, dtype=torch.float32)
    as_y = lambda a: torch.tensor(a, dtype=torch.int64)
    return as_x(x_train), as_y(y_train), as_x(x_test), as_y(y_test)


def compressor(args):
    if args.compression == "topk":
        return hvd.Compression.topk(args.ratio)
    if args.compression == "powersgd":
        return hvd.Compression.powersgd(args.powersgd_rank)
    return getattr(hvd.Compression, args.compression)


def weights_digest(model):
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none")
    parser.add_argument("--no-error-feedback", dest="error_feedback", action="store_false",
                        help="leave out error feedback (on by default for int8, int4, topk and "
                             "powersgd)")
    parser.add_argument("--ratio", type=float, default=0.01, help="topk: fraction sent")
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.02, help="per rank (scaled by ranks)")
    parser.add_argument("--check-floor", type=float, default=None,
                        help="exit 1 when the test accuracy is below this")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)  # the same initial weights everywhere, for a given seed
    x_train, y_train, x_test, y_test = digits_split()
    model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    options = {}
    if args.compression in ("int8", "int4", "topk", "powersgd"):
        options["error_feedback"] = args.error_feedback
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compressor(args), **options)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    # Each epoch the same permutation on every rank (seeded by seed and epoch); rank r takes
    # every size-th sample of it, so the ranks together see each sample once per epoch.
    loss = torch.tensor(0.0)
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train),
                               generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        mine = order[hvd.rank()::hvd.size()]
        batches = len(mine) // args.batch_size  # whole batches only: every rank the same number
        batches = int(hvd.allreduce(torch.tensor(batches), op=hvd.Min, name="batches"))
        model.train()
        for b in range(batches):
            index = mine[b * args.batch_size:(b + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_train[index]), y_train[index])
            loss.backward()
            optimizer.step()

    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        final_loss = hvd.allreduce(loss.detach(), name="final_loss").item()
    digests = hvd.allgather_object(weights_digest(model))
    if len(set(digests)) != 1:
        print(f"rank {hvd.rank()}: the ranks' weights differ: {digests}", file=sys.stderr)
        sys.exit(1)
    if hvd.rank() == 0:
        feedback = ("on" if args.error_feedback else "off") if options else "-"
        detail = {"topk": f" ratio={args.ratio}",
                  "powersgd": f" rank={args.powersgd_rank}"}.get(args.compression, "")
        print(f"accuracy: compression={args.compression}{detail} error_feedback={feedback} "
              f"seed={args.seed} epochs={args.epochs} ranks={hvd.size()} test={accuracy:.4f} "
              f"loss={final_loss:.4f}", flush=True)
    if args.check_floor is not None and accuracy < args.check_floor:
        print(f"rank {hvd.rank()}: test accuracy {accuracy:.4f} below the floor "
              f"{args.check_floor}", file=sys.stderr)
        sys.exit(1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
