#!/usr/bin/env python3
"""The Python binding under mpirun: chorus.numpy and chorus.torch collectives against references
every rank computes from all ranks' known inputs, errors raised as ChorusError with chorus's
message, and DistributedOptimizer matching single-process training. Prints
'N passed, N failed' from rank 0 and exits non-zero on any failure."""
import sys

import numpy as np

import chorus
import chorus.numpy as cn
from checks import check, counts



def inputs(r, shape, dtype, seed):
    rng = np.random.default_rng(seed * 1000 + r)
    return (rng.integers(-50, 50, size=shape) / 8).astype(dtype)


def numpy_tests(rank, size):
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8, np.int16):
        for count in (0, 1, size - 1, 7, 1021):
            seed = count + 17
            mine = inputs(rank, (count,), dtype, seed)
            all_inputs = [inputs(r, (count,), dtype, seed).astype(np.float64) for r in range(size)]
            total = np.sum(all_inputs, axis=0)
            result = cn.allreduce(mine, op=cn.Sum, name=f"np.sum.{np.dtype(dtype).name}.{count}")
            expected = total.astype(dtype) if np.dtype(dtype).kind in "iu" else total
            check(np.allclose(result.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-2)
                  if np.dtype(dtype).kind == "f" else np.array_equal(result, expected),
                  f"numpy sum {np.dtype(dtype).name} count {count}")
            check(result.dtype == mine.dtype and result.shape == mine.shape, "result dtype/shape")
    # bool: or (sum, max) and and (min).
    flags = np.stack([np.array([r % 2 == 0, r == 0, True, False]) for r in range(size)])
    check(np.array_equal(cn.allreduce(flags[rank], op=cn.Sum, name="np.bool.sum"),
                         flags.any(axis=0)), "numpy bool sum (or)")
    check(np.array_equal(cn.allreduce(flags[rank], op=cn.Min, name="np.bool.min"),
                         flags.all(axis=0)), "numpy bool min (and)")
    unsigned = np.array([65535, rank, 7], dtype=np.uint16)
    check(np.array_equal(cn.allreduce(unsigned, op=cn.Max, name="np.uint16.max"),
                         np.array([65535, size - 1, 7], dtype=np.uint16)), "numpy uint16 max")
    # In place average, min and max.
    data = inputs(rank, (5, 3), np.float64, 1)
    everyone = np.stack([inputs(r, (5, 3), np.float64, 1) for r in range(size)])
    original = data.copy()
    cn.allreduce_(data, op=cn.Average, name="np.avg")
    check(np.allclose(data, everyone.mean(axis=0)), "numpy in-place average")
    check(np.array_equal(cn.allreduce(original, op=cn.Max, name="np.max"), everyone.max(axis=0)),
          "numpy max")
    check(np.array_equal(cn.allreduce(original, op=cn.Min, name="np.min"), everyone.min(axis=0)),
          "numpy min")
    scaled = cn.allreduce(original, op=cn.Sum, name="np.scaled", prescale_factor=0.5,
                          postscale_factor=4.0)
    check(np.allclose(scaled, everyone.sum(axis=0) * 2.0), "prescale/postscale")
    # Broadcast from every root; allgather with uneven first dimensions.
    for root in range(size):
        value = np.full(4, float(rank * 10 + 1))
        cn.broadcast_(value, root, name=f"np.bcast.{root}")
        check(np.all(value == root * 10 + 1), f"numpy broadcast from {root}")
    rows = np.full((rank % 3, 2), rank, dtype=np.int32)
    gathered = cn.allgather(rows, name="np.gather")
    expected = np.concatenate([np.full((r % 3, 2), r, dtype=np.int32) for r in range(size)])
    check(gathered.shape == expected.shape and np.array_equal(gathered, expected),
          f"numpy allgather {gathered.shape}")
    outputs = cn.grouped_allreduce([np.ones(3), np.full(5, 2.0)], op=cn.Sum, name="np.group")
    check(np.all(outputs[0] == size) and np.all(outputs[1] == 2 * size), "grouped allreduce")
    # Async handles.
    handles = [cn.allreduce_async(np.full(10, float(i)), op=cn.Sum, name=f"np.async.{i}")
               for i in range(20)]
    results = [h.wait() for h in handles]
    check(all(np.all(r == i * size) for i, r in enumerate(results)), "async allreduces")


def numpy_shared_tests(rank, size):
    """Arrays in the shared heap: reduced in place where every rank's lies there, staged where
    only rank 0's does; the same sums either way."""
    for count, everywhere in ((200003, True), (5, True), (200003, False)):
        if everywhere or rank == 0:
            a = cn.shared_array((count,), np.float64)
            check(a.dtype == np.float64 and a.shape == (count,) and not a.any(),
                  "shared_array: dtype, shape, zeros")
        else:
            a = np.zeros(count, dtype=np.float64)
        a[:] = np.arange(count, dtype=np.float64) * (rank + 1)
        cn.allreduce_(a, op=cn.Sum, name=f"np.shared.{count}.{everywhere}")
        check(np.array_equal(a, np.arange(count, dtype=np.float64) * (size * (size + 1) / 2)),
              f"numpy shared array of {count}, everywhere={everywhere}")
    grid = cn.shared_array((3, 4), np.int32)
    check(grid.shape == (3, 4) and grid.dtype == np.int32, "shared_array of two dimensions")


def numpy_process_set_tests(rank, size):
    """chorus.numpy in a set of the last ranks (every rank but 0 where there are several)."""
    members = list(range(1 if size > 1 else 0, size))
    set_id = cn.process_set_add(members)
    check(cn.process_set_ranks(set_id) == members, f"process_set_ranks {members}")
    if rank in members:
        me = members.index(rank)
        data = inputs(me, (13,), np.float64, 71)
        result = cn.allreduce(data, op=cn.Sum, name="np.set.sum", process_set=set_id)
        expected = np.sum([inputs(m, (13,), np.float64, 71) for m in range(len(members))], axis=0)
        check(np.allclose(result, expected), f"numpy allreduce in the set {members}")
        rows, received = cn.alltoall(np.full(len(members), float(rank)), splits=[1] * len(members),
                                     name="np.set.a2a", process_set=set_id)
        check(rows.tolist() == [float(m) for m in members] and
              received.tolist() == [1] * len(members), f"numpy alltoall in the set {members}")
    else:
        try:
            cn.allreduce(np.ones(1), name="np.set.outsider", process_set=set_id)
            check(False, "an allreduce outside its set was accepted")
        except chorus.ChorusError as error:
            check("not a member" in str(error), f"outsider: {error}")
    cn.process_set_remove(set_id)


def error_tests(rank, size):
    # As in Horovod, a second init while initialized does nothing (the C call would fail with
    # CHORUS_ERR_ALREADY_INITIALIZED).
    chorus.init()
    check(chorus.is_initialized() and chorus.size() == size, "second init is a no-op")
    if size > 1:
        data = np.zeros(4, dtype=np.float32 if rank != 1 else np.float64)
        try:
            cn.allreduce(data, name="np.mismatch")
            check(False, "mismatch raises")
        except chorus.ChorusError as error:
            check(error.status == "CHORUS_ERR_MISMATCH" and "dtype mismatch" in str(error)
                  and "np.mismatch" in str(error), f"mismatch message: {error}")
    try:
        cn.broadcast_(np.zeros(2), size + 3, name="np.badroot")
        check(False, "bad root raises")
    except chorus.ChorusError as error:
        check(error.status == "CHORUS_ERR_INVALID_ARGUMENT" and "np.badroot" in str(error),
              f"bad root: {error}")


def torch_tests(rank, size):
    try:
        import torch
    except ImportError:
        print("torch is not installed: chorus.torch tests skipped", flush=True)
        return
    import chorus.torch as hvd
    check(hvd.rank() == rank and hvd.size() == size, "hvd.rank/size")
    check(0 <= hvd.local_rank() < hvd.local_size() and hvd.cross_size() >= 1, "local/cross")
    t = torch.arange(6, dtype=torch.float32) + rank
    total = sum(torch.arange(6, dtype=torch.float32) + r for r in range(size))
    check(torch.allclose(hvd.allreduce(t, name="t.avg"), total / size), "torch average")
    check(torch.allclose(hvd.allreduce(t, average=False, name="t.sum"), total), "torch sum")
    check(torch.equal(hvd.allreduce(t, op=hvd.Max, name="t.max"),
                      torch.arange(6, dtype=torch.float32) + size - 1), "torch max")
    u = t.clone()
    hvd.allreduce_(u, op=hvd.Sum, name="t.inplace")
    check(torch.allclose(u, total), "torch in-place")
    h = hvd.allreduce_async(t, op=hvd.Sum, name="t.async")
    check(torch.allclose(hvd.synchronize(h), total) and hvd.poll(h), "torch async")
    half = hvd.allreduce(t.to(torch.bfloat16), op=hvd.Sum, name="t.bf16")
    check(half.dtype == torch.bfloat16 and torch.allclose(half.float(), total, rtol=2e-2),
          "torch bfloat16")
    compressed = hvd.allreduce(t, op=hvd.Sum, name="t.fp16", compression=hvd.Compression.fp16)
    check(torch.allclose(compressed, total, rtol=1e-2), "fp16 compression")
    b = torch.full((3,), float(rank))
    check(torch.equal(hvd.broadcast(b, 0, name="t.bcast"), torch.zeros(3)), "torch broadcast")
    g = hvd.allgather(torch.full((rank + 1, 2), float(rank)), name="t.gather")
    check(g.shape == (size * (size + 1) // 2, 2), f"torch allgather shape {tuple(g.shape)}")
    grouped = hvd.grouped_allreduce([t, t * 2], op=hvd.Sum, name="t.group")
    check(torch.allclose(grouped[1], total * 2), "torch grouped")

    # DistributedOptimizer: ranks train on their shard; the result must equal single-process
    # training on the whole batch (the average of equal-sized shards' gradients).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    if rank != 0:  # different starting weights: broadcast_parameters must fix them
        for p in model.parameters():
            p.data.add_(1.0)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        x = torch.randn(size * 4, 4, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        shard = slice(rank * 4, rank * 4 + 4)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x[shard]), y[shard]).backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(reference(x[r * 4:r * 4 + 4]), y[r * 4:r * 4 + 4])
                   for r in range(size)) / size
        loss.backward()
        reference_optimizer.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        check(torch.allclose(p, q, atol=1e-5), f"DistributedOptimizer parameter {name}")
    shared_heap_tests(rank, size, model, optimizer)

    # broadcast_optimizer_state: rank 0's Adam has state after two steps of its own; the others
    # are fresh (no state) or have different state. Afterwards every rank holds rank 0's state,
    # tensors and scalars, and the same hyperparameters.
    torch.manual_seed(2)
    net = torch.nn.Linear(5, 3)
    adam = torch.optim.Adam(net.parameters(), lr=0.01 if rank == 0 else 0.5)
    if rank == 0 or rank == 2:
        for step in range(2 if rank == 0 else 1):
            adam.zero_grad()
            (net(torch.randn(4, 5, generator=torch.Generator().manual_seed(rank + step))) ** 2
             ).sum().backward()
            adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    mine = adam.state_dict()
    everyone = hvd.broadcast_object(mine, root_rank=0, name="t.adam.reference")
    check(mine["param_groups"][0]["lr"] == 0.01, f"optimizer lr {mine['param_groups'][0]['lr']}")
    same = len(mine["state"]) == len(everyone["state"]) == 2
    for key, entries in everyone["state"].items():
        for field, value in entries.items():
            got = mine["state"].get(key, {}).get(field)
            same = same and got is not None and (
                torch.equal(torch.as_tensor(got), torch.as_tensor(value)))
    check(same, "optimizer state equals rank 0's")
    check(hvd.broadcast_object({"a": [1, rank]}, root_rank=1 % size, name="t.object") ==
          {"a": [1, 1 % size]}, "broadcast_object")


def shared_heap_tests(rank, size, model, optimizer):
    """Gradients and tensors in chorus's shared heap (chorus.torch.shared_memory)."""
    import os

    import torch

    import chorus.torch as hvd
    from chorus.torch.shared_memory import (shared_gradients, shared_gradients_wanted,
                                            shared_tensor)
    # CHORUS_SHARED_GRADIENTS is on by default: gradients larger than 64 KiB move into the heap
    # at their first allreduce (smaller ones are fused, and stay), and backward accumulates into
    # them there from then on; zero_grad keeps them there. Training matches one process on the
    # whole batch, as above.
    torch.manual_seed(3)
    wide = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    alone = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
    alone.load_state_dict(wide.state_dict())
    shared_opt = hvd.DistributedOptimizer(torch.optim.SGD(wide.parameters(), lr=0.1),
                                          named_parameters=wide.named_parameters())
    alone_opt = torch.optim.SGD(alone.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(4)
    for step in range(3):
        x = torch.randn(size * 2, 256, generator=generator)
        y = x[:, :1]
        shared_opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(wide(x[rank * 2:rank * 2 + 2]), y[rank * 2:rank * 2 + 2]
                                     ).backward()
        shared_opt.step()
        alone_opt.zero_grad()
        (sum(torch.nn.functional.mse_loss(alone(x[r * 2:r * 2 + 2]), y[r * 2:r * 2 + 2])
             for r in range(size)) / size).backward()
        alone_opt.step()
    check(all(torch.allclose(p, q, atol=1e-5) for p, q in zip(wide.parameters(),
                                                              alone.parameters())),
          "DistributedOptimizer with shared gradients trains as one process")
    placed = shared_opt._shared
    big = wide[0].weight
    check(list(placed) == [big] and big.grad.data_ptr() == placed[big],
          f"only the 128 KiB gradient moved, and stays: {[tuple(p.shape) for p in placed]}")
    shared_opt.zero_grad(set_to_none=True)
    check(big.grad is not None and big.grad.data_ptr() == placed[big] and not big.grad.any() and
          wide[0].bias.grad is None, "zero_grad zeroes shared gradients in place, others to None")
    plain = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters(),
                                     shared_gradients=False)
    check(not plain._share, "shared_gradients=False")
    os.environ["CHORUS_SHARED_GRADIENTS"] = "sometimes"
    try:
        shared_gradients_wanted(None)
        check(False, "CHORUS_SHARED_GRADIENTS=sometimes is refused")
    except ValueError as refused:
        check("CHORUS_SHARED_GRADIENTS" in str(refused), f"the refusal names it: {refused}")
    os.environ["CHORUS_SHARED_GRADIENTS"] = "off"
    check(not shared_gradients_wanted(None), "CHORUS_SHARED_GRADIENTS=off")
    del os.environ["CHORUS_SHARED_GRADIENTS"]
    # Tensors of several of the algorithm's pieces, in the heap on every rank (reduced in place),
    # then on rank 0 only (staged): the same sums.
    for count, everywhere in ((300007, True), (7, True), (300007, False)):
        if everywhere or rank == 0:
            t = shared_tensor((count,), torch.float64)
        else:
            t = torch.zeros(count, dtype=torch.float64)
        t.copy_(torch.arange(count, dtype=torch.float64) * (rank + 1))
        hvd.allreduce_(t, op=hvd.Sum, name=f"t.shared.{count}.{everywhere}")
        expected = torch.arange(count, dtype=torch.float64) * (size * (size + 1) / 2)
        check(torch.equal(t, expected), f"shared tensor of {count}, everywhere={everywhere}")
    half = shared_tensor((2, 3), torch.bfloat16)
    check(half.shape == (2, 3) and half.dtype == torch.bfloat16 and not half.any(),
          "shared_tensor: shape, dtype, zeros")
    net = torch.nn.Linear(3, 2)
    net(torch.ones(1, 3)).sum().backward()
    before = [p.grad.clone() for p in net.parameters()]
    check(shared_gradients(net.parameters()) == 2, "shared_gradients moves both gradients")
    check(all(torch.equal(p.grad, b) for p, b in zip(net.parameters(), before)),
          "shared_gradients keeps their values")


def main():
    chorus.init()
    rank, size = chorus.rank(), chorus.size()
    numpy_tests(rank, size)
    numpy_shared_tests(rank, size)
    numpy_process_set_tests(rank, size)
    error_tests(rank, size)
    torch_tests(rank, size)
    totals = cn.allreduce(np.array([counts["passed"], counts["failed"]], dtype=np.int64),
                          op=cn.Sum, name="verdict")
    chorus.shutdown()
    if rank == 0:
        print(f"python binding np={size}: {totals[0]} passed, {totals[1]} failed", flush=True)
    sys.exit(1 if totals[1] else 0)


main()
