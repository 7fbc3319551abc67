"""An elastic training job for the elastic suite (test/check_elastic.sh), written as a Horovod
user writes one, that also checks what elastic training promises:

- every sample of every epoch is processed once (a histogram of the processed indices, summed
  over the ranks each step, is part of the committed state; at the end of each epoch every index
  must have been seen once, apart from the at most size()-1 repeated to even out the shares);
- a restarted job goes on from the last commit: rank 0 prints the loss of the model on a fixed
  batch at each commit and again after resuming, and the two must be equal;
- at the end the model is identical on every rank.

Rank 0 prints lines the suite reads: `step ...`, `commit N eval=LOSS`, `resumed N eval=LOSS`
(after a restart) or `resumed N in place eval=LOSS` (after going on in the surviving processes),
`grown N size S eval=LOSS` (after ranks were added in place),
`epoch E ok ...` or `epoch E WRONG ...`, `final ... pids P,...`; every rank prints `started pid P`."""
import argparse
import hashlib
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import chorus.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=240)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--commit-every", type=int, default=5)
parser.add_argument("--step-delay", type=float, default=0.05)
parser.add_argument("--fail-at-step", type=int, default=0,
                    help="rank --fail-rank raises an error of its own at this step")
parser.add_argument("--fail-rank", type=int, default=1)
parser.add_argument("--crash-at-step", type=int, default=0,
                    help="in the first generation, rank --fail-rank dies (SIGKILL) at this step")
parser.add_argument("--crash-in-commit", type=int, default=0,
                    help="in the first generation, rank --fail-rank dies (SIGKILL) in the middle "
                         "of this commit (saved on its own, the others in its collectives)")
parser.add_argument("--crash-in-rebuild", type=int, default=-1,
                    help="in the first generation, this rank dies (SIGKILL) as chorus is formed "
                         "again over the survivors of another fault")
parser.add_argument("--stop-file", default="",
                    help="the job ends after the epoch in which this file appeared (rank 0 looks)")
args = parser.parse_args()

hvd.init()
print(f"started pid {os.getpid()} rank {hvd.rank()} generation "
      f"{os.environ.get('CHORUS_ELASTIC_GENERATION')}", flush=True)
torch.manual_seed(0)
torch.set_num_threads(1)
features = torch.randn(args.samples, 16)
labels = (features[:, :4].sum(dim=1) > 0).long()
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, labels)
probe = torch.randn(32, 16)
probe_labels = (probe[:, :4].sum(dim=1) > 0).long()

torch.manual_seed(1 + hvd.rank())  # different on purpose: the first sync must even them out
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
base_lr = 0.05
optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)


def say(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def probe_loss():
    with torch.no_grad():
        return F.cross_entropy(model(probe), probe_labels).item()


def first_generation():
    return os.environ.get("CHORUS_ELASTIC_GENERATION") == "0"


def die(where, rank=None):
    rank = hvd.rank() if rank is None else rank
    print(f"rank {rank} dies {where} at {time.time():.3f}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def commit(state):
    if (state._commits + 1 == args.crash_in_commit and hvd.rank() == args.fail_rank and
            first_generation()):
        state.save()
        die(f"in commit {args.crash_in_commit}")
    # Said first: a commit that another rank's death interrupts may still be the newest one
    # stored (this rank wrote it), and one that raises HostsUpdatedInterrupt was made all the
    # same. Said by the last rank too, for when rank 0's host is the one killed.
    if hvd.rank() in (0, hvd.size() - 1):
        print(f"commit {state._commits + 1} eval={probe_loss()!r}", flush=True)
    state.commit()


def check_epoch(state):
    counts = state.counts
    missing = int((counts == 0).sum())
    repeated = int((counts - 1).clamp(min=0).sum())
    if missing == 0 and repeated < hvd.size():
        say(f"epoch {state.epoch} ok: all {args.samples} samples processed, {repeated} repeated "
            f"to even out {hvd.size()} ranks")
    else:
        say(f"epoch {state.epoch} WRONG: {missing} samples never processed, {repeated} repeated")


def stop_requested():
    return bool(args.stop_file) and hvd.broadcast_object(os.path.exists(args.stop_file),
                                                         root_rank=0, name="stop")


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs and not stop_requested():
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                             sampler=state.sampler)
        for batch_index, (indices, x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            seen = torch.zeros(args.samples)
            seen[indices] = 1
            state.counts += hvd.allreduce(seen, op=hvd.Sum, name="seen")
            state.sampler.record_batch(batch_index, args.batch_size)
            state.steps += 1
            if state.steps == args.fail_at_step and hvd.rank() == args.fail_rank:
                raise RuntimeError(f"a bug in the training script at step {state.steps}")
            if (state.steps == args.crash_at_step and hvd.rank() == args.fail_rank and
                    first_generation()):
                die(f"at step {state.steps}")
            say(f"step {state.steps} epoch {state.epoch} size {hvd.size()} "
                f"loss {loss.item():.5f} time {time.time():.3f}")
            time.sleep(args.step_delay)
            if state.steps % args.commit_every == 0:
                commit(state)
        check_epoch(state)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.counts = torch.zeros(args.samples)
        commit(state)


def on_reset():
    for group in optimizer.param_groups:
        group["lr"] = base_lr * hvd.size()
    say(f"reset: {hvd.size()} ranks, lr {base_lr * hvd.size():g}")


if args.crash_in_rebuild == hvd.rank() and first_generation():
    import chorus.elastic.run as elastic_run  # where hvd.elastic.run forms chorus again

    def reform_and_die(*_):
        # (on worlds without MPI chorus is shut down by now)
        die("as chorus is formed again", args.crash_in_rebuild)

    elastic_run.reform = reform_and_die  # over MPI
    elastic_run.worlds.join = reform_and_die  # on worlds without MPI (--worlds ucx)

state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, steps=0,
                               counts=torch.zeros(args.samples))
state.register_reset_callbacks([on_reset])
_resumed_report = state._resume


def resume_and_report():
    number = _resumed_report()
    if number is not None:
        say(f"resumed {number} eval={probe_loss()!r}")
    return number


state._resume = resume_and_report


def reported(method, words):
    """The state's `method`, which returns a commit number, saying words(number) and the loss."""
    def report():
        number = method()
        say(f"{words(number)} eval={probe_loss()!r}")
        return number
    return report


state._resume_in_place = reported(state._resume_in_place, lambda n: f"resumed {n} in place")
state._join_grown = reported(state._join_grown, lambda n: f"grown {n} size {hvd.size()}")
train(state)

digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                 for p in model.parameters())).hexdigest()[:16]
digests = hvd.allgather_object(digest)
pids = hvd.allgather_object(os.getpid())
identical = len(set(digests)) == 1
say(f"final size {hvd.size()} steps {state.steps} epochs {state.epoch} model {digest} "
    f"{'identical on every rank' if identical else 'DIFFERS: ' + ' '.join(digests)} "
    f"pids {','.join(map(str, pids))}")
sys.exit(0 if identical else 1)
