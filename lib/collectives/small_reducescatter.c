/*
 * small_reducescatter.c — reducescatter through the host's small-message slots, in one phase:
 * every rank stages its whole tensor (as the allreduce does), then reduces its own block of
 * every rank's, in rank order.
 *
 * Cost: one phase; each rank reads its block of every other rank's tensor. Example at 3 ranks
 * and 7 elements: rank 0 reduces elements 0-2 of the three slots, rank 1 elements 3-4, rank 2
 * elements 5-6 (the first count % p ranks take one more, as Horovod splits rows).
 */
#include "small_collectives.h"

#include "reduce.h"

void small_reducescatter_take(const struct small_segment *segment, void *output, size_t first,
                              size_t length, size_t count, chorus_dtype dtype, chorus_op op,
                              double factor)
{
    if (length == 0)
        return;
    size_t element = chorus_dtype_size(dtype);
    const unsigned char *operands[NODE_MAX_LOCAL_RANKS];
    for (int r = 0; r < segment->local_size; r++)
        operands[r] = small_payload_of(segment, r, count * element) + first * element;
    reduce_ranks_scaled(output, operands, segment->local_size, length, dtype,
                        op == CHORUS_AVERAGE ? CHORUS_SUM : op, factor);
}
