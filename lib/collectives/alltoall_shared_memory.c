/*
 * alltoall_shared_memory.c — alltoall (blocks of any size) through the host's shared segment,
 * for jobs on one host. A rank's staging area is cut into p-1 slots of S bytes, one per
 * destination. In round k every rank stages bytes [k S, (k+1) S) of each block it sends into
 * the slot of that block's destination, in one of its two staging areas in turn; after the
 * barrier every rank copies round k of the blocks meant for it out of the senders' slots, while
 * in the same step it stages round k+1, as allgather_shared_memory.c does:
 *   stage(0) | barrier | copy(0), stage(1) | barrier | copy(1), stage(2) | barrier ...
 * Rounds run until the largest block of any rank is done; the ranks agree on it first through
 * the segment (one barrier) unless they all know the blocks have one size.
 *
 * Cost: every block is copied twice, with memcpy, where the single copy (alltoall_single_copy.c)
 * copies it once with the kernel's cross-memory attach; on the development VM the kernel's copy
 * ran at about a third of memcpy's speed, so for blocks that fit in the cache two copies are
 * cheaper than one.
 */
#include "algorithms.h"
#include "../transport/transport.h"

#include <string.h>

/* A slot's size: the staging area shared out among the p-1 destinations, in whole cache lines
 * so that no two ranks' copies write the same line. */
static size_t slot_bytes(size_t chunk_bytes, int p)
{
    return chunk_bytes / (size_t)(p - 1) / 64 * 64;
}

/* The slot of the block that rank `from` sends to rank `to`, in `from`'s staging area. */
static size_t slot_index(int from, int to, int p)
{
    return (size_t)((to - from - 1 + p) % p);
}

chorus_status alltoall_shared_memory(const struct alltoall_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || node->local_size != args->transport->nranks) /* not one host */
        return CHORUS_ERR_NOT_SUPPORTED;
    int p = node->local_size, me = node->local_rank;
    size_t slot = p > 1 ? slot_bytes(node->chunk_bytes, p) : 0;
    if (p > 1 && slot == 0)
        return CHORUS_ERR_NOT_SUPPORTED; /* more ranks than cache lines in an area */
    const unsigned char *send = args->send;
    unsigned char *recv = args->recv;
    if (args->send_bytes[me] != 0)
        memcpy(recv + args->recv_offsets[me], send + args->send_offsets[me], args->send_bytes[me]);
    if (p == 1)
        return CHORUS_OK;
    size_t largest = 0;
    for (int r = 0; r < p; r++) {
        if (r != me && args->send_bytes[r] > largest)
            largest = args->send_bytes[r];
    }
    if (!args->same_blocks)
        largest = (size_t)node_segment_largest(node, largest);
    if (largest == 0)
        return CHORUS_OK;
    size_t rounds = (largest + slot - 1) / slot;
    size_t turn = node_segment_take_turns(node, rounds, 2);
    for (size_t k = 0; k <= rounds; k++) {
        if (k > 0)
            for (int from = 0; from < p; from++) {
                size_t length = node_chunk_length(args->recv_bytes[from], slot, k - 1);
                if (from != me && length != 0)
                    memcpy(recv + args->recv_offsets[from] + (k - 1) * slot,
                           node_staging(node, from, turn + k - 1) +
                               slot_index(from, me, p) * slot,
                           length);
            }
        for (int to = 0; k < rounds && to < p; to++) {
            size_t length = node_chunk_length(args->send_bytes[to], slot, k);
            if (to != me && length != 0)
                node_stage_copy(node,
                                node_staging(node, me, turn + k) + slot_index(me, to, p) * slot,
                                send + args->send_offsets[to] + k * slot, length);
        }
        node_segment_barrier(node);
    }
    return CHORUS_OK;
}
