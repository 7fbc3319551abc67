/*
 * ordered.c — see ordered.h. The check is one allgather of a fixed record per member (the wire
 * codec's ordered record, wire.h), which on MPI is MPI's own (executor_exchange_records): 1-5 us
 * at 2 ranks here.
 */
#include "ordered.h"

#include "../negotiation/mismatch.h"

#include "../core/log.h"
#include "../negotiation/negotiated_fields.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one member submitted at a position, decoded from its record. */
struct ordered_record {
    uint64_t position;
    struct wire_request desc;
};

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

/* Where the members' records disagree: a malloc'd message naming the position, the field and the
 * job's ranks (as rank 0's mismatch messages do); NULL when they agree. As the negotiator does,
 * the common case (agreement) is decided from the values; only a disagreement is described,
 * which formats every field of every member. The records' names are `label` meanwhile. */
static char *find_disagreement(struct ordered *ordered, struct ordered_record *records,
                               int members, int process_set, const char *label)
{
    bool agree = true;
    for (int m = 0; m < members; m++)
        agree = agree && records[m].position == records[0].position &&
                negotiated_fields_agree(&records[0].desc, &records[m].desc);
    if (agree)
        return NULL;
    int job_size = ordered->runner->executor.nranks;
    int *ranks = member_ranks(ordered, process_set, members);
    struct wire_request *requests = calloc((size_t)job_size, sizeof *requests);
    char *message = NULL;
    for (int m = 1; ranks != NULL && message == NULL && m < members; m++)
        if (records[m].position != records[0].position)
            message = text_format("%s: ranks %d and %d are at different ordered positions (%" PRIu64
                                    " and %" PRIu64 "): an earlier ordered operation failed on one "
                                    "of them only",
                                    label, ranks[0], ranks[m], records[0].position,
                                    records[m].position);
    if (message == NULL && ranks != NULL && requests != NULL) {
        for (int m = 0; m < members; m++) {
            requests[ranks[m]] = records[m].desc;
            requests[ranks[m]].name = (char *)label;
        }
        message = mismatch_find(label, requests, job_size, &requests[ranks[0]]);
    }
    /* Out of memory, or values that differ but print alike: still never run them. */
    if (message == NULL)
        message = text_format("%s: the ranks submitted different operations", label);
    free(ranks);
    free(requests);
    return message;
}

/* The response every member runs: the agreed description, with what the members' records add
 * (an allgather's rows per member, whether an alltoall splits evenly everywhere). */
static bool build_response(struct wire_response *response, const struct request *request,
                           const struct ordered_record *records, int members)
{
    *response = (struct wire_response){.type = RESPONSE_EXECUTE,
                                       .status = CHORUS_OK,
                                       .contributors = (uint32_t)members,
                                       .agreed_at = clock_seconds()};
    if (!wire_request_copy(&response->request, &request->desc))
        return false;
    if (request->desc.collective == CHORUS_ALLGATHER) {
        response->first_dim_count = (uint32_t)members;
        response->first_dims = calloc((size_t)members, sizeof *response->first_dims);
        if (response->first_dims == NULL)
            return false;
        for (int m = 0; m < members; m++)
            response->first_dims[m] = records[m].desc.ndims > 0 ? records[m].desc.shape[0] : 0;
    }
    /* What the response says of every member's tensor. */
    for (int m = 0; m < members; m++) {
        if (!records[m].desc.even_split || records[m].desc.shape[0] != request->desc.shape[0])
            response->request.even_split = 0;
        if (!records[m].desc.in_shared_heap)
            response->request.in_shared_heap = 0;
    }
    return true;
}

/* The members' records from `bytes` (WIRE_ORDERED_RECORD_BYTES each) into `records`; a
 * record that does not decode is a fatal error (`error`). */
static chorus_status decode_records(const uint8_t *bytes, int members,
                                    struct ordered_record *records, char *error,
                                    size_t error_size)
{
    for (int m = 0; m < members; m++) {
        chorus_status status = wire_decode_ordered_record(
            bytes + (size_t)m * WIRE_ORDERED_RECORD_BYTES, &records[m].position, &records[m].desc,
            error, error_size);
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
    uint64_t position = 0;
    char label[CHORUS_MAX_NAME_LENGTH + 96];
    int members = executor->nranks;
    uint8_t mine[WIRE_ORDERED_RECORD_BYTES];
    uint8_t *all = malloc((size_t)members * WIRE_ORDERED_RECORD_BYTES);
    struct ordered_record *records = calloc((size_t)members, sizeof *records);
    if (all == NULL || records == NULL || !next_position(ordered, desc->process_set, &position)) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "%s \"%s\": out of memory", kind,
                    desc->name);
        pending_keep_ordered(ordered->pending, request); /* failed with the rest */
        goto out;
    }
    snprintf(label, sizeof label, "%s, ordered position %" PRIu64 " of process set %d",
             desc->name, position, desc->process_set);
    if (!wire_encode_ordered_record(position, desc, mine)) {
        finish_now(ordered, request, CHORUS_ERR_INTERNAL,
                   "the operation's description does not fit an ordered record");
        goto out;
    }
    char error[1024] = "";
    executor_bound_waits(executor, request->timeout_seconds);
    chorus_status status = executor_exchange_records(executor, mine, sizeof mine, all, error,
                                                     sizeof error);
    if (status == CHORUS_OK)
        status = decode_records(all, members, records, error, sizeof error);
    if (status != CHORUS_OK) {
        report_fail(report, status, "%s \"%s\": the ranks' check before it failed: %s", kind,
                    label, error);
        pending_keep_ordered(ordered->pending, request);
        goto out;
    }
    char *disagreement = find_disagreement(ordered, records, members, desc->process_set, label);
    struct wire_response response;
    if (disagreement != NULL) {
        LOG(LOG_WARNING, "ordered", "%s", disagreement);
        finish_now(ordered, request, CHORUS_ERR_MISMATCH, disagreement);
    } else if (!build_response(&response, request, records, members)) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "%s \"%s\": out of memory", kind, label);
        wire_response_free(&response);
        pending_keep_ordered(ordered->pending, request);
    } else {
        ordered->running = true;
        status = runner_run(ordered->runner, &response, 1, &request, error, sizeof error);
        ordered->running = false;
        if (status != CHORUS_OK)
            report_fail(report, status, "%s", error);
        wire_response_free(&response);
        ordered->run_count++;
    }
    free(disagreement);
out:
    executor_bound_waits(executor, 0);
    free(all);
    free_records(records, members);
}
