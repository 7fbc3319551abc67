/*
 * nccl_backend.c — the backend for GPU tensors: NCCL through lib/gpu. The NCCL communicator is
 * made the first time a GPU tensor runs (every rank runs the same batches in the same order, so
 * every rank gets there together). Allreduce and reducescatter batches go through the device's
 * fusion buffer in one NCCL call; broadcast and allgather batches run as one NCCL group.
 */
#include "backend.h"

#include "../collectives/collectives.h"

#include <stdio.h>
#include <stdlib.h>

/* Rank 0's NCCL id (with a leading byte that says whether it could make one) to every rank,
 * by a binomial tree over the executor's transport, whose waits see another rank's notice that
 * it failed before reaching this point. */
static chorus_status broadcast_nccl_id(struct executor *executor,
                                       uint8_t message[1 + GPU_UNIQUE_ID_BYTES], char *error,
                                       size_t error_size)
{
    struct broadcast_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .buffer = message,
                                  .bytes = 1 + GPU_UNIQUE_ID_BYTES,
                                  .root = 0};
    chorus_status status = broadcast_binomial(&args);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "broadcasting the NCCL id: %s", executor->transport.error);
    return status;
}

static chorus_status ensure_gpu(struct executor *executor, int device, char *error,
                                size_t error_size)
{
    if (executor->gpu != NULL)
        return CHORUS_OK;
    uint8_t message[1 + GPU_UNIQUE_ID_BYTES] = {1};
    if (executor->rank == 0)
        message[0] = gpu_unique_id(message + 1, error, error_size) == CHORUS_OK;
    chorus_status status = broadcast_nccl_id(executor, message, error, error_size);
    if (status != CHORUS_OK)
        return status;
    if (!message[0]) {
        if (executor->rank != 0)
            snprintf(error, error_size, "rank 0 could not create the NCCL communicator");
        return CHORUS_ERR_GPU;
    }
    struct gpu_interrupt interrupt = {executor_interrupt_check, executor};
    return gpu_context_create(&executor->gpu, executor->rank, executor->nranks,
                              device < 0 ? 0 : device, message + 1, interrupt,
                              executor->settings->params->timeout_seconds, error, error_size);
}

/* The communicator (ensure_gpu), then the batch's tensors once the work that produces them has
 * run on their streams (their ready events): chorus's stream waits for no other. */
static chorus_status prepare_gpu(struct executor *executor, struct request **requests,
                                 size_t count, char *error, size_t error_size)
{
    chorus_status status = ensure_gpu(executor, requests[0]->desc.device, error, error_size);
    for (size_t m = 0; status == CHORUS_OK && m < count; m++)
        if (requests[m] != NULL)
            status = gpu_ready_wait(executor->gpu, requests[m]->ready, error, error_size);
    return status;
}

/* Whether NCCL cannot run this response's reduction (see gpu_reduce_on_host.c). Nor, on one
 * rank, a scaled sum: NCCL runs a one-rank collective with a kernel of its own
 * (ncclLaunchOneRank), whose pre-multiplied sum left the last elements of a buffer unscaled on
 * an H200 with NCCL 2.28.9 (gpu_collectives, 2026-11-30). One rank has nothing to exchange,
 * so host memory costs two copies there. */
static bool response_reduces_on_host(const struct executor *executor,
                                     const struct wire_response *response)
{
    const struct wire_request *request = &response->request;
    double scale = request->prescale * executor_output_factor(response);
    bool summing = request->op == CHORUS_SUM || request->op == CHORUS_AVERAGE;
    return executor_gpu_reduces_on_host((chorus_dtype)request->dtype, (chorus_op)request->op,
                                        request->prescale, request->postscale) ||
           (executor->nranks == 1 && summing && scale != 1.0);
}

/* A batch of allreduces of GPU tensors: one NCCL call, through the device's fusion buffer when
 * the batch has more than one tensor; or one host allreduce where NCCL cannot reduce them; or,
 * compressed by INT8, INT4 or TOPK, each tensor through host memory. */
static chorus_status execute_gpu_allreduce(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_status status = prepare_gpu(executor, requests, member_count, error, error_size);
    struct gpu_piece *pieces = scratch_reserve(&executor->pieces, member_count * sizeof *pieces);
    if (status != CHORUS_OK)
        return status;
    if (dtype_compression_sums_only(first->request.compression))
        return executor_gpu_allreduce_compressed(executor, responses, members, member_count,
                                                 requests, error, error_size);
    if (pieces == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; m < member_count; m++)
        pieces[m] = (struct gpu_piece){.input = requests[m]->input,
                                       .output = requests[m]->output,
                                       .count = requests[m]->count};
    if (response_reduces_on_host(executor, first))
        return executor_gpu_allreduce_on_host(executor, pieces, member_count,
                                     (chorus_dtype)first->request.dtype,
                                     (chorus_op)first->request.op, first->request.prescale,
                                     executor_output_factor(first), error, error_size);
    double started = clock_seconds();
    double scale = first->request.prescale * executor_output_factor(first);
    status = gpu_allreduce(executor->gpu, pieces, member_count, (chorus_dtype)first->request.dtype,
                           (chorus_op)first->request.op, scale, error, error_size);
    executor->last_algorithm = executor_nccl_backend.name;
    if (status == CHORUS_OK && member_count > 1 && executor->timeline != NULL) {
        double reduced = clock_seconds();
        struct batch_times times = {started, started, reduced, reduced};
        executor_timeline_batch(executor, responses, members, member_count,
                       executor_batch_elements(responses, members, member_count) *
                           chorus_dtype_size((chorus_dtype)first->request.dtype),
                       BATCH_ON_DEVICE, &times);
    }
    return status;
}

/* Broadcasts of GPU tensors from one root, each in its own output: one NCCL group. */
static chorus_status execute_gpu_broadcast(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    int root = responses[members[0]].request.root;
    chorus_status status = prepare_gpu(executor, requests, member_count, error, error_size);
    void **buffers = calloc(member_count, sizeof *buffers);
    size_t *bytes = calloc(member_count, sizeof *bytes);
    if (status == CHORUS_OK && (buffers == NULL || bytes == NULL))
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        bytes[m] = response_bytes(&responses[members[m]]);
        buffers[m] = requests[m]->output;
        if (executor->rank == root)
            status = executor_root_output(requests[m], bytes[m], true, error, error_size);
    }
    if (status == CHORUS_OK)
        status =
            gpu_broadcast(executor->gpu, buffers, bytes, member_count, root, error, error_size);
    executor->last_algorithm = executor_nccl_backend.name;
    free(buffers);
    free(bytes);
    return status;
}

/* Allgathers of GPU tensors, each into its own device output: one NCCL group. */
static chorus_status execute_gpu_allgather(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    size_t p = (size_t)executor->nranks;
    chorus_status status = prepare_gpu(executor, requests, member_count, error, error_size);
    struct gpu_gather *gathers = calloc(member_count, sizeof *gathers);
    size_t *layout = calloc(2 * p * member_count, sizeof *layout);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    if (status == CHORUS_OK && (gathers == NULL || layout == NULL || capacities == NULL))
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t *block_bytes = layout + 2 * p * m, *offsets = block_bytes + p;
        size_t total = executor_gather_layout(response, (int)p, block_bytes, offsets);
        void *output = executor_gathered_output(executor, response, requests[m], total, &capacities[m],
                                       error, error_size);
        if (output == NULL)
            status = CHORUS_ERR_OUT_OF_MEMORY;
        gathers[m] = (struct gpu_gather){requests[m]->input, output, block_bytes, offsets};
    }
    if (status == CHORUS_OK)
        status = gpu_allgather(executor->gpu, gathers, member_count, error, error_size);
    executor->last_algorithm = executor_nccl_backend.name;
    for (size_t m = 0; gathers != NULL && m < member_count; m++)
        executor_settle_gathered(&responses[members[m]], requests[m], gathers[m].recv, capacities[m],
                        status);
    free(gathers);
    free(layout);
    free(capacities);
    return status;
}

/* Reducescatters of GPU tensors of one dtype and op: one ncclReduceScatter (see
 * gpu_reducescatter), or where NCCL cannot reduce them an allreduce in host memory. */
static chorus_status execute_gpu_reducescatter(struct executor *executor,
                                               const struct wire_response *responses,
                                               const size_t *members, size_t member_count,
                                               struct request **requests, char *error,
                                               size_t error_size)
{
    const struct wire_response *first_response = &responses[members[0]];
    const struct wire_request *desc = &first_response->request;
    chorus_status status = prepare_gpu(executor, requests, member_count, error, error_size);
    if (status != CHORUS_OK)
        return status;
    size_t p = (size_t)executor->nranks, me = (size_t)executor->rank;
    chorus_dtype dtype = (chorus_dtype)desc->dtype;
    size_t element = chorus_dtype_size(dtype);
    struct gpu_scatter *scatters = calloc(member_count, sizeof *scatters);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    if (scatters == NULL || capacities == NULL)
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        size_t rows = (size_t)responses[members[m]].request.shape[0];
        size_t row_elements = rows > 0 ? requests[m]->count / rows : 0;
        void *output = executor_gathered_output(executor, &responses[members[m]], requests[m],
                                       part_length(rows, p, me) * row_elements * element,
                                       &capacities[m], error, error_size);
        if (output == NULL)
            status = CHORUS_ERR_OUT_OF_MEMORY;
        scatters[m] = (struct gpu_scatter){requests[m]->input, output, rows, row_elements};
    }
    if (status == CHORUS_OK && response_reduces_on_host(executor, first_response))
        status = executor_gpu_reducescatter_on_host(executor, scatters, member_count, dtype,
                                           (chorus_op)desc->op, desc->prescale,
                                           executor_output_factor(first_response), error, error_size);
    else if (status == CHORUS_OK)
        status = gpu_reducescatter(executor->gpu, scatters, member_count, dtype,
                                   (chorus_op)desc->op,
                                   desc->prescale * executor_output_factor(first_response), error,
                                   error_size);
    for (size_t m = 0; scatters != NULL && capacities != NULL && m < member_count; m++)
        executor_settle_output(&responses[members[m]], requests[m], scatters[m].output, capacities[m],
                      (int64_t)part_length(scatters[m].rows, p, me), status);
    executor->last_algorithm = executor_nccl_backend.name;
    free(scatters);
    free(capacities);
    return status;
}

/* An alltoall of a GPU tensor: the counts through the host transport, the rows by grouped
 * ncclSend/ncclRecv. */
static chorus_status execute_gpu_alltoall(struct executor *executor,
                                          const struct wire_response *responses,
                                          const size_t *members, size_t member_count,
                                          struct request **requests, char *error,
                                          size_t error_size)
{
    const struct wire_response *response = &responses[members[0]];
    struct request *request = requests[0];
    chorus_status status = prepare_gpu(executor, requests, member_count, error, error_size);
    if (status != CHORUS_OK)
        return status;
    struct alltoall_plan plan;
    void *output = NULL;
    size_t capacity = 0;
    status = executor_alltoall_plan(executor, response, request, &plan, error, error_size);
    if (status == CHORUS_OK) {
        output = executor_gathered_output(executor, response, request, plan.recv_total, &capacity, error,
                                 error_size);
        status = output != NULL ? CHORUS_OK : CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (status == CHORUS_OK) {
        struct gpu_exchange exchange = {.send = request->input,
                                        .send_bytes = plan.send_bytes,
                                        .send_offsets = plan.send_offsets,
                                        .recv = output,
                                        .recv_bytes = plan.recv_bytes,
                                        .recv_offsets = plan.recv_offsets};
        status = gpu_alltoall(executor->gpu, &exchange, error, error_size);
    }
    executor->last_algorithm = executor_nccl_backend.name;
    executor_alltoall_settle(response, request, &plan, output, capacity, status);
    executor_alltoall_plan_free(&plan);
    return status;
}

const struct backend executor_nccl_backend = {
    .name = "nccl",
    .run = {[CHORUS_ALLREDUCE] = execute_gpu_allreduce,
            [CHORUS_BROADCAST] = execute_gpu_broadcast,
            [CHORUS_ALLGATHER] = execute_gpu_allgather,
            [CHORUS_REDUCESCATTER] = execute_gpu_reducescatter,
            [CHORUS_ALLTOALL] = execute_gpu_alltoall},
};
