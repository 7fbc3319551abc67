/*
 * mpi_collectives.c — every collective through the public API under mpirun: allreduce of every
 * dtype and op on odd counts (in place and out of place, with and without scale factors),
 * broadcast from every root, allgather with uneven first dimensions (some ranks 0 rows), and
 * grouped allreduce. Allreduces, and a second set of broadcasts and allgathers, are submitted
 * asynchronously in bulk, so they are negotiated together and fused, then checked against the
 * reference every rank computes.
 * The algorithm is whatever CHORUS_*_ALGO selects (meson runs this once per algorithm).
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <math.h>

#define MAX_OPERATIONS 4096

struct operation {
    chorus_handle *handle;
    void *input;
    void *output;
    chorus_dtype dtype;
    chorus_op op;
    size_t count;
    double prescale, postscale;
    uint64_t seed;
    char name[64];
};

static struct operation operations[MAX_OPERATIONS];
static size_t operation_count;

static void submit_allreduces(uint64_t seed_base)
{
    /* 300007 (prime): with a raised CHORUS_FUSION_TENSOR_LIMIT a batch spans several segments
     * of the fusion buffer. */
    size_t counts[] = {0, 1, (size_t)test_size - 1, 7, 13, 1021, 65537, 300007};
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (size_t o = 0; o < 5; o++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                if (dtype == CHORUS_BOOL && ops[o] == CHORUS_AVERAGE) {
                    /* An average of bools means nothing: refused before it is negotiated. */
                    bool flag = true;
                    chorus_op_args args = CHORUS_OP_ARGS_INIT;
                    args.name = "ar.bool.average";
                    args.input = (chorus_tensor){.data = &flag, .dtype = CHORUS_BOOL, .ndims = 1,
                                                 .shape = {1}};
                    args.op = CHORUS_AVERAGE;
                    chorus_handle *handle = NULL;
                    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
                    continue;
                }
                struct operation *op = &operations[operation_count++];
                memset(op, 0, sizeof *op);
                op->dtype = (chorus_dtype)dtype;
                op->op = ops[o];
                op->count = counts[c];
                op->seed = seed_base + operation_count;
                bool floating = dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 ||
                                dtype == CHORUS_FLOAT32 || dtype == CHORUS_FLOAT64;
                bool scaled = floating && (ops[o] == CHORUS_SUM || ops[o] == CHORUS_AVERAGE) &&
                              c % 2 == 1;
                op->prescale = scaled ? 0.5 : 1.0;
                op->postscale = scaled ? 3.0 : 1.0;
                size_t bytes = op->count * chorus_dtype_size(op->dtype);
                op->input = malloc(bytes + 1);
                reference_fill(op->input, op->count, op->dtype, op->op, op->seed, test_rank);
                bool in_place = (c + o) % 2 == 0;
                op->output = in_place ? op->input : malloc(bytes + 1);
                snprintf(op->name, sizeof op->name, "ar.%s.%s.%zu.%zu", 
                         chorus_dtype_name(op->dtype), chorus_op_name(op->op), op->count, c);
                chorus_op_args args = CHORUS_OP_ARGS_INIT;
                args.name = op->name;
                args.input = (chorus_tensor){.data = op->input, .dtype = op->dtype, .ndims = 1,
                                             .shape = {(int64_t)op->count}};
                args.output = in_place ? NULL : op->output;
                args.op = op->op;
                args.prescale_factor = op->prescale;
                args.postscale_factor = op->postscale;
                EXPECT_STATUS(chorus_submit(&args, &op->handle), CHORUS_OK);
            }
}

static void check_allreduces(void)
{
    for (size_t i = 0; i < operation_count; i++) {
        struct operation *op = &operations[i];
        chorus_status status = chorus_wait(op->handle);
        EXPECT(status == CHORUS_OK, "%s: %s %s", op->name, chorus_status_name(status),
               chorus_handle_error(op->handle));
        char why[256] = "";
        long wrong = reference_check_allreduce(op->output, op->count, op->dtype, op->op,
                                               test_size, NULL, op->seed, op->prescale,
                                               op->postscale, why, sizeof why);
        EXPECT(wrong < 0, "%s (prescale %g, postscale %g): %s", op->name, op->prescale,
               op->postscale, why);
        chorus_handle_free(op->handle);
        if (op->output != op->input)
            free(op->output);
        free(op->input);
    }
    operation_count = 0;
}

static void test_broadcasts(void)
{
    size_t sizes[] = {0, 1, 7, 4097, 300001};
    for (int root = 0; root < test_size; root++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            uint64_t seed = 500 + (uint64_t)root * 10 + s;
            uint8_t *buffer = malloc(sizes[s] + 1);
            uint8_t *output = malloc(sizes[s] + 1);
            if (test_rank == root)
                reference_fill_bytes(buffer, sizes[s], seed, root);
            else
                memset(buffer, 0x5a, sizes[s]);
            char name[64];
            snprintf(name, sizeof name, "bc.%d.%zu", root, sizes[s]);
            bool out_of_place = s % 2 == 1;
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            args.collective = CHORUS_BROADCAST;
            args.name = name;
            args.input = (chorus_tensor){.data = buffer, .dtype = CHORUS_UINT8, .ndims = 1,
                                         .shape = {(int64_t)sizes[s]}};
            args.output = out_of_place ? output : NULL;
            args.root = root;
            chorus_handle *handle = NULL;
            EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
            EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
            long wrong = reference_check_bytes(out_of_place ? output : buffer, sizes[s], seed,
                                               root);
            EXPECT(wrong < 0, "broadcast %s: byte %ld wrong", name, wrong);
            chorus_handle_free(handle);
            free(buffer);
            free(output);
        }
}

static void test_allgathers(void)
{
    const int64_t row_lengths[] = {1, 3, 1000};
    for (size_t l = 0; l < 3; l++) {
        int64_t columns = row_lengths[l];
        /* Rank r has (r * 2 + l) % 4 rows: some ranks have none. */
        int64_t rows = (test_rank * 2 + (int64_t)l) % 4;
        size_t bytes = (size_t)(rows * columns) * sizeof(float);
        float *input = malloc(bytes + 4);
        reference_fill_bytes(input, bytes, 900 + l, test_rank);
        chorus_tensor tensor = {.data = input, .dtype = CHORUS_FLOAT32, .ndims = 2,
                                .shape = {rows, columns}};
        char name[64];
        snprintf(name, sizeof name, "ag.%zu", l);
        chorus_tensor gathered;
        EXPECT_STATUS(chorus_allgather(name, &tensor, &gathered), CHORUS_OK);
        int64_t total = 0;
        for (int r = 0; r < test_size; r++)
            total += (r * 2 + (int64_t)l) % 4;
        EXPECT(gathered.shape[0] == total && gathered.shape[1] == columns &&
                   gathered.ndims == 2 && gathered.dtype == CHORUS_FLOAT32,
               "%s: gathered shape [%lld,%lld], expected [%lld,%lld]", name,
               (long long)gathered.shape[0], (long long)gathered.shape[1], (long long)total,
               (long long)columns);
        size_t offset = 0;
        for (int r = 0; r < test_size && gathered.shape[0] == total; r++) {
            size_t block = (size_t)(((r * 2 + (int64_t)l) % 4) * columns) * sizeof(float);
            long wrong = reference_check_bytes((uint8_t *)gathered.data + offset, block, 900 + l,
                                               r);
            EXPECT(wrong < 0, "%s: rows of rank %d wrong at byte %ld", name, r, wrong);
            offset += block;
        }
        free(gathered.data);
        free(input);
    }
}

/* Broadcasts from every root and allgathers of uneven rows, all submitted before any is waited
 * for, so that they are agreed together and fused (those within CHORUS_FUSION_TENSOR_LIMIT). */
static void test_fused_broadcasts_and_allgathers(void)
{
    enum { SIZES = 5, GATHERS = 6 };
    const size_t sizes[SIZES] = {0, 1, 7, 4097, 100003};
    struct fused_case {
        uint8_t *input, *output;
        size_t bytes;
        uint64_t seed;
        chorus_handle *handle;
        char name[48];
    } *broadcasts = calloc((size_t)test_size * SIZES, sizeof *broadcasts), gathers[GATHERS];
    for (int root = 0; root < test_size; root++)
        for (int s = 0; s < SIZES; s++) {
            struct fused_case *c = &broadcasts[root * SIZES + s];
            c->bytes = sizes[s];
            c->seed = 1500 + (uint64_t)(root * SIZES + s);
            c->input = malloc(c->bytes + 1);
            c->output = s % 2 == 1 ? malloc(c->bytes + 1) : c->input;
            if (test_rank == root)
                reference_fill_bytes(c->input, c->bytes, c->seed, root);
            else
                memset(c->input, 0x5a, c->bytes);
            snprintf(c->name, sizeof c->name, "fbc.%d.%d", root, s);
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            args.collective = CHORUS_BROADCAST;
            args.name = c->name;
            args.input = (chorus_tensor){.data = c->input, .dtype = CHORUS_UINT8, .ndims = 1,
                                         .shape = {(int64_t)c->bytes}};
            args.output = c->output != c->input ? c->output : NULL;
            args.root = root;
            EXPECT_STATUS(chorus_submit(&args, &c->handle), CHORUS_OK);
        }
    const chorus_dtype dtypes[GATHERS] = {CHORUS_FLOAT32, CHORUS_INT8,    CHORUS_FLOAT64,
                                          CHORUS_UINT8,   CHORUS_BFLOAT16, CHORUS_INT64};
    for (int g = 0; g < GATHERS; g++) {
        struct fused_case *c = &gathers[g];
        int64_t rows = (test_rank + g) % 3, columns = g * 5 + 1;
        c->bytes = (size_t)(rows * columns) * chorus_dtype_size(dtypes[g]);
        c->seed = 1900 + (uint64_t)g;
        c->input = malloc(c->bytes + 1);
        reference_fill_bytes(c->input, c->bytes, c->seed, test_rank);
        snprintf(c->name, sizeof c->name, "fag.%d", g);
        chorus_tensor tensor = {.data = c->input, .dtype = dtypes[g], .ndims = 2,
                                .shape = {rows, columns}};
        EXPECT_STATUS(chorus_allgather_async(c->name, &tensor, &c->handle), CHORUS_OK);
    }
    for (int i = 0; i < test_size * SIZES; i++) {
        struct fused_case *c = &broadcasts[i];
        EXPECT_STATUS(chorus_wait(c->handle), CHORUS_OK);
        long wrong = reference_check_bytes(c->output, c->bytes, c->seed, i / SIZES);
        EXPECT(wrong < 0, "broadcast %s: byte %ld wrong", c->name, wrong);
        chorus_handle_free(c->handle);
        if (c->output != c->input)
            free(c->output);
        free(c->input);
    }
    for (int g = 0; g < GATHERS; g++) {
        struct fused_case *c = &gathers[g];
        EXPECT_STATUS(chorus_wait(c->handle), CHORUS_OK);
        chorus_tensor gathered;
        EXPECT_STATUS(chorus_handle_output(c->handle, &gathered), CHORUS_OK);
        int64_t total = 0, columns = g * 5 + 1;
        for (int r = 0; r < test_size; r++)
            total += (r + g) % 3;
        EXPECT(gathered.shape[0] == total && gathered.shape[1] == columns &&
                   gathered.dtype == dtypes[g],
               "%s: gathered [%lld,%lld] of %s", c->name, (long long)gathered.shape[0],
               (long long)gathered.shape[1], chorus_dtype_name(gathered.dtype));
        size_t offset = 0;
        for (int r = 0; r < test_size && gathered.shape[0] == total; r++) {
            size_t block = (size_t)(((r + g) % 3) * columns) * chorus_dtype_size(dtypes[g]);
            long wrong =
                reference_check_bytes((uint8_t *)gathered.data + offset, block, c->seed, r);
            EXPECT(wrong < 0, "%s: rows of rank %d wrong at byte %ld", c->name, r, wrong);
            offset += block;
        }
        chorus_handle_free(c->handle);
        free(c->input);
    }
    free(broadcasts);
}

static void test_grouped_allreduce(void)
{
    enum { MEMBERS = 5 };
    float *buffers[MEMBERS];
    chorus_op_args args[MEMBERS];
    char names[MEMBERS][32];
    for (int m = 0; m < MEMBERS; m++) {
        size_t count = (size_t)(m * 37 + 1);
        buffers[m] = malloc(count * sizeof(float));
        reference_fill(buffers[m], count, CHORUS_FLOAT32, CHORUS_SUM, 700 + (uint64_t)m,
                       test_rank);
        snprintf(names[m], sizeof names[m], "group.member%d", m);
        args[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[m].name = names[m];
        args[m].input = (chorus_tensor){.data = buffers[m], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                        .shape = {(int64_t)count}};
    }
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    chorus_handle_free(handle);
    for (int m = 0; m < MEMBERS; m++) {
        char why[256];
        EXPECT(reference_check_allreduce(buffers[m], (size_t)(m * 37 + 1), CHORUS_FLOAT32,
                                         CHORUS_SUM, test_size, NULL, 700 + (uint64_t)m, 1, 1,
                                         why, sizeof why) < 0,
               "group member %d: %s", m, why);
        free(buffers[m]);
    }
}

/* Rank r's rows of member m of the grouped allgather: zero on some ranks. */
static int64_t grouped_rows(int r, int m)
{
    return (r + m) % 3 * (m + 1);
}

/* A grouped allgather (uneven rows, a float32 and an int32 member, zero rows on some ranks)
 * and a grouped reducescatter (rows that do and do not divide by the ranks, sum and max), each
 * submitted as one group and read back member by member; then groups chorus refuses. */
static void test_grouped_allgather_and_reducescatter(void)
{
    enum { MEMBERS = 4, COLUMNS = 3 };
    chorus_op_args args[MEMBERS];
    char names[MEMBERS][32];
    void *inputs[MEMBERS];
    for (int m = 0; m < MEMBERS; m++) {
        size_t bytes = (size_t)(grouped_rows(test_rank, m) * COLUMNS) * 4;
        inputs[m] = malloc(bytes + 1);
        reference_fill_bytes(inputs[m], bytes, 1100 + (uint64_t)m, test_rank);
        snprintf(names[m], sizeof names[m], "grouped.ag.%d", m);
        args[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[m].collective = CHORUS_ALLGATHER;
        args[m].name = names[m];
        args[m].input = (chorus_tensor){.data = inputs[m],
                                        .dtype = m == 2 ? CHORUS_INT32 : CHORUS_FLOAT32,
                                        .ndims = 2, .shape = {grouped_rows(test_rank, m), COLUMNS}};
    }
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    for (int m = 0; m < MEMBERS; m++) {
        chorus_tensor gathered = {0};
        EXPECT_STATUS(chorus_handle_output_at(handle, (size_t)m, &gathered), CHORUS_OK);
        int64_t total = 0;
        for (int r = 0; r < test_size; r++)
            total += grouped_rows(r, m);
        EXPECT(gathered.shape[0] == total && gathered.shape[1] == COLUMNS,
               "grouped allgather member %d: %lld rows, expected %lld", m,
               (long long)gathered.shape[0], (long long)total);
        size_t offset = 0;
        for (int r = 0; r < test_size && gathered.shape[0] == total; r++) {
            size_t block = (size_t)(grouped_rows(r, m) * COLUMNS) * 4;
            long wrong = reference_check_bytes((uint8_t *)gathered.data + offset, block,
                                               1100 + (uint64_t)m, r);
            EXPECT(wrong < 0, "grouped allgather member %d: rank %d's rows wrong at byte %ld",
                   m, r, wrong);
            offset += block;
        }
        free(inputs[m]);
    }
    chorus_tensor beyond;
    EXPECT_STATUS(chorus_handle_output_at(handle, MEMBERS, &beyond), CHORUS_ERR_INVALID_ARGUMENT);
    chorus_handle_free(handle);

    const int64_t rows[MEMBERS] = {0, 1, 2 * (int64_t)test_size, 7 * (int64_t)test_size + 2};
    for (int m = 0; m < MEMBERS; m++) {
        size_t count = (size_t)(rows[m] * COLUMNS);
        chorus_op op = m == 1 ? CHORUS_MAX : CHORUS_SUM;
        inputs[m] = malloc(count * sizeof(float) + 1);
        reference_fill(inputs[m], count, CHORUS_FLOAT32, op, 1200 + (uint64_t)m, test_rank);
        snprintf(names[m], sizeof names[m], "grouped.rs.%d", m);
        args[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[m].collective = CHORUS_REDUCESCATTER;
        args[m].name = names[m];
        args[m].op = op;
        args[m].input = (chorus_tensor){.data = inputs[m], .dtype = CHORUS_FLOAT32, .ndims = 2,
                                        .shape = {rows[m], COLUMNS}};
    }
    EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    for (int m = 0; m < MEMBERS; m++) {
        chorus_tensor block = {0};
        EXPECT_STATUS(chorus_handle_take_output_at(handle, (size_t)m, &block), CHORUS_OK);
        int64_t extra = rows[m] % test_size, mine = rows[m] / test_size + (test_rank < extra);
        int64_t first = test_rank * (rows[m] / test_size) + (test_rank < extra ? test_rank : extra);
        EXPECT(block.shape[0] == mine, "grouped reducescatter member %d: %lld rows, expected %lld",
               m, (long long)block.shape[0], (long long)mine);
        char why[256];
        if (block.shape[0] == mine)
            EXPECT(reference_check_reduced(block.data, (size_t)(first * COLUMNS),
                                           (size_t)(mine * COLUMNS), CHORUS_FLOAT32,
                                           m == 1 ? CHORUS_MAX : CHORUS_SUM, test_size, NULL,
                                           1200 + (uint64_t)m, 1, 1, why, sizeof why) < 0,
                   "grouped reducescatter member %d: %s", m, why);
        free(block.data);
        free(inputs[m]);
    }
    chorus_handle_free(handle);

    /* Groups of collectives that are not grouped, and of mixed collectives, are refused. */
    float one = 1;
    chorus_op_args mixed[2] = {CHORUS_OP_ARGS_INIT, CHORUS_OP_ARGS_INIT};
    mixed[0].name = "grouped.mixed.0";
    mixed[1].name = "grouped.mixed.1";
    mixed[0].input = mixed[1].input = (chorus_tensor){.data = &one, .dtype = CHORUS_FLOAT32,
                                                      .ndims = 1, .shape = {1}};
    mixed[1].collective = CHORUS_ALLGATHER;
    EXPECT_STATUS(chorus_submit_group(mixed, 2, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "is another collective (allgather)") != NULL,
           "message: %s", chorus_last_error());
    mixed[0].collective = mixed[1].collective = CHORUS_BROADCAST;
    EXPECT_STATUS(chorus_submit_group(mixed, 2, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "only allreduces, allgathers and reducescatters") != NULL,
           "message: %s", chorus_last_error());
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    test_init_chorus();
    for (int round = 0; round < 2; round++) {
        test_step = "allreduce";
        submit_allreduces((uint64_t)round * 100000);
        check_allreduces();
    }
    test_step = "broadcast";
    test_broadcasts();
    test_step = "allgather";
    test_allgathers();
    test_step = "fused broadcasts and allgathers";
    test_fused_broadcasts_and_allgathers();
    test_step = "grouped allreduce";
    test_grouped_allreduce();
    test_step = "grouped allgather and reducescatter";
    test_grouped_allgather_and_reducescatter();
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_collectives");
}
