/*
 * test_reduce.c — the elementwise kernels: float16 and bfloat16 conversions (exhaustively for
 * every 16-bit pattern, and rounding to nearest even), the reduction loops against scalar
 * reference arithmetic, the kernels that scale in the same pass, scaling and identity fills.
 */
#include "../../lib/collectives/reduce.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(half_to_float_matches_ieee_for_every_pattern)
{
    for (uint32_t bits = 0; bits < 65536; bits++) {
        uint16_t half = (uint16_t)bits;
        double expected = reference_decode(&half, 0, CHORUS_FLOAT16);
        float got = half_to_float(half);
        if (isnan(expected)) {
            ck_assert_msg(isnan(got), "0x%04x should be NaN", bits);
            continue;
        }
        ck_assert_msg((double)got == expected, "0x%04x: got %g expected %g", bits, (double)got,
                      expected);
        ck_assert_msg(float_to_half(got) == half, "0x%04x does not round-trip", bits);
    }
}
END_TEST

START_TEST(bfloat16_round_trips_for_every_pattern)
{
    for (uint32_t bits = 0; bits < 65536; bits++) {
        uint16_t bfloat = (uint16_t)bits;
        float value = bfloat16_to_float(bfloat);
        if (isnan(value))
            ck_assert(isnan(bfloat16_to_float(float_to_bfloat16(value))));
        else
            ck_assert_uint_eq(float_to_bfloat16(value), bfloat);
    }
}
END_TEST

/* The chosen half is the nearest, and on a tie the one with an even mantissa. */
START_TEST(float_to_half_rounds_to_nearest_even)
{
    for (uint64_t i = 0; i < 200000; i++) {
        uint64_t random = test_random(5, 0, i);
        float value = (float)(((double)(random % 2000001) - 1000000.0) / 1000000.0 *
                              ldexp(1.0, (int)(random >> 40) % 40 - 24));
        uint16_t chosen = float_to_half(value);
        double distance = fabs(half_to_float(chosen) - (double)value);
        for (int step = -1; step <= 1; step += 2) {
            uint16_t neighbour = (uint16_t)(chosen + step);
            if ((neighbour & 0x7c00) == 0x7c00 || (neighbour & 0x7fff) == 0x7fff)
                continue;
            double other = fabs(half_to_float(neighbour) - (double)value);
            ck_assert_msg(distance <= other, "%a rounded to 0x%04x, not the nearest", value,
                          chosen);
            if (distance == other)
                ck_assert_msg((chosen & 1) == 0, "%a: tie not rounded to even", value);
        }
    }
    ck_assert_uint_eq(float_to_half(65520.0f), 0x7c00);       /* rounds up to infinity */
    ck_assert_uint_eq(float_to_half(65504.0f), 0x7bff);       /* largest finite */
    ck_assert_uint_eq(float_to_half(-INFINITY), 0xfc00);
    ck_assert(isnan(half_to_float(float_to_half(NAN))));
    ck_assert_uint_eq(float_to_half(0x1p-24f), 0x0001);       /* smallest subnormal */
    ck_assert_uint_eq(float_to_half(0x1p-26f), 0x0000);       /* below half of it */
}
END_TEST

START_TEST(reductions_match_scalar_arithmetic)
{
    const size_t count = 1027;
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (size_t o = 0; o < 4; o++) {
            size_t element = chorus_dtype_size((chorus_dtype)dtype);
            uint8_t *a = malloc(count * element), *b = malloc(count * element);
            reference_fill(a, count, (chorus_dtype)dtype, ops[o], 9, 0);
            reference_fill(b, count, (chorus_dtype)dtype, ops[o], 9, 1);
            uint8_t *pair = malloc(count * element);
            reduce_pair(pair, a, b, count, (chorus_dtype)dtype, ops[o]);
            reduce_into(a, b, count, (chorus_dtype)dtype, ops[o]);
            ck_assert_msg(memcmp(pair, a, count * element) == 0, "reduce_pair differs (%s %s)",
                          chorus_dtype_name((chorus_dtype)dtype), chorus_op_name(ops[o]));
            free(pair);
            char why[256];
            long wrong = reference_check_allreduce(a, count, (chorus_dtype)dtype, ops[o], 2, NULL,
                                                   9, 1.0, 1.0, why, sizeof why);
            ck_assert_msg(wrong < 0, "%s %s: %s", chorus_dtype_name((chorus_dtype)dtype),
                          chorus_op_name(ops[o]), why);
            free(a);
            free(b);
        }
}
END_TEST

/* The scaled kernels give bitwise what a reduction followed by reduce_scale_buffer gives: the fused
 * float sums and the two-pass fallback of the other dtypes and ops alike. */
START_TEST(scaled_reductions_equal_reduction_then_scale)
{
    const size_t count = 1031;
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    const double factors[] = {1.0, 0.5, 1.0 / 3.0, 2.75};
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (size_t o = 0; o < 5; o++)
            for (size_t f = 0; f < 4; f++) {
                chorus_dtype type = (chorus_dtype)dtype;
                size_t bytes = count * chorus_dtype_size(type);
                uint8_t *a = malloc(bytes), *b = malloc(bytes), *expected = malloc(bytes);
                uint8_t *pair = malloc(bytes), *into = malloc(bytes);
                reference_fill(a, count, type, ops[o], 11, 0);
                reference_fill(b, count, type, ops[o], 11, 1);
                reduce_pair(expected, a, b, count, type, ops[o]);
                reduce_scale_buffer(expected, count, type, factors[f]);
                reduce_pair_scaled(pair, a, b, count, type, ops[o], factors[f]);
                memcpy(into, a, bytes);
                reduce_into_scaled(into, b, count, type, ops[o], factors[f]);
                ck_assert_msg(memcmp(pair, expected, bytes) == 0,
                              "reduce_pair_scaled differs (%s %s, factor %g)",
                              chorus_dtype_name(type), chorus_op_name(ops[o]), factors[f]);
                ck_assert_msg(memcmp(into, expected, bytes) == 0,
                              "reduce_into_scaled differs (%s %s, factor %g)",
                              chorus_dtype_name(type), chorus_op_name(ops[o]), factors[f]);
                free(a);
                free(b);
                free(expected);
                free(pair);
                free(into);
            }
}
END_TEST

START_TEST(identity_leaves_reductions_unchanged)
{
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (size_t o = 0; o < 5; o++) {
            size_t element = chorus_dtype_size((chorus_dtype)dtype);
            uint8_t data[64 * 8], identity[64 * 8], copy[64 * 8];
            reference_fill(data, 64, (chorus_dtype)dtype, ops[o], 3, 0);
            memcpy(copy, data, 64 * element);
            reduce_fill_identity(identity, 64, (chorus_dtype)dtype, ops[o]);
            reduce_into(data, identity, 64, (chorus_dtype)dtype, ops[o]);
            ck_assert_msg(memcmp(data, copy, 64 * element) == 0, "%s %s changed",
                          chorus_dtype_name((chorus_dtype)dtype), chorus_op_name(ops[o]));
        }
}
END_TEST

START_TEST(scaling_rounds_integers_and_multiplies_floats)
{
    int32_t integers[4] = {7, -7, 10, 3};
    reduce_scale_buffer(integers, 4, CHORUS_INT32, 0.5);
    ck_assert_int_eq(integers[0], 4); /* 3.5 rounds away from zero */
    ck_assert_int_eq(integers[1], -4);
    ck_assert_int_eq(integers[2], 5);
    ck_assert_int_eq(integers[3], 2);
    float floats[2] = {3.0f, -1.5f};
    reduce_scale_buffer(floats, 2, CHORUS_FLOAT32, 0.25);
    ck_assert(floats[0] == 0.75f && floats[1] == -0.375f);
    uint16_t half = float_to_half(6.0f);
    reduce_scale_buffer(&half, 1, CHORUS_FLOAT16, 1.0 / 3.0);
    ck_assert(half_to_float(half) == 2.0f);
}
END_TEST

/* The reference: numerator / denominator (denominator > 0) rounded to the nearest integer,
 * halves away from zero, in 128-bit integers. */
static __int128 divide_nearest(__int128 numerator, __int128 denominator)
{
    __int128 magnitude = numerator < 0 ? -numerator : numerator;
    __int128 quotient = (2 * magnitude + denominator) / (2 * denominator);
    return numerator < 0 ? -quotient : quotient;
}

/* An int64 average from the exact sum: two values near 2^60 whose sum fits in int64 averaged to
 * ...280 through double, where the exact quotient is ...286.5 (so ...287). Then random sums over
 * the whole range, divided by 2..64 ranks. */
START_TEST(integer_averages_are_exact_over_int64s_range)
{
    int64_t a = 1152921504606846977, b = 1152921504606846976 - 1000000000000000001;
    /* reference: (a + b) / 2 */
    int64_t sum = a + b;
    int64_t expected = (int64_t)divide_nearest(sum, 2);
    int64_t value = sum;
    reduce_scale_buffer(&value, 1, CHORUS_INT64, 1.0 / 2);
    ck_assert_msg(value == expected, "got %lld, expected %lld", (long long)value,
                  (long long)expected);
    int64_t near_top[2] = {INT64_MAX, INT64_MIN};
    reduce_scale_buffer(near_top, 2, CHORUS_INT64, 1.0 / 3);
    ck_assert_int_eq(near_top[0], (int64_t)divide_nearest(INT64_MAX, 3));
    ck_assert_int_eq(near_top[1], (int64_t)divide_nearest(INT64_MIN, 3));
    for (uint64_t i = 0; i < 100000; i++) {
        int64_t total = (int64_t)test_random(11, 0, i) >> (test_random(11, 1, i) % 63);
        int64_t ranks = 2 + (int64_t)(test_random(11, 2, i) % 63);
        int64_t averaged = total;
        reduce_scale_buffer(&averaged, 1, CHORUS_INT64, 1.0 / (double)ranks);
        ck_assert_msg(averaged == (int64_t)divide_nearest(total, ranks),
                      "%lld / %lld gave %lld", (long long)total, (long long)ranks,
                      (long long)averaged);
        int32_t narrow = (int32_t)(total >> 32);
        reduce_scale_buffer(&narrow, 1, CHORUS_INT32, 1.0 / (double)ranks);
        ck_assert_int_eq(narrow, (int32_t)divide_nearest(total >> 32, ranks));
    }
}
END_TEST

/* Other factors: the exact product of the integer and the factor's double value, rounded to the
 * nearest (halves away from zero), for int64 values up to 2^62. */
START_TEST(integer_scale_factors_round_the_exact_product)
{
    /* (Not 0.1 or 0.25: the double nearest 1/n divides by n, tested above.) */
    static const double factors[] = {0.7, 1.5, 0.3, 2.25, 0.999, 3.0, -0.7};
    for (uint64_t i = 0; i < 20000; i++) {
        int64_t value = (int64_t)test_random(12, 0, i) >> (2 + test_random(12, 1, i) % 60);
        double factor = factors[i % (sizeof factors / sizeof factors[0])];
        int exponent = 0;
        double mantissa = frexp(factor, &exponent); /* factor = m * 2^(e - 53), m whole */
        __int128 m = (__int128)ldexp(mantissa, 53);
        exponent -= 53;
        __int128 product = (__int128)value * m;
        __int128 expected = exponent >= 0 ? product << exponent
                                          : divide_nearest(product, (__int128)1 << -exponent);
        if (expected > INT64_MAX || expected < INT64_MIN)
            continue;
        int64_t scaled = value;
        reduce_scale_buffer(&scaled, 1, CHORUS_INT64, factor);
        ck_assert_msg(scaled == (int64_t)expected, "%lld * %.17g gave %lld, expected %lld",
                      (long long)value, factor, (long long)scaled, (long long)expected);
    }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("reduce");
    TCase *tc = tcase_create("kernels");
    /* Check's default is 4 s a case: 200,000 roundings under ASan on a loaded machine took
     * longer (seen once); meson's bound for the program stays 60 s. */
    tcase_set_timeout(tc, 50);
    tcase_add_test(tc, half_to_float_matches_ieee_for_every_pattern);
    tcase_add_test(tc, bfloat16_round_trips_for_every_pattern);
    tcase_add_test(tc, float_to_half_rounds_to_nearest_even);
    tcase_add_test(tc, reductions_match_scalar_arithmetic);
    tcase_add_test(tc, scaled_reductions_equal_reduction_then_scale);
    tcase_add_test(tc, identity_leaves_reductions_unchanged);
    tcase_add_test(tc, scaling_rounds_integers_and_multiplies_floats);
    tcase_add_test(tc, integer_averages_are_exact_over_int64s_range);
    tcase_add_test(tc, integer_scale_factors_round_the_exact_product);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
