/*
 * quantize.h — blockwise 8-bit and 4-bit quantization of float32, the kernels of the INT8 and
 * INT4 compressions (allreduce_quantized.c). The values are cut into blocks of
 * QUANTIZE_BLOCK_VALUES; each block keeps a float32 offset (its minimum) and a float32 scale
 * ((maximum - minimum) / (2^bits - 1)), and each value the code q in 0 .. 2^bits - 1 that
 * decodes to offset + q * scale.
 *
 * Rounding to the nearest code errs by at most scale / 2 per value; stochastic rounding rounds
 * up with the probability of the fraction left over, errs by less than scale, and is unbiased:
 * its random numbers are those of splitmix64 seeded with a stream (the caller's seed, tensor,
 * rank and phase mixed, quantize_stream) at the value's position, so that a run is reproduced
 * by its seed, whatever the threads do.
 *
 * Special values: a block of equal values (zeros among them) has scale 0 and comes back exact;
 * denormals are quantized like any other value. A block holding a nan or an infinity cannot be
 * placed on a scale: it is encoded with a nan offset and decodes to nan throughout, so that a
 * non-finite value propagates to its block of the result on every rank, as it would to its own
 * value in an uncompressed sum (a loss scaler that checks for non-finite gradients sees it).
 *
 * Layout of `count` quantized values: the blocks' (offset, scale) pairs, 8 bytes each, then
 * the codes: one byte per value (8 bits), or two values per byte, the first in the low nibble
 * (4 bits).
 */
#ifndef CHORUS_QUANTIZE_H
#define CHORUS_QUANTIZE_H

#include "../core/common.h"

/* Values per block. Measured on the development VM (2 cores, 2026-11-28, `bench/quantize-blocks`,
 * raw output in docs/results/quantize-blocks-2026-11-28.txt; heavy-tailed values whose scale
 * changes every 4096): the error grows with the block, as its extremes stretch the scale of
 * more values (rms error of 8 bits 0.77% of the data's rms at 64 values, 1.24% at 256, 1.95%
 * at 1024; of 4 bits 13%, 21%, 33%), while the header's share of the wire falls (8 B per
 * block: 1.125, 1.031, 1.008 B per value at 8 bits; 0.625, 0.531, 0.508 at 4 bits). 256 keeps
 * the bytes within 3% (8 bits) and 6% (4 bits) of the codes alone, 3.9x and 7.5x fewer than
 * float32, which the 3.3x and 5.5x speed-ups need with room for the conversion; error
 * feedback carries the larger error of 4 bits into the next step. Speed hardly depends on it
 * (nearest: encode 2.2-2.6 GB/s, decode 4.5-6.9 GB/s of float32 on one core). */
#define QUANTIZE_BLOCK_VALUES ((size_t)256)

enum quantize_rounding {
    QUANTIZE_NEAREST = 0,
    QUANTIZE_STOCHASTIC = 1,
};

/* How values are quantized: 8 or 4 bits, the rounding, and for stochastic rounding the stream
 * of random numbers (quantize_stream). */
struct quantize_scheme {
    unsigned bits;
    enum quantize_rounding rounding;
    uint64_t stream;
};

/* Bytes of `count` values quantized to `bits` bits (headers and codes). */
size_t quantize_bytes(size_t count, unsigned bits);

/* A stream of random numbers from a seed and what tells the calls apart (a tensor's name hash,
 * the rank, the phase of the algorithm): distinct inputs give unrelated streams. */
uint64_t quantize_stream(uint64_t seed, uint64_t a, uint64_t b);

/* Quantizes values[0 .. count) into `out` (quantize_bytes(count) bytes). `first_position` is
 * the position of values[0] in what the stream numbers (its tensor), for stochastic rounding.
 * Blocks start at values[0]. */
void quantize_encode(void *restrict out, const float *restrict values, size_t count,
                     const struct quantize_scheme *scheme, uint64_t first_position);

/* values[i] = the decoded value i of `in` (count values of `bits`). */
void quantize_decode(float *restrict values, const void *restrict in, size_t count,
                     unsigned bits);

/* sums[i] += the decoded value i (as float32, then added in double). */
void quantize_decode_add(double *restrict sums, const void *restrict in, size_t count,
                         unsigned bits);

/* quantize_encode with error feedback, in the same pass: quantizes the compensated values
 * c[i] = values[i] + residual[i] (float32) and leaves in residual[i] what that dropped, c[i]
 * minus its decoded value (float32), where that is finite; elsewhere (a block holding a nan or
 * an infinity) residual[i] is left as it was. `values` is not written. */
void quantize_encode_compensated(void *restrict out, const float *restrict values,
                                 float *restrict residual, size_t count,
                                 const struct quantize_scheme *scheme, uint64_t first_position);

/* A block's scale and offset, for tests and error bounds: block `block` of `in`. */
void quantize_block_header(const void *in, size_t block, float *offset, float *scale);

#endif
