/*
 * exchange.c — the negotiation messages of the background thread (see background.c for the
 * protocol): sending and receiving them, rank 0 answering requests with responses, every rank
 * running the responses in order, the response cache on both ends, and the shutdown handshake.
 */
#include "background.h"

#include "../core/log.h"
#include "../core/retained.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----- sending ---------------------------------------------------------------------------- */

/* Encodes and posts `message`; false, with `why` set, when it cannot. */
static bool post_message(struct background *background, const struct wire_message *message,
                         const int *destinations, int destination_count, int tag,
                         chorus_status *why)
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
        *why = CHORUS_ERR_OUT_OF_MEMORY;
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
            *why = CHORUS_ERR_MPI;
            return false;
        }
    }
    outgoing->count = destination_count;
    background->messages_sent += (size_t)destination_count;
    liveness_sent(&background->liveness, monotonic_seconds());
    outgoing->next = background->outgoing;
    background->outgoing = outgoing;
    return true;
}

bool send_message(struct background *background, const struct wire_message *message,
                  const int *destinations, int destination_count, int tag)
{
    chorus_status why = CHORUS_OK;
    if (post_message(background, message, destinations, destination_count, tag, &why))
        return true;
    fatal(background, why,
          why == CHORUS_ERR_MPI ? "sending a negotiation message failed"
                                : "cannot encode a negotiation message");
    return false;
}

/* After a fatal error, how long the last sends may take before they are given up: a peer that
 * stopped too never receives them, and a large message (above the transport's eager limit)
 * then never completes. Measured by mpi_fatal's large-backlog case: without a bound, shutdown
 * hung in 2 of 4 runs at np=3. */
#define FAILED_DRAIN_SECONDS 1.0

/* Gives up the sends still outgoing: MPI frees each request when it completes, if ever. Their
 * buffers are retained until MPI is finalized, as MPI may still read them. */
static void abandon_outgoing(struct background *background)
{
    while (background->outgoing != NULL) {
        struct outgoing *outgoing = background->outgoing;
        background->outgoing = outgoing->next;
        for (int i = 0; i < outgoing->count; i++)
            if (outgoing->requests[i] != MPI_REQUEST_NULL)
                MPI_Request_free(&outgoing->requests[i]);
        retain_after_failure(outgoing->bytes);
        free(outgoing->requests);
        free(outgoing);
    }
}

void progress_outgoing(struct background *background, bool wait)
{
    /* After a fatal error peers may never receive what is still outgoing. */
    if (wait && background->executor.aborted) {
        double give_up = monotonic_seconds() + FAILED_DRAIN_SECONDS;
        while (background->outgoing != NULL && monotonic_seconds() < give_up) {
            progress_outgoing(background, false);
            sched_yield();
        }
        abandon_outgoing(background);
        return;
    }
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
    if (flags & WIRE_FLAG_BYE) {
        background->byes++;
        liveness_gone(&background->liveness, rank);
    }
}

bool flush_requests(struct background *background)
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
bool receive_message(struct background *background, int source, int tag,
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
    background->messages_received++;
    liveness_heard(&background->liveness, *sender, monotonic_seconds());
    return true;
}

/* The timeline's negotiation span: from the first rank's request to the last one's. */
void timeline_negotiated(void *context, const char *name, const double *arrivals,
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

void stall_warning_log(void *context, const char *message)
{
    (void)context;
    LOG(LOG_WARNING, "stall", "%s", message);
}

/* ----- executing -------------------------------------------------------------------------- */

void execute(struct background *background, const struct wire_response *responses, size_t count)
{
    if (count == 0)
        return;
    char error[1024] = "";
    chorus_status status = run_responses(background, responses, count, error, sizeof error);
    liveness_batch_done(&background->liveness, monotonic_seconds());
    if (status != CHORUS_OK)
        fatal(background, status, error);
}

/* Sends a heartbeat if this rank has been quiet for its spacing (liveness.h); with rounds,
 * rank 0 sends none. A heartbeat that cannot be sent is not an error here: the peer notices. */
static bool heartbeat_if_due(struct background *background, double now)
{
    bool is_coordinator = background->rank == 0;
    if (background->finished || background->stopping || background->size == 1 ||
        (background->rounds_mode && is_coordinator) ||
        !liveness_heartbeat_due(&background->liveness, now))
        return false;
    static const int coordinator = 0;
    struct wire_message heartbeat = {.kind = is_coordinator ? WIRE_RESPONSES : WIRE_REQUESTS};
    chorus_status why = CHORUS_OK;
    if (is_coordinator)
        post_message(background, &heartbeat, background->other_ranks, background->size - 1,
                     TAG_RESPONSES, &why);
    else
        post_message(background, &heartbeat, &coordinator, 1, TAG_REQUESTS, &why);
    return true;
}

void heartbeat_while_waiting(void *owner)
{
    heartbeat_if_due(owner, monotonic_seconds());
}

bool keep_alive(struct background *background)
{
    struct liveness *liveness = &background->liveness;
    if (background->finished || background->size == 1)
        return false;
    double now = monotonic_seconds();
    bool sent = heartbeat_if_due(background, now);
    /* With rounds only rank 0 watches (liveness.h). */
    bool is_coordinator = background->rank == 0;
    if (background->rounds_mode && !is_coordinator)
        return sent;
    double silence = 0;
    int silent = liveness_silent_peer(liveness, now, &silence);
    if (silent < 0 || background->finished)
        return sent;
    char doing[160];
    if (background->stopping)
        snprintf(doing, sizeof doing, "this rank waited for every rank to shut down");
    else
        snprintf(doing, sizeof doing, "this rank (%d) had %zu tensor(s) in negotiation",
                 background->rank, background->pending.size);
    char text[512];
    snprintf(text, sizeof text,
             "rank %d (host %s)%s sent nothing for %.1f s while %s: it froze, its process died "
             "or the network to it is down (CHORUS_TIMEOUT_SECONDS=%g)",
             silent, context_host_name(background->context, silent),
             silent == 0 ? ", the coordinator," : "", silence, doing, liveness->bound);
    fatal(background, CHORUS_ERR_TIMEOUT, text);
    return true;
}

/* Fails everything left with CHORUS_ERR_SHUTDOWN once every rank has to stop. */
void stop(struct background *background, const char *reason)
{
    char text[512];
    snprintf(text, sizeof text, "chorus shut down before it completed (%s)", reason);
    fail_everything(background, CHORUS_ERR_SHUTDOWN, text);
    background->stopping = true;
}

/* Rank 0 takes in every REQUESTS message waiting (only BYEs once it is stopping). Returns
 * true if there was any. */
bool take_in_requests(struct background *background)
{
    bool any = false;
    struct wire_message message;
    int sender = -1;
    while (!background->finished &&
           receive_message(background, MPI_ANY_SOURCE, TAG_REQUESTS, &message, &sender)) {
        if (!background->stopping)
            coordinator_accept(background, sender, message.requests, message.count, message.flags);
        else if (message.flags & WIRE_FLAG_BYE) {
            background->byes++;
            liveness_gone(&background->liveness, sender);
        }
        wire_message_free(&message);
        any = true;
    }
    return any;
}

/* Once a second: warns of, or fails, tensors that some ranks submitted and others not. */
void check_stalls(struct background *background, double now)
{
    const struct chorus_params *params = &background->context->params.values;
    if (now - background->last_stall_check < 1.0)
        return;
    background->last_stall_check = now;
    negotiator_check_stalls(&background->negotiator, now, params->stall_warning_seconds,
                            params->stall_shutdown_seconds, stall_warning_log, NULL);
}

/* When shutting down, the list ends with an error response that carries who shut down, for the
 * other ranks' messages (in `reason` too). Returns the list, grown, and its new count. */
struct wire_response *append_shutdown_notice(struct background *background,
                                             struct wire_response *responses, size_t *count,
                                             char *reason, size_t reason_size)
{
    snprintf(reason, reason_size, "rank %d called chorus_shutdown", background->shutdown_origin);
    struct wire_response *grown = realloc(responses, (*count + 1) * sizeof *grown);
    if (grown == NULL)
        return responses;
    grown[*count] = (struct wire_response){
        .type = RESPONSE_ERROR,
        .status = CHORUS_ERR_SHUTDOWN,
        .message = strdup(reason),
        .request = {.name = strdup(""), .group = strdup(""), .group_size = 1}};
    (*count)++;
    return grown;
}

/* Sends `responses` to every other rank: those the response cache holds as their slot
 * (shallow copies; the full list stays for executing here), the others in full, which every
 * rank then records in the cache in the same order. */
void send_responses(struct background *background, const struct wire_response *responses,
                    size_t count)
{
    struct wire_response *wire = malloc((count ? count : 1) * sizeof *wire);
    if (wire == NULL) {
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory sending responses");
        return;
    }
    for (size_t i = 0; i < count; i++)
        wire[i] = response_cache_outgoing(&background->cache, &responses[i], background->size);
    struct wire_message out = {.kind = WIRE_RESPONSES,
                               .flags = background->shutdown_decided ? WIRE_FLAG_SHUTDOWN : 0,
                               .count = (uint32_t)count,
                               .responses = wire};
    send_message(background, &out, background->other_ranks, background->size - 1, TAG_RESPONSES);
    free(wire);
}

bool coordinate(struct background *background)
{
    bool active = take_in_requests(background);
    if (background->finished)
        return active;
    if (background->stopping) {
        if (background->byes >= background->size - 1)
            background->finished = true;
        return active;
    }
    double now = monotonic_seconds();
    check_stalls(background, now);
    if (background->negotiator.failed) {
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "the coordinator ran out of memory");
        return true;
    }
    if (background->rounds_mode)
        return active; /* answered when the next round is posted (rounds.c) */
    double spacing = background->context->params.values.cycle_time_ms * 1e-3;
    if (spacing > 0 && now - background->last_cycle < spacing && !background->shutdown_decided)
        return active;
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(&background->negotiator, &responses);
    if (count == 0 && !background->shutdown_decided) {
        free(responses);
        return active;
    }
    for (size_t i = 0; i < count && LOG_INFO <= log_threshold; i++)
        if (responses[i].type == RESPONSE_ERROR && responses[i].message != NULL)
            LOG(LOG_INFO, "negotiation", "%s", responses[i].message);
    char reason[128] = "";
    if (background->shutdown_decided)
        responses = append_shutdown_notice(background, responses, &count, reason, sizeof reason);
    if (background->size > 1)
        send_responses(background, responses, count);
    background->last_cycle = now;
    if (!background->finished)
        execute(background, responses, count);
    for (size_t i = 0; i < count; i++)
        wire_response_free(&responses[i]);
    free(responses);
    if (background->shutdown_decided && !background->finished) {
        stop(background, reason);
        if (background->size == 1)
            background->finished = true;
    }
    return true;
}

/* Replaces slot-only responses by the cached descriptions, and records full ones in the same
 * order rank 0 did. */
bool resolve_cached_responses(struct background *background, struct wire_message *message)
{
    for (size_t i = 0; i < message->count; i++) {
        struct wire_response *response = &message->responses[i];
        uint32_t slot = response->request.cache_slot;
        bool empty_slot = false;
        if (response_cache_incoming(&background->cache, response, background->size, &empty_slot))
            continue;
        if (empty_slot) {
            char text[128];
            snprintf(text, sizeof text, "rank 0 referred to empty response-cache slot %u", slot);
            fatal(background, CHORUS_ERR_PROTOCOL, text);
        } else {
            fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory in the response cache");
        }
        return false;
    }
    return true;
}

void stop_following(struct background *background, const struct wire_message *message)
{
    const char *reason = "another rank called chorus_shutdown";
    if (message->count > 0 && message->responses[message->count - 1].message != NULL &&
        message->responses[message->count - 1].request.name[0] == '\0')
        reason = message->responses[message->count - 1].message;
    stop(background, reason);
    struct wire_message bye = {.kind = WIRE_REQUESTS, .flags = WIRE_FLAG_BYE};
    int coordinator = 0;
    send_message(background, &bye, &coordinator, 1, TAG_REQUESTS);
    background->finished = true;
}

bool follow(struct background *background)
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
        if ((message.flags & WIRE_FLAG_SHUTDOWN) && !background->finished)
            stop_following(background, &message);
        wire_message_free(&message);
    }
    return active;
}
