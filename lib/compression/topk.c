/*
 * topk.c — see topk.h: the radix select of the k largest magnitudes, and the error feedback
 * folded into its first and last passes.
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

bool topk_compress(struct topk_pair *pairs, float *values, float *residual, size_t count,
                   size_t k)
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
    /* Pass 2: within that bucket, the low halves: the k-th largest key exactly. */
    memset(histogram, 0, TOPK_BUCKETS * sizeof *histogram);
    for (size_t i = 0; i < count; i++) {
        uint32_t key = topk_key(values[i]);
        if (key >> 16 == high)
            histogram[key & 0xffffu]++;
    }
    uint32_t threshold = high << 16 | topk_bucket(histogram, k, &above);
    free(histogram);
    /* Pass 3, in index order: every key above the threshold, and the first k - above of those
     * equal to it (ties to the lower index). */
    size_t ties = k - above, taken = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t key = topk_key(values[i]);
        bool take = key > threshold || (key == threshold && ties > 0);
        if (take) {
            ties -= key == threshold;
            pairs[taken++] = (struct topk_pair){.index = (uint32_t)i, .value = values[i]};
        }
        if (residual != NULL)
            residual[i] = take ? 0.0f : values[i];
    }
    return true;
}
