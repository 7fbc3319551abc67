"""Horovod's elastic API for PyTorch (horovod.torch.elastic), reachable as hvd.elastic:

    @hvd.elastic.run
    def train(state): ...  # state.commit() every few batches

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([on_reset])
    train(state)

Launch with chorusrun --elastic (--min-np, --max-np, --host-discovery-script, ...). See
docs/elastic.md for how chorus brings a job to new hosts (by restarting its ranks from the last
commit) and where that differs from Horovod."""
from ...core import HostsUpdatedInterrupt, local_rank, rank
from ...elastic.run import run_fn
from ...elastic.state import ObjectState as _ObjectState
from ...elastic.state import State
from ..functions import allgather_object, broadcast_object
from ..mpi_ops import HorovodInternalError
from .sampler import ElasticSampler
from .state import TorchState


class ObjectState(_ObjectState):
    """State of plain Python objects, synced with chorus.torch's broadcast_object."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         allgather_object=allgather_object, get_local_rank=local_rank, **kwargs)


def _check_state(state):
    if not isinstance(state, State):
        raise ValueError(f"hvd.elastic.run: the function's first argument must be a "
                         f"hvd.elastic State (TorchState, ObjectState), not "
                         f"{type(state).__name__}")


def run(func):
    """Decorates an elastic training function whose first argument is its State (see
    chorus.elastic.run)."""
    return run_fn(func, _check_state)


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HorovodInternalError", "HostsUpdatedInterrupt"]
