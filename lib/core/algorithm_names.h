/*
 * algorithm_names.h — the names of the host algorithms of each collective, as parameters
 * (CHORUS_<COLLECTIVE>_ALGO), chorus-info and the timeline spell them. The algorithms themselves
 * and their selection table live in lib/collectives; the names live here so that parameter
 * parsing can check a name without depending on the code that runs it.
 */
#ifndef CHORUS_ALGORITHM_NAMES_H
#define CHORUS_ALGORITHM_NAMES_H

#include "common.h"

enum allreduce_algorithm_id {
    ALLREDUCE_RING,
    ALLREDUCE_RECURSIVE_DOUBLING,
    ALLREDUCE_RABENSEIFNER,
    ALLREDUCE_HIERARCHICAL,
    ALLREDUCE_SHARED_HEAP,
    ALLREDUCE_SMALL_SLOTS,
    ALLREDUCE_ALGORITHM_COUNT,
};

enum broadcast_algorithm_id {
    BROADCAST_BINOMIAL,
    BROADCAST_PIPELINED_CHAIN,
    BROADCAST_SHARED_MEMORY,
    BROADCAST_SINGLE_COPY,
    BROADCAST_ALGORITHM_COUNT,
};

enum allgather_algorithm_id {
    ALLGATHER_RING,
    ALLGATHER_BRUCK,
    ALLGATHER_SHARED_MEMORY,
    ALLGATHER_SINGLE_COPY,
    ALLGATHER_ALGORITHM_COUNT,
};

enum reducescatter_algorithm_id {
    REDUCESCATTER_RING,
    REDUCESCATTER_HIERARCHICAL,
    REDUCESCATTER_RECURSIVE_HALVING,
    REDUCESCATTER_ALGORITHM_COUNT,
};

enum alltoall_algorithm_id {
    ALLTOALL_PAIRWISE,
    ALLTOALL_SINGLE_COPY,
    ALLTOALL_BRUCK,
    ALLTOALL_SHARED_MEMORY,
    ALLTOALL_ALGORITHM_COUNT,
};

/* How many algorithms `collective` has (0 for a collective without host algorithms). */
size_t algorithm_count(chorus_collective collective);
/* The name of algorithm `id` of `collective`; "?" when out of range. */
const char *algorithm_name(chorus_collective collective, int id);
/* Index of the algorithm called `name`, or -1. */
int algorithm_find(chorus_collective collective, const char *name);
/* The collective called `name` ("allreduce", ...) that has host algorithms, or -1. */
int algorithm_collective_find(const char *name);
/* "ring, recursive_doubling, ..." (malloc'd; NULL when out of memory). */
char *algorithm_names(chorus_collective collective);

#endif
