/*
 * topk.c — see topk.h: the radix select of the k largest magnitudes, and the error feedback
 * folded into its two passes.
 */
#include "topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOPK_BUCKETS ((size_t)1 << 16)
/* Every nan's key: above infinity's (0x7f800000), the same for every payload. */
#define TOPK_NAN_KEY UINT32_C(0x7f800001)

size_t topk_count(size_t count, double ratio)
{
    if (count == 0)
        return 0;
    double k = ceil(ratio * (double)count);
    if (!(k >= 1))
        return 1;
    return k >= (double)count ? count : (size_t)k;
}

/* The magnitude's order as an unsigned integer: |x|'s bit pattern, nans all at one key. */
static uint32_t topk_key(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    bits &= UINT32_C(0x7fffffff);
    return bits > UINT32_C(0x7f800000) ? TOPK_NAN_KEY : bits;
}

/* The bucket of `histogram` from the top in which the k-th largest lies, given `above` values
 * already counted above the histogram's range; *above becomes the count above that bucket. */
static uint32_t topk_bucket(const uint32_t *histogram, size_t k, size_t *above)
{
    for (size_t bucket = TOPK_BUCKETS; bucket-- > 0;) {
        if (*above + histogram[bucket] >= k)
            return (uint32_t)bucket;
        *above += histogram[bucket];
    }
    return 0; /* not reached: the histograms hold at least k values */
}

/* Pairs [0, above) hold the values above the threshold's bucket, ascending; `chosen` (count
 * `taken`) the indices taken from within it, ascending: merged from the back into pairs[0, k). */
static void topk_merge_chosen(struct topk_pair *pairs, size_t above, const uint32_t *chosen,
                              size_t taken, const float *values)
{
    size_t to = above + taken;
    while (taken > 0) {
        if (above > 0 && pairs[above - 1].index > chosen[taken - 1]) {
            pairs[--to] = pairs[--above];
        } else {
            uint32_t index = chosen[--taken];
            pairs[--to] = (struct topk_pair){.index = index, .value = values[index]};
        }
    }
}

bool topk_compress(struct topk_pair *pairs, float *values, float *residual, size_t count, size_t k)
{
    uint32_t *histogram = calloc(TOPK_BUCKETS, sizeof *histogram);
    if (histogram == NULL)
        return false;
    /* Pass 1: the compensated values and the histogram of their keys' top halves. */
    for (size_t i = 0; i < count; i++) {
        if (residual != NULL)
            values[i] += residual[i];
        histogram[topk_key(values[i]) >> 16]++;
    }
    size_t above = 0;
    uint32_t high = topk_bucket(histogram, k, &above);
    uint32_t *candidates = malloc(((size_t)histogram[high] + 1) * sizeof *candidates);
    if (candidates == NULL) {
        free(histogram);
        return false;
    }
    /* Pass 2, in index order: what lies above the bucket is taken, what lies below is kept,
     * and the bucket's own values wait as candidates. */
    size_t sent = 0, waiting = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t top = topk_key(values[i]) >> 16;
        if (top > high)
            pairs[sent++] = (struct topk_pair){.index = (uint32_t)i, .value = values[i]};
        else if (top == high)
            candidates[waiting++] = (uint32_t)i;
        if (residual != NULL)
            residual[i] = top > high ? 0.0f : values[i];
    }
    /* Among the candidates, the low halves: the k-th largest key exactly; then those above it
     * and the first of those equal to it (ties to the lower index), in index order. */
    memset(histogram, 0, TOPK_BUCKETS * sizeof *histogram);
    for (size_t j = 0; j < waiting; j++)
        histogram[topk_key(values[candidates[j]]) & 0xffffu]++;
    uint32_t threshold = topk_bucket(histogram, k, &above) | high << 16;
    free(histogram);
    size_t ties = k - above, taken = 0;
    for (size_t j = 0; j < waiting; j++) {
        uint32_t key = topk_key(values[candidates[j]]);
        if (key > threshold || (key == threshold && ties > 0)) {
            ties -= key == threshold;
            candidates[taken++] = candidates[j];
            if (residual != NULL)
                residual[candidates[j]] = 0.0f;
        }
    }
    topk_merge_chosen(pairs, sent, candidates, taken, values);
    free(candidates);
    return true;
}
