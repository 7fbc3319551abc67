"""chorus for PyTorch, mirroring the core of horovod.torch: an existing Horovod training script
runs by changing `import horovod.torch as hvd` to `import chorus.torch as hvd`.

Tensors must be contiguous; CPU tensors go over MPI, CUDA tensors over NCCL (when chorus was
built with it). Functions ending in _ work in place; *_async return a handle for poll() and
synchronize()."""
import contextlib
import ctypes
import itertools
import pickle
import warnings

import torch

from . import _library as c
from .core import check
from .core import (ChorusError, Handle, cross_rank, cross_size, default_name, describe,
                   is_homogeneous, is_initialized, local_rank, local_size, op_args, rank, shutdown,
                   size, start_timeline, stop_timeline, submit, submit_group)
from .core import init as _core_init
from .core import join as _join
from .core import process_set_add as _core_process_set_add
from .core import process_set_remove as _core_process_set_remove

Sum, Average, Min, Max, Product = c.SUM, c.AVERAGE, c.MIN, c.MAX, c.PRODUCT
_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product",
        c.ADASUM: "Adasum"}


# Horovod's adaptive summation (see chorus.h): allreduce of float32 and float64 CPU tensors.
Adasum = c.ADASUM


class ProcessSet:
    """Horovod's process set: collectives among `ranks` alone (None: every rank, the global
    set). A set is usable once add_process_set (or init(process_sets=...)) has added it on every
    rank; its collectives then wait only for its members."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError(f"{self!r} has not been added: call add_process_set() on every "
                             "rank first")
        return self.process_set_id

    def size(self):
        return size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """This rank's rank within the set (-1 when it is not a member)."""
        if self.ranks is None:
            return rank()
        return self.ranks.index(rank()) if rank() in self.ranks else -1

    def included(self):
        return self.ranks is None or rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else f"ProcessSet({self.ranks})"


global_process_set = ProcessSet()


def _set_id(process_set):
    """The library's id of a process_set= argument (None: the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set={process_set!r} must be a ProcessSet")
    return process_set._id()


def _set_size(process_set):
    return size() if process_set is None else process_set.size()


def _set_rank(process_set):
    return rank() if process_set is None else process_set.rank()


def add_process_set(process_set):
    """Adds a set (a ProcessSet or a list of ranks); every rank must call it alike, in the same
    order. Returns the ProcessSet, now usable as process_set=."""
    candidate = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if candidate.ranks is None:
        raise ValueError("the global process set exists already")
    if candidate.process_set_id is not None:
        raise ValueError(f"{candidate!r} has been added already (id {candidate.process_set_id})")
    candidate.process_set_id = _core_process_set_add(candidate.ranks)
    return candidate


def remove_process_set(process_set):
    """Removes an added set (every rank alike); returns True, as Horovod does."""
    if process_set is global_process_set or process_set.ranks is None:
        raise ValueError("the global process set cannot be removed")
    _core_process_set_remove(process_set._id())
    process_set.process_set_id = None
    return True


def init(parameters=None, process_sets=None):
    """Initializes chorus (see chorus.core.init); `process_sets`, as in Horovod, a list of
    ProcessSets (or rank lists) to add at once."""
    _core_init(parameters)
    for process_set in process_sets or []:
        if not (isinstance(process_set, ProcessSet) and process_set.process_set_id is not None):
            add_process_set(process_set)


# Horovod's exception names, for scripts that catch them.
HorovodInternalError = ChorusError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic-training signal; chorus has no elastic training, so it is never raised."""

_DTYPES = {torch.uint8: c.UINT8, torch.int8: c.INT8, torch.int32: c.INT32, torch.int64: c.INT64,
           torch.float16: c.FLOAT16, torch.bfloat16: c.BFLOAT16, torch.float32: c.FLOAT32,
           torch.float64: c.FLOAT64, torch.int16: c.INT16, torch.bool: c.BOOL}
if hasattr(torch, "uint16"):  # torch 2.3 and later
    _DTYPES[torch.uint16] = c.UINT16


class _Compressor:
    """A Horovod compressor: compress() before the collective, decompress() after. chorus's
    allreduce applies the compressor's wire format itself (float32 reduced in float32, sent as
    16 bits between steps), so DistributedOptimizer does not call these; they are for scripts
    that do."""
    wire = c.COMPRESSION_NONE
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if cls.dtype is None or not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(cls.dtype), tensor.dtype

    @staticmethod
    def decompress(tensor, context):
        return tensor if context is None else tensor.to(context)


class _NoneCompressor(_Compressor):
    pass


class _FP16Compressor(_Compressor):
    wire = c.COMPRESSION_FP16
    dtype = torch.float16


class _BF16Compressor(_Compressor):
    wire = c.COMPRESSION_BF16
    dtype = torch.bfloat16


class Compression:
    """Horovod's compression choices: none, fp16, bf16."""
    none = _NoneCompressor
    fp16 = _FP16Compressor
    bf16 = _BF16Compressor


def _wire(compression):
    """The wire compression of a compressor class or of chorus's own constant."""
    wire = getattr(compression, "wire", compression)
    if wire not in (c.COMPRESSION_NONE, c.COMPRESSION_FP16, c.COMPRESSION_BF16):
        raise ValueError(f"compression={compression!r} is not one of Compression.none, fp16, bf16")
    return wire


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
    if op is not None and average is not None:
        raise ValueError("pass either op= or the older average=, not both")
    if op is not None:
        if op not in _OPS:
            raise ValueError(f"op={op!r} is not one of Sum, Average, Min, Max, Product, Adasum")
        return op
    if average is None or average:
        return Average
    return Sum


def _staged(tensor):
    """For an in-place call: the contiguous tensor chorus works on (`tensor` itself, or a copy),
    and what puts the result back into `tensor` and returns it."""
    if tensor.is_contiguous():
        return tensor, lambda: tensor
    staged = tensor.contiguous()
    return staged, lambda: tensor.copy_(staged)


def _allreduce_submit(tensor, output, name, op, prescale_factor, postscale_factor, compression,
                      process_set=None):
    """Out of place into `output`, or in place (output None; a non-contiguous tensor through a
    contiguous copy)."""
    tensor, back = _staged(tensor) if output is None else (tensor, None)
    args = op_args(c.ALLREDUCE, name, _descriptor(tensor),
                   output.data_ptr() if output is not None else None, op, 0, prescale_factor,
                   postscale_factor, _wire(compression), process_set=_set_id(process_set))
    return submit(args, (tensor, output), lambda handle: output if back is None else back())


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, *, compression=Compression.none):
    tensor = tensor.contiguous()
    output = torch.empty_like(tensor)
    return _allreduce_submit(tensor, output, name or default_name("allreduce"),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, *, compression=Compression.none):
    return _allreduce_submit(tensor, None, name or default_name("allreduce"),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression, process_set)


def _differentiable(tensor):
    return torch.is_grad_enabled() and tensor.requires_grad


class _AllreduceFunction(torch.autograd.Function):
    """Horovod's gradient of an allreduce: the upstream gradients allreduced with the same op
    (a sum's gradient is the sum of every rank's, an average's their average)."""

    @staticmethod
    def forward(context, tensor, name, op, prescale_factor, postscale_factor, compression,
                process_set):
        context.args = (name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set,
                                           compression=compression))

    @staticmethod
    def backward(context, gradient):
        name, op, prescale_factor, postscale_factor, process_set = context.args
        reduced = synchronize(allreduce_async(gradient.contiguous(), None, f"{name}.gradient",
                                              op, prescale_factor, postscale_factor,
                                              process_set))
        return reduced, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Differentiable (sum and average) when `tensor` requires a gradient."""
    operator = _resolve_op(average, op)
    name = name or default_name("allreduce")
    if _differentiable(tensor):
        if operator not in (Sum, Average):
            raise NotImplementedError(f"the gradient of an allreduce with op={_OPS[operator]}: "
                                      "only Sum and Average are differentiable")
        return _AllreduceFunction.apply(tensor, name, operator, prescale_factor,
                                        postscale_factor, compression, process_set)
    return synchronize(allreduce_async(tensor, None, name, operator, prescale_factor,
                                       postscale_factor, process_set, compression=compression))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set=process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, *,
                            compression=Compression.none):
    name = name or default_name("grouped_allreduce")
    inputs = [t.contiguous() for t in tensors]
    outputs = [torch.empty_like(t) for t in inputs]
    operator = _resolve_op(average, op)
    set_id = _set_id(process_set)
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _descriptor(t), o.data_ptr(), operator, 0,
                    prescale_factor, postscale_factor, _wire(compression), process_set=set_id)
            for i, (t, o) in enumerate(zip(inputs, outputs))]
    return submit_group(args, (inputs, outputs), lambda handle: outputs)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set,
                                               compression=compression))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None, *,
                             compression=Compression.none):
    """In place: each tensor receives its result (through a contiguous copy where it is not
    contiguous)."""
    name = name or default_name("grouped_allreduce")
    operator = _resolve_op(average, op)
    set_id = _set_id(process_set)
    staged = [_staged(t) for t in tensors]
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _descriptor(t), None, operator, 0,
                    prescale_factor, postscale_factor, _wire(compression), process_set=set_id)
            for i, (t, _) in enumerate(staged)]

    def results(handle):
        for _, back in staged:
            back()
        return tensors
    return submit_group(args, [t for t, _ in staged], results)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, compression=Compression.none, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set,
                                                compression=compression))


class _DeviceBuffer:
    """The gathered output of a CUDA allgather, which chorus's handle owns, as a device array that
    torch can copy (the CUDA array interface)."""

    def __init__(self, pointer, shape, like):
        typestr = {torch.float16: "<f2", torch.bfloat16: "<i2", torch.float32: "<f4",
                   torch.float64: "<f8", torch.int32: "<i4", torch.int64: "<i8",
                   torch.int8: "|i1", torch.uint8: "|u1", torch.int16: "<i2",
                   torch.bool: "|b1"}[like.dtype]
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (pointer, False), "version": 2}


def _gathered(like, trailing, member=0):
    def finish(handle):
        descriptor = handle.gathered(member)
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


def _allgather_request(tensor, name, set_id, member=0):
    """One allgather (member `member` of a group): its arguments, the tensor chorus reads, and
    what reads its result from the handle."""
    tensor = tensor.contiguous()
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    args = op_args(c.ALLGATHER, name, _descriptor(tensor), process_set=set_id)
    return args, tensor, _gathered(tensor, tuple(tensor.shape[1:]), member)


def _submit_requests(requests):
    """Submits (args, tensor, finish) requests as one group; the result is every finish's."""
    return submit_group([args for args, _, _ in requests], [t for _, t, _ in requests],
                        lambda handle: [finish(handle) for _, _, finish in requests])


def allgather_async(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along the first dimension (which may differ)."""
    args, tensor, finish = _allgather_request(tensor, name or default_name("allgather"),
                                              _set_id(process_set))
    return submit(args, tensor, finish)


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Horovod's allreduce of a sparse (COO) tensor: every rank's indices and values are
    allgathered, so that the result holds every rank's entries, duplicates summed; Average then
    divides the values by the number of ranks. Returns a callable that waits and returns the
    result, coalesced; synchronize() takes it too."""
    if op not in (Sum, Average):
        raise ValueError(f"sparse_allreduce_async({name!r}): op {_OPS.get(op, op)} is not "
                         "supported for sparse tensors; use Sum or Average")
    if not tensor.is_sparse:
        raise ValueError(f"sparse_allreduce_async({name!r}): the tensor is not sparse")
    local = tensor.coalesce()
    # Allgather concatenates along the first dimension: the indices travel as (nnz, sparse_dim).
    indices = allgather_async(local.indices().t().contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(local.values(), name=f"{name}.values", process_set=process_set)
    members = _set_size(process_set)

    def wait():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / members
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values,
                                       local.size()).coalesce()
    return wait


class _AllgatherFunction(torch.autograd.Function):
    """Horovod's gradient of an allgather: every rank's gradient of the whole result summed,
    then this rank's rows."""

    @staticmethod
    def forward(context, tensor, name, process_set):
        context.name, context.process_set = name, process_set
        gathered = synchronize(allgather_async(tensor, name, process_set))
        rows = torch.tensor([tensor.shape[0] if tensor.dim() else 1], dtype=torch.int64)
        context.rows = synchronize(allgather_async(rows, f"{name}.rows", process_set)).tolist()
        context.scalar = tensor.dim() == 0
        return gathered

    @staticmethod
    def backward(context, gradient):
        summed = synchronize(allreduce_async(gradient.contiguous(), None,
                                             f"{context.name}.gradient", Sum,
                                             process_set=context.process_set))
        member = _set_rank(context.process_set)
        start = sum(context.rows[:member])
        mine = summed[start:start + context.rows[member]]
        return (mine.reshape(()) if context.scalar else mine), None, None


def allgather(tensor, name=None, process_set=None):
    """Differentiable when `tensor` requires a gradient."""
    name = name or default_name("allgather")
    if _differentiable(tensor):
        return _AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Allgathers of every tensor as one group: negotiated together and fused where they can be;
    synchronize() returns the list of results."""
    name = name or default_name("grouped_allgather")
    set_id = _set_id(process_set)
    requests = [_allgather_request(t, f"{name}.{i}", set_id, i) for i, t in enumerate(tensors)]
    return _submit_requests(requests)


def grouped_allgather(tensors, name=None, process_set=None):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def allgather_object(obj, name=None, process_set=None):
    """Gathers a picklable object from every rank; returns the list, in rank order."""
    name = name or default_name("allgather_object")
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=f"{name}.sizes",
                      process_set=process_set)
    data = allgather(payload, name=f"{name}.data", process_set=process_set).numpy().tobytes()
    objects, start = [], 0
    for length in sizes.tolist():
        objects.append(pickle.loads(data[start:start + length]))
        start += length
    return objects


def _reducescatter_request(tensor, name, operator, set_id, prescale_factor, postscale_factor,
                           compression, member=0):
    """One reducescatter (member `member` of a group): its arguments, the (compressed) tensor
    chorus reads, and what reads and decompresses its block from the handle."""
    compressed, context = compression.compress(tensor.contiguous())
    if compressed.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    args = op_args(c.REDUCESCATTER, name, _descriptor(compressed), None, operator, 0,
                   prescale_factor, postscale_factor, process_set=set_id)
    gathered = _gathered(compressed, tuple(compressed.shape[1:]), member)
    return args, compressed, lambda handle: compression.decompress(gathered(handle), context)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0, *, compression=Compression.none):
    """Reduces every rank's tensor (all of one shape) with `op` and returns this rank's block of
    rows: the first dimension split as evenly as it goes, the first (rows % size) ranks getting
    one row more, as Horovod splits it."""
    args, compressed, finish = _reducescatter_request(
        tensor, name or default_name("reducescatter"), _resolve_op(None, op),
        _set_id(process_set), prescale_factor, postscale_factor, compression)
    return submit(args, compressed, finish)


class _ReducescatterFunction(torch.autograd.Function):
    """Horovod's gradient of a reducescatter: every rank's block of the gradient gathered back
    into the input's shape, divided by the ranks for an average, and scaled as the input was."""

    @staticmethod
    def forward(context, tensor, name, op, prescale_factor, postscale_factor, process_set):
        context.args = (name, op, prescale_factor * postscale_factor, process_set)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(context, gradient):
        name, op, scale, process_set = context.args
        gathered = synchronize(allgather_async(gradient.contiguous(), f"{name}.gradient",
                                               process_set))
        if op == Average:
            scale /= _set_size(process_set)
        return gathered * scale if scale != 1.0 else gathered, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Differentiable (sum and average) when `tensor` requires a gradient."""
    name = name or default_name("reducescatter")
    operator = _resolve_op(None, op)
    if _differentiable(tensor):
        if operator not in (Sum, Average):
            raise NotImplementedError(f"the gradient of a reducescatter with "
                                      f"op={_OPS[operator]}: only Sum and Average are "
                                      "differentiable")
        return _ReducescatterFunction.apply(tensor, name, operator, prescale_factor,
                                            postscale_factor, process_set)
    return synchronize(reducescatter_async(tensor, name, operator, process_set, prescale_factor,
                                           postscale_factor, compression=compression))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0, *,
                                compression=Compression.none):
    """Reducescatters of every tensor, submitted together, so that they negotiate together and
    (host tensors of one dtype) fuse into one collective; synchronize() returns the blocks."""
    name = name or default_name("grouped_reducescatter")
    operator = _resolve_op(None, op)
    set_id = _set_id(process_set)
    requests = [_reducescatter_request(t, f"{name}.{i}", operator, set_id, prescale_factor,
                                       postscale_factor, compression, i)
                for i, t in enumerate(tensors)]
    return _submit_requests(requests)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_reducescatter_async(tensors, name, op, process_set,
                                                   prescale_factor, postscale_factor,
                                                   compression=compression))


def _split_list(splits, process_set=None):
    if splits is None:
        return None
    values = splits.tolist() if torch.is_tensor(splits) else list(splits)
    ranks = _set_size(process_set)
    if len(values) != ranks:
        raise ValueError(f"alltoall: splits has {len(values)} entries; there are {ranks} ranks"
                         + ("" if process_set is None else f" in {process_set!r}"))
    return [int(v) for v in values]


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Sends splits[k] rows of `tensor` (rank 0's rows first) to each rank k and receives every
    rank's rows for this one, in rank order; splits=None splits the rows evenly. synchronize()
    returns the received tensor, and with splits given also the rows received from each rank
    (an int32 tensor), as Horovod does."""
    return _alltoall_submit(tensor, _split_list(splits, process_set),
                            name or default_name("alltoall"), splits is not None, process_set)


def _alltoall_submit(tensor, splits, name, with_splits, process_set=None):
    tensor = tensor.contiguous()
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    args = op_args(c.ALLTOALL, name, _descriptor(tensor), splits=splits,
                   process_set=_set_id(process_set))
    gathered = _gathered(tensor, tuple(tensor.shape[1:]))
    members = _set_size(process_set)

    def finish(handle):
        output = gathered(handle)
        if not with_splits:
            return output
        return output, torch.tensor(handle.received_splits(members), dtype=torch.int32)
    return submit(args, (tensor, args), finish)


class _AlltoallFunction(torch.autograd.Function):
    """Horovod's gradient of an alltoall: the gradient sent back where its rows came from, by an
    alltoall with the received splits."""

    @staticmethod
    def forward(context, tensor, splits, name, process_set):
        context.name, context.process_set = name, process_set
        output, received = synchronize(_alltoall_submit(tensor, splits, name, True, process_set))
        context.received = received.tolist()
        context.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(context, gradient, ignored):
        returned = synchronize(_alltoall_submit(gradient, context.received,
                                                f"{context.name}.gradient", False,
                                                context.process_set))
        return returned, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Differentiable when `tensor` requires a gradient."""
    name = name or default_name("alltoall")
    if _differentiable(tensor):
        output, received = _AlltoallFunction.apply(tensor, _split_list(splits, process_set),
                                                   name, process_set)
        return output if splits is None else (output, received)
    return synchronize(alltoall_async(tensor, splits, name, process_set))


_barriers = itertools.count()


def barrier(process_set=None):
    """Returns once every rank (of `process_set`) has called it: a negotiated collective, like
    the others."""
    if process_set is None or _set_id(process_set) == 0:
        check(c.lib.chorus_barrier())
        return
    # A set's barrier: an allreduce of nothing among its members.
    synchronize(allreduce_async(torch.zeros(1, dtype=torch.int32), name=
                                f"barrier.{next(_barriers)}", op=Sum, process_set=process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    staged, back = _staged(tensor)
    args = op_args(c.BROADCAST, name or default_name("broadcast"), _descriptor(staged),
                   root=root_rank, process_set=_set_id(process_set))
    return submit(args, staged, lambda handle: back())


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.clone().contiguous(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _BroadcastFunction(torch.autograd.Function):
    """Horovod's gradient of a broadcast: every rank's gradient summed onto the root; the
    others' inputs did not reach the result, so theirs is zero."""

    @staticmethod
    def forward(context, tensor, root_rank, name, process_set):
        context.root, context.name, context.process_set = root_rank, name, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(context, gradient):
        summed = synchronize(allreduce_async(gradient.contiguous(), None,
                                             f"{context.name}.gradient", Sum,
                                             process_set=context.process_set))
        return (summed if rank() == context.root else torch.zeros_like(summed)), None, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Differentiable when `tensor` requires a gradient."""
    name = name or default_name("broadcast")
    if _differentiable(tensor):
        return _BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Batch normalization whose statistics are those of the whole batch across ranks, as
    Horovod's SyncBatchNorm: in training, each channel's count, sum and sum of squares are
    allreduced (differentiably, so backward is right too); in evaluation the running statistics
    are used as in torch's BatchNorm. Every rank must run the module the same number of times."""

    _instances = itertools.count()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._name = f"sync_batch_norm.{next(SyncBatchNorm._instances)}"
        self._calls = itertools.count()

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects at least 2D input (got {input.dim()}D)")

    def forward(self, input):
        self._check_input_dim(input)
        if not (self.training or not self.track_running_stats):
            return torch.nn.functional.batch_norm(input, self.running_mean, self.running_var,
                                                  self.weight, self.bias, False, 0.0, self.eps)
        channels = input.shape[1]
        flat = input.transpose(0, 1).reshape(channels, -1)  # channel-major
        local = torch.cat([flat.sum(1), (flat * flat).sum(1),
                           torch.full((1,), float(flat.shape[1]), dtype=flat.dtype)])
        total = allreduce(local, op=Sum, name=f"{self._name}.{next(self._calls)}")
        count = total[-1]
        mean = total[:channels] / count
        variance = total[channels:2 * channels] / count - mean * mean
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                            else self.momentum)
                unbiased = variance * count / max(count - 1, 1)
                self.running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach() * momentum)
        shape = [1, channels] + [1] * (input.dim() - 2)
        normalized = (input - mean.view(shape)) / torch.sqrt(variance.view(shape) + self.eps)
        if self.affine:
            normalized = normalized * self.weight.view(shape) + self.bias.view(shape)
        return normalized


def mpi_built():
    return True


def mpi_enabled():
    return True


def mpi_threads_supported():
    return True


def nccl_built():
    """Whether chorus was built with NCCL (CUDA tensors)."""
    return bool(c.lib.chorus_gpu_built())


def cuda_built():
    return nccl_built()


def gloo_built():
    return False


def gloo_enabled():
    return False


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def poll(handle):
    """True once the operation of `handle` has completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for `handle`; returns the operation's output tensor; raises ChorusError. Takes the
    callable that sparse_allreduce_async returns too, as Horovod does."""
    if callable(handle) and not hasattr(handle, "wait"):
        return handle()
    return handle.wait()


def join(device=-1):
    """This rank has run out of data; returns when every rank has joined, with the rank that
    joined last, as Horovod does."""
    _join()
    return c.lib.chorus_last_joined_rank()


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
    """Broadcasts a picklable object from root_rank; returns it on every rank."""
    name = name or default_name("broadcast_object")
    payload = None
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name=f"{name}.length", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=f"{name}.payload", process_set=process_set)
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
                 gradient_predivide_factor, sparse_as_dense, process_set):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        all_parameters = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [name for name, _ in named]
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError("parameter names in named_parameters must be unique; "
                                 f"found duplicates: {', '.join(duplicates)}")
            known = {id(p) for _, p in named}
            unnamed = [i for i, p in enumerate(all_parameters) if id(p) not in known]
            if unnamed:
                raise ValueError("named_parameters was given, but the optimizer's parameters "
                                 f"at positions {unnamed} are not in it")
        else:
            # The same names on every rank: they follow the parameter groups' order.
            named = [(f"allreduce.noname.{group}.{index}", p)
                     for group, param_group in enumerate(self.param_groups)
                     for index, p in enumerate(param_group["params"])]
        if op == Adasum and (compression is not Compression.none or
                             gradient_predivide_factor != 1.0):
            raise ValueError("DistributedOptimizer(op=Adasum) combines whole updates: it takes "
                             "neither compression nor gradient_predivide_factor")
        if op not in _OPS:
            _resolve_op(None, op)  # raises, naming the op
        self._names = {p: name for name, p in named}
        self._compression = compression
        _wire(compression)
        self._passes = backward_passes_per_step
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._sparse_dims = {}  # parameters whose gradients came sparse: their sparse dims
        self._handles = {}
        self._pass_count = {}
        self._hooks = []
        self._synchronized = False
        self._skip_synchronize = False
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

    def _allreduce_gradient(self, p):
        if p.grad is None:
            # Not used on this rank this step: it contributes zeros, as in Horovod, so that the
            # ranks that did use it are not left waiting (no entries, where its gradients are
            # sparse).
            p.grad = (self._no_entries(p) if p in self._sparse_dims and not self._sparse_as_dense
                      else torch.zeros_like(p))
        prescale = 1.0 / self._predivide
        postscale = self._predivide / self._passes if self._op == Average else 1.0 / self._passes
        if p.grad.is_sparse and not self._sparse_as_dense:
            self._allreduce_sparse_gradient(p, prescale * postscale)
            return
        if p.grad.is_sparse:
            p.grad = p.grad.to_dense()
        self._handles[p] = allreduce_async_(p.grad, name=f"gradient.{self._names[p]}",
                                            op=self._op, prescale_factor=prescale,
                                            postscale_factor=postscale,
                                            compression=self._compression,
                                            process_set=self._process_set)

    def _allreduce_sparse_gradient(self, p, scale):
        """Horovod's way for sparse gradients (an embedding with sparse=True): their indices and
        values allgathered; the gradient is replaced by the combined one at synchronize()."""
        if self._op not in (Sum, Average):
            raise ValueError(f"parameter {self._names[p]}: sparse gradients take op Sum or "
                             "Average; pass sparse_as_dense=True for other ops")
        self._sparse_dims[p] = p.grad.sparse_dim()
        wait = sparse_allreduce_async(p.grad, f"gradient.{self._names[p]}", self._op,
                                      self._process_set)

        def finish():
            combined = wait()
            p.grad = combined * scale if scale != 1.0 else combined
        self._handles[p] = finish

    def _no_entries(self, p):
        """A sparse gradient of `p` with no entries."""
        dims = self._sparse_dims[p]
        return torch.sparse_coo_tensor(torch.empty((dims, 0), dtype=torch.int64),
                                       torch.empty((0, *p.shape[dims:]), dtype=p.dtype),
                                       p.shape)

    def _make_hook(self, p):
        def hook(*ignored):
            if self._op == Adasum:
                return  # the gradients stay local: step() combines the updates
            if p in self._handles:
                raise AssertionError(f"gradient of {self._names[p]} computed twice before "
                                     "step() or synchronize(); with gradient accumulation set "
                                     "backward_passes_per_step")
            self._pass_count[p] += 1
            if self._pass_count[p] < self._passes:
                return
            self._pass_count[p] = 0
            self._allreduce_gradient(p)
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce started by backward. Parameters whose hooks did not
        run (unused on this rank) are allreduced now, contributing zeros. With Adasum there is
        nothing to wait for: the gradients stay local."""
        if self._op == Adasum:
            self._synchronized = True
            return
        for p in self._pass_count:
            if p not in self._handles:
                self._pass_count[p] = 0
                self._allreduce_gradient(p)
        try:
            for handle in list(self._handles.values()):
                synchronize(handle)
        finally:
            self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (gradient clipping, say)."""
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def step(self, closure=None):
        if not self._skip_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are allreduced "
                              "again. Wrap step() in `with optimizer.skip_synchronize():`.")
            self.synchronize()
        self._synchronized = False
        if self._op == Adasum:
            return self._adasum_step(closure)
        return super(self.__class__, self).step(closure)

    def _adasum_step(self, closure):
        """Horovod's Adasum optimizer: each rank takes the step its own gradients give, and the
        ranks' updates (new minus old parameters) are combined by Adasum, which keeps what they
        agree on without adding it twice; every rank then applies the combined update."""
        starts = {p: p.detach().clone() for p in self._pass_count}
        loss = super(self.__class__, self).step(closure)
        pending = []
        for p, start in starts.items():
            delta = (p.detach() - start).contiguous()
            pending.append((p, start, delta,
                            allreduce_async_(delta, name=f"adasum.update.{self._names[p]}",
                                             op=Adasum, process_set=self._process_set)))
        for p, start, delta, handle in pending:
            synchronize(handle)
            with torch.no_grad():
                p.copy_(start + delta)
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradient allreduces are in flight; call "
                                 "step() or synchronize() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps `optimizer`: every gradient is allreduced (averaged) as soon as backward produces it,
    and step() waits for all of them before updating (among the ranks of `process_set`, if
    given). With backward_passes_per_step > 1,
    gradients are accumulated locally over that many passes before one allreduce. `groups` and
    `num_groups` are accepted for Horovod's scripts (its order of arguments) and change nothing:
    chorus fuses small gradients anyway.
    op=Adasum is Horovod's Adasum optimizer: every rank steps with its own gradients and the
    updates are combined with Adasum (float32 and float64 parameters)."""
    _set_id(process_set)  # an unknown set fails here, not at the first gradient
    if groups is not None and not isinstance(groups, (int, list)):
        raise ValueError(f"groups={groups!r} must be a number or a list of parameter lists")
    if not isinstance(num_groups, int) or num_groups < 0:
        raise ValueError(f"num_groups={num_groups!r} must be a number >= 0")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense, process_set)


__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
           "ChorusError", "HorovodInternalError", "HostsUpdatedInterrupt", "init", "shutdown",
           "is_initialized", "is_homogeneous", "rank", "size", "local_rank", "local_size",
           "cross_rank", "cross_size", "Sum", "Average", "Min", "Max", "Product", "Adasum",
           "Compression", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
           "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
           "grouped_allreduce_async_", "sparse_allreduce_async", "allgather", "allgather_async",
           "grouped_allgather", "grouped_allgather_async", "allgather_object", "alltoall",
           "alltoall_async", "reducescatter", "reducescatter_async", "grouped_reducescatter",
           "grouped_reducescatter_async", "broadcast", "broadcast_", "broadcast_async",
           "broadcast_async_", "broadcast_object", "barrier", "poll", "synchronize", "join",
           "broadcast_parameters", "broadcast_optimizer_state", "DistributedOptimizer", "mpi_built",
           "mpi_enabled", "mpi_threads_supported", "nccl_built", "cuda_built", "gloo_built",
           "gloo_enabled", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
           "stop_timeline", "SyncBatchNorm"]
