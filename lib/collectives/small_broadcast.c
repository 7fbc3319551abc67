/*
 * small_broadcast.c — broadcast through the host's small-message slots, in one phase: the root
 * stages its tensor, every other rank copies it out of the root's slot.
 *
 * Cost: one phase; each rank but the root reads the root's bytes. The phase also waits for
 * every rank, as every phase does, so that the root's slot is free again two phases later.
 */
#include "small_collectives.h"

#include <string.h>

void small_broadcast_stage(struct small_segment *segment, const void *input, size_t bytes)
{
    if (bytes != 0)
        memcpy(small_next_payload(segment, bytes), input, bytes);
}

void small_broadcast_take(const struct small_segment *segment, void *output, size_t bytes,
                          int root)
{
    if (bytes != 0 && root != segment->local_rank)
        memcpy(output, small_payload_of(segment, root, bytes), bytes);
}
