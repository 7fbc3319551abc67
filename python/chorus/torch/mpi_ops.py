"""The collectives of chorus.torch on PyTorch tensors, as horovod/torch/mpi_ops.py holds
Horovod's: init, allreduce, allgather, broadcast, reducescatter, alltoall
and their grouped, in-place, asynchronous and differentiable forms, barrier, join, and the
queries of how chorus was built.

Tensors must be contiguous; CPU tensors go over MPI, CUDA tensors over NCCL (when chorus was
built with it). Functions ending in _ work in place; *_async return a handle for poll() and
synchronize()."""
import ctypes
import itertools
import os

import torch

from .builds import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: F401
                     mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rocm_built)
from .compression import Compression, _ratio, _residual_address, _residuals, _wire

from .. import _library as c
from .. import core as _core
from ..core import check
from ..core import (ChorusInternalError, default_name, describe, op_args, rank, submit,
                   submit_group)
from ..core import HostsUpdatedInterrupt  # noqa: F401 - Horovod's scripts import it from here
from ..core import init as _core_init
from ..core import join as _join
from .process_sets import ProcessSet, _set_id, _set_rank, _set_size, add_process_set

Sum, Average, Min, Max, Product = c.SUM, c.AVERAGE, c.MIN, c.MAX, c.PRODUCT
_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product",
        c.ADASUM: "Adasum"}


def _current_stream(device):
    """A CUDA tensor's producer: torch's current stream on its device (chorus waits for the
    work queued there before it reads the tensor)."""
    return torch.cuda.current_stream(device).cuda_stream


_core.cuda_stream_of = _current_stream


# Horovod's adaptive summation (see chorus.h): allreduce of float32 and float64 CPU tensors.
Adasum = c.ADASUM



# chorus's settings for Horovod's meaning, unless the script or its environment sets them: an
# allgather or broadcast while a rank has joined fails, as Horovod's do.
_HOROVOD_DEFAULTS = {"CHORUS_JOINED_GATHERS": "fail"}


def _with_horovod_defaults(parameters):
    if isinstance(parameters, str):
        parameters = dict(pair.split("=", 1) for pair in parameters.split(";") if "=" in pair)
    merged = dict(parameters or {})
    for name, value in _HOROVOD_DEFAULTS.items():
        if name not in merged and name not in os.environ:
            merged[name] = value
    return merged


def init(parameters=None, process_sets=None):
    """Initializes chorus (see chorus.core.init) with Horovod's meaning where chorus's differs
    (_HOROVOD_DEFAULTS); `process_sets`, as in Horovod, a list of ProcessSets (or rank lists)
    to add at once."""
    _core_init(_with_horovod_defaults(parameters))
    for process_set in process_sets or []:
        if not (isinstance(process_set, ProcessSet) and process_set.process_set_id is not None):
            add_process_set(process_set)


# Horovod's exception names, for scripts that catch them.
HorovodInternalError = ChorusInternalError



_DTYPES = {torch.uint8: c.UINT8, torch.int8: c.INT8, torch.int32: c.INT32, torch.int64: c.INT64,
           torch.float16: c.FLOAT16, torch.bfloat16: c.BFLOAT16, torch.float32: c.FLOAT32,
           torch.float64: c.FLOAT64, torch.int16: c.INT16, torch.bool: c.BOOL}
if hasattr(torch, "uint16"):  # torch 2.3 and later
    _DTYPES[torch.uint16] = c.UINT16



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


_INTEGER_DTYPES = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


# Scaled by Horovod's CPU code in float32 (float16 is widened to float32 first).
_FLOAT32_SCALED_DTYPES = (torch.float32, torch.float16)


def _horovod_factors(dtype, op, prescale_factor, postscale_factor, process_set):
    """chorus's op and scale factors for Horovod's result, and the factors this layer applies
    to integer tensors itself: (op, prescale, postscale, integer_prescale, integer_postscale).

    Horovod averages by dividing by every rank of the set (a joined rank contributes zeros), and
    scales integers by C's casts, (T)(value * factor), which truncate. chorus's C API divides by
    the ranks that contributed and rounds integers (chorus.h); so here an average is a sum
    whose postscale divides by the set's size, and integers are scaled in this layer."""
    if dtype in _FLOAT32_SCALED_DTYPES:
        # Horovod multiplies these in float32 by the factor cast to float32; chorus multiplies in
        # double and rounds once, which for a factor that float32 holds is the same product.
        prescale_factor = float(torch.tensor(prescale_factor, dtype=torch.float32))
        postscale_factor = float(torch.tensor(postscale_factor, dtype=torch.float32))
    if op == Average:
        # The quotient by the set's size, rounded once (as Horovod's tests expect: x / size).
        op, postscale_factor = Sum, postscale_factor / _set_size(process_set)
    if dtype in _INTEGER_DTYPES and (prescale_factor != 1.0 or postscale_factor != 1.0):
        return op, 1.0, 1.0, prescale_factor, postscale_factor
    return op, prescale_factor, postscale_factor, 1.0, 1.0


def _truncated(tensor, factor):
    """An integer tensor scaled as Horovod's C++ does: through double, truncated."""
    return (tensor.to(torch.float64) * factor).to(tensor.dtype)


def _allreduce_submit(tensor, output, name, op, prescale_factor, postscale_factor, compression,
                      process_set=None, error_feedback=None):
    """Out of place into `output`, or in place (output None; a non-contiguous tensor through a
    contiguous copy)."""
    op, prescale_factor, postscale_factor, integer_pre, integer_post = _horovod_factors(
        tensor.dtype, op, prescale_factor, postscale_factor, process_set)
    if integer_pre != 1.0:
        if output is None:
            tensor.copy_(_truncated(tensor, integer_pre))
        else:
            tensor = _truncated(tensor, integer_pre)
    tensor, back = _staged(tensor) if output is None else (tensor, None)
    args = op_args(c.ALLREDUCE, name, _descriptor(tensor),
                   output.data_ptr() if output is not None else None, op, 0, prescale_factor,
                   postscale_factor, _wire(compression), process_set=_set_id(process_set),
                   error_feedback=_residual_address(tensor, error_feedback, name),
                   compression_ratio=_ratio(compression))

    def finish(handle):
        result = output if back is None else back()
        if integer_post != 1.0:
            result.copy_(_truncated(result, integer_post))
        return result
    return submit(args, (tensor, output, error_feedback), finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, *, compression=Compression.none,
                    error_feedback=None):
    """`error_feedback` (chorus's own): for int8 and int4 compression, this rank's residual
    for the tensor (a zeroed float32 tensor of its shape to start, kept between steps), which
    chorus adds in and rewrites (compression.py)."""
    tensor = tensor.contiguous()
    output = torch.empty_like(tensor)
    return _allreduce_submit(tensor, output, name or default_name("allreduce", process_set),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression, process_set, error_feedback)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, *, compression=Compression.none,
                     error_feedback=None):
    return _allreduce_submit(tensor, None, name or default_name("allreduce", process_set),
                             _resolve_op(average, op), prescale_factor, postscale_factor,
                             compression, process_set, error_feedback)


def _differentiable(tensor):
    return torch.is_grad_enabled() and tensor.requires_grad


class _AllreduceFunction(torch.autograd.Function):
    """Horovod's gradient of an allreduce: the upstream gradients allreduced with the same op
    (a sum's gradient is the sum of every rank's, an average's their average)."""

    @staticmethod
    def forward(context, tensor, name, op, prescale_factor, postscale_factor, compression,
                process_set, error_feedback):
        context.args = (name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set,
                                           compression=compression,
                                           error_feedback=error_feedback))

    @staticmethod
    def backward(context, gradient):
        name, op, prescale_factor, postscale_factor, process_set = context.args
        reduced = synchronize(allreduce_async(gradient.contiguous(), None, f"{name}.gradient",
                                              op, prescale_factor, postscale_factor,
                                              process_set))
        return reduced, None, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None, error_feedback=None):
    """Differentiable (sum and average) when `tensor` requires a gradient; `error_feedback`
    (the forward's only) as for allreduce_async."""
    operator = _resolve_op(average, op)
    name = name or default_name("allreduce", process_set)
    if _differentiable(tensor):
        _require_differentiable_op("an allreduce", operator)
        return _AllreduceFunction.apply(tensor, name, operator, prescale_factor,
                                        postscale_factor, compression, process_set,
                                        error_feedback)
    return synchronize(allreduce_async(tensor, None, name, operator, prescale_factor,
                                       postscale_factor, process_set, compression=compression,
                                       error_feedback=error_feedback))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None, *, compression=Compression.none,
               error_feedback=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set=process_set,
                                        compression=compression,
                                        error_feedback=error_feedback))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, *,
                            compression=Compression.none, error_feedback=None):
    """`error_feedback`: None, or a residual (or None) per tensor, as for allreduce_async."""
    name = name or default_name("grouped_allreduce", process_set)
    residuals = _residuals(tensors, error_feedback)
    inputs = [t.contiguous() for t in tensors]
    outputs = [torch.empty_like(t) for t in inputs]
    operator = _resolve_op(average, op)
    set_id = _set_id(process_set)
    factors = [_horovod_factors(t.dtype, operator, prescale_factor, postscale_factor,
                                process_set) for t in inputs]
    inputs = [_truncated(t, f[3]) if f[3] != 1.0 else t for t, f in zip(inputs, factors)]
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _descriptor(t), o.data_ptr(), f[0], 0, f[1],
                    f[2], _wire(compression), process_set=set_id,
                    error_feedback=_residual_address(t, e, f"{name}.{i}"),
                    compression_ratio=_ratio(compression))
            for i, (t, o, f, e) in enumerate(zip(inputs, outputs, factors, residuals))]

    def results(handle):
        for o, f in zip(outputs, factors):
            if f[4] != 1.0:
                o.copy_(_truncated(o, f[4]))
        return outputs
    return submit_group(args, (inputs, outputs, residuals), results)


class _GroupedAllreduceFunction(torch.autograd.Function):
    """Horovod's gradient of a grouped allreduce: the upstream gradients allreduced as one
    group, with the same op and factors."""

    @staticmethod
    def forward(context, name, op, prescale_factor, postscale_factor, compression, process_set,
                error_feedback, *tensors):
        context.args = (name, op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, process_set,
            compression=compression, error_feedback=error_feedback)))

    @staticmethod
    def backward(context, *gradients):
        name, op, prescale_factor, postscale_factor, process_set = context.args
        reduced = synchronize(grouped_allreduce_async(
            [g.contiguous() for g in gradients], None, f"{name}.gradient", op, prescale_factor,
            postscale_factor, process_set))
        return (None,) * 7 + tuple(reduced)


def _any_differentiable(tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _require_differentiable_op(collective, operator):
    if operator not in (Sum, Average):
        raise NotImplementedError(f"the gradient of {collective} with op={_OPS[operator]}: "
                                  "only Sum and Average are differentiable")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None,
                      error_feedback=None):
    """Differentiable (sum and average) when a tensor requires a gradient, as Horovod's;
    `error_feedback` (the forward's only) as for grouped_allreduce_async."""
    operator = _resolve_op(average, op)
    name = name or default_name("grouped_allreduce", process_set)
    if _any_differentiable(tensors):
        _require_differentiable_op("a grouped allreduce", operator)
        return list(_GroupedAllreduceFunction.apply(name, operator, prescale_factor,
                                                    postscale_factor, compression, process_set,
                                                    error_feedback, *tensors))
    return synchronize(grouped_allreduce_async(tensors, None, name, operator, prescale_factor,
                                               postscale_factor, process_set,
                                               compression=compression,
                                               error_feedback=error_feedback))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None, *,
                             compression=Compression.none, error_feedback=None):
    """In place: each tensor receives its result (through a contiguous copy where it is not
    contiguous). `error_feedback` as for grouped_allreduce_async."""
    name = name or default_name("grouped_allreduce", process_set)
    residuals = _residuals(tensors, error_feedback)
    operator = _resolve_op(average, op)
    set_id = _set_id(process_set)
    factors = [_horovod_factors(t.dtype, operator, prescale_factor, postscale_factor,
                                process_set) for t in tensors]
    for t, f in zip(tensors, factors):
        if f[3] != 1.0:
            t.copy_(_truncated(t, f[3]))
    staged = [_staged(t) for t in tensors]
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _descriptor(t), None, f[0], 0, f[1], f[2],
                    _wire(compression), process_set=set_id,
                    error_feedback=_residual_address(t, e, f"{name}.{i}"),
                    compression_ratio=_ratio(compression))
            for i, ((t, _), f, e) in enumerate(zip(staged, factors, residuals))]

    def results(handle):
        for (_, back), t, f in zip(staged, tensors, factors):
            back()
            if f[4] != 1.0:
                t.copy_(_truncated(t, f[4]))
        return tensors
    return submit_group(args, ([t for t, _ in staged], residuals), results)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, compression=Compression.none, process_set=None,
                       error_feedback=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set,
                                                compression=compression,
                                                error_feedback=error_feedback))


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
    args, tensor, finish = _allgather_request(tensor, name or default_name("allgather", process_set),
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
    """Horovod's gradient of an allgather: every rank's gradient of the whole result averaged,
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
        averaged = synchronize(allreduce_async(gradient.contiguous(), None,
                                               f"{context.name}.gradient", Average,
                                               process_set=context.process_set))
        member = _set_rank(context.process_set)
        start = sum(context.rows[:member])
        mine = averaged[start:start + context.rows[member]]
        return (mine.reshape(()) if context.scalar else mine), None, None


def allgather(tensor, name=None, process_set=None):
    """Differentiable when `tensor` requires a gradient."""
    name = name or default_name("allgather", process_set)
    if _differentiable(tensor):
        return _AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Allgathers of every tensor as one group: negotiated together and fused where they can be;
    synchronize() returns the list of results."""
    name = name or default_name("grouped_allgather", process_set)
    set_id = _set_id(process_set)
    requests = [_allgather_request(t, f"{name}.{i}", set_id, i) for i, t in enumerate(tensors)]
    return _submit_requests(requests)


class _GroupedAllgatherFunction(torch.autograd.Function):
    """Horovod's gradient of a grouped allgather: the gradients of the gathered results averaged
    as one group, then this rank's rows of each."""

    @staticmethod
    def forward(context, name, process_set, *tensors):
        context.name, context.process_set = name, process_set
        gathered = synchronize(grouped_allgather_async(list(tensors), name, process_set))
        rows = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64)
        every = synchronize(allgather_async(rows, f"{name}.rows", process_set))
        context.rows = every.reshape(_set_size(process_set), len(tensors)).t().tolist()
        return tuple(gathered)

    @staticmethod
    def backward(context, *gradients):
        averaged = synchronize(grouped_allreduce_async(
            [g.contiguous() for g in gradients], None, f"{context.name}.gradient", Average,
            process_set=context.process_set))
        member = _set_rank(context.process_set)
        mine = []
        for result, rows in zip(averaged, context.rows):
            start = sum(rows[:member])
            mine.append(result[start:start + rows[member]])
        return (None, None) + tuple(mine)


def grouped_allgather(tensors, name=None, process_set=None):
    """Differentiable when a tensor requires a gradient, as Horovod's."""
    name = name or default_name("grouped_allgather", process_set)
    if _any_differentiable(tensors):
        if any(t.dim() == 0 for t in tensors):
            raise ValueError("grouped_allgather needs tensors of at least one dimension")
        return list(_GroupedAllgatherFunction.apply(name, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))



def _reducescatter_request(tensor, name, operator, process_set, prescale_factor,
                           postscale_factor, compression, member=0):
    """One reducescatter (member `member` of a group): its arguments, the (compressed) tensor
    chorus reads, and what reads and decompresses its block from the handle. Scaled and
    averaged as Horovod does (_horovod_factors): integers through double, truncated, in this
    layer."""
    set_id = _set_id(process_set)  # refuses what is not a process set
    operator, prescale_factor, postscale_factor, integer_pre, integer_post = _horovod_factors(
        tensor.dtype, operator, prescale_factor, postscale_factor, process_set)
    tensor = tensor.contiguous()
    if integer_pre != 1.0:
        tensor = _truncated(tensor, integer_pre)
    compressed, context = compression.compress(tensor)
    if compressed.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    args = op_args(c.REDUCESCATTER, name, _descriptor(compressed), None, operator, 0,
                   prescale_factor, postscale_factor, process_set=set_id)
    gathered = _gathered(compressed, tuple(compressed.shape[1:]), member)

    def finish(handle):
        block = compression.decompress(gathered(handle), context)
        return _truncated(block, integer_post) if integer_post != 1.0 else block
    return args, compressed, finish


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0, *, compression=Compression.none):
    """Reduces every rank's tensor (all of one shape) with `op` and returns this rank's block of
    rows: the first dimension split as evenly as it goes, the first (rows % size) ranks getting
    one row more, as Horovod splits it."""
    args, compressed, finish = _reducescatter_request(
        tensor, name or default_name("reducescatter", process_set), _resolve_op(None, op), process_set,
        prescale_factor, postscale_factor, compression)
    return submit(args, compressed, finish)


class _ReducescatterFunction(torch.autograd.Function):
    """Horovod's gradient of a reducescatter: every rank's block of the gradient gathered back
    into the input's shape, multiplied by the ranks for a sum (as Horovod 0.28.1 computes it:
    at 2 ranks a sum's upstream gradient of 1 gives 2, an average's 1), and scaled as the input
    was."""

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
        if op == Sum:
            scale *= _set_size(process_set)
        return gathered * scale if scale != 1.0 else gathered, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Differentiable (sum and average) when `tensor` requires a gradient."""
    name = name or default_name("reducescatter", process_set)
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
    name = name or default_name("grouped_reducescatter", process_set)
    operator = _resolve_op(None, op)
    requests = [_reducescatter_request(t, f"{name}.{i}", operator, process_set, prescale_factor,
                                       postscale_factor, compression, i)
                for i, t in enumerate(tensors)]
    return _submit_requests(requests)


class _GroupedReducescatterFunction(torch.autograd.Function):
    """Horovod's gradient of a grouped reducescatter: each gradient gathered back as one group,
    scaled as a single reducescatter's is."""

    @staticmethod
    def forward(context, name, op, prescale_factor, postscale_factor, compression, process_set,
                *tensors):
        context.args = (name, op, prescale_factor * postscale_factor, process_set)
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor,
            compression=compression)))

    @staticmethod
    def backward(context, *gradients):
        name, op, scale, process_set = context.args
        gathered = synchronize(grouped_allgather_async([g.contiguous() for g in gradients],
                                                       f"{name}.gradient", process_set))
        if op == Sum:
            scale *= _set_size(process_set)
        return (None,) * 6 + tuple(g * scale if scale != 1.0 else g for g in gathered)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    """Differentiable (sum and average) when a tensor requires a gradient, as Horovod's."""
    operator = _resolve_op(None, op)
    name = name or default_name("grouped_reducescatter", process_set)
    if _any_differentiable(tensors):
        _require_differentiable_op("a grouped reducescatter", operator)
        return list(_GroupedReducescatterFunction.apply(name, operator, prescale_factor,
                                                        postscale_factor, compression,
                                                        process_set, *tensors))
    return synchronize(grouped_reducescatter_async(tensors, name, operator, process_set,
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
                            name or default_name("alltoall", process_set), splits is not None, process_set)


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
    name = name or default_name("alltoall", process_set)
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
    args = op_args(c.BROADCAST, name or default_name("broadcast", process_set), _descriptor(staged),
                   root=root_rank, process_set=_set_id(process_set))
    return submit(args, staged, lambda handle: back())


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.clone().contiguous(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _BroadcastFunction(torch.autograd.Function):
    """Horovod's gradient of a broadcast: every rank's gradient averaged onto the root; the
    others' inputs did not reach the result, so theirs is zero."""

    @staticmethod
    def forward(context, tensor, root_rank, name, process_set):
        context.root, context.name, context.process_set = root_rank, name, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(context, gradient):
        averaged = synchronize(allreduce_async(gradient.contiguous(), None,
                                               f"{context.name}.gradient", Average,
                                               process_set=context.process_set))
        return ((averaged if rank() == context.root else torch.zeros_like(averaged)), None, None,
                None)


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Differentiable when `tensor` requires a gradient."""
    name = name or default_name("broadcast", process_set)
    if _differentiable(tensor):
        return _BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))



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


