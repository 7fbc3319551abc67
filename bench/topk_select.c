/*
 * topk_select.c — what the TOPK compression's selection (lib/compression/topk.c, a radix
 * select) costs against the obvious ways to pick a tensor's k largest magnitudes with the same
 * answer (ties to the lower index): sorting every index by magnitude (qsort), and a quickselect
 * (nth_element's partitioning on (magnitude, index) keys, random pivots) followed by a sort of
 * the k chosen indices. Built by bench/topk-select against topk.c; prints, per round, the
 * seconds of each on COUNT values (ResNet-50's 25.6M gradients) at k = 1% and 0.1%, the
 * rounds interleaved, then the medians and their ratios. Every method's indices are compared
 * with the radix select's: a difference is reported and fails the run.
 *
 * The data stands in for gradients: normal values whose scale changes every 4096 values over
 * four decades, as tensors' and layers' gradients do.
 */
#include "kernel_bench.h"
#include "topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { COUNT = 25557032, ROUNDS = 3, METHODS = 3 };

/* (magnitude, index) as one key, larger first: the magnitude's bits, then the index inverted
 * so that the lower index is the larger key. No nans in this data. */
static uint64_t key_of(const float *values, size_t i)
{
    uint32_t bits;
    memcpy(&bits, &values[i], sizeof bits);
    return (uint64_t)(bits & 0x7fffffffu) << 32 | (uint32_t) ~(uint32_t)i;
}

static const float *sorted_values;
static int by_key(const void *a, const void *b)
{
    uint64_t x = key_of(sorted_values, *(const uint32_t *)a);
    uint64_t y = key_of(sorted_values, *(const uint32_t *)b);
    return x > y ? -1 : x < y ? 1 : 0;
}

static int ascending(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorting: every index by key, the first k, then ascending. */
static void by_sorting(uint32_t *chosen, const float *values, size_t count, size_t k,
                       uint32_t *order)
{
    for (size_t i = 0; i < count; i++)
        order[i] = (uint32_t)i;
    sorted_values = values;
    qsort(order, count, sizeof *order, by_key);
    memcpy(chosen, order, k * sizeof *chosen);
    qsort(chosen, k, sizeof *chosen, ascending);
}

/* Quickselect: partitions the keys until the k largest are first, then sorts their indices. */
static void by_quickselect(uint32_t *chosen, const float *values, size_t count, size_t k,
                           uint64_t *keys)
{
    for (size_t i = 0; i < count; i++)
        keys[i] = key_of(values, i);
    size_t low = 0, high = count; /* the k-th largest lies in [low, high) */
    while (high - low > 1) {
        uint64_t pivot = keys[low + (size_t)(uniform() * (double)(high - low))];
        size_t i = low, j = high;
        /* Three-way split: above the pivot, equal (one key: the keys are distinct), below. */
        for (size_t at = low; at < j;) {
            if (keys[at] > pivot) {
                uint64_t t = keys[at];
                keys[at++] = keys[i];
                keys[i++] = t;
            } else if (keys[at] < pivot) {
                uint64_t t = keys[at];
                keys[at] = keys[--j];
                keys[j] = t;
            } else {
                at++;
            }
        }
        if (k <= i)
            high = i;
        else if (k > j)
            low = j;
        else
            break;
    }
    for (size_t i = 0; i < k; i++)
        chosen[i] = ~(uint32_t)keys[i];
    qsort(chosen, k, sizeof *chosen, ascending);
}

static int by_seconds(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    float *data = malloc(COUNT * sizeof *data), *work = malloc(COUNT * sizeof *work);
    uint32_t *order = malloc(COUNT * sizeof *order);
    uint64_t *keys = malloc(COUNT * sizeof *keys);
    size_t largest_k = COUNT / 100 + 1;
    struct topk_pair *pairs = malloc(largest_k * sizeof *pairs);
    uint32_t *chosen = malloc(largest_k * sizeof *chosen);
    if (!data || !work || !order || !keys || !pairs || !chosen)
        return 1;
    double scale = 1;
    for (size_t i = 0; i < COUNT; i++) {
        if (i % 4096 == 0)
            scale = pow(10, -4 * uniform());
        data[i] = (float)(scale * normal());
    }
    static const char *const names[METHODS] = {"radix select (topk.c)", "qsort of indices",
                                               "quickselect + sort of k"};
    static const double ratios[] = {0.01, 0.001};
    int failed = 0;
    printf("%zu float32 values, %d rounds interleaved\n", (size_t)COUNT, ROUNDS);
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++) {
        size_t k = topk_count(COUNT, ratios[r]);
        double times[METHODS][ROUNDS];
        for (int round = 0; round < ROUNDS; round++) {
            memcpy(work, data, COUNT * sizeof *data);
            double start = seconds();
            topk_compress(pairs, work, NULL, COUNT, k);
            times[0][round] = seconds() - start;
            start = seconds();
            by_sorting(chosen, data, COUNT, k, order);
            times[1][round] = seconds() - start;
            for (size_t i = 0; i < k; i++)
                failed |= chosen[i] != pairs[i].index;
            start = seconds();
            by_quickselect(chosen, data, COUNT, k, keys);
            times[2][round] = seconds() - start;
            for (size_t i = 0; i < k; i++)
                failed |= chosen[i] != pairs[i].index;
            printf("ratio %g k %zu round %d: %.3f s radix, %.3f s sort, %.3f s quickselect\n",
                   ratios[r], k, round, times[0][round], times[1][round], times[2][round]);
        }
        double medians[METHODS];
        for (int m = 0; m < METHODS; m++) {
            qsort(times[m], ROUNDS, sizeof times[m][0], by_seconds);
            medians[m] = times[m][ROUNDS / 2];
        }
        for (int m = 0; m < METHODS; m++)
            printf("ratio %g: %-24s median %.3f s (%.1f x the radix select's time)\n", ratios[r],
                   names[m], medians[m], medians[m] / medians[0]);
    }
    if (failed)
        printf("FAILED: the methods chose different indices\n");
    return failed;
}
