/*
 * emulation.h — what the emulated CUDA runtime (cuda_runtime.c) and the emulated NCCL (nccl.c)
 * share. Together they implement, with the signatures and return codes of cuda_runtime.h and
 * nccl.h, the functions chorus calls, so that chorus's GPU path runs on machines without a GPU:
 *
 * - Device memory cannot be touched by the host. cudaMalloc maps a memfd twice: the address it
 *   returns is a PROT_NONE view, so a host read or write of a device pointer faults (SIGSEGV),
 *   as it would on a GPU; the emulation copies and reduces through the other, read-write view.
 * - Streams run later. Work enqueued on a stream runs on a thread of its own, in stream order,
 *   after GPU_EMU_STREAM_DELAY_US (default 0) per operation; cudaStreamQuery answers
 *   cudaErrorNotReady until it has run, so code that reads a result without waiting sees stale
 *   data. The legacy default stream is such a stream too, and cudaMemcpy from host memory to
 *   the device returns before the data lands, as from pageable memory on a GPU. Blocking
 *   streams keep step with the legacy stream; non-blocking ones (chorus's) wait for other
 *   streams only through events (cudaEventRecord, cudaStreamWaitEvent, cudaEventQuery), so a
 *   tensor read before its producer's work has run is stale here as on a GPU.
 * - NCCL communicators span the processes of one host through shared memory named by the unique
 *   id. ncclCommInitRank blocks until every rank has arrived; collectives run on the stream and
 *   wait there for every rank's data.
 *
 * Faults on demand, each counted per process from its first call and limited to the process of
 * MPI rank GPU_EMU_FAULT_RANK when that is set:
 *   GPU_EMU_DEVICES=N             devices visible (default 8; 0: cudaErrorNoDevice)
 *   GPU_EMU_MALLOC_FAIL_AT=K      the K-th cudaMalloc fails (cudaErrorMemoryAllocation)
 *   GPU_EMU_NCCL_FAIL_AT=K        the K-th NCCL collective call returns ncclSystemError
 *   GPU_EMU_NCCL_ASYNC_ERROR_AT=K the K-th collective stalls on its stream and the
 *                                 communicator reports ncclRemoteError asynchronously
 *   GPU_EMU_NCCL_HANG_AT=K        the K-th collective never completes (until aborted)
 *   GPU_EMU_INIT_HANG=1           ncclCommInitRank never arrives (the other ranks wait)
 *   GPU_EMU_STREAM_DELAY_US=U     every stream operation starts U microseconds late
 */
#ifndef CHORUS_EMULATION_H
#define CHORUS_EMULATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The read-write view of `bytes` at `pointer`: the emulation's own mapping for device memory,
 * `pointer` itself for host memory. NULL when a device range runs past its allocation. */
unsigned char *emulation_host_view(const void *pointer, size_t bytes);
/* Whether `pointer` lies in emulated device memory. */
bool emulation_is_device(const void *pointer);

/* One operation on a stream: run(context) on the stream's thread, then done(context) (to free
 * it), in the order enqueued. */
struct emulation_operation {
    void (*run)(void *context);
    void *context;
    struct emulation_operation *next;
};
struct CUstream_st;
/* Enqueues on `stream` (NULL: runs at once on the calling thread). */
void emulation_enqueue(struct CUstream_st *stream, void (*run)(void *context), void *context);

/* A fault's setting from the environment: 0 when unset or when this process is not the rank
 * the faults are meant for. */
long emulation_fault_setting(const char *name);

#endif
