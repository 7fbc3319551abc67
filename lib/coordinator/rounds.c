/*
 * rounds.c — see rounds.h.
 */
#include "rounds.h"

#include "../collectives/small_collectives.h"
#include "../core/log.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* With nothing to negotiate a rank still takes part in a round this often, so that ranks with
 * work wait at most about this long for it. */
#define IDLE_ROUND_SPACING 1e-3
/* A bit that waited this long goes to rank 0 in full, whose stall inspector names the ranks
 * that did not submit (sooner where the stall parameters are shorter). */
#define DEMOTE_AFTER_SECONDS 1.0
/* Slots beyond this travel by the star path: a round's vector stays at most 2 KiB, however
 * large CHORUS_CACHE_CAPACITY is. */
#define ROUND_SLOTS_LIMIT 8192
/* The ranks other than 0 give rank 0, which can name the rank that stopped, a head start. */
#define FOLLOWER_ROUND_MARGIN 1.0
/* Across hosts (rounds by copies) a lone allreduce rides with the round up to this many bytes:
 * each rank sends its payload to every other, so beyond a few KiB an allreduce's algorithm,
 * which sends each byte a bounded number of times, moves less. */
#define ROUND_COPY_PAYLOAD_LIMIT 4096

/* The slots of a round's vector: as many as the response cache has, up to ROUND_SLOTS_LIMIT. */
static size_t round_slot_count(const struct chorus_params *params)
{
    return params->cache_capacity < ROUND_SLOTS_LIMIT ? params->cache_capacity : ROUND_SLOTS_LIMIT;
}

/* Turns rounds on: their state and vectors. */
static bool rounds_start(struct rounds *rounds, const struct chorus_params *params)
{
    rounds->on = true;
    double demote_after = DEMOTE_AFTER_SECONDS;
    if (params->stall_warning_seconds > 0 && params->stall_warning_seconds / 4 < demote_after)
        demote_after = params->stall_warning_seconds / 4;
    if (params->stall_shutdown_seconds > 0 && params->stall_shutdown_seconds / 4 < demote_after)
        demote_after = params->stall_shutdown_seconds / 4;
    rounds->demote_after = demote_after;
    if (!ready_rounds_init(&rounds->state, round_slot_count(params)))
        return false;
    size_t words = ready_rounds_vector_words(&rounds->state);
    rounds->mine = calloc(words, sizeof *rounds->mine);
    rounds->result = calloc(words, sizeof *rounds->result);
    LOG(LOG_DEBUG, "negotiation", "rounds of %zu bytes, demoting bits after %g s",
        words * sizeof(uint64_t), demote_after);
    return rounds->mine != NULL && rounds->result != NULL;
}

bool rounds_init(struct rounds *rounds, const struct chorus_params *params, int size)
{
    memset(rounds, 0, sizeof *rounds);
    bool on = params->negotiation == NEGOTIATION_ROUNDS ||
              (params->negotiation == NEGOTIATION_AUTO && size >= NEGOTIATION_ROUNDS_FROM);
    return !on || rounds_start(rounds, params);
}

/* Where each slot's payload and vector lie, and the bytes of a data area, for payloads of up to
 * `payload_capacity` bytes. */
static size_t lay_out_slots(struct rounds *rounds, const struct chorus_params *params,
                            size_t payload_capacity)
{
    rounds->payload_capacity = payload_capacity;
    rounds->vector_offset =
        (payload_capacity + SMALL_LINE_BYTES - 1) / SMALL_LINE_BYTES * SMALL_LINE_BYTES;
    return rounds->vector_offset +
           ready_rounds_words_for(round_slot_count(params)) * sizeof(uint64_t);
}

bool rounds_open_slots(struct rounds *rounds, const struct chorus_params *params, int size,
                       const void *node_comm, const struct host_exchange *exchange,
                       bool oversubscribed, char *error, size_t error_size)
{
    if (params->negotiation == NEGOTIATION_STAR || size < 2)
        return false;
    size_t bytes = lay_out_slots(rounds, params, params->small_limit);
    chorus_status made =
        exchange != NULL
            ? small_segment_create_links(&rounds->slots, exchange, bytes, oversubscribed, error,
                                         error_size)
            : small_segment_create_mpi(&rounds->slots, node_comm, bytes, oversubscribed, error,
                                       error_size);
    if (made != CHORUS_OK)
        return false;
    rounds->slots_ready = true;
    if (!rounds->on && !rounds_start(rounds, params)) {
        snprintf(error, error_size, "out of memory");
        rounds->on = false; /* the slots stay, unused, and are freed with the rest */
    }
    return rounds->on;
}

bool rounds_open_copies(struct rounds *rounds, const struct chorus_params *params, int rank,
                        int size, char *error, size_t error_size)
{
    if (params->negotiation == NEGOTIATION_STAR || size < 2 ||
        size > NEGOTIATION_ROUND_COPIES_UP_TO)
        return false;
    size_t payload = params->small_limit < ROUND_COPY_PAYLOAD_LIMIT ? params->small_limit
                                                                    : ROUND_COPY_PAYLOAD_LIMIT;
    size_t bytes = lay_out_slots(rounds, params, payload);
    rounds->peers = channel_ranks_but(rank, size);
    if (rounds->peers == NULL || !small_segment_create_copies(&rounds->slots, rank, size, bytes) ||
        (!rounds->on && !rounds_start(rounds, params))) {
        snprintf(error, error_size, "out of memory");
        small_segment_destroy_copies(&rounds->slots);
        free(rounds->peers);
        rounds->peers = NULL;
        rounds->on = false;
        return false;
    }
    rounds->slots_ready = true;
    rounds->copies = true;
    return true;
}

/* Rank 0: frees the responses it sent before the posted round. */
static void drop_round_responses(struct rounds *rounds)
{
    for (size_t i = 0; i < rounds->response_count; i++)
        wire_response_free(&rounds->responses[i]);
    free(rounds->responses);
    rounds->responses = NULL;
    rounds->response_count = 0;
    rounds->shutdown_reason[0] = '\0';
}

void rounds_release(struct rounds *rounds, bool failed)
{
    /* A round still posted over MPI after a fatal error is left to MPI: a collective's request
     * cannot be freed, and its buffers stay with it. One through the slots holds nothing. */
    bool held_by_mpi = rounds->posted && !rounds->slots_ready;
    if (rounds->copies)
        small_segment_destroy_copies(&rounds->slots);
    else if (rounds->slots_ready)
        small_segment_release(&rounds->slots, failed);
    rounds->slots_ready = rounds->copies = false;
    free(rounds->peers);
    rounds->peers = NULL;
    if (!held_by_mpi) {
        free(rounds->mine);
        free(rounds->result);
    }
    rounds->mine = rounds->result = NULL;
    drop_round_responses(rounds);
    ready_rounds_destroy(&rounds->state);
}

bool rounds_take(struct rounds *rounds, const struct response_cache *cache,
                 const struct wire_request *request)
{
    if (!rounds->on)
        return false;
    return ready_rounds_route(&rounds->state, cache, request, clock_seconds()) == ROUTE_BIT;
}

/* Non-root ranks: the RESPONSES message rank 0 sent before the completed round. Waits for it:
 * rank 0 sent it before posting the round, so it is on its way. */
static bool receive_round_responses(struct star *star, struct wire_message *message,
                                    struct coord_report *report)
{
    int sender = -1;
    bool received = false;
    while (star_receive(star, 0, CHANNEL_RESPONSES, message, &sender, &received, report) &&
           !received) {
        char failure[1024];
        chorus_status peer =
            executor_peer_failure(&star->runner->executor, failure, sizeof failure);
        if (peer != CHORUS_OK)
            return report_fail(report, peer, "%s", failure);
        sched_yield();
    }
    return received && star_resolve_cached(star, message, report);
}

/* The responses that precede the round's slots. Returns false when chorus stops here. */
static bool run_round_responses(struct rounds *rounds, struct star *star,
                                struct coord_report *report)
{
    struct wire_message message = {0};
    const struct wire_response *responses = rounds->responses;
    size_t count = rounds->response_count;
    if (star->rank != 0) {
        if (!receive_round_responses(star, &message, report)) {
            wire_message_free(&message);
            return false;
        }
        responses = message.responses;
        count = message.count;
    }
    star_execute(star, responses, count, report);
    for (size_t i = 0; i < count; i++)
        ready_rounds_response_ran(&rounds->state, &star->cache, &responses[i]);
    bool shutdown = star->rank == 0 ? rounds->shutdown_reason[0] != '\0'
                                    : (message.flags & WIRE_FLAG_SHUTDOWN) != 0;
    if (shutdown && report->failure == CHORUS_OK && star->rank != 0) {
        star_say_bye(star, &message, report);
    } else if (shutdown && report->failure == CHORUS_OK) {
        report_shutdown(report, rounds->shutdown_reason);
        report->finished = star->size == 1;
    }
    drop_round_responses(rounds);
    wire_message_free(&message);
    return !report_pending(report);
}

/* Whether a tensor can ride with a round (stage_lone): a host allreduce of the job that the
 * small-slots algorithm could run as it is. */
static bool rides_with_round(const struct rounds *rounds, const struct request *request)
{
    const struct wire_request *desc = &request->desc;
    return desc->collective == CHORUS_ALLREDUCE && desc->device == DEVICE_HOST &&
           desc->process_set == 0 && desc->op != CHORUS_ADASUM &&
           desc->compression == CHORUS_COMPRESSION_NONE && request->input != NULL &&
           request->count * chorus_dtype_size((chorus_dtype)desc->dtype) <=
               rounds->payload_capacity;
}

/* Through the slots: this rank's only waiting tensor rides with the round when it can, as the
 * small-slots algorithm would stage it, its slot and bytes in the line (zero: nothing rides). */
static void stage_lone(struct rounds *rounds, const struct star *star)
{
    struct small_line *line = small_next_line(&rounds->slots);
    line->signature = 0;
    long slot = ready_rounds_lone(&rounds->state);
    const struct wire_request *cached =
        slot >= 0 ? response_cache_get(&star->cache, (uint32_t)slot) : NULL;
    const struct request *request =
        cached != NULL ? name_table_find(&star->pending->table, request_name_set(cached),
                                         cached->name)
                       : NULL;
    if (request == NULL || !rides_with_round(rounds, request))
        return;
    chorus_dtype dtype = (chorus_dtype)request->desc.dtype;
    small_allreduce_stage(&rounds->slots, request->input, request->count, dtype,
                          request->desc.prescale);
    line->signature = (uint64_t)slot + 1;
    line->count = request->count * chorus_dtype_size(dtype);
}

/* Whether the completed round decided one slot alone, which every rank staged beside its vector
 * (stage_lone): then *bytes says how many. Every rank reads the same lines and decides alike. */
static bool lone_staged_everywhere(const struct rounds *rounds,
                                   const struct round_outcome *outcome, size_t *bytes)
{
    if (!rounds->slots_ready || outcome->execute_count != 1 || outcome->responses_follow)
        return false;
    const struct small_segment *slots = &rounds->slots;
    *bytes = small_line_of(slots, 0)->count;
    for (int r = 0; r < slots->local_size; r++) {
        const struct small_line *line = small_line_of(slots, r);
        if (line->signature != (uint64_t)outcome->execute[0] + 1 || line->count != *bytes)
            return false;
    }
    return true;
}

/* Runs the slots ready on every rank, in slot order; a lone one that rode with the round
 * (lone_staged_everywhere) is reduced from the round's slots. */
static void run_round_slots(struct rounds *rounds, struct star *star,
                            const struct round_outcome *outcome, struct coord_report *report)
{
    if (outcome->execute_count == 0)
        return;
    /* A few responses (the common round) on the stack: a round allocates nothing for them. */
    struct wire_response few[4] = {0};
    struct wire_response *responses = outcome->execute_count <= ARRAY_LENGTH(few)
                                          ? few
                                          : calloc(outcome->execute_count, sizeof *responses);
    size_t built = 0;
    /* Views of the cache's entries, not copies: running the round records nothing into it. */
    while (responses != NULL && built < outcome->execute_count &&
           response_cache_view(&star->cache, outcome->execute[built], star->size,
                               &responses[built]))
        built++;
    struct executor *executor = &star->runner->executor;
    size_t staged_bytes = 0;
    if (built < outcome->execute_count) {
        if (responses == NULL)
            report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "out of memory running a round");
        else
            report_fail(report, CHORUS_ERR_PROTOCOL, "a round named empty response-cache slot %u",
                        outcome->execute[built]);
    } else {
        if (lone_staged_everywhere(rounds, outcome, &staged_bytes)) {
            executor->staged = &rounds->slots;
            executor->staged_bytes = staged_bytes;
        }
        star_execute(star, responses, built, report);
        executor->staged = NULL;
    }
    if (responses != few)
        free(responses);
}

/* This rank's requests whose slots were demoted go to rank 0 in full. */
static void resend(struct star *star, const struct round_outcome *outcome,
                   struct coord_report *report)
{
    for (size_t i = 0; i < outcome->resend_count; i++) {
        const struct wire_request *entry = response_cache_get(&star->cache, outcome->resend[i]);
        struct request *request =
            entry != NULL ? name_table_find(&star->pending->table, request_name_set(entry),
                                            entry->name)
                          : NULL;
        if (request != NULL && !pending_queue_unsent(star->pending, &star->cache, &request->desc)) {
            report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "out of memory resending a request");
            return;
        }
    }
}

/* Returns whether the round decided anything (an empty one does not keep the thread from
 * idling). */
static bool settle_round(struct rounds *rounds, struct star *star, struct coord_report *report)
{
    struct round_outcome outcome;
    ready_rounds_settle(&rounds->state, rounds->result, &outcome);
    bool decided = outcome.execute_count + outcome.resend_count > 0 || outcome.responses_follow;
    if (decided)
        LOG(LOG_TRACE, "negotiation", "round: %zu slots ready everywhere, %zu resent in full%s",
            outcome.execute_count, outcome.resend_count,
            outcome.responses_follow ? ", after rank 0's responses" : "");
    if (outcome.responses_follow && !run_round_responses(rounds, star, report))
        return true;
    resend(star, &outcome, report);
    if (!report_pending(report))
        run_round_slots(rounds, star, &outcome, report);
    return decided;
}

/* Rank 0: what the negotiator decided since the last round goes out now, ahead of the round
 * that every rank runs it after. Returns the round's flags. */
static uint32_t send_round_responses(struct rounds *rounds, struct star *star,
                                     struct coord_report *report)
{
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(&star->negotiator, &responses);
    if (count == 0 && !star->shutdown_decided) {
        free(responses);
        return 0;
    }
    if (star->shutdown_decided)
        responses = star_append_shutdown_notice(star, responses, &count, rounds->shutdown_reason,
                                                sizeof rounds->shutdown_reason);
    if (star->size > 1)
        star_send_responses(star, responses, count, report);
    rounds->responses = responses;
    rounds->response_count = count;
    return ROUND_RESPONSES_FOLLOW;
}

static bool work_waiting(const struct rounds *rounds, const struct star *star)
{
    return star->pending->table.size > 0 || ready_rounds_waiting(&rounds->state) ||
           rounds->state.joined ||
           (star->rank == 0 &&
            (star->negotiator.response_count > 0 || star->shutdown_decided));
}

/* Across hosts: this rank's part of the round just published, to every other rank, as one
 * message: its line, its vector, and the payload that did not fit in the line. */
static void send_part(struct rounds *rounds, struct star *star, struct coord_report *report)
{
    const struct small_segment *slots = &rounds->slots;
    const struct small_line *line = small_line_of(slots, slots->local_rank);
    const unsigned char *data = small_data_of(slots, slots->local_rank);
    size_t vector = ready_rounds_vector_words(&rounds->state) * sizeof(uint64_t);
    size_t payload = line->signature != 0 && line->count > SMALL_INLINE_BYTES ? line->count : 0;
    uint8_t *bytes = malloc(SMALL_LINE_BYTES + vector + payload);
    if (bytes == NULL) {
        report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "out of memory posting a negotiation round");
        return;
    }
    memcpy(bytes, line, SMALL_LINE_BYTES);
    memcpy(bytes + SMALL_LINE_BYTES, data + rounds->vector_offset, vector);
    memcpy(bytes + SMALL_LINE_BYTES + vector, data, payload);
    chorus_status status =
        star->channel->post(star->channel->state, bytes, SMALL_LINE_BYTES + vector + payload,
                            rounds->peers, slots->local_size - 1, CHANNEL_ROUNDS);
    if (status != CHORUS_OK)
        report_fail(report, status, "posting a negotiation round failed: %s",
                    channel_failure(star->channel, chorus_status_name(status)));
}

/* Across hosts: `rank`'s part of the posted round, from its message, into its copy of the
 * slots. False when the message is not a part of this round. */
static bool copy_part(struct rounds *rounds, int rank, const uint8_t *bytes, size_t length)
{
    struct small_segment *slots = &rounds->slots;
    size_t vector = ready_rounds_vector_words(&rounds->state) * sizeof(uint64_t);
    struct small_line sent;
    if (length < SMALL_LINE_BYTES + vector)
        return false;
    memcpy(&sent, bytes, SMALL_LINE_BYTES);
    size_t payload = length - SMALL_LINE_BYTES - vector;
    bool spilled = sent.signature != 0 && sent.count > SMALL_INLINE_BYTES;
    if (atomic_load_explicit(&sent.phase, memory_order_relaxed) != slots->phase ||
        sent.count > rounds->payload_capacity || payload != (spilled ? sent.count : 0))
        return false;
    struct small_line *line = slots->lines[rank][slots->phase & 1];
    unsigned char *data = slots->data[rank][slots->phase & 1];
    line->signature = sent.signature;
    line->count = sent.count;
    line->digest = sent.digest;
    memcpy(line->payload, sent.payload, sizeof line->payload);
    memcpy(data + rounds->vector_offset, bytes + SMALL_LINE_BYTES, vector);
    memcpy(data, bytes + SMALL_LINE_BYTES + vector, payload);
    atomic_store_explicit(&line->phase, slots->phase, memory_order_relaxed);
    return true;
}

/* Across hosts: takes in the parts of the posted round that arrived. One message per rank and
 * round, in order: a rank posts its next round only after it has every part of this one. */
static void receive_parts(struct rounds *rounds, struct star *star, struct coord_report *report)
{
    const struct small_segment *slots = &rounds->slots;
    for (int i = 0; i < slots->local_size - 1 && report->failure == CHORUS_OK; i++) {
        int rank = rounds->peers[i];
        if (atomic_load_explicit(&small_line_of(slots, rank)->phase, memory_order_relaxed) ==
            slots->phase)
            continue;
        uint8_t *bytes = NULL;
        size_t length = 0;
        int sender = -1;
        chorus_status status = star->channel->receive(star->channel->state, rank, CHANNEL_ROUNDS,
                                                      &bytes, &length, &sender);
        if (status != CHORUS_OK)
            report_fail(report, status, "receiving a negotiation round from rank %d failed: %s",
                        rank, channel_failure(star->channel, chorus_status_name(status)));
        else if (bytes != NULL && !copy_part(rounds, rank, bytes, length))
            report_fail(
                report, CHORUS_ERR_PROTOCOL,
                "rank %d (host %s) sent a malformed negotiation message: %zu bytes that are "
                "not its part of this round (a different chorus, or rounds out of step)",
                rank, context_host_name(star->context, rank), length);
        free(bytes);
    }
}

static void post_round(struct rounds *rounds, struct star *star, double now,
                       struct coord_report *report)
{
    uint32_t flags = star->rank == 0 ? send_round_responses(rounds, star, report) : 0;
    if (report_pending(report))
        return;
    ready_rounds_contribute(&rounds->state, rounds->mine, flags, now, rounds->demote_after);
    size_t words = ready_rounds_vector_words(&rounds->state);
    if (rounds->slots_ready) {
        memcpy(small_next_data(&rounds->slots) + rounds->vector_offset, rounds->mine,
               words * sizeof *rounds->mine);
        stage_lone(rounds, star);
        small_publish(&rounds->slots);
        if (rounds->copies)
            send_part(rounds, star, report);
    } else {
        chorus_status status =
            star->channel->round_post(star->channel->state, rounds->mine, rounds->result, words);
        if (status != CHORUS_OK) {
            report_fail(report, status, "posting a negotiation round failed: %s",
                        channel_failure(star->channel, chorus_status_name(status)));
            return;
        }
    }
    rounds->posted = true;
    rounds->posted_count++;
    rounds->posted_at = now;
    star->last_cycle = now;
}

/* Through the slots: whether every rank published the posted round; if so, the AND of their
 * vectors in `result` (in rank order, as every rank computes it). */
static bool slots_round_done(struct rounds *rounds)
{
    const struct small_segment *slots = &rounds->slots;
    if (!small_all_published(slots))
        return false;
    size_t words = ready_rounds_vector_words(&rounds->state);
    size_t offset = rounds->vector_offset;
    memcpy(rounds->result, small_data_of(slots, 0) + offset, words * sizeof *rounds->result);
    for (int r = 1; r < slots->local_size; r++)
        ready_rounds_combine(rounds->result, (const uint64_t *)(small_data_of(slots, r) + offset),
                             words);
    return true;
}

/* A round that does not complete: through the slots every rank names the first rank that did
 * not post it (every rank is on this host, where local rank r is rank r: the host's
 * communicator is split keyed by rank); over MPI, rank 0 names the rank whose heartbeats
 * stopped, if one did. */
static void round_timed_out(struct rounds *rounds, struct star *star, double now,
                            struct coord_report *report)
{
    const struct liveness *liveness = &star->liveness;
    double silence = 0;
    int quietest = star->rank == 0 ? liveness_quietest(liveness, now, &silence) : -1;
    int absent = rounds->slots_ready ? small_first_unpublished(&rounds->slots) : -1;
    char who[192] = "some rank stopped taking part (frozen, or its process died)";
    if (absent >= 0)
        snprintf(who, sizeof who,
                 "rank %d (host %s) did not post it: it froze, its process died or it stopped "
                 "calling chorus",
                 absent, context_host_name(star->context, absent));
    else if (quietest > 0 && silence > 1.5 * liveness_heartbeat_spacing(liveness))
        snprintf(who, sizeof who,
                 "rank %d (host %s) sent nothing for %.1f s: it froze, its process died or the "
                 "network to it is down",
                 quietest, context_host_name(star->context, quietest), silence);
    report_fail(report, CHORUS_ERR_TIMEOUT,
                "a negotiation round waited %.0f s for the other ranks: %s "
                "(CHORUS_TIMEOUT_SECONDS)",
                now - rounds->posted_at, who);
}

/* Through the host's slots, a round waiting for a rank whose process ended fails at once (every
 * NODE_PROCESS_LOOK_SECONDS, once the round waited that long): on one host, local rank r is
 * rank r. */
static bool round_lost_a_rank(struct rounds *rounds, struct star *star, double now,
                              struct coord_report *report)
{
    struct executor *executor = &star->runner->executor;
    const struct node_segment *host = executor->node_ready ? &executor->node : NULL;
    if (!rounds->slots_ready || rounds->copies || host == NULL ||
        now - rounds->posted_at < NODE_PROCESS_LOOK_SECONDS || now < rounds->next_process_look)
        return false;
    rounds->next_process_look = now + NODE_PROCESS_LOOK_SECONDS;
    /* Every rank that has not posted: the first may be alive and stopped for another reason. */
    int absent = -1;
    for (int r = 0; r < rounds->slots.local_size && absent < 0; r++) {
        if (!small_published(&rounds->slots, r) && node_segment_ended(host, r))
            absent = r;
    }
    if (absent < 0)
        return false;
    char lost[256];
    executor_local_rank_ended(executor, absent, lost, sizeof lost);
    report_fail(report, CHORUS_ERR_TIMEOUT, "a negotiation round cannot complete: %s", lost);
    return true;
}

bool rounds_progress(struct rounds *rounds, struct star *star, bool stopping, double now,
                     struct coord_report *report)
{
    if (!rounds->on)
        return false;
    if (rounds->posted) {
        bool done = false;
        if (rounds->copies) {
            receive_parts(rounds, star, report);
            if (report->failure != CHORUS_OK)
                return true;
        }
        if (rounds->slots_ready) {
            done = slots_round_done(rounds);
        } else {
            chorus_status status = star->channel->round_test(star->channel->state, &done);
            if (status != CHORUS_OK) {
                report_fail(report, status, "a negotiation round failed: %s",
                            channel_failure(star->channel, chorus_status_name(status)));
                return true;
            }
        }
        double timeout = star->params->timeout_seconds;
        double limit = timeout + (star->rank == 0 ? 0 : FOLLOWER_ROUND_MARGIN);
        if (!done && timeout > 0 && now - rounds->posted_at > limit) {
            round_timed_out(rounds, star, now, report);
            return true;
        }
        if (!done && round_lost_a_rank(rounds, star, now, report))
            return true;
        if (!done)
            return false;
        rounds->posted = false;
        return settle_round(rounds, star, report);
    }
    if (stopping)
        return false;
    double cycle = star->params->cycle_time_ms * 1e-3;
    double spacing = cycle > 0 ? cycle : work_waiting(rounds, star) ? 0 : IDLE_ROUND_SPACING;
    if (now - star->last_cycle < spacing)
        return false;
    post_round(rounds, star, now, report);
    return false;
}
