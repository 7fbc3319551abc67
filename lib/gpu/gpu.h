/*
 * gpu.h — chorus's GPU path, behind a C interface with no CUDA or NCCL types. gpu_nccl.c
 * implements it over CUDA and NCCL; gpu_stub.c, built without them, answers
 * CHORUS_ERR_NOT_SUPPORTED and says that chorus was built without GPU support.
 *
 * The collectives run on one NCCL communicator per chorus instance, created the first time a
 * GPU tensor is executed (every rank executes the same responses in the same order, so every
 * rank creates it at the same point). Only the background thread calls these, except
 * gpu_available, gpu_free and the copy helpers.
 */
#ifndef CHORUS_GPU_H
#define CHORUS_GPU_H

#include "../core/common.h"

#define GPU_UNIQUE_ID_BYTES 128

struct gpu_context;

/* true when chorus was built with CUDA and NCCL. */
bool gpu_compiled(void);
/* NCCL's version code (ncclGetVersion), or 0 without NCCL. */
int gpu_nccl_version(void);
/* Number of CUDA devices visible (0 without GPU support or without devices). */
int gpu_device_count(void);
/* "CUDA runtime 13.0, driver 13.0, NCCL 2.28.3", or why not. */
void gpu_versions(char *text, size_t text_size);

/* Asked while the host waits for the GPU. A status other than CHORUS_OK (its message in
 * `error`), such as another rank's notice that it failed, stops the wait: the NCCL communicator
 * is aborted, which ends kernels waiting for a peer that will never send, and the collective
 * returns that status. */
struct gpu_interrupt {
    chorus_status (*check)(void *context, char *error, size_t error_size);
    void *context;
};

/* Rank 0 makes the NCCL unique id that every rank then receives. */
chorus_status gpu_unique_id(uint8_t id[GPU_UNIQUE_ID_BYTES], char *error, size_t error_size);
/* Makes the communicator of `nranks` ranks from rank 0's `id`, polling (with `interrupt`)
 * until every rank has joined; after `timeout_seconds` (0: never) it gives up with
 * CHORUS_ERR_TIMEOUT. The same bound holds for every later wait for the GPU. */
chorus_status gpu_context_create(struct gpu_context **context, int rank, int nranks, int device,
                                 const uint8_t id[GPU_UNIQUE_ID_BYTES],
                                 struct gpu_interrupt interrupt, double timeout_seconds,
                                 char *error, size_t error_size);
/* Frees the context. `abandon` (after a fatal error) aborts the NCCL communicator instead of
 * destroying it, which would wait for work that a failed peer never joins. */
void gpu_context_destroy(struct gpu_context *context, bool abandon);

/* One tensor of a GPU allreduce: `count` elements from `input` into `output` (may be equal). */
struct gpu_piece {
    const void *input;
    void *output;
    size_t count;
};

/* Allreduces the tensors of `pieces`, all of one dtype, with one NCCL call. One tensor is
 * reduced where it lies; several are packed into the context's fusion buffer (allocated at first
 * use, grown when a batch needs more), reduced there and unpacked, all enqueued on the context's
 * stream so that the host waits once. Sums and averages multiply every input by `scale` first
 * (prescale x postscale / contributors), exactly as NCCL's pre-multiplied sum does; min, max and
 * product require scale == 1. */
chorus_status gpu_allreduce(struct gpu_context *context, const struct gpu_piece *pieces,
                            size_t piece_count, chorus_dtype dtype, chorus_op op, double scale,
                            char *error, size_t error_size);
/* Broadcasts `count` device buffers from `root` (buffer i holds bytes[i]) in one NCCL group,
 * which NCCL launches as one operation. */
chorus_status gpu_broadcast(struct gpu_context *context, void *const *buffers, const size_t *bytes,
                            size_t count, int root, char *error, size_t error_size);

/* One tensor of a reducescatter: `input` holds `rows` rows of `row_elements` elements, split
 * over the ranks as Horovod splits them (the first rows % ranks ranks get one row more); this
 * rank's rows, reduced over the ranks, go to `output`. */
struct gpu_scatter {
    const void *input;
    void *output;
    size_t rows;
    size_t row_elements;
};
/* Reducescatters `count` tensors of one dtype with one op and scale, as gpu_allreduce reduces
 * them, by one ncclReduceScatter: a lone tensor whose rows divide by the ranks straight from its
 * input; otherwise packed rank by rank into the fusion buffer first, each rank's block padded to
 * the largest. */
chorus_status gpu_reducescatter(struct gpu_context *context, const struct gpu_scatter *scatters,
                                size_t count, chorus_dtype dtype, chorus_op op, double scale,
                                char *error, size_t error_size);

/* One tensor of an allgather: rank r's `block_bytes[r]` bytes land at recv + offsets[r] on
 * every rank; `send` is this rank's block. */
struct gpu_gather {
    const void *send;
    void *recv;
    const size_t *block_bytes;
    const size_t *offsets;
};
/* Allgathers `count` tensors in one NCCL group. */
chorus_status gpu_allgather(struct gpu_context *context, const struct gpu_gather *gathers,
                            size_t count, char *error, size_t error_size);

/* An alltoall of device buffers: send_bytes[k] bytes at send + send_offsets[k] to rank k, and
 * recv_bytes[k] bytes from rank k to recv + recv_offsets[k], with grouped ncclSend/ncclRecv. */
struct gpu_exchange {
    const void *send;
    const size_t *send_bytes;
    const size_t *send_offsets;
    void *recv;
    const size_t *recv_bytes;
    const size_t *recv_offsets;
};
chorus_status gpu_alltoall(struct gpu_context *context, const struct gpu_exchange *exchange,
                           char *error, size_t error_size);

/* Ordering with the work that produces a tensor. A CUDA program enqueues that work on its own
 * stream and submits without waiting for it; chorus's stream waits for no other. So the
 * submitting thread records a ready event on the producer's `stream` (a cudaStream_t; NULL: the
 * legacy default stream) on `device`, leaving the thread's current device as it was, and the
 * background thread waits for it (gpu_ready_wait) before it reads the tensor. *ready is NULL
 * where there is nothing to wait for. Any thread. */
chorus_status gpu_ready_record(int device, void *stream, void **ready, char *error,
                               size_t error_size);
/* Waits, as for the stream's work (bounded, interruptible), until `ready` (NULL: at once) has
 * passed on the device. */
chorus_status gpu_ready_wait(struct gpu_context *context, void *ready, char *error,
                             size_t error_size);
/* Lets a ready event go (NULL: nothing); its wait, if any, need not have happened. Any thread. */
void gpu_ready_release(void *ready);

/* Device memory for an output that a handle will own (an allgather's, reducescatter's or
 * alltoall's): taken in order on the context's stream from chorus's memory pool on the device
 * (cudaMallocFromPoolAsync: no device-wide synchronization, and memory freed before is reused),
 * and given back by gpu_output_free in order on `consumer`, the stream its caller reads it on
 * (the request's cuda_stream; NULL: the legacy default stream), so that the pool reuses it
 * only after the work queued there before the handle was freed. NULL on failure. */
void *gpu_output_alloc(struct gpu_context *context, size_t bytes, void *consumer);
void gpu_output_free(void *pointer);

/* Device memory on `device`; NULL on failure. */
void *gpu_malloc(size_t bytes, int device);
void gpu_free(void *pointer);
/* Copies between host and device memory (direction from the pointers); the data is in place
 * when it returns. */
chorus_status gpu_copy(void *destination, const void *source, size_t bytes);
/* Which device a pointer belongs to; -1 for host memory or when unknown. */
int gpu_pointer_device(const void *pointer);

#endif
