/*
 * mpi_quantized.c — float32 allreduces in 8 and 4 bits (CHORUS_COMPRESSION_INT8, INT4) under
 * mpirun, against a sum in double that every rank computes from every rank's known inputs, within
 * the bound chorus.h states: S/2 + |f| * (s_1 + ... + s_n)/2 per value for rounding to nearest
 * (twice that for stochastic rounding, CHORUS_COMPRESSION_ROUNDING=stochastic), with S the scale
 * of the result's block (its range over 2^bits - 1) and s_k that of rank k's block of 256 values.
 * Every rank's result must be the same bits (a checksum allgathered over MPI). Counts 0, 1, fewer
 * than ranks, primes, partial blocks and 100003; sum and average; negotiated, fused, ordered, in a
 * process set and with a joined rank; CHORUS_COMPRESSION=int8 as the default (and other ops then
 * travel exact); a nan poisoning its block only; ranks that disagree on the compression
 * (mismatch); an op that cannot be quantized (refused at submit); and error feedback
 * (chorus_op_args.error_feedback): over 30 steps, INT8 and INT4, sum and average, the results
 * plus the residuals add up to the gradients, and without it they drift further; refused where
 * it cannot apply; float16 and bfloat16 tensors through the float32 path.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <math.h>

#define BLOCK REFERENCE_QUANTIZED_BLOCK
#define MAX_RANKS 64

static bool stochastic(void)
{
    const char *rounding = getenv("CHORUS_COMPRESSION_ROUNDING");
    return rounding != NULL && strcmp(rounding, "stochastic") == 0;
}

/* Whether every member's result has the same checksum. Every rank of the job calls it. */
static bool same_on_members(const float *values, size_t count, bool member)
{
    uint64_t mine[2] = {member, member ? reference_checksum(values, count) : 0};
    uint64_t all[2 * MAX_RANKS];
    MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD);
    uint64_t first = 0;
    bool seen = false, same = true;
    for (int r = 0; r < test_size; r++) {
        if (!all[2 * r])
            continue;
        same &= !seen || all[2 * r + 1] == first;
        first = all[2 * r + 1];
        seen = true;
    }
    return same;
}

struct quantized_case {
    const char *name;
    chorus_compression compression; /* INT8, INT4, or DEFAULT (CHORUS_COMPRESSION=int8) */
    size_t count;
    chorus_op op;
    uint64_t flags;
    int process_set; /* 0, or the set of `members` */
    const int *members;
    int member_count;
};

/* Whether this rank is one of the case's members. */
static bool is_member(const struct quantized_case *test)
{
    bool member = false;
    for (int m = 0; m < test->member_count; m++)
        member |= test->members[m] == test_rank;
    return member;
}

/* A member submits the case over `values`, filled with its gradient, and waits for it. */
static void submit_case(const struct quantized_case *test, uint64_t seed, float *values)
{
    for (size_t i = 0; i < test->count; i++)
        values[i] = reference_gradient(seed, test_rank, i);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = test->name;
    args.input = floats(values, (int64_t)test->count);
    args.op = test->op;
    args.compression = test->compression;
    args.flags = test->flags;
    args.process_set = test->process_set;
    expect_completes(&args);
}

/* A member checks each value of its result within its bound. */
static void check_result(const struct quantized_case *test, uint64_t seed, const float *values)
{
    unsigned bits = test->compression == CHORUS_COMPRESSION_INT4 ? 4 : 8;
    double factor = test->op == CHORUS_AVERAGE ? 1.0 / test->member_count : 1.0;
    long wrong = 0, inexact = 0;
    double bound = 0;
    for (size_t i = 0; i < test->count; i++) {
        double expected = 0;
        for (int m = 0; m < test->member_count; m++)
            expected += reference_gradient(seed, test->members[m], i);
        expected *= factor;
        if (i % BLOCK == 0) /* the same for the whole block */
            bound = reference_quantized_bound(values, test->count, i, test->members,
                                              test->member_count, seed, bits, stochastic(),
                                              factor);
        if (!(fabs(values[i] - expected) <= bound) && wrong++ == 0)
            EXPECT(0, "%s (%zu values): value %zu is %.9g, expected %.9g within %g", test->name,
                   test->count, i, (double)values[i], expected, bound);
        inexact += fabs(values[i] - expected) > 1e-5 * fabs(expected);
    }
    EXPECT(wrong == 0, "%s: %ld values outside the bound", test->name, wrong);
    /* It was quantized, not sent exact (a lone value per block would come back exact). */
    EXPECT(test->count < 7 || inexact > 0, "%s: every value exact", test->name);
}

/* Runs the case on its members and checks it; every rank of the job takes part in comparing
 * the members' results. */
static void check_case(const struct quantized_case *test, uint64_t seed)
{
    bool member = is_member(test);
    float *values = malloc((test->count + 1) * sizeof *values);
    if (member) {
        submit_case(test, seed, values);
        check_result(test, seed, values);
    }
    EXPECT(same_on_members(values, test->count, member), "%s: results differ between ranks",
           test->name);
    free(values);
}

/* Rank 0 joins at once; the others average without it (its stand-in contributes zeros and the
 * average divides by the ranks that contributed), then join too. */
static void check_with_a_joined_rank(const int *everyone)
{
    struct quantized_case test = {"joined.average", CHORUS_COMPRESSION_INT8, 3 * BLOCK + 11,
                                  CHORUS_AVERAGE, 0, 0, everyone + 1, test_size - 1};
    bool member = is_member(&test);
    float values[3 * BLOCK + 11];
    if (member)
        submit_case(&test, 80, values);
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
    if (member)
        check_result(&test, 80, values);
    EXPECT(same_on_members(values, test.count, member), "joined.average differs between ranks");
}

static void check_counts(chorus_compression compression, chorus_op op, uint64_t flags,
                         const int *everyone)
{
    size_t counts[] = {0, 1, (size_t)test_size - 1, 7, BLOCK + 1, 1021, 5 * BLOCK + 3, 100003};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        char name[96];
        snprintf(name, sizeof name, "%s.%s.%s.%zu", compression == CHORUS_COMPRESSION_INT4 ? "int4"
                 : compression == CHORUS_COMPRESSION_INT8 ? "int8" : "default",
                 chorus_op_name(op), flags ? "ordered" : "negotiated", counts[c]);
        struct quantized_case test = {name, compression, counts[c], op, flags, 0, everyone,
                                      test_size};
        check_case(&test, 10 + c);
    }
}

/* Several quantized tensors submitted together are fused, and each is still its own. */
static void check_fused(const int *everyone)
{
    enum { MEMBERS = 5, COUNT = 700 };
    float values[MEMBERS][COUNT];
    chorus_handle *handles[MEMBERS];
    char names[MEMBERS][32];
    for (int m = 0; m < MEMBERS; m++) {
        for (size_t i = 0; i < COUNT; i++)
            values[m][i] = reference_gradient(50 + (uint64_t)m, test_rank, i);
        snprintf(names[m], sizeof names[m], "fused.%d", m);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = names[m];
        args.input = floats(values[m], COUNT);
        args.op = CHORUS_AVERAGE;
        args.compression = CHORUS_COMPRESSION_INT8;
        EXPECT_STATUS(chorus_submit(&args, &handles[m]), CHORUS_OK);
    }
    for (int m = 0; m < MEMBERS; m++) {
        EXPECT_STATUS(chorus_wait(handles[m]), CHORUS_OK);
        chorus_handle_free(handles[m]);
        long wrong = 0;
        double bound = 0;
        for (size_t i = 0; i < COUNT; i++) {
            double expected = 0;
            for (int r = 0; r < test_size; r++)
                expected += reference_gradient(50 + (uint64_t)m, r, i);
            expected /= test_size;
            if (i % BLOCK == 0)
                bound = reference_quantized_bound(values[m], COUNT, i, everyone, test_size,
                                                  50 + (uint64_t)m, 8, stochastic(),
                                                  1.0 / test_size);
            wrong += !(fabs(values[m][i] - expected) <= bound);
        }
        EXPECT(wrong == 0, "fused.%d: %ld values outside the bound", m, wrong);
        EXPECT(same_on_members(values[m], COUNT, true), "fused.%d differs between ranks", m);
    }
}

/* A nan on the last rank turns its block of the result into nans on every rank, and no other
 * block. */
static void check_nan_poisons_its_block(void)
{
    enum { COUNT = 3 * BLOCK };
    float values[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        values[i] = reference_gradient(60, test_rank, i);
    if (test_rank == test_size - 1)
        values[BLOCK + 17] = NAN;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "nan.block";
    args.input = floats(values, COUNT);
    args.compression = CHORUS_COMPRESSION_INT4;
    expect_completes(&args);
    long wrong = 0;
    for (size_t i = 0; i < COUNT; i++)
        wrong += (i / BLOCK == 1) != (bool)isnan(values[i]);
    EXPECT(wrong == 0, "nan.block: %ld values where a nan should be or should not", wrong);
    EXPECT(same_on_members(values, COUNT, true), "nan.block differs between ranks");
}

/* One run of error feedback: STEPS steps of fresh gradients through one tensor, with the
 * library's residual (`residual` non-NULL) or without; `results` accumulates what came back
 * (double). Each step's result must be the same bits on every rank. `largest` gathers the
 * largest magnitude of a compensated contribution or a residual, for the rounding bound. */
enum { FEEDBACK_STEPS = 30, FEEDBACK_COUNT = 5 * BLOCK + 3 };

static void run_feedback_steps(const char *name, chorus_compression compression, chorus_op op,
                               uint64_t flags, float *residual, double *results, double *largest)
{
    float values[FEEDBACK_COUNT];
    memset(results, 0, FEEDBACK_COUNT * sizeof *results);
    for (int step = 0; step < FEEDBACK_STEPS; step++) {
        for (size_t i = 0; i < FEEDBACK_COUNT; i++) {
            values[i] = reference_gradient(100 + (uint64_t)step, test_rank, i);
            if (residual != NULL)
                *largest = fmax(*largest, fabs((double)(values[i] + residual[i])));
        }
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = name;
        args.input = floats(values, FEEDBACK_COUNT);
        args.op = op;
        args.compression = compression;
        args.flags = flags;
        args.error_feedback = residual;
        expect_completes(&args);
        for (size_t i = 0; i < FEEDBACK_COUNT; i++) {
            results[i] += values[i];
            if (residual != NULL)
                *largest = fmax(*largest, fabs((double)residual[i]));
        }
        EXPECT(same_on_members(values, FEEDBACK_COUNT, true), "%s: step %d differs between ranks",
               name, step);
    }
}

/* Error feedback kept by the library (chorus_op_args.error_feedback): over the steps, the sum
 * of the results plus f times every rank's last residual is f times the sum of every rank's
 * gradients (f: 1 for SUM, 1/ranks for AVERAGE), within float32 rounding: each step rounds, per
 * rank, the compensated contribution x + e, the new residual c - d and (the shard's owner) the
 * folded e' + g, half an ulp each of a magnitude at most M, the largest of them seen on any rank:
 * |f| * steps * 3 * ranks * 2^-24 * M. A missing fold of the sum's quantization error alone
 * would be off by about half a scale of the sum's block per step (2^-9 of its range at 8 bits),
 * far beyond. Without error feedback, the errors of the steps add up: the accumulated result is
 * at least twice as far (rms) from the accumulated true sum. Negotiated or ordered (`flags`),
 * whose residual travels through the lane. */
static void check_error_feedback(chorus_compression compression, chorus_op op, uint64_t flags)
{
    char name[64], plain_name[64];
    const char *bits = compression == CHORUS_COMPRESSION_INT4 ? "int4" : "int8";
    const char *kind = flags ? "ordered" : "negotiated";
    snprintf(name, sizeof name, "feedback.%s.%s.%s", bits, chorus_op_name(op), kind);
    snprintf(plain_name, sizeof plain_name, "no.feedback.%s.%s.%s", bits, chorus_op_name(op),
             kind);
    double factor = op == CHORUS_AVERAGE ? 1.0 / test_size : 1.0;
    static float residual[FEEDBACK_COUNT];
    static double results[FEEDBACK_COUNT], plain[FEEDBACK_COUNT], residuals[FEEDBACK_COUNT];
    memset(residual, 0, sizeof residual);
    double largest = 0, unused = 0;
    run_feedback_steps(name, compression, op, flags, residual, results, &largest);
    run_feedback_steps(plain_name, compression, op, flags, NULL, plain, &unused);
    for (size_t i = 0; i < FEEDBACK_COUNT; i++)
        residuals[i] = residual[i];
    MPI_Allreduce(MPI_IN_PLACE, residuals, FEEDBACK_COUNT, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double bound = factor * FEEDBACK_STEPS * 3 * test_size * ldexp(largest, -24);
    long wrong = 0, nonzero = 0;
    double feedback_error = 0, plain_error = 0;
    for (size_t i = 0; i < FEEDBACK_COUNT; i++) {
        double truth = 0;
        for (int step = 0; step < FEEDBACK_STEPS; step++)
            for (int r = 0; r < test_size; r++)
                truth += reference_gradient(100 + (uint64_t)step, r, i);
        truth *= factor;
        double off = results[i] + factor * residuals[i] - truth;
        if (!(fabs(off) <= bound) && wrong++ == 0)
            EXPECT(0, "%s: value %zu: results %.9g + f * residuals %.9g is off the gradients' "
                      "%.9g by %.3g (bound %.3g)",
                   name, i, results[i], factor * residuals[i], truth, off, bound);
        nonzero += residual[i] != 0.0f;
        feedback_error += (results[i] - truth) * (results[i] - truth);
        plain_error += (plain[i] - truth) * (plain[i] - truth);
    }
    EXPECT(wrong == 0, "%s: %ld values break sum(results) + f * sum(residuals) == f * sum(inputs)",
           name, wrong);
    EXPECT(nonzero > FEEDBACK_COUNT / 2, "%s: only %ld residuals are nonzero", name, nonzero);
    feedback_error = sqrt(feedback_error / FEEDBACK_COUNT);
    plain_error = sqrt(plain_error / FEEDBACK_COUNT);
    if (test_rank == 0)
        printf("%s: rms error of the accumulated result %.3g with error feedback, %.3g "
               "without (ratio %.1f), bound %.3g\n",
               name, feedback_error, plain_error, plain_error / feedback_error, bound);
    EXPECT(2 * feedback_error < plain_error,
           "%s: error feedback does not help: rms error %.3g with, %.3g without", name,
           feedback_error, plain_error);
}

/* Error feedback's edges: a postscale of 0 (results zero, the residual the rank's own finite
 * quantization error); a nan in rank 0's first block (that block of the result nan everywhere;
 * rank 0's residual kept there as it was, the other ranks', whose contributions were finite,
 * rewritten and finite, the fold of the nan sum left out). */
static void check_error_feedback_edges(void)
{
    enum { COUNT = 2 * BLOCK };
    static float values[COUNT], residual[COUNT];
    for (size_t i = 0; i < COUNT; i++) {
        values[i] = reference_gradient(90, test_rank, i);
        residual[i] = 0.25f;
    }
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "feedback.postscale0";
    args.input = floats(values, COUNT);
    args.compression = CHORUS_COMPRESSION_INT8;
    args.postscale_factor = 0.0;
    args.error_feedback = residual;
    expect_completes(&args);
    long wrong = 0, changed = 0;
    for (size_t i = 0; i < COUNT; i++) {
        wrong += values[i] != 0.0f || !isfinite(residual[i]);
        changed += residual[i] != 0.25f;
    }
    EXPECT(wrong == 0 && changed > COUNT / 2,
           "postscale 0: %ld values wrong, %ld residuals changed", wrong, changed);

    for (size_t i = 0; i < COUNT; i++) {
        values[i] = reference_gradient(91, test_rank, i);
        residual[i] = 0.25f;
    }
    if (test_rank == 0)
        values[3] = NAN;
    args.name = "feedback.nan";
    args.postscale_factor = 1.0;
    expect_completes(&args);
    long nans = 0, kept = 0, rewritten = 0;
    for (size_t i = 0; i < COUNT; i++) {
        nans += i < BLOCK && isnan(values[i]);
        kept += i < BLOCK && residual[i] == 0.25f;
        rewritten += (i >= BLOCK || test_rank != 0) && residual[i] != 0.25f &&
                     isfinite(residual[i]);
    }
    EXPECT(nans == BLOCK && kept == (test_rank == 0 ? BLOCK : 0) &&
               rewritten == (test_rank == 0 ? BLOCK : COUNT),
           "nan: %ld nans in the result's first block, %ld residuals kept there, %ld rewritten",
           nans, kept, rewritten);
}

/* Error feedback where it cannot apply: refused, naming the tensor, or (DEFAULT resolved to no
 * compression) left untouched; the layout before error_feedback ignores the field. */
static void check_error_feedback_refused(void)
{
    float values[9], residual[9], wide[18];
    for (size_t i = 0; i < 9; i++)
        values[i] = (float)i;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "feedback.refused";
    args.input = floats(values, 9);
    args.error_feedback = residual;
    chorus_handle *handle = NULL;
    const chorus_compression exact[] = {CHORUS_COMPRESSION_NONE, CHORUS_COMPRESSION_FP16,
                                        CHORUS_COMPRESSION_BF16};
    for (size_t c = 0; c < sizeof exact / sizeof exact[0]; c++) {
        args.compression = exact[c];
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "\"feedback.refused\": error_feedback needs a lossy") !=
                   NULL,
               "message: %s", chorus_last_error());
    }
    args.compression = CHORUS_COMPRESSION_INT8;
    args.collective = CHORUS_BROADCAST;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "broadcast \"feedback.refused\": error_feedback and "
                                       "compression_ratio are for allreduces") != NULL,
           "message: %s", chorus_last_error());
    args.collective = CHORUS_ALLREDUCE;
    args.input.dtype = CHORUS_INT32;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "error_feedback takes float32, float16 or bfloat16 tensors") != NULL,
           "message: %s", chorus_last_error());
    args.input.dtype = CHORUS_FLOAT32;
    args.error_feedback = values + 8; /* overlaps the input's last value */
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "error_feedback buffer overlaps the input") != NULL,
           "message: %s", chorus_last_error());
    args.output = wide;
    args.error_feedback = wide + 5;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "error_feedback buffer overlaps the output") != NULL,
           "message: %s", chorus_last_error());
    args.error_feedback = wide + 9; /* right after the output: apart */
    expect_completes(&args);

    /* DEFAULT (CHORUS_COMPRESSION=int8 here) with an op it does not quantize: exact, and the
     * residual untouched. */
    args.output = NULL;
    args.error_feedback = residual;
    args.compression = CHORUS_COMPRESSION_DEFAULT;
    args.op = CHORUS_MAX;
    for (size_t i = 0; i < 9; i++) {
        values[i] = (float)i + 0.1f * (float)test_rank;
        residual[i] = 7.0f;
    }
    expect_completes(&args);
    long changed = 0;
    for (size_t i = 0; i < 9; i++)
        changed += residual[i] != 7.0f || values[i] != (float)i + 0.1f * (float)(test_size - 1);
    EXPECT(changed == 0, "default.max with error_feedback: %ld values changed", changed);

    /* A caller built before the field: whatever lies there is not read. */
    args.op = CHORUS_SUM;
    args.compression = CHORUS_COMPRESSION_INT8;
    args.struct_size = offsetof(chorus_op_args, error_feedback);
    args.error_feedback = values; /* would be refused, were it read */
    expect_completes(&args);
}

/* CHORUS_COMPRESSION_ONE_HOST=off (the default), with every rank on one host: a compressed
 * allreduce travels exact, the same bits as an uncompressed one, its residual untouched. */
static int run_one_host_exact(void)
{
    setenv("CHORUS_COMPRESSION_ONE_HOST", "off", 1);
    test_init_chorus();
    test_step = "one host: compression declined";
    enum { COUNT = 1031 };
    static float exact[COUNT], asked[COUNT], residual[COUNT];
    const chorus_compression kinds[] = {CHORUS_COMPRESSION_INT8, CHORUS_COMPRESSION_INT4,
                                        CHORUS_COMPRESSION_TOPK, CHORUS_COMPRESSION_FP16};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (size_t i = 0; i < COUNT; i++) {
            exact[i] = asked[i] = reference_gradient(70 + k, test_rank, i);
            residual[i] = 0.5f;
        }
        char exact_name[32], asked_name[32];
        snprintf(exact_name, sizeof exact_name, "one_host.exact.%zu", k);
        snprintf(asked_name, sizeof asked_name, "one_host.asked.%zu", k);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = exact_name;
        args.input = floats(exact, COUNT);
        args.compression = CHORUS_COMPRESSION_NONE;
        expect_completes(&args);
        args.name = asked_name;
        args.input = floats(asked, COUNT);
        args.compression = kinds[k];
        args.compression_ratio = kinds[k] == CHORUS_COMPRESSION_TOPK ? 0.01 : 0.0;
        args.error_feedback = kinds[k] != CHORUS_COMPRESSION_FP16 ? residual : NULL;
        expect_completes(&args);
        long differ = 0, touched = 0;
        for (size_t i = 0; i < COUNT; i++) {
            differ += memcmp(&exact[i], &asked[i], sizeof exact[i]) != 0;
            touched += residual[i] != 0.5f;
        }
        EXPECT(differ == 0 && touched == 0,
               "compression %d on one host: %ld values differ from the exact allreduce, %ld "
               "residual values touched",
               (int)kinds[k], differ, touched);
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("quantized one host");
}

/* float16 and bfloat16 tensors are compressed from float32 (INT8, INT4, TOPK): each result is
 * the float32 allreduce of the same values (the 16-bit inputs, widened), under the same name,
 * rounded to 16 bits (within half a unit in the last place of the 16-bit format), and an error
 * feedback residual is the float32 one's, bit for bit. The float32 path itself is checked
 * against the double sum above. */
static void check_sixteen_bit_inputs(void)
{
    const chorus_dtype dtypes[] = {CHORUS_FLOAT16, CHORUS_BFLOAT16};
    const chorus_compression compressions[] = {CHORUS_COMPRESSION_INT8, CHORUS_COMPRESSION_INT4,
                                               CHORUS_COMPRESSION_TOPK};
    const size_t counts[] = {0, 1, 3, 257, 1031};
    enum { MOST = 1031 };
    uint16_t sixteen[MOST];
    float wide[MOST], residual16[MOST], residual32[MOST];
    for (size_t d = 0; d < 2; d++)
        for (size_t c = 0; c < 3; c++)
            for (size_t n = 0; n < sizeof counts / sizeof counts[0]; n++) {
                size_t count = counts[n];
                bool feedback = (n + c) % 2 == 0;
                chorus_op op = n % 2 ? CHORUS_AVERAGE : CHORUS_SUM;
                uint64_t seed = 300 + 10 * d + c;
                reference_fill(sixteen, count, dtypes[d], CHORUS_SUM, seed, test_rank);
                for (size_t i = 0; i < count; i++)
                    wide[i] = (float)reference_decode(sixteen, i, dtypes[d]);
                memset(residual16, 0, sizeof residual16);
                memset(residual32, 0, sizeof residual32);
                char name[64];
                snprintf(name, sizeof name, "sixteen.%s.%s.%zu", chorus_dtype_name(dtypes[d]),
                         c == 0 ? "int8" : c == 1 ? "int4" : "topk", count);
                chorus_op_args args = CHORUS_OP_ARGS_INIT;
                args.name = name;
                args.input = floats(wide, (int64_t)count);
                args.op = op;
                args.compression = compressions[c];
                args.error_feedback = feedback ? residual32 : NULL;
                expect_completes(&args);
                args.input = (chorus_tensor){.data = sixteen, .dtype = dtypes[d], .ndims = 1,
                                             .shape = {(int64_t)count}};
                args.error_feedback = feedback ? residual16 : NULL;
                expect_completes(&args);
                double half_ulp = dtypes[d] == CHORUS_FLOAT16 ? 0x1p-11 : 0x1p-8;
                long wrong = 0;
                for (size_t i = 0; i < count; i++) {
                    double got = reference_decode(sixteen, i, dtypes[d]);
                    double slack = half_ulp * fabs((double)wide[i]) + 0x1p-25;
                    if (!(fabs(got - (double)wide[i]) <= slack) && wrong++ == 0)
                        EXPECT(0, "%s: value %zu is %.9g, float32's %.9g", name, i, got,
                               (double)wide[i]);
                }
                EXPECT(!feedback || memcmp(residual16, residual32, count * sizeof(float)) == 0,
                       "%s: the residual differs from float32's", name);
                bool any_residual = false;
                for (size_t i = 0; i < count; i++)
                    any_residual |= residual16[i] != 0;
                EXPECT(count < 7 || !feedback || any_residual,
                       "%s: no residual: it was not compressed", name);
            }
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 300);
    if (test_size > MAX_RANKS)
        return 77;
    if (argc > 1 && strcmp(argv[1], "one-host") == 0)
        return run_one_host_exact();
    setenv("CHORUS_COMPRESSION", "int8", 1);
    test_init_chorus();
    int everyone[MAX_RANKS];
    for (int r = 0; r < test_size; r++)
        everyone[r] = r;

    test_step = "negotiated";
    check_counts(CHORUS_COMPRESSION_INT8, CHORUS_SUM, 0, everyone);
    check_counts(CHORUS_COMPRESSION_INT4, CHORUS_AVERAGE, 0, everyone);
    check_counts(CHORUS_COMPRESSION_DEFAULT, CHORUS_SUM, 0, everyone);
    test_step = "ordered";
    check_counts(CHORUS_COMPRESSION_INT4, CHORUS_SUM, CHORUS_OP_ORDERED, everyone);
    check_counts(CHORUS_COMPRESSION_INT8, CHORUS_AVERAGE, CHORUS_OP_ORDERED, everyone);
    test_step = "fused";
    check_fused(everyone);

    test_step = "a process set";
    int even[MAX_RANKS], even_count = 0, even_set = 0;
    for (int r = 0; r < test_size; r += 2)
        even[even_count++] = r;
    EXPECT_STATUS(chorus_process_set_add(even, even_count, &even_set), CHORUS_OK);
    struct quantized_case in_set[] = {
        {"set.int8.sum", CHORUS_COMPRESSION_INT8, 2003, CHORUS_SUM, 0, even_set, even, even_count},
        {"set.int4.average", CHORUS_COMPRESSION_INT4, 2003, CHORUS_AVERAGE, CHORUS_OP_ORDERED,
         even_set, even, even_count},
    };
    for (size_t c = 0; c < sizeof in_set / sizeof in_set[0]; c++)
        check_case(&in_set[c], 40 + c);
    EXPECT_STATUS(chorus_process_set_remove(even_set), CHORUS_OK);

    test_step = "nan";
    check_nan_poisons_its_block();

    test_step = "the default leaves other ops exact";
    float largest = (float)test_rank + 0.123456789f;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "default.max";
    args.input = floats(&largest, 1);
    args.op = CHORUS_MAX;
    expect_completes(&args);
    EXPECT(largest == (float)(test_size - 1) + 0.123456789f, "max travelled quantized: %.9g",
           (double)largest);

    test_step = "an op that cannot be quantized";
    args.name = "int8.max";
    args.compression = CHORUS_COMPRESSION_INT8;
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "\"int8.max\": int8 compression takes sum or average, "
                                       "not max") != NULL,
           "message: %s", chorus_last_error());

    if (test_size > 1) {
        test_step = "compression mismatch";
        float value = 1;
        args.name = "quantized.disagree";
        args.input = floats(&value, 1);
        args.op = CHORUS_SUM;
        args.compression = test_rank == 0 ? CHORUS_COMPRESSION_INT8 : CHORUS_COMPRESSION_NONE;
        /* Negotiated, then ordered (whose lane, on one host, runs only uncompressed ones). */
        for (int ordered = 0; ordered < 2; ordered++) {
            args.flags = ordered ? CHORUS_OP_ORDERED : 0;
            EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
            EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
            EXPECT(strstr(chorus_handle_error(handle), "compression mismatch") != NULL &&
                       strstr(chorus_handle_error(handle), "int8") != NULL,
                   "%s: message: %s", ordered ? "ordered" : "negotiated",
                   chorus_handle_error(handle));
            chorus_handle_free(handle);
        }
        args.flags = 0;
    }

    if (test_size > 1) {
        test_step = "a joined rank";
        check_with_a_joined_rank(everyone);
    }
    test_step = "error feedback";
    check_error_feedback(CHORUS_COMPRESSION_INT8, CHORUS_SUM, 0);
    check_error_feedback(CHORUS_COMPRESSION_INT8, CHORUS_AVERAGE, CHORUS_OP_ORDERED);
    check_error_feedback(CHORUS_COMPRESSION_INT4, CHORUS_SUM, CHORUS_OP_ORDERED);
    check_error_feedback(CHORUS_COMPRESSION_INT4, CHORUS_AVERAGE, 0);
    check_error_feedback_edges();
    check_error_feedback_refused();
    test_step = "float16 and bfloat16 inputs";
    check_sixteen_bit_inputs();
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_quantized");
}
