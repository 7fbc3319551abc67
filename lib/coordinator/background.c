/*
 * background.c — the background thread of a rank: the only thread that calls MPI (and NCCL).
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
 * Shutdown: a rank that shuts down sets SHUTDOWN in its requests. Rank 0 then sends a RESPONSES
 * message with SHUTDOWN after everything already agreed; each rank runs what precedes it, fails
 * every pending handle with CHORUS_ERR_SHUTDOWN, sends BYE and stops. Rank 0 stops after every
 * BYE, so no message is left unreceived.
 */
#include "../core/context.h"
#include "../core/log.h"
#include "execute.h"
#include "negotiation.h"
#include "response_cache.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_REQUESTS = 1, TAG_RESPONSES = 2 };

struct outgoing {
    uint8_t *bytes;
    MPI_Request *requests;
    int count;
    struct outgoing *next;
};

struct background {
    struct chorus_context *context;
    int rank;
    int size;
    struct name_table pending; /* name -> struct request, submitted and not completed */
    struct negotiator negotiator;
    struct response_cache cache;
    struct executor executor;
    struct outgoing *outgoing;

    struct wire_request *unsent; /* requests not yet sent to rank 0 */
    size_t unsent_count;
    size_t unsent_capacity;
    uint32_t unsent_flags;
    bool shutdown_sent;
    bool join_sent;

    bool shutdown_decided; /* rank 0: some rank asked to shut down */
    int shutdown_origin;
    bool stopping;         /* handles failed; waiting for BYEs (rank 0) */
    int byes;
    bool finished;

    double last_cycle;
    double last_stall_check;
    char error[2048];
};

void request_free(struct request *request)
{
    if (request == NULL)
        return;
    wire_request_free(&request->desc);
    free(request);
}

/* ----- completing handles ----------------------------------------------------------------- */

static void finish_request(void *owner, struct request *request, chorus_status status,
                           const char *message)
{
    struct background *background = owner;
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    name_table_remove(&context->in_flight, request->desc.name);
    pthread_mutex_unlock(&context->lock);
    if (status == CHORUS_OK)
        handle_member_done(request->handle, CHORUS_OK, NULL);
    else
        handle_member_done(request->handle, status, "%s", message ? message : "");
    request_free(request);
}

static struct request *take_request(void *owner, const char *name)
{
    struct background *background = owner;
    return name_table_remove(&background->pending, name);
}

static void join_done(void *owner)
{
    struct background *background = owner;
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    struct chorus_handle *handle = context->join_handle;
    context->join_handle = NULL;
    context->join_requested = false;
    pthread_mutex_unlock(&context->lock);
    background->join_sent = false;
    if (handle != NULL)
        handle_member_done(handle, CHORUS_OK, NULL);
}

/* Completes every handle of this rank with `status` and makes later submits fail with it. */
static void fail_everything(struct background *background, chorus_status status,
                            const char *reason)
{
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    if (atomic_load(&context->stopped) == CHORUS_OK) {
        snprintf(context->stopped_message, sizeof context->stopped_message, "%s", reason);
        atomic_store(&context->stopped, status);
    }
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    struct chorus_handle *join_handle = context->join_handle;
    context->join_handle = NULL;
    pthread_mutex_unlock(&context->lock);

    while (queued != NULL) {
        struct request *next = queued->next;
        name_table_insert(&background->pending, queued->desc.name, queued);
        queued = next;
    }
    for (size_t b = 0; b < background->pending.bucket_count; b++) {
        struct name_entry *entry = background->pending.buckets[b];
        while (entry != NULL) {
            struct name_entry *next = entry->next;
            struct request *request = entry->value;
            char *message =
                format_string("%s \"%s\": %s", chorus_collective_name(request->desc.collective),
                              request->desc.name, reason);
            finish_request(background, request, status, message ? message : reason);
            free(message);
            entry = next;
        }
    }
    name_table_destroy(&background->pending);
    name_table_init(&background->pending);
    if (join_handle != NULL)
        handle_member_done(join_handle, status, "join: %s", reason);
}

static void fatal(struct background *background, chorus_status status, const char *what)
{
    LOG(LOG_ERROR, "background", "%s", what);
    fail_everything(background, status, what);
    background->finished = true;
}

/* ----- sending ---------------------------------------------------------------------------- */

static bool send_message(struct background *background, const struct wire_message *message,
                         const int *destinations, int destination_count, int tag)
{
    struct outgoing *outgoing = calloc(1, sizeof *outgoing);
    size_t length = outgoing ? wire_encode(message, &outgoing->bytes) : 0;
    if (outgoing != NULL)
        outgoing->requests = calloc((size_t)destination_count, sizeof *outgoing->requests);
    if (length == 0 || outgoing->requests == NULL || length > INT_MAX) {
        if (outgoing != NULL) {
            free(outgoing->bytes);
            free(outgoing->requests);
        }
        free(outgoing);
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "cannot encode a negotiation message");
        return false;
    }
    LOG(LOG_TRACE, "negotiation", "sending %s of %u entries (%zu bytes) to %d rank(s)",
        message->kind == WIRE_REQUESTS ? "requests" : "responses", message->count, length,
        destination_count);
    for (int i = 0; i < destination_count; i++) {
        if (MPI_Isend(outgoing->bytes, (int)length, MPI_BYTE, destinations[i], tag,
                      background->context->control_comm,
                      &outgoing->requests[i]) != MPI_SUCCESS) {
            outgoing->count = i;
            outgoing->next = background->outgoing;
            background->outgoing = outgoing;
            fatal(background, CHORUS_ERR_MPI, "sending a negotiation message failed");
            return false;
        }
    }
    outgoing->count = destination_count;
    outgoing->next = background->outgoing;
    background->outgoing = outgoing;
    return true;
}

/* Frees the buffers of sends that completed. With `wait`, blocks until all have. */
static void progress_outgoing(struct background *background, bool wait)
{
    struct outgoing **link = &background->outgoing;
    while (*link != NULL) {
        struct outgoing *outgoing = *link;
        int done = 0;
        if (wait)
            done = MPI_Waitall(outgoing->count, outgoing->requests, MPI_STATUSES_IGNORE) ==
                   MPI_SUCCESS;
        else if (MPI_Testall(outgoing->count, outgoing->requests, &done,
                             MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            done = 1; /* a failed send is reported where the peer notices; free the buffer */
        if (!done) {
            link = &outgoing->next;
            continue;
        }
        *link = outgoing->next;
        free(outgoing->bytes);
        free(outgoing->requests);
        free(outgoing);
    }
}

/* ----- taking submissions ----------------------------------------------------------------- */

static bool queue_unsent(struct background *background, const struct wire_request *request)
{
    if (background->unsent_count == background->unsent_capacity) {
        size_t capacity = background->unsent_capacity ? background->unsent_capacity * 2 : 64;
        struct wire_request *grown = realloc(background->unsent, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        background->unsent = grown;
        background->unsent_capacity = capacity;
    }
    struct wire_request *entry = &background->unsent[background->unsent_count];
    if (!wire_request_copy(entry, request))
        return false;
    background->unsent_count++;
    /* A description the cache holds travels as its slot number. */
    long slot = background->rank == 0 ? -1 : response_cache_find(&background->cache, request);
    if (slot >= 0) {
        entry->cached = true;
        entry->cache_slot = (uint32_t)slot;
    }
    return true;
}

/* Moves the user threads' submissions into this thread's tables. Returns true if any. */
static bool take_submissions(struct background *background)
{
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    bool shutdown = context->shutdown_requested && !background->shutdown_sent;
    bool join = context->join_requested && !background->join_sent;
    pthread_mutex_unlock(&context->lock);
    bool any = queued != NULL || shutdown || join;
    while (queued != NULL) {
        struct request *next = queued->next;
        queued->next = NULL;
        if (!name_table_insert(&background->pending, queued->desc.name, queued) ||
            !queue_unsent(background, &queued->desc)) {
            finish_request(background, queued, CHORUS_ERR_OUT_OF_MEMORY,
                           "out of memory in the background thread");
        }
        queued = next;
    }
    if (shutdown) {
        background->unsent_flags |= WIRE_FLAG_SHUTDOWN;
        background->shutdown_sent = true;
    }
    if (join) {
        background->unsent_flags |= WIRE_FLAG_JOIN;
        background->join_sent = true;
        background->executor.joined = true;
    }
    return any;
}

static void clear_unsent(struct background *background)
{
    for (size_t i = 0; i < background->unsent_count; i++)
        wire_request_free(&background->unsent[i]);
    background->unsent_count = 0;
    background->unsent_flags = 0;
}

/* Rank 0 records a rank's requests and flags. */
static void coordinator_accept(struct background *background, int rank,
                               const struct wire_request *requests, size_t count, uint32_t flags)
{
    double now = monotonic_seconds();
    for (size_t i = 0; i < count; i++) {
        const struct wire_request *request = &requests[i];
        if (request->cached) {
            request = response_cache_get(&background->cache, request->cache_slot);
            if (request == NULL) {
                char text[128];
                snprintf(text, sizeof text, "rank %d referred to empty response-cache slot %u",
                         rank, requests[i].cache_slot);
                fatal(background, CHORUS_ERR_PROTOCOL, text);
                return;
            }
        }
        negotiator_submit(&background->negotiator, rank, request, now);
    }
    background->negotiator.now = now;
    if (flags & WIRE_FLAG_JOIN)
        negotiator_join(&background->negotiator, rank);
    if ((flags & WIRE_FLAG_SHUTDOWN) && !background->shutdown_decided) {
        background->shutdown_decided = true;
        background->shutdown_origin = rank;
    }
    if (flags & WIRE_FLAG_BYE)
        background->byes++;
}

/* Sends (or, on rank 0, records) what was submitted since the last time. */
static bool flush_requests(struct background *background)
{
    if (background->unsent_count == 0 && background->unsent_flags == 0)
        return false;
    double spacing = background->context->params.values.cycle_time_ms * 1e-3;
    if (spacing > 0 && monotonic_seconds() - background->last_cycle < spacing &&
        !(background->unsent_flags & WIRE_FLAG_SHUTDOWN))
        return false;
    if (background->rank == 0) {
        coordinator_accept(background, 0, background->unsent, background->unsent_count,
                           background->unsent_flags);
    } else {
        struct wire_message message = {.kind = WIRE_REQUESTS,
                                       .flags = background->unsent_flags,
                                       .count = (uint32_t)background->unsent_count,
                                       .requests = background->unsent};
        int coordinator = 0;
        send_message(background, &message, &coordinator, 1, TAG_REQUESTS);
        background->last_cycle = monotonic_seconds();
    }
    clear_unsent(background);
    return true;
}

/* ----- receiving -------------------------------------------------------------------------- */

/* Receives one message with `tag` from `source` if one is waiting. */
static bool receive_message(struct background *background, int source, int tag,
                            struct wire_message *message, int *sender)
{
    int flag = 0;
    MPI_Message handle;
    MPI_Status status;
    if (MPI_Improbe(source, tag, background->context->control_comm, &flag, &handle, &status) !=
        MPI_SUCCESS) {
        fatal(background, CHORUS_ERR_MPI, "probing for negotiation messages failed");
        return false;
    }
    if (!flag)
        return false;
    int length = 0;
    MPI_Get_count(&status, MPI_BYTE, &length);
    uint8_t *bytes = malloc(length > 0 ? (size_t)length : 1);
    if (bytes == NULL) {
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "cannot receive a negotiation message");
        return false;
    }
    if (MPI_Mrecv(bytes, length, MPI_BYTE, &handle, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        free(bytes);
        fatal(background, CHORUS_ERR_MPI, "receiving a negotiation message failed");
        return false;
    }
    char reason[512];
    chorus_status decoded = wire_decode(bytes, (size_t)length, message, reason, sizeof reason);
    free(bytes);
    if (decoded != CHORUS_OK) {
        char text[700];
        snprintf(text, sizeof text, "from rank %d: %s", status.MPI_SOURCE, reason);
        fatal(background, decoded, text);
        return false;
    }
    *sender = status.MPI_SOURCE;
    return true;
}

/* The timeline's negotiation span: from the first rank's request to the last one's. */
static void timeline_negotiated(void *context, const char *name, const double *arrivals,
                                int nranks)
{
    struct timeline *timeline = context;
    double first = 0, last = 0;
    char *arguments = format_string("%s", "");
    for (int r = 0; r < nranks; r++) {
        if (arrivals[r] == 0)
            continue;
        first = first == 0 || arrivals[r] < first ? arrivals[r] : first;
        last = arrivals[r] > last ? arrivals[r] : last;
    }
    for (int r = 0; r < nranks && arguments != NULL; r++) {
        if (arrivals[r] == 0)
            string_append(&arguments, "%s\"rank %d\": \"joined\"", r ? ", " : "", r);
        else
            string_append(&arguments, "%s\"rank %d ready (us)\": %.1f", r ? ", " : "", r,
                          (arrivals[r] - first) * 1e6);
    }
    timeline_span(timeline, name, "negotiate", first, last, arguments);
    free(arguments);
}

static void stall_warning_log(void *context, const char *message)
{
    (void)context;
    LOG(LOG_WARNING, "stall", "%s", message);
}

/* ----- executing -------------------------------------------------------------------------- */

static void execute(struct background *background, const struct wire_response *responses,
                    size_t count)
{
    if (count == 0)
        return;
    char error[1024] = "";
    chorus_status status =
        executor_run(&background->executor, responses, count, error, sizeof error);
    if (status != CHORUS_OK)
        fatal(background, status, error);
}

/* Fails everything left with CHORUS_ERR_SHUTDOWN once every rank has to stop. */
static void stop(struct background *background, const char *reason)
{
    char text[512];
    snprintf(text, sizeof text, "chorus shut down before it completed (%s)", reason);
    fail_everything(background, CHORUS_ERR_SHUTDOWN, text);
    background->stopping = true;
}

/* Rank 0: takes in every waiting REQUESTS message, answers what is ready, runs it. */
static bool coordinate(struct background *background)
{
    bool active = false;
    struct wire_message message;
    int sender = -1;
    while (!background->finished &&
           receive_message(background, MPI_ANY_SOURCE, TAG_REQUESTS, &message, &sender)) {
        if (!background->stopping)
            coordinator_accept(background, sender, message.requests, message.count,
                               message.flags);
        else if (message.flags & WIRE_FLAG_BYE)
            background->byes++;
        wire_message_free(&message);
        active = true;
    }
    if (background->finished)
        return active;
    if (background->stopping) {
        if (background->byes >= background->size - 1)
            background->finished = true;
        return active;
    }
    const struct chorus_params *params = &background->context->params.values;
    double now = monotonic_seconds();
    if (now - background->last_stall_check >= 1.0) {
        background->last_stall_check = now;
        negotiator_check_stalls(&background->negotiator, now, params->stall_warning_seconds,
                                params->stall_shutdown_seconds, stall_warning_log, NULL);
    }
    if (background->negotiator.failed) {
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "the coordinator ran out of memory");
        return true;
    }
    double spacing = params->cycle_time_ms * 1e-3;
    if (spacing > 0 && now - background->last_cycle < spacing && !background->shutdown_decided)
        return active;
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(&background->negotiator, &responses);
    if (count == 0 && !background->shutdown_decided) {
        free(responses);
        return active;
    }
    char reason[128] = "";
    struct wire_response *sent = responses;
    size_t sent_count = count;
    if (background->shutdown_decided) {
        /* The last response carries who shut down, for the other ranks' messages. */
        snprintf(reason, sizeof reason, "rank %d called chorus_shutdown",
                 background->shutdown_origin);
        sent = realloc(responses, (count + 1) * sizeof *sent);
        if (sent == NULL) {
            sent = responses;
        } else {
            memset(&sent[count], 0, sizeof sent[count]);
            sent[count].type = RESPONSE_ERROR;
            sent[count].status = CHORUS_ERR_SHUTDOWN;
            sent[count].message = strdup(reason);
            sent[count].request.name = strdup("");
            sent[count].request.group = strdup("");
            sent[count].request.group_size = 1;
            sent_count = count + 1;
        }
    }
    if (background->size > 1) {
        int *destinations = malloc((size_t)background->size * sizeof *destinations);
        for (int r = 1; destinations != NULL && r < background->size; r++)
            destinations[r - 1] = r;
        /* What travels: responses the cache holds go as their slot (shallow copies; the full
         * list stays for executing here). */
        struct wire_response *wire = malloc((sent_count ? sent_count : 1) * sizeof *wire);
        for (size_t i = 0; wire != NULL && i < sent_count; i++) {
            wire[i] = sent[i];
            long slot = response_cacheable(&sent[i], background->size)
                            ? response_cache_find(&background->cache, &sent[i].request)
                            : -1;
            if (slot >= 0) {
                wire[i].type = RESPONSE_CACHED;
                wire[i].request.cached = true;
                wire[i].request.cache_slot = (uint32_t)slot;
            } else {
                response_cache_record(&background->cache, &sent[i], background->size);
            }
        }
        struct wire_message out = {.kind = WIRE_RESPONSES,
                                   .flags = background->shutdown_decided ? WIRE_FLAG_SHUTDOWN : 0,
                                   .count = (uint32_t)sent_count,
                                   .responses = wire};
        if (destinations == NULL || wire == NULL)
            fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory sending responses");
        else
            send_message(background, &out, destinations, background->size - 1, TAG_RESPONSES);
        free(destinations);
        free(wire);
    }
    background->last_cycle = now;
    if (!background->finished)
        execute(background, sent, sent_count);
    for (size_t i = 0; i < sent_count; i++)
        wire_response_free(&sent[i]);
    free(sent);
    if (background->shutdown_decided && !background->finished) {
        stop(background, reason);
        if (background->size == 1)
            background->finished = true;
    }
    return true;
}

/* Replaces slot-only responses by the cached descriptions, and records full ones in the same
 * order rank 0 did. */
static bool resolve_cached_responses(struct background *background, struct wire_message *message)
{
    for (size_t i = 0; i < message->count; i++) {
        struct wire_response *response = &message->responses[i];
        if (response->type != RESPONSE_CACHED) {
            response_cache_record(&background->cache, response, background->size);
            continue;
        }
        const struct wire_request *entry =
            response_cache_get(&background->cache, response->request.cache_slot);
        if (entry == NULL) {
            char text[128];
            snprintf(text, sizeof text, "rank 0 referred to empty response-cache slot %u",
                     response->request.cache_slot);
            fatal(background, CHORUS_ERR_PROTOCOL, text);
            return false;
        }
        if (!wire_request_copy(&response->request, entry)) {
            fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory in the response cache");
            return false;
        }
        response->type = RESPONSE_EXECUTE;
        response->status = CHORUS_OK;
        response->contributors = (uint32_t)background->size;
    }
    return true;
}

/* Other ranks: runs the responses rank 0 sent, in order. */
static bool follow(struct background *background)
{
    bool active = false;
    struct wire_message message;
    int sender = -1;
    while (!background->finished && !background->stopping &&
           receive_message(background, 0, TAG_RESPONSES, &message, &sender)) {
        active = true;
        if (!resolve_cached_responses(background, &message)) {
            wire_message_free(&message);
            break;
        }
        execute(background, message.responses, message.count);
        if ((message.flags & WIRE_FLAG_SHUTDOWN) && !background->finished) {
            const char *reason = "another rank called chorus_shutdown";
            if (message.count > 0 && message.responses[message.count - 1].message != NULL &&
                message.responses[message.count - 1].request.name[0] == '\0')
                reason = message.responses[message.count - 1].message;
            stop(background, reason);
            struct wire_message bye = {.kind = WIRE_REQUESTS, .flags = WIRE_FLAG_BYE};
            int coordinator = 0;
            send_message(background, &bye, &coordinator, 1, TAG_REQUESTS);
            background->finished = true;
        }
        wire_message_free(&message);
    }
    return active;
}

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
    nap = nap < 50e-6 ? 50e-6 : nap > cap ? cap : nap;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    long nanoseconds = (long)(nap * 1e9);
    deadline.tv_nsec += nanoseconds;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&context->lock);
    bool work = context->queue_head != NULL ||
                (context->shutdown_requested && !background->shutdown_sent) ||
                (context->join_requested && !background->join_sent);
    if (!work)
        pthread_cond_timedwait(&context->wakeup, &context->lock, &deadline);
    pthread_mutex_unlock(&context->lock);
}

/* ----- start-up --------------------------------------------------------------------------- */

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
    chorus_status status = agree_on_parameters(background, error, error_size);
    if (status != CHORUS_OK)
        return status;
    log_set_level((enum log_level)context->params.values.log_level);
    status = topology_discover(context, error, error_size);
    if (status != CHORUS_OK)
        return status;
    name_table_init(&background->pending);
    response_cache_init(&background->cache, context->params.values.cache_capacity);
    if (context->rank == 0 && !negotiator_init(&background->negotiator, context->size)) {
        snprintf(error, error_size, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (context->rank == 0 && context->params.values.timeline[0] != '\0') {
        background->executor.timeline =
            timeline_open(context->params.values.timeline, error, error_size);
        if (background->executor.timeline == NULL)
            LOG(LOG_WARNING, "timeline", "%s; continuing without a timeline", error);
        error[0] = '\0';
        background->negotiator.resolved = timeline_negotiated;
        background->negotiator.resolved_context = background->executor.timeline;
        if (background->executor.timeline == NULL)
            background->negotiator.resolved = NULL;
    }
    struct executor *executor = &background->executor;
    executor->rank = context->rank;
    executor->nranks = context->size;
    executor->data_comm = context->data_comm;
    transport_mpi_init(&executor->transport, &context->data_comm);
    executor->fusion_threshold = context->params.values.fusion_threshold;
    executor->fusion_tensor_limit = context->params.values.fusion_tensor_limit;
    executor->shared_host = context->topology.homogeneous && context->topology.local_size > 1;
    executor->oversubscribed = context->topology.pus > 0 &&
                               (size_t)context->topology.local_size > context->topology.pus;
    const char *forced[CHORUS_COLLECTIVE_COUNT] = {
        [CHORUS_ALLREDUCE] = context->params.values.allreduce_algorithm,
        [CHORUS_BROADCAST] = context->params.values.broadcast_algorithm,
        [CHORUS_ALLGATHER] = context->params.values.allgather_algorithm,
    };
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        executor->forced_algorithm[c] =
            strcmp(forced[c], "auto") == 0 ? -1 : algorithm_find((chorus_collective)c, forced[c]);
    executor->owner = background;
    executor->take_request = take_request;
    executor->finish = finish_request;
    executor->join_done = join_done;
    background->last_stall_check = monotonic_seconds();
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
        else
            active |= follow(background);
        progress_outgoing(background, false);
        if (active)
            idle_since = monotonic_seconds();
        else
            idle(background, idle_since);
    }
    progress_outgoing(background, true);
    clear_unsent(background);
    free(background->unsent);
    if (background->rank == 0)
        negotiator_destroy(&background->negotiator);
    executor_release(&background->executor);
    response_cache_destroy(&background->cache);
    name_table_destroy(&background->pending);
    release_communicators(context);
    free(background);
    return NULL;
}
