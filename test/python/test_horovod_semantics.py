"""Horovod's meaning, value by value: what Horovod 0.28.1 computes for each call that a script
makes, stated here as the expected value and checked against chorus.torch at any number of
ranks (the suite runs it at 2 and 3). Written from Horovod's documentation and behaviour:

- gradients: allgather's and broadcast's average the upstream gradients, reducescatter's
  gathers them back (times the ranks for a sum), and the grouped forms are differentiable;
- integer scale factors and averages truncate, as Horovod's C++ casts do, for allreduce and
  reducescatter alike; float32 scale factors multiply in double, rounded once, so that an
  average of 3 is x / 3 correctly rounded (Horovod scales float by double);
- an average while a rank has joined divides by every rank (joined ones contribute zeros), and
  an allgather or broadcast while a rank has joined fails; unnamed calls meet again after every
  rank joined, however many of them each rank made before (Horovod's join tests rely on it), and
  allgather_object and broadcast_object are named alike on every rank;
- Adasum takes float16 tensors (Horovod's CPU Adasum does);
- a refused call raises ValueError, a failed collective HorovodInternalError;
- nccl_built() is NCCL's version number (0 without NCCL), not a bool;
- DistributedOptimizer: _parameter_names, a process set that leaves this rank out,
  sparse_as_dense gradients made sparse again; broadcast_optimizer_state initializes a fresh
  optimizer's state with zero gradients.

    mpirun -np 2 python3 test_horovod_semantics.py"""
import sys

import torch

import chorus
import chorus.torch as hvd

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"rank {hvd.rank()}: FAILED: {what}", file=sys.stderr, flush=True)


def raises(kind, call, what):
    try:
        call()
    except kind as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 (the wrong class is the failure being reported)
        check(False, f"{what}: raised {type(error).__name__} ({error}), not {kind.__name__}")
        return ""
    check(False, f"{what}: raised nothing, expected {kind.__name__}")
    return ""


def gradients(rank, size):
    # allgather: every rank's upstream gradient is rank + 1; Horovod averages them, so each
    # rank's rows get (1 + ... + size) / size.
    mean = (size + 1) / 2
    x = torch.ones(rank + 1, 3, requires_grad=True)
    (hvd.allgather(x, name="s.ag") * (rank + 1)).sum().backward()
    check(torch.allclose(x.grad, torch.full_like(x, mean)), f"allgather gradient {x.grad}")
    # broadcast from the last rank: the root gets the average, the others zero.
    root = size - 1
    y = torch.ones(4, requires_grad=True)
    (hvd.broadcast(y, root, name="s.bc") * (rank + 1)).sum().backward()
    check(torch.allclose(y.grad, torch.full_like(y, mean if rank == root else 0.0)),
          f"broadcast gradient {y.grad}")
    # reducescatter: rank r's block of the upstream gradient is r + 1 on rank r; gathered
    # back, times the ranks for a sum (at 2 ranks a sum's gradient of 1 gives 2).
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        z = torch.ones(2 * size, 3, requires_grad=True)
        (hvd.reducescatter(z, op=op, name=f"s.rs.{op}") * (rank + 1)).sum().backward()
        expected = torch.cat([torch.full((2, 3), float((r + 1) * factor)) for r in range(size)])
        check(torch.allclose(z.grad, expected), f"reducescatter op {op} gradient {z.grad}")
    # The grouped forms are differentiable, with the same rules.
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(2, 2, requires_grad=True)
    summed = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="s.gar")
    check(all(t.requires_grad for t in summed), "grouped_allreduce outputs require grad")
    ((summed[0] * (rank + 1)).sum() + summed[1].sum()).backward()
    check(torch.allclose(a.grad, torch.full_like(a, size * mean)) and
          torch.allclose(b.grad, torch.full_like(b, float(size))),
          f"grouped_allreduce gradients {a.grad} {b.grad}")
    p = torch.ones(rank + 1, 2, requires_grad=True)
    q = torch.ones(1, 3, requires_grad=True)
    gathered = hvd.grouped_allgather([p, q], name="s.gag")
    ((gathered[0] * (rank + 1)).sum() + gathered[1].sum()).backward()
    check(torch.allclose(p.grad, torch.full_like(p, mean)) and
          torch.allclose(q.grad, torch.ones_like(q)),
          f"grouped_allgather gradients {p.grad} {q.grad}")
    u = torch.ones(2 * size, requires_grad=True)
    v = torch.ones(size, 2, requires_grad=True)
    blocks = hvd.grouped_reducescatter([u, v], op=hvd.Sum, name="s.grs")
    ((blocks[0] * (rank + 1)).sum() + blocks[1].sum()).backward()
    check(torch.allclose(u.grad, torch.cat([torch.full((2,), float((r + 1) * size))
                                            for r in range(size)])) and
          torch.allclose(v.grad, torch.full_like(v, float(size))),
          f"grouped_reducescatter gradients {u.grad} {v.grad}")


def integers(rank, size):
    # Horovod scales integers by C casts, (T)(value * factor), which truncate.
    seven = torch.tensor([7, -7], dtype=torch.int32)
    got = hvd.allreduce(seven, op=hvd.Sum, postscale_factor=0.7, name="s.int.post")
    expected = [int(7 * size * 0.7), int(-7 * size * 0.7)]
    check(got.tolist() == expected, f"postscale 0.7 of {7 * size}: {got.tolist()}, {expected}")
    got = hvd.allreduce(seven, op=hvd.Sum, prescale_factor=0.7, name="s.int.pre")
    expected = [int(7 * 0.7) * size, int(-7 * 0.7) * size]
    check(got.tolist() == expected, f"prescale 0.7: {got.tolist()}, expected {expected}")
    # An average of integers: the sum times 1/size, truncated.
    values = torch.tensor([3 * rank + 1, -(3 * rank + 2)], dtype=torch.int64)
    total = [sum(3 * r + 1 for r in range(size)), -sum(3 * r + 2 for r in range(size))]
    got = hvd.allreduce(values, op=hvd.Average, name="s.int.average")
    expected = [int(t * (1.0 / size)) for t in total]
    check(got.tolist() == expected, f"integer average {got.tolist()}, expected {expected}")
    # In place, grouped, and the floats unchanged.
    inplace = values.clone()
    hvd.allreduce_(inplace, op=hvd.Average, name="s.int.average_")
    check(inplace.tolist() == expected, f"in-place integer average {inplace.tolist()}")
    pair = hvd.grouped_allreduce([values, seven], op=hvd.Sum, postscale_factor=0.7,
                                 name="s.int.grouped")
    check(pair[0].tolist() == [int(t * 0.7) for t in total] and
          pair[1].tolist() == [int(7 * size * 0.7), int(-7 * size * 0.7)],
          f"grouped integer postscale {pair[0].tolist()} {pair[1].tolist()}")
    floats = hvd.allreduce(torch.tensor([1.5]), op=hvd.Sum, postscale_factor=0.5,
                           name="s.float.post")
    check(torch.allclose(floats, torch.tensor([0.75 * size])), f"float postscale {floats}")


def scaling(rank, size):
    # reducescatter scales integers as allreduce does: prescale truncates each rank's input,
    # postscale the reduced block; 4 rows per rank of the value 7 (-7 on odd rows).
    rows = torch.tensor([[7], [-7]] * (2 * size), dtype=torch.int32)
    got = hvd.reducescatter(rows, op=hvd.Sum, prescale_factor=0.7, name="s.rs.pre")
    check(got.flatten().tolist() == [int(7 * 0.7) * size, int(-7 * 0.7) * size] * 2,
          f"reducescatter integer prescale 0.7: {got.flatten().tolist()}")
    got = hvd.reducescatter(rows, op=hvd.Sum, postscale_factor=0.7, name="s.rs.post")
    check(got.flatten().tolist() == [int(7 * size * 0.7), int(-7 * size * 0.7)] * 2,
          f"reducescatter integer postscale 0.7: {got.flatten().tolist()}")
    got = hvd.reducescatter(rows.to(torch.int64) * (rank + 1), op=hvd.Average,
                            name="s.rs.average")
    total = 7 * size * (size + 1) // 2
    check(got.flatten().tolist() == [int(total * (1.0 / size)), int(-total * (1.0 / size))] * 2,
          f"reducescatter integer average: {got.flatten().tolist()}")
    # An explicit factor on float32 is Horovod's: cast to float32, multiplied in float32 (its
    # test_horovod_allreduce_prescale/_postscale compare with threshold 0 up to 3 ranks).
    factor = 0.1915194503788923  # numpy's first uniform() after seed 1234, as Horovod's test
    x = torch.tensor([-81.0, 37.0, 99.0, -3.0, 55.0], dtype=torch.float32)
    f32 = torch.tensor(factor, dtype=torch.float32)
    if size <= 3:
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor, name="s.float.pre")
        check(torch.equal(got, (x * f32) * size), f"float32 prescale {got.tolist()}")
        got = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor, name="s.float.post2")
        check(torch.equal(got, (x * size) * f32), f"float32 postscale {got.tolist()}")
    # float32 averaged over every rank: (x * size) * (1.0 / size) in double, rounded once; at 3
    # ranks float32's own 1/3 would miss it by an ulp for 71.0 (Horovod's test_horovod_join_
    # allreduce compares with threshold 0).
    x = torch.tensor([71.0, 65.0, -68.0, 13.0], dtype=torch.float32)
    got = hvd.allreduce(x, op=hvd.Average, name="s.float.average")
    expected = ((x * size).to(torch.float64) * (1.0 / size)).to(torch.float32)
    check(torch.equal(got, expected), f"float32 average {got.tolist()}, {expected.tolist()}")


def unnamed_after_join(rank, size):
    # Horovod's test_horovod_join_allgather: each rank in turn joins while the others' unnamed
    # allgather is refused; the joined rank made one unnamed call fewer, yet every rank's next
    # unnamed calls meet. allgather_object's name does not count calls either.
    if size == 1:
        return
    for first in range(size):
        if rank == first:
            hvd.join()
        else:
            raises(hvd.HorovodInternalError, lambda: hvd.allgather(torch.ones(2, 1)),
                   "an unnamed allgather while a rank has joined")
            hvd.join()
        got = hvd.allgather_object(rank)
        check(got == list(range(size)), f"allgather_object after join {first}: {got}")
    got = hvd.allreduce(torch.ones(1), op=hvd.Sum)  # unnamed, counted alike everywhere again
    check(got.item() == size, f"an unnamed allreduce after the joins: {got.item()}")
    obj = hvd.broadcast_object({"a": 1} if rank == 0 else None, root_rank=0)
    check(obj == {"a": 1}, f"broadcast_object with None on the other ranks: {obj}")


def unnamed_in_sets(rank, size):
    # Horovod's test_horovod_broadcast_process_sets at 3 ranks: the even ranks' set (2 members)
    # broadcasts from each member, the odd ranks' set (1 member) from its one, so the sets'
    # members make different numbers of unnamed calls. Unnamed calls are numbered per set, and
    # the job's next unnamed calls meet (Horovod numbers a process's calls alike, and would
    # wait there).
    if size == 1:
        return
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
    mine, members = (even, list(range(0, size, 2))) if rank % 2 == 0 else \
        (odd, list(range(1, size, 2)))
    for root in members:
        got = hvd.broadcast(torch.tensor([float(rank)]), root_rank=root, process_set=mine)
        check(got.item() == root, f"an unnamed broadcast from {root} in a set: {got.item()}")
    got = hvd.allreduce(torch.ones(1), op=hvd.Sum)  # unnamed, in the job
    check(got.item() == size, f"an unnamed allreduce after the sets' calls: {got.item()}")
    hvd.remove_process_set(odd)
    hvd.remove_process_set(even)


def adasum_half(rank, size):
    # Horovod's CPU Adasum takes float16: orthogonal vectors add up.
    vector = torch.zeros(size, dtype=torch.float16)
    vector[rank] = rank + 1
    got = hvd.allreduce(vector, op=hvd.Adasum, name="s.adasum.half")
    check(got.dtype == torch.float16 and
          torch.equal(got, torch.arange(1, size + 1, dtype=torch.float16)),
          f"Adasum of orthogonal float16 vectors: {got.tolist()}")


def joined_average(rank, size):
    # The last rank joins; the others average. Horovod's joined rank contributes zeros and
    # the sum is divided by every rank: 4.0 * (size - 1) / size.
    if rank == size - 1:
        hvd.join()
        return
    got = hvd.allreduce(torch.tensor([4.0]), op=hvd.Average, name="s.join.average")
    check(torch.allclose(got, torch.tensor([4.0 * (size - 1) / size])),
          f"average with a joined rank: {got.tolist()}")
    hvd.join()


def joined_gathers(rank, size):
    # As Horovod's, an allgather or a broadcast while a rank has joined fails (on the ranks that
    # submitted it), naming the joined rank.
    if size == 1:
        return
    if rank == size - 1:
        hvd.join()
        return
    message = raises(hvd.HorovodInternalError,
                     lambda: hvd.allgather(torch.ones(2, 1), name="s.join.allgather"),
                     "an allgather while a rank has joined")
    check(f"rank {size - 1} has joined" in message, f"message: {message}")
    raises(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), 0,
                                                           name="s.join.broadcast"),
           "a broadcast while a rank has joined")
    hvd.join()


def errors(rank, size):
    t = torch.ones(3)
    # Each rank in turn submits a name the others hold back until after a barrier, so the first
    # submission cannot have completed when the second comes (a name is free again once done).
    for turn in range(size):
        name = f"s.dup.{turn}"
        if rank == turn:
            first = hvd.allreduce_async(t, name=name)
            raises(ValueError, lambda: hvd.allreduce_async(t, name=name), "a duplicate name")
        hvd.barrier()
        if rank != turn:
            first = hvd.allreduce_async(t, name=name)
        check(torch.equal(hvd.synchronize(first), t), f"{name} after the refused duplicate")
    raises(ValueError, lambda: hvd.alltoall(torch.ones(3), splits=[4] + [0] * (size - 1),
                                            name="s.splits"), "splits that do not add up")
    raises(ValueError, lambda: hvd.allreduce(t, op=hvd.Adasum * 7, name="s.op"), "a bad op")
    if size > 1:
        message = raises(hvd.HorovodInternalError,
                         lambda: hvd.allreduce(torch.ones(2 + (rank == 0)), name="s.shape"),
                         "a shape mismatch")
        check("s.shape" in message and "shape mismatch" in message, f"message: {message}")
    check(issubclass(hvd.HorovodInternalError, RuntimeError) and
          not issubclass(hvd.HorovodInternalError, ValueError),
          "HorovodInternalError is a RuntimeError, not a ValueError")
    check(issubclass(hvd.HorovodInternalError, chorus.ChorusError), "and a ChorusError")


def queries(rank, size):
    built = hvd.nccl_built()
    check(type(built) is int and built >= 0, f"nccl_built() is an int: {built!r}")
    check((built > 0) == chorus._library.lib.chorus_gpu_built(),
          f"nccl_built() {built} against chorus_gpu_built")
    if built:
        check(built >= 2000, f"NCCL's version code: {built}")


def optimizer(rank, size):
    model = torch.nn.Linear(3, 1)
    distributed = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())
    check(isinstance(distributed._parameter_names, dict) and
          sorted(distributed._parameter_names.values()) == ["bias", "weight"],
          f"_parameter_names {distributed._parameter_names}")
    # A fresh optimizer: broadcast_optimizer_state leaves zero gradients, as Horovod's does.
    fresh_model = torch.nn.Linear(2, 2)
    fresh = torch.optim.SGD(fresh_model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    check(all(p.grad is not None and not p.grad.any() for p in fresh_model.parameters()),
          "broadcast_optimizer_state on a fresh optimizer leaves zero gradients")
    # A process set without this rank: the optimizer steps with its own gradients.
    if size > 1:
        only_first = hvd.add_process_set([0])
        local = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            local.weight.fill_(1.0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(local.parameters(), lr=1.0),
                                       named_parameters=local.named_parameters(),
                                       process_set=only_first)
        local(torch.full((1, 2), float(rank + 1))).sum().backward()
        opt.step()
        check(torch.allclose(local.weight, torch.full((1, 2), 1.0 - (rank + 1))),
              f"process set {only_first}: rank {rank} stepped with {local.weight.tolist()}")
        hvd.remove_process_set(only_first)
    # sparse_as_dense: the gradient is allreduced dense and made sparse again, so that
    # SparseAdam, which takes sparse gradients only, steps.
    embedding = torch.nn.Embedding(6, 2, sparse=True)
    hvd.broadcast_parameters(embedding.state_dict(), root_rank=0)
    sparse_opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(embedding.parameters()),
                                          named_parameters=embedding.named_parameters(),
                                          sparse_as_dense=True)
    embedding(torch.tensor([rank % 6])).sum().backward()
    sparse_opt.step()
    check(embedding.weight.grad.is_sparse, "sparse_as_dense gradient made sparse again")
    dense = embedding.weight.grad.to_dense()
    expected = torch.zeros(6, 2)
    for r in range(size):
        expected[r % 6] += 1.0 / size
    check(torch.allclose(dense, expected), f"the averaged gradient {dense.tolist()}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for part in (gradients, integers, scaling, joined_average, joined_gathers, unnamed_after_join,
                 unnamed_in_sets, adasum_half, errors, queries, optimizer):
        part(rank, size)
    hvd.shutdown()
    print(f"horovod semantics np={size} rank {rank}: {0 if failures else 1} passed, "
          f"{1 if failures else 0} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
