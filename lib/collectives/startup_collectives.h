/*
 * startup_collectives.h — the few collectives chorus_init needs before it has an executor,
 * written against any transport (the whole world's or a group's, transport_subset.c), so that
 * start-up without MPI can agree on values and wait for every rank: an allgather of one fixed
 * block per rank, a barrier, and folds of unsigned 64-bit words (minimum, maximum, bitwise or).
 * For tens of ranks and a few bytes: the folds gather every rank's words and fold them locally,
 * so every rank ends with the same result.
 */
#ifndef CHORUS_STARTUP_COLLECTIVES_H
#define CHORUS_STARTUP_COLLECTIVES_H

#include "../core/common.h"
#include "../transport/point_to_point.h"

#include <stdint.h>

/* Every rank's `bytes` at `send` land, in rank order, in `recv` (nranks * bytes) on every rank.
 * `send` may lie at this rank's place in `recv`. On failure the transport's error says why. */
chorus_status startup_allgather(struct transport *transport, const void *send, size_t bytes,
                                void *recv);

/* Returns once every rank has called it (or a failure). */
chorus_status startup_barrier(struct transport *transport);

enum startup_fold { STARTUP_MIN, STARTUP_MAX, STARTUP_OR };

/* Folds `count` words of every rank, element by element, in place: every rank's `words` end as
 * the minimum, maximum or bitwise or over all ranks. */
chorus_status startup_fold(struct transport *transport, uint64_t *words, size_t count,
                           enum startup_fold fold);

#endif
