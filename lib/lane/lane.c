/*
 * lane.c — see lane.h. One phase of the slots per operation: each member writes what it
 * submitted (and, where the lane may run it, its payload) into its line and publishes it, waits
 * for every member's, and checks they agree; then either takes its result from the slots or
 * hands the operation to the background thread. Members that disagree spend a second phase on
 * their full records, for the message.
 */
#include "lane.h"

#include "../collectives/small_collectives.h"
#include "../core/log.h"
#include "../core/output_pool.h"
#include "../negotiation/mismatch.h"
#include "../negotiation/negotiated_fields.h"
#include "../negotiation/wire.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ----- a lane's life ---------------------------------------------------------------------- */

size_t lane_slot_capacity(size_t limit)
{
    return limit > WIRE_ORDERED_RECORD_BYTES ? limit : WIRE_ORDERED_RECORD_BYTES;
}

/* A lane without slots yet: its turn, its members, its settings. NULL when out of memory. */
static struct lane *lane_new(struct chorus_context *context, int process_set, int members,
                             const int *job_ranks, size_t limit, double timeout_seconds)
{
    struct lane *lane = calloc(1, sizeof *lane);
    int *ranks = calloc((size_t)members, sizeof *ranks);
    if (lane == NULL || ranks == NULL) {
        free(lane);
        free(ranks);
        return NULL;
    }
    for (int m = 0; m < members; m++)
        ranks[m] = job_ranks != NULL ? job_ranks[m] : m;
    pthread_mutex_init(&lane->turn, NULL);
    lane->members = (struct process_set){.id = process_set, .size = members, .ranks = ranks};
    lane->job_size = context->size;
    lane->limit = limit;
    lane->timeout_seconds = timeout_seconds;
    lane->context = context;
    lane->executor_comm = MPI_COMM_NULL;
    atomic_init(&lane->users, 0);
    atomic_init(&lane->closed, false);
    return lane;
}

struct lane *lane_create(struct chorus_context *context, int process_set, int members,
                         const int *job_ranks, const struct small_segment *segment, size_t limit,
                         double timeout_seconds)
{
    struct lane *lane = lane_new(context, process_set, members, job_ranks, limit,
                                 timeout_seconds);
    struct small_segment *local =
        segment == NULL ? small_segments_create_local(1, lane_slot_capacity(limit)) : NULL;
    if (lane == NULL || (segment == NULL && local == NULL)) {
        small_segments_destroy_local(local);
        lane_destroy(lane, false);
        return NULL;
    }
    lane->segment = segment != NULL ? *segment : local[0];
    lane->local = local;
    return lane;
}

/* The lane's executor reports here (its owner is the lane). */
static void executor_finished(void *owner, struct request *request, chorus_status status,
                              const char *message)
{
    (void)request; /* the lane's own, on its stack */
    struct lane *lane = owner;
    if (status != CHORUS_OK && lane->running->status == CHORUS_OK) {
        lane->running->status = status;
        lane->running->message = text_format("%s", message != NULL ? message : "");
    }
}

static void executor_failed(void *owner, chorus_status status, const char *message)
{
    struct lane *lane = owner;
    atomic_store(&lane->closed, true);
    context_report_failure(lane->context, status, message);
}

static chorus_status executor_peer_failed(void *owner, char *error, size_t error_size)
{
    struct lane *lane = owner;
    chorus_status stopped = atomic_load(&lane->context->stopped);
    if (stopped != CHORUS_OK) {
        snprintf(error, error_size, "%s", lane->context->stopped_message);
        return stopped;
    }
    chorus_status failed = atomic_load(&lane->context->user_failure);
    if (failed != CHORUS_OK) {
        snprintf(error, error_size, "%s", lane->context->user_failure_message);
        return failed;
    }
    return CHORUS_OK;
}

/* The lane's executor over a duplicate of `comm`, with a host segment of its own: collective
 * over `comm`, and the same answer on every member. False when it could not be made (the lane
 * is then not opened). */
static bool open_executor(struct lane *lane, MPI_Comm comm, const struct executor_settings *settings)
{
    int rank = 0, members = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &members);
    lane->params = *settings->params;
    lane->settings = *settings;
    lane->settings.params = &lane->params;
    if (MPI_Comm_dup(comm, &lane->executor_comm) != MPI_SUCCESS)
        lane->executor_comm = MPI_COMM_NULL;
    lane->executor = calloc(1, sizeof *lane->executor);
    int ready = lane->executor != NULL && lane->executor_comm != MPI_COMM_NULL;
    if (MPI_Allreduce(MPI_IN_PLACE, &ready, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS || !ready) {
        free(lane->executor);
        lane->executor = NULL;
        return false;
    }
    MPI_Comm_set_errhandler(lane->executor_comm, MPI_ERRORS_RETURN);
    struct executor *executor = lane->executor;
    executor_init_detached(executor, &lane->settings, &lane->executor_comm, rank, members);
    executor->owner = lane;
    executor->finish = executor_finished;
    executor->fatal_error = executor_failed;
    executor->peer_failure = executor_peer_failed;
    char why[256] = "";
    /* Without its segment it still runs, over MPI. */
    if (executor_prepare_set(executor, why, sizeof why) != CHORUS_OK)
        LOG(LOG_WARNING, "lane", "process set %d: %s; the lane's larger operations run over "
            "MPI alone", lane->members.id, why);
    return true;
}

struct lane *lane_open_mpi(struct chorus_context *context, int process_set, const int *job_ranks,
                           const void *comm_pointer, const void *node_comm_pointer,
                           const struct executor_settings *settings, bool own_executor,
                           char *error, size_t error_size)
{
    MPI_Comm comm;
    memcpy(&comm, comm_pointer, sizeof comm);
    int members = 1;
    MPI_Comm_size(comm, &members);
    const struct chorus_params *params = settings->params;
    struct lane *lane = lane_new(context, process_set, members, job_ranks, params->small_limit,
                                 params->timeout_seconds);
    /* Every member must have a lane, or none: one left without would take another path. */
    int made = lane != NULL;
    if (MPI_Allreduce(MPI_IN_PLACE, &made, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS || !made) {
        lane_destroy(lane, false);
        snprintf(error, error_size, "out of memory for the lane on a rank");
        return NULL;
    }
    if (small_segment_create_mpi(&lane->segment, node_comm_pointer,
                                 lane_slot_capacity(params->small_limit), settings->oversubscribed,
                                 error, error_size) != CHORUS_OK) {
        lane_destroy(lane, false);
        return NULL;
    }
    lane->segment_mpi = true;
    int everywhere = own_executor; /* the executor's making is collective: all or none */
    if (MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        everywhere = 0;
    if (everywhere && !open_executor(lane, comm, settings)) {
        snprintf(error, error_size, "the lane's executor could not be made on a rank");
        lane_destroy(lane, false);
        return NULL;
    }
    return lane;
}

bool lane_enter(struct lane *lane)
{
    atomic_fetch_add(&lane->users, 1);
    if (!atomic_load(&lane->closed))
        return true;
    atomic_fetch_sub(&lane->users, 1);
    return false;
}

void lane_leave(struct lane *lane)
{
    atomic_fetch_sub(&lane->users, 1);
}

void lane_close(struct lane *lane)
{
    atomic_store(&lane->closed, true);
    /* A thread inside is at most waiting for its peers, and looks at `closed` within a
     * millisecond or so. */
    while (atomic_load(&lane->users) != 0)
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000}, NULL);
}

void lane_destroy(struct lane *lane, bool failed)
{
    if (lane == NULL)
        return;
    lane_close(lane);
    /* Collective frees in one order on every member: the executor's segment, its
     * communicator, the slots. After a failure MPI keeps them (retained.h). */
    if (lane->executor != NULL) {
        lane->executor->aborted = lane->executor->aborted || failed;
        bool kept = lane->executor->aborted;
        executor_release(lane->executor);
        if (!kept && lane->executor_comm != MPI_COMM_NULL)
            MPI_Comm_free(&lane->executor_comm);
        free(lane->executor);
    } else if (lane->executor_comm != MPI_COMM_NULL) {
        MPI_Comm_free(&lane->executor_comm);
    }
    if (lane->segment_mpi)
        small_segment_release(&lane->segment, failed);
    small_segments_destroy_local(lane->local);
    pthread_mutex_destroy(&lane->turn);
    free(lane->members.ranks);
    free(lane);
}

/* ----- what a member publishes ------------------------------------------------------------ */

/* The signature: what the lane reads of a description without the digest, packed; the top
 * byte holds flags of the member's own, which the members need not share. */
#define OWN_FLAGS_SHIFT 56
#define AGREED_BITS ((UINT64_C(1) << OWN_FLAGS_SHIFT) - 1)
enum own_flags { OWN_EVEN_SPLIT = 1, OWN_IN_SHARED_HEAP = 2 };

static uint64_t signature_of(const struct wire_request *desc)
{
    uint64_t own = (desc->even_split ? OWN_EVEN_SPLIT : 0u) |
                   (desc->in_shared_heap ? OWN_IN_SHARED_HEAP : 0u);
    return (uint64_t)desc->collective | (uint64_t)desc->dtype << 8 | (uint64_t)desc->op << 16 |
           (uint64_t)desc->ndims << 24 | (uint64_t)desc->compression << 32 |
           (uint64_t)(desc->device == DEVICE_HOST) << 40 | own << OWN_FLAGS_SHIFT;
}

/* Members of an allgather or an alltoall may send different rows: their count is rows. */
static bool counts_rows(const struct wire_request *desc)
{
    return desc->collective == CHORUS_ALLGATHER || desc->collective == CHORUS_ALLTOALL;
}

/* What a member moves through its slot for `count` (elements, or rows). */
static size_t payload_bytes(const struct wire_request *desc, uint64_t count)
{
    return desc->collective == CHORUS_ALLGATHER
               ? (size_t)count * allgather_row_bytes(desc)
               : (size_t)count * chorus_dtype_size((chorus_dtype)desc->dtype);
}

/* Whether the lane runs an operation so described when no member moves more than `largest`
 * bytes: the same answer on every member, which all know every member's count. */
static bool runs_here(const struct lane *lane, const struct wire_request *desc, size_t largest)
{
    bool collective = desc->collective == CHORUS_ALLREDUCE ||
                      desc->collective == CHORUS_BROADCAST ||
                      desc->collective == CHORUS_ALLGATHER ||
                      desc->collective == CHORUS_REDUCESCATTER ||
                      desc->collective == COLLECTIVE_BARRIER;
    bool reduces =
        desc->collective == CHORUS_ALLREDUCE || desc->collective == CHORUS_REDUCESCATTER;
    return collective && desc->device == DEVICE_HOST &&
           (desc->collective != CHORUS_ALLREDUCE ||
            desc->compression == CHORUS_COMPRESSION_NONE) &&
           !(reduces && desc->op == CHORUS_ADASUM) && largest <= lane->limit;
}

/* The member that is job rank `rank` (a broadcast's root names a job rank), or -1. */
static int member_of(const struct lane *lane, int rank)
{
    return process_set_rank_of(&lane->members, rank);
}

static void stage(struct lane *lane, const struct lane_operation *operation, size_t bytes)
{
    const struct wire_request *desc = operation->desc;
    struct small_segment *segment = &lane->segment;
    switch (desc->collective) {
    case CHORUS_ALLREDUCE:
    case CHORUS_REDUCESCATTER:
        small_allreduce_stage(segment, operation->input, operation->count,
                              (chorus_dtype)desc->dtype, desc->prescale);
        break;
    case CHORUS_BROADCAST:
        if (member_of(lane, desc->root) == segment->local_rank)
            small_broadcast_stage(segment, operation->input, bytes);
        break;
    case CHORUS_ALLGATHER:
        small_allgather_stage(segment, operation->input, bytes);
        break;
    case COLLECTIVE_BARRIER: /* one flag byte, if any (chorus_barrier's) */
        small_next_line(segment)->payload[0] =
            operation->input != NULL ? *(const uint8_t *)operation->input : 0;
        break;
    }
}

/* The digest of what `desc`'s collective compares (negotiated_fields_digest), reused where
 * everything but the name is the same bytes as last time. Only for descriptions without texts
 * but the name (no group, no members), as ordered operations are: bytes equal then means values
 * equal. */
static uint64_t digest_of(struct lane *lane, const struct wire_request *desc)
{
    static_assert(offsetof(struct wire_request, name) == 0, "the name comes first");
    const size_t skip = sizeof desc->name;
    bool textless = (desc->group == NULL || desc->group[0] == '\0') && desc->member_count == 0;
    if (textless && lane->digest_known &&
        memcmp((const char *)desc + skip, (const char *)&lane->digested + skip,
               sizeof *desc - skip) == 0)
        return lane->digest;
    lane->digest = negotiated_fields_digest(desc);
    lane->digested = *desc;
    lane->digest_known = textless;
    return lane->digest;
}

/* ----- when it does not go well ------------------------------------------------------------ */

static bool lane_stopped(void *context)
{
    struct lane *lane = context;
    return atomic_load_explicit(&lane->closed, memory_order_relaxed) ||
           atomic_load_explicit(&lane->context->stopped, memory_order_relaxed) != CHORUS_OK ||
           atomic_load_explicit(&lane->context->user_failure, memory_order_relaxed) !=
               CHORUS_OK;
}

/* Fails the operation because the wait for the members ended early. A timeout is fatal: the
 * members are out of step, and the instance stops (context_report_failure); so is a stop, for
 * this lane, whose phases no longer match the peers'. */
static void fail_waiting(struct lane *lane, enum small_wait_end end, const char *label,
                         const struct wire_request *desc, double timeout,
                         const char *timeout_origin, struct lane_result *result)
{
    struct chorus_context *context = lane->context;
    const char *kind = request_collective_name(desc);
    atomic_store(&lane->closed, true);
    if (end == SMALL_WAIT_TIMEOUT) {
        int late = lane->segment.late_rank;
        result->status = CHORUS_ERR_TIMEOUT;
        result->message = text_format(
            "%s \"%s\": did not complete within the timeout of %g s (%s): rank %d is stopped, "
            "dead, far behind or never called it",
            kind, label, timeout, timeout_origin, late >= 0 ? lane->members.ranks[late] : -1);
        context_report_failure(context, result->status,
                               result->message != NULL ? result->message : "lane timeout");
        return;
    }
    chorus_status stopped = atomic_load(&context->stopped);
    chorus_status failed = atomic_load(&context->user_failure);
    if (stopped != CHORUS_OK) {
        result->status = stopped;
        result->message = text_format("%s \"%s\": %s", kind, label, context->stopped_message);
    } else if (failed != CHORUS_OK) {
        result->status = failed;
        result->message = text_format("%s \"%s\": stopped: %s", kind, label,
                                      context->user_failure_message);
    } else {
        result->status = CHORUS_ERR_SHUTDOWN;
        result->message = text_format("%s \"%s\": its process set was removed while it ran",
                                      kind, label);
    }
}

/* Members that submitted different collectives (a barrier among them, which has no record):
 * the message names them from their lines alone, as mismatch_find words a collective mismatch.
 * A lane's members are always at the same position: a member that leaves the phases out of
 * step closes its lane. */
static void describe_other_collectives(struct lane *lane, const char *label,
                                       struct lane_result *result)
{
    const struct small_segment *segment = &lane->segment;
    struct wire_request *requests = calloc((size_t)lane->job_size, sizeof *requests);
    if (requests != NULL) {
        for (int m = 0; m < segment->local_size; m++) {
            struct wire_request *request = &requests[lane->members.ranks[m]];
            request->name = (char *)label;
            request->collective = (uint8_t)(small_line_of(segment, m)->signature & 0xff);
        }
        result->message = mismatch_find(label, requests, lane->job_size,
                                        &requests[lane->members.ranks[segment->local_rank]]);
    }
    free(requests);
    if (result->message == NULL)
        result->message = text_format("%s: the ranks submitted different operations", label);
    result->status = CHORUS_ERR_MISMATCH;
    if (result->message != NULL)
        LOG(LOG_WARNING, "ordered", "%s", result->message);
}

/* The members disagree (every one of them saw it in the same phase): in one more phase each
 * publishes its full record, and every member words the same message from all of them. */
static void describe_mismatch(struct lane *lane, uint64_t position, const char *label,
                              const struct wire_request *desc, double timeout,
                              const char *timeout_origin, struct lane_result *result)
{
    struct small_segment *segment = &lane->segment;
    if (!wire_encode_ordered_record(position, desc, small_next_data(segment)))
        memset(small_next_data(segment), 0, WIRE_ORDERED_RECORD_BYTES);
    small_publish(segment);
    enum small_wait_end end = small_wait_all(segment, timeout, lane_stopped, lane);
    if (end != SMALL_WAIT_DONE) {
        fail_waiting(lane, end, label, desc, timeout, timeout_origin, result);
        return;
    }
    int members = segment->local_size;
    struct ordered_record *records = calloc((size_t)members, sizeof *records);
    bool decoded = records != NULL;
    char error[256];
    for (int m = 0; decoded && m < members; m++)
        decoded = wire_decode_ordered_record(small_data_of(segment, m), &records[m].position,
                                             &records[m].desc, error,
                                             sizeof error) == CHORUS_OK;
    result->status = CHORUS_ERR_MISMATCH;
    result->message = decoded ? mismatch_ordered(label, records, members, lane->members.ranks,
                                                 lane->job_size)
                              : text_format("%s: the ranks submitted different operations",
                                            label);
    if (result->message != NULL)
        LOG(LOG_WARNING, "ordered", "%s", result->message);
    for (int m = 0; records != NULL && m < members; m++)
        wire_request_free(&records[m].desc);
    free(records);
}

/* ----- when it goes well ------------------------------------------------------------------ */

/* The result from the slots. */
static void take(struct lane *lane, const struct lane_operation *operation,
                 struct lane_result *result)
{
    const struct wire_request *desc = operation->desc;
    const struct small_segment *segment = &lane->segment;
    int members = segment->local_size, me = segment->local_rank;
    chorus_dtype dtype = (chorus_dtype)desc->dtype;
    chorus_op op = (chorus_op)desc->op;
    size_t element = chorus_dtype_size(dtype);
    double factor = request_output_factor(desc, (uint32_t)members);
    chorus_tensor output = {.dtype = dtype, .ndims = desc->ndims};
    memcpy(output.shape, desc->shape, sizeof output.shape);
    size_t bytes = 0;
    switch (desc->collective) {
    case COLLECTIVE_BARRIER: /* the phase was all of it; the flags' OR where asked */
        if (operation->output != NULL) {
            uint8_t any = 0;
            for (int m = 0; m < members; m++)
                any |= small_line_of(segment, m)->payload[0];
            *(uint8_t *)operation->output = any;
        }
        return;
    case CHORUS_ALLREDUCE:
        small_allreduce_take(segment, operation->output, operation->count, dtype, op, factor);
        return;
    case CHORUS_BROADCAST: {
        int root = member_of(lane, desc->root);
        if (root == me && operation->output != operation->input && operation->count != 0)
            memcpy(operation->output, operation->input, operation->count * element);
        small_broadcast_take(segment, operation->output, operation->count * element, root);
        return;
    }
    case CHORUS_ALLGATHER: {
        int64_t rows = 0;
        for (int m = 0; m < members; m++)
            rows += (int64_t)small_line_of(segment, m)->count;
        output.shape[0] = rows;
        bytes = (size_t)rows * allgather_row_bytes(desc);
        break;
    }
    case CHORUS_REDUCESCATTER: {
        size_t rows = (size_t)desc->shape[0];
        output.shape[0] = (int64_t)part_length(rows, (size_t)members, (size_t)me);
        bytes = (size_t)output.shape[0] * allgather_row_bytes(desc);
        break;
    }
    }
    output.data = output_pool_take(bytes, &result->output_capacity);
    if (output.data == NULL) {
        result->status = CHORUS_ERR_OUT_OF_MEMORY;
        result->message = text_format("%s \"%s\": cannot allocate %zu bytes of output",
                                      request_collective_name(desc), desc->name, bytes);
        return;
    }
    if (desc->collective == CHORUS_ALLGATHER) {
        small_allgather_take(segment, output.data, allgather_row_bytes(desc));
    } else {
        size_t rows = (size_t)desc->shape[0], row_elements = allgather_row_bytes(desc) / element;
        small_reducescatter_take(segment, output.data,
                                 part_start(rows, (size_t)members, (size_t)me) * row_elements,
                                 (size_t)output.shape[0] * row_elements, operation->count, dtype,
                                 op, factor);
    }
    result->output = output;
}

/* What the members agreed, for the background thread, which runs the operation. */
static void agree_elsewhere(struct lane *lane, const struct wire_request *desc,
                            uint64_t position, uint8_t own_flags, bool same_counts,
                            struct lane_result *result)
{
    const struct small_segment *segment = &lane->segment;
    int members = segment->local_size;
    struct ordered_agreement *agreed = calloc(1, sizeof *agreed);
    int64_t *rows = desc->collective == CHORUS_ALLGATHER
                        ? calloc((size_t)members, sizeof *rows)
                        : NULL;
    if (agreed == NULL || (desc->collective == CHORUS_ALLGATHER && rows == NULL)) {
        free(agreed);
        free(rows);
        result->status = CHORUS_ERR_OUT_OF_MEMORY;
        result->message = text_format("%s \"%s\": out of memory", request_collective_name(desc),
                                      desc->name);
        return;
    }
    for (int m = 0; rows != NULL && m < members; m++)
        rows[m] = (int64_t)small_line_of(segment, m)->count;
    *agreed = (struct ordered_agreement){
        .position = position,
        .members = (uint32_t)members,
        .first_dims = rows,
        .even_split = (own_flags & OWN_EVEN_SPLIT) != 0 && same_counts,
        .in_shared_heap = (own_flags & OWN_IN_SHARED_HEAP) != 0,
    };
    result->agreed = agreed;
}

/* An operation the slots do not take, on the lane's executor, as the background thread would
 * run it: the members agreed on it (`agreed`). */
static void run_on_executor(struct lane *lane, const struct lane_operation *operation,
                            const struct ordered_agreement *agreed, struct lane_result *result)
{
    /* The executor runs over the set's communicator: a broadcast's root is a member there. */
    struct wire_request desc = *operation->desc;
    if (desc.collective == CHORUS_BROADCAST)
        desc.root = member_of(lane, desc.root);
    struct wire_response response;
    if (!ordered_agreement_response(&response, &desc, agreed)) {
        wire_response_free(&response);
        result->status = CHORUS_ERR_OUT_OF_MEMORY;
        result->message = text_format("%s \"%s\": out of memory",
                                      request_collective_name(operation->desc),
                                      operation->desc->name);
        return;
    }
    struct request request = {.desc = desc,
                              .input = (void *)operation->input,
                              .output = operation->output,
                              .splits = (int64_t *)operation->splits,
                              .count = operation->count,
                              .error_feedback = operation->error_feedback,
                              .handle = operation->handle,
                              .ordered = true,
                              .timeout_seconds = operation->timeout_seconds};
    struct request *taken = &request;
    char error[1024] = "";
    lane->running = result;
    executor_bound_waits(lane->executor, operation->timeout_seconds);
    chorus_status status = executor_run(lane->executor, &response, 1, &taken, error, sizeof error);
    executor_bound_waits(lane->executor, 0);
    lane->running = NULL;
    if (status != CHORUS_OK && result->status == CHORUS_OK) {
        result->status = status;
        result->message = text_format("%s", error);
    }
    wire_response_free(&response);
}

enum lane_outcome lane_run(struct lane *lane, const struct lane_operation *operation,
                           struct lane_result *result)
{
    *result = (struct lane_result){.status = CHORUS_OK};
    const struct wire_request *desc = operation->desc;
    struct small_segment *segment = &lane->segment;
    double timeout =
        operation->timeout_seconds > 0 ? operation->timeout_seconds : lane->timeout_seconds;
    const char *timeout_origin =
        operation->timeout_seconds > 0 ? "the operation's timeout" : "CHORUS_TIMEOUT_SECONDS";
    enum lane_outcome outcome = LANE_RAN;
    pthread_mutex_lock(&lane->turn);
    uint64_t position = lane->position++;
    char label[CHORUS_MAX_NAME_LENGTH + 96];
    label[0] = '\0';
    if (atomic_load(&lane->closed)) { /* a timeout or a stop left the phases out of step */
        mismatch_ordered_label(label, sizeof label, desc->name, position, lane->members.id);
        fail_waiting(lane, SMALL_WAIT_STOPPED, label, desc, timeout, timeout_origin, result);
        goto out;
    }

    uint64_t count = counts_rows(desc) ? (desc->ndims > 0 ? (uint64_t)desc->shape[0] : 0)
                                       : operation->count;
    size_t mine = payload_bytes(desc, count);
    if (runs_here(lane, desc, mine))
        stage(lane, operation, mine);
    struct small_line *line = small_next_line(segment);
    uint64_t signature = signature_of(desc), digest = digest_of(lane, desc);
    negotiated_digest_mix(&digest, position);
    line->signature = signature;
    line->count = count;
    line->digest = digest;
    small_publish(segment);
    enum small_wait_end end = small_wait_all(segment, timeout, lane_stopped, lane);
    if (end != SMALL_WAIT_DONE) {
        mismatch_ordered_label(label, sizeof label, desc->name, position, lane->members.id);
        fail_waiting(lane, end, label, desc, timeout, timeout_origin, result);
        goto out;
    }

    bool agree = true, same_counts = true, same_collective = true;
    uint8_t own_flags = 0xff;
    size_t largest = 0;
    for (int m = 0; m < segment->local_size; m++) {
        const struct small_line *theirs = small_line_of(segment, m);
        agree = agree && (theirs->signature & AGREED_BITS) == (signature & AGREED_BITS) &&
                theirs->digest == digest && (counts_rows(desc) || theirs->count == count);
        same_counts = same_counts && theirs->count == count;
        same_collective = same_collective && (uint8_t)theirs->signature == desc->collective;
        own_flags &= (uint8_t)(theirs->signature >> OWN_FLAGS_SHIFT);
        size_t bytes = payload_bytes(desc, theirs->count);
        largest = bytes > largest ? bytes : largest;
    }
    if (!agree) {
        mismatch_ordered_label(label, sizeof label, desc->name, position, lane->members.id);
        if (same_collective)
            describe_mismatch(lane, position, label, desc, timeout, timeout_origin, result);
        else
            describe_other_collectives(lane, label, result);
    } else if (runs_here(lane, desc, largest)) {
        take(lane, operation, result);
    } else {
        agree_elsewhere(lane, desc, position, own_flags, same_counts, result);
        outcome = result->status == CHORUS_OK ? LANE_ELSEWHERE : LANE_RAN;
        if (outcome == LANE_ELSEWHERE && lane->executor != NULL && desc->device == DEVICE_HOST) {
            struct ordered_agreement *agreed = result->agreed;
            result->agreed = NULL;
            run_on_executor(lane, operation, agreed, result);
            ordered_agreement_free(agreed);
            outcome = LANE_RAN;
        }
    }
out:
    pthread_mutex_unlock(&lane->turn);
    return outcome;
}
