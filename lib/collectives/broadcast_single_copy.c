/*
 * broadcast_single_copy.c — broadcast for jobs on one host, copying straight between the ranks'
 * buffers (cross-memory attach, see node_segment.h): no staging, no MPI message. The buffer is
 * cut into one part per rank, and rank j delivers part j: a non-root rank reads its part from
 * the root's buffer, then writes it into every other non-root rank's buffer; the root writes its
 * own part into all of them. Every rank copies (p-1)/p of the buffer, all at the same time.
 *
 * Example, p = 2: the root writes the first half into the other rank's buffer while that rank
 * reads the second half from the root's: two cores copy, one half each, where a message through
 * MPI is one copy by one core.
 *
 * Where the host forbids such copies, it declines, and the selection table stages the broadcast
 * through the shared segment instead.
 */
#include "algorithms.h"
#include "../transport/transport.h"

chorus_status broadcast_single_copy(const struct broadcast_args *args)
{
    struct node_segment *node = args->node;
    /* Not one host, or copies refused: the selection table goes on to the staged algorithm,
     * or to one through MPI. */
    if (node == NULL || node->local_size != args->transport->nranks || !node->single_copy)
        return CHORUS_ERR_NOT_SUPPORTED;
    int p = node->local_size, me = node->local_rank, root = args->root;
    if (args->bytes == 0 || p == 1)
        return CHORUS_OK;
    unsigned char *buffer = args->buffer;
    node_single_copy_publish(node, buffer);
    size_t start = part_start(args->bytes, (size_t)p, (size_t)me);
    size_t length = part_length(args->bytes, (size_t)p, (size_t)me);
    bool copied = true;
    if (me != root && length != 0)
        copied = node_copy_from_peer(node, root, buffer + start,
                                     node_peer_address(node, root) + start, length);
    for (int k = 0; copied && length != 0 && k < p; k++)
        if (k != me && k != root)
            copied = node_copy_to_peer(node, k, node_peer_address(node, k) + start,
                                       buffer + start, length);
    return node_single_copy_finish(node, copied, args->transport->error,
                                   sizeof args->transport->error);
}
