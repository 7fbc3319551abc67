/*
 * small_allreduce.c — allreduce through the host's small-message slots, in one phase: every
 * rank stages its contribution, then reduces all of them itself, in rank order.
 *
 * Cost: one phase; each rank reads every other rank's count elements (for 8 bytes: one cache
 * line from each) and combines p contributions. Example at 3 ranks, x_r staged by rank r:
 * every rank computes ((x_0 + x_1) + x_2) * factor, the same bits on all three.
 */
#include "small_collectives.h"

#include "reduce.h"

#include <string.h>

void small_allreduce_stage(struct small_segment *segment, const void *input, size_t count,
                           chorus_dtype dtype, double prescale)
{
    size_t bytes = count * chorus_dtype_size(dtype);
    unsigned char *slot = small_next_payload(segment, bytes);
    if (bytes != 0)
        memcpy(slot, input, bytes);
    reduce_scale_buffer(slot, count, dtype, prescale);
}

void small_allreduce_take(const struct small_segment *segment, void *output, size_t count,
                          chorus_dtype dtype, chorus_op op, double factor)
{
    small_reducescatter_take(segment, output, 0, count, count, dtype, op, factor);
}
