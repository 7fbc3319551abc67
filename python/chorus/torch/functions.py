"""Helpers over the collectives, as horovod/torch/functions.py: broadcasting a model's
parameters, an optimizer's state and picklable objects, and gathering objects."""
import pickle

import torch

from ..core import rank
from .mpi_ops import allgather, broadcast_, broadcast_async_, synchronize
from .optimizer import _is_distributed


def allgather_object(obj, name=None, process_set=None):
    """Gathers a picklable object from every rank; returns the list, in rank order. Its default
    name is the same on every rank and every call ("allgather_object.sz", ".t"), not a count of
    unnamed calls: ranks that made different numbers of them before still meet here (Horovod
    names it after the object's type, for the same reason, which ranks passing objects of
    different types would not share)."""
    name = name or "allgather_object"
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=f"{name}.sz",
                      process_set=process_set)
    data = allgather(payload, name=f"{name}.t", process_set=process_set).numpy().tobytes()
    objects, start = [], 0
    for length in sizes.tolist():
        objects.append(pickle.loads(data[start:start + length]))
        start += length
    return objects




def broadcast_parameters(params, root_rank):
    """Broadcasts a model's state_dict(), named_parameters() or parameters() from root_rank, in
    place. Unnamed tensors are named by their position, the same on every rank."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif torch.is_tensor(params) or isinstance(params, (str, bytes)):
        raise ValueError(f"broadcast_parameters: params of type {type(params).__name__}: pass "
                         "a state_dict(), named_parameters() or parameters()")
    else:
        items = [entry if isinstance(entry, tuple) else (f"unnamed.{index}", entry)
                 for index, entry in enumerate(params)]
    handles = []
    for name, value in items:
        if not torch.is_tensor(value):
            continue
        target = value.data if hasattr(value, "data") else value
        handles.append(broadcast_async_(target, root_rank, name=f"broadcast.parameter.{name}"))
    for handle in handles:
        synchronize(handle)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Broadcasts a picklable object from root_rank; returns it on every rank. Its default name
    is the same on every rank and call, as allgather_object's, also where only the root passes
    an object (the others None)."""
    name = name or "broadcast_object"
    payload = None
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name=f"{name}.sz", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=f"{name}.t", process_set=process_set)
    return pickle.loads(payload.numpy().tobytes())


def _initialize_state(optimizer):
    """A fresh optimizer has no state yet: as Horovod does, every parameter that trains gets a
    zero gradient and the optimizer takes one step with it, which creates its state (Adam's
    moments and step count, say). A DistributedOptimizer steps without allreducing, so that this
    rank does not wait for the others."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if _is_distributed(optimizer):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank):
    """Broadcasts an optimizer's state and hyperparameters from root_rank, so that every rank
    resumes identically. The state's tensors travel in place, fused like parameters; only their
    shapes and dtypes and the other values are pickled. Ranks without state (a fresh optimizer)
    get root_rank's. With Compression.powersgd, root_rank's step count and Q's travel too (they
    must be the same on every rank); each rank keeps its own residuals."""
    name = "broadcast.optimizer_state"
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    layout, tensors = None, []
    if rank() == root_rank:
        state = optimizer.state_dict()
        layout = {"param_groups": state["param_groups"], "state": {}}
        for parameter, entries in state["state"].items():
            layout["state"][parameter] = {}
            for key, value in entries.items():
                # Scalars (Adam's step, say) are pickled; tensors go by broadcast.
                if torch.is_tensor(value) and value.dim() > 0:
                    layout["state"][parameter][key] = ("tensor", tuple(value.shape), value.dtype)
                    tensors.append(value.detach().cpu().contiguous())
                else:
                    layout["state"][parameter][key] = ("value", value)
        if "powersgd" in state:
            low_rank = state["powersgd"]
            layout["powersgd"] = {"iteration": low_rank["iteration"],
                                  "q": {parameter: (tuple(q.shape), q.dtype)
                                        for parameter, q in low_rank["q"].items()}}
            tensors += [q.contiguous() for q in low_rank["q"].values()]
    layout = broadcast_object(layout, root_rank, name=f"{name}.layout")
    if rank() != root_rank:
        tensors = [torch.empty(shape, dtype=dtype)
                   for entries in layout["state"].values()
                   for kind, *rest in entries.values() if kind == "tensor"
                   for shape, dtype in [rest]]
        tensors += [torch.empty(shape, dtype=dtype)
                    for shape, dtype in layout.get("powersgd", {}).get("q", {}).values()]
    handles = [broadcast_async_(tensor, root_rank, name=f"{name}.{index}")
               for index, tensor in enumerate(tensors)]
    for handle in handles:
        synchronize(handle)
    if rank() == root_rank:
        return
    received = iter(tensors)
    state = {parameter: {key: next(received) if entry[0] == "tensor" else entry[1]
                         for key, entry in entries.items()}
             for parameter, entries in layout["state"].items()}
    loaded = {"param_groups": layout["param_groups"], "state": state}
    if "powersgd" in layout:
        own = optimizer.state_dict().get("powersgd")
        loaded["powersgd"] = {"iteration": layout["powersgd"]["iteration"],
                              "q": {parameter: next(received)
                                    for parameter in layout["powersgd"]["q"]},
                              "residual": own["residual"] if own else {}}
    optimizer.load_state_dict(loaded)


