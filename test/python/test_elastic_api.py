"""hvd.elastic's meaning, in one process per rank (no driver, no restart): what Horovod's elastic
API documents, and what chorus adds (commits that outlive the ranks).

- ObjectState and TorchState: commit() saves, restore() goes back to the commit (also lists
  changed in place after it), sync() makes every rank hold rank 0's state;
- reset callbacks run in the order registered;
- chorus.elastic.run without a driver: a failed collective restores the commit and raises again;
  the first argument must be a State;
- check_host_updates: an update that only rank 0 heard of raises HostsUpdatedInterrupt on every
  rank at the same commit (skip_sync when hosts were only removed); an old one does not;
- the commit store keeps only the newest commit, ignores a half-written one, and after a restart
  every rank loads the newest commit that any rank has, from that rank, and keeps a copy;
- ElasticSampler: what is left of an epoch, split among any number of ranks, covers every
  remaining sample, with at most size - 1 repeated.

    mpirun -np 3 python3 test_elastic_api.py"""
import os
import shutil
import sys
import tempfile

import torch

import chorus.core
import chorus.torch as hvd
from checks import check, counts
from chorus.elastic import CommitStore
from chorus.torch.elastic import sampler as sampler_module


def object_state(rank, size):
    state = hvd.elastic.ObjectState(epoch=1, history=[1])
    state.history.append(2)
    state.epoch = 2
    state.commit()
    state.history.append(3)
    state.epoch = 3
    state.restore()
    check(state.epoch == 2 and state.history == [1, 2],
          f"ObjectState restored to the commit: epoch {state.epoch}, history {state.history}")
    state.epoch = 10 + rank
    state.save()
    state.sync()
    check(state.epoch == 10, f"ObjectState.sync: rank 0's epoch (10), not {state.epoch}")


def torch_state(rank, size):
    torch.manual_seed(rank)  # different models on purpose
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, optimizer, batch=0)
    state.sync()
    weights = hvd.allgather_object(model.weight.detach().clone())
    check(all(torch.equal(w, weights[0]) for w in weights), "TorchState.sync: rank 0's model")
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    state.batch = 5
    state.commit()
    committed = model.weight.detach().clone()
    momentum = optimizer.state[model.weight]["momentum_buffer"].clone()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    state.batch = 6
    state.restore()
    check(torch.equal(model.weight, committed), "TorchState.restore: the committed weights")
    check(torch.equal(optimizer.state[model.weight]["momentum_buffer"], momentum),
          "TorchState.restore: the committed optimizer state")
    check(state.batch == 5, f"TorchState.restore: batch 5, not {state.batch}")
    # A failure in the middle of backward: restore() gives up the step and its gradient
    # allreduces in flight (the next zero_grad would refuse them), and the next step is right.
    distributed = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, distributed)
    model(torch.ones(2, 4)).sum().backward()  # the hooks start the allreduces
    check(bool(distributed._handles), "allreduces in flight after backward")
    hvd.barrier()  # they complete, as a failure would complete them
    state.restore()
    distributed.zero_grad()  # raised AssertionError before
    before = model.weight.detach().clone()
    model(torch.full((2, 4), float(rank + 1))).sum().backward()
    distributed.step()
    mean_input = 2 * sum(r + 1 for r in range(size)) / size  # the batch's rows, averaged
    check(torch.allclose(before - model.weight, torch.full_like(before, 0.1 * mean_input)),
          "the step after a restore in the middle of backward")
    replacement = torch.nn.Linear(4, 3)
    state.model = replacement  # assigning a handled value saves it
    check(state.model is replacement and state._handlers["model"].value is replacement,
          "TorchState: a new model assigned is the one kept")


def callbacks(rank, size):
    calls = []
    state = hvd.elastic.ObjectState(value=0)
    state.register_reset_callbacks([lambda: calls.append("first")])
    state.register_reset_callbacks([lambda: calls.append("second")])
    state.on_reset()
    check(calls == ["first", "second"], f"reset callbacks in order: {calls}")


def run_without_driver(rank, size):
    state = hvd.elastic.ObjectState(step=0)

    @hvd.elastic.run
    def train(state):
        state.step = 1
        state.commit()
        state.step = 2
        raise chorus.core.error(-9, "a collective failed (raised by the test)")
    try:
        train(state)
        check(False, "elastic.run without a driver: the failure was swallowed")
    except hvd.HorovodInternalError:
        check(state.step == 1, f"elastic.run: restored to the commit (step 1), not {state.step}")
    try:
        hvd.elastic.run(lambda s: None)("not a state")
        check(False, "elastic.run accepted a first argument that is not a State")
    except ValueError as error:
        check("State" in str(error), f"elastic.run's message names the State: {error}")


class FakeLink:
    """What the driver link offers State: a queue of (number, kind), and commits it reports."""

    def __init__(self):
        import queue
        self.updates = queue.Queue()
        self.commits = []

    def commit(self, number):
        self.commits.append(number)


def host_updates(rank, size):
    state = hvd.elastic.ObjectState(step=0)
    state._link = FakeLink()
    state.commit()  # nothing reported: no interrupt
    if rank == 0:
        state._link.updates.put((1, "added"))
    try:
        state.commit()
        check(False, "an update rank 0 heard of did not interrupt this rank")
    except hvd.HostsUpdatedInterrupt as interrupt:
        check(not interrupt.skip_sync, "hosts added: skip_sync is False")
    if rank == 0:
        state._link.updates.put((2, "removed"))
    try:
        state.check_host_updates()
        check(False, "a removal did not interrupt")
    except hvd.HostsUpdatedInterrupt as interrupt:
        check(interrupt.skip_sync, "hosts only removed: skip_sync is True")
    if rank == 0:
        state._link.updates.put((2, "added"))  # not newer than the last one
    try:
        state.check_host_updates()
    except hvd.HostsUpdatedInterrupt:
        check(False, "an update already handled interrupted again")


def commit_store(rank, size):
    root = hvd.broadcast_object(tempfile.mkdtemp(prefix="chorus-elastic-test-") if rank == 0
                                else None)
    store = CommitStore(root, host=f"store-{rank}")
    store.write(1, b"one")
    store.write(2, b"two")
    os.makedirs(store.directory, exist_ok=True)
    with open(os.path.join(store.directory, ".commit-3.999.tmp"), "wb") as f:
        f.write(b"half")  # a commit killed while being written
    check(store.newest() == 2 and store.read(2) == b"two", "the store's newest commit is 2")
    check(sorted(os.listdir(store.directory)) == [".commit-3.999.tmp", "commit-2.bin"],
          f"only the newest commit kept: {sorted(os.listdir(store.directory))}")
    hvd.barrier()  # remove() also removes the shared root once empty: after every rank wrote
    store.remove()
    check(not os.path.exists(store.directory), "remove() leaves nothing behind")
    hvd.barrier()

    # A restart: every rank a host of its own; only the last rank holds commit 7, rank 0
    # commit 3, the others none.
    torch.manual_seed(100 + rank)
    model = torch.nn.Linear(3, 2)
    state = hvd.elastic.TorchState(model, None, epoch=rank)
    state._store = CommitStore(root, host=f"host-{rank}")
    state._local_rank = lambda: 0
    if rank == size - 1 or rank == 0:
        state._commits = 6 if rank == size - 1 else 2
        state.epoch = 70 if rank == size - 1 else 30
        state.commit()
    expected = hvd.broadcast_object(model.weight.detach().clone(), root_rank=size - 1)
    fresh = torch.nn.Linear(3, 2)
    restarted = hvd.elastic.TorchState(fresh, None, epoch=-1)
    restarted._store = CommitStore(root, host=f"host-{rank}")
    restarted._local_rank = lambda: 0
    number = restarted._resume()
    check(number == 7, f"resumed from the newest commit (7), not {number}")
    check(restarted.epoch == 70, f"the newest commit's epoch (70), not {restarted.epoch}")
    check(torch.equal(fresh.weight, expected), "the newest commit's model, from the rank with it")
    check(restarted._store.newest() == 7, "every host keeps a copy of the commit it resumed")
    hvd.barrier()
    if rank == 0:
        shutil.rmtree(root)


def sampler(rank, size):
    dataset = list(range(23))
    real = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
    shares = hvd.allgather_object(list(real))
    every = sorted(i for share in shares for i in share)
    check(set(every) == set(dataset) and len(every) - len(dataset) < size,
          f"np={size}: the ranks' shares cover the epoch ({len(every)} indices)")
    real.record_batch(0, 2)
    real.record_batch(1, 2)  # 2 batches of 2 on every rank
    processed = 4 * size
    check(real.state_dict() == {"epoch": 0, "processed_num": processed},
          f"state_dict after two batches: {real.state_dict()}")
    saved_size, saved_rank = sampler_module.size, sampler_module.rank
    try:
        for new_size in (1, 2, 5):  # the job restarted on new_size ranks
            union = []
            for new_rank in range(new_size):
                sampler_module.size = lambda: new_size
                sampler_module.rank = lambda r=new_rank: r
                resumed = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
                resumed.load_state_dict(real.state_dict())
                union += list(resumed)
            order = list(range(23))
            import random
            random.Random(3).shuffle(order)
            rest = order[processed:]
            check(set(union) == set(rest) and len(union) - len(rest) < new_size,
                  f"{size} ranks -> {new_size}: the rest of the epoch once "
                  f"({len(rest)} left, {len(union)} given)")
    finally:
        sampler_module.size, sampler_module.rank = saved_size, saved_rank
    real.set_epoch(1)
    check(real.processed_num == 0 and real.epoch == 1, "set_epoch starts an empty epoch")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for part in (object_state, torch_state, callbacks, run_without_driver, host_updates,
                 commit_store, sampler):
        part(rank, size)
    totals = hvd.allreduce(torch.tensor([counts["passed"], counts["failed"]], dtype=torch.int64),
                           op=hvd.Sum, name="verdict")
    hvd.shutdown()
    if rank == 0:
        print(f"elastic api np={size}: {totals[0]} passed, {totals[1]} failed", flush=True)
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
