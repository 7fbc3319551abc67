/*
 * topk.h — top-k selection by magnitude, the kernel of the TOPK compression
 * (allreduce_topk.c): which k values of a tensor a rank sends, and what it keeps as its error
 * feedback.
 *
 * Order: by magnitude |x|, larger first; among equal magnitudes (3 and -3, 0 and -0) the lower
 * index first, so that every run picks the same values. A nan is larger than any number,
 * infinities included, and equal to any other nan whatever its payload: a value that overflowed
 * is sent, and reaches every rank's result as it would in an uncompressed sum (a loss scaler
 * that checks for non-finite gradients sees it).
 *
 * Method: a radix select on the magnitudes' bit patterns (for non-negative floats, the order of
 * the patterns as unsigned integers is the order of the values). A histogram of the patterns'
 * top 16 bits finds the bucket that holds the k-th largest magnitude; a second pass in index
 * order takes every value above that bucket and lists the bucket's own as candidates; a
 * histogram of the candidates' low 16 bits finds the k-th largest exactly, and the candidates
 * above it and the first of those equal to it join the values taken (a merge, both lists
 * ascending). Two passes over the values whatever they are (no pivots, no worst case), and
 * the indices come out ascending, as the exchange wants them.
 * On 25.6M values (ResNet-50's gradients), k = 1%, on the development VM (2 cores, shared,
 * 2026-11-28, `bench/topk-select`, raw output in docs/results/topk-select-2026-11-28.txt):
 * 0.12 s (a third full pass instead of the candidates took 0.16 s), where sorting the indices by
 * magnitude (qsort) takes 20 s (160x) and a quickselect on (magnitude, index) keys followed by
 * a sort of the k chosen 0.24-0.64 s (2-5x; its random pivots make it vary).
 */
#ifndef CHORUS_TOPK_H
#define CHORUS_TOPK_H

#include "../core/common.h"

/* One value a rank sends: its index in the tensor and the value (the wire's 8 bytes). */
struct topk_pair {
    uint32_t index;
    float value;
};
static_assert(sizeof(struct topk_pair) == 8, "a top-k pair is 8 bytes on the wire");

/* How a tensor is sparsified: k values of it (the residual, if any, is the allreduce's
 * error_feedback). */
struct topk_scheme {
    size_t k;
};

/* The values a rank sends of `count`: max(1, ceil(ratio * count)), at most count (0 of 0). */
size_t topk_count(size_t count, double ratio);

/* The k (1 <= k <= count, count < 2^32) values of largest magnitude of values[0 .. count) into
 * pairs[0 .. k), ascending by index. With a residual, values[i] += residual[i] first (float32)
 * and the selection is of those sums; then residual[i] = values[i], except 0 where a value was
 * taken. `values` keeps the sums. False when out of memory (256 KiB of histogram, 4 bytes per
 * candidate), the residual then untouched. */
bool topk_compress(struct topk_pair *pairs, float *values, float *residual, size_t count, size_t k);

#endif
