/*
 * reference.h — deterministic test inputs and an independent reference for every collective.
 * Every rank can compute every other rank's input from (seed, rank, index), so each rank checks
 * its own result against a reference computed locally in double precision (floating types) or
 * exact modular arithmetic (integer types).
 */
#ifndef CHORUS_TEST_REFERENCE_H
#define CHORUS_TEST_REFERENCE_H

#include <chorus.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t test_random(uint64_t seed, uint64_t rank, uint64_t index);

/* Rank `rank`'s input element `index` for an allreduce with `op`: exactly representable in
 * `dtype`, and chosen so that products stay in range. */
void reference_fill(void *buffer, size_t count, chorus_dtype dtype, chorus_op op, uint64_t seed,
                    int rank);

/* Checks `result` against the reduction of every contributing rank's input (ranks where
 * contributes[r] is false add nothing; NULL means all contribute). Returns the index of the
 * first wrong element, or -1 when all are right; `why` gets a description. */
long reference_check_allreduce(const void *result, size_t count, chorus_dtype dtype, chorus_op op,
                               int nranks, const bool *contributes, uint64_t seed,
                               double prescale, double postscale, char *why, size_t why_size);

/* The same for elements first .. first + count - 1 of the reduction, which `result` holds from
 * its start (a reducescatter's block); `why` names elements by their index in the whole. */
long reference_check_reduced(const void *result, size_t first, size_t count, chorus_dtype dtype,
                             chorus_op op, int nranks, const bool *contributes, uint64_t seed,
                             double prescale, double postscale, char *why, size_t why_size);

/* Broadcast / allgather data: byte patterns from (seed, rank, index). */
void reference_fill_bytes(void *buffer, size_t bytes, uint64_t seed, int rank);
/* -1 when buffer equals rank `rank`'s bytes, else the first differing offset. */
long reference_check_bytes(const void *buffer, size_t bytes, uint64_t seed, int rank);

/* Decodes an element of `dtype` to double (independently of the library's code). */
double reference_decode(const void *buffer, size_t index, chorus_dtype dtype);

#endif
