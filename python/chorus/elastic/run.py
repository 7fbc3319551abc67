"""chorus.elastic.run: Horovod's decorator for an elastic training function.

Horovod resets in-process: it shuts down and re-initializes its library over the new set of
workers. chorus does the same where its MPI lets it: under chorusrun's elastic driver with Open
MPI (whose mpirun keeps the survivors of a dead process running), a rank whose collective failed
restores the last commit from memory, tells the driver and waits for its word; the driver, which
saw which ranks died, names the ranks that go on (those on hosts where none died), and they form
chorus again over themselves in their own processes (chorus.core.reform), take the new rank 0's
commit and call the reset callbacks. A host back from its cooldown whose Open MPI daemon lives (its
ranks were killed, the job went on without them) joins in place too: at the next commit every
rank raises GrowInterrupt, the decorator adds ranks there (chorus.core.grow: the script starts
again on that host, and its hvd.elastic.run takes the running ranks' state), the grown world
takes rank 0's state, the reset callbacks run and the training function is entered again.
Everywhere else (MPICH's Hydra ends every rank when one dies; a lost Open MPI daemon ends
mpirun; hosts new to the launch; --restart-on-failure) a reset is a restart: every rank leaves
(the state it last committed is in the commit store), the driver starts the job again on the new
hosts, and the decorator, entered again by the restarted script, loads the newest commit on
every rank and calls the reset callbacks before the training function goes on.

On worlds without MPI (CHORUS_ELASTIC_WORLDS=ucx: the driver starts the ranks and forms each
world, chorus.elastic.worlds) the same happens without MPI's help: after a failed collective the
driver names the next world, the survivors open it in their own processes beside the ranks of
added hosts (whose hvd.init() joins it, and whose decorator takes rank 0's state), and training
goes on from the last commit.

Without the driver (plain mpirun) the decorator syncs the state, runs the function, and on a
failure restores the last commit and raises the error again."""
import functools
import os
import shutil
import sys

from ..core import (ChorusError, ChorusInternalError, HostsUpdatedInterrupt, grow, rank, reform,
                    shutdown, size)
from . import worlds
from .driver_link import DriverLink
from .state import GrowInterrupt

# The exit status of a rank that leaves so that the driver can restart it elsewhere.
EXIT_RESTART = 75
# Set for the processes chorus_grow starts (their environment comes through the command: what
# the launcher gave the spawned processes is its own, without the job's variables).
GROWN_ENVIRONMENT = "CHORUS_ELASTIC_GROWN"
# The variables a rank added in place gets from the one that started it.
_FORWARDED = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
              "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# How long a rank whose collective failed waits for the driver's word. The driver answers once
# every rank has reported or died, at most its report grace (2 s) after the first report.
VERDICT_WAIT_S = 30.0


def _can_go_on_in_place():
    """Whether this process can outlive a dead peer: on a world without MPI it does; Open MPI's
    mpirun with recovery on (chorusrun --elastic sets it) keeps it running; Hydra ends it."""
    return worlds.enabled() or \
        os.environ.get("OMPI_MCA_orte_enable_recovery", "").lower() in ("1", "true", "yes")


def _leave(link, reason, clean):
    link.leave("restart", reason)
    sys.stdout.flush()
    sys.stderr.flush()
    if clean:
        # Every rank leaves at the same commit: end MPI properly, so that the launcher sees a
        # job that ended well.
        try:
            shutdown()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
        os._exit(0)
    # A collective failed: peers may be gone, and MPI cannot end properly without them.
    os._exit(EXIT_RESTART)


def _go_on_in_place(link, state, reason):
    """After a failed collective (the state restored): asks the driver whether this process goes
    on, and if so forms chorus again over the ranks it names and takes the new rank 0's commit.
    Returns False when this rank must leave instead."""
    old_rank = rank()
    in_place = _can_go_on_in_place()
    own_commit = state._commits
    again = False
    verdict = link.lost(reason, in_place, VERDICT_WAIT_S)
    while True:
        if verdict is None or not in_place:
            return False
        try:
            if isinstance(verdict, tuple):  # ("open", WORLD): the next world without MPI
                worlds.rejoin(link, verdict[1])
            else:
                reform(verdict)
            if again:
                # The attempt before may have stopped halfway through the state going round:
                # back to this rank's own commit (now that chorus runs: a sampler asks its size).
                state._commits = own_commit
                state.restore()
            number = state._resume_in_place()
            break
        except ChorusInternalError as e:
            if not worlds.enabled():
                raise  # over MPI the others wait in MPI for the lost rank: a restart
            # On a world without MPI a member lost while the world formed, or while the new
            # rank 0's commit went round, is a failure like the first: told to the driver, which
            # names the next world without that member.
            again = True
            reason = "failure " + str(e).splitlines()[0][:400]
            print(f"chorus.elastic: rank {old_rank}: {reason}; asking the elastic driver again",
                  file=sys.stderr, flush=True)
            verdict = link.lost(reason, True, VERDICT_WAIT_S)
    print(f"chorus.elastic: rank {old_rank}: {reason}; going on in this process as rank "
          f"{rank()} of {size()}, from commit {number}", file=sys.stderr, flush=True)
    if rank() == 0:
        link.resumed(number)
    state.on_reset()
    return True


def _grown_command():
    """The command and arguments that start this script again as a new rank: through env(1),
    with the job's variables (CHORUS_*, HOROVOD_*, the paths) and GROWN_ENVIRONMENT."""
    variables = [f"{name}={value}" for name, value in sorted(os.environ.items())
                 if (name.startswith(("CHORUS_", "HOROVOD_")) or name in _FORWARDED)
                 and name != GROWN_ENVIRONMENT]
    script = [os.path.abspath(sys.argv[0])] + sys.argv[1:] if sys.argv and sys.argv[0] else []
    return shutil.which("env") or "/usr/bin/env", \
        variables + [f"{GROWN_ENVIRONMENT}=1", sys.executable] + script


def _grow_in_place(link, state, hosts):
    """At a commit, every rank alike: adds a rank on each of `hosts` (chorus_grow; on worlds
    without MPI, the next world with the ranks the driver started there), then the grown world
    takes rank 0's state. A failed spawn leaves for a restart (rank 0 alone hears
    of it; the driver ends the others)."""
    old_size = size()
    if rank() == 0:
        link.growing(state._commits)
    if worlds.enabled():
        # The driver started the added ranks, which wait: every rank opens the next world.
        worlds.rejoin(link, wait_seconds=VERDICT_WAIT_S)
    else:
        command, arguments = _grown_command()
        try:
            grow(command, arguments, len(hosts), ",".join(hosts))
        except ChorusInternalError as e:
            _leave_after_failure(link, e)
    # The reset callbacks first, as Horovod's surviving workers run them before the sync: what
    # they set (a learning rate scaled by the size, say) then reaches the new ranks with rank
    # 0's state, and the new ranks run none.
    state.on_reset()
    number = state._join_grown()
    print(f"chorus.elastic: rank {rank()}: grew in place from {old_size} to {size()} ranks "
          f"({', '.join(hosts)} added), from commit {number}", file=sys.stderr, flush=True)
    if rank() == 0:
        link.grown(number, size())


def _leave_after_failure(link, error):
    first_line = str(error).splitlines()[0]
    try:
        who = f"rank {rank()}"
    except ChorusError:  # chorus shut down, forming the next world
        who = "a rank between worlds"
    print(f"chorus.elastic: {who}: {first_line}; leaving so that the driver restarts "
          "the job from the last commit", file=sys.stderr, flush=True)
    _leave(link, "failure " + first_line[:400], clean=False)


def run_fn(func, state_type_check=None):
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if state_type_check is not None:
            state_type_check(state)
        link = DriverLink.from_environment()
        state._link = link
        if link is not None:
            link.hello(rank(), size())
        try:
            if link is not None and (os.environ.get(GROWN_ENVIRONMENT) == "1" or
                                     (worlds.first_world or 0) > 0):
                # Added in place by the running ranks (_grow_in_place): their state, not the
                # store's.
                state._join_grown()
            else:
                resumed = state._resume()
                if resumed is None:
                    state.sync()
                else:
                    if link is not None and rank() == 0:
                        link.resumed(resumed)
                    state.on_reset()
            while True:
                try:
                    result = func(state, *args, **kwargs)
                    break
                except GrowInterrupt as e:
                    if link is None:
                        raise
                    _grow_in_place(link, state, e.hosts)
                except ChorusInternalError as e:
                    state.restore()
                    if link is None:
                        raise
                    reason = "failure " + str(e).splitlines()[0][:400]
                    try:
                        went_on = _go_on_in_place(link, state, reason)
                    except ChorusInternalError:
                        went_on = False  # another failure while forming again: restart
                    if not went_on:
                        _leave_after_failure(link, e)
            state._bcast_object(None)  # every rank finished: the commits can go
        except HostsUpdatedInterrupt:
            if link is None:
                raise
            _leave(link, "updated", clean=True)
        except ChorusInternalError as e:
            state.restore()
            if link is None:
                raise
            _leave_after_failure(link, e)
        except BaseException as e:
            if link is not None:
                link.leave("failed", f"{type(e).__name__}: {e}")
            raise
        state._finished()
        if link is not None:
            link.leave("done")
        return result
    return wrapper
