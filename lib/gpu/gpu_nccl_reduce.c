/*
 * gpu_nccl_reduce.c — GPU allreduce and reducescatter over NCCL. Sums and averages of floats use
 * NCCL's pre-multiplied sum (ncclRedOpCreatePreMulSum), which applies prescale, postscale and
 * the division of an average in one pass; what NCCL cannot reduce as chorus defines it never
 * reaches here (gpu_capability.h routes it through host memory). A fused batch is packed into a
 * fusion buffer on the device with asynchronous copies on the stream.
 */
#include "gpu_nccl.h"

#include "../core/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return gpu_nccl_failure(code, "ncclRedOpCreatePreMulSum", error, error_size);
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
    if (gpu_usable(context, error, error_size) != CHORUS_OK)
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
        status = gpu_wait_for(context, WAIT_STREAM, error, error_size);
    else
        gpu_wait_for(context, WAIT_STREAM, ignored, sizeof ignored);
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
        return gpu_cuda_failure(cuda, "cudaMalloc of the fusion buffer", error, error_size);
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
            return gpu_cuda_failure(cuda, into ? "packing the fusion buffer"
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
        if (!gpu_enqueued(code))
            status = gpu_nccl_failure(code, "ncclAllReduce", error, error_size);
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
            return gpu_cuda_failure(cuda, "packing the fusion buffer by rank", error, error_size);
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
        if (!gpu_enqueued(code))
            status = gpu_nccl_failure(code, "ncclReduceScatter", error, error_size);
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
