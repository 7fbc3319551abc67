/*
 * kernel_bench.h — what the benchmarks of one kernel (quantize_blocks.c, topk_select.c) share:
 * a reproducible stream of random numbers (xorshift64), normal values from it, and a monotonic
 * clock. Header-only: each is built on its own against its kernel's source by a script.
 */
#ifndef CHORUS_KERNEL_BENCH_H
#define CHORUS_KERNEL_BENCH_H

#include <math.h>
#include <stdint.h>
#include <time.h>

static uint64_t kernel_bench_state = 88172645463325252ull;

/* Uniform in (0, 1), the same sequence in every run. */
static inline double uniform(void)
{
    kernel_bench_state ^= kernel_bench_state << 13;
    kernel_bench_state ^= kernel_bench_state >> 7;
    kernel_bench_state ^= kernel_bench_state << 17;
    return ((double)(kernel_bench_state >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal (Box-Muller). */
static inline double normal(void)
{
    return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
}

static inline double seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

#endif
