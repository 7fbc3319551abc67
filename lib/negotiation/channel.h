/*
 * channel.h — how the background threads of the ranks talk: messages of bytes to one rank or
 * many (at start-up, the agreement's: agreement.h; then negotiation's requests to rank 0 and
 * responses from it), the bitwise-AND allreduce of a ready round, and the notice a rank sends
 * when it stops after a fatal error.
 *
 * The coordinator sees only these operations. channel_mpi.c implements them on the control
 * communicator, channel_ucx.c on a UCX fabric (worlds that outlive a lost rank); the unit tests
 * implement them between threads (test/common/channel_threads.c) and drive the whole coordinator
 * loop, ranks as threads, without MPI (and over UCX: test/common/rank_links.h).
 */
#ifndef CHORUS_CHANNEL_H
#define CHORUS_CHANNEL_H

#include "../core/common.h"

#include <stdlib.h>

/* The message tags: negotiation's, autotune's settings (autotune.h), the start-up agreement's
 * (agreement.h) and each rank's part of a negotiation round across hosts (rounds.h). Tag 3 is
 * the abort notice's, which travels on its own (abort.h). */
enum {
    CHANNEL_REQUESTS = 1,
    CHANNEL_RESPONSES = 2,
    CHANNEL_AUTOTUNE = 4,
    CHANNEL_AGREEMENT = 5,
    CHANNEL_ROUNDS = 6,
};

struct channel {
    void *state;
    /* Sends `length` bytes to each of `destinations` with `tag`, taking `bytes` (malloc'd, or
     * NULL for an empty message; the channel frees them once every send completed). CHORUS_OK,
     * or CHORUS_ERR_MPI. */
    chorus_status (*post)(void *state, uint8_t *bytes, size_t length, const int *destinations,
                          int destination_count, int tag);
    /* Completes sends. With `wait`, until all have; after a fatal error (`failed`) only for a
     * while, then the rest are given up (their buffers kept until MPI is finalized). */
    void (*progress)(void *state, bool wait, bool failed);
    /* Takes one waiting message of `tag` from `source` (-1: any rank) if there is one: *bytes
     * (malloc'd, also for an empty message; the caller frees), *length and *sender set.
     * CHORUS_OK also when there was none (*bytes NULL); CHORUS_ERR_MPI or
     * CHORUS_ERR_OUT_OF_MEMORY when it failed. Messages from one rank with one tag arrive in
     * the order they were posted. */
    chorus_status (*receive)(void *state, int source, int tag, uint8_t **bytes, size_t *length,
                             int *sender);
    /* Starts the bitwise AND of every rank's `words` words `mine` into `result` (both stay put
     * until it completes), and tests whether it completed. */
    chorus_status (*round_post)(void *state, const uint64_t *mine, uint64_t *result,
                                size_t words);
    chorus_status (*round_test)(void *state, bool *done);
    /* Frees the channel. A round still posted after a fatal error is left to MPI. */
    void (*release)(void *state, bool failed);
    /* Why the last call that failed did (a rank lost, say), or NULL where the channel says
     * no more than its status (MPI's). */
    const char *(*failure)(void *state);
};

/* The channel's reason for its last failure, else `otherwise`. */
static inline const char *channel_failure(const struct channel *channel, const char *otherwise)
{
    const char *why = channel->failure != NULL ? channel->failure(channel->state) : NULL;
    return why != NULL && why[0] != '\0' ? why : otherwise;
}

/* Every rank of `size` but `rank`, in order: the destinations of a message to all the others
 * (malloc'd; NULL when out of memory). */
static inline int *channel_ranks_but(int rank, int size)
{
    int *ranks = malloc((size_t)(size > 1 ? size - 1 : 1) * sizeof *ranks);
    for (int r = 0, i = 0; ranks != NULL && r < size; r++)
        if (r != rank)
            ranks[i++] = r;
    return ranks;
}

/* The channel over `comm` (an MPI_Comm passed by pointer; it must stay put). False when out of
 * memory. */
bool channel_mpi_init(struct channel *channel, const void *comm);

/* The channel over a connected UCX fabric (channel_ucx.c, part of the UCX library with
 * transport_ucx.h). The fabric must outlive the channel. False when out of memory. */
struct ucx_fabric;
bool channel_ucx_init(struct channel *channel, struct ucx_fabric *fabric);

#endif
