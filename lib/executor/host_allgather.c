/*
 * host_allgather.c — allgathers of host tensors: one straight into its output, several packed
 * into one contribution per rank and copied out afterwards.
 */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

/* An allgather of one host tensor, straight into its output. */
static chorus_status execute_allgather(struct executor *executor,
                                       const struct wire_response *response,
                                       struct request *request, char *error, size_t error_size)
{
    int p = executor->nranks;
    size_t *block_bytes = calloc((size_t)p, sizeof *block_bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    chorus_status status = CHORUS_ERR_OUT_OF_MEMORY;
    if (block_bytes != NULL && offsets != NULL) {
        size_t total = executor_gather_layout(response, p, block_bytes, offsets), capacity = 0;
        void *output =
            executor_gathered_output(executor, response, request, total, &capacity, error, error_size);
        if (output != NULL)
            status = executor_run_host_allgather(executor, request != NULL ? request->input : output, output,
                                        block_bytes, offsets, total, error, error_size);
        executor_settle_gathered(response, request, output, capacity, status);
    }
    free(block_bytes);
    free(offsets);
    return status;
}

/* Allgathers of host tensors together: each rank's contribution is its blocks of every member
 * in a row, packed into the fusion buffer after the room for the gathered result; one allgather
 * moves the contributions; each member's rows are then copied out of every rank's contribution
 * into the member's output. */
static chorus_status execute_allgather_batch(struct executor *executor,
                                             const struct wire_response *responses,
                                             const size_t *members, size_t member_count,
                                             struct request **requests, char *error,
                                             size_t error_size)
{
    int p = executor->nranks, me = executor->rank;
    size_t *block_bytes = calloc((size_t)p, sizeof *block_bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    void **outputs = calloc(member_count, sizeof *outputs);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    chorus_status status = CHORUS_OK;
    if (block_bytes == NULL || offsets == NULL || outputs == NULL || capacities == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    size_t total = 0;
    for (int r = 0; r < p; r++) {
        for (size_t m = 0; m < member_count; m++) {
            const struct wire_response *response = &responses[members[m]];
            block_bytes[r] +=
                (size_t)response->first_dims[r] * allgather_row_bytes(&response->request);
        }
        offsets[r] = total;
        total += block_bytes[r];
    }
    unsigned char *gathered = scratch_reserve(&executor->fusion, total + block_bytes[me] + 1);
    if (gathered == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    unsigned char *send = gathered + total;
    size_t packed = 0;
    for (size_t m = 0; m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t bytes = (size_t)response->first_dims[me] * allgather_row_bytes(&response->request);
        if (requests[m] != NULL && bytes != 0)
            memcpy(send + packed, requests[m]->input, bytes);
        packed += bytes;
    }
    status = executor_run_host_allgather(executor, send, gathered, block_bytes, offsets, total, error,
                                error_size);
    /* Member m's rows from rank r follow the rows of members before m in r's contribution. */
    size_t *within = calloc((size_t)p, sizeof *within);
    if (status == CHORUS_OK && within == NULL)
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t row_bytes = allgather_row_bytes(&response->request);
        size_t bytes = request_batch_member_bytes(response), written = 0;
        /* A joined rank's missing member needs no output: nothing is unpacked for it. */
        unsigned char *output = requests[m] != NULL
                                    ? executor_gathered_output(executor, response, requests[m], bytes,
                                                      &capacities[m], error, error_size)
                                    : NULL;
        if (requests[m] != NULL && output == NULL) {
            status = CHORUS_ERR_OUT_OF_MEMORY;
            break;
        }
        outputs[m] = output;
        for (int r = 0; r < p; r++) {
            size_t block = (size_t)response->first_dims[r] * row_bytes;
            if (output != NULL && block != 0)
                memcpy(output + written, gathered + offsets[r] + within[r], block);
            written += block;
            within[r] += block;
        }
    }
    free(within);
    for (size_t m = 0; m < member_count; m++)
        executor_settle_gathered(&responses[members[m]], requests[m], outputs[m], capacities[m], status);
out:
    free(block_bytes);
    free(offsets);
    free(outputs);
    free(capacities);
    return status;
}

chorus_status executor_host_allgather(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size)
{
    if (member_count == 1)
        return execute_allgather(executor, &responses[members[0]], requests[0], error, error_size);
    return execute_allgather_batch(executor, responses, members, member_count, requests, error,
                                   error_size);
}
