"""chorus for PyTorch, mirroring horovod.torch: an existing Horovod training script runs by
changing `import horovod.torch as hvd` to `import chorus.torch as hvd`.

The modules follow Horovod's own split: mpi_ops (the collectives, init, queries; the build
queries from builds), process_sets,
functions (broadcasting parameters, optimizer state and objects), compression, optimizer
(DistributedOptimizer) and sync_batch_norm."""
from ..core import (ChorusError, cross_rank, cross_size, is_homogeneous, is_initialized,
                    local_rank, local_size, rank, shutdown, size, start_timeline, stop_timeline)
from .compression import Compression
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max, Min,
                      Product, Sum, allgather, allgather_async, allreduce, allreduce_,
                      allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                      broadcast, broadcast_, broadcast_async, broadcast_async_, ccl_built,
                      cuda_built, ddl_built, gloo_built, gloo_enabled, grouped_allgather,
                      grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                      grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                      grouped_reducescatter_async, init, join, mpi_built, mpi_enabled,
                      mpi_threads_supported, nccl_built, poll, reducescatter,
                      reducescatter_async, rocm_built, sparse_allreduce_async, synchronize)
from .optimizer import DistributedOptimizer
from .process_sets import (ProcessSet, add_process_set, global_process_set,
                           remove_process_set)
from .sync_batch_norm import SyncBatchNorm
from . import distributed as _distributed
from . import elastic

# torch.distributed's backend "chorus" (chorus/torch/distributed.py): registered at import.
_distributed.register()

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
           "stop_timeline", "SyncBatchNorm", "elastic"]
