/*
 * host_alltoall.c — an alltoall of a host tensor, and the plan that a GPU alltoall shares. The
 * ranks first exchange how many rows each sends each other and where they start in the sender's
 * input (an alltoall of two int64 per pair, through the host transport), so that every rank can
 * size its output and place every sender's rows, or read them straight from the sender (single
 * copy); then the rows themselves. Where the coordinator found every rank splitting the same rows
 * evenly (even_split), each rank computes all that itself and skips the first exchange. The
 * output and the received splits go to the handle. Never fused: each runs alone.
 */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plan's tables from every pair's rows: sent[2k] rows for rank k, starting at row
 * sent[2k+1] of this rank's input; received[2k] rows from rank k, starting at row
 * received[2k+1] of rank k's input. */
static void fill_plan(struct alltoall_plan *plan, const int64_t *sent, const int64_t *received,
                      size_t row_bytes)
{
    for (int r = 0; r < plan->ranks; r++) {
        plan->send_bytes[r] = (size_t)sent[2 * r] * row_bytes;
        plan->send_offsets[r] = (size_t)sent[2 * r + 1] * row_bytes;
        plan->send_total += plan->send_bytes[r];
        plan->received_splits[r] = received[2 * r];
        plan->recv_bytes[r] = (size_t)received[2 * r] * row_bytes;
        plan->recv_offsets[r] = plan->recv_total;
        plan->remote_offsets[r] = (size_t)received[2 * r + 1] * row_bytes;
        plan->recv_total += plan->recv_bytes[r];
        plan->received_rows += (size_t)received[2 * r];
    }
}

chorus_status executor_alltoall_plan(struct executor *executor, const struct wire_response *response,
                            const struct request *request, struct alltoall_plan *plan, char *error,
                            size_t error_size)
{
    int p = executor->nranks;
    size_t row_bytes = allgather_row_bytes(&response->request);
    memset(plan, 0, sizeof *plan);
    plan->ranks = p;
    /* Per rank, in `sent`: the rows for it and where they start in the input (in rows), so
     * that a receiver can read them from there; `received` gets the same from every sender. */
    int64_t *sent = calloc(2 * (size_t)p, sizeof *sent);
    int64_t *received = calloc(2 * (size_t)p, sizeof *received);
    plan->table = calloc(5 * (size_t)p, sizeof *plan->table);
    plan->received_splits = calloc((size_t)p, sizeof *plan->received_splits);
    chorus_status status = CHORUS_ERR_OUT_OF_MEMORY;
    if (sent == NULL || received == NULL || plan->table == NULL || plan->received_splits == NULL) {
        snprintf(error, error_size, "alltoall \"%s\": out of memory", response->request.name);
        goto out;
    }
    plan->send_bytes = plan->table;
    plan->send_offsets = plan->table + p;
    plan->recv_bytes = plan->table + 2 * p;
    plan->recv_offsets = plan->table + 3 * p;
    plan->remote_offsets = plan->table + 4 * p;
    if (response->request.even_split) {
        /* Every rank sends `each` rows to every rank, in rank order: nothing to exchange. */
        int64_t each = response->request.shape[0] / p;
        for (int r = 0; r < p; r++) {
            sent[2 * r] = received[2 * r] = each;
            sent[2 * r + 1] = r * each;
            received[2 * r + 1] = executor->rank * each;
        }
        fill_plan(plan, sent, received, row_bytes);
        status = CHORUS_OK;
        goto out;
    }
    /* A joined rank sends nothing and keeps nothing of what it receives. */
    int64_t start = 0;
    for (int r = 0; request != NULL && r < p; r++) {
        sent[2 * r] = request->splits[r];
        sent[2 * r + 1] = start;
        start += request->splits[r];
    }
    for (int r = 0; r < p; r++) {
        plan->send_bytes[r] = plan->recv_bytes[r] = 2 * sizeof(int64_t);
        plan->send_offsets[r] = plan->recv_offsets[r] = (size_t)r * 2 * sizeof(int64_t);
    }
    /* Through MPI: reading 16 bytes from each peer (single copy) measured slower at np=2 and 4,
     * 64 KiB-1 MiB alltoalls 19-29 us against 15-23 us (two barriers against p-1 messages). */
    struct alltoall_args counts = {.transport = &executor->transport,
                                   .scratch = &executor->scratch,
                                   .send = sent,
                                   .send_bytes = plan->send_bytes,
                                   .send_offsets = plan->send_offsets,
                                   .recv = received,
                                   .recv_bytes = plan->recv_bytes,
                                   .recv_offsets = plan->recv_offsets,
                                   .same_blocks = true};
    status =
        executor_run_host_alltoall(executor, &counts, 2 * (size_t)p * sizeof(int64_t), error, error_size);
    if (status == CHORUS_OK)
        fill_plan(plan, sent, received, row_bytes);
out:
    free(sent);
    free(received);
    return status;
}

void executor_alltoall_plan_free(struct alltoall_plan *plan)
{
    free(plan->table);
    free(plan->received_splits);
    memset(plan, 0, sizeof *plan);
}

void executor_alltoall_settle(const struct wire_response *response, struct request *request,
                     struct alltoall_plan *plan, void *output, size_t capacity,
                     chorus_status status)
{
    if (request == NULL)
        return;
    if (status == CHORUS_OK) {
        handle_set_received_splits(request->handle, plan->received_splits, (size_t)plan->ranks);
        plan->received_splits = NULL;
    }
    if (output != NULL)
        executor_settle_output(response, request, output, capacity, (int64_t)plan->received_rows, status);
}

chorus_status executor_host_alltoall(struct executor *executor, const struct wire_response *responses,
                            const size_t *members, size_t member_count, struct request **requests,
                            char *error, size_t error_size)
{
    (void)member_count; /* always 1: the fusion plan never fuses alltoalls */
    const struct wire_response *response = &responses[members[0]];
    struct request *request = requests[0];
    struct alltoall_plan plan;
    void *output = NULL;
    size_t capacity = 0;
    chorus_status status = executor_alltoall_plan(executor, response, request, &plan, error, error_size);
    if (status == CHORUS_OK) {
        output = executor_gathered_output(executor, response, request, plan.recv_total, &capacity, error,
                                 error_size);
        status = output != NULL ? CHORUS_OK : CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (status == CHORUS_OK) {
        struct alltoall_args data = {.transport = &executor->transport,
                                     .scratch = &executor->scratch,
                                     .node = executor_node(executor),
                                     .remote_offsets = plan.remote_offsets,
                                     .send = request != NULL ? request->input : NULL,
                                     .send_bytes = plan.send_bytes,
                                     .send_offsets = plan.send_offsets,
                                     .recv = output,
                                     .recv_bytes = plan.recv_bytes,
                                     .recv_offsets = plan.recv_offsets,
                                     .same_blocks = response->request.even_split};
        status = executor_run_host_alltoall(executor, &data, plan.send_total + plan.recv_total, error,
                                   error_size);
    }
    executor_alltoall_settle(response, request, &plan, output, capacity, status);
    executor_alltoall_plan_free(&plan);
    return status;
}
