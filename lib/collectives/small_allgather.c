/*
 * small_allgather.c — allgather through the host's small-message slots, in one phase: every
 * rank stages its rows, then copies every rank's rows, in rank order, out of their slots.
 *
 * Cost: one phase; each rank reads every other rank's rows. Example at 3 ranks with 2, 0 and 1
 * rows: every rank's output is rank 0's two rows, then rank 2's row.
 */
#include "small_collectives.h"

#include <string.h>

void small_allgather_stage(struct small_segment *segment, const void *input, size_t bytes)
{
    if (bytes != 0)
        memcpy(small_next_payload(segment, bytes), input, bytes);
}

void small_allgather_take(const struct small_segment *segment, void *output, size_t row_bytes)
{
    unsigned char *at = output;
    for (int r = 0; r < segment->local_size; r++) {
        size_t bytes = (size_t)small_line_of(segment, r)->count * row_bytes;
        if (bytes != 0)
            memcpy(at, small_payload_of(segment, r, bytes), bytes);
        at += bytes;
    }
}
