/*
 * allgather_shared_memory.c — allgather (blocks of any size) through the host's shared
 * segment, for jobs on one host. In round k every rank stages bytes [k C, (k+1) C) of its own
 * block (C: the staging area's size) into one of its two staging areas, in turn; after the
 * barrier it copies round k of every other rank's block out of their staging areas, while in the
 * same step it stages round k+1:
 *   stage(0) | barrier | copy(0), stage(1) | barrier | copy(1), stage(2) | barrier ...
 * stage(k+1) overwrites the area that peers read in copy(k-1), before the previous barrier.
 * Rounds run until the largest block is done; a rank whose block is shorter stages nothing.
 *
 * Cost: each rank writes its block once and reads every other block once, in cache-sized
 * pieces and without MPI messages; a ring through MPI copies every block once per receiver
 * too, but one step after another. The staging areas are written with the kind of store the
 * host's topology calls for (node_segment.h).
 */
#include "algorithms.h"
#include "../transport/transport.h"

#include <string.h>

chorus_status allgather_shared_memory(const struct allgather_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || node->local_size != args->transport->nranks) /* not one host */
        return CHORUS_ERR_NOT_SUPPORTED;
    int me = node->local_rank, local_size = node->local_size;
    unsigned char *recv = args->recv;
    if (args->block_bytes[me] != 0 && args->send != recv + args->offsets[me])
        memmove(recv + args->offsets[me], args->send, args->block_bytes[me]);
    size_t largest = 0;
    for (int r = 0; r < local_size; r++)
        largest = args->block_bytes[r] > largest ? args->block_bytes[r] : largest;
    if (local_size == 1 || largest == 0)
        return CHORUS_OK;
    size_t chunk = node->chunk_bytes;
    size_t rounds = (largest + chunk - 1) / chunk;
    size_t turn = node_segment_take_turns(node, rounds, 2);
    const unsigned char *mine = recv + args->offsets[me];
    for (size_t k = 0; k <= rounds; k++) {
        if (k > 0)
            for (int r = 0; r < local_size; r++) {
                size_t length = node_chunk_length(args->block_bytes[r], chunk, k - 1);
                if (r != me && length != 0)
                    memcpy(recv + args->offsets[r] + (k - 1) * chunk,
                           node_staging(node, r, turn + k - 1), length);
            }
        size_t length = k < rounds ? node_chunk_length(args->block_bytes[me], chunk, k) : 0;
        if (length != 0)
            node_stage_copy(node, node_staging(node, me, turn + k), mine + k * chunk, length);
        node_segment_barrier(node);
    }
    return CHORUS_OK;
}
