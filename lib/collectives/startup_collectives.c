/*
 * startup_collectives.c — start-up's allgather, barrier and folds (startup_collectives.h) over
 * any transport. The allgather is allgather_ring with equal blocks: p - 1 steps, each rank
 * receiving every other's block once, which for a few bytes on tens of ranks costs p - 1
 * latencies. The barrier is an allgather of one byte; the folds gather all ranks' words (p * n
 * words per rank) and fold them here in rank order.
 *
 * Example, MAX of one word on 3 ranks holding 4, 9, 2: each gathers [4, 9, 2] and keeps 9.
 */
#include "startup_collectives.h"

#include "algorithms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes the out-of-memory reason to the transport's error. */
static chorus_status startup_out_of_memory(struct transport *transport, const char *what,
                                           size_t bytes)
{
    snprintf(transport->error, sizeof transport->error,
             "rank %d: out of memory for %s (%zu bytes, %d ranks)", transport->rank, what, bytes,
             transport->nranks);
    return CHORUS_ERR_OUT_OF_MEMORY;
}

chorus_status startup_allgather(struct transport *transport, const void *send, size_t bytes,
                                void *recv)
{
    if (transport->rank < 0 || transport->rank >= transport->nranks) {
        if (transport->error[0] == '\0') /* a refused group has written why */
            snprintf(transport->error, sizeof transport->error,
                     "rank %d is not one of the %d ranks", transport->rank, transport->nranks);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    size_t nranks = (size_t)transport->nranks;
    size_t *blocks = malloc(2 * nranks * sizeof *blocks);
    if (blocks == NULL)
        return startup_out_of_memory(transport, "the allgather's block table", 2 * nranks);
    size_t *offsets = blocks + nranks;
    for (size_t r = 0; r < nranks; r++) {
        blocks[r] = bytes;
        offsets[r] = r * bytes;
    }
    struct allgather_args args = {.transport = transport,
                                  .send = send,
                                  .recv = recv,
                                  .block_bytes = blocks,
                                  .offsets = offsets};
    chorus_status status = allgather_ring(&args);
    free(blocks);
    return status;
}

chorus_status startup_barrier(struct transport *transport)
{
    unsigned char *arrived = malloc((size_t)transport->nranks + 1);
    if (arrived == NULL)
        return startup_out_of_memory(transport, "the barrier", (size_t)transport->nranks);
    unsigned char here = 1;
    chorus_status status = startup_allgather(transport, &here, 1, arrived);
    free(arrived);
    return status;
}

static uint64_t startup_fold_two(uint64_t a, uint64_t b, enum startup_fold fold)
{
    switch (fold) {
    case STARTUP_MIN:
        return a < b ? a : b;
    case STARTUP_MAX:
        return a > b ? a : b;
    case STARTUP_OR:
        return a | b;
    }
    return a;
}

chorus_status startup_fold(struct transport *transport, uint64_t *words, size_t count,
                           enum startup_fold fold)
{
    size_t nranks = (size_t)transport->nranks, bytes = count * sizeof *words;
    uint64_t *gathered = malloc(nranks * bytes + 1);
    if (gathered == NULL)
        return startup_out_of_memory(transport, "the fold", nranks * bytes);
    chorus_status status = startup_allgather(transport, words, bytes, gathered);
    for (size_t r = 1; status == CHORUS_OK && r < nranks; r++)
        for (size_t i = 0; i < count; i++)
            gathered[i] = startup_fold_two(gathered[i], gathered[r * count + i], fold);
    if (status == CHORUS_OK)
        memcpy(words, gathered, bytes);
    free(gathered);
    return status;
}
