/*
 * host_reducescatter.c — reducescatters of host tensors: rank r's block of rows of each
 * reduction lands in a fresh output that its handle owns. Several (the same dtype, op and
 * scale factors) run as one: the fusion buffer holds, for each rank in turn, that rank's block
 * of every member, so that one reducescatter leaves every member's block of this rank side by
 * side; they are copied out to the members' outputs.
 *
 * Example, members a (5 rows) and b (2 rows) at 2 ranks: blocks a0 = rows 0-2, a1 = rows 3-4,
 * b0 = row 0, b1 = row 1; the fusion buffer is a0 b0 | a1 b1 and rank 1 gets a1 b1.
 */
#include "backend.h"

#include "../collectives/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One member's split: elements per row, and its tensor's rows. */
struct member_split {
    size_t rows, row_elements;
};

static size_t block_start(const struct member_split *split, size_t p, size_t r)
{
    return part_start(split->rows, p, r) * split->row_elements;
}

static size_t block_length(const struct member_split *split, size_t p, size_t r)
{
    return part_length(split->rows, p, r) * split->row_elements;
}

chorus_status executor_host_reducescatter(struct executor *executor, const struct wire_response *responses,
                                 const size_t *members, size_t member_count,
                                 struct request **requests, char *error, size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    size_t p = (size_t)executor->nranks, me = (size_t)executor->rank;
    chorus_dtype dtype = (chorus_dtype)first->request.dtype;
    chorus_op op = (chorus_op)first->request.op;
    size_t element = chorus_dtype_size(dtype);
    struct member_split *splits = calloc(member_count, sizeof *splits);
    size_t *block_counts = calloc(p, sizeof *block_counts);
    size_t *offsets = calloc(p, sizeof *offsets);
    void **outputs = calloc(member_count, sizeof *outputs);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    chorus_status status = CHORUS_ERR_OUT_OF_MEMORY;
    if (splits == NULL || block_counts == NULL || offsets == NULL || outputs == NULL ||
        capacities == NULL) {
        snprintf(error, error_size, "reducescatter \"%s\": out of memory", first->request.name);
        goto out;
    }
    size_t total = 0;
    for (size_t m = 0; m < member_count; m++) {
        const struct wire_request *desc = &responses[members[m]].request;
        splits[m].rows = desc->ndims > 0 ? (size_t)desc->shape[0] : 0;
        splits[m].row_elements = splits[m].rows > 0 ? request_elements(desc) / splits[m].rows : 0;
        total += splits[m].rows * splits[m].row_elements;
    }
    /* Block r of the fused buffer: every member's block r, in member order. */
    for (size_t r = 0; r < p; r++) {
        for (size_t m = 0; m < member_count; m++)
            block_counts[r] += block_length(&splits[m], p, r);
        offsets[r] = r > 0 ? offsets[r - 1] + block_counts[r - 1] : 0;
    }
    /* One tensor without a prescale is reduced where it lies, straight into its output. */
    if (member_count == 1 && requests[0] != NULL && first->request.prescale == 1.0) {
        outputs[0] = executor_gathered_output(executor, first, requests[0], block_counts[me] * element,
                                     &capacities[0], error, error_size);
        status = outputs[0] == NULL
                     ? CHORUS_ERR_OUT_OF_MEMORY
                     : executor_run_host_reducescatter(executor, requests[0]->input, outputs[0],
                                              block_counts, offsets, total, dtype, op,
                                              executor_output_factor(first), error, error_size);
        executor_settle_output(first, requests[0], outputs[0], capacities[0],
                      (int64_t)part_length(splits[0].rows, p, me), status);
        goto out;
    }
    unsigned char *fused =
        scratch_reserve(&executor->fusion, (total + block_counts[me]) * element + 1);
    if (fused == NULL) {
        snprintf(error, error_size, "reducescatter \"%s\": out of memory", first->request.name);
        goto out;
    }
    unsigned char *mine = fused + total * element;
    for (size_t r = 0; r < p; r++) {
        unsigned char *at = fused + offsets[r] * element;
        for (size_t m = 0; m < member_count; m++) {
            size_t length = block_length(&splits[m], p, r);
            /* A joined rank adds the operator's identity. */
            if (requests[m] == NULL)
                reduce_fill_identity(at, length, dtype, op);
            else if (length > 0)
                memcpy(at, (const unsigned char *)requests[m]->input +
                               block_start(&splits[m], p, r) * element,
                       length * element);
            at += length * element;
        }
    }
    if (first->request.prescale != 1.0)
        reduce_scale_buffer(fused, total, dtype, first->request.prescale);
    status = executor_run_host_reducescatter(executor, fused, mine, block_counts, offsets, total, dtype,
                                    op, executor_output_factor(first), error, error_size);
    size_t within = 0;
    for (size_t m = 0; m < member_count; m++) {
        size_t length = block_length(&splits[m], p, me);
        if (status == CHORUS_OK && requests[m] != NULL) {
            outputs[m] = executor_gathered_output(executor, &responses[members[m]], requests[m],
                                         length * element, &capacities[m], error, error_size);
            if (outputs[m] == NULL)
                status = CHORUS_ERR_OUT_OF_MEMORY;
            else if (length > 0)
                memcpy(outputs[m], mine + within * element, length * element);
        }
        within += length;
    }
    for (size_t m = 0; m < member_count; m++)
        executor_settle_output(&responses[members[m]], requests[m], outputs[m], capacities[m],
                      (int64_t)part_length(splits[m].rows, p, me), status);
out:
    free(splits);
    free(block_counts);
    free(offsets);
    free(outputs);
    free(capacities);
    return status;
}
