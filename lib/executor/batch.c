/*
 * batch.c — what every backend needs of a batch: its sizes and reduction factors, stand-ins for
 * a joined rank's missing tensors, and where gathered outputs come from and go to.
 */
#include "backend.h"

#include "../core/output_pool.h"

#include <stdio.h>
#include <string.h>

/* Elements of all the members of a batch together. */
size_t executor_batch_elements(const struct wire_response *responses, const size_t *members,
                      size_t member_count)
{
    size_t total = 0;
    for (size_t m = 0; m < member_count; m++)
        total += request_elements(&responses[members[m]].request);
    return total;
}

/* The dtype an allreduce travels as: float16 or bfloat16 for a compressed float32 tensor, else
 * its own. */
chorus_dtype executor_wire_dtype(const struct wire_request *request)
{
    if (request->dtype != CHORUS_FLOAT32)
        return (chorus_dtype)request->dtype;
    return request->compression == CHORUS_COMPRESSION_BF16   ? CHORUS_BFLOAT16
           : request->compression == CHORUS_COMPRESSION_FP16 ? CHORUS_FLOAT16
                                                             : CHORUS_FLOAT32;
}

double executor_output_factor(const struct wire_response *response)
{
    return request_output_factor(&response->request, response->contributors);
}

/* The buffer a joined rank reduces when it has no tensor of that name: the operator's
 * identity, so that it leaves the result unchanged. */
void *executor_stand_in_buffer(struct executor *executor, size_t bytes)
{
    return scratch_reserve(&executor->stand_in, bytes ? bytes : 1);
}

/* The root's input must also be its output. */
chorus_status executor_root_output(struct request *request, size_t bytes, bool gpu, char *error,
                          size_t error_size)
{
    if (request == NULL || request->output == request->input || bytes == 0)
        return CHORUS_OK;
    if (!gpu) {
        memcpy(request->output, request->input, bytes);
        return CHORUS_OK;
    }
    chorus_status copied = gpu_copy(request->output, request->input, bytes);
    if (copied != CHORUS_OK)
        snprintf(error, error_size, "copying the root's input to its output failed");
    return copied;
}

/* An allgather's output: for a request, `bytes` from the output pool (host; *capacity is what
 * the pool gave) or the device; for a joined rank, the stand-in buffer. NULL, with the reason in
 * `error`, when out of memory. */
void *executor_gathered_output(struct executor *executor, const struct wire_response *response,
                      const struct request *request, size_t bytes, size_t *capacity, char *error,
                      size_t error_size)
{
    *capacity = bytes;
    void *output = request == NULL ? executor_stand_in_buffer(executor, bytes)
                   : response->request.device != DEVICE_HOST
                       ? gpu_output_alloc(executor->gpu, bytes, request->cuda_stream)
                       : output_pool_take(bytes, capacity);
    if (output == NULL)
        snprintf(error, error_size, "%s \"%s\": cannot allocate %zu bytes of output",
                 chorus_collective_name((chorus_collective)response->request.collective),
                 response->request.name, bytes);
    return output;
}

/* Hands the gathered tensor (all ranks' rows, `output`) to the request's handle, which owns it
 * from now on. */
static void release_device_output(void *data, size_t capacity)
{
    (void)capacity;
    gpu_output_free(data);
}

static void deliver_output(const struct wire_response *response, struct request *request,
                           void *output, size_t capacity, int64_t rows)
{
    const struct wire_request *shape = &response->request;
    bool gpu = shape->device != DEVICE_HOST;
    chorus_tensor gathered = {.data = output,
                              .dtype = (chorus_dtype)shape->dtype,
                              .ndims = shape->ndims,
                              .memory = gpu ? CHORUS_MEMORY_CUDA : CHORUS_MEMORY_HOST,
                              .device = gpu ? shape->device : 0};
    memcpy(gathered.shape, shape->shape, sizeof gathered.shape);
    gathered.shape[0] = rows;
    handle_set_output(request->handle, request->member, &gathered,
                      gpu ? release_device_output : output_pool_give, capacity);
}

/* After the collective: a request's output goes to its handle when it succeeded, else back to
 * where it came from. A joined rank's stand-in stays. */
void executor_settle_output(const struct wire_response *response, struct request *request, void *output,
                   size_t capacity, int64_t rows, chorus_status status)
{
    if (request == NULL || output == NULL)
        return;
    if (status == CHORUS_OK)
        deliver_output(response, request, output, capacity, rows);
    else if (response->request.device != DEVICE_HOST)
        gpu_output_free(output);
    else
        output_pool_give(output, capacity);
}

void executor_settle_gathered(const struct wire_response *response, struct request *request, void *output,
                     size_t capacity, chorus_status status)
{
    int64_t rows = 0;
    for (uint32_t r = 0; r < response->first_dim_count; r++)
        rows += response->first_dims[r];
    executor_settle_output(response, request, output, capacity, rows, status);
}

/* Where each rank's rows of an allgather land in the gathered tensor; returns its bytes. */
size_t executor_gather_layout(const struct wire_response *response, int nranks, size_t *block_bytes,
                     size_t *offsets)
{
    size_t row_bytes = allgather_row_bytes(&response->request), total = 0;
    for (int r = 0; r < nranks; r++) {
        block_bytes[r] = (size_t)response->first_dims[r] * row_bytes;
        offsets[r] = total;
        total += block_bytes[r];
    }
    return total;
}
