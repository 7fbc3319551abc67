"""The framework-neutral core of the binding: errors, handles, and submitting an operation
described by a data pointer, a dtype and a shape. chorus.numpy and chorus.torch build on it."""
import atexit
import ctypes
import threading
import weakref

from . import _library as c


class ChorusError(RuntimeError):
    """A chorus call failed. `status` is the status name (for example "CHORUS_ERR_MISMATCH"),
    the message is chorus's, naming the tensor and the ranks involved."""

    def __init__(self, status, message):
        self.status_code = status
        self.status = c.lib.chorus_status_name(status).decode()
        super().__init__(f"{self.status}: {message}")


class ChorusValueError(ChorusError, ValueError):
    """A call was refused before anything ran: an invalid argument (alltoall splits that do not
    add up, say), a name already in flight on this rank, or chorus not initialized. Also a
    ValueError, which is what Horovod raises there."""


class ChorusInternalError(ChorusError):
    """The collective itself failed, or chorus stopped: a mismatch between ranks, a failed or
    silent rank, a failed MPI or NCCL call, a shutdown. Horovod's HorovodInternalError."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic training: the driver reported hosts added or removed, and every rank raised this
    from the same State.commit() (or check_host_updates()). `skip_sync` is True when hosts were
    only removed. chorus.elastic.run catches it and brings the job to the new hosts."""

    def __init__(self, skip_sync=False):
        self.skip_sync = skip_sync
        super().__init__("hosts were " + ("removed" if skip_sync else "added or changed"))


# Statuses that mean the call's own arguments were wrong (raised as ValueError).
_VALUE_STATUSES = frozenset((c.ERR_INVALID_ARGUMENT, c.ERR_NOT_INITIALIZED, c.ERR_DUPLICATE_NAME))


def error(status, message):
    """The exception for a failed call: ChorusValueError for a refused argument, else
    ChorusInternalError."""
    kind = ChorusValueError if status in _VALUE_STATUSES else ChorusInternalError
    return kind(status, message)


def _last_error(status):
    return error(status, c.lib.chorus_last_error().decode(errors="replace"))


def check(status):
    if status != c.OK:
        raise _last_error(status)


_exit_hook_registered = False


def _shutdown_at_exit():
    if is_initialized():
        shutdown()


def init(parameters=None):
    """Initializes chorus (and MPI, if needed; under chorusrun's elastic driver with
    CHORUS_ELASTIC_WORLDS=ucx, on the world without MPI it forms instead). `parameters` is an
    optional dict or "NAME=VALUE;..." string of CHORUS_* settings that take precedence over the
    environment.
    As in Horovod, a second call while initialized does nothing, and chorus shuts down at exit
    if the script did not (else mpirun reports the job as ended improperly)."""
    if is_initialized():
        return
    from .elastic import worlds  # the elastic layer builds on this module
    if worlds.enabled():  # a rank chorusrun's elastic driver started on a world without MPI
        worlds.join_first(parameters)
        return
    check(c.lib.chorus_init(ctypes.byref(_starting(parameters))))


def _starting(parameters):
    """Before an init: shuts chorus down at exit, keeps `parameters` for reform() and grow(),
    and returns them as chorus_init_options."""
    global _exit_hook_registered, _parameters
    if not _exit_hook_registered:
        atexit.register(_shutdown_at_exit)
        _exit_hook_registered = True
    if isinstance(parameters, dict):
        parameters = ";".join(f"{k}={v}" for k, v in parameters.items())
    _parameters = parameters
    return _init_options(parameters)


# The parameters of the last init, which reform() and grow() use again.
_parameters = None


def _init_options(parameters):
    return c.InitOptions(ctypes.sizeof(c.InitOptions),
                         parameters.encode() if parameters else None)


class World:
    """This rank's side of world `number` without MPI, whose ranks outlive a lost peer or host
    (chorus over UCX: chorus_world_open). Whoever drives the job collects every rank's `address`
    and hands all of them to every rank, which then calls init_world. Close it only once every
    rank is done with it (a closed world looks like a lost rank to the others that still wait
    on it): after chorus shut down, and after the next world runs where one follows."""

    def __init__(self, number):
        handle = ctypes.c_void_p()
        check(c.lib.chorus_world_open(int(number), ctypes.byref(handle)))
        self.number = int(number)
        self._handle = handle

    @property
    def address(self):
        """This rank's address in the world (bytes)."""
        pointer, length = ctypes.c_void_p(), ctypes.c_size_t()
        c.lib.chorus_world_address(self._handle, ctypes.byref(pointer), ctypes.byref(length))
        return ctypes.string_at(pointer, length.value)

    def close(self):
        if self._handle:
            c.lib.chorus_world_close(self._handle)
            self._handle = None


def init_world(world, rank, size, addresses, host=None, parameters=None):
    """Initializes chorus on `world` (a World) as rank `rank` of `size`: `addresses[r]` is rank
    r's World.address, this rank's own included; ranks with one `host` name share a host (None:
    this machine's name). Every rank of the world calls it. `parameters` as for init()."""
    if len(addresses) != size:
        raise ValueError(f"init_world: {len(addresses)} addresses for {size} ranks")
    options = _starting(parameters)
    buffers = [ctypes.create_string_buffer(bytes(a), len(a)) for a in addresses]
    table = (ctypes.c_void_p * size)(*[ctypes.cast(b, ctypes.c_void_p) for b in buffers])
    check(c.lib.chorus_init_world(world._handle, int(rank), int(size),
                                  host.encode() if host else None, table,
                                  ctypes.byref(options)))


def peer_lost(rank, how=None):
    """Says that rank `rank` of this world is gone (an elastic driver saw its process end): what
    waits for it fails now with ChorusInternalError, instead of after CHORUS_TIMEOUT_SECONDS.
    Any thread."""
    check(c.lib.chorus_peer_lost(int(rank), how.encode() if how else None))


def reform(ranks):
    """Forms chorus again, in this process, over `ranks` of the current world (in their new
    order: ranks[0] becomes rank 0), after a rank died; every listed rank calls it with the same
    list, the others do not. Pending operations complete with an error; MPI stays. Needs an MPI
    that keeps survivors running (Open MPI's mpirun --enable-recovery)."""
    ranks = [int(r) for r in ranks]
    array = (ctypes.c_int * max(len(ranks), 1))(*ranks)
    status = c.lib.chorus_reform(array, len(ranks), ctypes.byref(_init_options(_parameters)))
    _reap_orphans()  # the old world's operations have completed now, with an error
    check(status)


def grow(command, arguments, count, hosts=None):
    """Adds `count` ranks running `command` with `arguments` (MPI_Comm_spawn from rank 0, on
    `hosts`, Open MPI's "host" key: "hostA,hostB"), in this process: every rank calls it alike;
    this rank keeps its rank, the new ones follow. The new processes join in their init. A failed
    spawn raises ChorusInternalError with chorus still running over the old world."""
    words = [a.encode() for a in arguments]
    argv = (ctypes.c_char_p * (len(words) + 1))(*words, None)
    options = c.GrowOptions(ctypes.sizeof(c.GrowOptions), command.encode(), argv, int(count),
                            hosts.encode() if hosts else None)
    status = c.lib.chorus_grow(ctypes.byref(options), ctypes.byref(_init_options(_parameters)))
    _reap_orphans()  # the old world's operations have completed now, with an error
    check(status)


def process_set_add(ranks):
    """Adds a process set of `ranks` (every rank must call it alike); returns its id."""
    ranks = sorted(int(r) for r in ranks)
    array = (ctypes.c_int * max(len(ranks), 1))(*ranks)
    added = ctypes.c_int(-1)
    check(c.lib.chorus_process_set_add(array, len(ranks), ctypes.byref(added)))
    return added.value


def process_set_remove(process_set_id):
    check(c.lib.chorus_process_set_remove(process_set_id))


def process_set_ranks(process_set_id):
    """The ranks of a process set (0: every rank); raises ChorusError if it does not exist."""
    count = ctypes.c_int(0)
    check(c.lib.chorus_process_set_ranks(process_set_id, None, 0, ctypes.byref(count)))
    array = (ctypes.c_int * max(count.value, 1))()
    check(c.lib.chorus_process_set_ranks(process_set_id, array, count.value,
                                         ctypes.byref(count)))
    return list(array[:count.value])


def shutdown():
    status = c.lib.chorus_shutdown()
    _reap_orphans()  # every operation has completed now, with an error if it had to
    if status not in (c.OK, -2):  # shutting down twice is harmless
        raise _last_error(status)


def start_timeline(file_path, mark_cycles=False):
    """Rank 0 records a timeline into file_path from now on (every rank may call it). A path this
    process already wrote gets ".N" before its extension. mark_cycles is accepted for Horovod's
    scripts; chorus has no cycles to mark."""
    check(c.lib.chorus_start_timeline(str(file_path).encode()))


def stop_timeline():
    """Completes and closes the timeline file."""
    check(c.lib.chorus_stop_timeline())


def timeline_mark(row, label, start, end):
    """Adds a span of your own (say, a layer's backward) to rank 0's timeline, on row `row`;
    start and end are time.monotonic() values. Other ranks' marks are ignored."""
    check(c.lib.chorus_timeline_mark(str(row).encode(), str(label).encode(), float(start),
                                     float(end)))


def is_initialized():
    return bool(c.lib.chorus_is_initialized())


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    topology = c.Topology(struct_size=ctypes.sizeof(c.Topology))
    check(c.lib.chorus_get_topology(ctypes.byref(topology)))
    return bool(topology.homogeneous)


def _topology(function):
    value = function()
    if value < 0:
        raise _last_error(value)
    return value


def rank():
    return _topology(c.lib.chorus_rank)


def size():
    return _topology(c.lib.chorus_size)


def local_rank():
    return _topology(c.lib.chorus_local_rank)


def local_size():
    return _topology(c.lib.chorus_local_size)


def cross_rank():
    return _topology(c.lib.chorus_cross_rank)


def cross_size():
    return _topology(c.lib.chorus_cross_size)


def join():
    """This rank has run out of data: the others go on with it contributing nothing, until
    every rank has joined. Blocks until then. Every rank then counts its unnamed operations
    from 0 again (default_name)."""
    check(c.lib.chorus_join())
    _restart_names()


_names_lock = threading.Lock()
_names_epoch = 0  # joins completed, the same on every rank after each
_names_next = {}  # process set id: the next number


def _restart_names():
    global _names_epoch
    with _names_lock:
        _names_epoch += 1
        _names_next.clear()


def _set_key(process_set):
    """A process set's id, given as an id, an object with process_set_id, or None (the job)."""
    if process_set is None:
        return 0
    if isinstance(process_set, int):
        return process_set
    return getattr(process_set, "process_set_id", None) or 0


def default_name(kind, process_set=None):
    """Horovod-style automatic names, "allreduce.noname.N": identical on every rank that makes
    the same calls in the same order. Numbered per process set (chorus keeps each set's names
    apart), so that members of different sets, which make different numbers of calls in their
    own sets, still agree in the sets they share; Horovod numbers every call of a process
    alike, and its own test_torch.py then hangs as one file at 3 ranks. Counted from the last
    join every rank completed, where every rank starts again from 0 ("allreduce.noname.J.N"
    after the J-th): ranks whose counts drifted apart (an allgather the joined ranks' peers
    submitted and had refused, a call that failed on some ranks only) meet again after it."""
    key = _set_key(process_set)
    with _names_lock:
        number = _names_next.get(key, 0)
        _names_next[key] = number + 1
        return (f"{kind}.noname.{number}" if _names_epoch == 0
                else f"{kind}.noname.{_names_epoch}.{number}")


class Handle:
    """An operation in flight. Keeps its buffers alive until it completes."""

    def __init__(self, pointer, keep_alive, finish=None):
        self._pointer = pointer
        self._keep_alive = keep_alive
        self._finish = finish  # called with the handle when it completed successfully
        self._result = None
        self._done = False

    def poll(self):
        """True once the operation has completed (successfully or not)."""
        return self._done or c.lib.chorus_test(self._pointer) != c.IN_PROGRESS

    def wait(self):
        """Waits for completion; returns the result; raises ChorusError on failure."""
        if self._done:
            return self._result
        status = c.lib.chorus_wait(self._pointer)
        try:
            if status != c.OK:
                message = c.lib.chorus_handle_error(self._pointer).decode(errors="replace")
                raise ChorusInternalError(status, message)
            self._result = self._finish(self) if self._finish else None
        finally:
            c.lib.chorus_handle_free(self._pointer)
            self._pointer = None
            self._keep_alive = None
            self._done = True
        return self._result

    def gathered(self, member=0):
        """For an allgather, reducescatter or alltoall, before wait() returns: the output's
        descriptor (of member `member` of a grouped call)."""
        descriptor = c.Tensor()
        check(c.lib.chorus_handle_output_at(self._pointer, member, ctypes.byref(descriptor)))
        return descriptor

    def received_splits(self, count=None):
        """For an alltoall, before wait() returns: the rows received from each rank (`count`:
        the ranks of its process set, every rank by default)."""
        count = size() if count is None else count
        splits = (ctypes.c_int64 * count)()
        check(c.lib.chorus_handle_received_splits(self._pointer, splits, count))
        return list(splits)

    def __del__(self):
        pointer = getattr(self, "_pointer", None)
        if pointer is None:
            return
        try:
            if c.lib.chorus_test(pointer) == c.IN_PROGRESS:
                # Dropped while in flight (a handle nobody synchronized): chorus still reads
                # and writes its buffers, so they are kept until the operation completes.
                with _orphans_lock:
                    _orphans.append((pointer, self._keep_alive))
                return
            c.lib.chorus_handle_free(pointer)
        except Exception:  # noqa: BLE001 (interpreter shutdown: nothing left to protect)
            pass


# Handles dropped while their operations were in flight, with the buffers those use.
_orphans = []
_orphans_lock = threading.Lock()


def _reap_orphans():
    """Frees the dropped handles whose operations have completed, and their buffers."""
    with _orphans_lock:
        kept = []
        for pointer, buffers in _orphans:
            if c.lib.chorus_test(pointer) == c.IN_PROGRESS:
                kept.append((pointer, buffers))
            else:
                c.lib.chorus_handle_free(pointer)
        _orphans[:] = kept


def describe(data_pointer, dtype, shape, memory=c.MEMORY_HOST, device=0):
    if len(shape) > c.MAX_DIMS:
        raise ValueError(f"at most {c.MAX_DIMS} dimensions are supported, not {len(shape)}")
    tensor = c.Tensor()
    tensor.data = data_pointer
    tensor.dtype = dtype
    tensor.ndims = len(shape)
    for i, extent in enumerate(shape):
        tensor.shape[i] = extent
    tensor.memory = memory
    tensor.device = device
    return tensor


# The stream whose work produces a CUDA tensor, as an address (0: the legacy default stream):
# set by the framework binding (chorus.torch: torch's current stream on the tensor's device).
cuda_stream_of = None


def op_args(collective, name, tensor, output=None, op=c.SUM, root=0, prescale=1.0,
            postscale=1.0, compression=c.COMPRESSION_DEFAULT, splits=None, process_set=0,
            error_feedback=None, compression_ratio=0.0):
    """chorus_op_args; `error_feedback` the address of a compressed allreduce's residual,
    `compression_ratio` TOPK's fraction of the values sent."""
    args = c.OpArgs()
    args.struct_size = ctypes.sizeof(c.OpArgs)
    args.collective = collective
    args.name = name.encode()
    args.input = tensor
    args.output = output
    args.op = op
    args.root = root
    args.prescale_factor = prescale
    args.postscale_factor = postscale
    args.compression = compression
    args.compression_ratio = compression_ratio
    args.process_set = process_set
    args.error_feedback = error_feedback
    if tensor.memory == c.MEMORY_CUDA and cuda_stream_of is not None:
        args.cuda_stream = cuda_stream_of(tensor.device) or None
    if splits is not None:
        # The library copies the splits at submit; the array only has to outlive that call.
        args._splits = (ctypes.c_int64 * len(splits))(*splits)
        args.splits = ctypes.cast(args._splits, ctypes.POINTER(ctypes.c_int64))
    return args


def submit(args, keep_alive, finish=None):
    if _orphans:
        _reap_orphans()
    pointer = c.handle_p()
    check(c.lib.chorus_submit(ctypes.byref(args), ctypes.byref(pointer)))
    return Handle(pointer, keep_alive, finish)


def submit_group(args_list, keep_alive, finish=None):
    if _orphans:
        _reap_orphans()
    array = (c.OpArgs * len(args_list))(*args_list)
    pointer = c.handle_p()
    check(c.lib.chorus_submit_group(array, len(args_list), ctypes.byref(pointer)))
    return Handle(pointer, (keep_alive, array), finish)


def shared_block(nbytes):
    """A zeroed block of `nbytes` in chorus's shared heap (chorus_mem_alloc), as a ctypes byte
    array: an allreduce of a tensor that lies there on every rank runs in place on each host. The
    block goes back to the heap when the array (and whatever views it, such as a numpy array or
    a torch tensor made from it) is gone."""
    pointer = ctypes.c_void_p()
    check(c.lib.chorus_mem_alloc(nbytes, ctypes.byref(pointer)))
    block = (ctypes.c_ubyte * max(nbytes, 1)).from_address(pointer.value)
    weakref.finalize(block, c.lib.chorus_mem_free, pointer.value)
    return block
