"""chorus as a torch.distributed backend.

    import chorus.torch            # registers the backend "chorus"
    import torch.distributed as dist
    dist.init_process_group(backend="chorus")   # started by chorusrun, mpirun, SGE or Slurm

Rank and world size come from the MPI job: neither RANK, WORLD_SIZE, MASTER_ADDR nor
MASTER_PORT is needed (the ones set are kept). torch's own store, which it uses for new_group's
barrier, is a TCPStore on rank 0's host, whose name rank 0 tells the others through chorus.

Every collective runs as a chorus ordered operation (CHORUS_OP_ORDERED): each rank's N-th call
on a group runs with every other member's N-th, with no negotiation, and a call that differs
(shape, dtype, op, collective) fails on every rank with a message naming the position and the
ranks. The collectives are those of a C++ process group (python/c10d), built with chorus when
libtorch-dev is found, as are point-to-point send and recv (chorus's transfers, posted in call
order with the collectives) and monitored_barrier (which torch 1.13 allows on gloo alone: this
module's wrapper runs it on chorus groups). docs/torch-distributed.md tells the rest."""
import ctypes
import glob
import importlib.util
import os
import socket
import weakref

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .. import _library as c
from .. import core

BACKEND = "chorus"

_extension_module = None
_original_init_process_group = c10d.init_process_group
_original_new_group = c10d.new_group
_original_monitored_barrier = c10d.monitored_barrier
# Sets added by new_group on every rank, waiting for the member's backend constructor.
_pending_sets = {}
# Each chorus group made here: its chorus process set and timeout (comm_hooks.py submits ordered
# operations of its own on them).
_groups = weakref.WeakKeyDictionary()
# The env:// variables this module set itself (name: value), which a later init_process_group
# (after chorus_reform formed the job again over fewer ranks) sets anew; the user's stay.
_set_here = {}


def _extension():
    """The compiled process group: installed beside the package, or in the build tree of the
    libchorus this process loaded, or at $CHORUS_C10D_EXTENSION."""
    global _extension_module
    if _extension_module is not None:
        return _extension_module
    explicit = os.environ.get("CHORUS_C10D_EXTENSION")
    candidates = [explicit] if explicit else []
    library_dir = os.path.dirname(os.path.realpath(c.lib._name))
    candidates += sorted(glob.glob(os.path.join(library_dir, "python", "c10d",
                                                "_chorus_c10d*.so")))
    try:
        from .. import _chorus_c10d as module  # pip or meson install
        _extension_module = module
        return module
    except ImportError:
        pass
    for candidate in candidates:
        spec = importlib.util.spec_from_file_location("_chorus_c10d", candidate)
        if spec is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _extension_module = module
        return module
    raise RuntimeError(
        "the chorus torch.distributed backend is not built: chorus was built without "
        "libtorch-dev, pybind11-dev and python3-dev (install them and rebuild; meson's summary "
        "says 'torch.distributed backend: True'), or set CHORUS_C10D_EXTENSION to "
        "_chorus_c10d*.so")


def _launched_by_mpi():
    return any(name in os.environ for name in
               ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"))


def _refuse_launch():
    """Raises, saying how to start the job, when no MPI launcher started this process."""
    if _launched_by_mpi():
        return
    how = ("start the script with chorusrun -np N python script.py (or mpirun -np N, an SGE "
           "-pe job, or srun --mpi=pmix): chorus's ranks are an MPI job's")
    if "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_RESTART_COUNT" in os.environ:
        raise RuntimeError(f"the chorus backend does not run under torchrun: {how}")
    raise RuntimeError(f"the chorus backend was started without a launcher: {how}; "
                       "a single process too (chorusrun -np 1)")


def _broadcast_text(text, length=256):
    """Rank 0's `text` on every rank (a chorus broadcast of `length` bytes)."""
    buffer = (ctypes.c_uint8 * length)()
    encoded = text.encode()[:length - 1]
    buffer[:len(encoded)] = encoded
    args = core.op_args(c.BROADCAST, "chorus.torch.distributed.rendezvous",
                        core.describe(ctypes.addressof(buffer), c.UINT8, (length,)))
    core.submit(args, buffer).wait()
    return bytes(buffer).split(b"\0", 1)[0].decode()


def _rank0_address():
    """A host name or address of this host that the other hosts reach, and a free port."""
    address = os.environ.get("CHORUS_MASTER_ADDR") or socket.getfqdn()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"{address}:{port}"


def _prepare_environment(kwargs):
    """Before torch's init_process_group: chorus up, and the variables of env:// from the job."""
    _refuse_launch()
    core.init()
    for name, value in list(_set_here.items()):
        if os.environ.get(name) == value:
            del os.environ[name]
    _set_here.clear()

    def default(name, value):
        if name not in os.environ:
            os.environ[name] = _set_here[name] = str(value)

    for name, value in (("RANK", core.rank()), ("WORLD_SIZE", core.size()),
                        ("LOCAL_RANK", core.local_rank()),
                        ("LOCAL_WORLD_SIZE", core.local_size())):
        default(name, value)
    rendezvous = kwargs.get("init_method") is not None or kwargs.get("store") is not None
    if not rendezvous and not ("MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ):
        mine = _rank0_address() if core.rank() == 0 else ""
        address, port = _broadcast_text(mine).rsplit(":", 1)
        default("MASTER_ADDR", address)
        default("MASTER_PORT", port)
    for name, expected in (("world_size", core.size()), ("rank", core.rank())):
        given = kwargs.get(name, -1)
        if given not in (-1, None) and int(given) != expected:
            raise ValueError(f"init_process_group({name}={given}): the chorus backend's "
                             f"{name} is the MPI job's, {expected}")


_INIT_PARAMETERS = ("backend", "init_method", "timeout", "world_size", "rank", "store",
                    "group_name", "pg_options")


def _store_in_order(named):
    """The TCPStore that env:// would make, made in order: rank 0's server, then a chorus
    broadcast, then the other ranks' clients. torch's client that finds no server yet sleeps a
    whole second before it tries again, which made init_process_group take 1 s on most runs;
    made in order it takes milliseconds. Prefixed as torch prefixes the store it makes."""
    timeout = named.get("timeout") or c10d.default_pg_timeout
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    server = core.rank() == 0
    if server:
        store = dist.TCPStore(address, port, core.size(), True, timeout,
                              wait_for_workers=False, multi_tenant=True)
    _broadcast_text("store")
    if not server:
        store = dist.TCPStore(address, port, core.size(), False, timeout, multi_tenant=True)
    return dist.PrefixStore("default_pg", store)


def init_process_group(*args, **kwargs):
    """torch.distributed.init_process_group, which for backend="chorus" first starts chorus
    and fills in what env:// needs from the MPI job (and, where the caller named no rendezvous,
    makes its store without torch's wait)."""
    named = dict(zip(_INIT_PARAMETERS, args))
    named.update(kwargs)
    if str(named.get("backend") or "").lower() == BACKEND:
        _prepare_environment(named)
        if named.get("init_method") is None and named.get("store") is None:
            named.update(store=_store_in_order(named), rank=core.rank(), world_size=core.size())
            return _original_init_process_group(**named)
    return _original_init_process_group(*args, **kwargs)


def new_group(ranks=None, *args, **kwargs):
    """torch.distributed.new_group, which over the chorus backend also adds a chorus process
    set on every rank (chorus's sets are added by every rank of the job; torch creates the
    group's backend on its members only)."""
    backend = kwargs.get("backend", args[1] if len(args) > 1 else None)
    default = c10d._get_default_group() if dist.is_initialized() else None
    uses_chorus = default is not None and dist.get_backend(default) == BACKEND and (
        backend is None or str(backend).lower() == BACKEND)
    if uses_chorus:
        members = list(range(default.size())) if not ranks else [int(r) for r in ranks]
        if members != sorted(members):
            raise ValueError(f"new_group(ranks={list(ranks)}): the chorus backend takes a "
                             "group's ranks in ascending order")
        process_set = core.process_set_add(members)
        _pending_sets.setdefault(tuple(members), []).append(process_set)
    return _original_new_group(ranks, *args, **kwargs)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, which torch 1.13 runs on gloo only, also on chorus
    groups: the other ranks tell the group's rank 0 that they arrived, and rank 0 raises
    RuntimeError naming the first rank (or, with wait_all_ranks, every rank) that did not
    arrive within `timeout` ("Rank 1 failed to pass monitoredBarrier in 2000 ms", as gloo);
    the ranks that arrived raise too when rank 0 does not answer. The group's process group
    object has the same call (group.monitored_barrier(timeout, wait_all_ranks=...))."""
    target = c10d._get_default_group() if group in (None, c10d.GroupMember.WORLD) else group
    if c10d._rank_not_in_group(group) or dist.get_backend(target) != BACKEND:
        return _original_monitored_barrier(c10d.GroupMember.WORLD if group is None else group,
                                           timeout=timeout, wait_all_ranks=wait_all_ranks)
    return target.monitored_barrier(c10d.default_pg_timeout if timeout is None else timeout,
                                    wait_all_ranks=wait_all_ranks)


def _timeout_seconds(options):
    """The timeout= given to init_process_group or new_group, which bounds each collective of
    the group as it does gloo's; 0 (chorus's own CHORUS_TIMEOUT_SECONDS) where none was given,
    which torch passes as its default of 30 minutes."""
    timeout = getattr(options, "timeout", None)
    if timeout is None or timeout == c10d.default_pg_timeout:
        return 0.0
    return max(timeout.total_seconds(), 1e-3)


def _create(options, pg_options):
    """The backend's constructor (torch's extended API): a group of the whole job, or of the
    ranks new_group named."""
    extension = _extension()
    members = [int(r) for r in options.global_ranks_in_group]
    if not members:
        if options.group_size != core.size() or options.group_rank != core.rank():
            raise ValueError(
                f"the chorus backend's rank and world size are the MPI job's ({core.rank()} of "
                f"{core.size()}), not {options.group_rank} of {options.group_size}")
        group = extension.ProcessGroupChorus(core.rank(), core.size(), 0,
                                             list(range(core.size())), _timeout_seconds(options))
        _groups[group] = (0, _timeout_seconds(options))
        return group
    waiting = _pending_sets.get(tuple(members))
    if not waiting:
        raise RuntimeError(f"chorus backend: a group of ranks {members} made without "
                           "torch.distributed.new_group (which import chorus.torch wraps)")
    process_set = waiting.pop(0)
    group = extension.ProcessGroupChorus(options.group_rank, options.group_size, process_set,
                                         members, _timeout_seconds(options))
    _groups[group] = (process_set, _timeout_seconds(options))
    return group


def chorus_group(group=None):
    """The chorus process set and timeout (seconds, 0 for CHORUS_TIMEOUT_SECONDS) of a chorus
    group (None: the default group), on which an ordered operation submitted through chorus
    takes its turn among the group's own collectives; ValueError for another backend's."""
    target = c10d._get_default_group() if group in (None, c10d.GroupMember.WORLD) else group
    found = _groups.get(target)
    if found is None:
        raise ValueError(f"{target!r} is not a group of the chorus backend "
                         "(init_process_group(backend=\"chorus\") or new_group over it)")
    return found


def register():
    """Registers "chorus" with torch.distributed and wraps init_process_group and new_group
    (both keep their signatures and behaviour for every other backend). Idempotent."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)
    for module in (dist, c10d):
        module.init_process_group = init_process_group
        module.new_group = new_group
        module.monitored_barrier = monitored_barrier
