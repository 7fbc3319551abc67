/*
 * host_reducescatter.c — a reducescatter of a host tensor: rank r's block of rows of the
 * reduction lands in a fresh output that its handle owns. Never fused: each runs alone.
 */
#include "backend.h"

#include "../collectives/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

chorus_status host_reducescatter(struct executor *executor, const struct wire_response *responses,
                                 const size_t *members, size_t member_count,
                                 struct request **requests, char *error, size_t error_size)
{
    (void)member_count; /* always 1: the fusion plan never fuses reducescatters */
    const struct wire_response *response = &responses[members[0]];
    const struct wire_request *desc = &response->request;
    struct request *request = requests[0];
    int p = executor->nranks, me = executor->rank;
    chorus_dtype dtype = (chorus_dtype)desc->dtype;
    chorus_op op = (chorus_op)desc->op;
    size_t element = chorus_dtype_size(dtype);
    size_t rows = desc->ndims > 0 ? (size_t)desc->shape[0] : 0;
    size_t row_elements = rows > 0 ? request_elements(desc) / rows : 0;
    size_t count = rows * row_elements;
    size_t *block_counts = calloc((size_t)p, sizeof *block_counts);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    chorus_status status = CHORUS_ERR_OUT_OF_MEMORY;
    if (block_counts == NULL || offsets == NULL) {
        snprintf(error, error_size, "reducescatter \"%s\": out of memory", desc->name);
        goto out;
    }
    /* Horovod's split: the first rows % p ranks get one row more. */
    for (int r = 0; r < p; r++) {
        block_counts[r] = part_length(rows, (size_t)p, (size_t)r) * row_elements;
        offsets[r] = part_start(rows, (size_t)p, (size_t)r) * row_elements;
    }
    size_t block_bytes = block_counts[me] * element;
    const void *send = NULL;
    void *output = NULL;
    size_t capacity = 0;
    if (request == NULL) {
        /* A joined rank adds the operator's identity and keeps nothing. */
        unsigned char *stand_in = stand_in_buffer(executor, count * element + block_bytes);
        if (stand_in != NULL) {
            fill_identity(stand_in, count, dtype, op);
            send = stand_in;
            output = stand_in + count * element;
        }
    } else {
        send = request->input;
        output = gathered_output(executor, response, request, block_bytes, &capacity, error,
                                 error_size);
        if (desc->prescale != 1.0 && output != NULL) {
            void *scaled = scratch_reserve(&executor->fusion, count * element + 1);
            if (scaled != NULL) {
                memcpy(scaled, request->input, count * element);
                scale_buffer(scaled, count, dtype, desc->prescale);
            }
            send = scaled;
        }
    }
    /* An empty tensor may come without data. */
    if (output != NULL && (send != NULL || count == 0))
        status = run_host_reducescatter(executor, send, output, block_counts, offsets, count,
                                        dtype, op, output_factor(response), error, error_size);
    else if (error[0] == '\0')
        snprintf(error, error_size, "reducescatter \"%s\": out of memory", desc->name);
    if (request != NULL)
        settle_output(response, request, output, capacity,
                      (int64_t)part_length(rows, (size_t)p, (size_t)me), status);
out:
    free(block_counts);
    free(offsets);
    return status;
}
