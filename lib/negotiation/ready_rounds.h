/*
 * ready_rounds.h — negotiation's steady state at scale, free of MPI so that unit tests and the
 * scaling benchmark drive the same code with simulated ranks.
 *
 * In the star protocol every rank sends each submission to rank 0, which answers every rank: at
 * N ranks, O(N) messages through rank 0 per negotiation cycle. Here a tensor whose description
 * the response cache holds (every rank holds the same cache) travels as one bit of its cache
 * slot: ranks take part in rounds, each one allreduce (bitwise AND) of a vector of those bits and
 * a few flags, so O(log N) messages per rank and no funnel through rank 0. A slot whose bit
 * comes back set was ready on every rank: every rank runs it, in slot order. Everything else
 * (first sightings, allgathers, groups, joins, mismatches, stalls) takes the star path, through
 * rank 0's negotiator, which names the ranks involved.
 *
 * A slot leaves the bit path ("is demoted") for one negotiation, on every rank at the same round,
 * when some rank asks: its request disagrees with the cached description (a mismatch, which rank
 * 0 then reports), or its bit has waited longer than demote_after (a stall, which rank 0's stall
 * inspector then reports with the ranks that did not submit). While a rank has joined, every
 * slot travels the star path, where joins are counted.
 *
 * Order: rank 0 sends a RESPONSES message only just before it posts a round, and says so in that
 * round's flags; every rank runs, when the round completes, first that message's responses, then
 * the round's slots. So all ranks run the same list in the same order.
 */
#ifndef CHORUS_READY_ROUNDS_H
#define CHORUS_READY_ROUNDS_H

#include "response_cache.h"

/* A round's vector: word 0 holds the inverted "any rank" flags (so that AND computes OR), then
 * slot_words words of ready bits, then slot_words words of inverted demote bits. */
enum round_flag {
    ROUND_RESPONSES_FOLLOW = 1u << 0, /* rank 0 sent a RESPONSES message before this round */
    ROUND_SOME_JOINED = 1u << 1,      /* some rank has joined */
};

struct ready_rounds {
    size_t slots;          /* the response cache's capacity */
    size_t slot_words;     /* 64-bit words per bit set */
    uint64_t *ready;       /* slots this rank has a request waiting for */
    uint64_t *demote;      /* slots this rank asks every rank to send in full */
    uint64_t *demoted;     /* slots on the star path until their response runs */
    double *waiting_since; /* per slot: when its bit was set */
    bool joined;           /* this rank has joined, until the join completes */
    bool star_only;        /* some rank has joined: everything on the star path until then */
    uint32_t *executing;   /* the last outcome's lists (a slot at most once in each) */
    uint32_t *resending;
};

enum round_route {
    ROUTE_BIT,       /* the request waits as its slot's bit */
    ROUTE_STAR,      /* the request goes to rank 0 in full */
    ROUTE_DUPLICATE, /* this rank already waits for the slot */
};

struct round_outcome {
    bool responses_follow;
    uint32_t *execute; /* slots ready on every rank, in order */
    size_t execute_count;
    uint32_t *resend; /* this rank's slots that now go to rank 0 in full */
    size_t resend_count;
};

bool ready_rounds_init(struct ready_rounds *rounds, size_t slots);
void ready_rounds_destroy(struct ready_rounds *rounds);

/* Words in a round's vector; ready_rounds_words_for: the same for `slots` slots, before the
 * rounds exist (to size memory the vectors go through). */
size_t ready_rounds_vector_words(const struct ready_rounds *rounds);
size_t ready_rounds_words_for(size_t slots);

/* Where a new submission goes. Only a request the cache holds exactly, not grouped, travels as a
 * bit; one that disagrees with its name's cached description also asks for the slot's demotion. */
enum round_route ready_rounds_route(struct ready_rounds *rounds, const struct response_cache *cache,
                                    const struct wire_request *request, double now);

/* This rank's contribution to the next round. Bits that waited longer than demote_after seconds
 * (0: never) ask for their demotion. */
void ready_rounds_contribute(struct ready_rounds *rounds, uint64_t *vector, uint32_t flags,
                             double now, double demote_after);

/* The round's reduction: into &= from. */
void ready_rounds_combine(uint64_t *into, const uint64_t *from, size_t words);

/* Applies a completed round (the AND of every rank's contribution) to this rank's state: which
 * slots run (every rank gets the same list) and which of this rank's requests now go in full.
 * The outcome's lists are the rounds' own, valid until the next settle: a round allocates
 * nothing, and the outcome needs no freeing. */
void ready_rounds_settle(struct ready_rounds *rounds, const uint64_t *combined,
                         struct round_outcome *outcome);

/* A response from rank 0 ran on this rank: a demoted slot of that name comes back to the bit
 * path; a completed join ends the star-only period. */
void ready_rounds_response_ran(struct ready_rounds *rounds, const struct response_cache *cache,
                               const struct wire_response *response);

/* The slot of this rank's only request waiting on the bit path, or -1 (none, or several). */
long ready_rounds_lone(const struct ready_rounds *rounds);

/* Whether this rank has anything waiting on the bit path. */
bool ready_rounds_waiting(const struct ready_rounds *rounds);

#endif
