/*
 * select.c — the algorithm tables and the selection rule: a name forced by parameter, else the
 * tuning table below, else the fallback that supports every call (ring for allreduce and
 * allgather, binomial tree for broadcast). Every algorithm here supports every count, dtype, op
 * and number of ranks; those that work through the host's shared segment also need a placement
 * of the ranks (its `needs`), and a forced one gives way to its `fallback` without it.
 */
#include "algorithms.h"

#include <stdlib.h>
#include <string.h>

static const struct algorithm allreduce_algorithms[] = {
    [ALLREDUCE_RING] = {"ring",
                        "reduce-scatter then allgather around a ring, segmented and pipelined; "
                        "bandwidth-optimal",
                        {.allreduce = allreduce_ring}},
    [ALLREDUCE_RECURSIVE_DOUBLING] = {"recursive_doubling",
                                      "log2(p) exchanges of the whole buffer; for small messages",
                                      {.allreduce = allreduce_recursive_doubling}},
    [ALLREDUCE_RABENSEIFNER] = {"rabenseifner",
                                "recursive-halving reduce-scatter + recursive-doubling "
                                "allgather; for medium messages",
                                {.allreduce = allreduce_rabenseifner}},
    [ALLREDUCE_HIERARCHICAL] = {"hierarchical",
                                "reduce through a shared-memory segment per host, then across "
                                "hosts by slice; needs equal ranks per host",
                                {.allreduce = allreduce_hierarchical},
                                NEEDS_SHARED_HOST,
                                ALLREDUCE_RING},
};
static_assert(ARRAY_LENGTH(allreduce_algorithms) == ALLREDUCE_ALGORITHM_COUNT, "table size");

static const struct algorithm broadcast_algorithms[] = {
    [BROADCAST_BINOMIAL] = {"binomial", "binomial tree from the root; for small messages",
                            {.broadcast = broadcast_binomial}},
    [BROADCAST_PIPELINED_CHAIN] = {"pipelined_chain",
                                   "segments flow down a chain of ranks; for large messages",
                                   {.broadcast = broadcast_pipelined_chain}},
    [BROADCAST_SHARED_MEMORY] = {"shared_memory",
                                 "the root stages chunks in the host's shared segment, the "
                                 "others copy them; needs all ranks on one host",
                                 {.broadcast = broadcast_shared_memory},
                                 NEEDS_ONE_HOST,
                                 BROADCAST_PIPELINED_CHAIN},
    [BROADCAST_SINGLE_COPY] = {"single_copy",
                               "every rank copies its part straight from the root's buffer "
                               "into the others' (cross-memory attach); needs all ranks on one "
                               "host, else shared_memory",
                               {.broadcast = broadcast_single_copy},
                               NEEDS_ONE_HOST,
                               BROADCAST_PIPELINED_CHAIN},
};
static_assert(ARRAY_LENGTH(broadcast_algorithms) == BROADCAST_ALGORITHM_COUNT, "table size");

static const struct algorithm allgather_algorithms[] = {
    [ALLGATHER_RING] = {"ring", "p-1 steps around a ring; bandwidth-optimal",
                        {.allgather = allgather_ring}},
    [ALLGATHER_BRUCK] = {"bruck", "ceil(log2 p) steps of doubling blocks; for small messages",
                         {.allgather = allgather_bruck}},
    [ALLGATHER_SHARED_MEMORY] = {"shared_memory",
                                 "every rank stages its block in the host's shared segment, the "
                                 "others copy it; needs all ranks on one host",
                                 {.allgather = allgather_shared_memory},
                                 NEEDS_ONE_HOST,
                                 ALLGATHER_RING},
    [ALLGATHER_SINGLE_COPY] = {"single_copy",
                               "every rank writes its block straight into the others' outputs "
                               "(cross-memory attach); needs all ranks on one host, else "
                               "shared_memory",
                               {.allgather = allgather_single_copy},
                               NEEDS_ONE_HOST,
                               ALLGATHER_RING},
};
static_assert(ARRAY_LENGTH(allgather_algorithms) == ALLGATHER_ALGORITHM_COUNT, "table size");

const struct algorithm *algorithm_table(chorus_collective collective, size_t *count)
{
    switch (collective) {
    case CHORUS_ALLREDUCE:
        *count = ARRAY_LENGTH(allreduce_algorithms);
        return allreduce_algorithms;
    case CHORUS_BROADCAST:
        *count = ARRAY_LENGTH(broadcast_algorithms);
        return broadcast_algorithms;
    case CHORUS_ALLGATHER:
        *count = ARRAY_LENGTH(allgather_algorithms);
        return allgather_algorithms;
    }
    *count = 0;
    return NULL;
}

int algorithm_find(chorus_collective collective, const char *name)
{
    size_t count = 0;
    const struct algorithm *table = algorithm_table(collective, &count);
    for (size_t i = 0; i < count; i++)
        if (strcmp(table[i].name, name) == 0)
            return (int)i;
    return -1;
}

char *algorithm_names(chorus_collective collective)
{
    size_t count = 0;
    const struct algorithm *table = algorithm_table(collective, &count);
    char *names = format_string("%s", "");
    for (size_t i = 0; i < count; i++)
        string_append(&names, "%s%s", i ? ", " : "", table[i].name);
    return names;
}

/* Thresholds: measured with `chorus-bench -b 1K -e 256M -f 4` forcing each allreduce algorithm
 * in turn (CHORUS_ALLREDUCE_ALGO), on the 2-core development VM (AMD EPYC, 1 MiB L2 per core,
 * 32 MiB L3; Debian 12, Open MPI 4.1.4 over vader), np=2 and np=4, 2026-11-22, comparing the
 * ratio to MPI_Allreduce in the same run. On a shared host the hierarchical algorithm won at
 * every size: its barriers are shared-memory flags, cheaper than any MPI message, and it copies
 * (L-1)/L of the buffer in and out once where a ring through MPI moves 2(L-1)/L. Without a
 * shared host: recursive doubling's log2(p) steps below 16 KiB, Rabenseifner up to 256 KiB,
 * then the ring. Broadcast and allgather (`chorus-bench -c broadcast|allgather -b 1M -e 64M -f 4`
 * forcing each, same machine and day): on one host, the shared segment won at np=4 (broadcast
 * 1.5-1.9x MPI from 4 MiB, allgather 1.5-2.2x). At np=2 the single-copy algorithms win
 * (2026-11-22, the algorithms alone, 3 rounds, best of each): broadcast 1.7-2.0x MPI_Bcast from
 * 256 KiB (1 MiB: 51 against 99 us), where the staged segment and a binomial tree are at most
 * 1.0x; allgather 1.0-1.3x MPI_Allgather, the staged segment 0.2-0.5x. Below 32 KiB a broadcast
 * through the API took 14-20 us as a binomial tree (the root does not wait) and 23-28 us as a
 * single copy. At np=4 on 2 cores neither the single copy nor the staged segment won clearly, so
 * the staged segment stays there. Once the staged allgather measured its own kind of store
 * (staging_stores.c), it beat the single copy at np=2 from 1 MiB to 8 MiB (2026-11-22, 14
 * interleaved rounds of `chorus-bench -c allgather -b 512K -e 4M -f 2 -n 500`, medians of the
 * ratio to MPI: 1 MiB 1.01 / 0.94 against 0.87 / 0.91, 2 MiB 0.90 / 0.98 against 0.99 / 0.90,
 * 4 MiB 1.09 / 1.05 against 0.98 / 0.90; 8 MiB 0.91-1.16 against 0.80-1.09 in 5 rounds), but
 * not at 512 KiB (0.70 against 0.85) nor from 16 MiB, where its second copy costs more than
 * the kernel's (64 MiB: 9.6-11.6 against 7.0-8.1 ms in 4 rounds). */
#define ALLREDUCE_SMALL_BYTES ((size_t)16 << 10)
#define ALLREDUCE_MEDIUM_BYTES ((size_t)256 << 10)
#define BROADCAST_SMALL_BYTES ((size_t)64 << 10)
#define BROADCAST_SINGLE_COPY_BYTES ((size_t)32 << 10)
#define ALLGATHER_SMALL_BYTES ((size_t)16 << 10)
#define ALLGATHER_STAGED_FROM_BYTES ((size_t)1 << 20)
#define ALLGATHER_STAGED_BELOW_BYTES ((size_t)16 << 20)

int algorithm_select(chorus_collective collective, int forced, size_t bytes, int nranks,
                     int local_ranks)
{
    bool shared_host = local_ranks > 1, single_host = shared_host && local_ranks == nranks;
    if (forced >= 0) {
        size_t count = 0;
        const struct algorithm *algorithm = &algorithm_table(collective, &count)[forced];
        bool met = algorithm->needs == NEEDS_NOTHING ||
                   (algorithm->needs == NEEDS_SHARED_HOST && shared_host) ||
                   (algorithm->needs == NEEDS_ONE_HOST && single_host);
        return met ? forced : algorithm->fallback;
    }
    switch (collective) {
    case CHORUS_ALLREDUCE:
        if (shared_host)
            return ALLREDUCE_HIERARCHICAL;
        if (bytes <= ALLREDUCE_SMALL_BYTES || nranks <= 1)
            return ALLREDUCE_RECURSIVE_DOUBLING;
        if (bytes <= ALLREDUCE_MEDIUM_BYTES)
            return ALLREDUCE_RABENSEIFNER;
        return ALLREDUCE_RING;
    case CHORUS_BROADCAST:
        if (single_host && nranks == 2 && bytes >= BROADCAST_SINGLE_COPY_BYTES)
            return BROADCAST_SINGLE_COPY;
        if (single_host && nranks > 2)
            return BROADCAST_SHARED_MEMORY;
        return bytes <= BROADCAST_SMALL_BYTES || nranks <= 2 ? BROADCAST_BINOMIAL
                                                              : BROADCAST_PIPELINED_CHAIN;
    case CHORUS_ALLGATHER:
        if (single_host && nranks == 2 && bytes > ALLGATHER_SMALL_BYTES &&
            (bytes < ALLGATHER_STAGED_FROM_BYTES || bytes >= ALLGATHER_STAGED_BELOW_BYTES))
            return ALLGATHER_SINGLE_COPY;
        if (single_host)
            return ALLGATHER_SHARED_MEMORY;
        return bytes <= ALLGATHER_SMALL_BYTES ? ALLGATHER_BRUCK : ALLGATHER_RING;
    }
    return 0;
}

void *scratch_reserve(struct scratch *scratch, size_t bytes)
{
    if (bytes <= scratch->capacity && scratch->memory != NULL)
        return scratch->memory;
    size_t capacity = scratch->capacity ? scratch->capacity : 4096;
    while (capacity < bytes)
        capacity *= 2;
    void *memory = NULL;
    if (posix_memalign(&memory, 64, capacity) != 0)
        return NULL;
    /* Touch every page now, so that the first collective does not pay the page faults. */
    memset(memory, 0, capacity);
    free(scratch->memory);
    scratch->memory = memory;
    scratch->capacity = capacity;
    return memory;
}

void scratch_release(struct scratch *scratch)
{
    free(scratch->memory);
    scratch->memory = NULL;
    scratch->capacity = 0;
}
