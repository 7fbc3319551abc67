/*
 * test_topk.c — the top-k selection of the TOPK compression (lib/compression/topk.c) against a
 * reference that sorts the indices by magnitude (nan first, larger magnitudes first, ties to
 * the lower index) and takes the first k: random values, many ties (small integers, 3 and -3,
 * 0 and -0), negative values, nan and infinities, denormals, k = 1 and k = count, lengths 1 to
 * primes past the radix's 2^16 buckets; the residual is the compensated values less what was
 * sent, exactly. Then the top-k allreduce over the thread transport at 1-5 ranks, sparse and
 * dense, against the sum in double of every rank's top k as the reference picks it, with and
 * without error feedback over several steps: every rank the same bits.
 */
#include "../../lib/collectives/algorithms.h"
#include "../../lib/compression/topk.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ----- the reference: reference_top_k (test/common) ----------------------------------- */

static bool same_bits(float a, float b)
{
    /* Which nan a sum of two nans keeps (the sign, the payload) depends on the order of the
     * operands the compiler chose: every nan is the same value here (topk.h). */
    if (isnan(a) && isnan(b))
        return true;
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ----- the data --------------------------------------------------------------------------- */

enum pattern {
    RANDOM,     /* magnitudes over 40 binades, both signs */
    SMALL_INTS, /* -4 .. 4: ties everywhere, 0 and -0 */
    SPECIALS,   /* random, with nans, infinities, zeros and denormals sprinkled */
    EQUAL,      /* every value the same magnitude, signs alternating */
    PATTERN_COUNT
};

static void fill(float *values, size_t count, enum pattern pattern, uint64_t seed)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t bits = test_random(seed, pattern, i);
        double unit = (double)(bits >> 11) * 0x1p-53 - 0.5;
        switch (pattern) {
        case RANDOM:
            values[i] = (float)ldexp(unit, (int)(bits % 40) - 20);
            break;
        case SMALL_INTS:
            values[i] = (float)((int)(bits % 9) - 4);
            if (values[i] == 0 && bits % 2)
                values[i] = -0.0f;
            break;
        case SPECIALS: {
            static const float specials[] = {NAN,  -NAN,  INFINITY, -INFINITY,
                                             0.0f, -0.0f, 1e-45f,   -3e-42f};
            values[i] = bits % 7 == 0 ? specials[(bits >> 8) % 8]
                                      : (float)ldexp(unit, (int)(bits % 20) - 10);
            break;
        }
        case EQUAL:
            values[i] = i % 2 ? -2.5f : 2.5f;
            break;
        default:
            break;
        }
    }
}

/* ----- the selection ---------------------------------------------------------------------- */

START_TEST(count_is_the_ratio_rounded_up_at_least_one)
{
    ck_assert_uint_eq(topk_count(0, 0.5), 0);
    ck_assert_uint_eq(topk_count(1, 0.01), 1);
    ck_assert_uint_eq(topk_count(100, 0.01), 1);
    ck_assert_uint_eq(topk_count(101, 0.01), 2);
    ck_assert_uint_eq(topk_count(1000, 0.1), 100);
    ck_assert_uint_eq(topk_count(7, 1.0), 7);
    ck_assert_uint_eq(topk_count(7, 1e-9), 1);
    ck_assert_uint_eq(topk_count(25000000, 0.01), 250000);
}
END_TEST

/* Compresses a copy of `values` (with `residual` when not NULL) and checks the pairs and the
 * residual against the reference. */
static void check_selection(const float *values, const float *residual, size_t count, size_t k,
                            const char *what)
{
    float *compensated = malloc((count + 1) * sizeof *compensated);
    float *work = malloc((count + 1) * sizeof *work);
    float *kept = malloc((count + 1) * sizeof *kept);
    bool *taken = malloc((count + 1) * sizeof *taken);
    struct topk_pair *pairs = malloc((k + 1) * sizeof *pairs);
    ck_assert(compensated && work && kept && taken && pairs);
    for (size_t i = 0; i < count; i++)
        compensated[i] = residual != NULL ? values[i] + residual[i] : values[i];
    memcpy(work, values, count * sizeof *work);
    if (residual != NULL)
        memcpy(kept, residual, count * sizeof *kept);
    ck_assert(topk_compress(pairs, work, residual != NULL ? kept : NULL, count, k));
    reference_top_k(taken, compensated, count, k);
    /* Every value checked, one assertion for the call (Check writes a record per assertion). */
    size_t next = 0, wrong = 0, first_wrong = 0;
    for (size_t i = 0; i < count; i++) {
        bool right = same_bits(work[i], compensated[i]);
        if (taken[i]) {
            right &=
                next < k && pairs[next].index == i && same_bits(pairs[next].value, compensated[i]);
            next++;
        }
        if (residual != NULL)
            right &= same_bits(kept[i], taken[i] ? 0.0f : compensated[i]);
        if (!right && wrong++ == 0)
            first_wrong = i;
    }
    ck_assert_msg(wrong == 0,
                  "%s, %zu values, k %zu%s: %zu wrong, the first at index %zu (value %g, "
                  "taken by the reference: %d, residual %g)",
                  what, count, k, residual != NULL ? ", with a residual" : "", wrong, first_wrong,
                  (double)compensated[first_wrong], taken[first_wrong],
                  residual != NULL ? (double)kept[first_wrong] : 0.0);
    ck_assert_uint_eq(next, k);
    free(compensated);
    free(work);
    free(kept);
    free(taken);
    free(pairs);
}

START_TEST(selection_matches_sorting_for_every_pattern_and_k)
{
    enum pattern pattern = (enum pattern)_i;
    static const size_t counts[] = {1, 2, 3, 10, 255, 1000, 7919, 65537};
    static const char *const names[] = {"random", "small ints", "specials", "equal"};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t count = counts[c];
        size_t ks[] = {1, 2, count / 3, count / 2 + 1, count - 1, count};
        float *values = malloc(count * sizeof *values);
        float *residual = malloc(count * sizeof *residual);
        ck_assert(values && residual);
        fill(values, count, pattern, 70 + c);
        fill(residual, count, pattern == EQUAL ? RANDOM : pattern, 170 + c);
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            size_t k = ks[j];
            if (k == 0 || k > count)
                continue;
            check_selection(values, NULL, count, k, names[pattern]);
            check_selection(values, residual, count, k, names[pattern]);
        }
        free(values);
        free(residual);
    }
}
END_TEST

START_TEST(ties_go_to_the_lower_index_and_nan_is_the_largest)
{
    float values[] = {-3.0f, 3.0f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY, 3.0f, -NAN, 2.0f};
    struct topk_pair pairs[10];
    /* The two nans, then the infinities, then the first of the threes. */
    ck_assert(topk_compress(pairs, values, NULL, 10, 5));
    static const uint32_t expected[] = {0, 4, 5, 6, 8};
    for (size_t i = 0; i < 5; i++)
        ck_assert_uint_eq(pairs[i].index, expected[i]);
    /* Zeros and minus zeros tie: the lower indices. */
    float zeros[] = {0.0f, -0.0f, 0.0f, -0.0f};
    ck_assert(topk_compress(pairs, zeros, NULL, 4, 2));
    ck_assert_uint_eq(pairs[0].index, 0);
    ck_assert_uint_eq(pairs[1].index, 1);
    ck_assert(signbit(pairs[1].value));
}
END_TEST

/* Twenty steps of one tensor's error feedback: what was sent plus the residual is the sum of
 * the inputs, exactly, where each compensation is exact (small integers). */
START_TEST(error_feedback_telescopes_over_steps)
{
    size_t count = 1009, k = 17;
    float *input = malloc(count * sizeof *input), *residual = calloc(count, sizeof *residual);
    double *sent = calloc(count, sizeof *sent), *inputs = calloc(count, sizeof *inputs);
    struct topk_pair pairs[17];
    ck_assert(input && residual && sent && inputs);
    for (int step = 0; step < 20; step++) {
        fill(input, count, SMALL_INTS, 500 + (uint64_t)step);
        for (size_t i = 0; i < count; i++)
            inputs[i] += input[i];
        ck_assert(topk_compress(pairs, input, residual, count, k));
        for (size_t j = 0; j < k; j++)
            sent[pairs[j].index] += pairs[j].value;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += sent[i] + residual[i] != inputs[i];
    ck_assert_msg(wrong == 0, "%zu values where sent + residual != the sum of the inputs", wrong);
    free(input);
    free(residual);
    free(sent);
    free(inputs);
}
END_TEST

/* ----- the allreduce ---------------------------------------------------------------------- */

struct topk_job {
    struct thread_fabric *fabric;
    int rank;
    size_t count, k;
    double factor;
    float *result;
    float *residual; /* NULL: no error feedback */
    int step;
    chorus_status status;
};

static void rank_input(float *values, size_t count, int rank, int step)
{
    for (size_t i = 0; i < count; i++)
        values[i] = reference_gradient(1300 + (uint64_t)step, rank, i);
}

static void *run_topk_rank(void *argument)
{
    struct topk_job *job = argument;
    struct transport transport;
    struct scratch scratch = {0};
    transport_threads_init(&transport, job->fabric, job->rank);
    rank_input(job->result, job->count, job->rank, job->step);
    struct topk_scheme scheme = {.k = job->k};
    struct allreduce_args args = {.transport = &transport,
                                  .scratch = &scratch,
                                  .buffer = job->result,
                                  .count = job->count,
                                  .dtype = CHORUS_FLOAT32,
                                  .op = CHORUS_SUM,
                                  .postscale = job->factor != 1.0 ? &job->factor : NULL,
                                  .topk = &scheme,
                                  .error_feedback = job->residual};
    job->status = allreduce_topk(&args);
    scratch_release(&scratch);
    return NULL;
}

/* One configuration over `steps` steps: each step's result against the reference, which keeps
 * every rank's residual itself. */
static void check_allreduce(int nranks, size_t count, double ratio, double factor, bool feedback,
                            int steps)
{
    size_t k = topk_count(count, ratio);
    bool sparse = allreduce_topk_is_sparse(count, k, nranks);
    struct topk_job jobs[5];
    float *expected_residual[5];
    float *compensated = malloc((count + 1) * sizeof(float));
    bool *taken = malloc((count + 1) * sizeof(bool));
    double *sums = malloc((count + 1) * sizeof(double));
    double *magnitudes = malloc((count + 1) * sizeof(double));
    ck_assert(compensated && taken && sums && magnitudes);
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (struct topk_job){.rank = r,
                                    .count = count,
                                    .k = k,
                                    .factor = factor,
                                    .result = malloc((count + 1) * sizeof(float)),
                                    .residual = feedback ? calloc(count + 1, sizeof(float)) : NULL};
        expected_residual[r] = calloc(count + 1, sizeof(float));
    }
    for (int step = 0; step < steps; step++) {
        struct thread_fabric *fabric = thread_fabric_create(nranks);
        pthread_t threads[5];
        for (int r = 0; r < nranks; r++) {
            jobs[r].fabric = fabric;
            jobs[r].step = step;
            pthread_create(&threads[r], NULL, run_topk_rank, &jobs[r]);
        }
        for (int r = 0; r < nranks; r++)
            pthread_join(threads[r], NULL);
        thread_fabric_destroy(fabric);
        /* The reference: each rank's compensated input, its top k by sorting, summed in
         * double in rank order. */
        memset(sums, 0, count * sizeof *sums);
        memset(magnitudes, 0, count * sizeof *magnitudes);
        for (int r = 0; r < nranks; r++) {
            rank_input(compensated, count, r, step);
            for (size_t i = 0; feedback && i < count; i++)
                compensated[i] += expected_residual[r][i];
            reference_top_k(taken, compensated, count, k);
            for (size_t i = 0; i < count; i++) {
                if (taken[i]) {
                    sums[i] += compensated[i];
                    magnitudes[i] += fabs(compensated[i]);
                }
                if (feedback)
                    expected_residual[r][i] = taken[i] ? 0.0f : compensated[i];
            }
        }
        for (int r = 0; r < nranks; r++) {
            ck_assert_int_eq(jobs[r].status, CHORUS_OK);
            ck_assert_msg(memcmp(jobs[r].result, jobs[0].result, count * sizeof(float)) == 0,
                          "%d ranks, %zu values: rank %d differs from rank 0", nranks, count, r);
            if (feedback)
                ck_assert_msg(
                    memcmp(jobs[r].residual, expected_residual[r], count * sizeof(float)) == 0,
                    "%d ranks, %zu values, step %d: rank %d's residual", nranks, count, step, r);
        }
        size_t wrong = 0, first_wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float expected = (float)(sums[i] * factor);
            /* The sparse exchange sums in double in rank order: those bits exactly. The dense
             * ring sums in float32: within its rounding. */
            double slack = nranks * 0x1p-24 * magnitudes[i] * fabs(factor);
            double error = fabs((double)jobs[0].result[i] - (double)expected);
            bool right = sparse ? same_bits(jobs[0].result[i], expected) : error <= slack;
            if (!right && wrong++ == 0)
                first_wrong = i;
        }
        ck_assert_msg(wrong == 0,
                      "%d ranks, %zu values, ratio %g (%s), step %d: %zu wrong, value %zu is "
                      "%.9g, expected %.9g",
                      nranks, count, ratio, sparse ? "sparse" : "dense", step, wrong, first_wrong,
                      count ? (double)jobs[0].result[first_wrong] : 0.0,
                      count ? (double)(float)(sums[first_wrong] * factor) : 0.0);
    }
    for (int r = 0; r < nranks; r++) {
        free(jobs[r].result);
        free(jobs[r].residual);
        free(expected_residual[r]);
    }
    free(compensated);
    free(taken);
    free(sums);
    free(magnitudes);
}

START_TEST(topk_allreduce_is_the_sum_of_what_was_sent_and_the_same_everywhere)
{
    int nranks = _i;
    static const size_t counts[] = {0, 1, 3, 4, 257, 1021, 20011};
    static const double ratios[] = {0.01, 0.1, 1.0};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t j = 0; j < sizeof ratios / sizeof ratios[0]; j++) {
            double factor = (c + j) % 2 ? 1.0 / nranks : 1.0;
            check_allreduce(nranks, counts[c], ratios[j], factor, false, 1);
            check_allreduce(nranks, counts[c], ratios[j], factor, true, 3);
        }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("topk");
    TCase *tc = tcase_create("selection");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, count_is_the_ratio_rounded_up_at_least_one);
    tcase_add_loop_test(tc, selection_matches_sorting_for_every_pattern_and_k, 0, PATTERN_COUNT);
    tcase_add_test(tc, ties_go_to_the_lower_index_and_nan_is_the_largest);
    tcase_add_test(tc, error_feedback_telescopes_over_steps);
    suite_add_tcase(suite, tc);
    TCase *allreduce = tcase_create("allreduce");
    tcase_set_timeout(allreduce, 120);
    tcase_add_loop_test(allreduce,
                        topk_allreduce_is_the_sum_of_what_was_sent_and_the_same_everywhere, 1, 6);
    suite_add_tcase(suite, allreduce);
    return run_suite(suite);
}
