/*
 * mpi_topk.c — float32 allreduces sparsified to each rank's top k (CHORUS_COMPRESSION_TOPK)
 * under mpirun, against a reference every rank computes from every rank's known inputs: each
 * rank's compensated values (input plus the residual the reference keeps for it), its k values
 * of largest magnitude found by sorting (ties to the lower index), summed in double in rank
 * order and rounded once, as chorus.h states. Where chorus.h says the pairs travel
 * (ranks * k < count, or one rank) the result must be those bits exactly; where the sparsified
 * tensor goes through the ring instead, within float32's rounding of its sums. Every rank's
 * result must be the same bits. Counts 0, 1, fewer than ranks, primes; ratios 0.01, 0.1 and 1;
 * sum and average; negotiated, ordered and several at once; with error feedback, whose
 * residual must be the compensated values less what was sent, exactly, and over 20 steps of
 * integer gradients what was sent plus the residual the sum of the gradients, exactly; the
 * ratio from CHORUS_COMPRESSION_TOPK_RATIO where the call gives none; an average while rank 0
 * has joined (its stand-in sends zeros); ranks that disagree on the ratio (mismatch); and bad
 * arguments, refused at submit with a message naming the tensor.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <math.h>

#define MAX_RANKS 64
/* CHORUS_COMPRESSION_TOPK_RATIO, set before init. */
#define DEFAULT_RATIO 0.05

/* Whether every rank's result has the same checksum. */
static bool same_everywhere(const float *values, size_t count)
{
    uint64_t mine = reference_checksum(values, count), all[MAX_RANKS];
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    bool same = true;
    for (int r = 1; r < test_size; r++)
        same &= all[r] == all[0];
    return same;
}

/* k as chorus.h states it: max(1, ceil(ratio * count)), at most count. */
static size_t values_sent(size_t count, double ratio)
{
    if (count == 0)
        return 0;
    size_t k = (size_t)ceil(ratio * (double)count);
    return k < 1 ? 1 : k > count ? count : k;
}

/* Rank `rank`'s input at `step` of a case (seed). */
static float input_value(uint64_t seed, int step, int rank, size_t i)
{
    return reference_gradient(seed * 100 + (uint64_t)step, rank, i);
}

struct topk_case {
    const char *name;
    size_t count;
    double ratio; /* 0: the parameter's */
    chorus_op op;
    uint64_t flags;
    bool feedback;
    int steps;
};

/* Runs the case's steps; checks each result, the residual and agreement between ranks. */
static void check_case(const struct topk_case *test, uint64_t seed)
{
    size_t count = test->count;
    double ratio = test->ratio != 0 ? test->ratio : DEFAULT_RATIO;
    size_t k = values_sent(count, ratio);
    bool sparse = test_size == 1 || (size_t)test_size * k < count;
    double factor = test->op == CHORUS_AVERAGE ? 1.0 / test_size : 1.0;
    float *values = malloc((count + 1) * sizeof *values);
    float *residual = calloc(count + 1, sizeof *residual);
    float *compensated = malloc((count + 1) * sizeof *compensated);
    bool *taken = malloc((count + 1) * sizeof *taken);
    double *sums = malloc((count + 1) * sizeof *sums);
    double *magnitudes = malloc((count + 1) * sizeof *magnitudes);
    /* Every rank's residual as the reference keeps it. */
    float *expected_residual = calloc((size_t)test_size * (count + 1), sizeof(float));
    for (int step = 0; step < test->steps; step++) {
        for (size_t i = 0; i < count; i++)
            values[i] = input_value(seed, step, test_rank, i);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = test->name;
        args.input = floats(values, (int64_t)count);
        args.op = test->op;
        args.flags = test->flags;
        args.compression = CHORUS_COMPRESSION_TOPK;
        args.compression_ratio = test->ratio;
        args.error_feedback = test->feedback ? residual : NULL;
        expect_completes(&args);

        memset(sums, 0, count * sizeof *sums);
        memset(magnitudes, 0, count * sizeof *magnitudes);
        for (int r = 0; r < test_size; r++) {
            float *kept = expected_residual + (size_t)r * (count + 1);
            for (size_t i = 0; i < count; i++)
                compensated[i] = input_value(seed, step, r, i) + (test->feedback ? kept[i] : 0);
            reference_top_k(taken, compensated, count, k);
            for (size_t i = 0; i < count; i++) {
                sums[i] += taken[i] ? compensated[i] : 0.0f;
                magnitudes[i] += taken[i] ? fabs(compensated[i]) : 0.0;
                kept[i] = taken[i] ? 0.0f : compensated[i];
            }
        }
        long wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float expected = (float)(sums[i] * factor);
            bool right = sparse ? memcmp(&values[i], &expected, sizeof expected) == 0
                                : fabs((double)values[i] - expected) <=
                                      test_size * 0x1p-24 * magnitudes[i] * factor;
            if (!right && wrong++ == 0)
                EXPECT(0, "%s (%zu values, k %zu, %s), step %d: value %zu is %.9g, expected %.9g",
                       test->name, count, k, sparse ? "sparse" : "dense", step, i,
                       (double)values[i], (double)expected);
        }
        EXPECT(wrong == 0, "%s, step %d: %ld values wrong", test->name, step, wrong);
        if (test->feedback)
            EXPECT(memcmp(residual, expected_residual + (size_t)test_rank * (count + 1),
                          count * sizeof *residual) == 0,
                   "%s, step %d: the residual is not the compensated values less those sent",
                   test->name, step);
        EXPECT(same_everywhere(values, count), "%s, step %d: results differ between ranks",
               test->name, step);
    }
    free(values);
    free(residual);
    free(compensated);
    free(taken);
    free(sums);
    free(magnitudes);
    free(expected_residual);
}

static void check_counts(double ratio, chorus_op op, uint64_t flags, bool feedback)
{
    size_t counts[] = {0, 1, (size_t)test_size - 1, 7, 1021, 20011};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        char name[96];
        snprintf(name, sizeof name, "topk.%g.%s.%s.%s.%zu", ratio, chorus_op_name(op),
                 flags ? "ordered" : "negotiated", feedback ? "feedback" : "plain", counts[c]);
        struct topk_case test = {name, counts[c], ratio, op, flags, feedback, feedback ? 3 : 1};
        check_case(&test, 10 + c);
    }
}

/* Twenty steps of integer gradients with error feedback: every compensation is exact, so
 * what this rank sent (its compensated values less the residual) plus the last residual is
 * the sum of its gradients, exactly. */
static void check_telescoping(void)
{
    enum { STEPS = 20, COUNT = 3001 };
    static float values[COUNT], residual[COUNT];
    static double sent_total[COUNT], gradient_total[COUNT];
    for (int step = 0; step < STEPS; step++) {
        float compensated[COUNT];
        for (size_t i = 0; i < COUNT; i++) {
            values[i] =
                (float)((int)(test_random(90 + (uint64_t)step, test_rank, i) % 2001) - 1000);
            gradient_total[i] += values[i];
            compensated[i] = values[i] + residual[i];
        }
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = "telescoping";
        args.input = floats(values, COUNT);
        args.compression = CHORUS_COMPRESSION_TOPK;
        args.compression_ratio = 0.01;
        args.error_feedback = residual;
        expect_completes(&args);
        long sent = 0;
        for (size_t i = 0; i < COUNT; i++) {
            sent_total[i] += compensated[i] - residual[i];
            sent += residual[i] == 0 && compensated[i] != 0;
        }
        EXPECT(sent <= 31, "telescoping, step %d: %ld values left the residual, k is 31", step,
               sent);
    }
    long wrong = 0;
    for (size_t i = 0; i < COUNT; i++)
        wrong += sent_total[i] + residual[i] != gradient_total[i];
    EXPECT(wrong == 0, "telescoping: %ld values where sent + residual != gradients", wrong);
}

/* Several submitted at once, each its own top k. */
static void check_several_at_once(void)
{
    enum { MEMBERS = 4, COUNT = 997 };
    static float values[MEMBERS][COUNT];
    chorus_handle *handles[MEMBERS];
    char names[MEMBERS][32];
    size_t k = values_sent(COUNT, 0.1);
    for (int m = 0; m < MEMBERS; m++) {
        for (size_t i = 0; i < COUNT; i++)
            values[m][i] = input_value(60 + (uint64_t)m, 0, test_rank, i);
        snprintf(names[m], sizeof names[m], "several.%d", m);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = names[m];
        args.input = floats(values[m], COUNT);
        args.compression = CHORUS_COMPRESSION_TOPK;
        args.compression_ratio = 0.1;
        EXPECT_STATUS(chorus_submit(&args, &handles[m]), CHORUS_OK);
    }
    float compensated[COUNT];
    bool taken[COUNT];
    for (int m = 0; m < MEMBERS; m++) {
        EXPECT_STATUS(chorus_wait(handles[m]), CHORUS_OK);
        chorus_handle_free(handles[m]);
        double sums[COUNT] = {0};
        for (int r = 0; r < test_size; r++) {
            for (size_t i = 0; i < COUNT; i++)
                compensated[i] = input_value(60 + (uint64_t)m, 0, r, i);
            reference_top_k(taken, compensated, COUNT, k);
            for (size_t i = 0; i < COUNT; i++)
                sums[i] += taken[i] ? compensated[i] : 0.0f;
        }
        long wrong = 0;
        for (size_t i = 0; i < COUNT; i++)
            wrong += !(fabs(values[m][i] - sums[i]) <= test_size * 0x1p-23 * fabs(sums[i]));
        EXPECT(wrong == 0, "several.%d: %ld values wrong", m, wrong);
        EXPECT(same_everywhere(values[m], COUNT), "several.%d differs between ranks", m);
    }
}

/* Submits `args` and expects the refusal, its message naming the tensor and `says`. */
static void expect_refused(const chorus_op_args *args, chorus_status status, const char *says)
{
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit(args, &handle), status);
    EXPECT(strstr(chorus_last_error(), args->name) != NULL &&
               strstr(chorus_last_error(), says) != NULL,
           "%s: message \"%s\" does not say \"%s\"", args->name, chorus_last_error(), says);
}

static void check_bad_arguments(void)
{
    float values[16] = {0}, residual[16] = {0};
    double doubles[16] = {0};
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "bad.ratio";
    args.input = floats(values, 16);
    args.compression = CHORUS_COMPRESSION_TOPK;
    const double bad_ratios[] = {1.5, -0.1, NAN};
    for (size_t i = 0; i < 3; i++) {
        args.compression_ratio = bad_ratios[i];
        expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "compression_ratio is");
    }
    args.compression_ratio = 0.5;
    args.name = "bad.op";
    args.op = CHORUS_MAX;
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "topk compression takes sum or average");
    args.op = CHORUS_SUM;
    args.name = "bad.ratio.int8";
    args.compression = CHORUS_COMPRESSION_INT8;
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "compression_ratio is for topk");
    args.compression_ratio = 0;
    args.name = "bad.feedback.none";
    args.compression = CHORUS_COMPRESSION_NONE;
    args.error_feedback = residual;
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "error_feedback needs a lossy compression");
    args.name = "bad.feedback.overlap";
    args.compression = CHORUS_COMPRESSION_TOPK;
    args.error_feedback = values + 8;
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "error_feedback buffer overlaps the input");
    args.name = "bad.feedback.float64";
    args.error_feedback = residual;
    args.input =
        (chorus_tensor){.data = doubles, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {16}};
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "error_feedback takes float32, float16 or bfloat16 tensors");
    args.name = "bad.broadcast";
    args.collective = CHORUS_BROADCAST;
    args.compression = CHORUS_COMPRESSION_DEFAULT;
    args.input = floats(values, 16);
    expect_refused(&args, CHORUS_ERR_INVALID_ARGUMENT, "are for allreduces");
}

/* Ranks that give different ratios fail on every rank with the mismatch message. */
static void check_ratio_mismatch(void)
{
    float value[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "topk.disagree";
    args.input = floats(value, 8);
    args.compression = CHORUS_COMPRESSION_TOPK;
    args.compression_ratio = test_rank == 0 ? 0.25 : 0.5;
    for (int ordered = 0; ordered < 2; ordered++) {
        args.flags = ordered ? CHORUS_OP_ORDERED : 0;
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_handle_error(handle), "compression ratio mismatch") != NULL &&
                   strstr(chorus_handle_error(handle), "0.25") != NULL,
               "%s: message: %s", ordered ? "ordered" : "negotiated", chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
}

/* Rank 0 joins at once; the others average their top k without it (its stand-in sends zeros,
 * and the average divides by the ranks that contributed), then join too. */
static void check_with_a_joined_rank(void)
{
    enum { COUNT = 1009 };
    static float values[COUNT], compensated[COUNT];
    static bool taken[COUNT];
    static double sums[COUNT];
    size_t k = values_sent(COUNT, 0.1);
    if (test_rank != 0) {
        for (size_t i = 0; i < COUNT; i++)
            values[i] = input_value(70, 0, test_rank, i);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = "joined.average";
        args.input = floats(values, COUNT);
        args.op = CHORUS_AVERAGE;
        args.compression = CHORUS_COMPRESSION_TOPK;
        args.compression_ratio = 0.1;
        expect_completes(&args);
    }
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
    if (test_rank == 0)
        return;
    for (int r = 1; r < test_size; r++) {
        for (size_t i = 0; i < COUNT; i++)
            compensated[i] = input_value(70, 0, r, i);
        reference_top_k(taken, compensated, COUNT, k);
        for (size_t i = 0; i < COUNT; i++)
            sums[i] += taken[i] ? compensated[i] : 0.0f;
    }
    long wrong = 0;
    for (size_t i = 0; i < COUNT; i++) {
        float expected = (float)(sums[i] * (1.0 / (test_size - 1)));
        wrong += memcmp(&values[i], &expected, sizeof expected) != 0;
    }
    EXPECT(wrong == 0, "joined.average: %ld values differ from the contributors' top k", wrong);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    if (test_size > MAX_RANKS)
        return 77;
    setenv("CHORUS_COMPRESSION_TOPK_RATIO", "0.05", 1);
    test_init_chorus();

    test_step = "negotiated";
    check_counts(0.01, CHORUS_SUM, 0, false);
    check_counts(0.1, CHORUS_AVERAGE, 0, false);
    check_counts(1.0, CHORUS_SUM, 0, false);
    check_counts(0, CHORUS_AVERAGE, 0, false); /* CHORUS_COMPRESSION_TOPK_RATIO's 0.05 */
    test_step = "error feedback";
    check_counts(0.01, CHORUS_AVERAGE, 0, true);
    check_counts(0.1, CHORUS_SUM, 0, true);
    check_telescoping();
    test_step = "ordered";
    check_counts(0.1, CHORUS_SUM, CHORUS_OP_ORDERED, true);
    test_step = "several at once";
    check_several_at_once();
    test_step = "bad arguments";
    check_bad_arguments();
    if (test_size > 1) {
        test_step = "ratio mismatch";
        check_ratio_mismatch();
        test_step = "a joined rank";
        check_with_a_joined_rank();
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_topk");
}
