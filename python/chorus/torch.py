"""chorus for PyTorch, mirroring the core of horovod.torch: an existing Horovod training script
runs by changing `import horovod.torch as hvd` to `import chorus.torch as hvd`.

Tensors must be contiguous; CPU tensors go over MPI, CUDA tensors over NCCL (when chorus was
built with it). Functions ending in _ work in place; *_async return a handle for poll() and
synchronize()."""
import ctypes

import torch

from . import _library as c
from .core import (ChorusError, Handle, cross_rank, cross_size, default_name, describe, init,
                   is_initialized, local_rank, local_size, op_args, rank, shutdown, size, submit,
                   submit_group)
from .core import join as _join

Sum, Average, Min, Max, Product = c.SUM, c.AVERAGE, c.MIN, c.MAX, c.PRODUCT
Adasum = None  # not provided by chorus

_DTYPES = {torch.uint8: c.UINT8, torch.int8: c.INT8, torch.int32: c.INT32, torch.int64: c.INT64,
           torch.float16: c.FLOAT16, torch.bfloat16: c.BFLOAT16, torch.float32: c.FLOAT32,
           torch.float64: c.FLOAT64}


class Compression:
    """Horovod's compression choice. fp16 sends float32 gradients as float16 on the wire
    (chorus's wire compression: reduced in float32, rounded to 16 bits between steps)."""
    none = c.COMPRESSION_NONE
    fp16 = c.COMPRESSION_FP16
    bf16 = c.COMPRESSION_BF16


def _descriptor(tensor):
    if not tensor.is_contiguous():
        raise ValueError("chorus needs contiguous tensors (call .contiguous())")
    try:
        dtype = _DTYPES[tensor.dtype]
    except KeyError:
        raise TypeError(f"chorus does not support {tensor.dtype}") from None
    if tensor.is_cuda:
        return describe(tensor.data_ptr(), dtype, tuple(tensor.shape), c.MEMORY_CUDA,
                        tensor.device.index or 0)
    return describe(tensor.data_ptr(), dtype, tuple(tensor.shape))


def _resolve_op(average, op):
    if op is not None:
        return op
    if average is None or average:
        return Average
    return Sum


def _allreduce_submit(tensor, output, name, op, prescale_factor, postscale_factor, compression):
    args = op_args(c.ALLREDUCE, name, _descriptor(tensor),
                   output.data_ptr() if output is not None else None, op, 0, prescale_factor,
                   postscale_factor, compression)
    result = output if output is not None else tensor
    return submit(args, (tensor, output), lambda handle: result)


def allreduce_async(tensor, average=None, name=None, compression=Compression.none, op=None,
                    prescale_factor=1.0, postscale_factor=1.0):
    tensor = tensor.contiguous()
    output = torch.empty_like(tensor)
    return _allreduce_submit(tensor, output, name or default_name("allreduce"),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, compression=Compression.none):
    return _allreduce_submit(tensor, None, name or default_name("allreduce"),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(allreduce_async(tensor, average, name, compression, op, prescale_factor,
                                       postscale_factor))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def grouped_allreduce_async(tensors, average=None, name=None, compression=Compression.none,
                            op=None, prescale_factor=1.0, postscale_factor=1.0):
    name = name or default_name("grouped_allreduce")
    inputs = [t.contiguous() for t in tensors]
    outputs = [torch.empty_like(t) for t in inputs]
    operator = _resolve_op(average, op)
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _descriptor(t), o.data_ptr(), operator, 0,
                    prescale_factor, postscale_factor, compression)
            for i, (t, o) in enumerate(zip(inputs, outputs))]
    return submit_group(args, (inputs, outputs), lambda handle: outputs)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_allreduce_async(tensors, average, name, compression, op,
                                               prescale_factor, postscale_factor))


class _DeviceBuffer:
    """The gathered output of a CUDA allgather, which chorus's handle owns, as a device array that
    torch can copy (the CUDA array interface)."""

    def __init__(self, pointer, shape, like):
        typestr = {torch.float16: "<f2", torch.bfloat16: "<i2", torch.float32: "<f4",
                   torch.float64: "<f8", torch.int32: "<i4", torch.int64: "<i8",
                   torch.int8: "|i1", torch.uint8: "|u1"}[like.dtype]
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (pointer, False), "version": 2}


def _gathered(like, trailing):
    def finish(handle):
        descriptor = handle.gathered()
        shape = (descriptor.shape[0],) + tuple(trailing)
        if like.is_cuda:
            result = torch.empty(shape, dtype=like.dtype, device=like.device)
            if result.numel():
                # The handle owns the device buffer until it is freed: copy it out first.
                view = torch.as_tensor(_DeviceBuffer(descriptor.data, shape, like),
                                       device=like.device)
                # bfloat16 has no typestr: it travels as int16 and is viewed back.
                result.copy_(view.view(torch.bfloat16) if like.dtype == torch.bfloat16 else view)
            return result
        result = torch.empty(shape, dtype=like.dtype, device=like.device)
        if result.numel():
            ctypes.memmove(result.data_ptr(), descriptor.data,
                           result.numel() * result.element_size())
        return result
    return finish


def allgather_async(tensor, name=None):
    """Concatenates every rank's tensor along the first dimension (which may differ)."""
    tensor = tensor.contiguous()
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    args = op_args(c.ALLGATHER, name or default_name("allgather"), _descriptor(tensor))
    return submit(args, tensor, _gathered(tensor, tuple(tensor.shape[1:])))


def allgather(tensor, name=None):
    return synchronize(allgather_async(tensor, name))


def broadcast_async_(tensor, root_rank, name=None):
    args = op_args(c.BROADCAST, name or default_name("broadcast"), _descriptor(tensor),
                   root=root_rank)
    return submit(args, tensor, lambda handle: tensor)


def broadcast_async(tensor, root_rank, name=None):
    return broadcast_async_(tensor.clone().contiguous(), root_rank, name)


def broadcast_(tensor, root_rank, name=None):
    return synchronize(broadcast_async_(tensor, root_rank, name))


def broadcast(tensor, root_rank, name=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def poll(handle):
    """True once the operation of `handle` has completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for `handle`; returns the operation's output tensor; raises ChorusError."""
    return handle.wait()


def join(device=-1):
    """This rank has run out of data; returns when every rank has joined. (Horovod returns the
    last rank to join; chorus does not track it and returns -1.)"""
    _join()
    return -1


def broadcast_parameters(params, root_rank):
    """Broadcasts a model's state_dict() or named_parameters() from root_rank, in place."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    handles = []
    for name, value in items:
        if not torch.is_tensor(value):
            continue
        target = value.data if hasattr(value, "data") else value
        handles.append(broadcast_async_(target, root_rank, name=f"broadcast.parameter.{name}"))
    for handle in handles:
        synchronize(handle)


def broadcast_object(obj, root_rank=0, name=None):
    """Broadcasts a picklable object from root_rank; returns it on every rank."""
    import pickle
    name = name or default_name("broadcast_object")
    payload = None
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name=f"{name}.length")
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=f"{name}.payload")
    return pickle.loads(payload.numpy().tobytes())


def broadcast_optimizer_state(optimizer, root_rank):
    """Broadcasts an optimizer's state and hyperparameters from root_rank, so that every rank
    resumes identically. The state's tensors travel in place, fused like parameters; only their
    shapes and dtypes and the other values are pickled. Ranks without state (a fresh optimizer)
    get root_rank's."""
    name = "broadcast.optimizer_state"
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
    layout = broadcast_object(layout, root_rank, name=f"{name}.layout")
    if rank() != root_rank:
        tensors = [torch.empty(shape, dtype=dtype)
                   for entries in layout["state"].values()
                   for kind, *rest in entries.values() if kind == "tensor"
                   for shape, dtype in [rest]]
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
    optimizer.load_state_dict({"param_groups": layout["param_groups"], "state": state})


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor):
        super(self.__class__, self).__init__(params)
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [(f"allreduce.noname.{group}.{index}", p)
                     for group, param_group in enumerate(self.param_groups)
                     for index, p in enumerate(param_group["params"])]
        self._names = {p: name for name, p in named}
        self._compression = compression
        self._passes = backward_passes_per_step
        self._op = op
        self._predivide = gradient_predivide_factor
        self._handles = {}
        self._pass_count = {}
        self._hooks = []
        self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._pass_count[p] = 0
                # The gradient accumulator's hook runs when p.grad is final for this pass.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._hooks.append(accumulator)

    def _make_hook(self, p):
        def hook(*ignored):
            self._pass_count[p] += 1
            if self._pass_count[p] < self._passes:
                return
            self._pass_count[p] = 0
            prescale = 1.0 / self._predivide
            postscale = self._predivide / self._passes if self._op == Average else 1.0 / self._passes
            self._handles[p] = allreduce_async_(p.grad, name=f"gradient.{self._names.get(p, id(p))}",
                                                op=self._op, prescale_factor=prescale,
                                                postscale_factor=postscale,
                                                compression=self._compression)
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce started by backward; also starts the ones whose
        hooks did not run (parameters without gradients this step are skipped)."""
        for p, handle in list(self._handles.items()):
            synchronize(handle)
        self._handles.clear()

    def step(self, closure=None):
        self.synchronize()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradient allreduces are in flight; call "
                                 "step() or synchronize() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0):
    """Wraps `optimizer`: every gradient is allreduced (averaged) as soon as backward produces it,
    and step() waits for all of them before updating. With backward_passes_per_step > 1,
    gradients are accumulated locally over that many passes before one allreduce."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor)


__all__ = ["ChorusError", "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
           "local_size", "cross_rank", "cross_size", "Sum", "Average", "Min", "Max", "Product",
           "Compression", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
           "grouped_allreduce", "grouped_allreduce_async", "allgather", "allgather_async",
           "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "poll",
           "synchronize", "join", "broadcast_parameters", "broadcast_optimizer_state",
           "broadcast_object", "DistributedOptimizer"]
