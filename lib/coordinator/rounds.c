/*
 * rounds.c — the MPI side of ready rounds (see ready_rounds.h for the protocol): each round is
 * a non-blocking allreduce (bitwise AND) on the control communicator; when it completes, every
 * rank runs first the responses rank 0 sent before posting it, then the slots ready everywhere.
 * Rank 0 answers star requests only as it posts a round, so those responses have a place in the
 * order that every rank sees.
 */
#include "background.h"

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

bool rounds_start(struct background *background)
{
    const struct chorus_params *params = &background->context->params.values;
    background->rounds_mode =
        params->negotiation == NEGOTIATION_ROUNDS ||
        (params->negotiation == NEGOTIATION_AUTO && background->size >= NEGOTIATION_ROUNDS_FROM);
    if (!background->rounds_mode)
        return true;
    double demote_after = DEMOTE_AFTER_SECONDS;
    if (params->stall_warning_seconds > 0 && params->stall_warning_seconds / 4 < demote_after)
        demote_after = params->stall_warning_seconds / 4;
    if (params->stall_shutdown_seconds > 0 && params->stall_shutdown_seconds / 4 < demote_after)
        demote_after = params->stall_shutdown_seconds / 4;
    background->demote_after = demote_after;
    size_t slots = params->cache_capacity < ROUND_SLOTS_LIMIT ? params->cache_capacity
                                                              : ROUND_SLOTS_LIMIT;
    if (!ready_rounds_init(&background->rounds, slots))
        return false;
    size_t words = ready_rounds_vector_words(&background->rounds);
    background->round_mine = calloc(words, sizeof *background->round_mine);
    background->round_result = calloc(words, sizeof *background->round_result);
    LOG(LOG_DEBUG, "negotiation", "rounds of %zu bytes, demoting bits after %g s",
        words * sizeof(uint64_t), demote_after);
    return background->round_mine != NULL && background->round_result != NULL;
}

/* Rank 0: frees the responses it sent before the posted round. */
static void drop_round_responses(struct background *background)
{
    for (size_t i = 0; i < background->round_response_count; i++)
        wire_response_free(&background->round_responses[i]);
    free(background->round_responses);
    background->round_responses = NULL;
    background->round_response_count = 0;
    background->round_shutdown[0] = '\0';
}

void rounds_release(struct background *background)
{
    /* A round still posted after a fatal error is left to MPI: a collective's request cannot be
     * freed, and its buffers stay with it. */
    if (!background->round_posted) {
        free(background->round_mine);
        free(background->round_result);
    }
    drop_round_responses(background);
    ready_rounds_destroy(&background->rounds);
}

bool rounds_take(struct background *background, const struct wire_request *request)
{
    if (!background->rounds_mode)
        return false;
    return ready_rounds_route(&background->rounds, &background->cache, request,
                              monotonic_seconds()) == ROUTE_BIT;
}

/* Non-root ranks: the RESPONSES message rank 0 sent before the completed round. Waits for it:
 * rank 0 sent it before posting the round, so it is on its way. */
static bool receive_round_responses(struct background *background, struct wire_message *message)
{
    int sender = -1;
    while (!receive_message(background, 0, TAG_RESPONSES, message, &sender)) {
        if (background->finished)
            return false;
        char failure[sizeof background->error];
        chorus_status peer = executor_peer_failure(&background->executor, failure, sizeof failure);
        if (peer != CHORUS_OK) {
            fatal(background, peer, failure);
            return false;
        }
        sched_yield();
    }
    return resolve_cached_responses(background, message);
}

/* The responses that precede the round's slots. Returns false when chorus stops here. */
static bool run_round_responses(struct background *background)
{
    struct wire_message message = {0};
    const struct wire_response *responses = background->round_responses;
    size_t count = background->round_response_count;
    if (background->rank != 0) {
        if (!receive_round_responses(background, &message)) {
            wire_message_free(&message);
            return false;
        }
        responses = message.responses;
        count = message.count;
    }
    execute(background, responses, count);
    for (size_t i = 0; i < count; i++)
        ready_rounds_response_ran(&background->rounds, &background->cache, &responses[i]);
    bool shutdown = background->rank == 0 ? background->round_shutdown[0] != '\0'
                                          : (message.flags & WIRE_FLAG_SHUTDOWN) != 0;
    if (shutdown && !background->finished && background->rank != 0) {
        stop_following(background, &message);
    } else if (shutdown && !background->finished) {
        stop(background, background->round_shutdown);
        background->finished = background->size == 1;
    }
    drop_round_responses(background);
    wire_message_free(&message);
    return !shutdown && !background->finished;
}

/* Runs the slots ready on every rank, in slot order. */
static void run_round_slots(struct background *background, const struct round_outcome *outcome)
{
    if (outcome->execute_count == 0)
        return;
    struct wire_response *responses = calloc(outcome->execute_count, sizeof *responses);
    size_t built = 0;
    while (responses != NULL && built < outcome->execute_count &&
           response_cache_expand(&background->cache, outcome->execute[built], background->size,
                                 &responses[built]))
        built++;
    if (built < outcome->execute_count)
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory running a round");
    else
        execute(background, responses, built);
    for (size_t i = 0; i < built; i++)
        wire_response_free(&responses[i]);
    free(responses);
}

/* This rank's requests whose slots were demoted go to rank 0 in full. */
static void resend(struct background *background, const struct round_outcome *outcome)
{
    for (size_t i = 0; i < outcome->resend_count; i++) {
        const struct wire_request *entry =
            response_cache_get(&background->cache, outcome->resend[i]);
        struct request *request =
            entry != NULL ? name_table_find(&background->pending, entry->name) : NULL;
        if (request != NULL && !queue_unsent(background, &request->desc)) {
            fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory resending a request");
            return;
        }
    }
}

/* Returns whether the round decided anything (an empty one does not keep the thread from
 * idling). */
static bool settle_round(struct background *background)
{
    struct round_outcome outcome;
    if (!ready_rounds_settle(&background->rounds, background->round_result, &outcome)) {
        ready_rounds_outcome_free(&outcome);
        fatal(background, CHORUS_ERR_OUT_OF_MEMORY, "out of memory settling a round");
        return true;
    }
    bool decided = outcome.execute_count + outcome.resend_count > 0 || outcome.responses_follow;
    if (outcome.execute_count + outcome.resend_count > 0 || outcome.responses_follow)
        LOG(LOG_TRACE, "negotiation", "round: %zu slots ready everywhere, %zu resent in full%s",
            outcome.execute_count, outcome.resend_count,
            outcome.responses_follow ? ", after rank 0's responses" : "");
    if (outcome.responses_follow && !run_round_responses(background)) {
        ready_rounds_outcome_free(&outcome);
        return true;
    }
    resend(background, &outcome);
    if (!background->finished)
        run_round_slots(background, &outcome);
    ready_rounds_outcome_free(&outcome);
    return decided;
}

/* Rank 0: what the negotiator decided since the last round goes out now, ahead of the round
 * that every rank runs it after. Returns the round's flags. */
static uint32_t send_round_responses(struct background *background)
{
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(&background->negotiator, &responses);
    if (count == 0 && !background->shutdown_decided) {
        free(responses);
        return 0;
    }
    if (background->shutdown_decided)
        responses =
            append_shutdown_notice(background, responses, &count, background->round_shutdown,
                                   sizeof background->round_shutdown);
    if (background->size > 1)
        send_responses(background, responses, count);
    background->round_responses = responses;
    background->round_response_count = count;
    return ROUND_RESPONSES_FOLLOW;
}

static bool work_waiting(struct background *background)
{
    return background->pending.size > 0 || ready_rounds_waiting(&background->rounds) ||
           background->rounds.joined ||
           (background->rank == 0 &&
            (background->negotiator.response_count > 0 || background->shutdown_decided));
}

static void post_round(struct background *background, double now)
{
    uint32_t flags = background->rank == 0 ? send_round_responses(background) : 0;
    ready_rounds_contribute(&background->rounds, background->round_mine, flags, now,
                            background->demote_after);
    size_t words = ready_rounds_vector_words(&background->rounds);
    if (MPI_Iallreduce(background->round_mine, background->round_result, (int)words, MPI_UINT64_T,
                       MPI_BAND, background->context->control_comm,
                       &background->round_request) != MPI_SUCCESS) {
        fatal(background, CHORUS_ERR_MPI, "posting a negotiation round failed");
        return;
    }
    background->round_posted = true;
    background->rounds_posted++;
    background->round_posted_at = now;
    background->last_cycle = now;
}

#define FOLLOWER_ROUND_MARGIN 1.0

/* A round that does not complete: rank 0 names the rank whose heartbeats stopped, if one did. */
static void round_timed_out(struct background *background, double now)
{
    const struct liveness *liveness = &background->liveness;
    double silence = 0;
    int quietest = background->rank == 0 ? liveness_quietest(liveness, now, &silence) : -1;
    char who[192] = "some rank stopped taking part (frozen, or its process died)";
    if (quietest > 0 && silence > 1.5 * liveness_heartbeat_spacing(liveness))
        snprintf(who, sizeof who,
                 "rank %d (host %s) sent nothing for %.1f s: it froze, its process died or the "
                 "network to it is down",
                 quietest, context_host_name(background->context, quietest), silence);
    char text[320];
    snprintf(text, sizeof text,
             "a negotiation round waited %.0f s for the other ranks: %s (CHORUS_TIMEOUT_SECONDS)",
             now - background->round_posted_at, who);
    fatal(background, CHORUS_ERR_TIMEOUT, text);
}

bool rounds_progress(struct background *background)
{
    if (!background->rounds_mode || background->finished)
        return false;
    double now = monotonic_seconds();
    if (background->round_posted) {
        int done = 0;
        if (MPI_Test(&background->round_request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            fatal(background, CHORUS_ERR_MPI, "a negotiation round failed");
            return true;
        }
        /* The others give rank 0, which can name the rank that stopped, a head start. */
        double timeout = background->context->params.values.timeout_seconds;
        double limit = timeout + (background->rank == 0 ? 0 : FOLLOWER_ROUND_MARGIN);
        if (!done && timeout > 0 && now - background->round_posted_at > limit) {
            round_timed_out(background, now);
            return true;
        }
        if (!done)
            return false;
        background->round_posted = false;
        return settle_round(background);
    }
    if (background->stopping)
        return false;
    double cycle = background->context->params.values.cycle_time_ms * 1e-3;
    double spacing = cycle > 0 ? cycle : work_waiting(background) ? 0 : IDLE_ROUND_SPACING;
    if (now - background->last_cycle < spacing)
        return false;
    post_round(background, now);
    return false;
}
