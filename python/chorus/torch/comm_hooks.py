"""DDP communication hooks for the "chorus" backend, with chorus's compressions:

    import chorus.torch as hvd
    from chorus.torch import comm_hooks
    ddp.register_comm_hook(comm_hooks.CompressionState(compression=hvd.Compression.int8),
                           comm_hooks.allreduce_hook)
    ddp.register_comm_hook(comm_hooks.PowerSGDState(compression=hvd.Compression.powersgd(4)),
                           comm_hooks.powersgd_hook)

torch's dist.all_reduce has no field for a compression, so the hooks submit chorus ordered
allreduces (CHORUS_OP_ORDERED) on the group's chorus process set themselves, from the thread
that calls the hook: they take their turn among the group's own collectives, in the order DDP
calls the hooks, the same on every rank. A thread of this module waits for them and completes
the futures the hooks return; the hooks never issue a collective from a future's callback
(where the order among ranks would depend on timing)."""
import queue
import threading

import torch
import torch.distributed as dist

from .. import _library as c
from .. import core
from .compression import LOSSY_DTYPES, Compression, _wire
from .distributed import chorus_group
from .mpi_ops import _descriptor
from .powersgd import LowRankState, PowerSGD


class _Completions:
    """One daemon thread that waits for batches of chorus handles, in the order they were
    queued, and then completes each batch's future with what its `finish` returns."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._lock = threading.Lock()

    def add(self, handles, future, finish):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="chorus-comm-hooks")
                self._thread.start()
        self._queue.put((handles, future, finish))

    def _run(self):
        while True:
            handles, future, finish = self._queue.get()
            try:
                for handle in handles:
                    handle.wait()
                result = finish()
            except Exception as error:  # noqa: BLE001 (handed to whoever waits on the future)
                future.set_exception(error)
            else:
                future.set_result(result)


_completions = _Completions()


def _check_group(state, process_group):
    """A process_group= that is not a group (a compressor given first, say) fails at once."""
    if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
        raise ValueError(f"{state}(process_group={process_group!r}): a torch.distributed "
                         "group or None; the compressor goes as compression=")


def _ordered_allreduce(tensor, group, wire, name, ratio=0.0, residual=None):
    """An ordered average of `tensor`, in place, over `group`, with topk's `ratio` and an error
    feedback `residual` (None: none); the handle."""
    process_set, timeout = chorus_group(group)
    args = core.op_args(c.ALLREDUCE, name, _descriptor(tensor), None, c.AVERAGE,
                        compression=wire, process_set=process_set,
                        error_feedback=residual.data_ptr() if residual is not None else None,
                        compression_ratio=ratio)
    args.flags = c.OP_ORDERED
    args.timeout_seconds = timeout
    return core.submit(args, tensor)


class CompressionState:
    """allreduce_hook's state: the group (None: the default group), the compression of each
    bucket's allreduce (Compression.none, fp16, bf16, int8, int4 or topk(ratio)), and for the
    lossy ones (int8, int4, topk) error feedback, on unless error_feedback=False: this rank's
    residual per bucket (float32, on the bucket's device), which chorus adds to the bucket's next allreduce
    and rewrites with what it dropped (a bucket that DDP rebuilds with another size starts
    from zero)."""

    def __init__(self, process_group=None, compression=Compression.int8, error_feedback=None):
        _check_group("CompressionState", process_group)
        self.process_group = process_group
        self.compression = compression
        self.wire = _wire(compression)
        self.ratio = getattr(compression, "ratio", 0.0)
        lossy = self.wire in (c.COMPRESSION_INT8, c.COMPRESSION_INT4, c.COMPRESSION_TOPK)
        if error_feedback and not lossy:
            raise ValueError(f"CompressionState(error_feedback=True) with {compression!r}: "
                             "error feedback is kept for int8, int4 and topk")
        self.error_feedback = lossy and error_feedback is not False
        self.residuals = {}  # bucket index: this rank's residual

    def residual_for(self, index, buffer):
        """The bucket's residual (None where none is kept)."""
        if not self.error_feedback or buffer.dtype not in LOSSY_DTYPES:
            return None
        residual = self.residuals.get(index)
        if residual is None or residual.numel() != buffer.numel():
            residual = self.residuals[index] = torch.zeros(buffer.numel(), dtype=torch.float32,
                                                           device=buffer.device)
        return residual


def allreduce_hook(state, bucket):
    """Averages the bucket over the group with chorus's compression state.compression (int8 and
    int4 quantize blockwise, topk sends each rank's largest values; chorus.h's
    CHORUS_COMPRESSION_*), with error feedback for those. With Compression.none it is DDP's own
    allreduce."""
    buffer = bucket.buffer()
    future = torch.futures.Future()
    handle = _ordered_allreduce(buffer, state.process_group, state.wire,
                                f"ddp.bucket.{bucket.index()}", state.ratio,
                                state.residual_for(bucket.index(), buffer))
    _completions.add([handle], future, lambda: buffer)
    return future


class PowerSGDState:
    """powersgd_hook's state, as torch's PowerSGDState: the group (None: the default group),
    the options (compression=Compression.powersgd(...); None: its defaults), and what
    PowerSGD keeps from step to step: each matrix's Q and this rank's residual, by parameter (not
    by bucket, so that DDP's rebuilding of its buckets after the first step loses nothing), and
    the step count. Parameters are named "ddp.N" in the order the hook first meets them (the
    same on every rank), which seeds their starting Q's."""

    def __init__(self, process_group=None, compression=None):
        _check_group("PowerSGDState", process_group)
        if compression is PowerSGD:
            raise ValueError("PowerSGDState(Compression.powersgd) takes its options: "
                             "Compression.powersgd(rank)")
        compression = PowerSGD() if compression is None else compression
        if not isinstance(compression, PowerSGD):
            raise ValueError(f"PowerSGDState(compression={compression!r}): a "
                             "Compression.powersgd(...)")
        self.process_group = process_group
        self.low_rank = LowRankState(compression)
        self.keys = {}          # parameter: its key in low_rank
        self._in_flight = []    # buckets whose P's allreduce is in flight

    def state_dict(self):
        """Copies of the step count and of each matrix's Q and this rank's residual, by key
        ("ddp.N"), for a checkpoint (hvd.elastic.ObjectState keeps it as an object)."""
        return self.low_rank.state_dict(lambda key: key)

    def load_state_dict(self, state):
        """What state_dict() gave (None: start afresh); a step in progress is given up."""
        self._in_flight = []
        self.low_rank.load_state_dict(state, lambda key: key)

    def key_of(self, parameter):
        key = self.keys.get(parameter)
        if key is None:
            key = self.keys[parameter] = f"ddp.{len(self.keys)}"
        return key


class _PowerSGDBucket:
    """One bucket's step: the allreduce of its vectors and small matrices (whole), and of its
    matrices' P's then Q's, packed in one flat tensor each."""

    def __init__(self, state, bucket):
        self.state = state
        self.buffer = bucket.buffer()
        self.name = f"ddp.powersgd.{bucket.index()}"
        self.future = torch.futures.Future()
        low_rank = state.low_rank
        self.whole, self.matrices = [], []
        for parameter, gradient in zip(bucket.parameters(), bucket.gradients()):
            if low_rank.factor_rank(gradient):
                self.matrices.append(low_rank.begin(state.key_of(parameter), gradient))
            else:
                self.whole.append(gradient)
        # Without matrices the buffer itself is averaged in place; else the others, packed.
        self.whole_flat = (torch.cat([gradient.reshape(-1) for gradient in self.whole])
                           if self.whole and self.matrices else self.buffer)
        self.handles = []
        if self.whole:
            self.handles.append(_ordered_allreduce(self.whole_flat, state.process_group,
                                                   c.COMPRESSION_NONE, f"{self.name}.whole"))
        if self.matrices:
            self.p_flat = torch.cat([matrix.p.reshape(-1) for matrix in self.matrices])
            self.p_handle = _ordered_allreduce(self.p_flat, state.process_group,
                                               c.COMPRESSION_NONE, f"{self.name}.p")

    def send_q(self):
        """Waits for the averaged P's; sends this rank's Q's; queues the completion."""
        if self.matrices:
            self.p_handle.wait()
            offset = 0
            for matrix in self.matrices:
                count = matrix.p.numel()
                matrix.p = self.p_flat[offset:offset + count].view_as(matrix.p)
                offset += count
            self.q_flat = torch.cat([LowRankState.middle(matrix).reshape(-1)
                                     for matrix in self.matrices])
            self.handles.append(_ordered_allreduce(self.q_flat, self.state.process_group,
                                                   c.COMPRESSION_NONE, f"{self.name}.q"))
        _completions.add(self.handles, self.future, self.finish)

    def finish(self):
        """Once every allreduce completed (the completion thread): the gradients in the
        bucket's buffer."""
        offset = 0
        for matrix in self.matrices:
            count = matrix.q.numel()
            matrix.q = self.q_flat[offset:offset + count].view_as(matrix.q)
            offset += count
            self.state.low_rank.end(matrix)
        if self.whole_flat is not self.buffer:
            offset = 0
            for gradient in self.whole:
                gradient.copy_(self.whole_flat[offset:offset + gradient.numel()]
                               .view_as(gradient))
                offset += gradient.numel()
        return self.buffer


def powersgd_hook(state, bucket):
    """PowerSGD (chorus.torch.powersgd) on DDP's buckets: each matrix gradient averaged as
    rank-r factors with error feedback, the rest averaged whole. A bucket's Q's go out when DDP
    hands over the next bucket (its P's have had that long to travel), the last bucket's at
    once; the step count advances with the last bucket."""
    step = _PowerSGDBucket(state, bucket)
    earlier, state._in_flight = state._in_flight, [step]
    for waiting in earlier:
        waiting.send_q()
    if bucket.is_last():
        step.send_q()
        state._in_flight = []
        state.low_rank.iteration += 1
    return step.future
