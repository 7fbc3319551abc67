"""Loads libchorus with ctypes and declares the C functions and structs the binding uses.

The library is found, in order: $CHORUS_LIBRARY; beside this file (pip install . puts it
there); the meson build tree of this source checkout (build/libchorus.so); the system's library
path (an installed libchorus.so.0)."""
import ctypes
import ctypes.util
import os
from pathlib import Path

MAX_DIMS = 8

# Status codes (chorus.h, CHORUS_STATUS_TABLE): those the binding tells apart.
OK, IN_PROGRESS = 0, 1
ERR_INVALID_ARGUMENT, ERR_NOT_INITIALIZED, ERR_DUPLICATE_NAME, ERR_TIMEOUT = -1, -2, -7, -15

# chorus_dtype
(UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, INT16, UINT16,
 BOOL) = range(11)
# chorus_op
SUM, AVERAGE, MIN, MAX, PRODUCT, ADASUM = range(6)
# chorus_collective
ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER, ALLTOALL = range(5)
# chorus_send_async / chorus_recv_async
ANY_SOURCE = -1
# chorus_memory
MEMORY_HOST, MEMORY_CUDA = 0, 1
# chorus_compression
(COMPRESSION_DEFAULT, COMPRESSION_NONE, COMPRESSION_FP16, COMPRESSION_BF16, COMPRESSION_INT8,
 COMPRESSION_INT4, COMPRESSION_TOPK) = range(7)
# chorus_op_args.flags
OP_ORDERED = 1 << 0


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndims", ctypes.c_size_t),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("memory", ctypes.c_int),
                ("device", ctypes.c_int)]


class OpArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("collective", ctypes.c_int),
                ("name", ctypes.c_char_p), ("input", Tensor), ("output", ctypes.c_void_p),
                ("op", ctypes.c_int), ("root", ctypes.c_int), ("prescale_factor", ctypes.c_double),
                ("postscale_factor", ctypes.c_double), ("compression", ctypes.c_int),
                ("splits", ctypes.POINTER(ctypes.c_int64)), ("process_set", ctypes.c_int),
                ("flags", ctypes.c_uint64), ("timeout_seconds", ctypes.c_double),
                ("error_feedback", ctypes.c_void_p), ("compression_ratio", ctypes.c_double),
                ("cuda_stream", ctypes.c_void_p)]


class Topology(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("rank", ctypes.c_int), ("size", ctypes.c_int),
                ("local_rank", ctypes.c_int), ("local_size", ctypes.c_int),
                ("cross_rank", ctypes.c_int), ("cross_size", ctypes.c_int),
                ("cores", ctypes.c_size_t), ("pus", ctypes.c_size_t),
                ("numa_nodes", ctypes.c_size_t), ("homogeneous", ctypes.c_bool)]


class InitOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("parameters", ctypes.c_char_p)]


class GrowOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("command", ctypes.c_char_p),
                ("argv", ctypes.POINTER(ctypes.c_char_p)), ("count", ctypes.c_int),
                ("hosts", ctypes.c_char_p)]


def _candidates():
    explicit = os.environ.get("CHORUS_LIBRARY")
    if explicit:
        yield explicit
        return
    beside = Path(__file__).resolve().with_name("libchorus.so")
    if beside.exists():
        yield str(beside)
    source_root = Path(__file__).resolve().parents[2]
    for build in sorted(source_root.glob("build*/libchorus.so")):
        yield str(build)
    found = ctypes.util.find_library("chorus")
    if found:
        yield found
    yield "libchorus.so.0"


def _load():
    errors = []
    for candidate in _candidates():
        try:
            return ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            errors.append(f"{candidate}: {error}")
    raise ImportError("cannot load libchorus (set CHORUS_LIBRARY to its path, or build it with "
                      "meson in build/): " + "; ".join(errors))


lib = _load()
handle_p = ctypes.c_void_p


def _declare(name, restype, *argtypes):
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


_declare("chorus_init", ctypes.c_int, ctypes.POINTER(InitOptions))
_declare("chorus_shutdown", ctypes.c_int)
_declare("chorus_peer_lost", ctypes.c_int, ctypes.c_int, ctypes.c_char_p)
_declare("chorus_reform", ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
         ctypes.POINTER(InitOptions))
_declare("chorus_grow", ctypes.c_int, ctypes.POINTER(GrowOptions), ctypes.POINTER(InitOptions))
_declare("chorus_is_initialized", ctypes.c_bool)
_declare("chorus_world_open", ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_declare("chorus_world_address", None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
         ctypes.POINTER(ctypes.c_size_t))
_declare("chorus_init_world", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
         ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(InitOptions))
_declare("chorus_world_close", None, ctypes.c_void_p)
for _name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
    _declare("chorus_" + _name, ctypes.c_int)
_declare("chorus_get_topology", ctypes.c_int, ctypes.POINTER(Topology))
_declare("chorus_submit", ctypes.c_int, ctypes.POINTER(OpArgs), ctypes.POINTER(handle_p))
_declare("chorus_submit_group", ctypes.c_int, ctypes.POINTER(OpArgs), ctypes.c_size_t,
         ctypes.POINTER(handle_p))
_declare("chorus_test", ctypes.c_int, handle_p)
_declare("chorus_wait", ctypes.c_int, handle_p)
_declare("chorus_handle_error", ctypes.c_char_p, handle_p)
_declare("chorus_handle_output", ctypes.c_int, handle_p, ctypes.POINTER(Tensor))
_declare("chorus_handle_output_at", ctypes.c_int, handle_p, ctypes.c_size_t,
         ctypes.POINTER(Tensor))
_declare("chorus_handle_received_splits", ctypes.c_int, handle_p,
         ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t)
_declare("chorus_handle_free", None, handle_p)
_declare("chorus_send_async", ctypes.c_int, ctypes.POINTER(Tensor), ctypes.c_int, ctypes.c_int,
         ctypes.c_int, ctypes.POINTER(handle_p))
_declare("chorus_recv_async", ctypes.c_int, ctypes.POINTER(Tensor), ctypes.c_int, ctypes.c_int,
         ctypes.c_int, ctypes.POINTER(handle_p))
_declare("chorus_handle_source", ctypes.c_int, handle_p)
_declare("chorus_join", ctypes.c_int)
_declare("chorus_barrier", ctypes.c_int)
_declare("chorus_last_joined_rank", ctypes.c_int)
_declare("chorus_process_set_add", ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
         ctypes.POINTER(ctypes.c_int))
_declare("chorus_process_set_remove", ctypes.c_int, ctypes.c_int)
_declare("chorus_process_set_ranks", ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
         ctypes.c_int, ctypes.POINTER(ctypes.c_int))
_declare("chorus_mem_alloc", ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
_declare("chorus_mem_free", ctypes.c_int, ctypes.c_void_p)
_declare("chorus_last_error", ctypes.c_char_p)
_declare("chorus_status_name", ctypes.c_char_p, ctypes.c_int)
_declare("chorus_version", ctypes.c_char_p)
_declare("chorus_gpu_built", ctypes.c_bool)
_declare("chorus_nccl_version", ctypes.c_int)
_declare("chorus_start_timeline", ctypes.c_int, ctypes.c_char_p)
_declare("chorus_stop_timeline", ctypes.c_int)
_declare("chorus_timeline_mark", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_double,
         ctypes.c_double)
