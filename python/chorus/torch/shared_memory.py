"""Tensors in chorus's shared heap (chorus_mem_alloc): memory that the other ranks of the host map,
so that an allreduce of a tensor that lies there on every rank reads each rank's input and
writes each rank's result in place on each host, about half the memory traffic of staging it.

DistributedOptimizer moves the dense gradients of CPU parameters larger than 64 KiB there when it
first allreduces them (CHORUS_SHARED_GRADIENTS, on by default); shared_gradients() and shared_tensor() do it for
other loops."""
import os

import torch

from ..core import shared_block

_TRUE, _FALSE = ("1", "on", "true", "yes"), ("0", "off", "false", "no")

# DistributedOptimizer moves gradients larger than this (CHORUS_FUSION_TENSOR_LIMIT's default):
# smaller ones are fused, and a fused batch is staged wherever its tensors lie.
SHARED_GRADIENT_MINIMUM = 64 << 10


def shared_tensor(shape, dtype=torch.float32):
    """A zeroed CPU tensor of `shape` and `dtype` in the shared heap. Its memory goes back to the
    heap when the last tensor viewing it is gone."""
    shape = torch.Size(shape)
    nbytes = shape.numel() * torch.empty((), dtype=dtype).element_size()
    block = shared_block(nbytes)  # the tensor keeps it alive; when it goes, so does the block
    return torch.frombuffer(block, dtype=torch.uint8)[:nbytes].view(dtype).view(shape)


def share_gradient(p):
    """Moves the dense CPU gradient of parameter `p` into the shared heap (a copy), where backward
    then accumulates the next ones. Returns where it now lies (data_ptr)."""
    grad = shared_tensor(p.grad.shape, p.grad.dtype)
    grad.copy_(p.grad)
    p.grad = grad
    return grad.data_ptr()


def shared_gradients(parameters):
    """Moves the gradients of `parameters` into the shared heap, for a training loop of one's own:
    each CPU parameter that requires a gradient gets one there (its current dense gradient
    copied, or zeros), which backward then accumulates into. Call it after a first backward:
    zeros given to a parameter whose gradients come sparse (an Embedding with sparse=True) would
    make them dense. A gradient later set to None (zero_grad(set_to_none=True)) comes from
    torch's allocator again. Returns how many moved."""
    moved = 0
    for p in parameters:
        if not p.requires_grad or p.device.type != "cpu" or p.layout != torch.strided:
            continue
        if isinstance(p, torch.nn.parameter.UninitializedParameter):
            continue
        if p.grad is None:
            p.grad = shared_tensor(p.shape, p.dtype)
        elif p.grad.layout == torch.strided:
            share_gradient(p)
        else:
            continue
        moved += 1
    return moved


def shared_gradients_wanted(argument):
    """DistributedOptimizer's shared_gradients argument, or where it is None,
    CHORUS_SHARED_GRADIENTS (default on)."""
    if argument is not None:
        return bool(argument)
    value = os.environ.get("CHORUS_SHARED_GRADIENTS", "on").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"CHORUS_SHARED_GRADIENTS={value!r}: expected on or off")
