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
#include "../transport/small_segment.h"
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
    /* Every rank on one host: rounds through the host's slots (small_segment.h) instead of an
     * allreduce on the channel: each rank publishes its vector, and when every rank's is there
     * each ANDs them all. No message, no rank 0 between the ranks. */
    struct small_segment slots;
    bool slots_ready;
    double next_process_look; /* when a round through the slots next asks after processes */
    /* A lone small allreduce rides with the round: each slot's data area holds up to
     * `payload_capacity` bytes of it first (rounds.c), then the vector at `vector_offset`. */
    size_t payload_capacity;
    size_t vector_offset;
    /* Across hosts, up to NEGOTIATION_ROUND_COPIES_UP_TO ranks: the same slots in this rank's own
     * memory, each other rank's part a copy of the message that rank sends every other each round
     * (rounds_open_copies): one message each way, the lone allreduce riding in it. */
    bool copies;
    int *peers; /* every rank but this one */
};

/* Decides the protocol (CHORUS_NEGOTIATION) and prepares the rounds; false when out of memory. */
bool rounds_init(struct rounds *rounds, const struct chorus_params *params, int size);

/* Where every rank of the job shares this host: rounds go through slots of the host's shared
 * memory (collective over `node_comm`, an MPI_Comm by pointer, the job's ranks in job order; or,
 * in a world without MPI, over `exchange`, node_comm then unused; a rank whose process ended,
 * seen through the executor's host segment, fails the round at once),
 * and under CHORUS_NEGOTIATION=auto the job negotiates by rounds from 2 ranks: tensors seen
 * before are then agreed without a message. A rank whose only waiting tensor is a host
 * allreduce of at most CHORUS_SMALL_LIMIT bytes stages it beside its vector; when the round
 * decides that tensor alone and every rank staged it, the executor reduces it from there, so
 * the round is the operation's only exchange. Every rank decides alike (false: star, with why
 * in `error` where the slots could not be made). At start-up, after rounds_init. */
bool rounds_open_slots(struct rounds *rounds, const struct chorus_params *params, int size,
                       const void *node_comm, const struct host_exchange *exchange,
                       bool oversubscribed, char *error, size_t error_size);
/* Where the job spans hosts: under CHORUS_NEGOTIATION=auto or rounds, a job of 2 to
 * NEGOTIATION_ROUND_COPIES_UP_TO ranks negotiates by rounds whose parts travel as messages, each
 * rank's to every other (CHANNEL_ROUNDS), into a copy of the slots above in each rank's own memory;
 * a lone small allreduce rides in them as through the host's slots. Decided from the parameters and
 * the size alone, so alike on every rank. False: the job negotiates as rounds_init decided (`error`
 * set when out of memory). At start-up, after rounds_init. */
bool rounds_open_copies(struct rounds *rounds, const struct chorus_params *params, int rank,
                        int size, char *error, size_t error_size);
/* Frees the rounds; the slots collectively (every rank alike), unless `failed`. */
void rounds_release(struct rounds *rounds, bool failed);
/* Keeps a new submission as its slot's bit when it can. True if it did. */
bool rounds_take(struct rounds *rounds, const struct response_cache *cache,
                 const struct wire_request *request);
/* Completes the posted round (running what it decided) or posts the next; `now`: the loop's
 * turn's reading of the clock. */
bool rounds_progress(struct rounds *rounds, struct star *star, bool stopping, double now,
                     struct coord_report *report);

#endif
