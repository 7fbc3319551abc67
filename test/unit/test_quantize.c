/*
 * test_quantize.c — the blockwise 8- and 4-bit quantization kernels (lib/compression) against
 * a reference in double computed here from the values alone: each block's offset is its
 * minimum and its scale covers its range; every decoded value is within scale / 2 of its input
 * for nearest rounding and within scale for stochastic rounding, which is unbiased over seeds;
 * equal values, zeros and denormals; one outlier; nan and infinity propagating to their block;
 * lengths 0, 1, partial last blocks and primes; error feedback's residual. Then the quantized
 * allreduce over the thread transport at 1-5 ranks: every rank's result the same bits, within
 * the bound of its header comment of the sum in double.
 */
#include "../../lib/collectives/algorithms.h"
#include "../../lib/compression/quantize.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static_assert(QUANTIZE_BLOCK_VALUES == REFERENCE_QUANTIZED_BLOCK,
              "the tests' reference knows the block size chorus.h states");

static const size_t lengths[] = {0, 1, 2, 3, 255, 256, 257, 511, 512, 1000, 4099, 7919};
static const unsigned bit_widths[] = {8, 4};

/* What float32 arithmetic may add to an exact decode: the rounding of q * scale and of the
 * sum, each half an ulp of a value no larger than the block's largest magnitude. */
static double decode_slack(double low, double high)
{
    double largest = fmax(fabs(low), fabs(high));
    return ldexp(largest, -23) + FLT_TRUE_MIN;
}

/* Fills `values` with a mix of magnitudes that changes from block to block. */
static void fill_values(float *values, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++) {
        double unit = (double)(test_random(seed, 0, i) >> 11) * 0x1p-53 - 0.5;
        int exponent = (int)(test_random(seed, 1, i / QUANTIZE_BLOCK_VALUES) % 40) - 20;
        values[i] = (float)ldexp(unit, exponent);
    }
}

/* Checks every block of `values` quantized with `scheme` against the reference: the header,
 * then every value within `bound_in_scales` of its block's scale. */
static void check_against_reference(const float *values, size_t count,
                                    const struct quantize_scheme *scheme,
                                    double bound_in_scales)
{
    unsigned char *quantized = malloc(quantize_bytes(count, scheme->bits) + 1);
    float *decoded = malloc((count + 1) * sizeof *decoded);
    ck_assert(quantized != NULL && decoded != NULL);
    quantize_encode(quantized, values, count, scheme, 0);
    quantize_decode(decoded, quantized, count, scheme->bits);
    double levels = (double)((1u << scheme->bits) - 1);
    for (size_t start = 0; start < count; start += QUANTIZE_BLOCK_VALUES) {
        size_t end = count - start < QUANTIZE_BLOCK_VALUES ? count : start + QUANTIZE_BLOCK_VALUES;
        double low = values[start], high = values[start];
        for (size_t i = start; i < end; i++) {
            low = fmin(low, values[i]);
            high = fmax(high, values[i]);
        }
        float offset, scale;
        quantize_block_header(quantized, start / QUANTIZE_BLOCK_VALUES, &offset, &scale);
        double exact_scale = (high - low) / levels;
        ck_assert_msg((double)offset == low, "block at %zu: offset %g, minimum %g", start,
                      (double)offset, low);
        ck_assert_msg((double)scale >= exact_scale &&
                          (double)scale <= exact_scale * (1 + 0x1p-23) + FLT_TRUE_MIN,
                      "block at %zu: scale %g for a range of %g", start, (double)scale,
                      high - low);
        double bound = bound_in_scales * scale + decode_slack(low, high);
        for (size_t i = start; i < end; i++) {
            double error = fabs((double)decoded[i] - (double)values[i]);
            ck_assert_msg(error <= bound,
                          "%u bits, count %zu, value %zu: %.9g decoded as %.9g (error %g, "
                          "bound %g, scale %g)",
                          scheme->bits, count, i, (double)values[i], (double)decoded[i], error,
                          bound, (double)scale);
        }
    }
    free(quantized);
    free(decoded);
}

START_TEST(bytes_count_headers_and_codes)
{
    ck_assert_uint_eq(quantize_bytes(0, 8), 0);
    ck_assert_uint_eq(quantize_bytes(1, 8), 9);
    ck_assert_uint_eq(quantize_bytes(1, 4), 9);
    ck_assert_uint_eq(quantize_bytes(3, 4), 10);
    ck_assert_uint_eq(quantize_bytes(QUANTIZE_BLOCK_VALUES, 8), 8 + QUANTIZE_BLOCK_VALUES);
    ck_assert_uint_eq(quantize_bytes(QUANTIZE_BLOCK_VALUES + 1, 4),
                      16 + QUANTIZE_BLOCK_VALUES / 2 + 1);
}
END_TEST

/* Nearest rounding errs by at most half a scale, stochastic rounding by less than one. */
START_TEST(errors_stay_within_the_rounding_bound)
{
    for (int rounding = 0; rounding < 2; rounding++)
        for (size_t w = 0; w < 2; w++)
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
                size_t count = lengths[l];
                float *values = malloc((count + 1) * sizeof *values);
                ck_assert(values != NULL);
                fill_values(values, count, 100 + l + 50 * (size_t)rounding);
                struct quantize_scheme scheme = {.bits = bit_widths[w],
                                                 .rounding = (enum quantize_rounding)rounding,
                                                 .stream = quantize_stream(7, l, w)};
                check_against_reference(values, count, &scheme, rounding ? 1.0 : 0.5);
                free(values);
            }
}
END_TEST

/* Over many seeds, the mean decoded value of each input is the input: the mean's standard
 * deviation is at most scale / (2 sqrt(seeds)), and the test allows six of them. */
START_TEST(stochastic_rounding_is_unbiased_over_seeds)
{
    enum { COUNT = 300, SEEDS = 4000 };
    for (size_t w = 0; w < 2; w++) {
        float values[COUNT], decoded[COUNT];
        double sums[COUNT] = {0};
        fill_values(values, COUNT, 300 + w);
        unsigned char quantized[2 * COUNT];
        for (uint64_t seed = 0; seed < SEEDS; seed++) {
            struct quantize_scheme scheme = {.bits = bit_widths[w],
                                             .rounding = QUANTIZE_STOCHASTIC,
                                             .stream = quantize_stream(seed, 1, 2)};
            quantize_encode(quantized, values, COUNT, &scheme, 0);
            quantize_decode(decoded, quantized, COUNT, bit_widths[w]);
            for (size_t i = 0; i < COUNT; i++)
                sums[i] += decoded[i];
        }
        for (size_t i = 0; i < COUNT; i++) {
            float offset, scale;
            quantize_block_header(quantized, i / QUANTIZE_BLOCK_VALUES, &offset, &scale);
            double bias = sums[i] / SEEDS - values[i];
            double allowed = 6 * scale / (2 * sqrt(SEEDS)) + decode_slack(offset, values[i]);
            ck_assert_msg(fabs(bias) <= allowed, "%u bits, value %zu (%g): mean off by %g (%g "
                          "allowed)", bit_widths[w], i, (double)values[i], bias, allowed);
        }
    }
}
END_TEST

START_TEST(stochastic_rounding_is_reproduced_by_its_stream)
{
    enum { COUNT = 1000 };
    float values[COUNT];
    fill_values(values, COUNT, 400);
    unsigned char first[COUNT + 64], second[COUNT + 64], other[COUNT + 64];
    struct quantize_scheme scheme = {.bits = 8, .rounding = QUANTIZE_STOCHASTIC,
                                     .stream = quantize_stream(42, 3, 4)};
    quantize_encode(first, values, COUNT, &scheme, 0);
    quantize_encode(second, values, COUNT, &scheme, 0);
    scheme.stream = quantize_stream(43, 3, 4);
    quantize_encode(other, values, COUNT, &scheme, 0);
    size_t bytes = quantize_bytes(COUNT, 8);
    ck_assert(memcmp(first, second, bytes) == 0);
    ck_assert(memcmp(first, other, bytes) != 0);
    ck_assert(quantize_stream(1, 2, 3) != quantize_stream(1, 3, 2));
}
END_TEST

START_TEST(equal_values_zeros_and_denormals_come_back_exact)
{
    static const float constants[] = {0.0f, -0.0f, 1.0f, -3.5f, 1e30f, -1e-30f, FLT_TRUE_MIN,
                                      -FLT_MIN, FLT_MAX};
    for (size_t w = 0; w < 2; w++)
        for (size_t c = 0; c < sizeof constants / sizeof constants[0]; c++)
            for (size_t count = 1; count <= 3 * QUANTIZE_BLOCK_VALUES; count += 97) {
                float values[3 * QUANTIZE_BLOCK_VALUES], decoded[3 * QUANTIZE_BLOCK_VALUES];
                unsigned char quantized[4 * QUANTIZE_BLOCK_VALUES];
                for (size_t i = 0; i < count; i++)
                    values[i] = constants[c];
                struct quantize_scheme scheme = {.bits = bit_widths[w],
                                                 .rounding = c % 2 ? QUANTIZE_STOCHASTIC
                                                                   : QUANTIZE_NEAREST};
                quantize_encode(quantized, values, count, &scheme, 0);
                quantize_decode(decoded, quantized, count, bit_widths[w]);
                for (size_t i = 0; i < count; i++)
                    ck_assert_msg(decoded[i] == values[i], "%g came back as %g",
                                  (double)values[i], (double)decoded[i]);
            }
}
END_TEST

START_TEST(denormal_blocks_stay_within_their_tiny_scale)
{
    enum { COUNT = 3 * QUANTIZE_BLOCK_VALUES + 5 };
    float values[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        values[i] = FLT_TRUE_MIN * (float)(test_random(500, 0, i) % 5000) *
                    (i % 3 == 0 ? -1.0f : 1.0f);
    for (size_t w = 0; w < 2; w++) {
        struct quantize_scheme scheme = {.bits = bit_widths[w], .rounding = QUANTIZE_NEAREST};
        check_against_reference(values, COUNT, &scheme, 0.5);
        scheme.rounding = QUANTIZE_STOCHASTIC;
        check_against_reference(values, COUNT, &scheme, 1.0);
    }
}
END_TEST

/* One large value stretches its block's scale, and only its block's. */
START_TEST(an_outlier_stretches_only_its_block)
{
    enum { COUNT = 2 * QUANTIZE_BLOCK_VALUES };
    float values[COUNT], decoded[COUNT];
    unsigned char quantized[2 * COUNT];
    for (size_t i = 0; i < COUNT; i++)
        values[i] = (float)((double)(test_random(600, 0, i) % 1000) * 1e-6);
    values[17] = 1e6f;
    for (size_t w = 0; w < 2; w++) {
        struct quantize_scheme scheme = {.bits = bit_widths[w], .rounding = QUANTIZE_NEAREST};
        check_against_reference(values, COUNT, &scheme, 0.5);
        quantize_encode(quantized, values, COUNT, &scheme, 0);
        quantize_decode(decoded, quantized, COUNT, bit_widths[w]);
        float offset, scale, other_offset, other_scale;
        quantize_block_header(quantized, 0, &offset, &scale);
        quantize_block_header(quantized, 1, &other_offset, &other_scale);
        ck_assert(scale > 1e6f / 256);
        ck_assert(other_scale < 1e-3f);
        ck_assert(fabs((double)decoded[17] - 1e6) <= 0.5 * scale + decode_slack(offset, 1e6));
    }
}
END_TEST

/* A nan or an infinity turns its block, and only its block, into nans. */
START_TEST(non_finite_values_propagate_to_their_block)
{
    static const float poisons[] = {NAN, INFINITY, -INFINITY};
    enum { COUNT = 2 * QUANTIZE_BLOCK_VALUES + 3 };
    for (size_t w = 0; w < 2; w++)
        for (size_t p = 0; p < 3; p++) {
            float values[COUNT], decoded[COUNT];
            unsigned char quantized[2 * COUNT];
            fill_values(values, COUNT, 700);
            values[QUANTIZE_BLOCK_VALUES + 9] = poisons[p];
            struct quantize_scheme scheme = {.bits = bit_widths[w],
                                             .rounding = QUANTIZE_STOCHASTIC};
            quantize_encode(quantized, values, COUNT, &scheme, 0);
            quantize_decode(decoded, quantized, COUNT, bit_widths[w]);
            for (size_t i = 0; i < COUNT; i++) {
                bool poisoned = i / QUANTIZE_BLOCK_VALUES == 1;
                ck_assert_msg(poisoned == (bool)isnan(decoded[i]), "value %zu: %g", i,
                              (double)decoded[i]);
            }
        }
}
END_TEST

/* quantize_decode_add adds exactly what quantize_decode gives. */
START_TEST(decode_add_adds_the_decoded_values)
{
    enum { COUNT = 1001 };
    float values[COUNT], decoded[COUNT];
    double sums[COUNT];
    unsigned char quantized[2 * COUNT];
    fill_values(values, COUNT, 800);
    for (size_t w = 0; w < 2; w++) {
        struct quantize_scheme scheme = {.bits = bit_widths[w], .rounding = QUANTIZE_NEAREST};
        quantize_encode(quantized, values, COUNT, &scheme, 0);
        quantize_decode(decoded, quantized, COUNT, bit_widths[w]);
        for (size_t i = 0; i < COUNT; i++)
            sums[i] = 0.25;
        quantize_decode_add(sums, quantized, COUNT, bit_widths[w]);
        for (size_t i = 0; i < COUNT; i++)
            ck_assert(sums[i] == 0.25 + (double)decoded[i]);
    }
}
END_TEST

/* quantize_encode_compensated quantizes values + residual exactly as quantize_encode does
 * (the same bytes), and leaves in the residual what that dropped, compensated - decoded in
 * float32; a block holding a nan (whose decode is nan throughout) keeps its residual. */
START_TEST(compensated_encoding_keeps_what_quantizing_dropped)
{
    enum { COUNT = 3 * QUANTIZE_BLOCK_VALUES + 7 };
    float values[COUNT], compensated[COUNT], decoded[COUNT], residual[COUNT];
    unsigned char quantized[2 * COUNT], expected[2 * COUNT];
    fill_values(values, COUNT, 900);
    values[QUANTIZE_BLOCK_VALUES + 3] = NAN;
    for (size_t w = 0; w < 2; w++) {
        for (int rounding = 0; rounding < 2; rounding++) {
            struct quantize_scheme scheme = {.bits = bit_widths[w],
                                             .rounding = (enum quantize_rounding)rounding,
                                             .stream = quantize_stream(5, w, 0)};
            for (size_t i = 0; i < COUNT; i++) {
                residual[i] = (float)ldexp((double)(i % 7) - 3.0, -12);
                compensated[i] = values[i] + residual[i];
            }
            quantize_encode(expected, compensated, COUNT, &scheme, 100);
            quantize_decode(decoded, expected, COUNT, bit_widths[w]);
            quantize_encode_compensated(quantized, values, residual, COUNT, &scheme, 100);
            ck_assert(memcmp(quantized, expected, quantize_bytes(COUNT, bit_widths[w])) == 0);
            size_t nonzero = 0;
            for (size_t i = 0; i < COUNT; i++) {
                if (i / QUANTIZE_BLOCK_VALUES == 1) {
                    ck_assert(residual[i] == (float)ldexp((double)(i % 7) - 3.0, -12));
                    continue;
                }
                ck_assert(residual[i] == compensated[i] - decoded[i]);
                nonzero += residual[i] != 0.0f;
            }
            ck_assert_uint_gt(nonzero, COUNT / 2);
        }
    }
}
END_TEST

struct quantized_job {
    struct thread_fabric *fabric;
    int rank, nranks;
    size_t count;
    struct quantize_scheme scheme;
    double factor;
    float *result;
    chorus_status status;
};

static void *run_quantized_rank(void *argument)
{
    struct quantized_job *job = argument;
    struct transport transport;
    struct scratch scratch = {0};
    transport_threads_init(&transport, job->fabric, job->rank);
    for (size_t i = 0; i < job->count; i++)
        job->result[i] = reference_gradient(900, job->rank, i);
    struct allreduce_args args = {.transport = &transport, .scratch = &scratch,
                                  .buffer = job->result, .count = job->count,
                                  .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                                  .postscale = job->factor != 1.0 ? &job->factor : NULL,
                                  .quantize = &job->scheme};
    job->status = allreduce_quantized(&args);
    scratch_release(&scratch);
    return NULL;
}

START_TEST(quantized_allreduce_is_within_its_bound_and_the_same_everywhere)
{
    int nranks = _i;
    static const size_t counts[] = {0, 1, 3, 255, 257, 1021, 5 * QUANTIZE_BLOCK_VALUES + 7,
                                    20011};
    for (size_t w = 0; w < 2; w++)
        for (int rounding = 0; rounding < 2; rounding++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                size_t count = counts[c];
                double factor = c % 2 ? 1.0 / nranks : 1.0;
                struct thread_fabric *fabric = thread_fabric_create(nranks);
                struct quantized_job jobs[5];
                pthread_t threads[5];
                for (int r = 0; r < nranks; r++) {
                    jobs[r] = (struct quantized_job){
                        .fabric = fabric, .rank = r, .nranks = nranks, .count = count,
                        .scheme = {.bits = bit_widths[w],
                                   .rounding = (enum quantize_rounding)rounding,
                                   .stream = quantize_stream(11, c, 0)},
                        .factor = factor,
                        .result = malloc((count + 1) * sizeof(float))};
                    pthread_create(&threads[r], NULL, run_quantized_rank, &jobs[r]);
                }
                for (int r = 0; r < nranks; r++)
                    pthread_join(threads[r], NULL);
                for (int r = 0; r < nranks; r++) {
                    ck_assert_int_eq(jobs[r].status, CHORUS_OK);
                    ck_assert_msg(memcmp(jobs[r].result, jobs[0].result,
                                         count * sizeof(float)) == 0,
                                  "%d ranks, %zu values: rank %d differs from rank 0", nranks,
                                  count, r);
                }
                double bound = 0;
                for (size_t i = 0; i < count; i++) {
                    double expected = 0;
                    for (int k = 0; k < nranks; k++)
                        expected += reference_gradient(900, k, i);
                    expected *= factor;
                    if (i % QUANTIZE_BLOCK_VALUES == 0) /* the same for the whole block */
                        bound = reference_quantized_bound(jobs[0].result, count, i, NULL, nranks,
                                                          900, bit_widths[w],
                                                          rounding == QUANTIZE_STOCHASTIC, factor);
                    double error = fabs(jobs[0].result[i] - expected);
                    ck_assert_msg(error <= bound,
                                  "%u bits, %s, %d ranks, %zu values: value %zu is %.9g, "
                                  "expected %.9g (error %g, bound %g)",
                                  bit_widths[w], rounding ? "stochastic" : "nearest", nranks,
                                  count, i, (double)jobs[0].result[i], expected, error, bound);
                }
                for (int r = 0; r < nranks; r++)
                    free(jobs[r].result);
                thread_fabric_destroy(fabric);
            }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("quantize");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bytes_count_headers_and_codes);
    tcase_add_test(tc, errors_stay_within_the_rounding_bound);
    tcase_add_test(tc, stochastic_rounding_is_unbiased_over_seeds);
    tcase_add_test(tc, stochastic_rounding_is_reproduced_by_its_stream);
    tcase_add_test(tc, equal_values_zeros_and_denormals_come_back_exact);
    tcase_add_test(tc, denormal_blocks_stay_within_their_tiny_scale);
    tcase_add_test(tc, an_outlier_stretches_only_its_block);
    tcase_add_test(tc, non_finite_values_propagate_to_their_block);
    tcase_add_test(tc, decode_add_adds_the_decoded_values);
    tcase_add_test(tc, compensated_encoding_keeps_what_quantizing_dropped);
    suite_add_tcase(suite, tc);
    TCase *allreduce = tcase_create("allreduce");
    tcase_set_timeout(allreduce, 120);
    tcase_add_loop_test(allreduce, quantized_allreduce_is_within_its_bound_and_the_same_everywhere,
                        1, 6);
    suite_add_tcase(suite, allreduce);
    return run_suite(suite);
}
