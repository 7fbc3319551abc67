/*
 * ordered.c — see ordered.h. The check is one allgather of a block per member: the wire codec's
 * ordered record (wire.h), and behind it, for a small allreduce of host memory, the member's
 * contribution, so that the check is the whole collective (each member reduces every member's
 * contribution in member order, as the host's slots do: all get the same bits). Among few
 * members the blocks go point to point, each as long as what it holds; among more, MPI's own
 * allgather of fixed blocks. Across hosts this halves a small allreduce's exchanges (the check,
 * then the algorithm).
 */
#include "ordered.h"

#include "../collectives/reduce.h"
#include "../negotiation/mismatch.h"

#include "../core/log.h"
#include "../negotiation/negotiated_fields.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ordered_init(struct ordered *ordered, struct runner *runner, struct pending *pending)
{
    *ordered = (struct ordered){.runner = runner, .pending = pending};
}

void ordered_release(struct ordered *ordered)
{
    if (ordered->run_count > 0)
        LOG(LOG_INFO, "ordered", "%zu ordered operations run", ordered->run_count);
    free(ordered->positions);
    ordered->positions = NULL;
    ordered->position_capacity = 0;
}

/* The position of the next ordered operation of `process_set`, counted from 0; false when out
 * of memory. */
static bool next_position(struct ordered *ordered, int process_set, uint64_t *position)
{
    size_t id = (size_t)process_set;
    if (id >= ordered->position_capacity) {
        size_t capacity = id + 16;
        uint64_t *grown = realloc(ordered->positions, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        memset(grown + ordered->position_capacity, 0,
               (capacity - ordered->position_capacity) * sizeof *grown);
        ordered->positions = grown;
        ordered->position_capacity = capacity;
    }
    *position = ordered->positions[id]++;
    return true;
}

static void finish_now(struct ordered *ordered, struct request *request, chorus_status status,
                       const char *message)
{
    pending_finish(ordered->pending, request, status, message);
}

/* The job ranks of the set's members, in set order (the set's rank m is ranks[m]); NULL when
 * out of memory. */
static int *member_ranks(struct ordered *ordered, int process_set, int members)
{
    int *ranks = calloc((size_t)members, sizeof *ranks);
    if (ranks == NULL)
        return NULL;
    struct chorus_context *context = ordered->runner->context;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set =
        process_set != 0 ? process_set_find(&context->process_sets, process_set) : NULL;
    for (int m = 0; m < members; m++)
        ranks[m] = set != NULL && m < set->size ? set->ranks[m] : m;
    pthread_mutex_unlock(&context->lock);
    return ranks;
}

/* Where the members' records disagree: a malloc'd message naming the position, the field and
 * the job's ranks (mismatch_ordered); NULL when they agree. */
static char *find_disagreement(struct ordered *ordered, struct ordered_record *records,
                               int members, int process_set, const char *label)
{
    if (mismatch_ordered_agree(records, members))
        return NULL;
    int *ranks = member_ranks(ordered, process_set, members);
    char *message = ranks != NULL ? mismatch_ordered(label, records, members, ranks,
                                                     ordered->runner->executor.nranks)
                                  : text_format("%s: the ranks submitted different operations",
                                                label);
    free(ranks);
    return message;
}

/* What the members' records add to the response: an allgather's rows per member, whether an
 * alltoall splits evenly everywhere, whether every allreduce's output lies in the shared heap.
 * False when out of memory. */
static bool agreement_of_records(struct ordered_agreement *agreed, uint64_t position,
                                 const struct request *request,
                                 const struct ordered_record *records, int members)
{
    *agreed = (struct ordered_agreement){.position = position, .members = (uint32_t)members,
                                         .even_split = 1, .in_shared_heap = 1};
    if (request->desc.collective == CHORUS_ALLGATHER) {
        agreed->first_dims = calloc((size_t)members, sizeof *agreed->first_dims);
        if (agreed->first_dims == NULL)
            return false;
        for (int m = 0; m < members; m++)
            agreed->first_dims[m] = records[m].desc.ndims > 0 ? records[m].desc.shape[0] : 0;
    }
    struct wire_request combined = request->desc; /* shallow: only its flags change */
    combined.even_split = combined.in_shared_heap = 1;
    for (int m = 0; m < members; m++)
        negotiated_fields_combine(&combined, &request->desc, &records[m].desc);
    agreed->even_split = combined.even_split;
    agreed->in_shared_heap = combined.in_shared_heap;
    return true;
}

/* Runs an operation the members agreed on, labelled `label`. */
static void run_agreed(struct ordered *ordered, struct request *request,
                       const struct ordered_agreement *agreed, const char *label,
                       struct coord_report *report)
{
    struct wire_response response;
    char error[1024] = "";
    if (!ordered_agreement_response(&response, &request->desc, agreed)) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "%s \"%s\": out of memory",
                    request_collective_name(&request->desc), label);
        wire_response_free(&response);
        pending_keep_ordered(ordered->pending, request);
        return;
    }
    ordered->running = true;
    chorus_status status = runner_run(ordered->runner, &response, 1, &request, error,
                                      sizeof error);
    ordered->running = false;
    if (status != CHORUS_OK)
        report_fail(report, status, "%s", error);
    wire_response_free(&response);
    ordered->run_count++;
}

/* A member's block of the check: its record, then its contribution where the operation's data
 * rides along (rides_along). Among few members (executor_records_may_vary) a block is as long
 * as what it holds, up to 4 KiB of data (as the negotiated path's rounds and the host's slots
 * carry). Among more, the check is MPI's allgather, for which every ordered operation's block
 * has one size, so that members that disagree on the operation still agree on the allgather:
 * 256 bytes of data hold the scalars and short vectors that small allreduces carry (losses,
 * metrics, norms). */
#define FEW_MEMBERS_DATA_BYTES 4096
#define MANY_MEMBERS_DATA_BYTES 256

/* Whether the operation's data rides in the check's blocks: an allreduce of host memory that
 * fits, uncompressed and not Adasum (what the host's slots take too). A function of the
 * description and the members alone, so that members that agree on it decide alike. */
static bool rides_along(const struct request *request, size_t data_capacity)
{
    const struct wire_request *desc = &request->desc;
    return desc->collective == CHORUS_ALLREDUCE && desc->device == DEVICE_HOST &&
           desc->compression == CHORUS_COMPRESSION_NONE && desc->op != CHORUS_ADASUM &&
           request->count * chorus_dtype_size((chorus_dtype)desc->dtype) <= data_capacity;
}

/* The allreduce from the members' blocks, `stride` bytes apart: each member's contribution
 * (its prescale applied before it was sent), reduced in member order into the output, times
 * the factor (postscale, an average's division). */
static void reduce_blocks(struct request *request, const uint8_t *blocks, size_t stride,
                          int members)
{
    const struct wire_request *desc = &request->desc;
    reduce_strided_scaled(request->output, blocks + WIRE_ORDERED_RECORD_BYTES, stride, members,
                          request->count, (chorus_dtype)desc->dtype,
                          desc->op == CHORUS_AVERAGE ? CHORUS_SUM : (chorus_op)desc->op,
                          request_output_factor(desc, (uint32_t)members));
}

/* The members' records from their blocks into `records`; a record that does not decode is a
 * fatal error (`error`). */
static chorus_status decode_records(const uint8_t *blocks, size_t stride, int members,
                                    struct ordered_record *records, char *error,
                                    size_t error_size)
{
    for (int m = 0; m < members; m++) {
        chorus_status status = wire_decode_ordered_record(
            blocks + (size_t)m * stride, &records[m].position, &records[m].desc, error,
            error_size);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}

static void free_records(struct ordered_record *records, int members)
{
    for (int m = 0; records != NULL && m < members; m++)
        wire_request_free(&records[m].desc);
    free(records);
}

void ordered_run(struct ordered *ordered, struct request *request, struct coord_report *report)
{
    const struct wire_request *desc = &request->desc;
    const char *kind = chorus_collective_name(desc->collective);
    struct executor *executor = runner_executor_of(ordered->runner, desc->process_set);
    if (executor == NULL) {
        finish_now(ordered, request, CHORUS_ERR_INVALID_ARGUMENT,
                   "this rank is not a member of the operation's process set (removed?)");
        return;
    }
    if (executor->joined) {
        finish_now(ordered, request, CHORUS_ERR_INVALID_ARGUMENT,
                   "ordered operations cannot run while this rank has joined (chorus_join)");
        return;
    }
    char label[CHORUS_MAX_NAME_LENGTH + 96];
    executor_bound_waits(executor, request->timeout_seconds);
    if (request->agreed != NULL) { /* its lane checked it */
        mismatch_ordered_label(label, sizeof label, desc->name, request->agreed->position,
                               desc->process_set);
        run_agreed(ordered, request, request->agreed, label, report);
        executor_bound_waits(executor, 0);
        return;
    }
    uint64_t position = 0;
    int members = executor->nranks;
    bool few = executor_records_may_vary(executor);
    size_t data_capacity = few ? FEW_MEMBERS_DATA_BYTES : MANY_MEMBERS_DATA_BYTES;
    size_t stride = WIRE_ORDERED_RECORD_BYTES + data_capacity;
    bool inline_data = rides_along(request, data_capacity);
    size_t data_bytes = request->count * chorus_dtype_size((chorus_dtype)desc->dtype);
    uint8_t mine[WIRE_ORDERED_RECORD_BYTES + FEW_MEMBERS_DATA_BYTES] = {0};
    uint8_t *all = malloc((size_t)members * stride);
    struct ordered_record *records = calloc((size_t)members, sizeof *records);
    struct ordered_agreement agreed = {0};
    if (all == NULL || records == NULL || !next_position(ordered, desc->process_set, &position)) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "%s \"%s\": out of memory", kind,
                    desc->name);
        pending_keep_ordered(ordered->pending, request); /* failed with the rest */
        goto out;
    }
    mismatch_ordered_label(label, sizeof label, desc->name, position, desc->process_set);
    if (!wire_encode_ordered_record(position, desc, mine)) {
        finish_now(ordered, request, CHORUS_ERR_INTERNAL,
                   "the operation's description does not fit an ordered record");
        goto out;
    }
    if (inline_data && request->count != 0) {
        memcpy(mine + WIRE_ORDERED_RECORD_BYTES, request->input, data_bytes);
        reduce_scale_buffer(mine + WIRE_ORDERED_RECORD_BYTES, request->count,
                            (chorus_dtype)desc->dtype, desc->prescale);
    }
    char error[1024] = "";
    size_t sent = WIRE_ORDERED_RECORD_BYTES + (inline_data ? data_bytes : 0);
    chorus_status status =
        few ? executor_exchange_varying_records(executor, mine, sent, stride, all, error,
                                                sizeof error)
            : executor_exchange_records(executor, mine, stride, all, error, sizeof error);
    if (status == CHORUS_OK)
        status = decode_records(all, stride, members, records, error, sizeof error);
    if (status != CHORUS_OK) {
        report_fail(report, status, "%s \"%s\": the ranks' check before it failed: %s", kind,
                    label, error);
        pending_keep_ordered(ordered->pending, request);
        goto out;
    }
    char *disagreement = find_disagreement(ordered, records, members, desc->process_set, label);
    if (disagreement != NULL) {
        LOG(LOG_WARNING, "ordered", "%s", disagreement);
        finish_now(ordered, request, CHORUS_ERR_MISMATCH, disagreement);
    } else if (inline_data) { /* the check was the collective */
        if (request->count != 0)
            reduce_blocks(request, all, stride, members);
        ordered->run_count++;
        finish_now(ordered, request, CHORUS_OK, NULL);
    } else if (!agreement_of_records(&agreed, position, request, records, members)) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "%s \"%s\": out of memory", kind, label);
        pending_keep_ordered(ordered->pending, request);
    } else {
        run_agreed(ordered, request, &agreed, label, report);
    }
    free(disagreement);
out:
    executor_bound_waits(executor, 0);
    free(agreed.first_dims);
    free(all);
    free_records(records, members);
}
