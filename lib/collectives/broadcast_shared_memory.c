/*
 * broadcast_shared_memory.c — broadcast through the host's shared segment, for jobs on one
 * host. The root copies the buffer chunk by chunk into its two staging areas in turn; after
 * each barrier every other rank copies the chunk the root staged before it, while the root
 * stages the next one:
 *   root: stage(0) | barrier | stage(1)  | barrier | stage(2)  | barrier ...
 *   rest:          | barrier | copy(0)   | barrier | copy(1)   | barrier ...
 * stage(k+1) overwrites the area that copy(k-1) read before the previous barrier. The last
 * barrier keeps the root from reusing an area while a rank still reads it.
 *
 * Cost: the root writes the buffer once and every other rank reads it once, in cache-sized
 * chunks; no MPI message at all. A tree or chain through MPI also copies each byte once per
 * receiver but pays a message per segment and hop.
 */
#include "algorithms.h"
#include "node_segment.h"

#include <string.h>

static void chunk_span(size_t bytes, size_t chunk_bytes, size_t index, size_t *offset,
                       size_t *length)
{
    *offset = index * chunk_bytes;
    *length = bytes - *offset < chunk_bytes ? bytes - *offset : chunk_bytes;
}

chorus_status broadcast_shared_memory(const struct broadcast_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || node->local_size != args->transport->nranks) /* not one host */
        return broadcast_pipelined_chain(args);
    if (args->bytes == 0 || node->local_size == 1)
        return CHORUS_OK;
    bool root = node->local_rank == args->root;
    size_t chunks = (args->bytes + node->chunk_bytes - 1) / node->chunk_bytes;
    unsigned area = node->next_area;
    unsigned char *buffer = args->buffer;
    for (size_t k = 0; k <= chunks; k++) {
        size_t offset = 0, length = 0;
        if (root && k < chunks) {
            chunk_span(args->bytes, node->chunk_bytes, k, &offset, &length);
            memcpy(node->staging[args->root][(area + k) % 2], buffer + offset, length);
        } else if (!root && k > 0) {
            chunk_span(args->bytes, node->chunk_bytes, k - 1, &offset, &length);
            memcpy(buffer + offset, node->staging[args->root][(area + k - 1) % 2], length);
        }
        node_segment_barrier(node);
    }
    node->next_area = (unsigned)((area + chunks) % 2);
    return CHORUS_OK;
}
