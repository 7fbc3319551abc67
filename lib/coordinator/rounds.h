/*
 * rounds.h — negotiation by ready rounds at scale (CHORUS_NEGOTIATION; the protocol is in
 * ready_rounds.h): each round a bitwise-AND allreduce on the channel; when it completes, every
 * rank runs first the responses rank 0 sent before posting it, then the slots ready everywhere.
 * Rank 0 answers star requests only as it posts a round, so those responses have a place in
 * the order that every rank sees. It uses the star protocol's messages (star.h), never the
 * other way round.
 */
#ifndef CHORUS_ROUNDS_H
#define CHORUS_ROUNDS_H

#include "../negotiation/ready_rounds.h"
#include "star.h"

struct rounds {
    bool on;                     /* this job negotiates by rounds */
    struct ready_rounds state;
    uint64_t *mine;              /* this rank's contribution to the posted round */
    uint64_t *result;            /* the posted round's outcome */
    bool posted;
    double posted_at;
    double demote_after;
    struct wire_response *responses; /* rank 0: sent before the posted round */
    size_t response_count;
    char shutdown_reason[128];       /* rank 0: why, when they end in a shutdown */
    size_t posted_count;             /* rounds so far, for the log */
};

/* Decides the protocol (CHORUS_NEGOTIATION) and prepares the rounds; false when out of memory. */
bool rounds_init(struct rounds *rounds, const struct chorus_params *params, int size);
void rounds_release(struct rounds *rounds);
/* Keeps a new submission as its slot's bit when it can. True if it did. */
bool rounds_take(struct rounds *rounds, const struct response_cache *cache,
                 const struct wire_request *request);
/* Completes the posted round (running what it decided) or posts the next. */
bool rounds_progress(struct rounds *rounds, struct star *star, bool stopping,
                     struct coord_report *report);

#endif
