/*
 * mpi_ordered.c — ordered operations (CHORUS_OP_ORDERED) under mpirun. Every rank submits the
 * same sequence, all before any is waited for: allreduces of every op over several dtypes and
 * odd counts (0, 1, fewer than the ranks, primes), broadcasts from every rank, allgathers of rows
 * that differ per rank, reducescatters and alltoalls with uneven splits; each result is checked
 * against the reference computed from every rank's inputs. Then the same in a process set (the
 * odd ranks) while the other ranks run their own; names that repeat or are NULL; and the
 * mismatches: a shape, a dtype, a collective that differs at one position fails on every rank
 * with one message naming the position and the ranks, after which the ranks go on in step.
 * Sizes on both sides of the host's small-message limit with barriers between them, a barrier
 * against an allreduce, and ordered operations (small, and larger than the limit) on one thread
 * beside negotiated ones on another.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define MAX_RANKS 16
#define MAX_OPERATIONS 512
#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

enum kind { ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER, ALLTOALL };

struct operation {
    enum kind kind;
    chorus_handle *handle;
    void *buffer;
    chorus_dtype dtype;
    chorus_op op;
    int64_t count; /* allreduce: elements; reducescatter: rows of 3; allgather: unused */
    int root;
    uint64_t seed;
};

static struct operation operations[MAX_OPERATIONS];
static size_t operation_count;

static int members_of(int process_set, int *ranks)
{
    int count = 0;
    EXPECT_STATUS(chorus_process_set_ranks(process_set, ranks, MAX_RANKS, &count), CHORUS_OK);
    return count;
}

static void submit_ordered(chorus_op_args *args, struct operation *op, int process_set)
{
    args->flags = CHORUS_OP_ORDERED;
    args->process_set = process_set;
    args->name = (operation_count % 3 == 0) ? NULL : "same name every time";
    EXPECT_STATUS(chorus_submit(args, &op->handle), CHORUS_OK);
}

/* Rows rank `rank` contributes to an allgather of seed `seed`: 0..3. */
static int64_t gathered_rows(uint64_t seed, int rank)
{
    return (int64_t)(test_random(seed, (uint64_t)rank, 7) % 4);
}

/* Rows `from` sends `to` in an alltoall of seed `seed`: 0..2. */
static int64_t alltoall_rows(uint64_t seed, int from, int to)
{
    return (int64_t)(test_random(seed, (uint64_t)from, (uint64_t)to) % 3);
}

/* Submits one of each kind, and allreduces of every op and several dtypes and counts, in the
 * set `process_set` (0: the job), this rank being `me` of `members`. */
static void submit_sequence(int process_set, int me, int members, const int *ranks,
                            uint64_t seed_base)
{
    static const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32,
                                          CHORUS_INT64, CHORUS_FLOAT16, CHORUS_UINT8};
    static const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX,
                                    CHORUS_PRODUCT};
    const int64_t counts[] = {0, 1, members > 1 ? members - 1 : 1, 7, 1009};
    for (size_t d = 0; d < COUNT_OF(dtypes); d++) {
        for (size_t o = 0; o < COUNT_OF(ops); o++) {
            int64_t count = counts[(d + o) % COUNT_OF(counts)];
            if (dtypes[d] == CHORUS_UINT8 && ops[o] == CHORUS_AVERAGE)
                continue;
            struct operation *op = &operations[operation_count];
            *op = (struct operation){.kind = ALLREDUCE, .dtype = dtypes[d], .op = ops[o],
                                     .count = count,
                                     .seed = seed_base + operation_count};
            op->buffer = malloc((size_t)(count > 0 ? count : 1) * chorus_dtype_size(dtypes[d]));
            reference_fill(op->buffer, (size_t)count, dtypes[d], ops[o], op->seed, me);
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            args.input = (chorus_tensor){.data = op->buffer, .dtype = dtypes[d], .ndims = 1,
                                         .shape = {count}};
            args.op = ops[o];
            submit_ordered(&args, op, process_set);
            operation_count++;
        }
    }
    for (int root = 0; root < members; root++) {
        struct operation *op = &operations[operation_count];
        *op = (struct operation){.kind = BROADCAST, .root = root, .count = 13 + root,
                                 .seed = seed_base + operation_count};
        op->buffer = malloc((size_t)op->count);
        reference_fill_bytes(op->buffer, (size_t)op->count, op->seed, me == root ? root : -1);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_BROADCAST;
        args.root = ranks[root];
        args.input = (chorus_tensor){.data = op->buffer, .dtype = CHORUS_UINT8, .ndims = 1,
                                     .shape = {op->count}};
        submit_ordered(&args, op, process_set);
        operation_count++;
    }
    {
        struct operation *op = &operations[operation_count];
        *op = (struct operation){.kind = ALLGATHER, .seed = seed_base + operation_count};
        int64_t rows = gathered_rows(op->seed, me);
        op->buffer = malloc((size_t)(rows > 0 ? rows : 1) * 5 * sizeof(int32_t));
        reference_fill_bytes(op->buffer, (size_t)rows * 5 * sizeof(int32_t), op->seed, me);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_ALLGATHER;
        args.input = (chorus_tensor){.data = op->buffer, .dtype = CHORUS_INT32, .ndims = 2,
                                     .shape = {rows, 5}};
        submit_ordered(&args, op, process_set);
        operation_count++;
    }
    {
        struct operation *op = &operations[operation_count];
        *op = (struct operation){.kind = REDUCESCATTER, .dtype = CHORUS_FLOAT64, .op = CHORUS_SUM,
                                 .count = 2 * members + 1, .seed = seed_base + operation_count};
        op->buffer = malloc((size_t)op->count * 3 * sizeof(double));
        reference_fill(op->buffer, (size_t)op->count * 3, CHORUS_FLOAT64, CHORUS_SUM, op->seed,
                       me);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_REDUCESCATTER;
        args.input = (chorus_tensor){.data = op->buffer, .dtype = CHORUS_FLOAT64, .ndims = 2,
                                     .shape = {op->count, 3}};
        submit_ordered(&args, op, process_set);
        operation_count++;
    }
    {
        struct operation *op = &operations[operation_count];
        *op = (struct operation){.kind = ALLTOALL, .seed = seed_base + operation_count};
        int64_t splits[MAX_RANKS], rows = 0;
        for (int to = 0; to < members; to++)
            rows += splits[to] = alltoall_rows(op->seed, me, to);
        op->buffer = malloc((size_t)(rows > 0 ? rows : 1) * 2);
        unsigned char *row = op->buffer;
        for (int to = 0; to < members; to++)
            for (int64_t i = 0; i < splits[to]; i++, row += 2)
                reference_fill_bytes(row, 2, op->seed * 100 + (uint64_t)to * 10 + (uint64_t)i,
                                     me);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_ALLTOALL;
        args.splits = splits;
        args.input = (chorus_tensor){.data = op->buffer, .dtype = CHORUS_UINT8, .ndims = 2,
                                     .shape = {rows, 2}};
        submit_ordered(&args, op, process_set);
        operation_count++;
    }
}

static void check_operation(struct operation *op, int me, int members)
{
    char why[256] = "";
    EXPECT_STATUS(chorus_wait(op->handle), CHORUS_OK);
    chorus_tensor output = {0};
    switch (op->kind) {
    case ALLREDUCE:
        EXPECT(reference_check_allreduce(op->buffer, (size_t)op->count, op->dtype, op->op,
                                         members, NULL, op->seed, 1.0, 1.0, why,
                                         sizeof why) < 0,
               "ordered allreduce %s %s of %lld: %s", chorus_dtype_name(op->dtype),
               chorus_op_name(op->op), (long long)op->count, why);
        break;
    case BROADCAST:
        EXPECT(reference_check_bytes(op->buffer, (size_t)op->count, op->seed, op->root) < 0,
               "ordered broadcast from member %d", op->root);
        break;
    case ALLGATHER: {
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        int64_t total = 0;
        const unsigned char *at = output.data;
        for (int r = 0; r < members; r++) {
            int64_t rows = gathered_rows(op->seed, r);
            EXPECT(reference_check_bytes(at, (size_t)rows * 20, op->seed, r) < 0,
                   "ordered allgather: the rows of member %d", r);
            at += rows * 20;
            total += rows;
        }
        EXPECT(output.shape[0] == total && output.shape[1] == 5,
               "ordered allgather: %lld rows, expected %lld", (long long)output.shape[0],
               (long long)total);
        break;
    }
    case REDUCESCATTER: {
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        int64_t rows = op->count, base = rows / members, extra = rows % members;
        int64_t mine = base + (me < extra ? 1 : 0);
        int64_t first = me * base + (me < extra ? me : extra);
        EXPECT(output.shape[0] == mine, "ordered reducescatter: %lld rows, expected %lld",
               (long long)output.shape[0], (long long)mine);
        EXPECT(reference_check_reduced(output.data, (size_t)first * 3, (size_t)mine * 3,
                                       CHORUS_FLOAT64, CHORUS_SUM, members, NULL, op->seed, 1.0,
                                       1.0, why, sizeof why) < 0,
               "ordered reducescatter: %s", why);
        break;
    }
    case ALLTOALL: {
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        int64_t received[MAX_RANKS] = {0};
        EXPECT_STATUS(chorus_handle_received_splits(op->handle, received, MAX_RANKS), CHORUS_OK);
        const unsigned char *row = output.data;
        for (int from = 0; from < members; from++) {
            int64_t rows = alltoall_rows(op->seed, from, me);
            EXPECT(received[from] == rows, "ordered alltoall: %lld rows from member %d, "
                   "expected %lld", (long long)received[from], from, (long long)rows);
            for (int64_t i = 0; i < rows; i++, row += 2)
                EXPECT(reference_check_bytes(row, 2, op->seed * 100 + (uint64_t)me * 10 +
                                                         (uint64_t)i, from) < 0,
                       "ordered alltoall: row %lld from member %d", (long long)i, from);
        }
        break;
    }
    }
    chorus_handle_free(op->handle);
    free(op->buffer);
}

/* Run on several hosts (test/check_multihost.sh): where the job's lane (one host) is the
 * subject, the checks are skipped. */
static bool across_hosts;

static void test_sequence(int process_set, uint64_t seed_base)
{
    int ranks[MAX_RANKS];
    int members = members_of(process_set, ranks), me = -1;
    for (int m = 0; m < members; m++)
        if (ranks[m] == test_rank)
            me = m;
    if (me < 0)
        return;
    operation_count = 0;
    submit_sequence(process_set, me, members, ranks, seed_base);
    for (size_t i = 0; i < operation_count; i++)
        check_operation(&operations[i], me, members);
}

/* At the same position, rank 1 (or the last rank) submits something else: every rank's handle
 * fails with CHORUS_ERR_MISMATCH and one message naming the position, what differs and the
 * ranks; the next ordered operation runs in step. */
static void test_mismatch(const char *what, const char *expected)
{
    test_step = what;
    int odd = test_size > 1 ? 1 : -1;
    float data[600] = {1, 2, 3, 4, 5, 6};
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.flags = CHORUS_OP_ORDERED;
    args.name = what;
    args.input = floats(data, 6);
    if (test_rank == odd) {
        if (strcmp(what, "shape") == 0)
            args.input.shape[0] = 5;
        else if (strcmp(what, "long shape") == 0) /* its data rides apart from the others' */
            args.input.shape[0] = 600;
        else if (strcmp(what, "dtype") == 0)
            args.input.dtype = CHORUS_INT32;
        else if (strcmp(what, "collective") == 0)
            args.collective = CHORUS_BROADCAST;
        else if (strcmp(what, "op") == 0)
            args.op = CHORUS_MAX;
    }
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
    chorus_status status = chorus_wait(handle);
    const char *message = chorus_handle_error(handle);
    if (test_size > 1) {
        EXPECT(status == CHORUS_ERR_MISMATCH, "%s: got %s (%s)", what,
               chorus_status_name(status), message);
        EXPECT(strstr(message, expected) != NULL && strstr(message, "ordered position") != NULL,
               "%s: the message \"%s\" should name \"%s\" and the position", what, message,
               expected);
        EXPECT(test_same_on_all_ranks(message), "%s: the message differs between ranks: %s",
               what, message);
    } else {
        EXPECT(status == CHORUS_OK, "%s at 1 rank: %s", what, message);
    }
    chorus_handle_free(handle);
    /* In step afterwards. */
    float one = (float)test_rank;
    args = (chorus_op_args)CHORUS_OP_ARGS_INIT;
    args.flags = CHORUS_OP_ORDERED;
    args.input = floats(&one, 1);
    expect_completes(&args);
    float expected_sum = (float)(test_size * (test_size - 1) / 2);
    EXPECT(one == expected_sum, "after the %s mismatch: %g, expected %g", what, one,
           expected_sum);
}

/* Allreduces of counts on both sides of CHORUS_SMALL_LIMIT (64K: 16384 floats) and allgathers
 * where one rank's rows alone exceed it, a barrier between each two, all submitted before any is
 * waited for: those the host's slots run and those handed to the background thread stay in
 * step, and barriers (in call order with them on one host) pass. Then a barrier where rank 1
 * submits an allreduce instead: both fail, the barrier naming the collectives. */
static void test_around_the_limit(void)
{
    test_step = "around the small-message limit";
    static const int64_t counts[] = {16383, 16384, 16385, 100000, 1, 20000};
    enum { SIZES = sizeof counts / sizeof counts[0] };
    float *buffers[SIZES];
    chorus_handle *handles[2 * SIZES];
    int32_t *rows_of[SIZES];
    for (int i = 0; i < SIZES; i++) {
        buffers[i] = malloc((size_t)counts[i] * sizeof(float));
        for (int64_t e = 0; e < counts[i]; e++)
            buffers[i][e] = (float)(test_rank + 1) * (float)((e % 7) + 1);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.flags = CHORUS_OP_ORDERED;
        args.name = "around the limit";
        args.input = floats(buffers[i], counts[i]);
        EXPECT_STATUS(chorus_submit(&args, &handles[2 * i]), CHORUS_OK);
        /* Rows of 4 int32 (16 bytes): the last rank's are counts[i] / 4 rows. */
        int64_t rows = test_rank == test_size - 1 ? counts[i] / 4 : test_rank;
        rows_of[i] = malloc((size_t)(rows > 0 ? rows : 1) * 16);
        for (int64_t e = 0; e < rows * 4; e++)
            rows_of[i][e] = test_rank * 1000003 + (int32_t)e;
        args = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args.flags = CHORUS_OP_ORDERED;
        args.collective = CHORUS_ALLGATHER;
        args.input = (chorus_tensor){.data = rows_of[i], .dtype = CHORUS_INT32, .ndims = 2,
                                     .shape = {rows, 4}};
        EXPECT_STATUS(chorus_submit(&args, &handles[2 * i + 1]), CHORUS_OK);
        EXPECT_STATUS(chorus_barrier(), CHORUS_OK);
    }
    float ranks_sum = (float)(test_size * (test_size + 1) / 2);
    for (int i = 0; i < SIZES; i++) {
        EXPECT_STATUS(chorus_wait(handles[2 * i]), CHORUS_OK);
        int64_t wrong = 0;
        for (int64_t e = 0; e < counts[i]; e++)
            wrong += buffers[i][e] != ranks_sum * (float)((e % 7) + 1);
        EXPECT(wrong == 0, "allreduce of %lld floats: %lld wrong", (long long)counts[i],
               (long long)wrong);
        EXPECT_STATUS(chorus_wait(handles[2 * i + 1]), CHORUS_OK);
        chorus_tensor gathered = {0};
        EXPECT_STATUS(chorus_handle_output(handles[2 * i + 1], &gathered), CHORUS_OK);
        const int32_t *at = gathered.data;
        int64_t total = 0;
        for (int r = 0; r < test_size; r++) {
            int64_t rows = r == test_size - 1 ? counts[i] / 4 : r;
            for (int64_t e = 0; e < rows * 4; e++)
                wrong += at[e] != r * 1000003 + (int32_t)e;
            at += rows * 4;
            total += rows;
        }
        EXPECT(wrong == 0 && gathered.shape[0] == total,
               "allgather with %lld rows from the last rank: %lld wrong, %lld rows of %lld",
               (long long)(counts[i] / 4), (long long)wrong, (long long)gathered.shape[0],
               (long long)total);
        chorus_handle_free(handles[2 * i]);
        chorus_handle_free(handles[2 * i + 1]);
        free(buffers[i]);
        free(rows_of[i]);
    }
    if (test_size < 2 || across_hosts) /* there chorus_barrier is negotiated, not ordered */
        return;
    test_step = "a barrier against an allreduce";
    if (test_rank == 1) {
        float value = 1;
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.flags = CHORUS_OP_ORDERED;
        args.name = "not a barrier";
        args.input = floats(&value, 1);
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_handle_error(handle), "collective mismatch") != NULL, "%s",
               chorus_handle_error(handle));
        chorus_handle_free(handle);
    } else {
        EXPECT_STATUS(chorus_barrier(), CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_last_error(), "collective mismatch") != NULL &&
                   strstr(chorus_last_error(), "rank 1 allreduce") != NULL,
               "%s", chorus_last_error());
    }
    EXPECT_STATUS(chorus_barrier(), CHORUS_OK);
}

/* A barrier in the lane returns after the negotiated collectives this rank submitted before it
 * have completed, as a negotiated barrier would (and Horovod's and gloo's do): rank 0 submits
 * early, the others late, and rank 0 finds its operation complete as its barrier returns. And
 * an operation that another rank submits only after its barrier still completes (no wait for
 * it there). */
static void test_barrier_after_negotiated(void)
{
    test_step = "a barrier after negotiated operations";
    float values[1000];
    for (int e = 0; e < 1000; e++)
        values[e] = (float)(test_rank + 1) * (float)(e % 5);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "before the barrier";
    args.input = floats(values, 1000);
    chorus_handle *handle = NULL;
    if (test_rank != 0)
        nanosleep(&(struct timespec){.tv_nsec = 50L * 1000 * 1000}, NULL);
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_barrier(), CHORUS_OK);
    EXPECT(chorus_test(handle) == CHORUS_OK, "after the barrier, the allreduce submitted before "
           "it is %s", chorus_status_name(chorus_test(handle)));
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    float ranks_sum = (float)(test_size * (test_size + 1) / 2);
    int wrong = 0;
    for (int e = 0; e < 1000; e++)
        wrong += values[e] != ranks_sum * (float)(e % 5);
    EXPECT(wrong == 0, "%d wrong", wrong);
    chorus_handle_free(handle);
    /* Rank 0 submits before its barrier, the others after theirs. */
    float value = 1;
    args.name = "across the barrier";
    args.input = floats(&value, 1);
    if (test_rank == 0)
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_barrier(), CHORUS_OK);
    if (test_rank != 0)
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    EXPECT(value == (float)test_size, "across the barrier: %g", value);
    chorus_handle_free(handle);
}

static void test_refusals(void)
{
    test_step = "refusals";
    float data[2] = {0};
    chorus_op_args group[2] = {CHORUS_OP_ARGS_INIT, CHORUS_OP_ARGS_INIT};
    group[0].flags = group[1].flags = CHORUS_OP_ORDERED;
    group[0].name = "a";
    group[1].name = "b";
    group[0].input = floats(data, 1);
    group[1].input = floats(data + 1, 1);
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit_group(group, 2, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "ordered") != NULL, "%s", chorus_last_error());
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.flags = 1u << 7;
    args.name = "unknown flag";
    args.input = floats(data, 1);
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
}

/* Two threads submit ordered allreduces in turns (a token decides the order, alike on every
 * rank) without waiting before they pass the token, then wait for their own: a submitting thread
 * may run an operation itself while the other waits and the background thread idles (the
 * ThreadSanitizer suite runs this). */
#define THREADED_OPERATIONS 200
static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t token_passed = PTHREAD_COND_INITIALIZER;
static int token;

static void *take_turns(void *argument)
{
    int me = (int)(intptr_t)argument;
    static float values[THREADED_OPERATIONS];
    chorus_handle *handles[THREADED_OPERATIONS] = {0};
    for (int i = me; i < THREADED_OPERATIONS; i += 2) {
        pthread_mutex_lock(&token_lock);
        while (token != i)
            pthread_cond_wait(&token_passed, &token_lock);
        values[i] = (float)(test_rank * THREADED_OPERATIONS + i);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.flags = CHORUS_OP_ORDERED;
        args.input = floats(&values[i], 1);
        EXPECT_STATUS(chorus_submit(&args, &handles[i]), CHORUS_OK);
        token = i + 1;
        pthread_cond_broadcast(&token_passed);
        pthread_mutex_unlock(&token_lock);
    }
    for (int i = me; i < THREADED_OPERATIONS; i += 2) {
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_OK);
        chorus_handle_free(handles[i]);
        float expected = (float)(THREADED_OPERATIONS * test_size * (test_size - 1) / 2 +
                                 test_size * i);
        EXPECT(values[i] == expected, "threaded ordered allreduce %d: %g, expected %g", i,
               values[i], expected);
    }
    return NULL;
}

static void test_threads(void)
{
    test_step = "two threads in turns";
    token = 0;
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, take_turns, (void *)(intptr_t)t);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
}

/* Ordered operations on one thread while another thread runs negotiated ones, the two
 * interleaving differently on every rank (a DDP model and a Horovod-style optimizer in one
 * script): both complete, with the right results. */
struct beside {
    bool ordered;
    int64_t count;
    int operations;
};

static void *run_beside(void *argument)
{
    const struct beside *kind = argument;
    float *buffer = malloc((size_t)kind->count * sizeof(float));
    for (int i = 0; i < kind->operations; i++) {
        for (int64_t e = 0; e < kind->count; e++)
            buffer[e] = (float)(test_rank + i + e % 5);
        chorus_tensor tensor = floats(buffer, kind->count);
        if (kind->ordered) {
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            args.flags = CHORUS_OP_ORDERED;
            args.name = "beside negotiated";
            args.input = tensor;
            expect_completes(&args);
        } else {
            char name[64];
            snprintf(name, sizeof name, "beside ordered %d", i % 7);
            EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_SUM), CHORUS_OK);
        }
        int64_t wrong = 0;
        for (int64_t e = 0; e < kind->count; e++)
            wrong += buffer[e] != (float)(test_size * (test_size - 1) / 2 +
                                          test_size * (i + e % 5));
        EXPECT(wrong == 0, "%s allreduce %d of %lld beside the other kind: %lld wrong",
               kind->ordered ? "ordered" : "negotiated", i, (long long)kind->count,
               (long long)wrong);
        /* Each rank's own pace: the two kinds meet in a different order everywhere. */
        if ((i + test_rank) % 3 == 0)
            sched_yield();
    }
    free(buffer);
    return NULL;
}

static void test_beside_negotiated(int64_t count)
{
    test_step = count > 16384 ? "ordered and negotiated at once, large" : "ordered and negotiated "
                                                                            "at once";
    int calls = count > 16384 ? 40 : 300;
    struct beside kinds[2] = {{.ordered = true, .count = count, .operations = calls},
                              {.ordered = false, .count = count, .operations = calls}};
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, run_beside, &kinds[t]);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    across_hosts = argc > 1 && strcmp(argv[1], "across-hosts") == 0;
    test_init_chorus();
    test_step = "the job";
    test_sequence(0, 1000);
    test_step = "a process set";
    int odd[MAX_RANKS], even[MAX_RANKS], odd_count = 0, even_count = 0;
    for (int r = 0; r < test_size; r++) {
        if (r % 2)
            odd[odd_count++] = r;
        else
            even[even_count++] = r;
    }
    int odd_set = 0, even_set = 0;
    if (odd_count > 0)
        EXPECT_STATUS(chorus_process_set_add(odd, odd_count, &odd_set), CHORUS_OK);
    EXPECT_STATUS(chorus_process_set_add(even, even_count, &even_set), CHORUS_OK);
    test_sequence(test_rank % 2 ? odd_set : even_set, 5000);
    /* Negotiated and ordered operations, one kind after the other. */
    test_step = "negotiated between ordered";
    float value = 1;
    EXPECT_STATUS(chorus_allreduce("negotiated", &(chorus_tensor){.data = &value,
                                   .dtype = CHORUS_FLOAT32, .ndims = 0}, NULL, CHORUS_SUM),
                  CHORUS_OK);
    EXPECT(value == (float)test_size, "negotiated allreduce: %g", value);
    test_sequence(0, 9000);
    test_mismatch("shape", "shape mismatch");
    test_mismatch("long shape", "shape mismatch");
    test_mismatch("dtype", "dtype mismatch");
    test_mismatch("collective", "collective mismatch");
    test_mismatch("op", "op mismatch");
    test_around_the_limit();
    test_barrier_after_negotiated();
    test_refusals();
    test_threads();
    /* In flight beside negotiated operations: on one host only (chorus.h); test/check_multihost.sh
     * runs the rest across hosts with "across-hosts". */
    if (!across_hosts) {
        test_beside_negotiated(3);
        test_beside_negotiated(1000);
        test_beside_negotiated(300000); /* 1.2 MB: the lanes' own executors */
    }
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_ordered");
}
