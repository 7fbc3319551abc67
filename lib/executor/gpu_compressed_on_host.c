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

#include "../gpu/gpu.h"

#include <stdio.h>

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

/* One tensor (a joined rank's, request NULL, is the host path's zeros alone): its bytes and
 * its residual copied into `staging` (the residual first, float32, then the tensor), reduced
 * there by the host path as a host tensor of those buffers, and copied back. */
static chorus_status reduce_one(struct executor *executor, const struct wire_response *response,
                                struct request *request, char *error, size_t error_size)
{
    if (request == NULL)
        return executor_host_allreduce_lossy(executor, response, NULL, error, error_size);
    const char *name = response->request.name;
    size_t count = request_elements(&response->request);
    size_t tensor_bytes = count * chorus_dtype_size((chorus_dtype)response->request.dtype);
    size_t residual_bytes = request->error_feedback != NULL ? count * sizeof(float) : 0;
    char *staging = scratch_reserve(&executor->staging, residual_bytes + tensor_bytes + 1);
    if (staging == NULL) {
        snprintf(error, error_size, "allreduce \"%s\": cannot allocate %zu bytes of host "
                                    "memory to compress a GPU tensor there",
                 name, residual_bytes + tensor_bytes);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    struct request staged = *request;
    staged.input = staged.output = staging + residual_bytes;
    staged.error_feedback = residual_bytes != 0 ? (float *)staging : NULL;
    if (!staged_copy(staged.input, request->input, tensor_bytes, "the tensor", name, error,
                     error_size) ||
        !staged_copy(staged.error_feedback, request->error_feedback, residual_bytes,
                     "the error feedback", name, error, error_size))
        return CHORUS_ERR_GPU;
    chorus_status status =
        executor_host_allreduce_lossy(executor, response, &staged, error, error_size);
    if (status != CHORUS_OK)
        return status;
    if (!staged_copy(request->output, staged.output, tensor_bytes, "the result", name, error,
                     error_size) ||
        !staged_copy(request->error_feedback, staged.error_feedback, residual_bytes,
                     "the error feedback", name, error, error_size))
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
        chorus_status status =
            reduce_one(executor, &responses[members[m]], requests[m], error, error_size);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}
