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

/* Values per block of the INT8 and INT4 compressions, as chorus.h states it. */
#define REFERENCE_QUANTIZED_BLOCK 256

/* Rank `rank`'s float32 value `index` for quantized allreduces: magnitudes that change from
 * block to block and from rank to rank, as gradients' do. */
float reference_gradient(uint64_t seed, int rank, size_t index);

/* chorus.h's bound on the values of the block holding value `index` of an INT8 or INT4 (`bits`)
 * allreduce's `result` (count values) of the reference_gradient of `ranks` (NULL: 0 .. nranks
 * - 1) times `factor`: S/2 + |factor| * (s_1 + ... + s_n)/2 for nearest rounding, twice that
 * for stochastic, with S the scale of the result's block (its range over 2^bits - 1, or
 * 2^bits - 2 for stochastic rounding, which may leave the largest value a code short) and s_k
 * that of rank k's block; plus float32 rounding's slack. */
double reference_quantized_bound(const float *result, size_t count, size_t index,
                                 const int *ranks, int nranks, uint64_t seed, unsigned bits,
                                 bool stochastic, double factor);

/* The values the TOPK compression sends, as chorus.h states them: taken[i] for the first k
 * of values[0 .. count) sorted by magnitude, larger first, a nan larger than any number, ties
 * to the lower index (sorts, independently of the library's selection). */
void reference_top_k(bool *taken, const float *values, size_t count, size_t k);

/* FNV-1a of `count` floats' bytes: results that must be the same bits on every rank compare
 * by it. */
uint64_t reference_checksum(const float *values, size_t count);

#endif
