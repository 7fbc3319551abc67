/*
 * star.c — see star.h: sending and receiving negotiation messages, rank 0 answering requests
 * with responses, every rank running the responses in order, the response cache on both ends,
 * heartbeats, and the shutdown handshake.
 */
#include "star.h"

#include "../tuning/autotune.h"

#include "../core/log.h"
#include "../core/timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool star_init(struct star *star, struct chorus_context *context, int rank, int size,
               struct channel *channel, struct pending *pending, struct runner *runner)
{
    memset(star, 0, sizeof *star);
    star->context = context;
    star->rank = rank;
    star->size = size;
    star->params = &context->params.values;
    star->channel = channel;
    star->pending = pending;
    star->runner = runner;
    response_cache_init(&star->cache, star->params->cache_capacity);
    double now = clock_seconds();
    star->last_stall_check = now;
    if (!liveness_init(&star->liveness, rank, size, star->params->timeout_seconds, now))
        return false;
    liveness_batch_done(&star->liveness, now);
    star->other_ranks = channel_ranks_but(0, size);
    if (star->other_ranks == NULL)
        return false;
    if (rank != 0)
        return true;
    if (!negotiator_init(&star->negotiator, size))
        return false;
    star->negotiator.refuse_joined_gathers =
        star->params->joined_gathers == JOINED_GATHERS_FAIL;
    return true;
}

void star_release(struct star *star)
{
    if (star->rank == 0)
        negotiator_destroy(&star->negotiator);
    liveness_release(&star->liveness);
    free(star->other_ranks);
    star->other_ranks = NULL;
    response_cache_destroy(&star->cache);
}

/* ----- sending ---------------------------------------------------------------------------- */

/* Encodes and posts `message`; CHORUS_OK, or why it cannot. */
static chorus_status post_message(struct star *star, const struct wire_message *message,
                                  const int *destinations, int destination_count, int tag)
{
    uint8_t *bytes = NULL;
    size_t length = wire_encode(message, &bytes);
    if (length == 0)
        return CHORUS_ERR_OUT_OF_MEMORY;
    LOG(LOG_TRACE, "negotiation", "sending %s of %u entries (%zu bytes) to %d rank(s)",
        message->kind == WIRE_REQUESTS ? "requests" : "responses", message->count, length,
        destination_count);
    chorus_status status = star->channel->post(star->channel->state, bytes, length,
                                               destinations, destination_count, tag);
    if (status == CHORUS_OK) {
        star->messages_sent += (size_t)destination_count;
        liveness_sent(&star->liveness, clock_seconds());
    }
    return status;
}

static bool send_message(struct star *star, const struct wire_message *message,
                         const int *destinations, int destination_count, int tag,
                         struct coord_report *report)
{
    chorus_status why = post_message(star, message, destinations, destination_count, tag);
    if (why == CHORUS_OK)
        return true;
    const char *failed = channel_failure(star->channel, "sending a negotiation message failed");
    return report_fail(report, why, "%s",
                       why == CHORUS_ERR_OUT_OF_MEMORY ? "cannot encode a negotiation message"
                                                       : failed);
}

void star_progress(struct star *star, bool wait, bool failed)
{
    star->channel->progress(star->channel->state, wait, failed);
}

static void coordinator_accept(struct star *star, int rank, const struct wire_request *requests,
                               size_t count, uint32_t flags, struct coord_report *report)
{
    double now = clock_seconds();
    for (size_t i = 0; i < count; i++) {
        const struct wire_request *request = &requests[i];
        if (request->cached) {
            request = response_cache_get(&star->cache, request->cache_slot);
            if (request == NULL) {
                report_fail(report, CHORUS_ERR_PROTOCOL,
                            "rank %d referred to empty response-cache slot %u", rank,
                            requests[i].cache_slot);
                return;
            }
        }
        negotiator_submit(&star->negotiator, rank, request, now);
    }
    star->negotiator.now = now;
    if (flags & WIRE_FLAG_JOIN)
        negotiator_join(&star->negotiator, rank);
    if ((flags & WIRE_FLAG_SHUTDOWN) && !star->shutdown_decided) {
        star->shutdown_decided = true;
        star->shutdown_origin = rank;
    }
    if (flags & WIRE_FLAG_BYE) {
        star->byes++;
        liveness_gone(&star->liveness, rank);
    }
}

bool star_flush(struct star *star, struct coord_report *report)
{
    struct pending *pending = star->pending;
    if (pending->unsent_count == 0 && pending->unsent_flags == 0)
        return false;
    double spacing = star->params->cycle_time_ms * 1e-3;
    if (spacing > 0 && clock_seconds() - star->last_cycle < spacing &&
        !(pending->unsent_flags & WIRE_FLAG_SHUTDOWN))
        return false;
    if (star->rank == 0) {
        coordinator_accept(star, 0, pending->unsent, pending->unsent_count, pending->unsent_flags,
                           report);
    } else {
        struct wire_message message = {.kind = WIRE_REQUESTS,
                                       .flags = pending->unsent_flags,
                                       .count = (uint32_t)pending->unsent_count,
                                       .requests = pending->unsent};
        static const int coordinator = 0;
        send_message(star, &message, &coordinator, 1, CHANNEL_REQUESTS, report);
        star->last_cycle = clock_seconds();
    }
    pending_clear_unsent(pending);
    return true;
}

/* ----- receiving -------------------------------------------------------------------------- */

bool star_receive(struct star *star, int source, int tag, struct wire_message *message,
                  int *sender, bool *received, struct coord_report *report)
{
    *received = false;
    uint8_t *bytes = NULL;
    size_t length = 0;
    chorus_status status =
        star->channel->receive(star->channel->state, source, tag, &bytes, &length, sender);
    if (status != CHORUS_OK)
        return report_fail(report, status, "%s",
                           status == CHORUS_ERR_OUT_OF_MEMORY
                               ? "cannot receive a negotiation message"
                               : channel_failure(star->channel,
                                                 "receiving a negotiation message failed"));
    if (bytes == NULL)
        return true;
    char reason[512];
    chorus_status decoded = wire_decode(bytes, length, message, reason, sizeof reason);
    free(bytes);
    if (decoded != CHORUS_OK)
        return report_fail(report, decoded, "from rank %d: %s", *sender, reason);
    star->messages_received++;
    liveness_heard(&star->liveness, *sender, clock_seconds());
    *received = true;
    return true;
}

/* The timeline's negotiation span: from the first rank's request to the last one's. */
void star_timeline_negotiated(void *context, int set, const char *name, const double *arrivals,
                              int nranks)
{
    struct timeline *timeline = context;
    double first = 0, last = 0;
    char *arguments = text_format("%s", "");
    for (int r = 0; r < nranks; r++) {
        if (arrivals[r] == 0)
            continue;
        first = first == 0 || arrivals[r] < first ? arrivals[r] : first;
        last = arrivals[r] > last ? arrivals[r] : last;
    }
    for (int r = 0; r < nranks && arguments != NULL; r++) {
        if (arrivals[r] == 0)
            text_append(&arguments, "%s\"rank %d\": \"joined\"", r ? ", " : "", r);
        else
            text_append(&arguments, "%s\"rank %d ready (us)\": %.1f", r ? ", " : "", r,
                          (arrivals[r] - first) * 1e6);
    }
    timeline_span(timeline, set, name, "negotiate", first, last, arguments);
    free(arguments);
}

static void stall_warning_log(void *context, const char *message)
{
    (void)context;
    LOG(LOG_WARNING, "stall", "%s", message);
}

/* ----- executing -------------------------------------------------------------------------- */

void star_execute(struct star *star, const struct wire_response *responses, size_t count,
                  struct coord_report *report)
{
    if (count == 0)
        return;
    char error[1024] = "";
    chorus_status status = runner_run(star->runner, responses, count, NULL, error, sizeof error);
    liveness_batch_done(&star->liveness, clock_seconds());
    if (status == CHORUS_OK && star->autotune != NULL)
        status = autotune_batch_done(star->autotune, responses, count, error, sizeof error);
    if (status != CHORUS_OK)
        report_fail(report, status, "%s", error);
}

/* Sends a heartbeat if this rank has been quiet for its spacing (liveness.h); with rounds,
 * rank 0 sends none. A heartbeat that cannot be sent is not an error here: the peer notices. */
static bool heartbeat_if_due(struct star *star, bool stopping, double now)
{
    bool is_coordinator = star->rank == 0;
    if (stopping || star->size == 1 || (star->rounds_mode && is_coordinator) ||
        !liveness_heartbeat_due(&star->liveness, now))
        return false;
    static const int coordinator = 0;
    struct wire_message heartbeat = {.kind = is_coordinator ? WIRE_RESPONSES : WIRE_REQUESTS};
    if (is_coordinator)
        post_message(star, &heartbeat, star->other_ranks, star->size - 1, CHANNEL_RESPONSES);
    else
        post_message(star, &heartbeat, &coordinator, 1, CHANNEL_REQUESTS);
    return true;
}

void star_while_waiting(void *owner)
{
    heartbeat_if_due(owner, false, clock_seconds());
    /* Messages still outgoing, the responses a peer waits for above all, may move only inside
     * MPI calls of this rank (MPICH's UCX device), and it may wait for that peer meanwhile. */
    star_progress(owner, false, false);
}

bool star_keep_alive(struct star *star, bool stopping, double now, struct coord_report *report)
{
    struct liveness *liveness = &star->liveness;
    if (star->size == 1)
        return false;
    bool sent = heartbeat_if_due(star, stopping, now);
    /* With rounds only rank 0 watches (liveness.h). */
    bool is_coordinator = star->rank == 0;
    if (star->rounds_mode && !is_coordinator)
        return sent;
    double silence = 0;
    int silent = liveness_silent_peer(liveness, now, &silence);
    if (silent < 0)
        return sent;
    char doing[160];
    if (stopping)
        snprintf(doing, sizeof doing, "this rank waited for every rank to shut down");
    else
        snprintf(doing, sizeof doing, "this rank (%d) had %zu tensor(s) in negotiation",
                 star->rank, star->pending->table.size);
    report_fail(report, CHORUS_ERR_TIMEOUT,
                "rank %d (host %s)%s sent nothing for %.1f s while %s: it froze, its process "
                "died or the network to it is down (CHORUS_TIMEOUT_SECONDS=%g)",
                silent, context_host_name(star->context, silent),
                silent == 0 ? ", the coordinator," : "", silence, doing, liveness->bound);
    return true;
}

/* Rank 0 takes in every REQUESTS message waiting (only BYEs once it is stopping), but answers
 * first once one made a response that goes out at once (star, no cycle time): the look that
 * finds no more messages is an MPI call (a poll of the sockets over TCP), which would delay the
 * answer. Where answers wait (for a round, or the cycle), it drains them all as before. Returns
 * true if there was any. */
static bool take_in_requests(struct star *star, bool stopping, struct coord_report *report)
{
    bool any = false;
    bool answers_at_once = !star->rounds_mode && star->params->cycle_time_ms <= 0;
    struct wire_message message;
    int sender = -1;
    bool received = false;
    while (!report_pending(report) &&
           star_receive(star, -1, CHANNEL_REQUESTS, &message, &sender, &received, report) &&
           received) {
        if (!stopping)
            coordinator_accept(star, sender, message.requests, message.count, message.flags,
                               report);
        else if (message.flags & WIRE_FLAG_BYE) {
            star->byes++;
            liveness_gone(&star->liveness, sender);
        }
        wire_message_free(&message);
        any = true;
        if (answers_at_once && star->negotiator.response_count > 0)
            break; /* the rest next turn */
    }
    return any;
}

/* Once a second: warns of, or fails, tensors that some ranks submitted and others not. */
static void check_stalls(struct star *star, double now)
{
    if (now - star->last_stall_check < 1.0)
        return;
    star->last_stall_check = now;
    negotiator_check_stalls(&star->negotiator, now, star->params->stall_warning_seconds,
                            star->params->stall_shutdown_seconds, stall_warning_log, NULL);
}

/* When shutting down, the list ends with an error response that carries who shut down, for the
 * other ranks' messages (in `reason` too). Returns the list, grown, and its new count. */
struct wire_response *star_append_shutdown_notice(struct star *star,
                                                  struct wire_response *responses,
                                                  size_t *count, char *reason,
                                                  size_t reason_size)
{
    snprintf(reason, reason_size, "rank %d called chorus_shutdown", star->shutdown_origin);
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
bool star_send_responses(struct star *star, const struct wire_response *responses, size_t count,
                         struct coord_report *report)
{
    struct wire_response *wire = malloc((count ? count : 1) * sizeof *wire);
    if (wire == NULL)
        return report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "out of memory sending responses");
    for (size_t i = 0; i < count; i++)
        wire[i] = response_cache_outgoing(&star->cache, &responses[i], star->size);
    struct wire_message out = {.kind = WIRE_RESPONSES,
                               .flags = star->shutdown_decided ? WIRE_FLAG_SHUTDOWN : 0,
                               .count = (uint32_t)count,
                               .responses = wire};
    bool sent = send_message(star, &out, star->other_ranks, star->size - 1, CHANNEL_RESPONSES,
                             report);
    free(wire);
    return sent;
}

/* Rank 0, by rounds: how often it looks for requests in full. They are rare there (first
 * sightings, mismatches, stalls, joins) and wait for the next round anyway, while a look is an
 * MPI probe, which costs as much as a small collective on the path of every round. */
#define ROUNDS_REQUEST_PROBE_SPACING 20e-6

bool star_coordinate(struct star *star, bool stopping, double now, struct coord_report *report)
{
    bool look = !star->rounds_mode || stopping ||
                now - star->last_request_probe >= ROUNDS_REQUEST_PROBE_SPACING;
    if (look)
        star->last_request_probe = now;
    bool active = look && take_in_requests(star, stopping, report);
    if (report_pending(report))
        return active;
    if (stopping) {
        report->finished = star->byes >= star->size - 1;
        return active;
    }
    check_stalls(star, now);
    if (star->negotiator.failed) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "the coordinator ran out of memory");
        return true;
    }
    if (star->rounds_mode)
        return active; /* answered when the next round is posted (rounds.c) */
    double spacing = star->params->cycle_time_ms * 1e-3;
    if (spacing > 0 && now - star->last_cycle < spacing && !star->shutdown_decided)
        return active;
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(&star->negotiator, &responses);
    if (count == 0 && !star->shutdown_decided) {
        free(responses);
        return active;
    }
    for (size_t i = 0; i < count && LOG_INFO <= log_threshold; i++)
        if (responses[i].type == RESPONSE_ERROR && responses[i].message != NULL)
            LOG(LOG_INFO, "negotiation", "%s", responses[i].message);
    char reason[128] = "";
    if (star->shutdown_decided)
        responses = star_append_shutdown_notice(star, responses, &count, reason, sizeof reason);
    if (star->size > 1)
        star_send_responses(star, responses, count, report);
    star->last_cycle = now;
    if (!report_pending(report))
        star_execute(star, responses, count, report);
    for (size_t i = 0; i < count; i++)
        wire_response_free(&responses[i]);
    free(responses);
    if (star->shutdown_decided && report->failure == CHORUS_OK) {
        report_shutdown(report, reason);
        report->finished = star->size == 1;
    }
    return true;
}

/* Replaces slot-only responses by the cached descriptions, and records full ones in the same
 * order rank 0 did. */
bool star_resolve_cached(struct star *star, struct wire_message *message,
                         struct coord_report *report)
{
    for (size_t i = 0; i < message->count; i++) {
        struct wire_response *response = &message->responses[i];
        uint32_t slot = response->request.cache_slot;
        bool empty_slot = false;
        if (response_cache_incoming(&star->cache, response, star->size, &empty_slot))
            continue;
        if (empty_slot)
            return report_fail(report, CHORUS_ERR_PROTOCOL,
                               "rank 0 referred to empty response-cache slot %u", slot);
        return report_fail(report, CHORUS_ERR_OUT_OF_MEMORY,
                           "out of memory in the response cache");
    }
    return true;
}

void star_say_bye(struct star *star, const struct wire_message *message,
                  struct coord_report *report)
{
    const char *reason = "another rank called chorus_shutdown";
    if (message->count > 0 && message->responses[message->count - 1].message != NULL &&
        message->responses[message->count - 1].request.name[0] == '\0')
        reason = message->responses[message->count - 1].message;
    report_shutdown(report, reason);
    struct wire_message bye = {.kind = WIRE_REQUESTS, .flags = WIRE_FLAG_BYE};
    static const int coordinator = 0;
    send_message(star, &bye, &coordinator, 1, CHANNEL_REQUESTS, report);
    report->finished = true;
}

/* A follower runs one RESPONSES message of rank 0's per turn: the operations it completes are
 * seen by a waiting thread after the turn, and a look for a next one would be an MPI call (a
 * poll of the sockets over TCP) before it. */
bool star_follow(struct star *star, struct coord_report *report)
{
    struct wire_message message;
    int sender = -1;
    bool received = false;
    if (report_pending(report) ||
        !star_receive(star, 0, CHANNEL_RESPONSES, &message, &sender, &received, report) ||
        !received)
        return false;
    if (star_resolve_cached(star, &message, report)) {
        star_execute(star, message.responses, message.count, report);
        if ((message.flags & WIRE_FLAG_SHUTDOWN) && !report_pending(report))
            star_say_bye(star, &message, report);
    }
    wire_message_free(&message);
    return true;
}
