/*
 * startup.c — the background thread's start and end: the executor's callbacks into the
 * coordinator, agreeing on the parameters and tuning, the start-up checks and log, opening what
 * the loop runs on (rounds through the host's slots, the job's lane), and the thread's main,
 * which runs the loop (background.c) between start and teardown.
 */
#include "background.h"
#include "../tuning/tuning_agreement.h"

#include "../collectives/startup_collectives.h"
#include "../core/log.h"
#include "../core/timeline.h"
#include "../negotiation/wire.h"
#include "../transport/point_to_point.h"
#include "world_links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----- the executor's callbacks ----------------------------------------------------------- */

static struct request *executor_take(void *owner, const struct wire_request *agreed)
{
    return pending_take(&((struct background *)owner)->pending, agreed);
}

static void executor_finish(void *owner, struct request *request, chorus_status status,
                            const char *message)
{
    pending_finish(&((struct background *)owner)->pending, request, status, message);
}

static void executor_join_done(void *owner, int last_rank)
{
    pending_join_done(&((struct background *)owner)->pending, last_rank);
}

static void executor_fatal_error(void *owner, chorus_status status, const char *message)
{
    pending_refuse_submissions(&((struct background *)owner)->pending, status, message);
}

static void executor_waiting(void *owner)
{
    star_while_waiting(&((struct background *)owner)->star);
}

/* A user thread just woken by a completion may be waiting for this core: while idle, the loop
 * polls for 50 us before it yields. Yielding now measured (np=2 on 2 cores, chorus-bench, 4
 * interleaved rounds) allreduce 64 B-4 KiB in 14-18 us instead of 15-100 us, broadcast 8 B-32
 * KiB in 16-21 us instead of 20-30 us. After an ordered operation the loop yields instead,
 * without its turn (coord_loop). */
static void executor_ran(void *owner)
{
    struct background *background = owner;
    if (!background->ordered.running && !background->driven_by_caller)
        sched_yield();
}

/* ----- start-up --------------------------------------------------------------------------- */

chorus_status coord_agree_on_parameters(struct chorus_context *context,
                                        const struct agreement *agreement, char *error,
                                        size_t error_size)
{
    chorus_status status = agreement_first_failure(agreement, context->params_status,
                                                   context->params_message, error, error_size);
    if (status != CHORUS_OK)
        return status;
    uint8_t *bytes = NULL;
    size_t length = 0;
    if (agreement->rank == 0) {
        const struct chorus_params *values = &context->params.values;
        struct wire_agreement form = {.kind = WIRE_PARAMETERS,
                                      .length = params_encode_wire(values, NULL, 0)};
        form.text = malloc(form.length ? form.length : 1);
        if (form.text != NULL) {
            params_encode_wire(values, form.text, form.length);
            length = wire_agreement_encode(&form, &bytes);
        }
        free(form.text);
    }
    status = agreement_broadcast(agreement, &bytes, &length, error, error_size);
    if (status != CHORUS_OK) {
        free(bytes); /* rank 0's own */
        return status;
    }
    struct wire_agreement form;
    struct chorus_params rank0 = context->params.values;
    char why[512] = "";
    chorus_status mine =
        wire_agreement_decode(bytes, length, WIRE_PARAMETERS, &form, why, sizeof why);
    if (agreement->rank == 0 && bytes == NULL) {
        mine = CHORUS_ERR_OUT_OF_MEMORY;
        snprintf(why, sizeof why, "out of memory sending the parameters");
    }
    free(bytes);
    if (mine == CHORUS_OK && !params_decode_wire(form.text, form.length, &rank0, why, sizeof why))
        mine = CHORUS_ERR_BAD_PARAMETER;
    wire_agreement_free(&form);
    status = agreement_first_failure(agreement, mine, why, error, error_size);
    if (status == CHORUS_OK)
        params_adopt_rank0(&context->params, &rank0);
    return status;
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
    const struct executor *executor = &background->runner.executor;
    const struct chorus_params *params = &context->params.values;
    char segment[256] = "not used";
    if (executor->node_ready)
        snprintf(segment, sizeof segment,
                 "ready (%u staging areas of %zu bytes, %s stores; %s)",
                 executor->node.staging_areas, executor->node.chunk_bytes,
                 executor->node.streaming ? "streaming" : "cached",
                 executor->node.shared_heap
                     ? "the peers' shared heaps mapped: tensors from chorus_mem_alloc are "
                       "reduced in place"
                     : "the peers' shared heaps not mapped: tensors from chorus_mem_alloc are "
                       "staged");
    LOG(LOG_INFO, "init",
        "%d GPU(s) visible; host %d of %d with %d local rank(s); host's shared segment %s; "
        "negotiation by %s; heartbeats every %g s (CHORUS_TIMEOUT_SECONDS=%g)",
        gpu_device_count(), context->topology.cross_rank, context->topology.cross_size,
        context->topology.local_size, segment,
        background->rounds.on ? "ready rounds" : "star",
        liveness_heartbeat_spacing(&background->star.liveness), params->timeout_seconds);
    if (background->rank != 0)
        return;
    char mpi[256] = "a world without MPI (its maker's links)";
    if (background->context->links == NULL)
        transport_mpi_library(mpi, sizeof mpi);
    LOG(LOG_INFO, "init", "chorus %s over %s", chorus_version(), mpi);
    LOG(LOG_INFO, "init",
        "fusion up to %zu bytes (tensors up to %zu), cycle %g ms%s, response cache %zu "
        "entries, stall warning %g s, stall failure %g s",
        params->fusion_threshold, params->fusion_tensor_limit, params->cycle_time_ms,
        params->autotune ? " (tuned during the first steps: CHORUS_AUTOTUNE)" : "",
        params->cache_capacity, params->stall_warning_seconds, params->stall_shutdown_seconds);
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++) {
        struct selection_query query = {.nranks = executor->nranks,
                                        .local_ranks = executor->local_ranks,
                                        .forced = executor->settings->forced_algorithm[c],
                                        .tuned = &executor->settings->tuned};
        selection_plan((chorus_collective)c, &query, log_plan_row, NULL);
    }
}

chorus_status coord_setup(struct background *background, char *error, size_t error_size)
{
    struct chorus_context *context = background->context;
    const struct chorus_params *params = &context->params.values;
    int rank = background->rank;
    background->state = COORD_RUNNING;
    pending_init(&background->pending, context, rank);
    background->runner.context = context;
    background->runner.pending = &background->pending;
    ordered_init(&background->ordered, &background->runner, &background->pending);
    transfers_init(&background->transfers, &background->runner, &background->pending);
    if (!star_init(&background->star, context, rank, background->size, &background->channel,
                   &background->pending, &background->runner) ||
        !rounds_init(&background->rounds, params, background->size)) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    background->star.rounds_mode = background->rounds.on;
    autotune_init(&background->autotune, &context->params, rank, background->size,
                  &background->channel, background->star.other_ranks,
                  &background->runner.executor);
    if (background->autotune.on) {
        background->autotune.while_waiting = star_while_waiting;
        background->autotune.waiting_owner = &background->star;
        background->star.autotune = &background->autotune;
    }
    if (rank == 0 && params->timeline[0] != '\0') {
        struct timeline *timeline = timeline_open(params->timeline, error, error_size);
        if (timeline == NULL)
            LOG(LOG_WARNING, "timeline", "%s; continuing without a timeline", error);
        else
            LOG(LOG_INFO, "timeline", "writing %s", timeline_path(timeline));
        error[0] = '\0';
        coord_adopt_timeline(background, timeline);
    }
    struct executor *executor = &background->runner.executor;
    executor->rank = rank;
    executor->nranks = background->size;
    executor->local_ranks = context->topology.homogeneous ? context->topology.local_size : 1;
    struct executor_settings *settings = &background->settings;
    executor_settings_init(settings, params);
    settings->oversubscribed = context->local_ranks_share_cores;
    settings->staging_streaming =
        staging_stores_streaming((enum staging_stores)params->staging_stores,
                                 context->local_ranks_share_cache, settings->oversubscribed);
    settings->tuned = (struct selection_rows){background->tuning.rules, background->tuning.count};
    executor->settings = settings;
    if (params->fusion_copier && !copier_start(&executor->copier))
        LOG(LOG_WARNING, "fusion", "cannot start the copier thread; packing on this thread");
    executor->owner = background;
    executor->take_request = executor_take;
    executor->finish = executor_finish;
    executor->join_done = executor_join_done;
    executor->fatal_error = executor_fatal_error;
    executor->waiting = executor_waiting;
    executor->ran = executor_ran;
    return CHORUS_OK;
}

/* The instance's communicators: three duplicates of the user's, whose errors return rather
 * than abort; this rank's place in them, and the largest tag of the transfers'. */
static chorus_status open_communicators(struct chorus_context *context, char *error,
                                        size_t error_size)
{
    MPI_Comm *duplicates[] = {&context->control_comm, &context->data_comm, &context->transfer_comm};
    for (size_t i = 0; i < ARRAY_LENGTH(duplicates); i++) {
        if (MPI_Comm_dup(context->user_comm, duplicates[i]) != MPI_SUCCESS) {
            snprintf(error, error_size, "MPI_Comm_dup failed");
            return CHORUS_ERR_MPI;
        }
        if (MPI_Comm_set_errhandler(*duplicates[i], MPI_ERRORS_RETURN) != MPI_SUCCESS) {
            snprintf(error, error_size, "MPI_Comm_set_errhandler failed");
            return CHORUS_ERR_MPI;
        }
    }
    int *tag_upper_bound = NULL, found = 0;
    if (MPI_Comm_get_attr(context->transfer_comm, MPI_TAG_UB, &tag_upper_bound, &found) !=
            MPI_SUCCESS ||
        MPI_Comm_rank(context->control_comm, &context->rank) != MPI_SUCCESS ||
        MPI_Comm_size(context->control_comm, &context->size) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_get_attr, MPI_Comm_rank or MPI_Comm_size failed");
        return CHORUS_ERR_MPI;
    }
    context->tag_upper_bound = found && tag_upper_bound != NULL ? *tag_upper_bound : 32767;
    return CHORUS_OK;
}

/* Every rank's topology record to every rank, over the links' transport (a world without
 * MPI). */
static chorus_status topology_over_links(struct chorus_context *context,
                                         struct transport *transport, const char *host,
                                         char *error, size_t error_size)
{
    struct topology_record *records = calloc((size_t)context->size, sizeof *records);
    if (records == NULL) {
        snprintf(error, error_size, "out of memory for the topology of %d ranks", context->size);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    topology_own_record(context, host, &records[context->rank]);
    chorus_status status =
        startup_allgather(transport, &records[context->rank], sizeof *records, records);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "exchanging the topology failed: %s", transport->error);
    else
        status = topology_from_records(context, records, error, error_size);
    free(records);
    return status;
}

/* A world without MPI: the links its maker connected, in place of the communicators. */
static void take_links(struct background *background)
{
    struct chorus_context *context = background->context;
    struct world_links *links = context->links;
    context->rank = links->rank;
    context->size = links->size;
    context->tag_upper_bound = 0; /* no chorus_send/recv */
    background->channel = links->channel;
    links->channel = (struct channel){0}; /* the background thread's now */
    background->runner.executor.transport = links->transport;
}

/* The communicators (or a world's links), then over the channel the parameters and tuning
 * every rank agrees on, the topology (over MPI, or over the links' transport), then the parts, the abort
 * notices and the host's segment. */
static chorus_status start(struct background *background, char *error, size_t error_size)
{
    struct chorus_context *context = background->context;
    struct world_links *links = context->links;
    chorus_status status = CHORUS_OK;
    if (links != NULL)
        take_links(background);
    else
        status = open_communicators(context, error, error_size);
    if (status != CHORUS_OK)
        return status;
    background->rank = context->rank;
    background->size = context->size;
    log_set_rank(context->rank);
    if (links == NULL) {
        status = check_not_alone(context, error, error_size);
        if (status != CHORUS_OK)
            return status;
        if (!channel_mpi_init(&background->channel, &context->control_comm)) {
            snprintf(error, error_size, "out of memory");
            return CHORUS_ERR_OUT_OF_MEMORY;
        }
    }
    const struct agreement agreement = {
        .channel = &background->channel, .rank = background->rank, .size = background->size};
    status = coord_agree_on_parameters(context, &agreement, error, error_size);
    if (status != CHORUS_OK)
        return status;
    log_set_level((enum log_level)context->params.values.log_level);
    status =
        tuning_agree_on_file(&agreement, &context->params, &background->tuning, error, error_size);
    if (status != CHORUS_OK)
        return status;
    struct executor *executor = &background->runner.executor;
    status = links != NULL
                 ? topology_over_links(context, &executor->transport, links->host, error,
                                       error_size)
                 : topology_discover(context, error, error_size);
    if (status != CHORUS_OK)
        return status;
    executor->data_comm = context->data_comm;
    executor->host_names = context->host_names;
    if (links == NULL)
        transport_mpi_init(&executor->transport, &context->data_comm);
    status = coord_setup(background, error, error_size);
    if (status != CHORUS_OK)
        return status;
    if (links != NULL) {
        executor_watch_aborts_through(executor, links->poll_abort, links->notify_abort,
                                      links->abort_context);
    } else if (!executor_watch_aborts(executor, context->control_comm)) {
        snprintf(error, error_size, "posting the receive for abort notices failed");
        return CHORUS_ERR_MPI;
    }
    /* Where the host's segment cannot be made (a small /dev/shm, say), algorithms over MPI
     * still work; those that need it try again, and fail, when first chosen. In a world
     * without MPI they go point to point instead. */
    status = links != NULL
                 ? executor_prepare_on_links(executor, error, error_size)
                 : executor_prepare(executor, error, error_size);
    if (status == CHORUS_ERR_OUT_OF_MEMORY && links != NULL)
        return status;
    if (status != CHORUS_OK) {
        LOG(LOG_WARNING, "node", "%s; %s", error,
            links != NULL ? "collectives on this host go through the world's transport"
                          : "shared-memory algorithms are tried again at first use");
        error[0] = '\0';
    }
    /* Every rank on this host: negotiation rounds through the host's slots (rounds.h). Whether
     * is agreed first, as the slots' making is collective. Across hosts, rounds by copies of
     * the slots up to NEGOTIATION_ROUND_COPIES_UP_TO ranks. */
    bool one_host = false;
    status = agreement_all(&agreement, executor->node_ready && executor->node.cross == NULL,
                           &one_host, error, error_size);
    if (status != CHORUS_OK)
        return status;
    if (one_host) {
        if (!rounds_open_slots(&background->rounds, &context->params.values, background->size,
                               &executor->node_comm, executor_host_exchange(executor),
                               background->settings.oversubscribed, error, error_size) &&
            error[0] != '\0')
            LOG(LOG_WARNING, "negotiation", "%s; negotiating through rank 0 alone", error);
        error[0] = '\0';
        background->star.rounds_mode = background->rounds.on;
    } else {
        /* Decided from the parameters alone, so alike everywhere; only memory can fail it. */
        if (!rounds_open_copies(&background->rounds, &context->params.values, background->rank,
                                background->size, error, error_size) &&
            error[0] != '\0')
            return CHORUS_ERR_OUT_OF_MEMORY;
        background->star.rounds_mode = background->rounds.on;
    }
    if (links == NULL)
        runner_open_job_lane(&background->runner);
    liveness_batch_done(&background->star.liveness, clock_seconds());
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
    MPI_Comm *duplicates[] = {&context->control_comm, &context->data_comm, &context->transfer_comm};
    for (size_t i = 0; i < ARRAY_LENGTH(duplicates); i++)
        if (*duplicates[i] != MPI_COMM_NULL && MPI_Comm_free(duplicates[i]) != MPI_SUCCESS)
            LOG(LOG_WARNING, "shutdown", "MPI_Comm_free failed; the communicator is left to MPI");
}

void *coord_thread_main(void *argument)
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
    if (status == CHORUS_OK)
        coord_loop(background);
    bool failed = background->runner.executor.aborted;
    coord_teardown(background);
    /* After a fatal error, messages nobody received (abandoned sends, other ranks' abort
     * notices) may still arrive. Freed communicators hand their context ids to the next ones,
     * where Open MPI would deliver such messages to a later chorus_init's communicators; kept,
     * they stay out of the way. */
    if (!failed)
        release_communicators(context);
    free(background);
    return NULL;
}
