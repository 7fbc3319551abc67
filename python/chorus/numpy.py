"""chorus's collectives on numpy arrays. Functions ending in _ work in place; *_async return a
handle whose wait() returns the result; names default to automatic ones (identical on ranks that
call in the same order). process_set= takes the id process_set_add(ranks) returned (every rank
calls it alike); 0 is every rank."""
import ctypes

import numpy as np

from . import _library as c
from .core import (ChorusError, cross_rank, cross_size, default_name, describe, init,
                   is_initialized, join, local_rank, local_size, op_args, process_set_add,
                   process_set_ranks, process_set_remove, rank, shared_block, shutdown, size,
                   submit, submit_group)

Sum, Average, Min, Max, Product = c.SUM, c.AVERAGE, c.MIN, c.MAX, c.PRODUCT

_DTYPES = {np.dtype(np.uint8): c.UINT8, np.dtype(np.int8): c.INT8, np.dtype(np.int32): c.INT32,
           np.dtype(np.int64): c.INT64, np.dtype(np.float16): c.FLOAT16,
           np.dtype(np.float32): c.FLOAT32, np.dtype(np.float64): c.FLOAT64,
           np.dtype(np.int16): c.INT16, np.dtype(np.uint16): c.UINT16,
           np.dtype(np.bool_): c.BOOL}


def _dtype(array):
    try:
        return _DTYPES[array.dtype]
    except KeyError:
        raise TypeError(f"chorus does not support numpy dtype {array.dtype}") from None


def _tensor(array):
    if not array.flags.c_contiguous:
        raise ValueError("chorus needs C-contiguous arrays (use np.ascontiguousarray)")
    return describe(array.ctypes.data, _dtype(array), array.shape)


def allreduce_async_(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=0):
    name = name or default_name("allreduce", process_set)
    args = op_args(c.ALLREDUCE, name, _tensor(array), None, op, 0, prescale_factor,
                   postscale_factor, process_set=process_set)
    return submit(args, array, lambda handle: array)


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=0):
    array = np.ascontiguousarray(array)
    output = np.empty_like(array)
    name = name or default_name("allreduce", process_set)
    args = op_args(c.ALLREDUCE, name, _tensor(array), output.ctypes.data, op, 0,
                   prescale_factor, postscale_factor, process_set=process_set)
    return submit(args, (array, output), lambda handle: output)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=0):
    return allreduce_async(array, op, name, prescale_factor, postscale_factor,
                           process_set).wait()


def allreduce_(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=0):
    return allreduce_async_(array, op, name, prescale_factor, postscale_factor,
                            process_set).wait()


def grouped_allreduce(arrays, op=Average, name=None, process_set=0):
    """Allreduces every array of the list as one negotiated group; returns new arrays."""
    name = name or default_name("grouped_allreduce", process_set)
    inputs = [np.ascontiguousarray(a) for a in arrays]
    outputs = [np.empty_like(a) for a in inputs]
    args = [op_args(c.ALLREDUCE, f"{name}.{i}", _tensor(a), o.ctypes.data, op,
                    process_set=process_set)
            for i, (a, o) in enumerate(zip(inputs, outputs))]
    return submit_group(args, (inputs, outputs), lambda handle: outputs).wait()


def broadcast_async_(array, root_rank, name=None, process_set=0):
    name = name or default_name("broadcast", process_set)
    args = op_args(c.BROADCAST, name, _tensor(array), None, root=root_rank,
                   process_set=process_set)
    return submit(args, array, lambda handle: array)


def broadcast_(array, root_rank, name=None, process_set=0):
    return broadcast_async_(array, root_rank, name, process_set).wait()


def broadcast(array, root_rank, name=None, process_set=0):
    copy = np.array(array, copy=True, order="C")
    return broadcast_(copy, root_rank, name, process_set)


def _gathered(dtype, trailing):
    def finish(handle):
        descriptor = handle.gathered()
        rows = descriptor.shape[0]
        count = rows * int(np.prod(trailing, dtype=np.int64))
        result = np.empty((rows,) + tuple(trailing), dtype=dtype)
        if count:
            ctypes.memmove(result.ctypes.data, descriptor.data, result.nbytes)
        return result
    return finish


def allgather_async(array, name=None, process_set=0):
    """Concatenates every rank's array along the first dimension (which may differ)."""
    array = np.ascontiguousarray(array)
    if array.ndim == 0:
        array = array.reshape(1)
    name = name or default_name("allgather", process_set)
    args = op_args(c.ALLGATHER, name, _tensor(array), process_set=process_set)
    return submit(args, array, _gathered(array.dtype, array.shape[1:]))


def allgather(array, name=None, process_set=0):
    return allgather_async(array, name, process_set).wait()


def alltoall_async(array, splits=None, name=None, process_set=0):
    """Sends splits[k] rows to each rank k (None: rows split evenly) and receives every rank's
    rows for this one; wait() returns (the received array, the rows received from each rank)."""
    array = np.ascontiguousarray(array)
    if array.ndim == 0:
        raise ValueError("alltoall needs an array with at least one dimension")
    name = name or default_name("alltoall", process_set)
    values = None if splits is None else [int(s) for s in splits]
    args = op_args(c.ALLTOALL, name, _tensor(array), splits=values, process_set=process_set)
    gathered = _gathered(array.dtype, array.shape[1:])
    members = len(process_set_ranks(process_set))
    return submit(args, (array, args),
                  lambda handle: (gathered(handle),
                                  np.array(handle.received_splits(members))))


def alltoall(array, splits=None, name=None, process_set=0):
    return alltoall_async(array, splits, name, process_set).wait()


def reducescatter_async(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=0):
    """Reduces every rank's array (all of one shape) and returns this rank's block of rows:
    the first dimension split as evenly as it goes, the first ranks one row more."""
    array = np.ascontiguousarray(array)
    if array.ndim == 0:
        raise ValueError("reducescatter needs an array with at least one dimension")
    name = name or default_name("reducescatter", process_set)
    args = op_args(c.REDUCESCATTER, name, _tensor(array), None, op, 0, prescale_factor,
                   postscale_factor, process_set=process_set)
    return submit(args, array, _gathered(array.dtype, array.shape[1:]))


def reducescatter(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=0):
    return reducescatter_async(array, op, name, prescale_factor, postscale_factor,
                               process_set).wait()


def shared_array(shape, dtype=np.float32):
    """A zeroed array in chorus's shared heap (chorus_mem_alloc): an allreduce of an array that
    lies there on every rank runs in place on each host, at about half the memory traffic."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    block = shared_block(count * dtype.itemsize)
    return np.frombuffer(block, dtype=np.uint8)[:count * dtype.itemsize].view(dtype).reshape(shape)


__all__ = ["ChorusError", "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
           "local_size", "cross_rank", "cross_size", "join", "Sum", "Average", "Min", "Max",
           "Product", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
           "grouped_allreduce", "broadcast", "broadcast_", "broadcast_async_", "allgather",
           "allgather_async", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
           "process_set_add", "process_set_remove", "process_set_ranks", "shared_array"]
