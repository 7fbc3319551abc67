/*
 * check.h — the benchmark's check of its results (check.c): inputs every rank can compute for
 * every other rank, and counts of wrong elements, for the #wrong column.
 */
#ifndef CHORUS_BENCH_CHECK_H
#define CHORUS_BENCH_CHECK_H

#include <chorus.h>
#include <stddef.h>
#include <stdint.h>

/* Rank `rank`'s input for a sum among `nranks`: small whole numbers from (seed, rank, index),
 * whose sums are exact in `dtype`. */
void check_fill(void *buffer, size_t count, chorus_dtype dtype, uint64_t seed, int rank,
                int nranks);
/* Wrong elements in `result`, which holds elements first .. first + count - 1 of the sum of
 * every rank's check_fill input with `seed`. */
long check_sum(const void *result, size_t first, size_t count, chorus_dtype dtype, int nranks,
               uint64_t seed);

/* Bytes from (seed, rank, index), and the count of bytes of `buffer` that differ from them. */
void check_fill_bytes(void *buffer, size_t bytes, uint64_t seed, int rank);
long check_bytes(const void *buffer, size_t bytes, uint64_t seed, int rank);

#endif
