/*
 * packed_pipeline.h — a fused batch through the fusion buffer, in segments. The buffer has two
 * halves: while the collective reduces segment k in one, the copier unpacks segment k-1 from
 * the other and packs segment k+1 into it (double buffering). Without a copier the same steps
 * run one after another on the calling thread; a segment then still stays in cache from its
 * packing through its collective to its unpacking, instead of the whole batch going through
 * memory three times.
 */
#ifndef CHORUS_PACKED_PIPELINE_H
#define CHORUS_PACKED_PIPELINE_H

#include "../collectives/collectives.h"
#include "../core/common.h"
#include "copier.h"

/* A fused batch: its tensors as pieces of one logical buffer, and how they are packed. */
struct packed_batch {
    const struct allreduce_piece *pieces;
    size_t piece_count;
    size_t count;             /* elements of the batch */
    chorus_dtype wire_dtype;  /* of the fusion buffer */
    bool compressed;          /* float32 tensors travel as executor_wire_dtype (float16 or bfloat16) */
    double prescale;          /* applied while packing */
    float decompress_factor;  /* compressed: applied while unpacking (postscale, average) */
};

/* When the first segment was packed and the last one reduced. */
struct packed_times {
    double packed, reduced;
};

/* The collective: reduces `count` elements of `segment` in place on every rank. */
typedef chorus_status (*segment_reducer)(void *context, void *segment, size_t count);

/* Packs, reduces and unpacks `batch` in segments of at most `segment_elements`, through
 * `halves[0]` and `halves[1]` (each holding a segment; only the first is used when the batch is
 * one segment). `copier` may be NULL: the copies then run on the calling thread. Every rank
 * cuts the same segments, so the collectives line up. On failure the segments not yet reduced
 * are left alone; the copies already started are waited for. */
chorus_status packed_pipeline_run(const struct packed_batch *batch, struct copier *copier,
                                  void *const halves[2], size_t segment_elements,
                                  segment_reducer reduce, void *context,
                                  struct packed_times *times);

#endif
