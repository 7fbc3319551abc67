/*
 * gpu_nccl_exchange.c — GPU broadcast, allgather and alltoall over NCCL: ncclAllGather and
 * ncclAlltoAll where every rank's blocks are even, else a broadcast per rank or grouped
 * ncclSend/ncclRecv, several tensors in one NCCL group.
 */
#include "gpu_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

chorus_status gpu_broadcast(struct gpu_context *context, void *const *buffers, const size_t *bytes,
                            size_t count, int root, char *error, size_t error_size)
{
    if (gpu_usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    ncclResult_t code = ncclGroupStart();
    for (size_t i = 0; gpu_enqueued(code) && i < count; i++)
        code = ncclBroadcast(buffers[i], buffers[i], bytes[i], ncclUint8, root, context->comm,
                             context->stream);
    ncclResult_t ended = ncclGroupEnd();
    if (gpu_enqueued(code))
        code = ended;
    if (!gpu_enqueued(code))
        return gpu_nccl_failure(code, "grouped ncclBroadcast", error, error_size);
    return gpu_wait_for(context, WAIT_STREAM, error, error_size);
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
    if (gpu_usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    int rank = 0;
    ncclCommUserRank(context->comm, &rank);
    ncclResult_t code = ncclGroupStart();
    for (size_t i = 0; gpu_enqueued(code) && i < count; i++) {
        const struct gpu_gather *gather = &gathers[i];
        char *recv = gather->recv;
        size_t block = gather->block_bytes[0];
        if (evenly_laid_out(gather->block_bytes, gather->offsets, context->nranks, block)) {
            code = ncclAllGather(gather->send, recv, block, ncclUint8, context->comm,
                                 context->stream);
            continue;
        }
        for (int r = 0; gpu_enqueued(code) && r < context->nranks; r++) {
            const void *source = r == rank ? gather->send : recv + gather->offsets[r];
            code = ncclBroadcast(source, recv + gather->offsets[r], gather->block_bytes[r],
                                 ncclUint8, r, context->comm, context->stream);
        }
    }
    ncclResult_t ended = ncclGroupEnd();
    if (gpu_enqueued(code))
        code = ended;
    if (!gpu_enqueued(code))
        return gpu_nccl_failure(code, "allgather (grouped ncclBroadcast)", error, error_size);
    return gpu_wait_for(context, WAIT_STREAM, error, error_size);
}

chorus_status gpu_alltoall(struct gpu_context *context, const struct gpu_exchange *exchange,
                           char *error, size_t error_size)
{
    if (gpu_usable(context, error, error_size) != CHORUS_OK)
        return CHORUS_ERR_GPU;
    cudaSetDevice(context->device);
    const char *send = exchange->send;
    char *recv = exchange->recv;
    size_t block = exchange->send_bytes[0];
    if (evenly_laid_out(exchange->send_bytes, exchange->send_offsets, context->nranks, block) &&
        evenly_laid_out(exchange->recv_bytes, exchange->recv_offsets, context->nranks, block)) {
        ncclResult_t code = ncclAlltoAll(send, recv, block, ncclUint8, context->comm,
                                         context->stream);
        if (!gpu_enqueued(code))
            return gpu_nccl_failure(code, "ncclAlltoAll", error, error_size);
        return gpu_wait_for(context, WAIT_STREAM, error, error_size);
    }
    ncclResult_t code = ncclGroupStart();
    for (int k = 0; gpu_enqueued(code) && k < context->nranks; k++) {
        code = ncclSend(send + exchange->send_offsets[k], exchange->send_bytes[k], ncclUint8, k,
                        context->comm, context->stream);
        if (gpu_enqueued(code))
            code = ncclRecv(recv + exchange->recv_offsets[k], exchange->recv_bytes[k], ncclUint8,
                            k, context->comm, context->stream);
    }
    ncclResult_t ended = ncclGroupEnd();
    if (gpu_enqueued(code))
        code = ended;
    if (!gpu_enqueued(code))
        return gpu_nccl_failure(code, "alltoall (grouped ncclSend/ncclRecv)", error, error_size);
    return gpu_wait_for(context, WAIT_STREAM, error, error_size);
}
