/*
 * mpi_alltoall.c — alltoall through the public API under mpirun: every dtype, rows of 1 and 3
 * elements, splits that differ per pair of ranks (zeros included), all submitted before any is
 * waited for; every rank checks the rows it received from every sender, byte for byte, and the
 * received splits, against what each sender must have sent. Then even splits (NULL), the
 * blocking form, splits even on some ranks only (or even with rows that differ), a rank that
 * has joined (it sends nothing), and the errors: splits that do not add up, rows that do not
 * divide, shapes or dtypes that differ between ranks.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#define CASES 64
#define MAX_RANKS 16 /* the most ranks this test runs with */

/* Rows rank `from` sends rank `to` in case `seed`: 0..4, some pairs none. */
static int64_t rows_between(uint64_t seed, int from, int to)
{
    return (int64_t)(test_random(seed, (uint64_t)from, (uint64_t)to) % 5);
}

/* Row `row` of what `from` sends `to`: bytes from (seed, from, to, row). */
static void fill_row(unsigned char *row, size_t bytes, uint64_t seed, int from, int to,
                     int64_t index)
{
    reference_fill_bytes(row, bytes, seed * 1000 + (uint64_t)to * 50 + (uint64_t)index, from);
}

struct alltoall_case {
    chorus_handle *handle;
    unsigned char *input;
    chorus_dtype dtype;
    int64_t width;
    uint64_t seed;
    char name[64];
};

static void check_received(const char *name, const chorus_tensor *output, const int64_t *received,
                           size_t row_bytes, uint64_t seed, const bool *sends)
{
    int64_t expected_rows = 0;
    for (int from = 0; from < test_size; from++) {
        int64_t rows = sends[from] ? rows_between(seed, from, test_rank) : 0;
        EXPECT(received[from] == rows, "%s: %lld rows from rank %d, expected %lld", name,
               (long long)received[from], from, (long long)rows);
        expected_rows += rows;
    }
    EXPECT(output->shape[0] == expected_rows, "%s: %lld rows received, expected %lld", name,
           (long long)output->shape[0], (long long)expected_rows);
    if (output->shape[0] != expected_rows)
        return;
    const unsigned char *at = output->data;
    unsigned char *row = malloc(row_bytes + 1);
    for (int from = 0; from < test_size; from++)
        for (int64_t i = 0; sends[from] && i < rows_between(seed, from, test_rank); i++) {
            fill_row(row, row_bytes, seed, from, test_rank, i);
            EXPECT(memcmp(at, row, row_bytes) == 0, "%s: row %lld from rank %d is wrong", name,
                   (long long)i, from);
            at += row_bytes;
        }
    free(row);
}

/* This rank's input for `seed`: for each rank in order, the rows it sends there. */
static unsigned char *make_input(uint64_t seed, size_t row_bytes, int64_t *splits)
{
    int64_t total = 0;
    for (int to = 0; to < test_size; to++)
        total += splits[to] = rows_between(seed, test_rank, to);
    unsigned char *input = malloc((size_t)total * row_bytes + 1);
    unsigned char *at = input;
    for (int to = 0; to < test_size; to++)
        for (int64_t i = 0; i < splits[to]; i++, at += row_bytes)
            fill_row(at, row_bytes, seed, test_rank, to, i);
    return input;
}

static void test_uneven_splits(void)
{
    struct alltoall_case cases[CASES];
    int count = 0;
    bool everyone[MAX_RANKS];
    for (int r = 0; r < MAX_RANKS; r++)
        everyone[r] = true;
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
        for (int64_t width = 1; width <= 3; width += 2) {
            struct alltoall_case *c = &cases[count++];
            *c = (struct alltoall_case){
                .dtype = (chorus_dtype)dtype, .width = width, .seed = 300 + (uint64_t)count};
            size_t row_bytes = (size_t)width * chorus_dtype_size(c->dtype);
            int64_t splits[MAX_RANKS];
            c->input = make_input(c->seed, row_bytes, splits);
            int64_t rows = 0;
            for (int to = 0; to < test_size; to++)
                rows += splits[to];
            snprintf(c->name, sizeof c->name, "a2a.%s.%lld", chorus_dtype_name(c->dtype),
                     (long long)width);
            chorus_tensor tensor = {
                .data = c->input, .dtype = c->dtype, .ndims = 2, .shape = {rows, width}};
            EXPECT_STATUS(chorus_alltoall_async(c->name, &tensor, splits, &c->handle), CHORUS_OK);
        }
    for (int i = 0; i < count; i++) {
        struct alltoall_case *c = &cases[i];
        chorus_status status = chorus_wait(c->handle);
        EXPECT(status == CHORUS_OK, "%s: %s %s", c->name, chorus_status_name(status),
               chorus_handle_error(c->handle));
        chorus_tensor output = {0};
        int64_t received[MAX_RANKS] = {0};
        if (status == CHORUS_OK) {
            EXPECT_STATUS(chorus_handle_output(c->handle, &output), CHORUS_OK);
            EXPECT_STATUS(chorus_handle_received_splits(c->handle, received, MAX_RANKS), CHORUS_OK);
            EXPECT(output.ndims == 2 && output.shape[1] == c->width && output.dtype == c->dtype,
                   "%s: output descriptor", c->name);
            check_received(c->name, &output, received,
                           (size_t)c->width * chorus_dtype_size(c->dtype), c->seed, everyone);
        }
        chorus_handle_free(c->handle);
        free(c->input);
    }
}

static void test_even_and_blocking(void)
{
    /* NULL splits: every rank gets 2 rows of 4 int32 from every rank. */
    int64_t rows = 2 * test_size;
    int32_t *input = malloc((size_t)(rows * 4) * sizeof *input);
    for (int64_t i = 0; i < rows * 4; i++)
        input[i] = test_rank * 100000 + (int32_t)i;
    chorus_tensor tensor = {.data = input, .dtype = CHORUS_INT32, .ndims = 2, .shape = {rows, 4}};
    chorus_tensor output = {0};
    int64_t received[MAX_RANKS] = {0};
    EXPECT_STATUS(chorus_alltoall("a2a.even", &tensor, NULL, &output, received), CHORUS_OK);
    EXPECT(output.shape[0] == rows, "a2a.even: %lld rows", (long long)output.shape[0]);
    const int32_t *got = output.data;
    for (int from = 0; output.shape[0] == rows && from < test_size; from++) {
        EXPECT(received[from] == 2, "a2a.even: %lld rows from rank %d", (long long)received[from],
               from);
        for (int64_t i = 0; i < 8; i++) {
            int32_t expected = from * 100000 + (int32_t)(test_rank * 8 + i);
            EXPECT(got[from * 8 + i] == expected,
                   "a2a.even: element %lld from rank %d: %d, "
                   "expected %d",
                   (long long)i, from, got[from * 8 + i], expected);
        }
    }
    free(output.data); /* the blocking form hands the output to the caller */
    free(input);
}

/* Rows rank `from` sends rank `to` in the even-split cases below, and whether `from` passes
 * them as splits (else NULL: its rows split evenly). */
static int64_t even_case_rows(int which, int from, int to)
{
    switch (which) {
    case 0: /* every rank even, but each with rows of its own: the splits must travel */
        return from + 1;
    case 1: /* rank 0 passes splits that happen to be even: as if NULL */
        return 3;
    default: /* rank 0 sends everything to itself, the others split evenly */
        return from == 0 ? (to == 0 ? 2 * test_size : 0) : 2;
    }
}

static bool even_case_passes_splits(int which, int from)
{
    return which > 0 && from == 0;
}

/* Alltoalls whose ranks split evenly only in part: where every rank splits the same rows evenly
 * no rank needs the others' splits, otherwise they are exchanged; both must place every row. */
static void test_partly_even(void)
{
    for (int which = 0; which < 3; which++) {
        char name[32];
        snprintf(name, sizeof name, "a2a.partly_even.%d", which);
        int64_t splits[MAX_RANKS], rows = 0;
        for (int to = 0; to < test_size; to++)
            rows += splits[to] = even_case_rows(which, test_rank, to);
        int32_t *input = malloc((size_t)rows * sizeof *input + 1);
        for (int64_t i = 0; i < rows; i++)
            input[i] = test_rank * 100000 + (int32_t)i;
        chorus_tensor tensor = {.data = input, .dtype = CHORUS_INT32, .ndims = 1, .shape = {rows}};
        chorus_tensor output = {0};
        int64_t received[MAX_RANKS] = {0};
        EXPECT_STATUS(chorus_alltoall(name, &tensor,
                                      even_case_passes_splits(which, test_rank) ? splits : NULL,
                                      &output, received),
                      CHORUS_OK);
        const int32_t *got = output.data;
        int64_t at = 0;
        for (int from = 0; got != NULL && from < test_size; from++) {
            int64_t expected_rows = even_case_rows(which, from, test_rank), first = 0;
            for (int to = 0; to < test_rank; to++)
                first += even_case_rows(which, from, to);
            EXPECT(received[from] == expected_rows, "%s: %lld rows from rank %d, expected %lld",
                   name, (long long)received[from], from, (long long)expected_rows);
            for (int64_t i = 0; i < expected_rows && at < output.shape[0]; i++, at++)
                EXPECT(got[at] == from * 100000 + (int32_t)(first + i),
                       "%s: row %lld from rank %d is %d, expected %d", name, (long long)i, from,
                       got[at], from * 100000 + (int32_t)(first + i));
        }
        EXPECT(output.shape[0] == at, "%s: %lld rows received, expected %lld", name,
               (long long)output.shape[0], (long long)at);
        free(output.data);
        free(input);
    }
}

/* The last rank joins at once: it sends nothing; the others' rows for it are dropped. */
static void test_joined_rank(void)
{
    if (test_size < 2)
        return;
    if (test_rank == test_size - 1) {
        EXPECT_STATUS(chorus_join(), CHORUS_OK);
        return;
    }
    bool sends[MAX_RANKS];
    for (int r = 0; r < MAX_RANKS; r++)
        sends[r] = true;
    sends[test_size - 1] = false;
    int64_t splits[MAX_RANKS];
    unsigned char *input = make_input(77, 8, splits);
    int64_t rows = 0;
    for (int to = 0; to < test_size; to++)
        rows += splits[to];
    chorus_tensor tensor = {.data = input, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {rows}};
    chorus_tensor output = {0};
    int64_t received[MAX_RANKS] = {0};
    EXPECT_STATUS(chorus_alltoall("a2a.joined", &tensor, splits, &output, received), CHORUS_OK);
    check_received("a2a.joined", &output, received, 8, 77, sends);
    free(output.data);
    free(input);
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
}

static void test_errors(void)
{
    float data[4 * MAX_RANKS] = {0};
    chorus_tensor tensor = {.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {4}};
    chorus_handle *handle = NULL;
    int64_t splits[MAX_RANKS] = {5};
    EXPECT_STATUS(chorus_alltoall_async("a2a.sum", &tensor, splits, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "a2a.sum") != NULL, "names the tensor: %s",
           chorus_last_error());
    if (test_size > 1) {
        chorus_tensor odd = {
            .data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {2 * test_size + 1}};
        EXPECT_STATUS(chorus_alltoall_async("a2a.odd", &odd, NULL, &handle),
                      CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "do not split evenly") != NULL, "says why: %s",
               chorus_last_error());
        /* Rank 0 sends rows of 2 elements, the others rows of 1: every rank hears of it. */
        chorus_tensor rows = {.data = data,
                              .dtype = CHORUS_FLOAT32,
                              .ndims = 2,
                              .shape = {test_size, test_rank == 0 ? 2 : 1}};
        chorus_tensor output = {0};
        EXPECT_STATUS(chorus_alltoall("a2a.shape", &rows, NULL, &output, NULL),
                      CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_last_error(), "a2a.shape") != NULL &&
                   strstr(chorus_last_error(), "rank 0") != NULL,
               "the shape mismatch names the tensor and rank 0: %s", chorus_last_error());
    }
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    test_init_chorus();
    if (test_size > MAX_RANKS) {
        fprintf(stderr, "mpi_alltoall runs with at most %d ranks\n", MAX_RANKS);
        return 1;
    }
    test_step = "uneven splits";
    test_uneven_splits();
    test_step = "even splits, blocking";
    test_even_and_blocking();
    test_step = "splits even on some ranks";
    test_partly_even();
    test_step = "errors";
    test_errors();
    test_step = "joined rank";
    test_joined_rank();
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_alltoall");
}
