/*
 * ready_rounds.c — see ready_rounds.h.
 */
#include "ready_rounds.h"

#include "negotiated_fields.h"

#include <stdlib.h>
#include <string.h>

static bool bit_test(const uint64_t *bits, size_t slot)
{
    return (bits[slot / 64] >> (slot % 64)) & 1u;
}

static void bit_set(uint64_t *bits, size_t slot)
{
    bits[slot / 64] |= (uint64_t)1 << (slot % 64);
}

static void bit_clear(uint64_t *bits, size_t slot)
{
    bits[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

bool ready_rounds_init(struct ready_rounds *rounds, size_t slots)
{
    memset(rounds, 0, sizeof *rounds);
    rounds->slots = slots;
    rounds->slot_words = (slots + 63) / 64;
    size_t words = rounds->slot_words ? rounds->slot_words : 1;
    rounds->ready = calloc(words, sizeof *rounds->ready);
    rounds->demote = calloc(words, sizeof *rounds->demote);
    rounds->demoted = calloc(words, sizeof *rounds->demoted);
    rounds->waiting_since = calloc(slots ? slots : 1, sizeof *rounds->waiting_since);
    rounds->executing = malloc(words * 64 * sizeof *rounds->executing);
    rounds->resending = malloc(words * 64 * sizeof *rounds->resending);
    if (rounds->ready == NULL || rounds->demote == NULL || rounds->demoted == NULL ||
        rounds->waiting_since == NULL || rounds->executing == NULL ||
        rounds->resending == NULL) {
        ready_rounds_destroy(rounds);
        return false;
    }
    return true;
}

void ready_rounds_destroy(struct ready_rounds *rounds)
{
    free(rounds->ready);
    free(rounds->demote);
    free(rounds->demoted);
    free(rounds->waiting_since);
    free(rounds->executing);
    free(rounds->resending);
    memset(rounds, 0, sizeof *rounds);
}

size_t ready_rounds_words_for(size_t slots)
{
    return 1 + 2 * ((slots + 63) / 64);
}

size_t ready_rounds_vector_words(const struct ready_rounds *rounds)
{
    return ready_rounds_words_for(rounds->slots);
}

enum round_route ready_rounds_route(struct ready_rounds *rounds, const struct response_cache *cache,
                                    const struct wire_request *request, double now)
{
    long slot = response_cache_slot_of(cache, request);
    if (slot < 0 || (size_t)slot >= rounds->slots)
        return ROUTE_STAR;
    if (bit_test(rounds->ready, (size_t)slot))
        return ROUTE_DUPLICATE;
    if (rounds->star_only || rounds->joined || bit_test(rounds->demoted, (size_t)slot))
        return ROUTE_STAR;
    if (!wire_request_equal(response_cache_get(cache, (uint32_t)slot), request)) {
        /* The others may wait for this slot as a bit: all of them must go to rank 0, which
         * reports the disagreement. */
        bit_set(rounds->demote, (size_t)slot);
        return ROUTE_STAR;
    }
    /* Members of a group run together, which rank 0 arranges. */
    if (request->group_size > 1)
        return ROUTE_STAR;
    bit_set(rounds->ready, (size_t)slot);
    rounds->waiting_since[slot] = now;
    return ROUTE_BIT;
}

void ready_rounds_contribute(struct ready_rounds *rounds, uint64_t *vector, uint32_t flags,
                             double now, double demote_after)
{
    size_t words = rounds->slot_words;
    if (rounds->joined)
        flags |= ROUND_SOME_JOINED;
    vector[0] = ~(uint64_t)flags;
    for (size_t w = 0; w < words; w++) {
        uint64_t late = 0;
        for (uint64_t bits = demote_after > 0 ? rounds->ready[w] : 0; bits != 0; bits &= bits - 1) {
            size_t slot = w * 64 + (size_t)__builtin_ctzll(bits);
            if (now - rounds->waiting_since[slot] >= demote_after)
                late |= bits & -bits;
        }
        vector[1 + w] = rounds->ready[w];
        vector[1 + words + w] = ~(rounds->demote[w] | late);
    }
}

void ready_rounds_combine(uint64_t *into, const uint64_t *from, size_t words)
{
    for (size_t i = 0; i < words; i++)
        into[i] &= from[i];
}

void ready_rounds_settle(struct ready_rounds *rounds, const uint64_t *combined,
                         struct round_outcome *outcome)
{
    memset(outcome, 0, sizeof *outcome);
    outcome->execute = rounds->executing;
    outcome->resend = rounds->resending;
    size_t words = rounds->slot_words;
    uint64_t any = ~combined[0];
    outcome->responses_follow = (any & ROUND_RESPONSES_FOLLOW) != 0;
    bool some_joined = (any & ROUND_SOME_JOINED) != 0;
    if (some_joined)
        rounds->star_only = true;
    for (size_t w = 0; w < words; w++) {
        uint64_t everywhere = combined[1 + w];
        /* A slot ready everywhere runs, even if a rank asked for its demotion meanwhile. */
        uint64_t demoted = ~combined[1 + words + w] & ~everywhere;
        rounds->demote[w] = 0;
        rounds->demoted[w] |= demoted;
        uint64_t leaving = rounds->ready[w] & ~everywhere & (some_joined ? ~(uint64_t)0 : demoted);
        /* Each slot at most once per list: the lists have room for every slot. */
        for (uint64_t bits = everywhere; bits != 0; bits &= bits - 1)
            outcome->execute[outcome->execute_count++] =
                (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
        for (uint64_t bits = leaving; bits != 0; bits &= bits - 1)
            outcome->resend[outcome->resend_count++] =
                (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
        rounds->ready[w] &= ~(everywhere | leaving);
    }
}

void ready_rounds_response_ran(struct ready_rounds *rounds, const struct response_cache *cache,
                               const struct wire_response *response)
{
    if (response->type == RESPONSE_JOIN_DONE) {
        rounds->joined = false;
        rounds->star_only = false;
        return;
    }
    long slot =
        response->request.name ? response_cache_slot_of(cache, &response->request) : -1;
    if (slot >= 0 && (size_t)slot < rounds->slots)
        bit_clear(rounds->demoted, (size_t)slot);
}

long ready_rounds_lone(const struct ready_rounds *rounds)
{
    long lone = -1;
    for (size_t w = 0; w < rounds->slot_words; w++) {
        uint64_t bits = rounds->ready[w];
        if (bits == 0)
            continue;
        if (lone >= 0 || (bits & (bits - 1)) != 0)
            return -1;
        lone = (long)(w * 64 + (size_t)__builtin_ctzll(bits));
    }
    return lone;
}

bool ready_rounds_waiting(const struct ready_rounds *rounds)
{
    for (size_t w = 0; w < rounds->slot_words; w++)
        if (rounds->ready[w] | rounds->demote[w])
            return true;
    return false;
}
