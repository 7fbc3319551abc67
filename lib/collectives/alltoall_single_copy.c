/*
 * alltoall_single_copy.c — alltoall (blocks of any size) for jobs on one host, copying straight
 * between the ranks' buffers (cross-memory attach, see node_segment.h): every rank reads its
 * block from every other rank's send buffer into its own output, all at the same time, as
 * allgather_single_copy.c does for an allgather. Each block is copied once, with no staging and
 * no MPI message. The ranks learn where their blocks lie in the senders' buffers beforehand
 * (host_alltoall.c exchanges the offsets with the counts).
 *
 * Where the host forbids such copies, or the offsets are unknown, the alltoall goes through MPI.
 */
#include "algorithms.h"
#include "../transport/transport.h"

#include <string.h>

chorus_status alltoall_single_copy(const struct alltoall_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || node->local_size != args->transport->nranks || !node->single_copy ||
        args->remote_offsets == NULL)
        return CHORUS_ERR_NOT_SUPPORTED;
    int p = node->local_size, me = node->local_rank;
    unsigned char *recv = args->recv;
    const unsigned char *send = args->send;
    bool copied = true;
    if (p > 1)
        node_single_copy_publish(node, send);
    /* Starting at the next rank spreads the readers over the senders. */
    for (int step = 1; copied && step < p; step++) {
        int k = (me + step) % p;
        if (args->recv_bytes[k] != 0)
            copied = node_copy_from_peer(node, k, recv + args->recv_offsets[k],
                                         node_peer_address(node, k) + args->remote_offsets[k],
                                         args->recv_bytes[k]);
    }
    if (args->send_bytes[me] != 0)
        memcpy(recv + args->recv_offsets[me], send + args->send_offsets[me], args->send_bytes[me]);
    if (p == 1)
        return CHORUS_OK;
    return node_single_copy_finish(node, copied, args->transport->error,
                                   sizeof args->transport->error);
}
