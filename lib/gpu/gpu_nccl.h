/*
 * gpu_nccl.h — what the files of the NCCL path share (private to lib/gpu): the context (one
 * NCCL communicator and one stream), how failures are reported, and how the host waits for the
 * device. gpu_nccl.c holds the context's life and the memory helpers, gpu_nccl_reduce.c the
 * reductions (allreduce and reducescatter, through the device's fusion buffer),
 * gpu_nccl_exchange.c the collectives that move bytes unchanged (broadcast, allgather,
 * alltoall).
 */
#ifndef CHORUS_GPU_NCCL_H
#define CHORUS_GPU_NCCL_H

#include "gpu.h"

#include <cuda_runtime.h>
#include <nccl.h>

struct gpu_context {
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream;
    int device;
    int nranks;
    void *fusion; /* the fusion buffer on `device`; NULL until a fused batch needs one */
    size_t fusion_bytes;
    cudaMemPool_t outputs; /* the handles' outputs (gpu_output_alloc); NULL until first use */
    struct gpu_interrupt interrupt;
    double timeout_seconds; /* 0: wait as long as it takes */
};

enum wait_kind {
    WAIT_SETUP,  /* for every rank to join the communicator */
    WAIT_STREAM, /* for the work enqueued on the stream */
    WAIT_READY,  /* for a producer's ready event (gpu_ready_wait) */
};

/* CHORUS_ERR_GPU, "<what> failed: <CUDA's or NCCL's text>" in `error`. */
chorus_status gpu_cuda_failure(cudaError_t code, const char *what, char *error, size_t error_size);
chorus_status gpu_nccl_failure(ncclResult_t code, const char *what, char *error,
                               size_t error_size);
/* A call on the non-blocking communicator that enqueued its work: done, or still being
 * enqueued (gpu_wait_for waits for that too). */
bool gpu_enqueued(ncclResult_t code);
/* CHORUS_OK, or CHORUS_ERR_GPU once the communicator was aborted after a failure. */
chorus_status gpu_usable(const struct gpu_context *context, char *error, size_t error_size);
/* Waits for the communicator's setup or the stream's work, bounded, interruptible (gpu_nccl.c). */
chorus_status gpu_wait_for(struct gpu_context *context, enum wait_kind kind, char *error,
                           size_t error_size);

#endif
