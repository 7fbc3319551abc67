/*
 * gpu_nccl.c — the GPU interface over CUDA and NCCL. One stream per context; every operation
 * is enqueued on it and the background thread waits for the stream, so a handle completes only
 * when the data is in place. Sums and averages use NCCL's pre-multiplied sum
 * (ncclRedOpCreatePreMulSum), which applies prescale, postscale and the division of an average
 * in one pass without a kernel of our own. A fused batch is packed into a fusion buffer on the
 * device with asynchronous copies on the same stream, so packing, the collective and unpacking
 * run back to back on the device with no host round trip between them.
 */
#include "gpu.h"

#include "../core/dtype.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(sizeof(ncclUniqueId) <= GPU_UNIQUE_ID_BYTES, "NCCL unique id must fit");

struct gpu_context {
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream;
    int device;
    int nranks;
    void *fusion; /* the fusion buffer on `device`; NULL until a fused batch needs one */
    size_t fusion_bytes;
    struct gpu_interrupt interrupt;
    double timeout_seconds; /* 0: wait as long as it takes */
};

static chorus_status cuda_failure(cudaError_t code, const char *what, char *error,
                                  size_t error_size)
{
    snprintf(error, error_size, "%s failed: %s", what, cudaGetErrorString(code));
    return CHORUS_ERR_GPU;
}

/* A call on the non-blocking communicator that enqueued its work: done, or still being
 * enqueued (wait_for waits for that too). */
static bool enqueued(ncclResult_t code)
{
    return code == ncclSuccess || code == ncclInProgress;
}

static chorus_status nccl_failure(ncclResult_t code, const char *what, char *error,
                                  size_t error_size)
{
    snprintf(error, error_size, "%s failed: %s", what, ncclGetErrorString(code));
    return CHORUS_ERR_GPU;
}

bool gpu_compiled(void)
{
    return true;
}

void gpu_versions(char *text, size_t text_size)
{
    int runtime = 0, driver = 0, nccl = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    ncclGetVersion(&nccl);
    char driver_text[32] = "none";
    if (driver > 0)
        snprintf(driver_text, sizeof driver_text, "%d.%d", driver / 1000, driver % 1000 / 10);
    /* NCCL 2.9 and later: major * 10000 + minor * 100 + patch. */
    snprintf(text, text_size, "CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d", runtime / 1000,
             runtime % 1000 / 10, driver_text, nccl / 10000, nccl % 10000 / 100, nccl % 100);
}

int gpu_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        return 0;
    return count;
}

chorus_status gpu_unique_id(uint8_t id[GPU_UNIQUE_ID_BYTES], char *error, size_t error_size)
{
    ncclUniqueId unique;
    ncclResult_t code = ncclGetUniqueId(&unique);
    if (code != ncclSuccess)
        return nccl_failure(code, "ncclGetUniqueId", error, error_size);
    memset(id, 0, GPU_UNIQUE_ID_BYTES);
    memcpy(id, &unique, sizeof unique);
    return CHORUS_OK;
}

/* How long the stream may take, once the communicator is aborted, to finish what was enqueued
 * after the collective (the copies out of the fusion buffer). */
#define DRAIN_SECONDS 1.0

/* Ends the communicator at once: kernels still waiting for a peer stop, and later calls fail
 * (see usable). Then it waits, for a bounded time, for the rest of the stream's work, so that no
 * copy lands in a tensor after its handle has completed with the error. */
static void abort_communicator(struct gpu_context *context)
{
    if (context->comm != NULL)
        ncclCommAbort(context->comm);
    context->comm = NULL;
    double deadline = monotonic_seconds() + DRAIN_SECONDS;
    while (cudaStreamQuery(context->stream) == cudaErrorNotReady &&
           monotonic_seconds() < deadline)
        sched_yield();
}

/* An aborted communicator (after a peer failed) takes no more work. */
static chorus_status usable(const struct gpu_context *context, char *error, size_t error_size)
{
    if (context->comm != NULL)
        return CHORUS_OK;
    snprintf(error, error_size, "the NCCL communicator was aborted after an earlier failure");
    return CHORUS_ERR_GPU;
}

/* How the host waits for the GPU: it polls for latency, yields the core for up to a
 * millisecond, then sleeps between polls, so that a long collective does not cost a core. */
#define POLL_SPINS 64
#define POLL_YIELD_SECONDS 1e-3
#define POLL_SLEEP_NANOSECONDS 20000

enum wait_kind {
    WAIT_SETUP,  /* for every rank to join the communicator */
    WAIT_STREAM, /* for the work enqueued on the stream */
};

/* Waits for the communicator's setup or the stream's work. It polls instead of blocking in
 * cudaStreamSynchronize: NCCL's kernels wait forever for a peer that failed before it joined
 * the collective. Between polls it asks NCCL for an asynchronous error (a peer's connection
 * lost) and chorus, through the interrupt, whether a rank has sent notice that it failed; either
 * aborts the communicator, as does the timeout. The communicator is non-blocking, so work it
 * enqueues is on the stream only once NCCL no longer reports ncclInProgress. */
static chorus_status wait_for(struct gpu_context *context, enum wait_kind kind, char *error,
                              size_t error_size)
{
    const char *what = kind == WAIT_SETUP ? "setting up the NCCL communicator"
                                          : "a collective on the NCCL communicator";
    if (context->comm == NULL) /* aborted while the work was enqueued */
        return usable(context, error, error_size);
    double started = monotonic_seconds(), yield_until = 0;
    for (unsigned polls = 0;; polls++) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t code = ncclCommGetAsyncError(context->comm, &state);
        if (code == ncclSuccess && state != ncclInProgress)
            code = state;
        if (code != ncclSuccess) {
            abort_communicator(context);
            return nccl_failure(code, what, error, error_size);
        }
        if (state == ncclSuccess) {
            cudaError_t cuda = kind == WAIT_SETUP ? cudaSuccess : cudaStreamQuery(context->stream);
            if (cuda == cudaSuccess)
                return CHORUS_OK;
            if (cuda != cudaErrorNotReady)
                return cuda_failure(cuda, "waiting for the GPU stream", error, error_size);
        }
        if (polls < POLL_SPINS)
            continue;
        chorus_status interrupted =
            context->interrupt.check == NULL
                ? CHORUS_OK
                : context->interrupt.check(context->interrupt.context, error, error_size);
        if (interrupted != CHORUS_OK) {
            abort_communicator(context);
            return interrupted;
        }
        double now = monotonic_seconds();
        if (context->timeout_seconds > 0 && now - started > context->timeout_seconds) {
            abort_communicator(context);
            snprintf(error, error_size,
                     "%s did not complete within %g s (CHORUS_TIMEOUT_SECONDS): a rank is "
                     "stopped, dead or far behind",
                     what, context->timeout_seconds);
            return CHORUS_ERR_TIMEOUT;
        }
        if (yield_until == 0)
            yield_until = now + POLL_YIELD_SECONDS;
        if (now < yield_until)
            sched_yield();
        else
            nanosleep(&(struct timespec){.tv_nsec = POLL_SLEEP_NANOSECONDS}, NULL);
    }
}

chorus_status gpu_context_create(struct gpu_context **context, int rank, int nranks, int device,
                                 const uint8_t id[GPU_UNIQUE_ID_BYTES],
                                 struct gpu_interrupt interrupt, double timeout_seconds,
                                 char *error, size_t error_size)
{
    *context = NULL;
    struct gpu_context *created = calloc(1, sizeof *created);
    if (created == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    created->device = device;
    created->nranks = nranks;
    created->interrupt = interrupt;
    cudaError_t cuda = cudaSetDevice(device);
    if (cuda != cudaSuccess) {
        free(created);
        return cuda_failure(cuda, "cudaSetDevice", error, error_size);
    }
    cuda = cudaStreamCreateWithFlags(&created->stream, cudaStreamNonBlocking);
    if (cuda != cudaSuccess) {
        free(created);
        return cuda_failure(cuda, "cudaStreamCreate", error, error_size);
    }
    created->timeout_seconds = timeout_seconds;
    ncclUniqueId unique;
    memcpy(&unique, id, sizeof unique);
    /* Non-blocking: a rank that never joins (it died, or is stuck before this point) must not
     * keep the others inside ncclCommInitRank forever. They poll, with the interrupt and the
     * timeout, as they do for collectives. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t code = ncclCommInitRankConfig(&created->comm, nranks, unique, rank, &config);
    chorus_status status = CHORUS_OK;
    if (code != ncclSuccess && code != ncclInProgress)
        status = nccl_failure(code, "ncclCommInitRankConfig", error, error_size);
    else
        status = wait_for(created, WAIT_SETUP, error, error_size);
    if (status != CHORUS_OK) {
        abort_communicator(created);
        cudaStreamDestroy(created->stream);
        free(created);
        return status;
    }
    *context = created;
    return CHORUS_OK;
}

void gpu_context_destroy(struct gpu_context *context, bool abandon)
{
    if (context == NULL)
        return;
    if (abandon)
        abort_communicator(context);
    else if (context->comm != NULL)
        ncclCommDestroy(context->comm);
    cudaStreamDestroy(context->stream);
    cudaFree(context->fusion);
    free(context);
}

static bool nccl_dtype(chorus_dtype dtype, ncclDataType_t *type)
{
    switch (dtype) {
    case CHORUS_UINT8:
        *type = ncclUint8;
        return true;
    case CHORUS_INT8:
        *type = ncclInt8;
        return true;
    case CHORUS_INT32:
        *type = ncclInt32;
        return true;
    case CHORUS_INT64:
        *type = ncclInt64;
        return true;
    case CHORUS_FLOAT16:
        *type = ncclFloat16;
        return true;
    case CHORUS_BFLOAT16:
        *type = ncclBfloat16;
        return true;
    case CHORUS_FLOAT32:
        *type = ncclFloat32;
        return true;
    case CHORUS_FLOAT64:
        *type = ncclFloat64;
        return true;
    case CHORUS_BOOL: /* bytes of 0 or 1: and is min, or is max (reduction_for) */
        *type = ncclUint8;
        return true;
    case CHORUS_INT16:
    case CHORUS_UINT16: /* NCCL has no 16-bit integers */
        return false;
    }
    return false;
}

/* The NCCL reduction for `op` with `scale`; *custom says that it was created here and must be
 * destroyed once the collective has been enqueued. */
static chorus_status reduction_for(struct gpu_context *context, ncclDataType_t type,
                                   chorus_dtype dtype, chorus_op op, double scale,
                                   ncclRedOp_t *reduction, bool *custom, char *error,
                                   size_t error_size)
{
    bool summing = op == CHORUS_SUM || op == CHORUS_AVERAGE;
    bool floating = dtype_is_floating(dtype);
    *custom = false;
    *reduction = op == CHORUS_MIN ? ncclMin : op == CHORUS_MAX ? ncclMax
                                       : op == CHORUS_PRODUCT ? ncclProd
                                                              : ncclSum;
    if (dtype == CHORUS_BOOL) /* logical and, logical or */
        *reduction = op == CHORUS_MIN || op == CHORUS_PRODUCT ? ncclMin : ncclMax;
    if (!summing && scale != 1.0) {
        snprintf(error, error_size, "scale factors on GPU tensors need op sum or average, not %s",
                 chorus_op_name(op));
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    /* Whether the job has one rank (an average that divides by 1) must not decide whether an
     * integer average is supported. */
    if (summing && !floating && (op == CHORUS_AVERAGE || scale != 1.0)) {
        /* NCCL's own average of integers truncates, where chorus rounds to the nearest. */
        snprintf(error, error_size,
                 "averages and scale factors of %s tensors on GPU are not supported; sum them "
                 "and divide",
                 chorus_dtype_name(dtype));
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    if (!summing || scale == 1.0)
        return CHORUS_OK;
    /* The scalar lives in host memory and is read when the operator is created; it is given
     * in the dtype's own type (the bits of a half or bfloat16 for the 16-bit floats). */
    union {
        uint16_t f16;
        float f32;
        double f64;
    } scalar;
    switch (dtype) {
    case CHORUS_FLOAT16:
        scalar.f16 = float_to_half((float)scale);
        break;
    case CHORUS_BFLOAT16:
        scalar.f16 = float_to_bfloat16((float)scale);
        break;
    case CHORUS_FLOAT32:
        scalar.f32 = (float)scale;
        break;
    case CHORUS_FLOAT64:
        scalar.f64 = scale;
        break;
    default:
        return CHORUS_ERR_NOT_SUPPORTED; /* integers were refused above */
    }
    ncclResult_t code = ncclRedOpCreatePreMulSum(reduction, &scalar, type,
                                                 ncclScalarHostImmediate, context->comm);
    if (code != ncclSuccess)
        return nccl_failure(code, "ncclRedOpCreatePreMulSum", error, error_size);
    *custom = true;
    return CHORUS_OK;
}

/* The NCCL type and reduction of one reducing collective. */
struct reduction {
    ncclDataType_t type;
    ncclRedOp_t op;
    bool custom; /* created for this collective: destroyed by reduction_end */
};

/* Checks that the dtype and op can run on NCCL and the communicator takes work, and makes the
 * reduction. */
static chorus_status reduction_begin(struct gpu_context *context, chorus_dtype dtype,
                                     chorus_op op, double scale, struct reduction *reduction,
                                     char *error, size_t error_size)
{
    reduction->custom = false;
    if (!nccl_dtype(dtype, &reduction->type)) {
        snprintf(error, error_size, "dtype %s has no NCCL equivalent", chorus_dtype_name(dtype));
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    if (usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    return reduction_for(context, reduction->type, dtype, op, scale, &reduction->op,
                         &reduction->custom, error, error_size);
}

/* Waits for whatever was enqueued, also after a failure (whose message stays), before the
 * buffers can be reused; then lets the reduction go. */
static chorus_status reduction_end(struct gpu_context *context, struct reduction *reduction,
                                   chorus_status status, char *error, size_t error_size)
{
    char ignored[256];
    if (status == CHORUS_OK)
        status = wait_for(context, WAIT_STREAM, error, error_size);
    else
        wait_for(context, WAIT_STREAM, ignored, sizeof ignored);
    if (reduction->custom && context->comm != NULL)
        ncclRedOpDestroy(reduction->op, context->comm);
    return status;
}

/* Makes the fusion buffer hold at least `bytes`. The stream is idle here (every collective
 * waits for it before returning), so the old buffer can go at once. */
static chorus_status ensure_fusion(struct gpu_context *context, size_t bytes, char *error,
                                   size_t error_size)
{
    if (context->fusion_bytes >= bytes)
        return CHORUS_OK;
    cudaFree(context->fusion);
    context->fusion = NULL;
    context->fusion_bytes = 0;
    cudaError_t cuda = cudaMalloc(&context->fusion, bytes);
    if (cuda != cudaSuccess) {
        context->fusion = NULL;
        return cuda_failure(cuda, "cudaMalloc of the fusion buffer", error, error_size);
    }
    context->fusion_bytes = bytes;
    return CHORUS_OK;
}

/* Enqueues the copies of every piece into the fusion buffer from `fused` on (`into`) or back
 * out of it. */
static chorus_status copy_pieces(struct gpu_context *context, char *fused,
                                 const struct gpu_piece *pieces, size_t piece_count,
                                 size_t element_size, bool into, char *error, size_t error_size)
{
    size_t offset = 0;
    for (size_t p = 0; p < piece_count; p++) {
        size_t bytes = pieces[p].count * element_size;
        if (bytes == 0)
            continue;
        cudaError_t cuda =
            into ? cudaMemcpyAsync(fused + offset, pieces[p].input, bytes, cudaMemcpyDefault,
                                   context->stream)
                 : cudaMemcpyAsync(pieces[p].output, fused + offset, bytes, cudaMemcpyDefault,
                                   context->stream);
        if (cuda != cudaSuccess)
            return cuda_failure(cuda, into ? "packing the fusion buffer"
                                           : "unpacking the fusion buffer",
                                error, error_size);
        offset += bytes;
    }
    return CHORUS_OK;
}

chorus_status gpu_allreduce(struct gpu_context *context, const struct gpu_piece *pieces,
                            size_t piece_count, chorus_dtype dtype, chorus_op op, double scale,
                            char *error, size_t error_size)
{
    if (piece_count == 0)
        return CHORUS_OK;
    struct reduction reduction;
    chorus_status status = reduction_begin(context, dtype, op, scale, &reduction, error,
                                           error_size);
    if (status != CHORUS_OK)
        return status;
    size_t element_size = chorus_dtype_size(dtype);
    bool fused = piece_count > 1;
    size_t count = 0;
    for (size_t p = 0; p < piece_count; p++)
        count += pieces[p].count;
    if (fused)
        status = ensure_fusion(context, count * element_size, error, error_size);
    if (status == CHORUS_OK && fused)
        status = copy_pieces(context, context->fusion, pieces, piece_count, element_size, true,
                             error, error_size);
    if (status == CHORUS_OK) {
        const void *input = fused ? context->fusion : pieces[0].input;
        void *output = fused ? context->fusion : pieces[0].output;
        ncclResult_t code = ncclAllReduce(input, output, count, reduction.type, reduction.op,
                                          context->comm, context->stream);
        if (!enqueued(code))
            status = nccl_failure(code, "ncclAllReduce", error, error_size);
    }
    if (status == CHORUS_OK && fused)
        status = copy_pieces(context, context->fusion, pieces, piece_count, element_size, false,
                             error, error_size);
    return reduction_end(context, &reduction, status, error, error_size);
}

/* Elements of a tensor's block padded to the largest rank's rows (rank 0's, in Horovod's
 * split), so that every rank's block has one size, as ncclReduceScatter needs. */
static size_t padded_block(const struct gpu_scatter *scatter, size_t p)
{
    return part_length(scatter->rows, p, 0) * scatter->row_elements;
}

/* Enqueues the packing of every tensor into the fusion buffer so that it holds one chunk per
 * rank, each the concatenation of that rank's (padded) block of every tensor: per tensor, one
 * 2D copy for the ranks with the extra row and one for the others, their blocks the rows. The
 * padding is never read back. */
static chorus_status pack_by_rank(struct gpu_context *context, const struct gpu_scatter *scatters,
                                  size_t count, size_t element_size, size_t chunk_bytes,
                                  char *error, size_t error_size)
{
    size_t p = (size_t)context->nranks;
    char *fused = context->fusion;
    size_t offset = 0;
    for (size_t t = 0; t < count; t++) {
        const struct gpu_scatter *scatter = &scatters[t];
        size_t row_bytes = scatter->row_elements * element_size;
        size_t extra = scatter->rows % p, longer = (scatter->rows / p + 1) * row_bytes;
        size_t shorter = scatter->rows / p * row_bytes;
        const char *input = scatter->input;
        cudaError_t cuda = cudaSuccess;
        if (extra > 0 && longer > 0)
            cuda = cudaMemcpy2DAsync(fused + offset, chunk_bytes, input, longer, longer, extra,
                                     cudaMemcpyDefault, context->stream);
        if (cuda == cudaSuccess && shorter > 0)
            cuda = cudaMemcpy2DAsync(fused + extra * chunk_bytes + offset, chunk_bytes,
                                     input + extra * longer, shorter, shorter, p - extra,
                                     cudaMemcpyDefault, context->stream);
        if (cuda != cudaSuccess)
            return cuda_failure(cuda, "packing the fusion buffer by rank", error, error_size);
        offset += padded_block(scatter, p) * element_size;
    }
    return CHORUS_OK;
}

chorus_status gpu_reducescatter(struct gpu_context *context, const struct gpu_scatter *scatters,
                                size_t count, chorus_dtype dtype, chorus_op op, double scale,
                                char *error, size_t error_size)
{
    if (count == 0)
        return CHORUS_OK;
    struct reduction reduction;
    chorus_status status = reduction_begin(context, dtype, op, scale, &reduction, error,
                                           error_size);
    if (status != CHORUS_OK)
        return status;
    int rank = 0;
    ncclCommUserRank(context->comm, &rank);
    size_t p = (size_t)context->nranks, element_size = chorus_dtype_size(dtype), chunk = 0;
    for (size_t t = 0; t < count; t++)
        chunk += padded_block(&scatters[t], p);
    size_t chunk_bytes = chunk * element_size;
    /* One tensor whose rows divide by the ranks goes straight from input to output. */
    bool staged = count > 1 || scatters[0].rows % p != 0;
    if (staged)
        status = ensure_fusion(context, chunk_bytes * p, error, error_size);
    if (status == CHORUS_OK && staged)
        status = pack_by_rank(context, scatters, count, element_size, chunk_bytes, error,
                              error_size);
    /* Staged, in place: this rank's chunk of the fusion buffer receives the result. */
    char *result = staged ? (char *)context->fusion + (size_t)rank * chunk_bytes : NULL;
    if (status == CHORUS_OK) {
        ncclResult_t code =
            ncclReduceScatter(staged ? context->fusion : scatters[0].input,
                              staged ? result : scatters[0].output, chunk, reduction.type,
                              reduction.op, context->comm, context->stream);
        if (!enqueued(code))
            status = nccl_failure(code, "ncclReduceScatter", error, error_size);
    }
    for (size_t t = 0; status == CHORUS_OK && staged && t < count; t++) {
        struct gpu_piece block = {.output = scatters[t].output,
                                  .count = part_length(scatters[t].rows, p, (size_t)rank) *
                                           scatters[t].row_elements};
        status = copy_pieces(context, result, &block, 1, element_size, false, error, error_size);
        result += padded_block(&scatters[t], p) * element_size;
    }
    return reduction_end(context, &reduction, status, error, error_size);
}

chorus_status gpu_broadcast(struct gpu_context *context, void *const *buffers, const size_t *bytes,
                            size_t count, int root, char *error, size_t error_size)
{
    if (usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    ncclResult_t code = ncclGroupStart();
    for (size_t i = 0; enqueued(code) && i < count; i++)
        code = ncclBroadcast(buffers[i], buffers[i], bytes[i], ncclUint8, root, context->comm,
                             context->stream);
    ncclResult_t ended = ncclGroupEnd();
    if (enqueued(code))
        code = ended;
    if (!enqueued(code))
        return nccl_failure(code, "grouped ncclBroadcast", error, error_size);
    return wait_for(context, WAIT_STREAM, error, error_size);
}

/* Whether every rank's block is `block` bytes, in rank order with no gaps: what ncclAllGather
 * and ncclAlltoAll lay out. */
static bool evenly_laid_out(const size_t *block_bytes, const size_t *offsets, int nranks,
                            size_t block)
{
    for (int r = 0; r < nranks; r++)
        if (block_bytes[r] != block || offsets[r] != (size_t)r * block)
            return false;
    return true;
}

chorus_status gpu_allgather(struct gpu_context *context, const struct gpu_gather *gathers,
                            size_t count, char *error, size_t error_size)
{
    /* One NCCL group: ncclAllGather for a tensor whose blocks are all of one size, else one
     * broadcast per rank. */
    if (usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    int rank = 0;
    ncclCommUserRank(context->comm, &rank);
    ncclResult_t code = ncclGroupStart();
    for (size_t i = 0; enqueued(code) && i < count; i++) {
        const struct gpu_gather *gather = &gathers[i];
        char *recv = gather->recv;
        size_t block = gather->block_bytes[0];
        if (evenly_laid_out(gather->block_bytes, gather->offsets, context->nranks, block)) {
            code = ncclAllGather(gather->send, recv, block, ncclUint8, context->comm,
                                 context->stream);
            continue;
        }
        for (int r = 0; enqueued(code) && r < context->nranks; r++) {
            const void *source = r == rank ? gather->send : recv + gather->offsets[r];
            code = ncclBroadcast(source, recv + gather->offsets[r], gather->block_bytes[r],
                                 ncclUint8, r, context->comm, context->stream);
        }
    }
    ncclResult_t ended = ncclGroupEnd();
    if (enqueued(code))
        code = ended;
    if (!enqueued(code))
        return nccl_failure(code, "allgather (grouped ncclBroadcast)", error, error_size);
    return wait_for(context, WAIT_STREAM, error, error_size);
}

chorus_status gpu_alltoall(struct gpu_context *context, const struct gpu_exchange *exchange,
                           char *error, size_t error_size)
{
    if (usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    const char *send = exchange->send;
    char *recv = exchange->recv;
    size_t block = exchange->send_bytes[0];
    if (evenly_laid_out(exchange->send_bytes, exchange->send_offsets, context->nranks, block) &&
        evenly_laid_out(exchange->recv_bytes, exchange->recv_offsets, context->nranks, block)) {
        ncclResult_t code = ncclAlltoAll(send, recv, block, ncclUint8, context->comm,
                                         context->stream);
        if (!enqueued(code))
            return nccl_failure(code, "ncclAlltoAll", error, error_size);
        return wait_for(context, WAIT_STREAM, error, error_size);
    }
    ncclResult_t code = ncclGroupStart();
    for (int k = 0; enqueued(code) && k < context->nranks; k++) {
        code = ncclSend(send + exchange->send_offsets[k], exchange->send_bytes[k], ncclUint8, k,
                        context->comm, context->stream);
        if (enqueued(code))
            code = ncclRecv(recv + exchange->recv_offsets[k], exchange->recv_bytes[k], ncclUint8,
                            k, context->comm, context->stream);
    }
    ncclResult_t ended = ncclGroupEnd();
    if (enqueued(code))
        code = ended;
    if (!enqueued(code))
        return nccl_failure(code, "alltoall (grouped ncclSend/ncclRecv)", error, error_size);
    return wait_for(context, WAIT_STREAM, error, error_size);
}

void *gpu_malloc(size_t bytes, int device)
{
    void *pointer = NULL;
    if (cudaSetDevice(device) != cudaSuccess)
        return NULL;
    if (cudaMalloc(&pointer, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    return pointer;
}

void gpu_free(void *pointer)
{
    if (pointer != NULL)
        cudaFree(pointer);
}

chorus_status gpu_copy(void *destination, const void *source, size_t bytes)
{
    return cudaMemcpy(destination, source, bytes, cudaMemcpyDefault) == cudaSuccess
               ? CHORUS_OK
               : CHORUS_ERR_GPU;
}

int gpu_pointer_device(const void *pointer)
{
    struct cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
               ? attributes.device
               : -1;
}
