/*
 * mpi_process_sets.c — process sets through the public API under mpirun. Every rank adds the
 * same sets: the even ranks, the odd ranks, the first and last rank (overlapping the others),
 * and every rank. Then, all submitted before any is waited for, each member runs in each of its
 * sets allreduces (every op, several dtypes and counts), broadcasts from every member, allgathers
 * of rows that differ per member, reducescatters and alltoalls, beside allreduces of the whole
 * job and a tensor of the same name in every set. Each result is checked against the reference
 * computed from every member's inputs, members numbered by their rank within the set. Then: the
 * odd ranks' set runs while rank 0 submits nothing (sets proceed independently), a group of
 * the same name in the even and the odd ranks' sets at once, the errors
 * (not a member, a set that does not exist, a root outside the set, a mismatch inside a set,
 * adds that name different ranks), and removing a set with a tensor still pending.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#define MAX_SET_SIZE 16
#define MAX_OPERATIONS 1024

struct set {
    int id;
    int ranks[MAX_SET_SIZE];
    int size;
    int me; /* this rank's rank in the set; -1 when not a member */
    const char *label;
    int submitted; /* operations so far: their names and seeds, alike on every member */
};

enum kind { ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER, ALLTOALL };

struct operation {
    enum kind kind;
    const struct set *set;
    chorus_handle *handle;
    void *buffer;
    chorus_dtype dtype;
    chorus_op op;
    int64_t count; /* allreduce: elements; reducescatter: rows (of 2) */
    int root;      /* broadcast: the job's rank */
    uint64_t seed;
    char name[96];
};

static struct operation operations[MAX_OPERATIONS];
static size_t operation_count;

static void add_set(struct set *set, const char *label, const int *ranks, int size)
{
    set->label = label;
    set->submitted = 0;
    set->size = size;
    set->me = -1;
    for (int m = 0; m < size; m++) {
        set->ranks[m] = ranks[m];
        if (ranks[m] == test_rank)
            set->me = m;
    }
    set->id = -1;
    EXPECT_STATUS(chorus_process_set_add(ranks, size, &set->id), CHORUS_OK);
    EXPECT(set->id > 0, "%s: id %d", label, set->id);
    int got[MAX_SET_SIZE] = {0}, count = 0;
    EXPECT_STATUS(chorus_process_set_ranks(set->id, got, MAX_SET_SIZE, &count), CHORUS_OK);
    EXPECT(count == size && memcmp(got, ranks, (size_t)size * sizeof *got) == 0,
           "%s: chorus_process_set_ranks gave %d ranks", label, count);
}

static struct operation *new_operation(enum kind kind, struct set *set, const char *what)
{
    struct operation *op = &operations[operation_count++];
    int index = set->submitted++;
    *op = (struct operation){
        .kind = kind, .set = set, .seed = 9000 + (uint64_t)set->id * 1000 + (uint64_t)index};
    snprintf(op->name, sizeof op->name, "%s.%s.%d", set->label, what, index);
    return op;
}

static void submit(struct operation *op, chorus_op_args *args)
{
    args->name = op->name;
    args->process_set = op->set->id;
    EXPECT_STATUS(chorus_submit(args, &op->handle), CHORUS_OK);
}

static int64_t gathered_rows(int member)
{
    return (int64_t)(member % 3);
}

static int64_t alltoall_rows(int from, int to)
{
    return (int64_t)((from + 2 * to) % 3);
}

/* Rank `m` of the set's block of a reducescatter of `rows` rows, as Horovod splits them. */
static int64_t block_rows(int64_t rows, int size, int m)
{
    return rows / size + (m < rows % size ? 1 : 0);
}

static void submit_in(struct set *set)
{
    const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32, CHORUS_INT64};
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    const int64_t counts[] = {0, 1, set->size > 1 ? set->size - 1 : 2, 7, 1021};
    for (size_t d = 0; d < 4; d++)
        for (size_t o = 0; o < 5; o++)
            for (size_t c = 0; c < 5; c++) {
                if ((d + o + c) % 3 != 0)
                    continue; /* a spread of the combinations keeps the run short */
                struct operation *op = new_operation(ALLREDUCE, set, "allreduce");
                op->dtype = dtypes[d];
                op->op = ops[o];
                op->count = counts[c];
                op->buffer = malloc((size_t)op->count * chorus_dtype_size(op->dtype) + 1);
                reference_fill(op->buffer, (size_t)op->count, op->dtype, op->op, op->seed, set->me);
                chorus_op_args args = CHORUS_OP_ARGS_INIT;
                args.input = (chorus_tensor){
                    .data = op->buffer, .dtype = op->dtype, .ndims = 1, .shape = {op->count}};
                args.op = op->op;
                submit(op, &args);
            }
    for (int m = 0; m < set->size; m++) {
        struct operation *op = new_operation(BROADCAST, set, "broadcast");
        op->root = set->ranks[m];
        op->count = 37 + m;
        op->buffer = malloc((size_t)op->count);
        if (set->me == m)
            reference_fill_bytes(op->buffer, (size_t)op->count, op->seed, op->root);
        else
            memset(op->buffer, 0xee, (size_t)op->count);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_BROADCAST;
        args.input = (chorus_tensor){
            .data = op->buffer, .dtype = CHORUS_UINT8, .ndims = 1, .shape = {op->count}};
        args.root = op->root;
        submit(op, &args);
    }
    {
        struct operation *op = new_operation(ALLGATHER, set, "allgather");
        int64_t rows = gathered_rows(set->me);
        op->buffer = malloc((size_t)rows * 3 * sizeof(int32_t) + 1);
        reference_fill_bytes(op->buffer, (size_t)rows * 3 * sizeof(int32_t), op->seed, set->me);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_ALLGATHER;
        args.input = (chorus_tensor){
            .data = op->buffer, .dtype = CHORUS_INT32, .ndims = 2, .shape = {rows, 3}};
        submit(op, &args);
    }
    const int64_t scatter_rows[] = {0, 1, 7, 13};
    for (size_t i = 0; i < 4; i++) {
        struct operation *op = new_operation(REDUCESCATTER, set, "reducescatter");
        op->dtype = CHORUS_FLOAT64;
        op->op = i % 2 ? CHORUS_AVERAGE : CHORUS_SUM;
        op->count = scatter_rows[i];
        op->buffer = malloc((size_t)op->count * 2 * sizeof(double) + 1);
        reference_fill(op->buffer, (size_t)op->count * 2, op->dtype, op->op, op->seed, set->me);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_REDUCESCATTER;
        args.input = (chorus_tensor){
            .data = op->buffer, .dtype = op->dtype, .ndims = 2, .shape = {op->count, 2}};
        args.op = op->op;
        submit(op, &args);
    }
    {
        struct operation *op = new_operation(ALLTOALL, set, "alltoall");
        int64_t splits[MAX_SET_SIZE], total = 0;
        for (int to = 0; to < set->size; to++)
            total += splits[to] = alltoall_rows(set->me, to);
        int32_t *rows = malloc((size_t)total * sizeof *rows + 1);
        int64_t at = 0;
        for (int to = 0; to < set->size; to++)
            for (int64_t i = 0; i < splits[to]; i++)
                rows[at++] = (int32_t)(op->seed * 1000 + (uint64_t)set->me * 100 +
                                       (uint64_t)to * 10 + (uint64_t)i);
        op->buffer = rows;
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_ALLTOALL;
        args.input =
            (chorus_tensor){.data = rows, .dtype = CHORUS_INT32, .ndims = 1, .shape = {total}};
        args.splits = splits;
        submit(op, &args);
    }
}

static void check_allgather(const struct operation *op, const chorus_tensor *output)
{
    int64_t total = 0;
    for (int m = 0; m < op->set->size; m++)
        total += gathered_rows(m);
    EXPECT(output->shape[0] == total && output->shape[1] == 3, "%s: %lld rows, expected %lld",
           op->name, (long long)output->shape[0], (long long)total);
    if (output->shape[0] != total)
        return;
    const unsigned char *at = output->data;
    for (int m = 0; m < op->set->size; m++) {
        size_t bytes = (size_t)gathered_rows(m) * 3 * sizeof(int32_t);
        EXPECT(reference_check_bytes(at, bytes, op->seed, m) < 0, "%s: member %d's rows differ",
               op->name, m);
        at += bytes;
    }
}

static void check_reducescatter(const struct operation *op, const chorus_tensor *output)
{
    int64_t mine = block_rows(op->count, op->set->size, op->set->me);
    int64_t first = 0;
    for (int m = 0; m < op->set->me; m++)
        first += block_rows(op->count, op->set->size, m);
    EXPECT(output->shape[0] == mine, "%s: %lld rows, expected %lld", op->name,
           (long long)output->shape[0], (long long)mine);
    if (output->shape[0] != mine)
        return;
    char why[256] = "";
    long wrong =
        reference_check_reduced(output->data, (size_t)first * 2, (size_t)mine * 2, op->dtype,
                                op->op, op->set->size, NULL, op->seed, 1.0, 1.0, why, sizeof why);
    EXPECT(wrong < 0, "%s: %s", op->name, why);
}

static void check_alltoall(const struct operation *op, const chorus_tensor *output)
{
    int64_t received[MAX_SET_SIZE] = {0};
    EXPECT_STATUS(chorus_handle_received_splits(op->handle, received, MAX_SET_SIZE), CHORUS_OK);
    const int32_t *rows = output->data;
    int64_t at = 0;
    for (int from = 0; from < op->set->size; from++) {
        int64_t expected = alltoall_rows(from, op->set->me);
        EXPECT(received[from] == expected, "%s: %lld rows from member %d, expected %lld", op->name,
               (long long)received[from], from, (long long)expected);
        for (int64_t i = 0; i < expected && at < output->shape[0]; i++, at++)
            EXPECT(rows[at] == (int32_t)(op->seed * 1000 + (uint64_t)from * 100 +
                                         (uint64_t)op->set->me * 10 + (uint64_t)i),
                   "%s: row %lld from member %d is wrong", op->name, (long long)i, from);
    }
    EXPECT(at == output->shape[0], "%s: %lld rows received, expected %lld", op->name,
           (long long)output->shape[0], (long long)at);
}

static void wait_and_check(struct operation *op)
{
    EXPECT_STATUS(chorus_wait(op->handle), CHORUS_OK);
    chorus_tensor output = {0};
    char why[256] = "";
    switch (op->kind) {
    case ALLREDUCE:
        EXPECT(reference_check_allreduce(op->buffer, (size_t)op->count, op->dtype, op->op,
                                         op->set->size, NULL, op->seed, 1.0, 1.0, why,
                                         sizeof why) < 0,
               "%s (%s, %s, %lld): %s", op->name, chorus_dtype_name(op->dtype),
               chorus_op_name(op->op), (long long)op->count, why);
        break;
    case BROADCAST:
        EXPECT(reference_check_bytes(op->buffer, (size_t)op->count, op->seed, op->root) < 0,
               "%s: not rank %d's bytes", op->name, op->root);
        break;
    case ALLGATHER:
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        check_allgather(op, &output);
        break;
    case REDUCESCATTER:
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        check_reducescatter(op, &output);
        break;
    case ALLTOALL:
        EXPECT_STATUS(chorus_handle_output(op->handle, &output), CHORUS_OK);
        check_alltoall(op, &output);
        break;
    }
    chorus_handle_free(op->handle);
    free(op->buffer);
}

/* A tensor of one name in every set this rank is in, and in the whole job, at once: each set's
 * names are its own, and are never rewritten (a name of the longest length a name may have
 * works in a set too). Members add their rank in the set plus one. */
static void test_same_name_everywhere(struct set *sets, size_t count, const char *name)
{
    test_step = "same name in every set";
    float values[8] = {0};
    chorus_handle *handles[8] = {0};
    for (size_t s = 0; s <= count; s++) {
        const struct set *set = s < count ? &sets[s] : NULL;
        if (set != NULL && set->me < 0)
            continue;
        values[s] = (float)((set != NULL ? set->me : test_rank) + 1);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = name;
        args.input = floats(&values[s], 1);
        args.process_set = set != NULL ? set->id : 0;
        EXPECT_STATUS(chorus_submit(&args, &handles[s]), CHORUS_OK);
    }
    for (size_t s = 0; s <= count; s++) {
        if (handles[s] == NULL)
            continue;
        int size = s < count ? sets[s].size : test_size;
        EXPECT_STATUS(chorus_wait(handles[s]), CHORUS_OK);
        EXPECT(values[s] == (float)(size * (size + 1) / 2),
               "\"%.20s...\" in set %zu: %g, expected %d", name, s, values[s],
               size * (size + 1) / 2);
        chorus_handle_free(handles[s]);
    }
}

/* A grouped allreduce of the same names in the even and the odd ranks' sets, each group with
 * its own members (Horovod names two sets' unnamed groups alike). Staged so that rank 0 holds
 * both sets' groups at once: rank 1 and rank 2 submit first, and once rank 0 has seen them,
 * the rest. Each member adds (its rank in the set + 1) times (the tensor's index + 1). */
static void test_same_group_in_two_sets(const struct set *even, const struct set *odd)
{
    test_step = "one group name in two sets";
    const struct set *mine = even->me >= 0 ? even : odd;
    enum { MEMBERS = 3 };
    float values[MEMBERS];
    chorus_op_args args[MEMBERS];
    const char *names[MEMBERS] = {"group.0", "group.1", "group.2"};
    for (int i = 0; i < MEMBERS; i++) {
        values[i] = (float)((mine->me + 1) * (i + 1));
        args[i] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[i].name = names[i];
        args[i].input = floats(&values[i], 1);
        args[i].process_set = mine->id;
    }
    chorus_handle *handle = NULL;
    bool first = test_rank == 1 || test_rank == 2;
    if (first)
        EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    /* rank 0's loop takes in what ranks 1 and 2 sent */
    nanosleep(&(struct timespec){.tv_nsec = 50L * 1000 * 1000}, NULL);
    if (!first)
        EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    chorus_handle_free(handle);
    float triangle = (float)(mine->size * (mine->size + 1) / 2);
    for (int i = 0; i < MEMBERS; i++)
        EXPECT(values[i] == triangle * (float)(i + 1), "%s in the %s set: %g, expected %g",
               names[i], mine->label, values[i], triangle * (float)(i + 1));
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The odd ranks' set runs many collectives while the even ranks submit nothing at all. */
static void test_independent(const struct set *odd)
{
    test_step = "a set runs without the others";
    if (odd->me >= 0)
        for (int i = 0; i < 20; i++) {
            float value = (float)(odd->me + i);
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            args.name = "independent";
            args.input = floats(&value, 1);
            args.process_set = odd->id;
            expect_completes(&args);
            float expected = (float)(odd->size * i + odd->size * (odd->size - 1) / 2);
            EXPECT(value == expected, "odd ranks, step %d: %g, expected %g", i, value, expected);
        }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_errors(const struct set *even, const struct set *all)
{
    test_step = "errors";
    float value = 1.0f;
    chorus_handle *handle = NULL;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "wrong.set";
    args.input = floats(&value, 1);
    args.process_set = 9999;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "process set 9999 does not exist") != NULL, "%s",
           chorus_last_error());
    if (even->me < 0) {
        args.process_set = even->id;
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "is not a member of process set") != NULL, "%s",
               chorus_last_error());
    } else if (test_size > 1) {
        args.collective = CHORUS_BROADCAST;
        args.process_set = even->id;
        args.root = 1; /* odd */
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "root 1 is not a member") != NULL, "%s",
               chorus_last_error());
    }
    int unsorted[2] = {test_size - 1, 0};
    int id = 0;
    if (test_size > 1) {
        EXPECT_STATUS(chorus_process_set_add(unsorted, 2, &id), CHORUS_ERR_INVALID_ARGUMENT);
    }
    int outside[1] = {test_size};
    EXPECT_STATUS(chorus_process_set_add(outside, 1, &id), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_process_set_remove(0), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_process_set_remove(9999), CHORUS_ERR_INVALID_ARGUMENT);

    /* Members that disagree on a dtype inside a set: every member hears it. */
    test_step = "mismatch inside a set";
    double wide = 1.0;
    chorus_op_args mismatched = CHORUS_OP_ARGS_INIT;
    mismatched.name = "mixed";
    mismatched.process_set = all->id;
    mismatched.input =
        test_rank == 0
            ? floats(&value, 1)
            : (chorus_tensor){.data = &wide, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {1}};
    EXPECT_STATUS(chorus_submit(&mismatched, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), test_size > 1 ? CHORUS_ERR_MISMATCH : CHORUS_OK);
    if (test_size > 1)
        EXPECT(strstr(chorus_handle_error(handle), "\"mixed\" in process set") != NULL &&
                   strstr(chorus_handle_error(handle), "dtype mismatch") != NULL,
               "%s", chorus_handle_error(handle));
    chorus_handle_free(handle);

    /* Adds that name different ranks: an error on every rank, and no set. */
    test_step = "adds that differ";
    if (test_size > 1) {
        int mine[1] = {test_rank};
        id = 0;
        EXPECT_STATUS(chorus_process_set_add(mine, 1, &id), CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_last_error(), "ranks mismatch") != NULL, "%s", chorus_last_error());
    }

    /* Removing a set with a tensor pending: that tensor fails, naming the set. */
    test_step = "remove with a tensor pending";
    int everyone[MAX_SET_SIZE];
    for (int r = 0; r < test_size; r++)
        everyone[r] = r;
    int doomed = 0;
    EXPECT_STATUS(chorus_process_set_add(everyone, test_size, &doomed), CHORUS_OK);
    chorus_handle *orphan = NULL;
    if (test_rank == 0 && test_size > 1) {
        chorus_op_args lonely = CHORUS_OP_ARGS_INIT;
        lonely.name = "orphan";
        lonely.input = floats(&value, 1);
        lonely.process_set = doomed;
        EXPECT_STATUS(chorus_submit(&lonely, &orphan), CHORUS_OK);
    }
    EXPECT_STATUS(chorus_process_set_remove(doomed), CHORUS_OK);
    if (orphan != NULL) {
        EXPECT_STATUS(chorus_wait(orphan), CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_handle_error(orphan), "was removed") != NULL, "%s",
               chorus_handle_error(orphan));
        chorus_handle_free(orphan);
    }
    args = (chorus_op_args)CHORUS_OP_ARGS_INIT;
    args.name = "after.removal";
    args.input = floats(&value, 1);
    args.process_set = doomed;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    int count = 0;
    EXPECT_STATUS(chorus_process_set_ranks(doomed, NULL, 0, &count), CHORUS_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    test_init_chorus();
    if (test_size > MAX_SET_SIZE) {
        fprintf(stderr, "at most %d ranks\n", MAX_SET_SIZE);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int even[MAX_SET_SIZE], odd[MAX_SET_SIZE], ends[2] = {0, test_size - 1}, all[MAX_SET_SIZE];
    int evens = 0, odds = 0;
    for (int r = 0; r < test_size; r++) {
        all[r] = r;
        if (r % 2 == 0)
            even[evens++] = r;
        else
            odd[odds++] = r;
    }
    test_step = "adding sets";
    struct set sets[4];
    size_t set_count = 0;
    add_set(&sets[set_count++], "even", even, evens);
    if (odds > 0)
        add_set(&sets[set_count++], "odd", odd, odds);
    add_set(&sets[set_count++], "ends", ends, test_size > 1 ? 2 : 1);
    add_set(&sets[set_count++], "all", all, test_size);
    for (size_t a = 0; a < set_count; a++)
        for (size_t b = a + 1; b < set_count; b++)
            EXPECT(sets[a].id != sets[b].id, "sets %zu and %zu share id %d", a, b, sets[a].id);
    EXPECT(test_same_on_all_ranks(sets[0].label), "set labels differ");

    test_step = "collectives in every set at once";
    struct set job = {.id = 0, .size = test_size, .me = test_rank, .label = "job"};
    for (int r = 0; r < test_size; r++)
        job.ranks[r] = r;
    for (size_t s = 0; s < set_count; s++)
        if (sets[s].me >= 0)
            submit_in(&sets[s]);
    submit_in(&job);
    for (size_t i = 0; i < operation_count; i++)
        wait_and_check(&operations[i]);

    test_same_name_everywhere(sets, set_count, "loss");
    char longest[1024]; /* chorus.h: a name has at most 1023 bytes */
    memset(longest, 'n', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    test_same_name_everywhere(sets, set_count, longest);
    if (odds > 0) {
        test_independent(&sets[1]);
        test_same_group_in_two_sets(&sets[0], &sets[1]);
    }
    test_errors(&sets[0], &sets[set_count - 1]);

    test_step = "removing sets";
    for (size_t s = 0; s < set_count; s++)
        EXPECT_STATUS(chorus_process_set_remove(sets[s].id), CHORUS_OK);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("process_sets");
}
