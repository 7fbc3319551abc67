"""chorus.elastic.run: Horovod's decorator for an elastic training function.

Horovod resets in-process: it shuts down and re-initializes its library over the new set of
workers. MPI cannot do that (no MPI implementation chorus supports can drop a dead process from a
communicator or initialize twice), so under chorusrun's elastic driver a reset is a restart: every
rank leaves (the state it last committed is in the commit store), the driver starts the job again
on the new hosts, and the decorator, entered again by the restarted script, loads the newest
commit on every rank and calls the reset callbacks before the training function goes on.

Without the driver (plain mpirun) the decorator syncs the state, runs the function, and on a
failure restores the last commit and raises the error again."""
import functools
import os
import sys

from ..core import ChorusInternalError, HostsUpdatedInterrupt, rank, shutdown, size
from .driver_link import DriverLink

# The exit status of a rank that leaves so that the driver can restart it elsewhere.
EXIT_RESTART = 75


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
            resumed = state._resume()
            if resumed is None:
                state.sync()
            else:
                if link is not None and rank() == 0:
                    link.resumed(resumed)
                state.on_reset()
            result = func(state, *args, **kwargs)
            state._bcast_object(None)  # every rank finished: the commits can go
        except HostsUpdatedInterrupt:
            if link is None:
                raise
            _leave(link, "updated", clean=True)
        except ChorusInternalError as e:
            state.restore()
            if link is None:
                raise
            first_line = str(e).splitlines()[0]
            print(f"chorus.elastic: rank {rank()}: {first_line}; leaving so that the driver "
                  "restarts the job from the last commit", file=sys.stderr, flush=True)
            _leave(link, "failure " + first_line[:400], clean=False)
        except BaseException as e:
            if link is not None:
                link.leave("failed", f"{type(e).__name__}: {e}")
            raise
        state._finished()
        if link is not None:
            link.leave("done")
        return result
    return wrapper
