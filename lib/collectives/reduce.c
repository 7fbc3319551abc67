/*
 * reduce.c — the reduction loops. Each (dtype, op) pair is its own loop without branches on the
 * element, over restrict pointers, so that GCC vectorizes it at -O2 -ftree-vectorize (check with
 * -fopt-info-vec-optimized). Signed integer sums and products go through unsigned arithmetic:
 * they wrap instead of being undefined.
 */
#include "reduce.h"

#include <math.h>
#include <string.h>

/* Each loop is built for AVX2 and for the baseline (SSE2), and the loader picks one for the
 * machine (GCC function multiversioning). The hierarchical allreduce reduces chunks that sit in
 * the L2 cache, where the wider vectors pay. Not under sanitizers: the resolvers run before
 * their runtimes start, and crash. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                        \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

#define SUM_OF(a, b) ((a) + (b))
#define PRODUCT_OF(a, b) ((a) * (b))
#define MIN_OF(a, b) ((b) < (a) ? (b) : (a))
#define MAX_OF(a, b) ((b) > (a) ? (b) : (a))

/* A loop for a dtype whose arithmetic type is `type`, computed as `compute` (an unsigned type
 * for wrapping integer sums and products). */
#define DEFINE_LOOP(function, type, compute, COMBINE)                                            \
    VECTOR_CLONES                                                                                \
    static void function(type *restrict accumulator, const type *restrict operand, size_t count) \
    {                                                                                            \
        for (size_t i = 0; i < count; i++)                                                       \
            accumulator[i] = (type)COMBINE((compute)accumulator[i], (compute)operand[i]);        \
    }

/* The three-operand form: result = a (op) b. */
#define DEFINE_PAIR_LOOP(function, type, compute, COMBINE)                                       \
    VECTOR_CLONES                                                                                \
    static void function(type *restrict result, const type *restrict a,                          \
                         const type *restrict b, size_t count)                                   \
    {                                                                                            \
        for (size_t i = 0; i < count; i++)                                                       \
            result[i] = (type)COMBINE((compute)a[i], (compute)b[i]);                             \
    }

#define DEFINE_LOOPS(suffix, type, wrapping)                                                     \
    DEFINE_LOOP(sum_##suffix, type, wrapping, SUM_OF)                                            \
    DEFINE_LOOP(product_##suffix, type, wrapping, PRODUCT_OF)                                    \
    DEFINE_LOOP(min_##suffix, type, type, MIN_OF)                                                \
    DEFINE_LOOP(max_##suffix, type, type, MAX_OF)                                                \
    DEFINE_PAIR_LOOP(pair_sum_##suffix, type, wrapping, SUM_OF)                                  \
    DEFINE_PAIR_LOOP(pair_product_##suffix, type, wrapping, PRODUCT_OF)                          \
    DEFINE_PAIR_LOOP(pair_min_##suffix, type, type, MIN_OF)                                      \
    DEFINE_PAIR_LOOP(pair_max_##suffix, type, type, MAX_OF)

DEFINE_LOOPS(u8, uint8_t, uint32_t)
DEFINE_LOOPS(i8, int8_t, uint32_t)
DEFINE_LOOPS(i16, int16_t, uint32_t)
DEFINE_LOOPS(u16, uint16_t, uint32_t)
DEFINE_LOOPS(i32, int32_t, uint32_t)
DEFINE_LOOPS(i64, int64_t, uint64_t)
DEFINE_LOOPS(f32, float, float)
DEFINE_LOOPS(f64, double, double)

#define DEFINE_HALF_LOOP(function, to_float, from_float, COMBINE)                                \
    static void function(uint16_t *restrict accumulator, const uint16_t *restrict operand,       \
                         size_t count)                                                           \
    {                                                                                            \
        for (size_t i = 0; i < count; i++)                                                       \
            accumulator[i] =                                                                     \
                from_float(COMBINE(to_float(accumulator[i]), to_float(operand[i])));             \
    }

#define DEFINE_HALF_PAIR_LOOP(function, to_float, from_float, COMBINE)                           \
    static void function(uint16_t *restrict result, const uint16_t *restrict a,                  \
                         const uint16_t *restrict b, size_t count)                               \
    {                                                                                            \
        for (size_t i = 0; i < count; i++)                                                       \
            result[i] = from_float(COMBINE(to_float(a[i]), to_float(b[i])));                     \
    }

#define DEFINE_HALF_LOOPS(suffix, to_float, from_float)                                          \
    DEFINE_HALF_LOOP(sum_##suffix, to_float, from_float, SUM_OF)                                 \
    DEFINE_HALF_LOOP(product_##suffix, to_float, from_float, PRODUCT_OF)                         \
    DEFINE_HALF_LOOP(min_##suffix, to_float, from_float, MIN_OF)                                 \
    DEFINE_HALF_LOOP(max_##suffix, to_float, from_float, MAX_OF)                                 \
    DEFINE_HALF_PAIR_LOOP(pair_sum_##suffix, to_float, from_float, SUM_OF)                       \
    DEFINE_HALF_PAIR_LOOP(pair_product_##suffix, to_float, from_float, PRODUCT_OF)               \
    DEFINE_HALF_PAIR_LOOP(pair_min_##suffix, to_float, from_float, MIN_OF)                       \
    DEFINE_HALF_PAIR_LOOP(pair_max_##suffix, to_float, from_float, MAX_OF)

DEFINE_HALF_LOOPS(f16, half_to_float, float_to_half)
DEFINE_HALF_LOOPS(bf16, bfloat16_to_float, float_to_bfloat16)

/* Every dtype with the suffix of its loops. The tables below have a row for each, and each row
 * names a loop for each op: the asserts check that no dtype or op is left without one (a missing
 * entry would be a NULL call at run time). */
#define REDUCTION_DTYPES(X)                                                                      \
    X(CHORUS_UINT8, u8)                                                                          \
    X(CHORUS_INT8, i8)                                                                           \
    X(CHORUS_INT32, i32)                                                                         \
    X(CHORUS_INT64, i64)                                                                         \
    X(CHORUS_FLOAT16, f16)                                                                       \
    X(CHORUS_BFLOAT16, bf16)                                                                     \
    X(CHORUS_FLOAT32, f32)                                                                       \
    X(CHORUS_FLOAT64, f64)                                                                       \
    X(CHORUS_INT16, i16)                                                                         \
    X(CHORUS_UINT16, u16)
#define DTYPE_BIT(dtype, suffix) | (1u << (dtype))
/* bool has its own rows: on bytes that are 0 or 1, or is max and and is min. */
static_assert((0u REDUCTION_DTYPES(DTYPE_BIT) | (1u << CHORUS_BOOL)) ==
                  (1u << CHORUS_DTYPE_COUNT) - 1,
              "a row of reduction loops for every dtype");
/* ADASUM has no elementwise loop: allreduce_adasum.c combines whole vectors. */
static_assert(CHORUS_OP_COUNT == 6 && CHORUS_SUM == 0 && CHORUS_AVERAGE == 1 && CHORUS_MIN == 2 &&
                  CHORUS_MAX == 3 && CHORUS_PRODUCT == 4 && CHORUS_ADASUM == 5,
              "LOOP_ROW and PAIR_ROW name a loop for every elementwise op");

typedef void (*reduce_loop)(void *restrict, const void *restrict, size_t);

#define LOOP_ROW(suffix)                                                                         \
    {                                                                                            \
        [CHORUS_SUM] = (reduce_loop)sum_##suffix, [CHORUS_AVERAGE] = (reduce_loop)sum_##suffix,  \
        [CHORUS_MIN] = (reduce_loop)min_##suffix, [CHORUS_MAX] = (reduce_loop)max_##suffix,      \
        [CHORUS_PRODUCT] = (reduce_loop)product_##suffix,                                        \
    }

#define LOOP_ENTRY(dtype, suffix) [dtype] = LOOP_ROW(suffix),
static const reduce_loop reduce_loops[CHORUS_DTYPE_COUNT][CHORUS_OP_COUNT] = {
    REDUCTION_DTYPES(LOOP_ENTRY)[CHORUS_BOOL] = {
        [CHORUS_SUM] = (reduce_loop)max_u8, [CHORUS_AVERAGE] = (reduce_loop)max_u8,
        [CHORUS_MIN] = (reduce_loop)min_u8, [CHORUS_MAX] = (reduce_loop)max_u8,
        [CHORUS_PRODUCT] = (reduce_loop)min_u8}};

void reduce_into(void *restrict accumulator, const void *restrict operand, size_t count,
                 chorus_dtype dtype, chorus_op op)
{
    if (count == 0)
        return;
    reduce_loops[dtype][op](accumulator, operand, count);
}

typedef void (*pair_loop)(void *restrict, const void *restrict, const void *restrict, size_t);

#define PAIR_ROW(suffix)                                                                         \
    {                                                                                            \
        [CHORUS_SUM] = (pair_loop)pair_sum_##suffix,                                             \
        [CHORUS_AVERAGE] = (pair_loop)pair_sum_##suffix,                                         \
        [CHORUS_MIN] = (pair_loop)pair_min_##suffix, [CHORUS_MAX] = (pair_loop)pair_max_##suffix, \
        [CHORUS_PRODUCT] = (pair_loop)pair_product_##suffix,                                     \
    }

#define PAIR_ENTRY(dtype, suffix) [dtype] = PAIR_ROW(suffix),
static const pair_loop pair_loops[CHORUS_DTYPE_COUNT][CHORUS_OP_COUNT] = {
    REDUCTION_DTYPES(PAIR_ENTRY)[CHORUS_BOOL] = {
        [CHORUS_SUM] = (pair_loop)pair_max_u8, [CHORUS_AVERAGE] = (pair_loop)pair_max_u8,
        [CHORUS_MIN] = (pair_loop)pair_min_u8, [CHORUS_MAX] = (pair_loop)pair_max_u8,
        [CHORUS_PRODUCT] = (pair_loop)pair_min_u8}};

void reduce_pair(void *restrict result, const void *restrict a, const void *restrict b,
                 size_t count, chorus_dtype dtype, chorus_op op)
{
    if (count == 0)
        return;
    pair_loops[dtype][op](result, a, b, count);
}

/* Sums scaled in the same pass: each sum is rounded to the dtype before it is multiplied, as a
 * separate reduce_scale_buffer pass would do, so the results are bitwise the same. The product
 * is taken in double and rounded once (see reduce_scale_buffer). */
#define DEFINE_SCALED_LOOPS(suffix, type)                                                        \
    VECTOR_CLONES                                                                                \
    static void sum_scaled_##suffix(type *restrict accumulator, const type *restrict operand,    \
                                    size_t count, double factor)                                 \
    {                                                                                            \
        for (size_t i = 0; i < count; i++) {                                                     \
            type sum = accumulator[i] + operand[i];                                              \
            accumulator[i] = (type)((double)sum * factor);                                       \
        }                                                                                        \
    }                                                                                            \
    VECTOR_CLONES                                                                                \
    static void pair_sum_scaled_##suffix(type *restrict result, const type *restrict a,          \
                                         const type *restrict b, size_t count, double factor)    \
    {                                                                                            \
        for (size_t i = 0; i < count; i++) {                                                     \
            type sum = a[i] + b[i];                                                              \
            result[i] = (type)((double)sum * factor);                                            \
        }                                                                                        \
    }

DEFINE_SCALED_LOOPS(f32, float)
DEFINE_SCALED_LOOPS(f64, double)

static bool sums_floats(chorus_dtype dtype, chorus_op op)
{
    return (op == CHORUS_SUM || op == CHORUS_AVERAGE) &&
           (dtype == CHORUS_FLOAT32 || dtype == CHORUS_FLOAT64);
}

void reduce_into_scaled(void *restrict accumulator, const void *restrict operand, size_t count,
                        chorus_dtype dtype, chorus_op op, double factor)
{
    if (factor == 1.0 || count == 0 || !sums_floats(dtype, op)) {
        reduce_into(accumulator, operand, count, dtype, op);
        reduce_scale_buffer(accumulator, count, dtype, factor);
    } else if (dtype == CHORUS_FLOAT32) {
        sum_scaled_f32(accumulator, operand, count, factor);
    } else {
        sum_scaled_f64(accumulator, operand, count, factor);
    }
}

void reduce_pair_scaled(void *restrict result, const void *restrict a, const void *restrict b,
                        size_t count, chorus_dtype dtype, chorus_op op, double factor)
{
    if (factor == 1.0 || count == 0 || !sums_floats(dtype, op)) {
        reduce_pair(result, a, b, count, dtype, op);
        reduce_scale_buffer(result, count, dtype, factor);
    } else if (dtype == CHORUS_FLOAT32) {
        pair_sum_scaled_f32(result, a, b, count, factor);
    } else {
        pair_sum_scaled_f64(result, a, b, count, factor);
    }
}

/* Rank r's operand: operands[r], or without the array first + r * stride. */
static const unsigned char *operand_of(const unsigned char *const *operands,
                                       const unsigned char *first, size_t stride, int r)
{
    return operands != NULL ? operands[r] : first + (size_t)r * stride;
}

/* reduce_ranks_scaled and reduce_strided_scaled: the operands by array or by stride. */
static void reduce_in_rank_order(void *restrict result, const unsigned char *const *operands,
                                 const unsigned char *first, size_t stride, int ranks,
                                 size_t count, chorus_dtype dtype, chorus_op op, double factor)
{
    const unsigned char *a = operand_of(operands, first, stride, 0);
    if (ranks == 1) {
        memcpy(result, a, count * chorus_dtype_size(dtype));
        reduce_scale_buffer(result, count, dtype, factor);
        return;
    }
    const unsigned char *b = operand_of(operands, first, stride, 1);
    if (ranks == 2) {
        reduce_pair_scaled(result, a, b, count, dtype, op, factor);
        return;
    }
    reduce_pair(result, a, b, count, dtype, op);
    for (int r = 2; r + 1 < ranks; r++)
        reduce_into(result, operand_of(operands, first, stride, r), count, dtype, op);
    reduce_into_scaled(result, operand_of(operands, first, stride, ranks - 1), count, dtype, op,
                       factor);
}

void reduce_ranks_scaled(void *restrict result, const unsigned char *const *operands, int ranks,
                         size_t count, chorus_dtype dtype, chorus_op op, double factor)
{
    reduce_in_rank_order(result, operands, NULL, 0, ranks, count, dtype, op, factor);
}

void reduce_strided_scaled(void *restrict result, const void *first, size_t stride, int ranks,
                           size_t count, chorus_dtype dtype, chorus_op op, double factor)
{
    reduce_in_rank_order(result, NULL, first, stride, ranks, count, dtype, op, factor);
}

/* The whole number n when `factor` is exactly the double nearest 1/n (an average's factor),
 * else 0. Integers are then divided by n exactly instead of multiplied by a rounded 1/n. */
static int64_t reciprocal_divisor(double factor)
{
    if (!(factor > 0 && factor < 1))
        return 0;
    double inverse = 1.0 / factor;
    if (!(inverse < 0x1p62))
        return 0;
    int64_t n = (int64_t)llround(inverse);
    return n >= 2 && 1.0 / (double)n == factor ? n : 0;
}

/* value / n rounded to the nearest integer, halves away from zero, exact over int64's whole
 * range (a sum that fits in int64 averages exactly, where a round trip through double loses
 * the low bits from 2^53). */
static int64_t divide_rounded(int64_t value, int64_t n)
{
    int64_t quotient = value / n, remainder = value % n;
    uint64_t twice = 2 * (uint64_t)(remainder < 0 ? -remainder : remainder);
    if (twice >= (uint64_t)n)
        quotient += value < 0 ? -1 : 1;
    return quotient;
}

/* value * factor rounded to the nearest integer (halves away from zero), exactly: the factor
 * is m * 2^e with a 53-bit whole m, so value * m fits in 128 bits and the rounding is one
 * shift. Results beyond int64 wrap, as sums of integers do. */
static int64_t multiply_rounded(int64_t value, double factor)
{
    if (!isfinite(factor) || factor == 0 || value == 0)
        return 0;
    int exponent = 0;
    __int128 mantissa = (__int128)ldexp(frexp(factor, &exponent), 53);
    exponent -= 53;
    __int128 product = (__int128)value * mantissa;
    if (exponent >= 0)
        return exponent >= 64 ? 0 : (int64_t)(uint64_t)((unsigned __int128)product << exponent);
    if (exponent < -120)
        return 0;
    unsigned __int128 magnitude = (unsigned __int128)(product < 0 ? -product : product);
    unsigned __int128 rounded = (magnitude + ((unsigned __int128)1 << (-exponent - 1))) >> -exponent;
    uint64_t low = (uint64_t)rounded;
    return (int64_t)(product < 0 ? (uint64_t)0 - low : low);
}

#define SCALE_INTEGERS(type, wrapping)                                                           \
    do {                                                                                         \
        type *values = buffer;                                                                   \
        int64_t divisor = reciprocal_divisor(factor);                                            \
        for (size_t i = 0; i < count; i++)                                                       \
            values[i] = (type)(wrapping)(divisor != 0                                           \
                                             ? divide_rounded((int64_t)values[i], divisor)       \
                                             : multiply_rounded((int64_t)values[i], factor));    \
    } while (0)

void reduce_scale_buffer(void *buffer, size_t count, chorus_dtype dtype, double factor)
{
    if (factor == 1.0 || count == 0)
        return;
    switch (dtype) {
    case CHORUS_UINT8:
        SCALE_INTEGERS(uint8_t, uint64_t);
        return;
    case CHORUS_INT8:
        SCALE_INTEGERS(int8_t, uint64_t);
        return;
    case CHORUS_INT16:
        SCALE_INTEGERS(int16_t, uint64_t);
        return;
    case CHORUS_UINT16:
        SCALE_INTEGERS(uint16_t, uint64_t);
        return;
    case CHORUS_BOOL: /* no scaling: the API refuses averages and scale factors of bools */
        return;
    case CHORUS_INT32:
        SCALE_INTEGERS(int32_t, uint64_t);
        return;
    case CHORUS_INT64:
        SCALE_INTEGERS(int64_t, uint64_t);
        return;
    case CHORUS_FLOAT16: {
        uint16_t *values = buffer;
        float f = (float)factor;
        for (size_t i = 0; i < count; i++)
            values[i] = float_to_half(half_to_float(values[i]) * f);
        return;
    }
    case CHORUS_BFLOAT16: {
        uint16_t *values = buffer;
        float f = (float)factor;
        for (size_t i = 0; i < count; i++)
            values[i] = float_to_bfloat16(bfloat16_to_float(values[i]) * f);
        return;
    }
    case CHORUS_FLOAT32: {
        /* In double, rounded once: the factor itself (1/3 for an average of 3 ranks) is not
         * rounded to float first, so that x * (1/n) is x / n correctly rounded, as Horovod's
         * scaling (float times double) gives. */
        float *values = buffer;
        for (size_t i = 0; i < count; i++)
            values[i] = (float)((double)values[i] * factor);
        return;
    }
    case CHORUS_FLOAT64: {
        double *values = buffer;
        for (size_t i = 0; i < count; i++)
            values[i] *= factor;
        return;
    }
    }
}

#define FILL(type, value)                                                                        \
    do {                                                                                         \
        type *values = buffer;                                                                   \
        type fill = (value);                                                                     \
        for (size_t i = 0; i < count; i++)                                                       \
            values[i] = fill;                                                                    \
    } while (0)

void reduce_fill_identity(void *buffer, size_t count, chorus_dtype dtype, chorus_op op)
{
    if (op == CHORUS_SUM || op == CHORUS_AVERAGE || op == CHORUS_ADASUM) {
        memset(buffer, 0, count * chorus_dtype_size(dtype));
        return;
    }
    bool one = op == CHORUS_PRODUCT;
    bool largest = op == CHORUS_MIN;
    switch (dtype) {
    case CHORUS_UINT8:
        FILL(uint8_t, one ? 1 : largest ? UINT8_MAX : 0);
        return;
    case CHORUS_INT8:
        FILL(int8_t, one ? 1 : largest ? INT8_MAX : INT8_MIN);
        return;
    case CHORUS_INT16:
        FILL(int16_t, one ? 1 : largest ? INT16_MAX : INT16_MIN);
        return;
    case CHORUS_UINT16:
        FILL(uint16_t, one ? 1 : largest ? UINT16_MAX : 0);
        return;
    case CHORUS_BOOL:
        FILL(uint8_t, one || largest ? 1 : 0);
        return;
    case CHORUS_INT32:
        FILL(int32_t, one ? 1 : largest ? INT32_MAX : INT32_MIN);
        return;
    case CHORUS_INT64:
        FILL(int64_t, one ? 1 : largest ? INT64_MAX : INT64_MIN);
        return;
    case CHORUS_FLOAT16:
        FILL(uint16_t, one ? 0x3c00u : largest ? 0x7c00u : 0xfc00u);
        return;
    case CHORUS_BFLOAT16:
        FILL(uint16_t, one ? 0x3f80u : largest ? 0x7f80u : 0xff80u);
        return;
    case CHORUS_FLOAT32:
        FILL(float, one ? 1.0f : largest ? INFINITY : -INFINITY);
        return;
    case CHORUS_FLOAT64:
        FILL(double, one ? 1.0 : largest ? INFINITY : -INFINITY);
        return;
    }
}

void reduce_compress_floats(uint16_t *restrict to, const float *restrict from, size_t count,
                     chorus_dtype wire, float factor)
{
    if (wire == CHORUS_BFLOAT16)
        for (size_t i = 0; i < count; i++)
            to[i] = float_to_bfloat16(from[i] * factor);
    else
        for (size_t i = 0; i < count; i++)
            to[i] = float_to_half(from[i] * factor);
}

void reduce_decompress_floats(float *restrict to, const uint16_t *restrict from, size_t count,
                       chorus_dtype wire, float factor)
{
    if (wire == CHORUS_BFLOAT16)
        for (size_t i = 0; i < count; i++)
            to[i] = bfloat16_to_float(from[i]) * factor;
    else
        for (size_t i = 0; i < count; i++)
            to[i] = half_to_float(from[i]) * factor;
}
