/*
 * agreement.h — the blocking steps by which every rank comes to the same values at start-up,
 * over the channel (channel.h) rather than MPI, so that the unit tests run them with ranks as
 * threads: rank 0's bytes to every rank, every rank's bytes to rank 0, whether every rank says
 * yes, and the first failure of any rank. What travels is encoded by the codec (wire.h); the
 * callers (lib/coordinator/startup.c, lib/tuning/tuning_agreement.c) encode and decode their
 * own messages.
 *
 * Every rank runs the same steps in the same order; a step returns once this rank's part is
 * done (rank 0's sends may still be under way; the channel completes them). The messages of a
 * step travel with tag CHANNEL_AGREEMENT, and those between two ranks keep their order, so
 * each step takes the next message from its peer. A step waits as MPI's collectives did, for
 * as long as a peer takes to reach it.
 */
#ifndef CHORUS_AGREEMENT_H
#define CHORUS_AGREEMENT_H

#include "channel.h"

/* This rank's end of the agreement. */
struct agreement {
    struct channel *channel;
    int rank;
    int size;
};

/* Rank 0's `*bytes` and `*length` to every rank: on rank 0 they stay its own (a copy is sent);
 * elsewhere they are set to what arrived (malloc'd; the caller frees). Rank 0 may send NULL
 * (it could not encode its message): the others then get an empty message, which no decoder
 * accepts, rather than wait. CHORUS_OK, or why not in `error`. */
chorus_status agreement_broadcast(const struct agreement *agreement, uint8_t **bytes,
                                  size_t *length, char *error, size_t error_size);

/* Every rank's `bytes` (`length` of them; taken, NULL for an empty message) to rank 0, which
 * calls `take` with each rank's in rank order, its own first (the bytes are freed after). On
 * the other ranks `take` is not called. CHORUS_OK, or why not in `error`. */
typedef void (*agreement_take)(void *context, int rank, const uint8_t *bytes, size_t length);
chorus_status agreement_gather(const struct agreement *agreement, uint8_t *bytes, size_t length,
                               agreement_take take, void *context, char *error, size_t error_size);

/* Whether `mine` holds on every rank, into *all. CHORUS_OK, or why not in `error`. */
chorus_status agreement_all(const struct agreement *agreement, bool mine, bool *all, char *error,
                            size_t error_size);

/* Every rank learns whether some rank failed (`mine` an error, with `message`), and the first
 * such rank's status and message: then that status, with the message in `error` ("rank N: "
 * before it, on the others). CHORUS_OK when no rank failed. A step that fails returns its own
 * error instead. */
chorus_status agreement_first_failure(const struct agreement *agreement, chorus_status mine,
                                      const char *message, char *error, size_t error_size);

#endif
