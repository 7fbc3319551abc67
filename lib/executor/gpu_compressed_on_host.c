/*
 * gpu_compressed_on_host.c — INT8, INT4 and TOPK allreduces of GPU tensors. Quantizing or
 * selecting on the device would need kernels chorus does not have, so each tensor is copied to
 * host memory, widened to float32 (times the prescale) where it is 16 bits, reduced there by
 * the host's lossy algorithm exactly as a host tensor is (the same bits on every rank, the same
 * bound), and copied back, rounded to its dtype. Its error feedback residual lives on its device
 * and travels the same way. Compression is for slow links, where the bytes it saves cost far more
 * than two copies over the bus.
 */
#include "backend.h"

#include "../collectives/reduce.h"
#include "../gpu/gpu.h"

#include <stdio.h>
#include <string.h>

/* `bytes` from `from` to `to` (one of them device memory); false, with `error` set, on
 * failure. */
static bool staged_copy(void *to, const void *from, size_t bytes, const char *what,
                        const char *name, char *error, size_t error_size)
{
    if (bytes == 0 || gpu_copy(to, from, bytes) == CHORUS_OK)
        return true;
    snprintf(error, error_size, "allreduce \"%s\": copying %s between the GPU and host memory "
                                "failed", name, what);
    return false;
}

/* One tensor: `host` holds count float32 values, then count more for the residual, then the
 * tensor's own bytes. A joined rank (request NULL) contributes zeros and keeps no residual. */
static chorus_status reduce_one(struct executor *executor, const struct wire_response *response,
                                struct request *request, float *host, char *error,
                                size_t error_size)
{
    const struct wire_request *desc = &response->request;
    chorus_dtype dtype = (chorus_dtype)desc->dtype;
    size_t count = request_elements(desc);
    float *residual = request != NULL && request->error_feedback != NULL ? host + count : NULL;
    void *own = host + 2 * count;
    if (request == NULL) {
        memset(host, 0, count * sizeof(float));
    } else {
        if (!staged_copy(dtype == CHORUS_FLOAT32 ? (void *)host : own, request->input,
                         count * chorus_dtype_size(dtype), "the tensor", desc->name, error,
                         error_size) ||
            (residual != NULL && !staged_copy(residual, request->error_feedback,
                                              count * sizeof(float), "the error feedback",
                                              desc->name, error, error_size)))
            return CHORUS_ERR_GPU;
        if (dtype == CHORUS_FLOAT32)
            reduce_scale_buffer(host, count, dtype, desc->prescale);
        else
            reduce_decompress_floats(host, own, count, dtype, (float)desc->prescale);
    }
    chorus_status status =
        executor_host_allreduce_lossy(executor, response, host, residual, error, error_size);
    if (status != CHORUS_OK || request == NULL)
        return status;
    if (dtype != CHORUS_FLOAT32)
        reduce_compress_floats(own, host, count, dtype, 1.0f);
    if (!staged_copy(request->output, dtype == CHORUS_FLOAT32 ? (void *)host : own,
                     count * chorus_dtype_size(dtype), "the result", desc->name, error,
                     error_size) ||
        (residual != NULL &&
         !staged_copy(request->error_feedback, residual, count * sizeof(float),
                      "the error feedback", desc->name, error, error_size)))
        return CHORUS_ERR_GPU;
    return CHORUS_OK;
}

chorus_status executor_gpu_allreduce_compressed(struct executor *executor,
                                                const struct wire_response *responses,
                                                const size_t *members, size_t member_count,
                                                struct request **requests, char *error,
                                                size_t error_size)
{
    for (size_t m = 0; m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t count = request_elements(&response->request);
        /* The float32 values, the residual and the tensor's own bytes (at most as many). */
        float *host = scratch_reserve(&executor->fusion, 3 * count * sizeof(float) + 1);
        if (host == NULL) {
            snprintf(error, error_size, "allreduce \"%s\": cannot allocate %zu bytes of host "
                                        "memory to compress a GPU tensor there",
                     response->request.name, 3 * count * sizeof(float));
            return CHORUS_ERR_OUT_OF_MEMORY;
        }
        chorus_status status =
            reduce_one(executor, response, requests[m], host, error, error_size);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}
