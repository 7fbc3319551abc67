#!/usr/bin/env python3
"""What a Horovod PyTorch script reaches for, used as such a script would, under mpirun at np=2
and np=3: init twice, ranks that use different layers, names, ops chorus does not have, barrier,
objects, grouped calls, compressors, synchronize/skip_synchronize, sparse tensors and gradients.
The script does not call shutdown(): chorus must shut down at exit, else mpirun fails the job.
Prints 'N passed, N failed' from rank 0 and exits non-zero on any failure."""
import sys
import time
import warnings

import torch

import chorus
import chorus.torch as hvd
from checks import check, counts, raises



class TwoBranches(torch.nn.Module):
    """Rank r uses branch r % 2 only: the other branch gets no gradient on that rank."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 1)
        self.b = torch.nn.Linear(3, 1)

    def forward(self, x, branch):
        return self.a(x) if branch == 0 else self.b(x)


def broadcasts_of_parameters(rank):
    """broadcast_parameters takes named_parameters(), a list of them, parameters() and a
    state_dict(), as Horovod's scripts pass them."""
    for form in ("named", "named list", "plain", "plain list", "state_dict"):
        torch.manual_seed(rank)  # different weights on every rank
        model = torch.nn.Linear(3, 2)
        params = {"named": model.named_parameters, "plain": model.parameters,
                  "named list": lambda: list(model.named_parameters()),
                  "plain list": lambda: list(model.parameters()),
                  "state_dict": model.state_dict}[form]()
        hvd.broadcast_parameters(params, root_rank=0)
        torch.manual_seed(0)
        reference = torch.nn.Linear(3, 2)
        check(torch.equal(model.weight, reference.weight) and
              torch.equal(model.bias, reference.bias),
              f"broadcast_parameters({form}) gives rank 0's weights")
    raises(ValueError, lambda: hvd.broadcast_parameters(torch.ones(2), 0),
           "broadcast_parameters of a bare tensor")


def in_place_on_views(rank, size):
    """In-place calls on tensors that are not contiguous (a transposed view, every other row)
    write their results into the viewed memory."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank
    view = base.t()
    result = hvd.allreduce_(view, op=hvd.Sum, name="view.allreduce_")
    expected = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * size +
                sum(range(size))).t()
    check(result is view and torch.equal(view, expected) and torch.equal(base.t(), expected),
          f"allreduce_ of a transposed view: {base.tolist()}")
    rows = torch.full((6, 2), float(rank))
    every_other = rows[::2]
    hvd.broadcast_(every_other, root_rank=size - 1, name="view.broadcast_")
    check(torch.equal(rows[::2], torch.full((3, 2), float(size - 1))) and
          torch.equal(rows[1::2], torch.full((3, 2), float(rank))),
          f"broadcast_ of every other row: {rows.tolist()}")
    pair = [torch.ones(2, 3).t(), torch.ones(4)]
    hvd.grouped_allreduce_(pair, op=hvd.Sum, name="view.grouped")
    check(torch.equal(pair[0], torch.full((3, 2), float(size))) and
          torch.equal(pair[1], torch.full((4,), float(size))),
          "grouped_allreduce_ with a transposed member")


def unused_parameters(rank, size):
    torch.manual_seed(0)
    model = TwoBranches()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters())
    x = torch.ones(2, 3)
    optimizer.zero_grad()
    model(x, rank % 2).sum().backward()
    optimizer.step()
    # d(sum)/d(weight) = 2 per element on a rank that used the branch, 0 elsewhere; averaged.
    users_a = sum(1 for r in range(size) if r % 2 == 0)
    users_b = size - users_a
    check(torch.allclose(model.a.weight.grad, torch.full((1, 3), 2.0 * users_a / size)),
          f"unused branch a averaged with zeros: {model.a.weight.grad.tolist()}")
    check(torch.allclose(model.b.weight.grad, torch.full((1, 3), 2.0 * users_b / size)),
          f"unused branch b averaged with zeros: {model.b.weight.grad.tolist()}")
    # Without named_parameters the names are the same on every rank.
    plain = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0))
    plain.zero_grad()
    model(x, rank % 2).sum().backward()
    plain.step()
    check(torch.allclose(model.a.weight.grad, torch.full((1, 3), 2.0 * users_a / size)),
          "without named_parameters")


def adasum_optimizer(rank, size):
    """DistributedOptimizer(op=Adasum): each rank's SGD update, combined by Adasum. At np=2 the
    result is checked against Adasum computed here in double from both ranks' updates; at every
    np the ranks end alike and equal to the updates' Adasum allreduce."""
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 1, bias=False).double()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = model.weight.detach().clone()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Adasum)
    x = torch.arange(4, dtype=torch.float64).reshape(1, 4) * (rank + 1) + rank
    optimizer.zero_grad()
    model(x).sum().backward()
    local_update = -0.5 * model.weight.grad.detach().clone()
    optimizer.step()
    combined = model.weight.detach() - start
    updates = hvd.allgather(local_update, name="adasum.updates")
    if size == 2:
        a, b = updates[0], updates[1]
        dot = float((a * b).sum())
        expected = (1 - dot / (2 * float((a * a).sum()))) * a + \
                   (1 - dot / (2 * float((b * b).sum()))) * b
        check(torch.allclose(combined, expected.reshape(combined.shape), atol=1e-12),
              f"Adasum optimizer at np=2: {combined.tolist()} vs {expected.tolist()}")
    reference = hvd.allreduce(local_update, op=hvd.Adasum, name="adasum.reference")
    check(torch.allclose(combined, reference, atol=1e-12),
          f"Adasum optimizer = Adasum of the updates: {combined.tolist()} {reference.tolist()}")
    everywhere = hvd.allgather(model.weight.detach(), name="adasum.weights")
    check(all(torch.equal(everywhere[0], everywhere[r]) for r in range(size)),
          "the Adasum optimizer leaves every rank alike")


def optimizer_errors_and_options():
    model = torch.nn.Linear(3, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=[("w", model.weight), ("w", model.bias)]), "duplicate names")
    raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=[("w", model.weight)]), "a parameter missing from named_parameters")
    raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, op=hvd.Adasum,
                                                        compression=hvd.Compression.fp16),
           "DistributedOptimizer(op=Adasum) with compression")
    raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, num_groups=-1), "num_groups=-1")
    # Horovod's order of arguments, positionally: ..., gradient_predivide_factor, num_groups,
    # groups, sparse_as_dense.
    other = torch.nn.Linear(3, 2)  # its own model: two optimizers would both hook one model
    hvd.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=0.1),
                             other.named_parameters(), hvd.Compression.none, 1, hvd.Average, 1.0,
                             2, None, True)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.fp16)
    optimizer.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    optimizer.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with optimizer.skip_synchronize():
            optimizer.step()
        check(not caught, "no warning with skip_synchronize")
    optimizer.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    optimizer.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer.step()
        check(any("skip_synchronize" in str(w.message) for w in caught),
              "a warning when step() follows synchronize() without skip_synchronize")
    # Sparse gradients (an embedding with sparse=True) as dense.
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    hvd.broadcast_parameters(embedding.state_dict(), root_rank=0)
    sparse = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.0),
                                      named_parameters=embedding.named_parameters(),
                                      sparse_as_dense=True)
    sparse.zero_grad()
    embedding(torch.tensor([hvd.rank() % 10])).sum().backward()
    sparse.step()
    expected = torch.zeros(10, 4)
    for r in range(hvd.size()):
        expected[r % 10] += 1.0 / hvd.size()
    # As Horovod, the averaged gradient is made sparse again after the allreduce.
    check(embedding.weight.grad.is_sparse and
          torch.allclose(embedding.weight.grad.to_dense(), expected),
          "sparse_as_dense gradients averaged, sparse again")


def sparse_rows(r):
    """The embedding rows rank r looks up: one twice, so that its gradient has a duplicate."""
    return [r % 10, (3 * r + 1) % 10, r % 10]


def sparse(rank, size):
    """Sparse tensors and gradients kept sparse, as Horovod keeps them by default."""
    def dense_of(r):
        dense = torch.zeros(6, 2)
        dense[r % 6] = r + 1.0
        dense[(r + 2) % 6, 1] += 0.5
        return dense
    expected = sum(dense_of(r) for r in range(size))
    summed = hvd.synchronize(hvd.sparse_allreduce_async(dense_of(rank).to_sparse(),
                                                        name="sparse.sum", op=hvd.Sum))
    check(summed.is_sparse and torch.allclose(summed.to_dense(), expected),
          f"sparse_allreduce_async sum: {summed.to_dense().tolist()}")
    averaged = hvd.sparse_allreduce_async(dense_of(rank).to_sparse(), name="sparse.average",
                                          op=hvd.Average)()
    check(torch.allclose(averaged.to_dense(), expected / size), "sparse_allreduce_async average")
    raises(ValueError, lambda: hvd.sparse_allreduce_async(dense_of(rank).to_sparse(),
                                                          "sparse.min", hvd.Min),
           "sparse_allreduce_async refuses op Min")
    check(hvd.is_homogeneous(), "one host: homogeneous")

    torch.manual_seed(1)
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    hvd.broadcast_parameters(embedding.state_dict(), root_rank=0)
    start = embedding.weight.detach().clone()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.5),
                                         named_parameters=embedding.named_parameters())
    optimizer.zero_grad()
    embedding(torch.tensor(sparse_rows(rank))).sum().backward()
    optimizer.step()
    gradient = torch.zeros(10, 4)
    for r in range(size):
        for row in sparse_rows(r):
            gradient[row] += 1.0 / size
    check(embedding.weight.grad.is_sparse and
          torch.allclose(embedding.weight.grad.to_dense(), gradient),
          "sparse gradients allgathered and averaged, duplicates summed")
    check(torch.allclose(embedding.weight.detach(), start - 0.5 * gradient),
          "the step applied the averaged sparse gradient")
    # Rank 0 does not use the embedding this step: it contributes no entries.
    optimizer.zero_grad(set_to_none=True)
    if rank != 0:
        embedding(torch.tensor(sparse_rows(rank))).sum().backward()
    optimizer.step()
    gradient = torch.zeros(10, 4)
    for r in range(1, size):
        for row in sparse_rows(r):
            gradient[row] += 1.0 / size
    check(torch.allclose(embedding.weight.grad.to_dense(), gradient),
          f"an unused sparse parameter contributes no entries: "
          f"{embedding.weight.grad.to_dense().tolist()}")


def empty_tensors(rank, size):
    """Empty tensors, whose data pointer torch leaves NULL, in every collective (an allreduce
    of one failed with CHORUS_ERR_OUT_OF_MEMORY until chorus gave them a buffer of its own)."""
    empty = torch.zeros(0, 5, dtype=torch.float64)
    check(hvd.allreduce(empty, name="x.empty.allreduce").shape == (0, 5), "allreduce of 0 x 5")
    pair = hvd.grouped_allreduce([torch.zeros(0), torch.ones(3)], op=hvd.Sum,
                                 name="x.empty.grouped")
    check(pair[0].shape == (0,) and torch.equal(pair[1], torch.full((3,), float(size))),
          f"grouped allreduce of an empty tensor and another: {pair}")
    check(hvd.broadcast(torch.zeros(0), root_rank=size - 1, name="x.empty.broadcast").shape ==
          (0,), "broadcast of an empty tensor")
    gathered = hvd.allgather(torch.full((rank % 2, 2), float(rank)), name="x.empty.allgather")
    check(torch.equal(gathered, torch.cat([torch.full((r % 2, 2), float(r))
                                           for r in range(size)])),
          f"allgather where even ranks give no rows: {gathered.tolist()}")
    check(hvd.alltoall(torch.zeros(0), name="x.empty.alltoall").shape == (0,),
          "alltoall of an empty tensor")
    check(hvd.reducescatter(torch.zeros(0), name="x.empty.reducescatter").shape == (0,),
          "reducescatter of an empty tensor")


def collectives(rank, size):
    t = torch.full((3,), float(rank + 1))
    total = sum(range(1, size + 1))
    # Adasum: orthogonal contributions add up, equal ones stay as they are.
    mine = torch.zeros(size, dtype=torch.float64)
    mine[rank] = rank + 1.0
    combined = hvd.allreduce(mine, op=hvd.Adasum, name="x.adasum.orthogonal")
    check(torch.allclose(combined, torch.arange(1.0, size + 1, dtype=torch.float64)),
          f"Adasum of orthogonal vectors: {combined.tolist()}")
    same = hvd.allreduce(torch.tensor([3.0, -4.0]), op=hvd.Adasum, name="x.adasum.equal")
    check(torch.allclose(same, torch.tensor([3.0, -4.0])), f"Adasum of equal vectors: {same}")
    raises(ValueError,
           lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum,
                                 name="x.adasum.int"), "Adasum of integers")
    raises(ValueError, lambda: hvd.allreduce(t, op="max", name="x.bogus"), "an unknown op")
    raises(ValueError, lambda: hvd.allreduce(t, average=True, op=hvd.Sum, name="x.both"),
           "average= and op= together")
    hvd.barrier()
    hvd.barrier()
    check(True, "barrier twice")
    objects = hvd.allgather_object({"rank": rank, "items": list(range(rank))})
    check(objects == [{"rank": r, "items": list(range(r))} for r in range(size)],
          f"allgather_object: {objects}")
    pair = [torch.full((2,), float(rank)), torch.full((3,), 1.0)]
    result = hvd.grouped_allreduce_(pair, op=hvd.Sum, name="x.grouped_")
    check(result is pair and torch.allclose(pair[0], torch.full((2,), float(sum(range(size)))))
          and torch.allclose(pair[1], torch.full((3,), float(size))), "grouped_allreduce_")
    gathered = hvd.grouped_allgather([torch.full((rank + 1,), float(rank)),
                                      torch.full((1, 2), float(rank))], name="x.grouped_gather")
    check(gathered[0].shape == (size * (size + 1) // 2,) and gathered[1].shape == (size, 2),
          f"grouped_allgather shapes {[tuple(g.shape) for g in gathered]}")
    check(torch.equal(gathered[0], torch.cat([torch.full((r + 1,), float(r))
                                              for r in range(size)])) and
          torch.equal(gathered[1], torch.arange(size, dtype=torch.float32).repeat_interleave(2)
                      .reshape(size, 2)),
          f"grouped_allgather values {[g.tolist() for g in gathered]}")
    handle = hvd.grouped_allgather_async([torch.full((1,), rank, dtype=torch.int64),
                                          torch.zeros(rank % 2, 3)], name="x.grouped_gather.async")
    pieces = hvd.synchronize(handle)
    check(pieces[0].tolist() == list(range(size)) and
          pieces[1].shape == (sum(r % 2 for r in range(size)), 3),
          f"grouped_allgather_async {[tuple(p.shape) for p in pieces]}")
    half, context = hvd.Compression.fp16.compress(t)
    check(half.dtype == torch.float16 and
          torch.equal(hvd.Compression.fp16.decompress(half, context), t), "fp16 compressor")
    check(hvd.allreduce(t, op=hvd.Sum, name="x.fp16", compression=hvd.Compression.fp16)
          .allclose(torch.full((3,), float(total))), "allreduce with Compression.fp16")
    # int8 / int4: quantized by chorus on the wire, within chorus.h's bound of the sum
    # (nearest rounding: each rank's block scale / 2 and the sum's, here of values rank..rank+2).
    values = torch.stack([torch.arange(r, r + 300, dtype=torch.float32) / 7 for r in range(size)])
    exact = values.sum(0)
    mine = values[rank].clone()
    for compression, levels in ((hvd.Compression.int8, 255), (hvd.Compression.int4, 15)):
        got = hvd.allreduce(mine, op=hvd.Sum, name=f"x.{compression.__name__}",
                            compression=compression)
        bound = 0.0
        for start in range(0, 300, 256):
            block = slice(start, start + 256)
            scales = [(v[block].max() - v[block].min()).item() / levels for v in values]
            summed = (exact[block].max() - exact[block].min()).item() / levels
            bound = max(bound, (summed + sum(scales)) / 2 * 1.0001 + 1e-5)
        check(float((got - exact).abs().max()) <= bound and not torch.equal(got, exact),
              f"allreduce with {compression.__name__}: error "
              f"{float((got - exact).abs().max())}, bound {bound}")
    raises(ValueError, lambda: hvd.allreduce(mine, op=hvd.Max, name="x.int8.max",
                                             compression=hvd.Compression.int8),
           "int8 compression with Max")
    check(hvd.mpi_built() and hvd.mpi_enabled() and not hvd.gloo_built() and
          type(hvd.nccl_built()) is int, "built queries")
    check(issubclass(hvd.HorovodInternalError, Exception), "HorovodInternalError")
    # join() returns the rank that joined last: the same on every rank, and the slowest one.
    if rank == size - 1:
        import time
        time.sleep(0.3)
    last = hvd.join()
    everyone = hvd.allgather_object(last, name="x.join.last")
    check(everyone == [size - 1] * size, f"join() returned {everyone}")


def check_process_sets(rank, size):
    """Sets of some ranks, as Horovod's process-set tests use them: the even and the odd ranks,
    each collective among the members only, checked against what the members contributed."""
    evens = [r for r in range(size) if r % 2 == 0]
    odds = [r for r in range(size) if r % 2 == 1]
    even_set = hvd.add_process_set(evens)
    odd_set = hvd.add_process_set(hvd.ProcessSet(odds)) if odds else None
    mine, members = (even_set, evens) if rank % 2 == 0 else (odd_set, odds)
    me = members.index(rank)
    check(mine.rank() == me and mine.size() == len(members) and mine.included(),
          f"{mine}: rank {mine.rank()}, size {mine.size()}")
    other = odd_set if rank % 2 == 0 else even_set
    if other is not None:
        check(other.rank() == -1 and not other.included(), f"{other} excludes rank {rank}")
        raises(chorus.ChorusError, lambda: hvd.allreduce(torch.ones(1), name="ps.outsider",
                                                         process_set=other),
               "an allreduce in a set this rank is not in")
    # The same name in both sets at once: each set's names are its own.
    total = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, name="ps.sum",
                          process_set=mine)
    check(total.item() == float(sum(members)), f"allreduce in {mine}: {total.item()}")
    x = torch.tensor([float(rank)], requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, name="ps.grad", process_set=mine).backward()
    check(x.grad.item() == float(len(members)), f"allreduce's gradient in {mine}: {x.grad}")
    gathered = hvd.allgather(torch.full((me + 1, 2), float(rank)), name="ps.gather",
                             process_set=mine)
    expected = torch.cat([torch.full((i + 1, 2), float(r)) for i, r in enumerate(members)])
    check(torch.equal(gathered, expected), f"allgather in {mine}: {gathered.tolist()}")
    root = members[-1]
    value = hvd.broadcast(torch.tensor([float(rank)]), root, name="ps.bcast", process_set=mine)
    check(value.item() == float(root), f"broadcast from {root} in {mine}: {value.item()}")
    block = hvd.reducescatter(torch.ones(len(members) * 2, 1), op=hvd.Sum, name="ps.rs",
                              process_set=mine)
    check(torch.equal(block, torch.full((2, 1), float(len(members)))),
          f"reducescatter in {mine}: {block.tolist()}")
    splits = [i + 1 for i in range(len(members))]
    rows = torch.cat([torch.full((s,), float(rank)) for s in splits])
    received, received_splits = hvd.alltoall(rows, splits=splits, name="ps.a2a",
                                             process_set=mine)
    check(received_splits.tolist() == [me + 1] * len(members) and
          received.tolist() == [float(r) for r in members for _ in range(me + 1)],
          f"alltoall in {mine}: {received.tolist()} {received_splits.tolist()}")
    hvd.barrier(process_set=mine)
    objects = hvd.allgather_object({"rank": rank}, name="ps.objects", process_set=mine)
    check(objects == [{"rank": r} for r in members], f"allgather_object in {mine}: {objects}")
    model = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         process_set=mine)
    model(torch.full((1, 2), float(rank + 1))).sum().backward()
    optimizer.step()
    weights = hvd.allgather(model.weight.detach(), name="ps.weights", process_set=mine)
    check(all(torch.equal(weights[0], weights[i]) for i in range(len(members))),
          f"DistributedOptimizer(process_set={mine}) leaves its members alike")
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), name="ps.unadded",
                                             process_set=hvd.ProcessSet([0])),
           "a ProcessSet that was never added")
    check(hvd.remove_process_set(even_set), "remove_process_set returns True")
    if odd_set is not None:
        hvd.remove_process_set(odd_set)
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), name="ps.removed",
                                             process_set=even_set),
           "a removed ProcessSet")


def reducescatters(rank, size):
    """reducescatter against the reduction of every rank's known input, split as Horovod splits
    rows (the first rows % size ranks one more), for row counts that do not divide."""
    def rank_input(r, rows, dtype):
        generator = torch.Generator().manual_seed(1000 * rows + r)
        return torch.randint(-20, 20, (rows, 3), generator=generator).to(dtype)

    for rows in (0, 1, size - 1 if size > 1 else 2, 7, 13):
        start = rank * (rows // size) + min(rank, rows % size)
        mine = rows // size + (1 if rank < rows % size else 0)
        inputs = [rank_input(r, rows, torch.float64) for r in range(size)]
        for op, combine in ((hvd.Sum, lambda t: t.sum(0)), (hvd.Average, lambda t: t.mean(0)),
                            (hvd.Min, lambda t: t.min(0).values),
                            (hvd.Max, lambda t: t.max(0).values)):
            expected = combine(torch.stack(inputs))[start:start + mine]
            for dtype in (torch.float32, torch.int32):
                if dtype == torch.int32 and op == hvd.Average:
                    continue
                got = hvd.reducescatter(rank_input(rank, rows, dtype), op=op,
                                        name=f"rs.{rows}.{op}.{dtype}")
                check(got.dtype == dtype and tuple(got.shape) == (mine, 3) and
                      torch.allclose(got.double(), expected),
                      f"reducescatter rows={rows} op={op} {dtype}: {got.tolist()} against "
                      f"{expected.tolist()}")
    scaled = hvd.reducescatter(torch.ones(2 * size, 2), op=hvd.Sum, prescale_factor=0.5,
                               postscale_factor=3.0, name="rs.scaled")
    check(torch.allclose(scaled, torch.full((2, 2), 1.5 * size)), f"scaled {scaled.tolist()}")
    half = hvd.reducescatter(torch.full((size, 4), 0.5), op=hvd.Sum, name="rs.fp16",
                             compression=hvd.Compression.fp16)
    check(half.dtype == torch.float32 and torch.allclose(half, torch.full((1, 4), 0.5 * size)),
          f"reducescatter with Compression.fp16: {half.dtype} {half.tolist()}")
    halves = hvd.grouped_reducescatter([torch.full((2 * size,), 0.5), torch.ones(size, 3)],
                                       op=hvd.Sum, name="rs.grouped.fp16",
                                       compression=hvd.Compression.fp16)
    check(halves[0].dtype == torch.float32 and
          torch.equal(halves[0], torch.full((2,), 0.5 * size)) and
          torch.equal(halves[1], torch.full((1, 3), float(size))),
          f"grouped_reducescatter with Compression.fp16 {[h.tolist() for h in halves]}")
    blocks = hvd.grouped_reducescatter([torch.full((size, 2), float(rank)),
                                        torch.full((2 * size + 1,), 1.0)], op=hvd.Sum,
                                       name="rs.grouped")
    check(torch.allclose(blocks[0], torch.full((1, 2), float(sum(range(size))))) and
          blocks[1].shape == (2 + (1 if rank == 0 else 0),) and
          torch.allclose(blocks[1], torch.full_like(blocks[1], float(size))),
          f"grouped_reducescatter {[b.tolist() for b in blocks]}")
    handle = hvd.reducescatter_async(torch.ones(size, 1), name="rs.async")
    check(torch.allclose(hvd.synchronize(handle), torch.ones(1, 1)), "reducescatter_async")
    # Horovod's order of arguments, positionally (the async calls take no compression there).
    handle = hvd.reducescatter_async(torch.ones(size, 1), "rs.async.positional", hvd.Sum)
    check(torch.allclose(hvd.synchronize(handle), torch.full((1, 1), float(size))),
          "reducescatter_async(tensor, name, op) by position")
    handle = hvd.allreduce_async(torch.ones(2), None, "ar.async.positional", hvd.Sum)
    check(torch.equal(hvd.synchronize(handle), torch.full((2,), float(size))),
          "allreduce_async(tensor, average, name, op) by position")
    ones = [torch.ones(2), torch.ones(3)]
    handle = hvd.grouped_allreduce_async_(ones, None, "gar.async.positional", hvd.Sum, 1.0, 1.0,
                                          hvd.global_process_set)
    hvd.synchronize(handle)
    check(all(torch.equal(t, torch.full_like(t, float(size))) for t in ones),
          "grouped_allreduce_async_(..., process_set) by position")
    raises(ValueError, lambda: hvd.reducescatter(torch.tensor(1.0), name="rs.scalar"),
           "a scalar reducescatter")
    raises(TypeError, lambda: hvd.reducescatter(torch.ones(2), process_set=object(),
                                                name="rs.set"),
           "reducescatter with a process_set that is not a ProcessSet")
    everyone = hvd.add_process_set(list(range(size)))
    check(everyone.size() == size and everyone.rank() == rank and everyone.included(),
          f"a process set of every rank: {everyone}")
    total = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="ps.global",
                          process_set=hvd.global_process_set)
    check(torch.equal(total, torch.full((2,), float(size))), "allreduce(process_set=global)")
    gathered = hvd.allgather(torch.ones(1), name="ps.everyone", process_set=everyone)
    check(gathered.shape == (size,), "allgather with a set of every rank")
    check_process_sets(rank, size)
    raises(ValueError, lambda: hvd.remove_process_set(hvd.global_process_set),
           "removing the global process set")
    try:
        hvd.reducescatter(torch.ones(4 + (rank == 0)), name="rs.mismatch")
        check(size == 1, "a shape mismatch was accepted")
    except hvd.HorovodInternalError as error:
        check("rs.mismatch" in str(error) and "shape" in str(error), f"the mismatch: {error}")
    import numpy
    import chorus.numpy as chorus_numpy
    array = chorus_numpy.reducescatter(numpy.full((size, 2), rank + 1, dtype=numpy.int64),
                                       op=chorus_numpy.Sum, name="rs.numpy")
    check(array.shape == (1, 2) and (array == size * (size + 1) // 2).all(),
          f"chorus.numpy.reducescatter {array.tolist()}")


def alltoalls(rank, size):
    """alltoall with splits that differ per pair (zeros included) against what every sender
    must have sent; received splits; even splits; errors."""
    def rows_for(sender, receiver):
        return (sender + 2 * receiver) % 3

    def block(sender, receiver):
        rows = rows_for(sender, receiver)
        return (torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) +
                1000 * sender + 100 * receiver)

    splits = [rows_for(rank, k) for k in range(size)]
    tensor = torch.cat([block(rank, k) for k in range(size)])
    output, received = hvd.alltoall(tensor, splits=splits, name="a2a.uneven")
    expected = torch.cat([block(k, rank) for k in range(size)])
    check(torch.equal(output, expected) and received.tolist() ==
          [rows_for(k, rank) for k in range(size)] and received.dtype == torch.int32,
          f"alltoall with splits: {output.tolist()} / {received.tolist()}")
    even = hvd.alltoall(torch.arange(2 * size, dtype=torch.int64) + 100 * rank, name="a2a.even")
    check(even.tolist() == [100 * k + 2 * rank + i for k in range(size) for i in range(2)],
          f"alltoall without splits: {even.tolist()}")
    handle = hvd.alltoall_async(tensor, splits=torch.tensor(splits), name="a2a.async")
    output, received = hvd.synchronize(handle)
    check(torch.equal(output, expected), "alltoall_async with a tensor of splits")
    raises(ValueError, lambda: hvd.alltoall(tensor, splits=[1] * (size + 1), name="a2a.len"),
           "splits of the wrong length")
    if size > 1:
        raises(ValueError,
               lambda: hvd.alltoall(torch.ones(2 * size + 1), name="a2a.odd"),
               "rows that do not split evenly")
    message = raises(ValueError,
                     lambda: hvd.alltoall(torch.ones(3), splits=[4] + [0] * (size - 1),
                                          name="a2a.sum"), "splits that do not add up")
    check("a2a.sum" in message, f"the message names the tensor: {message}")
    import numpy
    import chorus.numpy as chorus_numpy
    array, counts = chorus_numpy.alltoall(numpy.full((size, 3), rank, dtype=numpy.int32),
                                          name="a2a.numpy")
    check(array[:, 0].tolist() == list(range(size)) and counts.tolist() == [1] * size,
          f"chorus.numpy.alltoall {array.tolist()} {counts.tolist()}")


def gradients(rank, size):
    """Autograd through the collectives, with Horovod's gradient rules, against the gradients
    worked out by hand from every rank's upstream gradient."""
    x = torch.full((3,), float(rank + 1), requires_grad=True)
    weight = torch.arange(3.0) + 1  # the same on every rank
    (hvd.allreduce(x, op=hvd.Sum, name="g.sum") * weight).sum().backward()
    check(torch.allclose(x.grad, weight * size), f"allreduce sum gradient {x.grad.tolist()}")
    x.grad = None
    (hvd.allreduce(x, name="g.average") * weight).sum().backward()
    check(torch.allclose(x.grad, weight), f"allreduce average gradient {x.grad.tolist()}")
    raises(NotImplementedError, lambda: hvd.allreduce(x, op=hvd.Max, name="g.max"),
           "the gradient of a max allreduce")
    rows = torch.full((rank + 1, 2), float(rank), requires_grad=True)
    gathered = hvd.allgather(rows, name="g.gather")
    scale = torch.arange(gathered.shape[0], dtype=torch.float32).unsqueeze(1) + 1
    (gathered * scale).sum().backward()
    start = rank * (rank + 1) // 2
    # Horovod 0.28.1 averages the upstream gradients (the same on every rank here).
    check(torch.allclose(rows.grad, scale[start:start + rank + 1].expand(rank + 1, 2)),
          f"allgather gradient {rows.grad.tolist()}")
    root = size - 1
    y = torch.full((2,), float(rank), requires_grad=True)
    (hvd.broadcast(y, root, name="g.bcast") * 3).sum().backward()
    expected = torch.full((2,), 3.0) if rank == root else torch.zeros(2)  # averaged, as Horovod
    check(torch.allclose(y.grad, expected), f"broadcast gradient {y.grad.tolist()}")
    # reducescatter's gradient: every rank's block of the upstream gradient, gathered back.
    z = torch.full((2 * size + 1, 2), float(rank), requires_grad=True)
    block = hvd.reducescatter(z, op=hvd.Sum, name="g.rs")
    (block * (rank + 1)).sum().backward()
    expected = torch.cat([torch.full((2 + (1 if r == 0 else 0), 2), float(r + 1))
                          for r in range(size)])
    # Horovod 0.28.1 multiplies a sum's by the ranks, and leaves an average's as gathered.
    check(torch.allclose(z.grad, expected * size),
          f"reducescatter sum gradient {z.grad.tolist()}")
    z.grad = None
    (hvd.reducescatter(z, name="g.rs.average") * (rank + 1)).sum().backward()
    check(torch.allclose(z.grad, expected),
          f"reducescatter average gradient {z.grad.tolist()}")
    # alltoall's gradient: each row's gradient comes back from the rank it was sent to.
    w = torch.ones(size, 2, requires_grad=True)
    sent, _ = hvd.alltoall(w, splits=[1] * size, name="g.a2a")
    (sent * (rank + 1)).sum().backward()
    check(torch.allclose(w.grad, (torch.arange(size, dtype=torch.float32) + 1).unsqueeze(1)
                         .expand(size, 2)), f"alltoall gradient {w.grad.tolist()}")
    with torch.no_grad():
        check(hvd.allreduce(x, op=hvd.Max, name="g.nograd").shape == (3,),
              "no gradient needed: any op")


def dtypes(rank, size):
    """int16 and bool, with every op, against references from every rank's known inputs."""
    def shorts(r):
        return torch.tensor([r * 1000 - 7, -r, 30000, r + 1], dtype=torch.int16)
    everyone = [shorts(r).to(torch.int64) for r in range(size)]
    wrap = (lambda v: ((v + 32768) % 65536) - 32768)
    for op, expected in ((hvd.Sum, wrap(sum(everyone))),
                         (hvd.Min, torch.stack(everyone).min(0).values),
                         (hvd.Max, torch.stack(everyone).max(0).values)):
        got = hvd.allreduce(shorts(rank), op=op, name=f"d.int16.{op}")
        check(got.dtype == torch.int16 and torch.equal(got.to(torch.int64), expected),
              f"int16 op {op}: {got.tolist()} against {expected.tolist()}")
    flags = [torch.tensor([r % 2 == 0, r == 0, True, False]) for r in range(size)]
    stacked = torch.stack(flags)
    for op, expected in ((hvd.Sum, stacked.any(0)), (hvd.Max, stacked.any(0)),
                         (hvd.Min, stacked.all(0)), (hvd.Product, stacked.all(0))):
        got = hvd.allreduce(flags[rank], op=op, name=f"d.bool.{op}")
        check(got.dtype == torch.bool and torch.equal(got, expected),
              f"bool op {op}: {got.tolist()} against {expected.tolist()}")
    raises(hvd.ChorusError, lambda: hvd.allreduce(flags[rank], name="d.bool.average"),
           "the average of bools")
    gathered = hvd.allgather(flags[rank].unsqueeze(0), name="d.bool.gather")
    check(torch.equal(gathered, stacked), "bool allgather")
    check(torch.equal(hvd.broadcast(shorts(rank), 0, name="d.int16.bcast"), shorts(0)),
          "int16 broadcast")


def sync_batch_norm(rank, size):
    """SyncBatchNorm on each rank's shard must match torch's BatchNorm on the whole batch:
    outputs, input and weight gradients, and running statistics."""
    generator = torch.Generator().manual_seed(5)
    whole = torch.randn(size * 3, 4, 5, generator=generator)
    upstream = torch.randn(size * 3, 4, 5, generator=generator)
    reference = torch.nn.BatchNorm1d(4)
    synced = hvd.SyncBatchNorm(4)
    with torch.no_grad():
        for module in (reference, synced):
            module.weight.copy_(torch.arange(4.0) + 1)
            module.bias.copy_(torch.arange(4.0) - 1)
    whole.requires_grad_(True)
    expected = reference(whole)
    (expected * upstream).sum().backward()
    shard = whole.detach()[rank * 3:rank * 3 + 3].clone().requires_grad_(True)
    out = synced(shard)
    (out * upstream[rank * 3:rank * 3 + 3]).sum().backward()
    check(torch.allclose(out, expected.detach()[rank * 3:rank * 3 + 3], atol=1e-5),
          "SyncBatchNorm output")
    check(torch.allclose(shard.grad, whole.grad[rank * 3:rank * 3 + 3], atol=1e-4),
          "SyncBatchNorm input gradient")
    weight_gradient = hvd.allreduce(synced.weight.grad, op=hvd.Sum, name="bn.weight.grad")
    check(torch.allclose(weight_gradient, reference.weight.grad, atol=1e-4),
          f"SyncBatchNorm weight gradient {weight_gradient.tolist()}")
    check(torch.allclose(synced.running_mean, reference.running_mean, atol=1e-6) and
          torch.allclose(synced.running_var, reference.running_var, atol=1e-5),
          "SyncBatchNorm running statistics")
    synced.eval()
    reference.eval()
    check(torch.allclose(synced(shard.detach()), reference(shard.detach()), atol=1e-6),
          "SyncBatchNorm in evaluation")


def dropped_handle(rank, size):
    """A handle dropped while its allreduce is in flight keeps the tensor alive until the
    operation completes (before, its buffer was freed under the background thread: found by
    AddressSanitizer as a use after free, glibc's 'corrupted double-linked list' without it)."""
    import gc
    from chorus import core
    if rank == 0:
        hvd.allreduce_async_(torch.ones(1000), name="x.dropped")  # the handle is dropped at once
        gc.collect()
        check(len(core._orphans) == 1 or size == 1, f"{len(core._orphans)} orphans kept")
        [torch.zeros(1000) for _ in range(100)]  # memory that would take the freed buffer's place
    else:
        import time
        time.sleep(0.2)
        hvd.synchronize(hvd.allreduce_async_(torch.ones(1000), name="x.dropped"))
    hvd.barrier()
    hvd.allreduce(torch.ones(1), name="x.after.dropped")
    check(not core._orphans, f"{len(core._orphans)} orphans left after completion")


def timeline(rank):
    import json
    import os
    import tempfile
    directory = tempfile.mkdtemp() if rank == 0 else None
    directory = hvd.broadcast_object(directory, root_rank=0, name="x.timeline.dir")
    path = os.path.join(directory, "trace.json")
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(4), name="x.timeline.first")
    hvd.start_timeline(path)  # the same path again: written beside it, not over it
    hvd.allreduce(torch.ones(4), name="x.timeline.second")
    began = time.monotonic()
    chorus.timeline_mark("compute", "layer 3", began, began + 0.25)
    try:
        chorus.timeline_mark("compute", "backwards", began, began - 1)
        check(False, "a span that ends before it starts was accepted")
    except chorus.ChorusError as error:
        check("does not end after it starts" in str(error), f"the message: {error}")
    hvd.allreduce(torch.ones(4), name="x.timeline.marked")  # the mark is written by then
    hvd.stop_timeline()
    hvd.allreduce(torch.ones(4), name="x.timeline.after")
    if rank == 0:
        names = []
        for written in (path, os.path.join(directory, "trace.1.json")):
            with open(written) as file:
                names.append({e["args"]["name"] for e in json.load(file) if e.get("ph") == "M"})
        check("x.timeline.first" in names[0] and "x.timeline.second" not in names[0],
              f"the first timeline: {names[0]}")
        check("x.timeline.second" in names[1] and "x.timeline.after" not in names[1],
              f"the second timeline: {names[1]}")
        with open(os.path.join(directory, "trace.1.json")) as file:
            marks = [e for e in json.load(file) if e.get("args", {}).get("source")]
        check(len(marks) == 1 and marks[0]["name"] == "layer 3" and
              abs(marks[0]["dur"] - 250000) < 1, f"the marked span: {marks}")


def top_k_sum(values, ratio, factor=1.0):
    """chorus.h's TOPK result, from every rank's values (a row each) in numpy: each rank's
    k = max(1, ceil(ratio * count)) largest magnitudes (ties to the lower index, by a stable
    sort), summed in float64 in rank order, times `factor`, rounded once to float32."""
    import math
    import numpy
    rows = numpy.asarray(values, dtype=numpy.float32)
    count = rows.shape[1]
    k = min(count, max(1, math.ceil(ratio * count)))
    total = numpy.zeros(count, dtype=numpy.float64)
    for row in rows:
        chosen = numpy.argsort(-numpy.abs(row.astype(numpy.float64)), kind="stable")[:k]
        total[chosen] += row[chosen].astype(numpy.float64)
    return torch.from_numpy((total * factor).astype(numpy.float32)), k


def topk_compression(rank, size):
    """Compression.topk(ratio): chorus sends each rank's largest values and sums them; with
    ranks * k below the count the pairs travel and the sum is the reference's bits."""
    values = torch.stack([torch.sin(torch.arange(301, dtype=torch.float32) * (r + 1.3)) * (r + 1)
                          for r in range(size)])
    expected, k = top_k_sum(values, 0.1)
    check(size * k < 301, "the pairs travel (sparse)")
    got = hvd.allreduce(values[rank].clone(), op=hvd.Sum, name="x.topk",
                        compression=hvd.Compression.topk(0.1))
    check(torch.equal(got, expected),
          f"allreduce with Compression.topk(0.1): {int((got != expected).sum())} values differ "
          f"from the numpy reference")
    check(int((got != 0).sum()) <= size * k, "at most ranks * k values are not 0")
    average, _ = top_k_sum(values, 0.1, 1.0 / size)
    got = hvd.allreduce(values[rank].clone(), name="x.topk.average",
                        compression=hvd.Compression.topk(0.1))
    check(torch.allclose(got, average, rtol=1e-6, atol=0),
          f"average with Compression.topk(0.1): largest error {float((got - average).abs().max())}")
    pieces = hvd.grouped_allreduce([values[rank].clone(), values[rank][:50].clone()], op=hvd.Sum,
                                   name="x.topk.grouped", compression=hvd.Compression.topk(0.1))
    check(torch.equal(pieces[0], expected) and
          torch.equal(pieces[1], top_k_sum(values[:, :50], 0.1)[0]),
          "grouped_allreduce with Compression.topk(0.1)")
    for bad in (0, 1.5, -0.1, "0.1", True):
        raises(ValueError, lambda: hvd.Compression.topk(bad), f"Compression.topk({bad!r})")
    raises(ValueError, lambda: hvd.allreduce(values[rank], name="x.topk.unset",
                                             compression=hvd.Compression.topk),
           "Compression.topk without its ratio")
    # DistributedOptimizer(compression=Compression.topk(0.01)): each gradient is the average of
    # the ranks' top 1% (k = 1 of the weight's 10 values and of the bias's 2).
    model = torch.nn.Linear(5, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.topk(0.01))
    optimizer.zero_grad()
    inputs = [torch.arange(5, dtype=torch.float32) * (r + 1) - 2 for r in range(size)]
    model(inputs[rank][None]).sum().backward()
    grads = {}
    for r in range(size):  # every rank's own gradient, computed here
        copy = torch.nn.Linear(5, 2)
        copy.load_state_dict(model.state_dict())
        copy(inputs[r][None]).sum().backward()
        grads.setdefault("weight", []).append(copy.weight.grad.flatten())
        grads.setdefault("bias", []).append(copy.bias.grad)
    optimizer.synchronize()
    for name, parameter in (("weight", model.weight), ("bias", model.bias)):
        reference, _ = top_k_sum(torch.stack(grads[name]), 0.01, 1.0 / size)
        check(torch.allclose(parameter.grad.flatten(), reference, rtol=1e-6, atol=0),
              f"DistributedOptimizer with Compression.topk(0.01): {name} gradient "
              f"{parameter.grad.flatten().tolist()}, expected {reference.tolist()}")
    with optimizer.skip_synchronize():
        optimizer.step()


def main():
    hvd.init()
    hvd.init()  # a second call does nothing, as in Horovod
    rank, size = hvd.rank(), hvd.size()
    broadcasts_of_parameters(rank)
    in_place_on_views(rank, size)
    unused_parameters(rank, size)
    optimizer_errors_and_options()
    adasum_optimizer(rank, size)
    collectives(rank, size)
    empty_tensors(rank, size)
    topk_compression(rank, size)
    sparse(rank, size)
    timeline(rank)
    reducescatters(rank, size)
    alltoalls(rank, size)
    gradients(rank, size)
    dtypes(rank, size)
    sync_batch_norm(rank, size)
    dropped_handle(rank, size)
    totals = hvd.allreduce(torch.tensor([counts["passed"], counts["failed"]], dtype=torch.int64),
                           op=hvd.Sum,
                           name="verdict")
    if rank == 0:
        print(f"horovod api np={size}: {totals[0]} passed, {totals[1]} failed", flush=True)
    # No hvd.shutdown(): chorus shuts down at exit.
    sys.exit(1 if totals[1] else 0)


if __name__ == "__main__":
    main()
