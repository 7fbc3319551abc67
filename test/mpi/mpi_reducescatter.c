/*
 * mpi_reducescatter.c — reducescatter through the public API under mpirun: every dtype and op,
 * rows that do not divide by the ranks (0 rows, 1 row, fewer rows than ranks, primes), rows of
 * 1 and 3 elements, scale factors; all submitted before any is waited for, then each rank's block
 * checked against the reference every rank computes from all ranks' inputs. Then the blocking
 * form, a rank that has joined (it adds nothing; an average divides by the others), and the
 * errors: a scalar, a bool average, and shapes or ops that differ between ranks, reported on
 * every rank.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#define MAX_OPERATIONS 2048

struct operation {
    chorus_handle *handle;
    void *input;
    chorus_dtype dtype;
    chorus_op op;
    int64_t rows, width;
    double prescale, postscale;
    uint64_t seed;
    char name[64];
};

static struct operation operations[MAX_OPERATIONS];
static size_t operation_count;

/* Rank r's rows as Horovod splits them: the first rows % size ranks get one more. */
static int64_t block_rows(int64_t rows, int r)
{
    return rows / test_size + (r < rows % test_size ? 1 : 0);
}

static int64_t block_first_row(int64_t rows, int r)
{
    int64_t extra = rows % test_size;
    return r * (rows / test_size) + (r < extra ? r : extra);
}

/* Checks a completed reducescatter's block: shape and every element. */
static void check_block(const char *name, const chorus_tensor *block, chorus_dtype dtype,
                        chorus_op op, int64_t rows, int64_t width, const bool *contributes,
                        uint64_t seed, double prescale, double postscale)
{
    int64_t mine = block_rows(rows, test_rank);
    EXPECT(block->ndims == 2 && block->shape[0] == mine && block->shape[1] == width &&
               block->dtype == dtype,
           "%s: block of shape [%lld, %lld] (%zu dims), expected [%lld, %lld]", name,
           (long long)block->shape[0], (long long)block->shape[1], block->ndims,
           (long long)mine, (long long)width);
    if (block->shape[0] != mine)
        return;
    char why[256] = "";
    long wrong = reference_check_reduced(
        block->data, (size_t)(block_first_row(rows, test_rank) * width), (size_t)(mine * width),
        dtype, op, test_size, contributes, seed, prescale, postscale, why, sizeof why);
    EXPECT(wrong < 0, "%s (prescale %g, postscale %g): %s", name, prescale, postscale, why);
}

static void submit_reducescatters(void)
{
    const int64_t row_counts[] = {0, 1, test_size - 1, 7, 13, 1021};
    const int64_t widths[] = {1, 3};
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (size_t o = 0; o < 5; o++)
            for (size_t c = 0; c < sizeof row_counts / sizeof row_counts[0]; c++)
                for (size_t w = 0; w < 2; w++) {
                    if (dtype == CHORUS_BOOL && ops[o] == CHORUS_AVERAGE)
                        continue; /* refused: see test_errors */
                    struct operation *op = &operations[operation_count++];
                    *op = (struct operation){.dtype = (chorus_dtype)dtype, .op = ops[o],
                                             .rows = row_counts[c], .width = widths[w],
                                             .seed = 7000 + operation_count};
                    bool floating = dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 ||
                                    dtype == CHORUS_FLOAT32 || dtype == CHORUS_FLOAT64;
                    bool scaled = floating && (c + w) % 2 == 1 &&
                                  (ops[o] == CHORUS_SUM || ops[o] == CHORUS_AVERAGE);
                    op->prescale = scaled ? 0.5 : 1.0;
                    op->postscale = scaled ? 3.0 : 1.0;
                    size_t count = (size_t)(op->rows * op->width);
                    op->input = malloc(count * chorus_dtype_size(op->dtype) + 1);
                    reference_fill(op->input, count, op->dtype, op->op, op->seed, test_rank);
                    snprintf(op->name, sizeof op->name, "rs.%s.%s.%lld.%lld.%zu",
                             chorus_dtype_name(op->dtype), chorus_op_name(op->op),
                             (long long)op->rows, (long long)op->width, c);
                    chorus_op_args args = CHORUS_OP_ARGS_INIT;
                    args.collective = CHORUS_REDUCESCATTER;
                    args.name = op->name;
                    args.input = (chorus_tensor){.data = op->input, .dtype = op->dtype,
                                                 .ndims = 2, .shape = {op->rows, op->width}};
                    args.op = op->op;
                    args.prescale_factor = op->prescale;
                    args.postscale_factor = op->postscale;
                    EXPECT_STATUS(chorus_submit(&args, &op->handle), CHORUS_OK);
                }
}

static void check_reducescatters(void)
{
    for (size_t i = 0; i < operation_count; i++) {
        struct operation *op = &operations[i];
        chorus_status status = chorus_wait(op->handle);
        EXPECT(status == CHORUS_OK, "%s: %s %s", op->name, chorus_status_name(status),
               chorus_handle_error(op->handle));
        chorus_tensor block = {0};
        if (status == CHORUS_OK) {
            EXPECT_STATUS(chorus_handle_output(op->handle, &block), CHORUS_OK);
            check_block(op->name, &block, op->dtype, op->op, op->rows, op->width, NULL,
                        op->seed, op->prescale, op->postscale);
        }
        chorus_handle_free(op->handle);
        free(op->input);
    }
    operation_count = 0;
}

static void test_blocking(void)
{
    int64_t rows = 2 * test_size + 1;
    double *input = malloc((size_t)(rows * 5) * sizeof *input);
    reference_fill(input, (size_t)(rows * 5), CHORUS_FLOAT64, CHORUS_SUM, 42, test_rank);
    chorus_tensor tensor = {.data = input, .dtype = CHORUS_FLOAT64, .ndims = 2,
                            .shape = {rows, 5}};
    chorus_tensor block = {0};
    EXPECT_STATUS(chorus_reducescatter("rs.blocking", &tensor, CHORUS_SUM, &block), CHORUS_OK);
    check_block("rs.blocking", &block, CHORUS_FLOAT64, CHORUS_SUM, rows, 5, NULL, 42, 1, 1);
    free(block.data); /* the blocking form hands the block to the caller */
    free(input);
    /* An empty tensor may come without data (an empty torch tensor's data pointer is NULL). */
    chorus_tensor empty = {.data = NULL, .dtype = CHORUS_FLOAT32, .ndims = 2, .shape = {0, 3}};
    chorus_tensor nothing = {0};
    EXPECT_STATUS(chorus_reducescatter("rs.empty", &empty, CHORUS_SUM, &nothing), CHORUS_OK);
    EXPECT(nothing.ndims == 2 && nothing.shape[0] == 0 && nothing.shape[1] == 3,
           "rs.empty: block of %zu dims, [%lld, ...]", nothing.ndims,
           (long long)nothing.shape[0]);
    free(nothing.data);
}

/* The last rank joins at once; the others reducescatter without it, then join. */
static void test_joined_rank(void)
{
    if (test_size < 2)
        return;
    bool *contributes = calloc((size_t)test_size, sizeof *contributes);
    for (int r = 0; r < test_size - 1; r++)
        contributes[r] = true;
    if (test_rank == test_size - 1) {
        EXPECT_STATUS(chorus_join(), CHORUS_OK);
        free(contributes);
        return;
    }
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN};
    for (size_t o = 0; o < 3; o++) {
        int64_t rows = 3 * test_size + 2;
        float *input = malloc((size_t)rows * sizeof *input);
        reference_fill(input, (size_t)rows, CHORUS_FLOAT32, ops[o], 60 + o, test_rank);
        char name[64];
        snprintf(name, sizeof name, "rs.joined.%s", chorus_op_name(ops[o]));
        chorus_tensor tensor = {.data = input, .dtype = CHORUS_FLOAT32, .ndims = 2,
                                .shape = {rows, 1}};
        chorus_tensor block = {0};
        EXPECT_STATUS(chorus_reducescatter(name, &tensor, ops[o], &block), CHORUS_OK);
        check_block(name, &block, CHORUS_FLOAT32, ops[o], rows, 1, contributes, 60 + o, 1, 1);
        free(block.data);
        free(input);
    }
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
    free(contributes);
}

static void test_errors(void)
{
    float scalar = 1;
    chorus_tensor tensor = {.data = &scalar, .dtype = CHORUS_FLOAT32, .ndims = 0};
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_reducescatter_async("rs.scalar", &tensor, CHORUS_SUM, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "rs.scalar") != NULL, "the message names the tensor: %s",
           chorus_last_error());
    bool flags[4] = {true, false, true, true};
    chorus_tensor bools = {.data = flags, .dtype = CHORUS_BOOL, .ndims = 1, .shape = {4}};
    EXPECT_STATUS(chorus_reducescatter_async("rs.bool", &bools, CHORUS_AVERAGE, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    if (test_size < 2)
        return;
    /* Rank 0 has one row more than the others: every rank hears of it, with the ranks named. */
    float data[8] = {0};
    chorus_tensor uneven = {.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                            .shape = {test_rank == 0 ? 5 : 4}};
    chorus_tensor block = {0};
    EXPECT_STATUS(chorus_reducescatter("rs.shape", &uneven, CHORUS_SUM, &block),
                  CHORUS_ERR_MISMATCH);
    EXPECT(strstr(chorus_last_error(), "rs.shape") != NULL &&
               strstr(chorus_last_error(), "shape") != NULL &&
               strstr(chorus_last_error(), "rank 0") != NULL,
           "the shape mismatch names the tensor and rank 0: %s", chorus_last_error());
    chorus_tensor even = {.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {4}};
    EXPECT_STATUS(chorus_reducescatter("rs.op", &even, test_rank == 0 ? CHORUS_MAX : CHORUS_SUM,
                                       &block),
                  CHORUS_ERR_MISMATCH);
    EXPECT(strstr(chorus_last_error(), "op") != NULL, "the op mismatch says op: %s",
           chorus_last_error());
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    test_init_chorus();
    test_step = "reducescatter";
    submit_reducescatters();
    check_reducescatters();
    test_step = "blocking";
    test_blocking();
    test_step = "errors";
    test_errors();
    test_step = "joined rank";
    test_joined_rank();
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_reducescatter");
}
