"""Horovod's queries of how the library was built (horovod/torch/mpi_ops.py's mpi_built,
nccl_built, ...), answered for chorus: MPI always, NCCL and CUDA where the GPU path was built,
never Gloo, ROCm, DDL or oneCCL. mpi_ops re-exports them, where Horovod's scripts find them."""
from .. import _library as c


def mpi_built():
    return True


def mpi_enabled():
    return True


def mpi_threads_supported():
    return True


def nccl_built():
    """As Horovod: NCCL's version code (22803 for 2.28.3) where chorus was built with NCCL (CUDA
    tensors), else 0; scripts compare it (nccl_built() >= 2700)."""
    return int(c.lib.chorus_nccl_version())


def cuda_built():
    return bool(c.lib.chorus_gpu_built())


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
