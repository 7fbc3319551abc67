"""TorchState: the elastic state of a PyTorch training loop (Horovod's), whose models,
optimizers, learning-rate schedulers and ElasticSamplers are saved, restored and synced by
handlers, and whose other keyword arguments are plain objects (ObjectState)."""
import copy
import io

import torch

from ...core import local_rank, rank
from ...elastic.state import ObjectState
from ..functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                         broadcast_parameters)
from .sampler import ElasticSampler


def _to_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(payload):
    return torch.load(io.BytesIO(payload))


class _Handler:
    def __init__(self, value):
        self.value = value
        self.saved = copy.deepcopy(value.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def set_value(self, value):
        self.value = value
        self.save()

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class _ModelHandler(_Handler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


def _scheduler_base():
    scheduler = torch.optim.lr_scheduler
    return getattr(scheduler, "LRScheduler", None) or scheduler._LRScheduler


# Which handler keeps which kind of value; a value of none of these is a plain object.
_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (_scheduler_base(), _Handler), (ElasticSampler, _Handler)]


def _handler_for(value):
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """TorchState(model, optimizer, **kwargs): every keyword becomes an attribute. Assigning a
    new model, optimizer, scheduler or sampler to one saves it."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, objects = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                objects[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         allgather_object=allgather_object, get_local_rank=local_rank,
                         serialize=_to_bytes, deserialize=_from_bytes, **objects)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def _saved(self):
        saved = super()._saved()
        saved["handlers"] = {name: handler.saved for name, handler in self._handlers.items()}
        return saved

    def _load_saved(self, saved):
        for name, handler in self._handlers.items():
            handler.saved = saved["handlers"][name]
        super()._load_saved(saved)  # restores the objects and (through restore) the handlers
