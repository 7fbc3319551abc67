/*
 * allgather_single_copy.c — allgather (blocks of any size) for jobs on one host, copying
 * straight between the ranks' buffers (cross-memory attach, see node_segment.h): every rank
 * writes its block into every other rank's output, and into its own, at the same time as the
 * others. Each block is copied once per receiver, with no staging and no MPI message; a ring
 * through MPI also copies once per receiver, but one step after another.
 *
 * Where the host forbids such copies, the allgather stages through the shared segment instead.
 */
#include "algorithms.h"
#include "node_segment.h"

#include <string.h>

chorus_status allgather_single_copy(const struct allgather_args *args)
{
    struct node_segment *node = args->node;
    /* Not one host, or copies refused: the staged algorithm, which itself gives way to one
     * through MPI where the ranks do not share a host. */
    if (node == NULL || node->local_size != args->transport->nranks || !node->single_copy)
        return allgather_shared_memory(args);
    int p = node->local_size, me = node->local_rank;
    unsigned char *recv = args->recv;
    size_t mine = args->block_bytes[me];
    if (mine != 0 && args->send != recv + args->offsets[me])
        memmove(recv + args->offsets[me], args->send, mine);
    if (p == 1)
        return CHORUS_OK;
    node_single_copy_publish(node, recv);
    bool copied = true;
    /* Starting at the next rank spreads the writers over the receivers. */
    for (int step = 1; copied && mine != 0 && step < p; step++) {
        int k = (me + step) % p;
        copied = node_copy_to_peer(node, k, node_peer_address(node, k) + args->offsets[me],
                                   recv + args->offsets[me], mine);
    }
    return node_single_copy_finish(node, copied, args->transport->error,
                                   sizeof args->transport->error);
}
