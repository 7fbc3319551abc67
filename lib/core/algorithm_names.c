/*
 * algorithm_names.c — see algorithm_names.h.
 */
#include "algorithm_names.h"

#include <string.h>

static const char *const allreduce_names[] = {
    [ALLREDUCE_RING] = "ring",
    [ALLREDUCE_RECURSIVE_DOUBLING] = "recursive_doubling",
    [ALLREDUCE_RABENSEIFNER] = "rabenseifner",
    [ALLREDUCE_HIERARCHICAL] = "hierarchical",
    [ALLREDUCE_SMALL_SLOTS] = "small_slots",
    [ALLREDUCE_SHARED_HEAP] = "shared_heap",
};
static_assert(ARRAY_LENGTH(allreduce_names) == ALLREDUCE_ALGORITHM_COUNT, "a name per algorithm");

static const char *const broadcast_names[] = {
    [BROADCAST_BINOMIAL] = "binomial",
    [BROADCAST_PIPELINED_CHAIN] = "pipelined_chain",
    [BROADCAST_SHARED_MEMORY] = "shared_memory",
    [BROADCAST_SINGLE_COPY] = "single_copy",
};
static_assert(ARRAY_LENGTH(broadcast_names) == BROADCAST_ALGORITHM_COUNT, "a name per algorithm");

static const char *const allgather_names[] = {
    [ALLGATHER_RING] = "ring",
    [ALLGATHER_BRUCK] = "bruck",
    [ALLGATHER_SHARED_MEMORY] = "shared_memory",
    [ALLGATHER_SINGLE_COPY] = "single_copy",
};
static_assert(ARRAY_LENGTH(allgather_names) == ALLGATHER_ALGORITHM_COUNT, "a name per algorithm");

static const char *const reducescatter_names[] = {
    [REDUCESCATTER_RING] = "ring",
    [REDUCESCATTER_HIERARCHICAL] = "hierarchical",
    [REDUCESCATTER_RECURSIVE_HALVING] = "recursive_halving",
};
static_assert(ARRAY_LENGTH(reducescatter_names) == REDUCESCATTER_ALGORITHM_COUNT,
              "a name per algorithm");

static const char *const alltoall_names[] = {
    [ALLTOALL_PAIRWISE] = "pairwise",
    [ALLTOALL_SINGLE_COPY] = "single_copy",
    [ALLTOALL_BRUCK] = "bruck",
    [ALLTOALL_SHARED_MEMORY] = "shared_memory",
};
static_assert(ARRAY_LENGTH(alltoall_names) == ALLTOALL_ALGORITHM_COUNT, "a name per algorithm");

static const char *const *names_of(chorus_collective collective, size_t *count)
{
    switch (collective) {
    case CHORUS_ALLREDUCE:
        *count = ARRAY_LENGTH(allreduce_names);
        return allreduce_names;
    case CHORUS_BROADCAST:
        *count = ARRAY_LENGTH(broadcast_names);
        return broadcast_names;
    case CHORUS_ALLGATHER:
        *count = ARRAY_LENGTH(allgather_names);
        return allgather_names;
    case CHORUS_REDUCESCATTER:
        *count = ARRAY_LENGTH(reducescatter_names);
        return reducescatter_names;
    case CHORUS_ALLTOALL:
        *count = ARRAY_LENGTH(alltoall_names);
        return alltoall_names;
    }
    *count = 0;
    return NULL;
}

size_t algorithm_count(chorus_collective collective)
{
    size_t count = 0;
    names_of(collective, &count);
    return count;
}

const char *algorithm_name(chorus_collective collective, int id)
{
    size_t count = 0;
    const char *const *names = names_of(collective, &count);
    return id >= 0 && (size_t)id < count ? names[id] : "?";
}

int algorithm_find(chorus_collective collective, const char *name)
{
    size_t count = 0;
    const char *const *names = names_of(collective, &count);
    for (size_t i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

int algorithm_collective_find(const char *name)
{
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        if (algorithm_count((chorus_collective)c) > 0 &&
            strcmp(chorus_collective_name((chorus_collective)c), name) == 0)
            return c;
    return -1;
}

char *algorithm_names(chorus_collective collective)
{
    size_t count = 0;
    const char *const *names = names_of(collective, &count);
    char *list = text_format("%s", "");
    for (size_t i = 0; list != NULL && i < count; i++)
        text_append(&list, "%s%s", i ? ", " : "", names[i]);
    return list;
}
