/*
 * small_collectives.h — collectives over the host's small-message slots (small_segment.h), for
 * tensors of at most a slot's capacity on ranks that all share one host, run by the thread that
 * submits them (lib/lane). Each takes one phase of the slots: every rank stages its
 * contribution in its next slot (small_*_stage), publishes it, waits for every rank's, then
 * takes its result straight from the slots (small_*_take). The payload's layout in a slot is
 * the algorithm's; lib/lane adds the description of what each rank submitted to the same line,
 * so that the ranks check they agree in the same phase.
 *
 * Cost: one phase, one cache line per rank for a payload of at most SMALL_INLINE_BYTES, else
 * that line and the payload's lines. Every rank reads what it needs from every other rank's
 * slot (an allreduce: all of them), so the work per rank grows with the ranks: these are for
 * the sizes where a phase's latency, not bandwidth, sets the time.
 */
#ifndef CHORUS_SMALL_COLLECTIVES_H
#define CHORUS_SMALL_COLLECTIVES_H

#include "../core/common.h"
#include "../transport/small_segment.h"

/* Allreduce: each rank stages its `count` elements times `prescale` (rounded to the dtype, as
 * every allreduce applies a prescale factor); every rank reduces all ranks' slots in rank
 * order into `output`, times `factor` (a postscale, an average's division), so that every rank
 * gets the same bits. AVERAGE reduces as SUM, its division in `factor`. */
void small_allreduce_stage(struct small_segment *segment, const void *input, size_t count,
                           chorus_dtype dtype, double prescale);
void small_allreduce_take(const struct small_segment *segment, void *output, size_t count,
                          chorus_dtype dtype, chorus_op op, double factor);

/* Broadcast: `root` (a local rank) stages its `bytes`; every other rank copies them into
 * `output`. The other ranks stage nothing: their slot says only that they are there. */
void small_broadcast_stage(struct small_segment *segment, const void *input, size_t bytes);
void small_broadcast_take(const struct small_segment *segment, void *output, size_t bytes,
                          int root);

/* Allgather: each rank stages its rows (`bytes`); every rank copies every rank's rows, in rank
 * order, into `output`: rank r's are its slot's `count` rows of `row_bytes`. */
void small_allgather_stage(struct small_segment *segment, const void *input, size_t bytes);
void small_allgather_take(const struct small_segment *segment, void *output, size_t row_bytes);

/* Reducescatter: each rank stages its whole tensor as an allreduce does; rank r reduces
 * elements first .. first + length - 1 of every rank's slot, in rank order, into `output`,
 * times `factor`. */
void small_reducescatter_take(const struct small_segment *segment, void *output, size_t first,
                              size_t length, size_t count, chorus_dtype dtype, chorus_op op,
                              double factor);

#endif
