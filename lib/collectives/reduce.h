/*
 * reduce.h — elementwise kernels of the collectives: combine two buffers with a reduction
 * operator, scale by a factor, fill with an operator's identity. float16 and bfloat16 are
 * combined in float32 and rounded once per combination (round to nearest even).
 */
#ifndef CHORUS_REDUCE_H
#define CHORUS_REDUCE_H

#include "../core/common.h"
#include "../core/dtype.h"

/* accumulator[i] = accumulator[i] (op) operand[i] for i < count. AVERAGE combines as SUM; the
 * division is a separate scale step. The two buffers must not overlap. */
void reduce_into(void *restrict accumulator, const void *restrict operand, size_t count,
                 chorus_dtype dtype, chorus_op op);

/* result[i] = a[i] (op) b[i]: one pass where reduce_into would need a copy first. None of the
 * three may overlap. */
void reduce_pair(void *restrict result, const void *restrict a, const void *restrict b,
                 size_t count, chorus_dtype dtype, chorus_op op);

/* The same, then multiplied by `factor` (a postscale or an average's division) in the same pass
 * where the dtype and op allow it (float32 and float64 sums), else in a second pass; the result
 * is the same either way. */
void reduce_into_scaled(void *restrict accumulator, const void *restrict operand, size_t count,
                        chorus_dtype dtype, chorus_op op, double factor);
void reduce_pair_scaled(void *restrict result, const void *restrict a, const void *restrict b,
                        size_t count, chorus_dtype dtype, chorus_op op, double factor);

/* result = operands[0] (op) operands[1] (op) ... (op) operands[ranks - 1], in that order, times
 * `factor`, applied by the last combination: ranks' contributions reduced in rank order, so that
 * whoever reduces them gets the same bits. `result` overlaps none of the operands. */
void reduce_ranks_scaled(void *restrict result, const unsigned char *const *operands, int ranks,
                         size_t count, chorus_dtype dtype, chorus_op op, double factor);
/* The same, rank r's operand at first + r * stride (no array of pointers to allocate). */
void reduce_strided_scaled(void *restrict result, const void *first, size_t stride, int ranks,
                           size_t count, chorus_dtype dtype, chorus_op op, double factor);

/* buffer[i] *= factor. Integers are scaled in double and rounded to the nearest integer
 * (halfway away from zero), then wrapped to the dtype. */
void reduce_scale_buffer(void *buffer, size_t count, chorus_dtype dtype, double factor);

/* Fills with the identity of `op` (0 for sum/average, 1 for product, the largest value for min,
 * the smallest for max), so that a rank without data leaves a reduction unchanged. */
void reduce_fill_identity(void *buffer, size_t count, chorus_dtype dtype, chorus_op op);

/* float32 <-> 16-bit wire formats for compressed allreduces: to[i] = round16(from[i] * factor)
 * and to[i] = from[i] * factor. `wire` is CHORUS_FLOAT16 or CHORUS_BFLOAT16. */
void reduce_compress_floats(uint16_t *restrict to, const float *restrict from, size_t count,
                     chorus_dtype wire, float factor);
void reduce_decompress_floats(float *restrict to, const uint16_t *restrict from, size_t count,
                       chorus_dtype wire, float factor);

#endif
