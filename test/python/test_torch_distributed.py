"""torch.distributed through the chorus backend, as a PyTorch user switching from gloo calls it,
at any number of ranks (the suite runs 1-4). Every result is checked against a reference
computed here from every rank's input (each rank can make any rank's input from a seed), in
float64 or int64 and cast back:

- all_reduce of every op chorus has, every dtype, counts 0, 1, fewer than the ranks, 7 and
  1009, blocking and async (waited out of order), in place on non-contiguous tensors too;
  futures chained with then(); ops chorus lacks (BAND) refused;
- broadcast from every rank, all_gather, all_gather_into_tensor, reduce_scatter,
  reduce_scatter_tensor, all_to_all, all_to_all_single with uneven splits, reduce, gather,
  scatter, barrier, the object collectives; zero-size tensors;
- groups from new_group (the even ranks, the odd ranks, all), get_backend;
- send, recv (from a rank and from any, which returns the sender), isend, irecv and
  batch_isend_irecv with tags, into non-contiguous tensors too, in a group too; a message
  longer than the receive fails it, naming both; monitored_barrier's tags refused;
- all_gather_coalesced of tensors of several shapes and dtypes; all_reduce of sparse tensors
  against the dense sum;
- monitored_barrier passing, and naming the rank that did not arrive (rank 0) while the
  others hear that rank 0 gave up;
- (alone: test_group_timeout) a group's timeout= bounding a barrier only rank 0 calls;
- a shape that differs at one position fails on every rank with one message, then the ranks
  go on in step;
- DistributedDataParallel whose parameters match single-process training on the whole batch
  (with find_unused_parameters, no_sync and gradient accumulation), with the allreduce,
  fp16_compress and PowerSGD communication hooks, ZeroRedundancyOptimizer, and Join with
  uneven inputs.

    chorusrun -np 3 python3 test_torch_distributed.py"""
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch  # noqa: F401  (registers the backend)

failures = []
dist.init_process_group(backend="chorus")
rank, size = dist.get_rank(), dist.get_world_size()


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"rank {rank}: FAILED: {what}", file=sys.stderr, flush=True)


def raises(call, words, what):
    try:
        call()
    except Exception as error:  # noqa: BLE001
        text = str(error)
        check(all(w in text for w in words), f"{what}: message {text!r} lacks {words}")
        return text
    check(False, f"{what}: raised nothing")
    return ""


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.int16, torch.int8, torch.uint8, torch.bool]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
       dist.ReduceOp.MAX]


def make(seed, r, count, dtype, op=None):
    """Rank r's input: small values, so that products stay in range."""
    g = torch.Generator().manual_seed(seed * 1009 + r)
    product = op is not None and op == dist.ReduceOp.PRODUCT
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if dtype.is_floating_point:
        values = torch.rand(count, generator=g, dtype=torch.float64)
        return ((values + 0.5) if product else values * 8 - 4).to(dtype)
    low = 1 if product else (0 if dtype == torch.uint8 else -9)
    return torch.randint(low, 4 if product else 10, (count,),
                         generator=g).to(dtype)


def reduced(seed, count, dtype, op, ranks):
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    values = torch.stack([make(seed, r, count, dtype, op).to(wide) for r in ranks])
    if op == dist.ReduceOp.SUM:
        result = values.sum(0)
    elif op == dist.ReduceOp.AVG:
        result = values.sum(0) / len(ranks)
    elif op == dist.ReduceOp.PRODUCT:
        result = values.prod(0)
    elif op == dist.ReduceOp.MIN:
        result = values.min(0).values
    else:
        result = values.max(0).values
    if dtype == torch.bool:
        return result != 0
    return result


def close(got, expected, dtype, what):
    if dtype.is_floating_point:
        tolerance = {torch.float16: 2e-2, torch.bfloat16: 8e-2}.get(dtype, 1e-6)
        ok = torch.allclose(got.to(torch.float64), expected, rtol=tolerance, atol=tolerance)
    elif dtype == torch.bool:
        ok = torch.equal(got, expected)
    else:
        ok = torch.equal(got.to(torch.int64), expected.to(dtype).to(torch.int64))
    check(ok, f"{what}: got {got[:6].tolist()}, expected {expected[:6].tolist()}")


def test_all_reduce():
    counts = [0, 1, max(size - 1, 1), 7, 1009]
    pending = []
    seed = 0
    for dtype in DTYPES:
        for op in OPS:
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue  # an average of integers: chorus rounds, torch's backends refuse
            seed += 1
            count = counts[seed % len(counts)]
            tensor = make(seed, rank, count, dtype, op)
            work = dist.all_reduce(tensor, op=op, async_op=seed % 2 == 0)
            pending.append((work, tensor, seed, count, dtype, op))
    for work, tensor, seed, count, dtype, op in reversed(pending):
        if work is not None:
            work.wait()
            check(work.is_completed(), "is_completed after wait")
        close(tensor, reduced(seed, count, dtype, op, range(size)), dtype,
              f"all_reduce {dtype} {op} of {count}")
    # Non-contiguous, in place.
    base = make(900, rank, 24, torch.float32).reshape(4, 6)
    view = base.t()
    dist.all_reduce(view)
    expected = sum(make(900, r, 24, torch.float32).reshape(4, 6) for r in range(size))
    check(torch.allclose(base, expected), "all_reduce of a transposed view")
    # A future chained as DDP's hooks chain them.
    t = torch.ones(3)
    doubled = dist.all_reduce(t, async_op=True).get_future().then(
        lambda fut: fut.value()[0] * 2).wait()
    check(torch.equal(doubled, torch.full((3,), 2.0 * size)), f"then(): {doubled}")
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
           ["ReduceOp", "not supported"], "BAND")


def test_group_overloads():
    """The group's own allreduce, broadcast and barrier, called as torch's ProcessGroup allows
    (chorus's group binds them itself, past torch's dispatcher): every overload, checked."""
    group = dist.distributed_c10d._get_default_group()
    t = make(60, rank, 7, torch.float32)
    group.allreduce([t]).wait()
    close(t, reduced(60, 7, torch.float32, dist.ReduceOp.SUM, range(size)), torch.float32,
          "group.allreduce([t])")
    t = make(61, rank, 5, torch.int64, dist.ReduceOp.MAX)
    group.allreduce([t], dist.ReduceOp.MAX).wait()
    close(t, reduced(61, 5, torch.int64, dist.ReduceOp.MAX, range(size)), torch.int64,
          "group.allreduce([t], MAX)")
    t = make(62, rank, 3, torch.float64, dist.ReduceOp.MIN)
    work = group.allreduce(t, op=dist.ReduceOp.MIN)
    check(work.wait() and work.is_completed() and work.is_success(), "allreduce(t) completes")
    # chorus's Work binds wait() itself: torch's signature, the timeout given or not.
    from datetime import timedelta
    check(work.wait(timedelta(seconds=30)) and work.wait(timeout=timedelta(seconds=30)),
          "wait(timeout) of a completed Work")
    check(torch.equal(work.result()[0], t), "allreduce(t): result() is the tensor")
    close(t, reduced(62, 3, torch.float64, dist.ReduceOp.MIN, range(size)), torch.float64,
          "group.allreduce(t, op=MIN)")
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.PRODUCT
    t = make(63, rank, 2, torch.float64, dist.ReduceOp.PRODUCT)
    value = group.allreduce([t], opts).get_future().wait()
    close(value[0], reduced(63, 2, torch.float64, dist.ReduceOp.PRODUCT, range(size)),
          torch.float64, "group.allreduce([t], opts) through its future")
    root = size - 1
    t = make(64, rank, 9, torch.int32)
    group.broadcast(t, root).wait()
    check(torch.equal(t, make(64, root, 9, torch.int32)), "group.broadcast(t, root)")
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    t = make(65, rank, 4, torch.float32)
    group.broadcast([t], opts).wait()
    check(torch.equal(t, make(65, 0, 4, torch.float32)), "group.broadcast([t], opts)")
    group.barrier().wait()
    raises(lambda: group.allreduce([t, t]), ["one tensor"], "allreduce of two tensors")


def test_broadcast_and_reduce():
    for root in range(size):
        t = make(100 + root, rank, 11, torch.float64)
        dist.broadcast(t, src=root)
        check(torch.equal(t, make(100 + root, root, 11, torch.float64)), f"broadcast from {root}")
        t = make(200 + root, rank, 5, torch.int64)
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        expected = reduced(200 + root, 5, torch.int64, dist.ReduceOp.SUM, range(size))
        if rank == root:
            close(t, expected, torch.int64, f"reduce to {root}")
        else:
            check(torch.equal(t, make(200 + root, rank, 5, torch.int64)),
                  f"reduce to {root} changed rank {rank}'s tensor")
    # Non-contiguous broadcast.
    t = make(150, rank, 12, torch.float32).reshape(3, 4).t()
    dist.broadcast(t, src=0)
    check(torch.equal(t, make(150, 0, 12, torch.float32).reshape(3, 4).t()),
          "broadcast of a transposed view")


def test_gathers():
    for count in (0, 1, 5):
        outs = [torch.empty(count, 2) for _ in range(size)]
        dist.all_gather(outs, make(300 + count, rank, count * 2, torch.float32).reshape(count, 2))
        for r in range(size):
            check(torch.equal(outs[r].reshape(-1), make(300 + count, r, count * 2,
                                                           torch.float32)),
                  f"all_gather of {count} rows: rank {r}'s")
        whole = torch.empty(size * count, 2)
        dist.all_gather_into_tensor(whole, make(310 + count, rank, count * 2,
                                                torch.float32).reshape(count, 2))
        expected = torch.cat([make(310 + count, r, count * 2, torch.float32) for r in range(size)])
        check(torch.equal(whole.reshape(-1), expected), f"all_gather_into_tensor of {count}")
    for root in range(size):
        mine = make(400 + root, rank, 3, torch.int32)
        outs = [torch.empty(3, dtype=torch.int32) for _ in range(size)] if rank == root else None
        dist.gather(mine, gather_list=outs, dst=root)
        if rank == root:
            check(all(torch.equal(outs[r], make(400 + root, r, 3, torch.int32))
                      for r in range(size)), f"gather to {root}")
        received = torch.empty(4)
        pieces = [make(500 + root, r, 4, torch.float32) for r in range(size)]
        dist.scatter(received, scatter_list=pieces if rank == root else None, src=root)
        check(torch.equal(received, make(500 + root, rank, 4, torch.float32)),
              f"scatter from {root}")
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank, "name": "x" * rank})
    check(objects == [{"rank": r, "name": "x" * r} for r in range(size)], f"objects {objects}")
    shared = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(shared, src=0)
    check(shared == ["from 0", 0], f"broadcast_object_list {shared}")


def test_reduce_scatter_and_all_to_all():
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG):
        for count in (0, 1, 6):
            inputs = [make(600 + r * 10 + count, rank, count, torch.float64, op)
                      for r in range(size)]
            out = torch.empty(count, dtype=torch.float64)
            dist.reduce_scatter(out, inputs, op=op)
            expected = reduced(600 + rank * 10 + count, count, torch.float64, op, range(size))
            close(out, expected, torch.float64, f"reduce_scatter {op} of {count}")
            whole = make(700 + count, rank, size * count, torch.float32, op)
            out = torch.empty(count)
            dist.reduce_scatter_tensor(out, whole, op=op)
            expected = reduced(700 + count, size * count, torch.float32, op,
                               range(size))[rank * count:(rank + 1) * count]
            close(out, expected, torch.float32, f"reduce_scatter_tensor {op} of {count}")
    # Uneven splits: rank r sends (r + k) % 3 rows of 2 to rank k.
    def rows(src, dst):
        return (src + dst) % 3
    send_splits = [rows(rank, k) for k in range(size)]
    recv_splits = [rows(k, rank) for k in range(size)]
    data = torch.cat([torch.full((rows(rank, k), 2), float(rank * 100 + k))
                      for k in range(size)])
    out = torch.empty(sum(recv_splits), 2)
    dist.all_to_all_single(out, data, output_split_sizes=recv_splits,
                           input_split_sizes=send_splits)
    expected = torch.cat([torch.full((rows(k, rank), 2), float(k * 100 + rank))
                          for k in range(size)])
    check(torch.equal(out, expected), "all_to_all_single with uneven splits")
    even = torch.arange(size * 2, dtype=torch.int64) + 1000 * rank
    out = torch.empty_like(even)
    dist.all_to_all_single(out, even)
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2) + 1000 * k for k in range(size)])
    check(torch.equal(out, expected), f"all_to_all_single even: {out.tolist()}")
    ins = [torch.full((k + 1,), float(rank)) for k in range(size)]
    outs = [torch.empty(rank + 1) for _ in range(size)]
    dist.all_to_all(outs, ins)
    check(all(torch.equal(outs[k], torch.full((rank + 1,), float(k))) for k in range(size)),
          "all_to_all of lists")
    dist.barrier()


def test_groups():
    for members in ([r for r in range(size) if r % 2 == 0], [r for r in range(size) if r % 2],
                    list(range(size))):
        group = dist.new_group(members) if members else None
        if not members or rank not in members:
            continue
        check(dist.get_backend(group) == "chorus", f"get_backend {dist.get_backend(group)}")
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, group=group)
        check(torch.equal(t, torch.full((3,), float(sum(members)))), f"group {members} sum")
        b = torch.full((2,), float(rank))
        dist.broadcast(b, src=members[-1], group=group)
        check(torch.equal(b, torch.full((2,), float(members[-1]))), f"group {members} bcast")
        outs = [torch.empty(1) for _ in members]
        dist.all_gather(outs, torch.tensor([float(rank)]), group=group)
        check([o.item() for o in outs] == [float(m) for m in members], f"group {members} gather")


def test_point_to_point():
    after, before = (rank + 1) % size, (rank - 1) % size
    seed = 500
    for dtype in (torch.float32, torch.int64, torch.float16, torch.bool):
        for count in (0, 1, 7, 1009):
            seed += 1
            sent = dist.isend(make(seed, rank, count, dtype), after, tag=count)
            into = torch.empty(2 * count, dtype=dtype)[::2]  # not contiguous
            dist.recv(into, before, tag=count)
            sent.wait()
            check(torch.equal(into, make(seed, before, count, dtype)),
                  f"recv {dtype} x {count} from rank {before}")
    # From any rank: recv returns the sender, whose data it took.
    if rank == 0:
        senders = []
        for _ in range(size - 1):
            into = torch.empty(5)
            sender = dist.recv(into, tag=3)
            senders.append(sender)
            check(torch.equal(into, make(900, sender, 5, torch.float32)),
                  f"recv from any: the data is not rank {sender}'s")
        check(sorted(senders) == list(range(1, size)), f"recv from any: senders {senders}")
    else:
        dist.send(make(900, rank, 5, torch.float32), 0, tag=3)
    # batch_isend_irecv around the ring, two tags, received in the other order.
    outs = [make(901, rank, 4, torch.float64), make(902, rank, 6, torch.float64)]
    ins = [torch.empty(4, dtype=torch.float64), torch.empty(6, dtype=torch.float64)]
    ops = [dist.P2POp(dist.irecv, ins[1], before, tag=2), dist.P2POp(dist.irecv, ins[0], before,
                                                                    tag=1),
           dist.P2POp(dist.isend, outs[0], after, tag=1), dist.P2POp(dist.isend, outs[1], after,
                                                                    tag=2)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    check(torch.equal(ins[0], make(901, before, 4, torch.float64)) and
          torch.equal(ins[1], make(902, before, 6, torch.float64)), "batch_isend_irecv")
    # In a group of the odd ranks, peers named by their rank in the job.
    odd = [r for r in range(size) if r % 2]
    group = dist.new_group(odd) if odd else None
    if rank in odd:
        i = odd.index(rank)
        sent = dist.isend(torch.full((3,), float(rank)), odd[(i + 1) % len(odd)], group=group)
        into = torch.empty(3)
        dist.recv(into, odd[(i - 1) % len(odd)], group=group)
        sent.wait()
        check(torch.equal(into, torch.full((3,), float(odd[(i - 1) % len(odd)]))), "group recv")
    raises(lambda: dist.send(torch.ones(1), after, tag=32767), ["monitored_barrier"],
           "a reserved tag")
    if size >= 2 and rank < 2:
        if rank == 1:
            dist.send(torch.ones(3), 0, tag=7)
        else:
            raises(lambda: dist.recv(torch.empty(2), 1, tag=7),
                   ["CHORUS_ERR_MISMATCH", "rank 1 sent 12 bytes where the receive takes 8"],
                   "a longer message")


def test_coalesced_and_sparse():
    # all_gather_coalesced: each rank's tensors of several shapes (torch takes one dtype per
    # call), complex too.
    def mine(r, dtype):
        shapes = [(2, 3), (5,), (1, 1, 1), (0,)]
        made = [make(700 + i, r, torch.Size(shape).numel(), torch.float64).reshape(shape)
                for i, shape in enumerate(shapes)]
        if dtype == torch.cfloat:
            return [torch.complex(t.float(), -t.float()) for t in made]
        return [t.to(dtype) for t in made]
    for dtype in (torch.float32, torch.int64, torch.cfloat):
        outputs = [[torch.empty_like(t) for t in mine(rank, dtype)] for _ in range(size)]
        dist.all_gather_coalesced(outputs, mine(rank, dtype))
        check(all(torch.equal(outputs[r][i], mine(r, dtype)[i]) for r in range(size)
                  for i in range(4)), f"all_gather_coalesced of {dtype}")
    # Sparse all_reduce: rank r has entries at rows r, r + 1 and 7 of a 10 x 2 tensor.
    def sparse(r):
        rows = torch.tensor([[r % 10, (r + 1) % 10, 7], [0, 1, r % 2]])
        return torch.sparse_coo_tensor(rows, make(710, r, 3, torch.float64), (10, 2))
    mine_sparse = sparse(rank)
    dist.all_reduce(mine_sparse)
    expected = sum(sparse(r).to_dense() for r in range(size))
    check(mine_sparse.is_sparse and torch.allclose(mine_sparse.to_dense(), expected),
          "sparse all_reduce")


def test_monitored_barrier():
    from datetime import timedelta
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)
    if size < 2:
        return
    # Rank 1 does not come: rank 0 names it; the others hear that rank 0 did not answer.
    if rank == 0:
        raises(lambda: dist.monitored_barrier(timeout=timedelta(seconds=1)),
               ["Rank 1 failed to pass monitoredBarrier in 1000 ms"], "monitored_barrier")
    elif rank > 1:
        raises(lambda: dist.monitored_barrier(timeout=timedelta(seconds=1)),
               [f"Rank {rank} successfully reached monitoredBarrier", "from rank 0"],
               "monitored_barrier")
    dist.barrier()
    dist.monitored_barrier(timeout=timedelta(seconds=30))  # a new call's tags: in step again


def test_group_timeout():
    """Alone (it stops chorus): only rank 0 calls a barrier of a group made with timeout=."""
    import time
    from datetime import timedelta
    group = dist.new_group(list(range(size)), timeout=timedelta(seconds=1))
    if rank == 0:
        started = time.monotonic()
        raises(lambda: dist.barrier(group), [" timeout ", "the operation's timeout"],
               "a barrier past the group's timeout")
        waited = time.monotonic() - started
        check(0.9 <= waited < 20, f"the barrier gave up after {waited:.1f} s")
    else:
        time.sleep(3)
        raises(lambda: dist.all_reduce(torch.ones(1)), ["rank 0"],
               "a call after rank 0 timed out")


def test_refusals_and_mismatch():
    if size < 2:
        return
    shape = 5 if rank == 1 else 4
    text = raises(lambda: dist.all_reduce(torch.ones(shape)), ["ordered position",
                                                               "shape mismatch"], "mismatch")
    mine = torch.tensor([len(text)], dtype=torch.int64)
    lengths = [torch.empty(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(lengths, mine)
    check(len({int(x) for x in lengths}) == 1, "the mismatch message differs between ranks")
    t = torch.ones(2)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((2,), float(size))), "in step after the mismatch")


class Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)
        self.unused = torch.nn.Linear(16, 4) if unused else None

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def batch(step, r, rows=4):
    g = torch.Generator().manual_seed(10_000 + step * 31 + r)
    return torch.randn(rows, 8, generator=g), torch.randn(rows, 4, generator=g)


def reference_model(steps, accumulate=1, unused=False, lr=0.05):
    """Single-process training on every rank's batches at once (the mean loss over all)."""
    torch.manual_seed(7)
    model = Net(unused)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(accumulate):
            x = torch.cat([batch(step * accumulate + micro, r)[0] for r in range(size)])
            y = torch.cat([batch(step * accumulate + micro, r)[1] for r in range(size)])
            (torch.nn.functional.mse_loss(model(x), y) / accumulate).backward()
        optimizer.step()
    return model


def same(model, reference, what, tolerance=1e-5):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        check(torch.allclose(p, q, atol=tolerance, rtol=tolerance),
              f"{what}: {name} differs from single-process training by "
              f"{(p - q).abs().max().item():.3g}")


def train_ddp(steps, accumulate=1, unused=False, hook=None, hook_state=None):
    torch.manual_seed(7)
    model = DDP(Net(unused), find_unused_parameters=unused)
    if hook is not None:
        model.register_comm_hook(hook_state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(accumulate):
            x, y = batch(step * accumulate + micro, rank)
            loss = torch.nn.functional.mse_loss(model(x), y) / accumulate
            if micro < accumulate - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()
    return model.module


def test_ddp():
    same(train_ddp(4), reference_model(4), "DDP")
    same(train_ddp(3, unused=True), reference_model(3, unused=True),
         "DDP find_unused_parameters")
    same(train_ddp(3, accumulate=2), reference_model(3, accumulate=2), "DDP no_sync")
    same(train_ddp(3, hook=default_hooks.allreduce_hook), reference_model(3), "allreduce hook")
    same(train_ddp(3, hook=default_hooks.fp16_compress_hook), reference_model(3),
         "fp16_compress_hook", tolerance=3e-3)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2, min_compression_rate=0.5)
    model = train_ddp(4, hook=powerSGD_hook.powerSGD_hook, hook_state=state)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(copies, flat)
    check(all(torch.equal(c, flat) for c in copies), "PowerSGD: ranks' parameters differ")


def test_zero_and_join():
    torch.manual_seed(7)
    model = DDP(Net())
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD,
                                        lr=0.05)
    for step in range(3):
        optimizer.zero_grad()
        x, y = batch(step, rank)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    same(model.module, reference_model(3), "ZeroRedundancyOptimizer")
    # Uneven inputs: rank r has r + 2 batches.
    torch.manual_seed(7)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Join([model]):
        for step in range(rank + 2):
            optimizer.zero_grad()
            x, y = batch(step, rank)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(copies, flat)
    check(all(torch.equal(c, flat) for c in copies), "Join: ranks' parameters differ")


TESTS = (test_all_reduce, test_group_overloads, test_broadcast_and_reduce, test_gathers,
         test_reduce_scatter_and_all_to_all, test_groups, test_point_to_point,
         test_coalesced_and_sparse, test_monitored_barrier, test_refusals_and_mismatch, test_ddp,
         test_zero_and_join)
chosen = sys.argv[1:]  # names of tests to run alone (all by default)
if chosen == ["test_group_timeout"]:
    # chorus has stopped: no collective can gather the verdict; each rank's exit code tells.
    test_group_timeout()
    print(f"torch_distributed group timeout, rank {rank}: "
          f"{'FAILED' if failures else 'passed'}", flush=True)
    sys.exit(1 if failures else 0)
for test in TESTS:
    if not chosen or test.__name__ in chosen:
        test()
total = torch.tensor([len(failures)])
dist.all_reduce(total)
if rank == 0:
    print(f"torch_distributed np={size}: {'passed' if total.item() == 0 else 'FAILED'} "
          f"({total.item()} failures)", flush=True)
dist.destroy_process_group()
sys.exit(1 if total.item() else 0)
