/*
 * reference.c — see reference.h. The float16 and bfloat16 decoders here are written from the
 * IEEE definitions with ldexp, independently of the library's conversion code.
 */
#include "reference.h"

#include <float.h>
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

uint64_t test_random(uint64_t seed, uint64_t rank, uint64_t index)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + rank * 0xbf58476d1ce4e5b9ull + index + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double half_decode(uint16_t bits)
{
    int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    double value;
    if (exponent == 0)
        value = ldexp(mantissa, -24);
    else if (exponent == 31)
        value = mantissa ? NAN : INFINITY;
    else
        value = ldexp(1024 + mantissa, exponent - 25);
    return sign ? -value : value;
}

/* Exact encoding of a value that float16 represents exactly (the inputs here are such). */
static uint16_t half_encode_exact(double value)
{
    if (value == 0)
        return signbit(value) ? 0x8000 : 0;
    uint16_t sign = value < 0 ? 0x8000 : 0;
    value = fabs(value);
    int exponent;
    double fraction = frexp(value, &exponent); /* value = fraction * 2^exponent, [0.5, 1) */
    int biased = exponent + 14;
    if (biased <= 0) /* subnormal */
        return (uint16_t)(sign | (uint16_t)lround(ldexp(value, 24)));
    return (uint16_t)(sign | (biased << 10) | ((uint16_t)lround(ldexp(fraction, 11)) & 0x3ff));
}

static double bfloat_decode(uint16_t bits)
{
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static uint16_t bfloat_encode_exact(double value)
{
    float narrow = (float)value;
    uint32_t wide;
    memcpy(&wide, &narrow, sizeof wide);
    return (uint16_t)(wide >> 16);
}

static int64_t integer_result(const void *buffer, size_t index, chorus_dtype dtype)
{
    switch (dtype) {
    case CHORUS_UINT8:
    case CHORUS_BOOL:
        return ((const uint8_t *)buffer)[index];
    case CHORUS_INT8:
        return ((const int8_t *)buffer)[index];
    case CHORUS_INT16:
        return ((const int16_t *)buffer)[index];
    case CHORUS_UINT16:
        return ((const uint16_t *)buffer)[index];
    case CHORUS_INT32:
        return ((const int32_t *)buffer)[index];
    default:
        return ((const int64_t *)buffer)[index];
    }
}

double reference_decode(const void *buffer, size_t index, chorus_dtype dtype)
{
    switch (dtype) {
    case CHORUS_UINT8:
    case CHORUS_INT8:
    case CHORUS_INT32:
    case CHORUS_INT64:
    case CHORUS_INT16:
    case CHORUS_UINT16:
    case CHORUS_BOOL:
        return (double)integer_result(buffer, index, dtype);
    case CHORUS_FLOAT16:
        return half_decode(((const uint16_t *)buffer)[index]);
    case CHORUS_BFLOAT16:
        return bfloat_decode(((const uint16_t *)buffer)[index]);
    case CHORUS_FLOAT32:
        return ((const float *)buffer)[index];
    case CHORUS_FLOAT64:
        return ((const double *)buffer)[index];
    }
    return NAN;
}

/* Floating inputs: multiples of 1/128 in [-2, 2] (exact in bfloat16 and float16) for sums,
 * min and max; magnitudes in [0.5, 1.5] for products, so that five factors stay in range. */
static double float_input(chorus_op op, uint64_t random)
{
    if (op == CHORUS_PRODUCT) {
        double magnitude = 0.5 + (double)(random % 129) / 128.0;
        return (random >> 40) & 1 ? -magnitude : magnitude;
    }
    return ((double)(random % 513) - 256.0) / 128.0;
}

void reference_fill(void *buffer, size_t count, chorus_dtype dtype, chorus_op op, uint64_t seed,
                    int rank)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t random = test_random(seed, (uint64_t)rank, i);
        switch (dtype) {
        case CHORUS_UINT8:
            ((uint8_t *)buffer)[i] = (uint8_t)random;
            break;
        case CHORUS_INT8:
            ((int8_t *)buffer)[i] = (int8_t)(uint8_t)random;
            break;
        case CHORUS_INT16:
            ((int16_t *)buffer)[i] = (int16_t)(uint16_t)random;
            break;
        case CHORUS_UINT16:
            ((uint16_t *)buffer)[i] = (uint16_t)random;
            break;
        case CHORUS_BOOL:
            ((uint8_t *)buffer)[i] = (uint8_t)(random >> 17 & 1);
            break;
        case CHORUS_INT32:
            ((int32_t *)buffer)[i] = (int32_t)(uint32_t)random;
            break;
        case CHORUS_INT64:
            ((int64_t *)buffer)[i] = (int64_t)random;
            break;
        case CHORUS_FLOAT16:
            ((uint16_t *)buffer)[i] = half_encode_exact(float_input(op, random));
            break;
        case CHORUS_BFLOAT16:
            ((uint16_t *)buffer)[i] = bfloat_encode_exact(float_input(op, random));
            break;
        case CHORUS_FLOAT32:
            ((float *)buffer)[i] = (float)float_input(op, random);
            break;
        case CHORUS_FLOAT64:
            ((double *)buffer)[i] = float_input(op, random);
            break;
        }
    }
}

static double epsilon(chorus_dtype dtype)
{
    switch (dtype) {
    case CHORUS_FLOAT16:
        return 0x1p-10;
    case CHORUS_BFLOAT16:
        return 0x1p-7;
    case CHORUS_FLOAT32:
        return 0x1p-23;
    case CHORUS_FLOAT64:
        return 0x1p-52;
    default:
        return 0;
    }
}

static bool is_integer(chorus_dtype dtype)
{
    return dtype == CHORUS_UINT8 || dtype == CHORUS_INT8 || dtype == CHORUS_INT32 ||
           dtype == CHORUS_INT64 || dtype == CHORUS_INT16 || dtype == CHORUS_UINT16 ||
           dtype == CHORUS_BOOL;
}

/* Integer reference: exact arithmetic modulo 2^bits, then the dtype's wrap. */
static uint64_t integer_input(chorus_dtype dtype, uint64_t seed, int rank, size_t index)
{
    uint64_t random = test_random(seed, (uint64_t)rank, index);
    switch (dtype) {
    case CHORUS_UINT8:
        return (uint8_t)random;
    case CHORUS_INT8:
        return (uint64_t)(int64_t)(int8_t)(uint8_t)random;
    case CHORUS_INT16:
        return (uint64_t)(int64_t)(int16_t)(uint16_t)random;
    case CHORUS_UINT16:
        return (uint16_t)random;
    case CHORUS_BOOL:
        return random >> 17 & 1;
    case CHORUS_INT32:
        return (uint64_t)(int64_t)(int32_t)(uint32_t)random;
    default:
        return random;
    }
}

static int64_t wrap(chorus_dtype dtype, uint64_t value)
{
    switch (dtype) {
    case CHORUS_UINT8:
        return (uint8_t)value;
    case CHORUS_INT8:
        return (int8_t)(uint8_t)value;
    case CHORUS_INT16:
        return (int16_t)(uint16_t)value;
    case CHORUS_UINT16:
        return (uint16_t)value;
    case CHORUS_BOOL:
        return value != 0;
    case CHORUS_INT32:
        return (int32_t)(uint32_t)value;
    default:
        return (int64_t)value;
    }
}

long reference_check_allreduce(const void *result, size_t count, chorus_dtype dtype, chorus_op op,
                               int nranks, const bool *contributes, uint64_t seed,
                               double prescale, double postscale, char *why, size_t why_size)
{
    return reference_check_reduced(result, 0, count, dtype, op, nranks, contributes, seed,
                                   prescale, postscale, why, why_size);
}

/* n / d (d > 0) to the nearest integer, halves away from zero, in 128 bits. */
static __int128 quotient_nearest(__int128 n, __int128 d)
{
    __int128 magnitude = n < 0 ? -n : n;
    __int128 q = (2 * magnitude + d) / (2 * d);
    return n < 0 ? -q : q;
}

/* An integer result scaled as chorus.h documents: a factor that is exactly the double nearest
 * 1/k divides by k; any other factor multiplies exactly by the factor's value; both round to
 * the nearest integer, halves away from zero, and wrap. */
static int64_t scale_exactly(int64_t value, double factor)
{
    if (factor > 0 && factor < 1) {
        double k = nearbyint(1.0 / factor);
        if (k >= 2 && k < 0x1p62 && 1.0 / k == factor)
            return (int64_t)quotient_nearest(value, (__int128)k);
    }
    int exponent = 0;
    double fraction = frexp(factor, &exponent);
    __int128 product = (__int128)value * (__int128)ldexp(fraction, 53);
    exponent -= 53;
    if (exponent >= 0)
        return exponent >= 64 ? 0 : (int64_t)(uint64_t)((unsigned __int128)product << exponent);
    if (exponent < -120)
        return 0;
    return (int64_t)(uint64_t)(unsigned __int128)quotient_nearest(product,
                                                                  (__int128)1 << -exponent);
}

long reference_check_reduced(const void *result, size_t first, size_t count, chorus_dtype dtype,
                             chorus_op op, int nranks, const bool *contributes, uint64_t seed,
                             double prescale, double postscale, char *why, size_t why_size)
{
    int contributors = 0;
    for (int r = 0; r < nranks; r++)
        contributors += contributes == NULL || contributes[r];
    for (size_t i = 0; i < count; i++) {
        if (is_integer(dtype)) {
            uint64_t accumulator = op == CHORUS_PRODUCT ? 1 : 0;
            int64_t extreme = 0;
            bool first_value = true;
            for (int r = 0; r < nranks; r++) {
                if (contributes != NULL && !contributes[r])
                    continue;
                uint64_t value = integer_input(dtype, seed, r, first + i);
                int64_t signed_value = wrap(dtype, value);
                if (op == CHORUS_PRODUCT)
                    accumulator *= value;
                else
                    accumulator += value;
                if (first_value ||
                    (op == CHORUS_MIN ? signed_value < extreme : signed_value > extreme))
                    extreme = signed_value;
                first_value = false;
            }
            int64_t expected = op == CHORUS_MIN || op == CHORUS_MAX ? extreme
                                                                    : wrap(dtype, accumulator);
            /* bool: a sum is "any" (or), a product "all" (and) */
            if (dtype == CHORUS_BOOL && op == CHORUS_SUM)
                expected = accumulator != 0;
            if (op == CHORUS_MIN || op == CHORUS_MAX) {
                if (contributors == 0)
                    expected = integer_result(result, i, dtype); /* identity; not checked */
            }
            double factor = postscale;
            if (op == CHORUS_AVERAGE && contributors > 0)
                factor /= contributors;
            if (factor != 1.0)
                expected = wrap(dtype, (uint64_t)scale_exactly(expected, factor));
            int64_t got = integer_result(result, i, dtype);
            if (got != expected) {
                snprintf(why, why_size, "element %zu: got %lld, expected %lld", first + i,
                         (long long)got, (long long)expected);
                return (long)i;
            }
            continue;
        }
        double accumulator = op == CHORUS_PRODUCT ? 1.0 : 0.0;
        double magnitude = 0;
        double extreme = op == CHORUS_MIN ? INFINITY : -INFINITY;
        for (int r = 0; r < nranks; r++) {
            if (contributes != NULL && !contributes[r])
                continue;
            uint64_t random = test_random(seed, (uint64_t)r, first + i);
            double value = float_input(op, random) * prescale;
            if (op == CHORUS_PRODUCT)
                accumulator *= value;
            else
                accumulator += value;
            magnitude += fabs(value);
            if (op == CHORUS_MIN ? value < extreme : value > extreme)
                extreme = value;
        }
        double expected = op == CHORUS_MIN || op == CHORUS_MAX ? extreme : accumulator;
        if (op == CHORUS_PRODUCT)
            magnitude = fabs(accumulator);
        double factor = postscale;
        if (op == CHORUS_AVERAGE && contributors > 0)
            factor /= contributors;
        expected *= factor;
        magnitude *= fabs(factor);
        /* Each of at most nranks + 3 roundings (prescale, combinations, postscale) is off by
         * half an ulp of a value no larger than the sum of magnitudes. */
        double tolerance = epsilon(dtype) * (nranks + 3) * (magnitude + fabs(expected)) + 1e-300;
        double got = reference_decode(result, i, dtype);
        if (op == CHORUS_MIN || op == CHORUS_MAX)
            tolerance = epsilon(dtype) * fabs(expected) * 2 * (prescale != 1.0 || postscale != 1.0);
        if (!(fabs(got - expected) <= tolerance)) {
            snprintf(why, why_size, "element %zu: got %.9g, expected %.9g (tolerance %.3g)",
                     first + i, got, expected, tolerance);
            return (long)i;
        }
    }
    return -1;
}

void reference_fill_bytes(void *buffer, size_t bytes, uint64_t seed, int rank)
{
    uint8_t *out = buffer;
    for (size_t i = 0; i < bytes; i++)
        out[i] = (uint8_t)(test_random(seed, (uint64_t)rank + 1000, i / 8) >> (8 * (i % 8)));
}

long reference_check_bytes(const void *buffer, size_t bytes, uint64_t seed, int rank)
{
    const uint8_t *in = buffer;
    for (size_t i = 0; i < bytes; i++)
        if (in[i] != (uint8_t)(test_random(seed, (uint64_t)rank + 1000, i / 8) >> (8 * (i % 8))))
            return (long)i;
    return -1;
}

float reference_gradient(uint64_t seed, int rank, size_t index)
{
    double unit = (double)(test_random(seed, (uint64_t)rank, index) >> 11) * 0x1p-53 - 0.3;
    int exponent =
        (int)(test_random(seed + 1, (uint64_t)rank, index / REFERENCE_QUANTIZED_BLOCK) % 12) - 6;
    return (float)ldexp(unit, exponent);
}

double reference_quantized_bound(const float *result, size_t count, size_t index,
                                 const int *ranks, int nranks, uint64_t seed, unsigned bits,
                                 bool stochastic, double factor)
{
    double levels = (double)((1u << bits) - 1);
    size_t start = index / REFERENCE_QUANTIZED_BLOCK * REFERENCE_QUANTIZED_BLOCK;
    size_t end = start + REFERENCE_QUANTIZED_BLOCK < count ? start + REFERENCE_QUANTIZED_BLOCK
                                                           : count;
    double low = INFINITY, high = -INFINITY, contributions = 0, largest = 0;
    for (size_t j = start; j < end; j++) {
        low = fmin(low, result[j]);
        high = fmax(high, result[j]);
    }
    for (int k = 0; k < nranks; k++) {
        int rank = ranks != NULL ? ranks[k] : k;
        double k_low = INFINITY, k_high = -INFINITY;
        for (size_t j = start; j < end; j++) {
            k_low = fmin(k_low, reference_gradient(seed, rank, j));
            k_high = fmax(k_high, reference_gradient(seed, rank, j));
        }
        contributions += (k_high - k_low) / levels;
        largest += fmax(fabs(k_low), fabs(k_high));
    }
    double sum_scale = (high - low) / (stochastic ? levels - 1 : levels);
    double share = stochastic ? 1.0 : 0.5;
    double slack = ldexp(largest * fabs(factor) + fmax(fabs(low), fabs(high)), -21) + FLT_TRUE_MIN;
    return share * (sum_scale + fabs(factor) * contributions) * (1 + 0x1p-20) + slack;
}

static const float *top_k_values; /* qsort has no context argument */

/* Whether value ia goes before value ib: nan first, then by magnitude, then the lower index. */
static int top_k_order(const void *pa, const void *pb)
{
    size_t ia = *(const size_t *)pa, ib = *(const size_t *)pb;
    float a = top_k_values[ia], b = top_k_values[ib];
    if (isnan(a) != isnan(b))
        return isnan(a) ? -1 : 1;
    if (!isnan(a)) {
        double ma = fabs((double)a), mb = fabs((double)b);
        if (ma != mb)
            return ma > mb ? -1 : 1;
    }
    return ia < ib ? -1 : ia > ib ? 1 : 0;
}

void reference_top_k(bool *taken, const float *values, size_t count, size_t k)
{
    size_t *order = malloc((count + 1) * sizeof *order);
    if (order == NULL)
        abort();
    for (size_t i = 0; i < count; i++)
        order[i] = i;
    top_k_values = values;
    qsort(order, count, sizeof *order, top_k_order);
    memset(taken, 0, count * sizeof *taken);
    for (size_t i = 0; i < k && i < count; i++)
        taken[order[i]] = true;
    free(order);
}

uint64_t reference_checksum(const float *values, size_t count)
{
    uint64_t hash = UINT64_C(0xcbf29ce484222325);
    const unsigned char *bytes = (const unsigned char *)values;
    for (size_t i = 0; i < count * sizeof *values; i++)
        hash = (hash ^ bytes[i]) * UINT64_C(0x100000001b3);
    return hash;
}
