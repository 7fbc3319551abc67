/*
 * select.c — the algorithm tables and the selection table. A call runs the algorithm forced by
 * parameter (CHORUS_<COLLECTIVE>_ALGO), else the first row of the selection table whose
 * conditions hold; an algorithm that cannot run the call declines (CHORUS_ERR_NOT_SUPPORTED,
 * before any data moves, on every rank alike) and the next matching row runs instead. The last
 * row of each collective has no conditions and runs anywhere, so every call has an algorithm.
 *
 * Every row names what chose it. The thresholds were measured on the 2-core development VM
 * (AMD EPYC, 1 MiB L2 per core, 32 MiB L3; Debian 12, Open MPI 4.1.4 over vader, 2026-11-22)
 * with `chorus-bench -b 1K -e 256M -f 4`, forcing each algorithm in turn and comparing the ratio
 * to plain MPI in the same run. The rows for a single host with two ranks are the least general:
 * on hosts with more cores they are the first to revisit. chorus-tune measures the rows for the
 * user's own hosts; a tuning file's rows (CHORUS_TUNING_FILE, lib/tuning) come before these.
 */
#include "algorithms.h"

#include <stdio.h>
#include <string.h>

static const struct algorithm allreduce_algorithms[] = {
    [ALLREDUCE_RING] = {"reduce-scatter then allgather around a ring, segmented and pipelined; "
                        "bandwidth-optimal",
                        {.allreduce = allreduce_ring}},
    [ALLREDUCE_RECURSIVE_DOUBLING] = {"log2(p) exchanges of the whole buffer; for small messages",
                                      {.allreduce = allreduce_recursive_doubling}},
    [ALLREDUCE_RABENSEIFNER] = {"recursive-halving reduce-scatter + recursive-doubling "
                                "allgather; for medium messages",
                                {.allreduce = allreduce_rabenseifner}},
    [ALLREDUCE_HIERARCHICAL] = {"reduce through a shared-memory segment per host, then across "
                                "hosts by slice (cross-host algorithm from this table); needs "
                                "equal ranks per host",
                                {.allreduce = allreduce_hierarchical},
                                PLACEMENT_SHARED_HOST},
    [ALLREDUCE_SHARED_HEAP] = {.summary = "a tensor in the shared heap (chorus_mem_alloc) on "
                                          "every rank of the host: each rank reduces its slice "
                                          "straight from every rank's buffer into every rank's "
                                          "buffer, one read and one write per byte; then across "
                                          "hosts by slice as the hierarchical one",
                               .run = {.allreduce = allreduce_shared_heap},
                               .needs = PLACEMENT_SHARED_HOST,
                               .declines_per_host = true,
                               .per_host_fallback = ALLREDUCE_HIERARCHICAL,
                               .declines_pieces = true},
    [ALLREDUCE_SMALL_SLOTS] = {.summary = "every rank publishes its buffer beside its flag in the "
                                          "host's small-message slots and reduces all of them "
                                          "itself: one phase; needs all ranks on one host, at "
                                          "most CHORUS_SMALL_LIMIT bytes",
                               .run = {.allreduce = allreduce_small_slots},
                               .needs = PLACEMENT_ONE_HOST,
                               .declines_pieces = true},
};
static_assert(ARRAY_LENGTH(allreduce_algorithms) == ALLREDUCE_ALGORITHM_COUNT, "table size");

static const struct algorithm broadcast_algorithms[] = {
    [BROADCAST_BINOMIAL] = {"binomial tree from the root; for small messages",
                            {.broadcast = broadcast_binomial}},
    [BROADCAST_PIPELINED_CHAIN] = {"segments flow down a chain of ranks; for large messages",
                                   {.broadcast = broadcast_pipelined_chain}},
    [BROADCAST_SHARED_MEMORY] = {"the root stages chunks in the host's shared segment, the "
                                 "others copy them; needs all ranks on one host",
                                 {.broadcast = broadcast_shared_memory},
                                 PLACEMENT_ONE_HOST},
    [BROADCAST_SINGLE_COPY] = {"every rank copies its part straight from the root's buffer "
                               "into the others' (cross-memory attach); needs all ranks on one "
                               "host and copies allowed",
                               {.broadcast = broadcast_single_copy},
                               PLACEMENT_ONE_HOST},
};
static_assert(ARRAY_LENGTH(broadcast_algorithms) == BROADCAST_ALGORITHM_COUNT, "table size");

static const struct algorithm allgather_algorithms[] = {
    [ALLGATHER_RING] = {"p-1 steps around a ring; bandwidth-optimal",
                        {.allgather = allgather_ring}},
    [ALLGATHER_BRUCK] = {"ceil(log2 p) steps of doubling blocks; for small messages",
                         {.allgather = allgather_bruck}},
    [ALLGATHER_SHARED_MEMORY] = {"every rank stages its block in the host's shared segment, the "
                                 "others copy it; needs all ranks on one host",
                                 {.allgather = allgather_shared_memory},
                                 PLACEMENT_ONE_HOST},
    [ALLGATHER_SINGLE_COPY] = {"every rank reads the others' blocks straight from their buffers "
                               "(cross-memory attach); needs all ranks on one host and copies "
                               "allowed",
                               {.allgather = allgather_single_copy},
                               PLACEMENT_ONE_HOST},
};
static_assert(ARRAY_LENGTH(allgather_algorithms) == ALLGATHER_ALGORITHM_COUNT, "table size");

static const struct algorithm reducescatter_algorithms[] = {
    [REDUCESCATTER_RING] = {"p-1 steps around a ring, each adding a block into the next; "
                            "bandwidth-optimal",
                            {.reducescatter = reducescatter_ring}},
    [REDUCESCATTER_HIERARCHICAL] = {"the hierarchical allreduce through the host's shared "
                                    "segment, this rank's block written in place; needs the "
                                    "same number of ranks on every host",
                                    {.reducescatter = reducescatter_hierarchical},
                                    PLACEMENT_SHARED_HOST},
    [REDUCESCATTER_RECURSIVE_HALVING] = {"log2 p steps, each sending the partner the half of "
                                         "the blocks it keeps; folds ranks beyond a power of two",
                                         {.reducescatter = reducescatter_recursive_halving}},
};
static_assert(ARRAY_LENGTH(reducescatter_algorithms) == REDUCESCATTER_ALGORITHM_COUNT,
              "table size");

static const struct algorithm alltoall_algorithms[] = {
    [ALLTOALL_PAIRWISE] = {"p-1 steps, in step k a block to rank r+k and one from rank r-k; "
                           "each block moves once",
                           {.alltoall = alltoall_pairwise}},
    [ALLTOALL_SINGLE_COPY] = {"every rank reads its block straight from every other rank's "
                              "buffer (cross-memory attach); needs all ranks on one host and "
                              "copies allowed",
                              {.alltoall = alltoall_single_copy},
                              PLACEMENT_ONE_HOST},
    [ALLTOALL_BRUCK] = {"ceil(log2 p) steps, in the step of distance d the blocks bound d ranks "
                        "further; needs blocks of one size on every rank",
                        {.alltoall = alltoall_bruck}},
    [ALLTOALL_SHARED_MEMORY] = {"every rank stages the blocks it sends in the host's shared "
                                "segment, one slot per destination, and copies its own out of "
                                "the senders' slots; needs all ranks on one host",
                                {.alltoall = alltoall_shared_memory},
                                PLACEMENT_ONE_HOST},
};
static_assert(ARRAY_LENGTH(alltoall_algorithms) == ALLTOALL_ALGORITHM_COUNT, "table size");

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
    case CHORUS_REDUCESCATTER:
        *count = ARRAY_LENGTH(reducescatter_algorithms);
        return reducescatter_algorithms;
    case CHORUS_ALLTOALL:
        *count = ARRAY_LENGTH(alltoall_algorithms);
        return alltoall_algorithms;
    }
    *count = 0;
    return NULL;
}

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static const struct selection_rule rules[] = {
    {CHORUS_ALLREDUCE, ALLREDUCE_SHARED_HEAP, PLACEMENT_SHARED_HOST, .in_shared_heap = true,
     .provenance = "tensors every rank put in the shared heap, np=2 pinned (chorus-bench -b 64K "
                   "-e 64M -f 4 --shared-heap, 3 interleaved rounds, 2026-11-26): 1.35-5.0x "
                   "MPI_Allreduce from 64 KiB; ResNet-50 and BERT steps at 0.92x and 1.04x a "
                   "memcpy of their bytes"},
    {CHORUS_ALLREDUCE, ALLREDUCE_SMALL_SLOTS, PLACEMENT_ONE_HOST, .max_bytes = 4 * KiB,
     .provenance = "negotiated allreduces on one host (chorus-bench --latency -b 8 -e 64K -f 4, "
                   "CHORUS_ALLREDUCE_ALGO forced, 2026-11-28): np=2 pinned 2.0-2.2 us against "
                   "the hierarchical one's 2.4-2.8 up to 2 KiB, alike at 8 KiB, 1.2x slower at "
                   "32 KiB; np=4 on 2 cores 32-34 against 41-57 us up to 2 KiB"},
    {CHORUS_ALLREDUCE, ALLREDUCE_HIERARCHICAL, PLACEMENT_SHARED_HOST,
     .provenance = "won at every size at np=2 and np=4 on one host: shared-memory flags for "
                   "barriers, (L-1)/L of the buffer copied in and out once"},
    {CHORUS_ALLREDUCE, ALLREDUCE_RECURSIVE_DOUBLING, .max_ranks = 1,
     .provenance = "one rank: nothing to exchange"},
    {CHORUS_ALLREDUCE, ALLREDUCE_RECURSIVE_DOUBLING, .max_bytes = 16 * KiB,
     .provenance = "log2(p) steps beat the ring's 2(p-1) below 16 KiB (np=2, np=4 over MPI)"},
    {CHORUS_ALLREDUCE, ALLREDUCE_RABENSEIFNER, .max_bytes = 256 * KiB,
     .provenance = "between recursive doubling and the ring up to 256 KiB (np=4 over MPI)"},
    {CHORUS_ALLREDUCE, ALLREDUCE_RING, .provenance = "bandwidth-optimal; supports every call"},

    {CHORUS_BROADCAST, BROADCAST_SINGLE_COPY, PLACEMENT_ONE_HOST, 2, 2, .min_bytes = 32 * KiB,
     .provenance = "np=2: 1.7-2.0x MPI_Bcast from 256 KiB (1 MiB: 51 against 99 us); below "
                   "32 KiB the binomial tree took 14-20 us against 23-28 us"},
    {CHORUS_BROADCAST, BROADCAST_SHARED_MEMORY, PLACEMENT_ONE_HOST, 2, 2, .min_bytes = 32 * KiB,
     .provenance = "np=2 where cross-memory copies are refused"},
    {CHORUS_BROADCAST, BROADCAST_SHARED_MEMORY, PLACEMENT_ONE_HOST, 3,
     .provenance = "np=4 on one host: 1.5-1.9x MPI_Bcast from 4 MiB"},
    {CHORUS_BROADCAST, BROADCAST_BINOMIAL, .max_bytes = 64 * KiB,
     .provenance = "the root does not wait for the tree below it; small messages"},
    {CHORUS_BROADCAST, BROADCAST_BINOMIAL, .max_ranks = 2,
     .provenance = "two ranks: a chain has nothing to pipeline"},
    {CHORUS_BROADCAST, BROADCAST_PIPELINED_CHAIN,
     .provenance = "large messages over MPI; supports every call"},

    {CHORUS_ALLGATHER, ALLGATHER_SINGLE_COPY, PLACEMENT_ONE_HOST, 2, 2, 16 * KiB + 1, 1 * MiB - 1,
     .provenance = "np=2: 0.85 of MPI at 512 KiB against 0.70 staged (14 interleaved rounds)"},
    {CHORUS_ALLGATHER, ALLGATHER_SINGLE_COPY, PLACEMENT_ONE_HOST, 2, 2, 16 * MiB,
     .provenance = "np=2 from 16 MiB: 7.0-8.1 ms at 64 MiB against 9.6-11.6 ms staged (the "
                   "kernel's one copy against the segment's two)"},
    {CHORUS_ALLGATHER, ALLGATHER_SHARED_MEMORY, PLACEMENT_ONE_HOST,
     .provenance = "one host: 1.5-2.2x MPI at np=4; at np=2 from 1 to 16 MiB 0.94-1.09 of MPI "
                   "against 0.87-0.98 single copy"},
    {CHORUS_ALLGATHER, ALLGATHER_BRUCK, .max_bytes = 16 * KiB,
     .provenance = "ceil(log2 p) steps below 16 KiB (np=4 over MPI)"},
    {CHORUS_ALLGATHER, ALLGATHER_RING, .provenance = "bandwidth-optimal; supports every call"},

    {CHORUS_REDUCESCATTER, REDUCESCATTER_HIERARCHICAL, PLACEMENT_ONE_HOST, 3,
     .provenance = "np=3 and np=4 on one host (2026-11-24, 1 KiB-32 MiB, 2 rounds each): ahead "
                   "of the ring at every size; 1 MiB at np=4 221-224 us against 394-401 us "
                   "(1.9x against 1.1x MPI_Reduce_scatter, 4 interleaved rounds)"},
    /* No row takes the hierarchical path across hosts: its cross-host step allreduces each
     * rank's slice, twice the bytes a reducescatter must move (2 emulated hosts x 2 ranks at
     * 1 Gbit/s, 16 MiB: 142 ms against the ring's 112 and a link bound of 100; chorus-tune,
     * 2026-11-26). */
    {CHORUS_REDUCESCATTER, REDUCESCATTER_RECURSIVE_HALVING, .min_ranks = 4,
     .max_bytes = 256 * KiB, .power_of_two_ranks = true,
     .provenance = "4 ranks on 4 emulated hosts (TCP between network namespaces, 3 interleaved "
                   "rounds): 204-282 us against the ring's 372-408 us at 1 KiB, 455-631 "
                   "against 780-801 us at 256 KiB; the ring ahead again from 1 MiB. 8 ranks, 2 "
                   "per host (2 rounds): 1.2-3.2 ms against 1.7-3.8 ms from 1 to 256 KiB"},
    /* Other numbers of ranks fold first: the folded ranks send their whole tensor, so the ring
     * catches up sooner. */
    {CHORUS_REDUCESCATTER, REDUCESCATTER_RECURSIVE_HALVING, .min_ranks = 6, .max_bytes = 16 * KiB,
     .provenance = "6 ranks on 4 emulated hosts (2 rounds): 599-1001 us against the ring's "
                   "837-1261 us from 1 to 16 KiB, even at 256 KiB; at 5 ranks even at 1 and "
                   "16 KiB, the ring ahead at 256 KiB (791-917 against 1200-1217 us)"},
    {CHORUS_REDUCESCATTER, REDUCESCATTER_RING,
     .provenance = "bandwidth-optimal; supports every call"},

    {CHORUS_ALLTOALL, ALLTOALL_SHARED_MEMORY, PLACEMENT_ONE_HOST,
     .provenance = "one host, 1 KiB-32 MiB: ahead of single copy at every size; 1 MiB in 6 "
                   "interleaved rounds at np=2 (pinned) 36-50 against 50-64 us (1.22x against "
                   "0.86x MPI, medians), at np=4 146-152 against 186-198 us (1.17x against 0.97x)"},
    {CHORUS_ALLTOALL, ALLTOALL_SINGLE_COPY, PLACEMENT_ONE_HOST,
     .provenance = "one host: pairwise through MPI was 0.6-1.1x MPI_Alltoallv at np=4"},
    /* The bytes here are every block sent and received, 2 p b for blocks of b bytes. */
    {CHORUS_ALLTOALL, ALLTOALL_BRUCK, .min_ranks = 8, .max_bytes = 64 * KiB,
     .provenance = "8 ranks on 4 emulated hosts (TCP between network namespaces), 1-64 KiB: "
                   "1.1-1.3 ms against the pairwise exchange's 2.0-2.3 ms; even at 128 KiB"},
    {CHORUS_ALLTOALL, ALLTOALL_BRUCK, .min_ranks = 64, .max_bytes = 1 * MiB,
     .provenance = "model, not measured: with 2 us and 12.5 GB/s links, Bruck's fewer messages "
                   "outweigh its extra bytes up to ~10 KiB blocks at 64 ranks, ~6 KiB at 1,024; "
                   "this row stops at 8 KiB and 512 bytes (the exchange of splits at 1,024 ranks "
                   "is 16 KiB)"},
    {CHORUS_ALLTOALL, ALLTOALL_PAIRWISE,
     .provenance = "every block moves once; supports every call"},
};

const struct selection_rule *selection_rules(size_t *count)
{
    *count = ARRAY_LENGTH(rules);
    return rules;
}

bool selection_placement_holds(enum placement placement, int nranks, int local_ranks)
{
    switch (placement) {
    case PLACEMENT_ANY:
        return true;
    case PLACEMENT_SHARED_HOST:
        return local_ranks > 1;
    case PLACEMENT_ONE_HOST:
        return local_ranks > 1 && local_ranks == nranks;
    }
    return false;
}

static bool rule_holds(const struct selection_rule *rule, const struct selection_query *query)
{
    return selection_placement_holds(rule->placement, query->nranks, query->local_ranks) &&
           (rule->min_ranks == 0 || query->nranks >= rule->min_ranks) &&
           (rule->max_ranks == 0 || query->nranks <= rule->max_ranks) &&
           query->bytes >= rule->min_bytes &&
           (rule->max_bytes == 0 || query->bytes <= rule->max_bytes) &&
           (rule->local_ranks == 0 || query->local_ranks == rule->local_ranks) &&
           (!rule->in_shared_heap || query->in_shared_heap) &&
           (!rule->power_of_two_ranks || (query->nranks & (query->nranks - 1)) == 0);
}

/* Appends the algorithms of the rows of `table` that hold and are not listed yet. */
static size_t add_candidates(const struct selection_rule *table, size_t rows,
                             chorus_collective collective, const struct selection_query *query,
                             int *candidates, size_t count, size_t capacity)
{
    for (size_t i = 0; i < rows && count < capacity; i++) {
        if (table[i].collective != collective || !rule_holds(&table[i], query))
            continue;
        bool listed = false;
        for (size_t c = 0; c < count; c++)
            listed |= candidates[c] == table[i].algorithm;
        if (!listed)
            candidates[count++] = table[i].algorithm;
    }
    return count;
}

/* The candidates; those at tuned_from .. tuned_to - 1 came from the tuning file's rows. */
static size_t candidates_and_origin(chorus_collective collective,
                                    const struct selection_query *query, int *candidates,
                                    size_t capacity, size_t *tuned_from, size_t *tuned_to)
{
    size_t count = 0;
    if (query->forced >= 0 && (size_t)query->forced < algorithm_count(collective) &&
        count < capacity)
        candidates[count++] = query->forced;
    *tuned_from = count;
    if (query->tuned != NULL)
        count = add_candidates(query->tuned->rules, query->tuned->count, collective, query,
                               candidates, count, capacity);
    *tuned_to = count;
    return add_candidates(rules, ARRAY_LENGTH(rules), collective, query, candidates, count,
                          capacity);
}

size_t selection_candidates(chorus_collective collective, const struct selection_query *query,
                            int *candidates, size_t capacity)
{
    size_t tuned_from = 0, tuned_to = 0;
    return candidates_and_origin(collective, query, candidates, capacity, &tuned_from,
                                 &tuned_to);
}

#define PLAN_LARGEST ((size_t)1 << 30)

void selection_plan(chorus_collective collective, const struct selection_query *query,
                    void (*row)(void *context, chorus_collective collective, size_t from,
                                size_t to, const char *chain),
                    void *context)
{
    char previous[200] = "";
    size_t from = 1;
    for (size_t bytes = 1; bytes <= PLAN_LARGEST; bytes *= 2) {
        struct selection_query at = *query;
        at.bytes = bytes;
        int candidates[ALGORITHMS_MAX];
        size_t tuned_from = 0, tuned_to = 0;
        size_t count = candidates_and_origin(collective, &at, candidates,
                                             ARRAY_LENGTH(candidates), &tuned_from, &tuned_to);
        char chain[200] = "";
        for (size_t i = 0; i < count; i++)
            snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s%s%s",
                     i ? ", then " : "", algorithm_name(collective, candidates[i]),
                     i >= tuned_from && i < tuned_to ? " (tuning file)" : "");
        if (bytes > 1 && strcmp(chain, previous) != 0) {
            row(context, collective, from, bytes / 2, previous);
            from = bytes;
        }
        snprintf(previous, sizeof previous, "%s", chain);
    }
    row(context, collective, from, PLAN_LARGEST, previous);
}

static chorus_status run_one(chorus_collective collective, int id, union collective_args args)
{
    size_t count = 0;
    const struct algorithm *algorithm = &algorithm_table(collective, &count)[id];
    switch (collective) {
    case CHORUS_ALLREDUCE:
        return algorithm->run.allreduce(args.allreduce);
    case CHORUS_BROADCAST:
        return algorithm->run.broadcast(args.broadcast);
    case CHORUS_ALLGATHER:
        return algorithm->run.allgather(args.allgather);
    case CHORUS_REDUCESCATTER:
        return algorithm->run.reducescatter(args.reducescatter);
    case CHORUS_ALLTOALL:
        return algorithm->run.alltoall(args.alltoall);
    }
    return CHORUS_ERR_NOT_SUPPORTED;
}

chorus_status selection_run(chorus_collective collective, const struct selection_query *query,
                            union collective_args args, int *ran)
{
    int candidates[ALGORITHMS_MAX];
    size_t count = selection_candidates(collective, query, candidates, ARRAY_LENGTH(candidates));
    size_t algorithms = 0;
    const struct algorithm *table = algorithm_table(collective, &algorithms);
    bool tried[ALGORITHMS_MAX] = {false};
    chorus_status status = CHORUS_ERR_NOT_SUPPORTED;
    *ran = -1;
    for (size_t c = 0; c < count && status == CHORUS_ERR_NOT_SUPPORTED; c++) {
        int id = candidates[c];
        if (tried[id])
            continue;
        tried[id] = true;
        *ran = id;
        status = run_one(collective, id, args);
        /* Declined on this host alone, maybe: the one that makes the same calls across hosts
         * runs here, whatever the next candidate would be. */
        int fallback = table[id].per_host_fallback;
        if (status == CHORUS_ERR_NOT_SUPPORTED && table[id].declines_per_host &&
            !tried[fallback]) {
            tried[fallback] = true;
            *ran = fallback;
            status = run_one(collective, fallback, args);
        }
    }
    return status;
}
