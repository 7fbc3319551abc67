/*
 * executor.c — see executor.h. Runs agreed responses batch by batch, as the fusion plan groups
 * them, each on the backend of its memory (backend.h): the host algorithms of lib/collectives or
 * NCCL. Also here: the host's shared segment, the timeline spans of a batch, a fatal error's
 * notice to the other ranks, and the fault a test can inject.
 */
#include "backend.h"

#include "../core/log.h"
#include "../core/retained.h"
#include "../fusion/fusion.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void executor_waiting(void *context)
{
    struct executor *executor = context;
    if (executor->waiting != NULL)
        executor->waiting(executor->owner);
}

void executor_adopt_node(struct executor *executor, bool made)
{
    executor->node_ready = made;
    executor->node.timeout_seconds = executor_timeout(executor);
    executor->node.waiting = executor_waiting;
    executor->node.waiting_context = executor;
    if (executor->node_ready && executor->node.cross != NULL) {
        executor->node.cross->interrupted = executor->transport.interrupted;
        executor->node.cross->interrupt_context = executor->transport.interrupt_context;
    }
}

/* Creates the host's shared segment: collective over the data communicator. */
static chorus_status create_node(struct executor *executor, char *error, size_t error_size)
{
    if (MPI_Comm_split_type(executor->data_comm, MPI_COMM_TYPE_SHARED, executor->rank,
                            MPI_INFO_NULL, &executor->node_comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_split_type failed");
        return CHORUS_ERR_MPI;
    }
    int local_rank = 0;
    MPI_Comm_rank(executor->node_comm, &local_rank);
    if (MPI_Comm_split(executor->data_comm, local_rank, executor->rank, &executor->cross_comm) !=
        MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_split failed");
        return CHORUS_ERR_MPI;
    }
    int hosts = 1;
    MPI_Comm_size(executor->cross_comm, &hosts);
    const struct executor_settings *settings = executor->settings;
    const struct chorus_params *params = settings->params;
    chorus_status status = node_segment_create_mpi(
        &executor->node, &executor->node_comm, &executor->cross_comm,
        hosts > 1 ? params->cross_host_chunk : params->segment_chunk,
        (unsigned)params->staging_areas, settings->staging_streaming, settings->oversubscribed,
        error, error_size);
    executor_adopt_node(executor, status == CHORUS_OK);
    /* Every rank on this host: the small-slots algorithms' slots (agreed on every rank; without
     * them those algorithms decline). */
    if (status == CHORUS_OK && hosts == 1) {
        char why[256] = "";
        executor->small_ready =
            small_segment_create_mpi(&executor->small, &executor->node_comm,
                                     params->small_limit, settings->oversubscribed, why,
                                     sizeof why) == CHORUS_OK;
        if (!executor->small_ready)
            LOG(LOG_WARNING, "node", "%s; small collectives go through the host's segment", why);
    }
    return status;
}

chorus_status executor_prepare(struct executor *executor, char *error, size_t error_size)
{
    return executor->local_ranks > 1 ? create_node(executor, error, error_size) : CHORUS_OK;
}

chorus_status executor_prepare_set(struct executor *executor, char *error, size_t error_size)
{
    MPI_Comm node;
    if (MPI_Comm_split_type(executor->data_comm, MPI_COMM_TYPE_SHARED, executor->rank,
                            MPI_INFO_NULL, &node) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_split_type failed");
        return CHORUS_ERR_MPI;
    }
    int local = 1;
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    /* As for the job: the host's segment where every host has as many of the set's ranks. */
    int extremes[2] = {local, -local};
    if (MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MAX, executor->data_comm) !=
        MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Allreduce failed");
        return CHORUS_ERR_MPI;
    }
    executor->local_ranks = extremes[0] == -extremes[1] ? local : 1;
    return executor_prepare(executor, error, error_size);
}

struct node_segment *executor_node(struct executor *executor)
{
    return executor->node_ready ? &executor->node : NULL;
}

void executor_bound_waits(struct executor *executor, double seconds)
{
    executor->own_timeout = seconds;
    executor->node.timeout_seconds = executor_timeout(executor);
}

double executor_timeout(const struct executor *executor)
{
    return executor->own_timeout > 0 ? executor->own_timeout
                                     : executor->settings->params->timeout_seconds;
}

const char *executor_timeout_origin(const struct executor *executor)
{
    return executor->own_timeout > 0 ? "the operation's timeout" : "CHORUS_TIMEOUT_SECONDS";
}

void executor_local_rank_ended(const struct executor *executor, int local, char *error,
                               size_t error_size)
{
    int rank = executor_rank_of_local(executor, local);
    int pid = executor->node.pids[local];
    if (executor->host_names != NULL && rank >= 0)
        snprintf(error, error_size, "rank %d (host %s) lost: its process (pid %d) ended", rank,
                 executor->host_names[rank], pid);
    else
        snprintf(error, error_size, "local rank %d of this host lost: its process (pid %d) ended",
                 local, pid);
}

int executor_rank_of_local(const struct executor *executor, int local)
{
    if (executor->world_group != NULL)
        return executor_world_member(executor, local);
    MPI_Group node = MPI_GROUP_NULL, data = MPI_GROUP_NULL;
    int rank = MPI_UNDEFINED;
    if (MPI_Comm_group(executor->node_comm, &node) == MPI_SUCCESS &&
        MPI_Comm_group(executor->data_comm, &data) == MPI_SUCCESS)
        MPI_Group_translate_ranks(node, 1, &local, data, &rank);
    if (data != MPI_GROUP_NULL)
        MPI_Group_free(&data);
    if (node != MPI_GROUP_NULL)
        MPI_Group_free(&node);
    return rank == MPI_UNDEFINED ? -1 : rank;
}

chorus_status executor_interrupt_check(void *context, char *error, size_t error_size)
{
    struct executor *executor = context;
    double timeout = executor_timeout(executor);
    executor_waiting(executor);
    chorus_status status = executor_peer_failure(executor, error, error_size);
    if (status != CHORUS_OK || timeout <= 0 || executor->batch_started == 0)
        return status;
    double now = clock_seconds();
    int ended = -1;
    if (executor->node_ready && now > executor->next_process_look) {
        executor->next_process_look = now + NODE_PROCESS_LOOK_SECONDS;
        ended = node_segment_first_ended(&executor->node);
    }
    if (ended >= 0) {
        executor_local_rank_ended(executor, ended, error, error_size);
        return CHORUS_ERR_TIMEOUT;
    }
    if (now - executor->batch_started <= timeout)
        return CHORUS_OK;
    snprintf(error, error_size,
             "did not complete within the timeout of %g s (%s): another rank is stopped, dead, "
             "far behind or never called it",
             timeout, executor_timeout_origin(executor));
    return CHORUS_ERR_TIMEOUT;
}

/* The timeline spans of a fused batch, per tensor: the copy in, the allreduce with its
 * algorithm and fused size, the copy out (the copies only for a packed batch). */
void executor_timeline_batch(struct executor *executor, const struct wire_response *responses,
                    const size_t *members, size_t member_count, size_t fused_bytes,
                    enum batch_layout layout, const struct batch_times *times)
{
    char arguments[256];
    bool packed = layout == BATCH_PACKED;
    snprintf(arguments, sizeof arguments,
             "\"algorithm\": \"%s\", \"fused_bytes\": %zu, \"fused_tensors\": %zu%s",
             executor->last_algorithm, fused_bytes, member_count,
             layout == BATCH_IN_PLACE    ? ", \"in_place\": true"
             : layout == BATCH_ON_DEVICE ? ", \"packed_on_device\": true"
                                         : "");
    for (size_t m = 0; m < member_count; m++) {
        const char *name = responses[members[m]].request.name;
        int set = request_name_set(&responses[members[m]].request);
        if (packed)
            timeline_span(executor->timeline, set, name, "copy in", times->started, times->packed, NULL);
        timeline_span(executor->timeline, set, name, "allreduce", times->packed, times->reduced,
                      arguments);
        if (packed)
            timeline_span(executor->timeline, set, name, "copy out", times->reduced, times->unpacked,
                          NULL);
    }
}

static const struct backend *const backends[] = {
    [BACKEND_HOST] = &executor_host_backend,
    [BACKEND_NCCL] = &executor_nccl_backend,
};
static_assert(ARRAY_LENGTH(backends) == BACKEND_COUNT, "a row per backend");

/* Runs one batch of the plan on the backend of its memory. */
static chorus_status execute_batch(struct executor *executor, const struct wire_response *responses,
                                   const size_t *members, size_t member_count,
                                   struct request **requests, char *detail, size_t detail_size)
{
    const struct wire_response *first = &responses[members[0]];
    bool gpu = first->request.device != DEVICE_HOST;
    for (size_t m = 0; first->request.collective == CHORUS_ALLGATHER && m < member_count; m++)
        if (responses[members[m]].first_dim_count != (uint32_t)executor->nranks) {
            snprintf(detail, detail_size, "allgather \"%s\": bad response",
                     responses[members[m]].request.name);
            return CHORUS_ERR_PROTOCOL;
        }
    /* A joined rank's stand-in buffers are host memory. */
    for (size_t m = 0; gpu && m < member_count; m++)
        if (requests[m] == NULL) {
            snprintf(detail, detail_size, "joined ranks cannot yet stand in for GPU tensors");
            return CHORUS_ERR_NOT_SUPPORTED;
        }
    const struct backend *backend = backends[gpu ? BACKEND_NCCL : BACKEND_HOST];
    batch_run run = backend->run[first->request.collective]; /* the decoder checked the range */
    return run(executor, responses, members, member_count, requests, detail, detail_size);
}

#ifdef CHORUS_FAULT_INJECTION
/* Batches to run until the injected fault, that one included; 0: none armed. */
static _Atomic long batches_before_fault;

void executor_inject_fault(long nth)
{
    atomic_store(&batches_before_fault, nth > 0 ? nth : 0);
}

/* Whether the injected fault hits this batch (see executor_inject_fault). */
static bool injected_fault_now(void)
{
    long left = atomic_load(&batches_before_fault);
    while (left > 0 && !atomic_compare_exchange_weak(&batches_before_fault, &left, left - 1))
        ;
    return left == 1;
}
#else
/* The library proper has no faults to inject. */
static inline bool injected_fault_now(void)
{
    return false;
}
#endif

chorus_status executor_run(struct executor *executor, const struct wire_response *responses,
                           size_t count, struct request *const *taken, char *error,
                           size_t error_size)
{
    struct fusion_plan plan;
    const struct chorus_params *params = executor->settings->params; /* autotune may change them */
    if (!fusion_plan_build(responses, count, params->fusion_threshold,
                           params->fusion_tensor_limit, &plan)) {
        snprintf(error, error_size, "out of memory planning fusion");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    /* A few responses, as most runs have: no allocation. */
    struct request *few[4] = {0};
    struct request **requests = count <= ARRAY_LENGTH(few) ? few : calloc(count, sizeof *requests);
    chorus_status status = requests ? CHORUS_OK : CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t b = 0; status == CHORUS_OK && b < plan.batch_count; b++) {
        const struct fusion_batch *batch = &plan.batches[b];
        const size_t *members = &plan.order[batch->first];
        const struct wire_response *first = &responses[members[0]];
        if (first->type == RESPONSE_JOIN_DONE) {
            executor->joined = false;
            executor->join_done(executor->owner, first->last_joined_rank);
            continue;
        }
        for (size_t m = 0; m < batch->count; m++) {
            requests[m] = NULL;
            if (!response_applies_to(&responses[members[m]], executor->rank))
                continue;
            requests[m] = taken != NULL ? taken[members[m]]
                                        : executor->take_request(
                                              executor->owner, &responses[members[m]].request);
            if (requests[m] == NULL && first->type == RESPONSE_EXECUTE && !executor->joined) {
                snprintf(error, error_size,
                         "rank %d was told to run %s \"%s\", which it never submitted",
                         executor->rank,
                         chorus_collective_name(responses[members[m]].request.collective),
                         responses[members[m]].request.name);
                status = CHORUS_ERR_PROTOCOL;
            }
        }
        if (status != CHORUS_OK)
            break;
        if (first->type == RESPONSE_ERROR) {
            if (requests[0] != NULL)
                executor->finish(executor->owner, requests[0], (chorus_status)first->status,
                                 first->message);
            continue;
        }
        char detail[1024] = "";
        double started = clock_seconds();
        for (size_t m = 0; executor->timeline != NULL && m < batch->count; m++)
            timeline_span(executor->timeline, request_name_set(&responses[members[m]].request),
                          responses[members[m]].request.name, "queue",
                          responses[members[m]].agreed_at, started, NULL);
        chorus_status outcome = CHORUS_ERR_MPI;
        executor->last_algorithm = NULL;
        executor->batch_started = clock_seconds();
        if (injected_fault_now())
            snprintf(detail, sizeof detail,
                     "injected fault (a test's stand-in for a failed MPI "
                     "call) on rank %d",
                     executor->rank);
        else
            outcome = execute_batch(executor, responses, members, batch->count, requests, detail,
                                    sizeof detail);
        if (LOG_DEBUG <= log_threshold) {
            size_t bytes = 0;
            for (size_t m = 0; m < batch->count; m++)
                bytes += request_batch_member_bytes(&responses[members[m]]);
            LOG(LOG_DEBUG, "batch", "%s of %zu tensor(s) (\"%s\"%s), %zu bytes, by %s: %.1f us, %s",
                chorus_collective_name(first->request.collective), batch->count,
                first->request.name, batch->count > 1 ? ", ..." : "", bytes,
                executor->last_algorithm ? executor->last_algorithm : "?",
                (clock_seconds() - executor->batch_started) * 1e6,
                chorus_status_name(outcome));
        }
        /* Fused allreduces write their own spans, with their copies. */
        if (executor->timeline != NULL &&
            (batch->count == 1 || first->request.collective != CHORUS_ALLREDUCE)) {
            double ended = clock_seconds();
            for (size_t m = 0; m < batch->count; m++) {
                const struct wire_response *member = &responses[members[m]];
                char arguments[256];
                snprintf(arguments, sizeof arguments,
                         "\"algorithm\": \"%s\", \"bytes\": %zu, \"status\": \"%s\"%s",
                         executor->last_algorithm ? executor->last_algorithm : "?",
                         request_batch_member_bytes(member), chorus_status_name(outcome),
                         batch->count > 1 ? ", \"fused\": true" : "");
                timeline_span(executor->timeline, request_name_set(&member->request),
                              member->request.name,
                              chorus_collective_name(member->request.collective), started, ended,
                              arguments);
            }
        }
        /* Every failure says why: a path that forgot to is named by its status at least. */
        if (outcome != CHORUS_OK && detail[0] == '\0')
            snprintf(detail, sizeof detail, "%s (%s, no further detail)",
                     chorus_status_description(outcome), chorus_status_name(outcome));
        /* A failed collective leaves the ranks out of step, except for errors decided the same
         * way on every rank before any data moved (unsupported GPU features). */
        bool fatal = outcome != CHORUS_OK && outcome != CHORUS_ERR_NOT_SUPPORTED;
        /* Before the handles complete: their owners may submit again at once, and the other
         * ranks may be waiting for this one inside the collective. */
        if (fatal) {
            executor_abort(executor, outcome, detail);
            executor->fatal_error(executor->owner, outcome, detail);
        }
        /* The trace holds an operation before its owner learns it completed: a program may end
         * at once (without chorus_shutdown), and its last operations belong in the trace. */
        timeline_flush(executor->timeline);
        for (size_t m = 0; m < batch->count; m++) {
            if (requests[m] == NULL)
                continue;
            if (outcome == CHORUS_OK)
                executor->finish(executor->owner, requests[m], CHORUS_OK, NULL);
            else {
                char *message = text_format("%s \"%s\": %s",
                                              chorus_collective_name(first->request.collective),
                                              responses[members[m]].request.name, detail);
                executor->finish(executor->owner, requests[m], outcome, message);
                free(message);
            }
        }
        if (fatal) {
            snprintf(error, error_size, "%s", detail);
            status = outcome;
        }
    }
    if (requests != few)
        free(requests);
    fusion_plan_free(&plan);
    timeline_flush(executor->timeline);
    if (count > 0 && executor->ran != NULL)
        executor->ran(executor->owner);
    return status;
}

/* The records through MPI's own allgather, polled as the transport's waits are (the peers'
 * notices, the timeout): a tuned path for a few hundred bytes that needs none of chorus's
 * selection, segments or scratch. */
static chorus_status exchange_records_over_mpi(struct executor *executor, MPI_Comm comm,
                                               const void *mine, size_t bytes, void *all,
                                               char *error, size_t error_size)
{
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, comm, &request) !=
        MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Iallgather failed");
        return CHORUS_ERR_MPI;
    }
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            snprintf(error, error_size, "MPI_Test failed (an allgather of records)");
            return CHORUS_ERR_MPI;
        }
        if (done)
            return CHORUS_OK;
        if (polls < 64)
            continue;
        sched_yield();
        chorus_status interrupted = executor_interrupt_check(executor, error, error_size);
        if (interrupted != CHORUS_OK)
            return interrupted; /* the request is left behind: this rank stops */
    }
}

chorus_status executor_exchange_records(struct executor *executor, const void *mine, size_t bytes,
                                        void *all, char *error, size_t error_size)
{
    executor->batch_started = clock_seconds();
    MPI_Comm comm;
    if (transport_mpi_comm(&executor->transport, &comm))
        return exchange_records_over_mpi(executor, comm, mine, bytes, all, error, error_size);
    int p = executor->nranks;
    size_t *layout = calloc(2 * (size_t)p, sizeof *layout);
    if (layout == NULL) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    size_t *block_bytes = layout, *offsets = layout + p;
    for (int r = 0; r < p; r++) {
        block_bytes[r] = bytes;
        offsets[r] = (size_t)r * bytes;
    }
    chorus_status status = executor_run_host_allgather(executor, mine, all, block_bytes, offsets,
                                                       (size_t)p * bytes, error, error_size);
    free(layout);
    return status;
}

bool executor_records_may_vary(const struct executor *executor)
{
    return executor->transport.nranks <= EXECUTOR_VARYING_RECORDS_UP_TO;
}

/* One message from every member to every other, each received whatever its length: among few
 * members as quick as MPI's allgather (which takes log2 steps, and one length for all). */
chorus_status executor_exchange_varying_records(struct executor *executor, const void *mine,
                                                size_t bytes, size_t capacity, void *all,
                                                char *error, size_t error_size)
{
    struct transport *transport = &executor->transport;
    int members = transport->nranks, me = transport->rank;
    struct transport_request requests[2 * (EXECUTOR_VARYING_RECORDS_UP_TO - 1)];
    size_t receives = 0, sends = 0;
    executor->batch_started = clock_seconds();
    memcpy((char *)all + (size_t)me * capacity, mine, bytes);
    chorus_status status = CHORUS_OK;
    for (int r = 0; r < members && status == CHORUS_OK; r++) {
        char *block = (char *)all + (size_t)r * capacity;
        if (r != me && (status = transport_irecv_up_to(transport, block, capacity, r,
                                                       TAG_ORDERED_RECORDS,
                                                       &requests[receives])) == CHORUS_OK)
            receives++;
    }
    for (int r = 0; r < members && status == CHORUS_OK; r++)
        if (r != me && (status = transport_isend(transport, mine, bytes, r, TAG_ORDERED_RECORDS,
                                                 &requests[receives + sends])) == CHORUS_OK)
            sends++;
    if (status == CHORUS_OK)
        status = transport_waitall(transport, receives + sends, requests);
    else
        transport_cancel(transport, receives + sends, requests);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "%s", transport->error);
    return status;
}

bool executor_watch_aborts(struct executor *executor, MPI_Comm control_comm)
{
    executor->transport.interrupted = executor_interrupt_check;
    executor->transport.interrupt_context = executor;
    return abort_watch_start(&executor->abort, control_comm);
}

void executor_watch_aborts_through(struct executor *executor,
                                   bool (*poll)(void *context, struct abort_notice *notice),
                                   void (*notify)(void *context,
                                                  const struct abort_notice *notice),
                                   void *context)
{
    executor->transport.interrupted = executor_interrupt_check;
    executor->transport.interrupt_context = executor;
    executor->abort.poll_hook = poll;
    executor->abort.notify_hook = notify;
    executor->abort.hook_context = context;
}

chorus_status executor_peer_failure(struct executor *executor, char *error, size_t error_size)
{
    if (executor->detached)
        return executor->peer_failure != NULL
                   ? executor->peer_failure(executor->owner, error, error_size)
                   : CHORUS_OK;
    if (executor->parent != NULL)
        return executor_peer_failure(executor->parent, error, error_size);
    if (!abort_watch_poll(&executor->abort))
        return CHORUS_OK;
    const struct abort_notice *notice = &executor->abort.notice;
    if (notice->rank == ABORT_RANK_TRANSPORT)
        snprintf(error, error_size, "%.500s", notice->reason);
    else
        snprintf(error, error_size, "stopped because rank %d failed: %.440s", (int)notice->rank,
                 notice->reason);
    chorus_status status = (chorus_status)notice->status;
    return status < 0 ? status : CHORUS_ERR_INTERNAL;
}

void executor_abort(struct executor *executor, chorus_status status, const char *reason)
{
    if (executor->aborted)
        return;
    executor->aborted = true;
    /* A rank that stops because another did has nothing to tell: everyone got that notice. A
     * process set's executor tells through the job's; a detached one through its instance's
     * background thread. */
    if (executor->parent != NULL)
        executor_abort(executor->parent, status, reason);
    else if (!executor->detached && !executor->abort.received)
        abort_notify(&executor->abort, executor->rank, status, reason);
    if (executor->node_ready)
        node_segment_poison(&executor->node);
}

/* An executor over `comm` (an MPI_Comm passed by pointer) with `settings`, before its owner's
 * callbacks and its host segment. */
static void init_over(struct executor *executor, const struct executor_settings *settings,
                      const void *comm, int rank, int nranks)
{
    memset(executor, 0, sizeof *executor);
    executor->rank = rank;
    executor->nranks = nranks;
    executor->data_comm = *(const MPI_Comm *)comm;
    transport_mpi_init(&executor->transport, comm);
    executor->transport.interrupted = executor_interrupt_check;
    executor->transport.interrupt_context = executor;
    executor->settings = settings;
    executor->local_ranks = 1; /* until executor_prepare_set */
}

void executor_init_for_set(struct executor *executor, struct executor *parent, const void *comm,
                           int rank, int nranks)
{
    init_over(executor, parent->settings, comm, rank, nranks);
    executor->parent = parent;
    executor->owner = parent->owner;
    executor->take_request = parent->take_request;
    executor->finish = parent->finish;
    executor->join_done = parent->join_done;
    executor->fatal_error = parent->fatal_error;
    executor->waiting = parent->waiting;
    executor->ran = parent->ran;
}

void executor_init_detached(struct executor *executor, const struct executor_settings *settings,
                            const void *comm, int rank, int nranks)
{
    init_over(executor, settings, comm, rank, nranks);
    executor->detached = true;
}

void executor_settings_init(struct executor_settings *settings,
                            const struct chorus_params *params)
{
    *settings = (struct executor_settings){.params = params};
    const char *forced[CHORUS_COLLECTIVE_COUNT] = {
        [CHORUS_ALLREDUCE] = params->allreduce_algorithm,
        [CHORUS_BROADCAST] = params->broadcast_algorithm,
        [CHORUS_ALLGATHER] = params->allgather_algorithm,
        [CHORUS_REDUCESCATTER] = params->reducescatter_algorithm,
        [CHORUS_ALLTOALL] = params->alltoall_algorithm,
    };
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        settings->forced_algorithm[c] =
            forced[c][0] == '\0' || strcmp(forced[c], "auto") == 0
                ? -1
                : algorithm_find((chorus_collective)c, forced[c]);
}

void executor_release(struct executor *executor)
{
    if (executor->parent != NULL)
        executor->timeline = NULL; /* the job's executor closes it */
    abort_watch_stop(&executor->abort);
    /* After a fatal error, transfers that a wait gave up on (transport_mpi.c) may still use
     * their buffers: the scratch buffers, the fusion buffer, the host's segment. They are
     * retained until MPI is finalized (retained.h). */
    bool in_use = executor->aborted;
    struct scratch *buffers[] = {&executor->scratch, &executor->fusion, &executor->stand_in,
                                 &executor->staging};
    for (size_t i = 0; i < ARRAY_LENGTH(buffers); i++) {
        if (in_use) {
            retained_keep(buffers[i]->memory);
            *buffers[i] = (struct scratch){0};
        }
        scratch_release(buffers[i]);
    }
    scratch_release(&executor->pieces);
    copier_stop(&executor->copier);
    gpu_context_destroy(executor->gpu, executor->aborted);
    executor->gpu = NULL;
    timeline_close(executor->timeline);
    executor->timeline = NULL;
    if (executor->small_ready)
        small_segment_release(&executor->small, in_use);
    executor->small_ready = false;
    if (executor->node_ready)
        node_segment_release(&executor->node, in_use);
    if (executor->node_ready && !in_use && executor->world_group == NULL) {
        MPI_Comm_free(&executor->node_comm);
        MPI_Comm_free(&executor->cross_comm);
    }
    executor->node_ready = false;
    executor_release_world_group(executor);
}
