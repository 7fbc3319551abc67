"""Horovod's gradient compression choices for chorus.torch (horovod/torch/compression.py):
Compression.none, fp16 and bf16; chorus's int8 and int4 (blockwise quantization of float32
allreduces of sums and averages, chorus.h's CHORUS_COMPRESSION_INT8/INT4) and topk(ratio) (each
rank sends only that fraction of its values, the largest by magnitude, CHORUS_COMPRESSION_TOPK);
and Compression.powersgd(rank), low-rank compression of gradient matrices with error feedback
(powersgd.py), for DistributedOptimizer and the DDP hooks.

int8, int4 and topk drop part of each step's values. Error feedback (EF-SGD, 1-bit SGD) carries
what was dropped into the next step, so that nothing is lost over the steps: DistributedOptimizer
keeps it for them by default (error_feedback=False turns it off), one residual per parameter;
the allreduce functions take a residual of one's own, error_feedback=tensor (a zeroed float32
tensor of the tensor's shape to start, kept from step to step), which chorus adds to the
contribution and overwrites with what this step dropped (chorus.h, "Error feedback")."""
import torch

from .. import _library as c
from .powersgd import PowerSGD, refuse_one_collective

# The gradients int8, int4 and topk compress (float16 and bfloat16 through float32, chorus.h),
# each with a float32 residual where error feedback is kept.
LOSSY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


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


class _Int8Compressor(_Compressor):
    """Quantized by chorus on the wire; compress() leaves the tensor as it is."""
    wire = c.COMPRESSION_INT8


class _Int4Compressor(_Compressor):
    wire = c.COMPRESSION_INT4


class _TopKCompressor(_Compressor):
    """Sparsified by chorus on the wire to `ratio` of the values; compress() leaves the tensor
    as it is. An instance: the ratio is its own."""
    wire = c.COMPRESSION_TOPK

    def __init__(self, ratio):
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
                not 0 < ratio <= 1:
            raise ValueError(f"Compression.topk(ratio): ratio must be a number above 0 and at "
                             f"most 1, not {ratio!r}")
        self.ratio = float(ratio)

    def __repr__(self):
        return f"Compression.topk({self.ratio!r})"


class Compression:
    """Horovod's compression choices (none, fp16, bf16), chorus's int8, int4 and topk(ratio),
    and powersgd(rank, ...), which is called to make one (PowerSGD's options and docs)."""
    none = _NoneCompressor
    fp16 = _FP16Compressor
    bf16 = _BF16Compressor
    int8 = _Int8Compressor
    int4 = _Int4Compressor
    topk = _TopKCompressor
    powersgd = PowerSGD


def _wire(compression):
    """The wire compression of a compressor (class, or topk's instance) or of chorus's own
    constant. PowerSGD keeps state from step to step, so one allreduce cannot take it."""
    if compression is PowerSGD or isinstance(compression, PowerSGD):
        refuse_one_collective(compression)
    wire = getattr(compression, "wire", compression)
    if wire == c.COMPRESSION_TOPK and not isinstance(compression, _TopKCompressor):
        raise ValueError("compression=Compression.topk needs its ratio: "
                         "Compression.topk(0.01), for example")
    if wire not in (c.COMPRESSION_NONE, c.COMPRESSION_FP16, c.COMPRESSION_BF16,
                    c.COMPRESSION_INT8, c.COMPRESSION_INT4, c.COMPRESSION_TOPK):
        raise ValueError(f"compression={compression!r} is not one of Compression.none, fp16, "
                         "bf16, int8, int4, topk(ratio)")
    return wire


def _ratio(compression):
    """chorus_op_args.compression_ratio of a compressor: topk's ratio, else 0."""
    return getattr(compression, "ratio", 0.0) if _wire(compression) == c.COMPRESSION_TOPK \
        else 0.0


def _residual_address(tensor, error_feedback, name):
    """The address of an allreduce's error feedback residual (chorus.h): None, or a contiguous
    float32 tensor of `tensor`'s shape on its device, which chorus reads and rewrites until the
    allreduce completes. Whether the allreduce may take one at all (its compression, dtype, op),
    chorus decides, with a message naming the tensor."""
    if error_feedback is None:
        return None
    if not torch.is_tensor(error_feedback):
        raise TypeError(f"allreduce {name!r}: error_feedback must be a tensor, not "
                        f"{type(error_feedback).__name__}")
    if (error_feedback.dtype != torch.float32 or error_feedback.shape != tensor.shape or
            error_feedback.device != tensor.device or not error_feedback.is_contiguous()):
        raise ValueError(f"allreduce {name!r}: error_feedback must be a contiguous float32 "
                         f"tensor of the tensor's shape {tuple(tensor.shape)} on its device "
                         f"{tensor.device}, not {error_feedback.dtype} "
                         f"{tuple(error_feedback.shape)} on {error_feedback.device}"
                         f"{'' if error_feedback.is_contiguous() else ' (not contiguous)'}")
    return error_feedback.data_ptr()


def _residuals(tensors, error_feedback):
    """A grouped allreduce's error feedback: None, or one residual (or None) per tensor."""
    if error_feedback is None:
        return [None] * len(tensors)
    error_feedback = list(error_feedback)
    if len(error_feedback) != len(tensors):
        raise ValueError(f"error_feedback has {len(error_feedback)} entries for "
                         f"{len(tensors)} tensors")
    return error_feedback
