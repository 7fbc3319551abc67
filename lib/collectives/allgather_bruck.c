/*
 * allgather_bruck.c — Bruck's allgather for blocks of any size. Rank r keeps the blocks it has
 * in rotated order r, r+1, ... in a scratch buffer. In the round of distance d (1, 2, 4, ...)
 * it sends its first min(d, p - d) blocks to rank r - d and appends the same number of blocks
 * received from rank r + d. After ceil(log2 p) rounds it has all p blocks and copies them into
 * their places.
 *
 * Cost: ceil(log2 p) steps for any p; each rank receives every other block once (plus one local
 * copy), so it suits small messages where the number of steps dominates.
 *
 * Example, p = 3: round d=1: rank r gets block r+1 from r+1; round d=2: rank r gets block r+2
 * (one block, since only p - d = 1 is missing) from r+2.
 */
#include "algorithms.h"

#include <stdlib.h>
#include <string.h>

chorus_status allgather_bruck(const struct allgather_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t total = args->offsets[p - 1] + args->block_bytes[p - 1];
    size_t *rotated_offsets = malloc(((size_t)p + 1) * sizeof *rotated_offsets);
    char *rotated = scratch_reserve(args->scratch, total);
    chorus_status status = CHORUS_OK;
    if (rotated_offsets == NULL || rotated == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    /* rotated_offsets[i]: where block (r + i) mod p starts in the rotated buffer. */
    rotated_offsets[0] = 0;
    for (int i = 0; i < p; i++)
        rotated_offsets[i + 1] = rotated_offsets[i] + args->block_bytes[(r + i) % p];
    if (args->block_bytes[r] != 0)
        memcpy(rotated, args->send, args->block_bytes[r]);
    for (int distance = 1; distance < p; distance *= 2) {
        int blocks = distance < p - distance ? distance : p - distance;
        int destination = (r - distance + p) % p;
        int source = (r + distance) % p;
        /* The source's first `blocks` blocks are our blocks distance .. distance+blocks-1. */
        status = transport_sendrecv(transport, rotated, rotated_offsets[blocks], destination,
                                    rotated + rotated_offsets[distance],
                                    rotated_offsets[distance + blocks] -
                                        rotated_offsets[distance],
                                    source, TAG_ALLGATHER);
        if (status != CHORUS_OK)
            goto out;
    }
    char *recv = args->recv;
    for (int i = 0; i < p; i++) {
        int block = (r + i) % p;
        if (args->block_bytes[block] != 0)
            memcpy(recv + args->offsets[block], rotated + rotated_offsets[i],
                   args->block_bytes[block]);
    }
out:
    free(rotated_offsets);
    return status;
}
