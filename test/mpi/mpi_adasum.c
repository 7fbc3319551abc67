/*
 * mpi_adasum.c — allreduce with CHORUS_ADASUM through the public API under mpirun, against a
 * reference computed in double from every rank's known input along the same tree: float16,
 * float32 and float64, counts 0, 1, 7 and 1021, vectors that are orthogonal (their sum), equal (their
 * average) and random; then a joined rank (its zeros change nothing), and the refusals (an
 * integer tensor, scale factors, a reducescatter with Adasum).
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <math.h>

enum input_kind { RANDOM, EQUAL, ORTHOGONAL };

/* Rank `r`'s element i, as exact as `dtype` holds it (the compiler's _Float16 rounds float16,
 * independently of chorus's conversions). */
static double input_value(enum input_kind kind, uint64_t seed, int r, size_t i,
                          chorus_dtype dtype)
{
    double value;
    switch (kind) {
    case EQUAL:
        value = (double)(test_random(seed, 0, i) % 2001) / 1000.0 - 1.0;
        break;
    case ORTHOGONAL:
        value = (int)(i % (size_t)test_size) == r ? (double)(r + 1) : 0.0;
        break;
    default:
        value = (double)(test_random(seed, (uint64_t)r, i) % 2001) / 1000.0 - 1.0;
        break;
    }
    return dtype == CHORUS_FLOAT16 ? (double)(_Float16)value
           : dtype == CHORUS_FLOAT32 ? (double)(float)value
                                     : value;
}

static void reference_combine(double *a, const double *b, size_t count)
{
    double aa = 0, bb = 0, ab = 0;
    for (size_t i = 0; i < count; i++) {
        aa += a[i] * a[i];
        bb += b[i] * b[i];
        ab += a[i] * b[i];
    }
    double wa = aa > 0 ? 1 - ab / (2 * aa) : 0, wb = bb > 0 ? 1 - ab / (2 * bb) : 0;
    if (aa == 0)
        wb = 1;
    if (bb == 0)
        wa = 1;
    for (size_t i = 0; i < count; i++)
        a[i] = wa * a[i] + wb * b[i];
}

/* The result every rank must hold: partial results combined up the tree in rank order. */
static double *reference_adasum(enum input_kind kind, uint64_t seed, size_t count,
                                const bool *contributes, chorus_dtype dtype)
{
    double **partial = calloc((size_t)test_size, sizeof *partial);
    for (int r = 0; r < test_size; r++) {
        partial[r] = calloc(count + 1, sizeof **partial);
        for (size_t i = 0; contributes[r] && i < count; i++)
            partial[r][i] = input_value(kind, seed, r, i, dtype);
    }
    for (int d = 1; d < test_size; d *= 2)
        for (int r = 0; r + d < test_size; r += 2 * d)
            reference_combine(partial[r], partial[r + d], count);
    double *result = partial[0];
    for (int r = 1; r < test_size; r++)
        free(partial[r]);
    free(partial);
    return result;
}

static void check_adasum(chorus_dtype dtype, enum input_kind kind, size_t count, uint64_t seed,
                         const bool *contributes)
{
    size_t element = chorus_dtype_size(dtype);
    void *data = malloc(count * element + 1);
    for (size_t i = 0; i < count; i++) {
        double value = input_value(kind, seed, test_rank, i, dtype);
        if (dtype == CHORUS_FLOAT64)
            ((double *)data)[i] = value;
        else if (dtype == CHORUS_FLOAT16)
            ((_Float16 *)data)[i] = (_Float16)value;
        else
            ((float *)data)[i] = (float)value;
    }
    char name[64];
    snprintf(name, sizeof name, "adasum.%s.%d.%zu.%llu", chorus_dtype_name(dtype), (int)kind,
             count, (unsigned long long)seed);
    chorus_tensor tensor = {.data = data, .dtype = dtype, .ndims = 1, .shape = {(int64_t)count}};
    EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_ADASUM), CHORUS_OK);
    double *expected = reference_adasum(kind, seed, count, contributes, dtype);
    double scale = 0;
    for (size_t i = 0; i < count; i++)
        scale = fmax(scale, fabs(expected[i]));
    /* float32 and float16 round once per combination: a few ulps of the largest element per
     * level (float16's ulp at 1 is 2^-10). */
    double tolerance = (dtype == CHORUS_FLOAT64   ? 1e-12
                        : dtype == CHORUS_FLOAT32 ? 1e-5
                                                  : 4e-3) *
                       (scale + 1);
    for (size_t i = 0; i < count; i++) {
        double got = dtype == CHORUS_FLOAT64   ? ((double *)data)[i]
                     : dtype == CHORUS_FLOAT16 ? (double)((_Float16 *)data)[i]
                                               : ((float *)data)[i];
        if (fabs(got - expected[i]) > tolerance) {
            EXPECT(false, "%s: element %zu is %.9g, expected %.9g", name, i, got, expected[i]);
            break;
        }
    }
    /* What Adasum promises: orthogonal vectors add up, equal ones average to themselves. */
    if (kind == ORTHOGONAL && count > 0 && contributes[0])
        EXPECT(fabs(expected[0] - 1.0) < 1e-12, "%s: orthogonal vectors should add", name);
    if (kind == EQUAL && count > 0)
        EXPECT(fabs(expected[0] - input_value(EQUAL, seed, 0, 0, dtype)) < 1e-12,
               "%s: equal vectors should stay as they are", name);
    free(expected);
    free(data);
}

static void test_refusals(void)
{
    int32_t integers[4] = {1, 2, 3, 4};
    chorus_tensor tensor = {.data = integers, .dtype = CHORUS_INT32, .ndims = 1, .shape = {4}};
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_allreduce_async("adasum.int", &tensor, NULL, CHORUS_ADASUM, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "adasum.int") != NULL &&
               strstr(chorus_last_error(), "float16, float32 or float64") != NULL,
           "the message names the tensor and what Adasum takes: %s", chorus_last_error());
    float floats[4] = {1, 2, 3, 4};
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "adasum.scaled";
    args.input = (chorus_tensor){.data = floats, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                 .shape = {4}};
    args.op = CHORUS_ADASUM;
    args.postscale_factor = 2;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    chorus_tensor block = {0};
    args.collective = CHORUS_REDUCESCATTER;
    args.postscale_factor = 1;
    EXPECT_STATUS(chorus_reducescatter("adasum.scatter", &args.input, CHORUS_ADASUM, &block),
                  CHORUS_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    test_init_chorus();
    bool everyone[8] = {true, true, true, true, true, true, true, true};
    const size_t counts[] = {0, 1, 7, 1021};
    test_step = "adasum";
    for (int kind = RANDOM; kind <= ORTHOGONAL; kind++)
        for (size_t c = 0; c < 4; c++) {
            check_adasum(CHORUS_FLOAT64, (enum input_kind)kind, counts[c], 10 + c, everyone);
            check_adasum(CHORUS_FLOAT32, (enum input_kind)kind, counts[c], 20 + c, everyone);
            check_adasum(CHORUS_FLOAT16, (enum input_kind)kind, counts[c], 30 + c, everyone);
        }
    test_step = "refusals";
    test_refusals();
    test_step = "joined rank";
    if (test_size > 1) {
        bool contributes[8] = {true, true, true, true, true, true, true, true};
        contributes[test_size - 1] = false;
        if (test_rank == test_size - 1)
            EXPECT_STATUS(chorus_join(), CHORUS_OK);
        else {
            check_adasum(CHORUS_FLOAT64, RANDOM, 1021, 99, contributes);
            EXPECT_STATUS(chorus_join(), CHORUS_OK);
        }
    }
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_adasum");
}
