/*
 * background.c — the background thread of a rank: the only thread that calls MPI (and NCCL).
 * The messages of negotiation are in exchange.c, the requests' bookkeeping in requests.c.
 *
 * Negotiation is asynchronous and event-driven rather than a fixed cycle:
 *   - A rank with new submissions sends them at once to rank 0 in one REQUESTS message (rank 0
 *     feeds its own straight into the negotiator).
 *   - Rank 0 receives REQUESTS from any rank whenever they arrive. As soon as tensors are ready
 *     on every rank (or a mismatch or stall is decided) it sends one RESPONSES message to every
 *     rank and executes the same list itself.
 *   - Every rank executes RESPONSES in the order rank 0 sent them (MPI keeps the order of
 *     messages between two ranks), so all ranks run the same collectives in the same order.
 * No timer sits on the critical path: a lone small allreduce costs one message to rank 0, one
 * back, and the collective. Work that arrives while a collective runs is sent as one message
 * afterwards, and its responses come as one list, which the fusion plan then fuses.
 * CHORUS_CYCLE_TIME_MS adds a minimum spacing between those messages, for more fusion.
 *
 * Idle threads back off: they poll for 50 us, then yield for up to 2 ms, then sleep on a
 * condition variable (woken at once by a submit) for up to 1 ms at a time between polls of MPI.
 *
 * At scale (CHORUS_NEGOTIATION, rounds.c) tensors seen before are agreed instead by rounds, each an
 * allreduce of ready bits, and rank 0's responses are ordered by the rounds.
 *
 * Shutdown: a rank that shuts down sets SHUTDOWN in its requests. Rank 0 then sends a RESPONSES
 * message with SHUTDOWN after everything already agreed; each rank runs what precedes it, fails
 * every pending handle with CHORUS_ERR_SHUTDOWN, sends BYE and stops. Rank 0 stops after every
 * BYE, so no message is left unreceived.
 */
#include "background.h"

#include "../core/log.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ----- idling ----------------------------------------------------------------------------- */

static void idle(struct background *background, double idle_since)
{
    double idle_time = monotonic_seconds() - idle_since;
    if (idle_time < 50e-6)
        return;
    if (idle_time < 2e-3) {
        sched_yield();
        return;
    }
    struct chorus_context *context = background->context;
    double nap = idle_time / 16;
    double cap = background->pending.size > 0 || background->rank == 0 ||
                         background->executor.joined
                     ? 1e-3
                     : 5e-3;
    /* Rounds advance only while every rank polls them (MPI progresses a non-blocking
     * collective inside MPI calls). */
    if (background->rounds_mode)
        cap = 2e-4;
    nap = nap < 50e-6 ? 50e-6 : nap > cap ? cap : nap;
    struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, nap);
    pthread_mutex_lock(&context->lock);
    bool work = context->queue_head != NULL ||
                (context->shutdown_requested && !background->shutdown_sent) ||
                (context->join_requested && !background->join_sent);
    if (!work)
        pthread_cond_timedwait(&context->wakeup, &context->lock, &deadline);
    pthread_mutex_unlock(&context->lock);
}

/* ----- start-up --------------------------------------------------------------------------- */

void adopt_timeline(struct background *background, struct timeline *timeline)
{
    background->executor.timeline = timeline;
    background->negotiator.resolved = timeline != NULL ? timeline_negotiated : NULL;
    background->negotiator.resolved_context = timeline;
}

/* Every rank learns whether any rank's parameters failed to parse, and why. */
static chorus_status agree_on_parameters(struct background *background, char *error,
                                         size_t error_size)
{
    struct chorus_context *context = background->context;
    MPI_Comm comm = context->control_comm;
    int mine = context->params_status != CHORUS_OK ? background->rank : INT_MAX;
    int first_bad = INT_MAX;
    if (MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Allreduce failed during init");
        return CHORUS_ERR_MPI;
    }
    if (first_bad != INT_MAX) {
        char text[sizeof context->params_message];
        memcpy(text, context->params_message, sizeof text);
        MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first_bad, comm);
        text[sizeof text - 1] = '\0';
        if (first_bad == background->rank)
            snprintf(error, error_size, "%s", text);
        else
            snprintf(error, error_size, "rank %d: %s", first_bad, text);
        return CHORUS_ERR_BAD_PARAMETER;
    }
    struct chorus_params rank0 = context->params.values;
    if (MPI_Bcast(&rank0, (int)sizeof rank0, MPI_BYTE, 0, comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Bcast failed during init");
        return CHORUS_ERR_MPI;
    }
    params_adopt_rank0(&context->params, &rank0);
    return CHORUS_OK;
}

/* A positive whole number in the environment variable `name`, else 0. */
static long environment_count(const char *name)
{
    const char *text = getenv(name);
    char *end = NULL;
    long value = text != NULL ? strtol(text, &end, 10) : 0;
    return text != NULL && end != text && *end == '\0' && value > 0 ? value : 0;
}

/* Processes started without an MPI launcher each become rank 0 of 1 and would train alone.
 * When the variables of another launcher say the job has more processes, init fails instead. */
static chorus_status check_not_alone(const struct chorus_context *context, char *error,
                                     size_t error_size)
{
    if (context->size != 1 || context->user_comm != MPI_COMM_WORLD)
        return CHORUS_OK;
    static const char *const job_sizes[] = {"WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "PMI_SIZE"};
    for (size_t i = 0; i < ARRAY_LENGTH(job_sizes); i++) {
        long processes = environment_count(job_sizes[i]);
        if (processes > 1) {
            snprintf(error, error_size,
                     "MPI says this process is alone (rank 0 of 1), but %s=%ld says the job has "
                     "%ld processes: they were not started by an MPI launcher, so each would "
                     "train alone. Start them with chorusrun -np %ld or mpirun -np %ld (under "
                     "Slurm, srun needs --mpi=pmix)",
                     job_sizes[i], processes, processes, processes, processes);
            return CHORUS_ERR_MPI;
        }
    }
    return CHORUS_OK;
}

static void log_plan_row(void *context, chorus_collective collective, size_t from, size_t to,
                         const char *chain)
{
    (void)context;
    LOG(LOG_INFO, "init", "%s from %zu to %zu bytes: %s", chorus_collective_name(collective), from,
        to, chain);
}

/* At info: what this rank runs on and with; rank 0 adds the settings and the algorithms. */
static void log_start(const struct background *background)
{
    if (LOG_INFO > log_threshold)
        return;
    const struct chorus_context *context = background->context;
    const struct executor *executor = &background->executor;
    const struct chorus_params *params = &context->params.values;
    LOG(LOG_INFO, "init",
        "%d GPU(s) visible; host %d of %d with %d local rank(s); host's shared segment %s; "
        "negotiation by %s; heartbeats every %g s (CHORUS_TIMEOUT_SECONDS=%g)",
        gpu_device_count(), context->topology.cross_rank, context->topology.cross_size,
        context->topology.local_size, executor->node_ready ? "ready" : "not used",
        background->rounds_mode ? "ready rounds" : "star", liveness_heartbeat_spacing(
            &background->liveness), params->timeout_seconds);
    if (background->rank != 0)
        return;
    LOG(LOG_INFO, "init",
        "fusion up to %zu bytes (tensors up to %zu), cycle %g ms, response cache %zu entries, "
        "stall warning %g s, stall failure %g s",
        params->fusion_threshold, params->fusion_tensor_limit, params->cycle_time_ms,
        params->cache_capacity, params->stall_warning_seconds, params->stall_shutdown_seconds);
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++) {
        struct selection_query query = {.nranks = executor->nranks,
                                        .local_ranks = executor->local_ranks,
                                        .forced = executor->forced_algorithm[c]};
        selection_plan((chorus_collective)c, &query, log_plan_row, NULL);
    }
}

static chorus_status start(struct background *background, char *error, size_t error_size)
{
    struct chorus_context *context = background->context;
    if (MPI_Comm_dup(context->user_comm, &context->control_comm) != MPI_SUCCESS ||
        MPI_Comm_dup(context->user_comm, &context->data_comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_dup failed");
        return CHORUS_ERR_MPI;
    }
    MPI_Comm_set_errhandler(context->control_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(context->data_comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(context->control_comm, &context->rank);
    MPI_Comm_size(context->control_comm, &context->size);
    background->rank = context->rank;
    background->size = context->size;
    log_set_rank(context->rank);
    chorus_status status = check_not_alone(context, error, error_size);
    if (status != CHORUS_OK)
        return status;
    status = agree_on_parameters(background, error, error_size);
    if (status != CHORUS_OK)
        return status;
    log_set_level((enum log_level)context->params.values.log_level);
    status = topology_discover(context, error, error_size);
    if (status != CHORUS_OK)
        return status;
    name_table_init(&background->pending);
    if (!liveness_init(&background->liveness, context->rank, context->size,
                       context->params.values.timeout_seconds, monotonic_seconds())) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    background->other_ranks = malloc((size_t)context->size * sizeof *background->other_ranks);
    if (background->other_ranks == NULL) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    for (int r = 1; r < context->size; r++)
        background->other_ranks[r - 1] = r;
    response_cache_init(&background->cache, context->params.values.cache_capacity);
    if (!rounds_start(background)) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (context->rank == 0 && !negotiator_init(&background->negotiator, context->size)) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (context->rank == 0 && context->params.values.timeline[0] != '\0') {
        struct timeline *timeline =
            timeline_open(context->params.values.timeline, error, error_size);
        if (timeline == NULL)
            LOG(LOG_WARNING, "timeline", "%s; continuing without a timeline", error);
        else
            LOG(LOG_INFO, "timeline", "writing %s", timeline_path(timeline));
        error[0] = '\0';
        adopt_timeline(background, timeline);
    }
    struct executor *executor = &background->executor;
    executor->rank = context->rank;
    executor->nranks = context->size;
    executor->data_comm = context->data_comm;
    transport_mpi_init(&executor->transport, &context->data_comm);
    executor->fusion_threshold = context->params.values.fusion_threshold;
    executor->fusion_tensor_limit = context->params.values.fusion_tensor_limit;
    executor->timeout_seconds = context->params.values.timeout_seconds;
    executor->staging_areas = (unsigned)context->params.values.staging_areas;
    executor->local_ranks = context->topology.homogeneous ? context->topology.local_size : 1;
    executor->oversubscribed = context->topology.pus > 0 &&
                               (size_t)context->topology.local_size > context->topology.pus;
    executor->staging_streaming = staging_stores_streaming(
        (enum staging_stores)context->params.values.staging_stores,
        context->local_ranks_share_cache, executor->oversubscribed);
    if (context->params.values.fusion_copier && !copier_start(&executor->copier))
        LOG(LOG_WARNING, "fusion", "cannot start the copier thread; packing on this thread");
    const char *forced[CHORUS_COLLECTIVE_COUNT] = {
        [CHORUS_ALLREDUCE] = context->params.values.allreduce_algorithm,
        [CHORUS_BROADCAST] = context->params.values.broadcast_algorithm,
        [CHORUS_ALLGATHER] = context->params.values.allgather_algorithm,
        [CHORUS_REDUCESCATTER] = context->params.values.reducescatter_algorithm,
        [CHORUS_ALLTOALL] = context->params.values.alltoall_algorithm,
    };
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        executor->forced_algorithm[c] =
            strcmp(forced[c], "auto") == 0 ? -1 : algorithm_find((chorus_collective)c, forced[c]);
    executor->owner = background;
    executor->take_request = take_request;
    executor->finish = finish_request;
    executor->join_done = join_done;
    executor->fatal_error = executor_fatal_error;
    executor->waiting = heartbeat_while_waiting;
    if (!executor_watch_aborts(executor, context->control_comm)) {
        snprintf(error, error_size, "posting the receive for abort notices failed");
        return CHORUS_ERR_MPI;
    }
    /* Where the host's segment cannot be made (a small /dev/shm, say), algorithms over MPI
     * still work; those that need it try again, and fail, when first chosen. */
    if (executor_prepare(executor, error, error_size) != CHORUS_OK) {
        LOG(LOG_WARNING, "node", "%s; shared-memory algorithms are tried again at first use",
            error);
        error[0] = '\0';
    }
    background->last_stall_check = monotonic_seconds();
    liveness_batch_done(&background->liveness, background->last_stall_check);
    log_start(background);
    return CHORUS_OK;
}

static void report_start(struct chorus_context *context, chorus_status status, const char *error)
{
    pthread_mutex_lock(&context->lock);
    context->startup_status = status;
    snprintf(context->startup_message, sizeof context->startup_message, "%s", error);
    context->startup_finished = true;
    pthread_cond_broadcast(&context->started);
    pthread_mutex_unlock(&context->lock);
}

static void release_communicators(struct chorus_context *context)
{
    if (context->control_comm != MPI_COMM_NULL)
        MPI_Comm_free(&context->control_comm);
    if (context->data_comm != MPI_COMM_NULL)
        MPI_Comm_free(&context->data_comm);
}

void *background_main(void *argument)
{
    struct chorus_context *context = argument;
    struct background *background = calloc(1, sizeof *background);
    char error[1024] = "";
    if (background == NULL) {
        report_start(context, CHORUS_ERR_OUT_OF_MEMORY, "out of memory starting chorus");
        return NULL;
    }
    background->context = context;
    chorus_status status = start(background, error, sizeof error);
    report_start(context, status, error);
    if (status != CHORUS_OK) {
        if (context->rank == 0)
            negotiator_destroy(&background->negotiator);
        rounds_release(background);
        liveness_release(&background->liveness);
        free(background->other_ranks);
        release_communicators(context);
        free(background);
        return NULL;
    }
    double idle_since = monotonic_seconds();
    while (!background->finished) {
        bool active = false;
        if (!background->stopping) {
            active |= take_submissions(background);
            active |= flush_requests(background);
        }
        if (background->rank == 0)
            active |= coordinate(background);
        else if (!background->rounds_mode)
            active |= follow(background);
        active |= rounds_progress(background);
        progress_outgoing(background, false);
        /* Another rank's notice that it failed, unless this rank already stopped (after a
         * batch that failed because of it, say): one report per failure. */
        char failure[sizeof background->error];
        chorus_status peer = background->finished
                                 ? CHORUS_OK
                                 : executor_peer_failure(&background->executor, failure,
                                                         sizeof failure);
        if (peer != CHORUS_OK)
            fatal(background, peer, failure);
        /* After the notices: a rank woken from a freeze learns first that the others gave up. */
        active |= keep_alive(background);
        if (active)
            idle_since = monotonic_seconds();
        else
            idle(background, idle_since);
    }
    progress_outgoing(background, true);
    LOG(LOG_INFO, "negotiation",
        "by %s: %zu messages sent, %zu received, %zu rounds (each an allreduce of %zu bytes)",
        background->rounds_mode ? "rounds" : "star", background->messages_sent,
        background->messages_received, background->rounds_posted,
        background->rounds_mode ? ready_rounds_vector_words(&background->rounds) * 8 : 0);
    clear_unsent(background);
    free(background->unsent);
    if (background->rank == 0)
        negotiator_destroy(&background->negotiator);
    process_sets_release(background);
    executor_release(&background->executor);
    rounds_release(background);
    liveness_release(&background->liveness);
    free(background->other_ranks);
    response_cache_destroy(&background->cache);
    name_table_destroy(&background->pending);
    /* After a fatal error, messages nobody received (abandoned sends, other ranks' abort
     * notices) may still arrive. Freed communicators hand their context ids to the next ones,
     * where Open MPI would deliver such messages to a later chorus_init's communicators; kept,
     * they stay out of the way. */
    if (!background->executor.aborted)
        release_communicators(context);
    free(background);
    return NULL;
}
