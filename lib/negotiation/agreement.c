/*
 * agreement.c — the start-up's blocking steps over the channel (agreement.h). A broadcast is
 * one message from rank 0 to each rank, a gather one from each rank to rank 0, "all" one round
 * of the channel (a bitwise AND). The first failure takes one round when no rank failed, which
 * is the usual case, and otherwise a gather of verdicts and a broadcast of the first:
 *
 *   ranks 0..3, rank 2 failed:   round: AND(1, 1, 0, 1) = 0
 *                                gather: {0, OK} {1, OK} {2, error, "why"} {3, OK} -> rank 0
 *                                broadcast: {2, error, "why"} -> ranks 1..3
 *   rank 2 reports "why", the others "rank 2: why".
 */
#include "agreement.h"

#include "wire.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Waits for the next message from `source`. */
static chorus_status agreement_receive(const struct agreement *agreement, int source,
                                       uint8_t **bytes, size_t *length, char *error,
                                       size_t error_size)
{
    struct channel *channel = agreement->channel;
    for (;;) {
        int sender = -1;
        chorus_status status =
            channel->receive(channel->state, source, CHANNEL_AGREEMENT, bytes, length, &sender);
        if (status != CHORUS_OK) {
            snprintf(error, error_size, "receiving from rank %d during init failed (%s)", source,
                     chorus_status_name(status));
            return status;
        }
        if (*bytes != NULL)
            return CHORUS_OK;
        channel->progress(channel->state, false, false);
        sched_yield(); /* the peer may need this core to get here */
    }
}

chorus_status agreement_broadcast(const struct agreement *agreement, uint8_t **bytes,
                                  size_t *length, char *error, size_t error_size)
{
    struct channel *channel = agreement->channel;
    if (agreement->rank != 0)
        return agreement_receive(agreement, 0, bytes, length, error, error_size);
    if (agreement->size == 1)
        return CHORUS_OK;
    int *others = channel_ranks_but(0, agreement->size);
    uint8_t *copy = *bytes != NULL ? malloc(*length ? *length : 1) : NULL;
    if (others == NULL || (*bytes != NULL && copy == NULL)) {
        free(others);
        free(copy);
        snprintf(error, error_size, "out of memory sending to every rank during init");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (copy != NULL && *length != 0)
        memcpy(copy, *bytes, *length);
    chorus_status status = channel->post(channel->state, copy, copy != NULL ? *length : 0, others,
                                         agreement->size - 1, CHANNEL_AGREEMENT);
    free(others);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "sending to every rank during init failed (%s)",
                 chorus_status_name(status));
    return status;
}

chorus_status agreement_gather(const struct agreement *agreement, uint8_t *bytes, size_t length,
                               agreement_take take, void *context, char *error, size_t error_size)
{
    struct channel *channel = agreement->channel;
    if (agreement->rank != 0) {
        const int root = 0;
        chorus_status status =
            channel->post(channel->state, bytes, length, &root, 1, CHANNEL_AGREEMENT);
        if (status != CHORUS_OK)
            snprintf(error, error_size, "sending to rank 0 during init failed (%s)",
                     chorus_status_name(status));
        return status;
    }
    take(context, 0, bytes, length);
    free(bytes);
    for (int r = 1; r < agreement->size; r++) {
        uint8_t *theirs = NULL;
        size_t their_length = 0;
        chorus_status status =
            agreement_receive(agreement, r, &theirs, &their_length, error, error_size);
        if (status != CHORUS_OK)
            return status;
        take(context, r, theirs, their_length);
        free(theirs);
    }
    return CHORUS_OK;
}

chorus_status agreement_all(const struct agreement *agreement, bool mine, bool *all, char *error,
                            size_t error_size)
{
    struct channel *channel = agreement->channel;
    uint64_t word = mine ? 1 : 0, combined = 0;
    chorus_status status = channel->round_post(channel->state, &word, &combined, 1);
    bool done = false;
    while (status == CHORUS_OK && !done) {
        status = channel->round_test(channel->state, &done);
        if (status == CHORUS_OK && !done) {
            channel->progress(channel->state, false, false);
            sched_yield();
        }
    }
    if (status != CHORUS_OK) {
        snprintf(error, error_size, "agreeing with every rank during init failed (%s)",
                 chorus_status_name(status));
        return status;
    }
    *all = combined == 1;
    return CHORUS_OK;
}

/* Rank 0's part of a failure: the first verdict that is one. A verdict that does not decode is
 * its sender's failure. */
struct first_verdict {
    struct wire_agreement verdict;
    bool found;
};

static void keep_first_failure(void *context, int rank, const uint8_t *bytes, size_t length)
{
    struct first_verdict *first = context;
    if (first->found)
        return;
    char why[512];
    struct wire_agreement verdict;
    if (wire_agreement_decode(bytes, length, WIRE_VERDICT, &verdict, why, sizeof why) !=
        CHORUS_OK) {
        verdict = (struct wire_agreement){
            .kind = WIRE_VERDICT, .status = CHORUS_ERR_PROTOCOL, .message = strdup(why)};
    } else if (verdict.status == CHORUS_OK) {
        wire_agreement_free(&verdict);
        return;
    }
    verdict.rank = rank; /* the sender's, whatever it wrote */
    first->verdict = verdict;
    first->found = true;
}

chorus_status agreement_first_failure(const struct agreement *agreement, chorus_status mine,
                                      const char *message, char *error, size_t error_size)
{
    bool all = false;
    chorus_status status = agreement_all(agreement, mine == CHORUS_OK, &all, error, error_size);
    if (status != CHORUS_OK || all)
        return status;
    struct wire_agreement verdict = {.kind = WIRE_VERDICT,
                                     .rank = agreement->rank,
                                     .status = mine,
                                     .message = mine != CHORUS_OK ? (char *)message : NULL};
    uint8_t *bytes = NULL;
    size_t length = wire_agreement_encode(&verdict, &bytes);
    struct first_verdict first = {0};
    status =
        agreement_gather(agreement, bytes, length, keep_first_failure, &first, error, error_size);
    if (status != CHORUS_OK) {
        wire_agreement_free(&first.verdict);
        return status;
    }
    bytes = NULL;
    length = 0;
    if (agreement->rank == 0) {
        if (!first.found) /* every verdict said OK although the round said no */
            first.verdict = (struct wire_agreement){
                .kind = WIRE_VERDICT,
                .rank = 0,
                .status = CHORUS_ERR_PROTOCOL,
                .message = strdup("the ranks disagree on whether one failed")};
        length = wire_agreement_encode(&first.verdict, &bytes);
        wire_agreement_free(&first.verdict);
    }
    status = agreement_broadcast(agreement, &bytes, &length, error, error_size);
    if (status != CHORUS_OK) {
        free(bytes);
        return status;
    }
    char why[512];
    status = wire_agreement_decode(bytes, length, WIRE_VERDICT, &verdict, why, sizeof why);
    free(bytes);
    if (status != CHORUS_OK) {
        snprintf(error, error_size, "rank 0's verdict on init: %s", why);
        return status;
    }
    const char *text = verdict.message != NULL ? verdict.message : "";
    if (verdict.rank == agreement->rank)
        snprintf(error, error_size, "%s", text);
    else
        snprintf(error, error_size, "rank %d: %s", verdict.rank, text);
    status = verdict.status != CHORUS_OK ? verdict.status : CHORUS_ERR_PROTOCOL;
    wire_agreement_free(&verdict);
    return status;
}
