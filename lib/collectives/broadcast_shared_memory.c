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
 * chunks; no MPI message at all. The root writes with the kind of store the host's topology
 * calls for (node_segment.h). A tree or chain through MPI also copies each byte once per receiver but
 * pays a message per segment and hop.
 */
#include "algorithms.h"
#include "../transport/transport.h"

#include <string.h>

chorus_status broadcast_shared_memory(const struct broadcast_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || node->local_size != args->transport->nranks) /* not one host */
        return CHORUS_ERR_NOT_SUPPORTED;
    if (args->bytes == 0 || node->local_size == 1)
        return CHORUS_OK;
    bool root = node->local_rank == args->root;
    size_t chunk = node->chunk_bytes;
    size_t chunks = (args->bytes + chunk - 1) / chunk;
    size_t turn = node_segment_take_turns(node, chunks, 2);
    unsigned char *buffer = args->buffer;
    for (size_t k = 0; k <= chunks; k++) {
        if (root && k < chunks)
            node_stage_copy(node, node_staging(node, args->root, turn + k), buffer + k * chunk,
                            node_chunk_length(args->bytes, chunk, k));
        else if (!root && k > 0)
            memcpy(buffer + (k - 1) * chunk, node_staging(node, args->root, turn + k - 1),
                   node_chunk_length(args->bytes, chunk, k - 1));
        node_segment_barrier(node);
    }
    return CHORUS_OK;
}
