/*
 * mpi_fatal.c — a fatal error in the data path (here injected where an MPI call would fail, on
 * every rank at the same batch): the failing batch's handles and every other pending handle
 * complete with CHORUS_ERR_MPI and a message naming the tensor and the cause, later submits fail
 * fast with the same cause, and chorus_shutdown returns, on every rank, without a hang. Then
 * again with a backlog of many long names, whose negotiation messages are too large to leave
 * without a receiver: shutdown must not wait for them forever. Then with the fault on one rank
 * only, before it moves any data, while the others wait for it inside the collective: through
 * the host's shared segment, single copies between the ranks, and MPI (a ring); the others must
 * stop too, saying which rank failed and why.
 */
#include "../../lib/executor/executor.h"
#include "mpi_test.h"

enum { COUNT = 13, PENDING = 6, BACKLOG = 400 };

/* A blocking allreduce that must succeed: each rank contributes rank + 1 + i at element i. */
static void expect_good_allreduce(const char *name)
{
    float data[COUNT];
    for (int i = 0; i < COUNT; i++)
        data[i] = (float)(test_rank + 1 + i);
    chorus_tensor tensor = floats(data, COUNT);
    EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    for (int i = 0; i < COUNT; i++) {
        double expected = (double)test_size * (test_size + 1) / 2 + (double)i * test_size;
        EXPECT(data[i] == (float)expected, "%s[%d] = %g, expected %g", name, i, data[i],
               expected);
    }
}

/* The next batch fails while every rank still submits BACKLOG tensors with long names. */
static void expect_backlog_fails(void)
{
    test_step = "backlog";
    test_init_chorus();
    MPI_Barrier(MPI_COMM_WORLD);
    executor_inject_fault(1);
    static float data[BACKLOG][4];
    static chorus_handle *handles[BACKLOG];
    static char names[BACKLOG][128];
    for (int i = 0; i < BACKLOG; i++) {
        snprintf(names[i], sizeof names[i],
                 "backlog.encoder.layer%03d.attention.output.dense.weight.gradient", i);
        chorus_tensor tensor = floats(data[i], 4);
        chorus_status status = chorus_allreduce_async(names[i], &tensor, NULL, CHORUS_SUM,
                                                      &handles[i]);
        /* Once the fault has hit, submits fail at once instead. */
        EXPECT(status == CHORUS_OK || status == CHORUS_ERR_MPI, "submit %d: %s", i,
               chorus_status_name(status));
        if (status != CHORUS_OK)
            handles[i] = NULL;
    }
    test_step = "backlog: waiting";
    for (int i = 0; i < BACKLOG; i++) {
        if (handles[i] == NULL)
            continue;
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_ERR_MPI);
        EXPECT(strstr(chorus_handle_error(handles[i]), names[i]) != NULL, "handle %d: %s", i,
               chorus_handle_error(handles[i]));
        chorus_handle_free(handles[i]);
    }
    test_step = "backlog: shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    /* A rank stopped by another's failure before it ran a batch is still armed. */
    executor_inject_fault(0);
}

/* Only `victim` fails its next batch: `collective` ("allreduce", "broadcast" or "allgather") of
 * a 1 MiB tensor, submitted with a few small allreduces behind it; with `first`, that batch is
 * the first one chorus runs after init. */
static void expect_one_rank_fails(int victim, const char *collective, bool first)
{
    enum { BIG = 1 << 18, SMALL = 3 };
    static float big[BIG];
    static float small[SMALL][COUNT];
    chorus_handle *handles[1 + SMALL];
    char names[1 + SMALL][64];
    test_init_chorus();
    if (!first)
        expect_good_allreduce("one.good");
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank == victim)
        executor_inject_fault(1);
    for (int i = 0; i < BIG; i++)
        big[i] = (float)(test_rank + i % 7);
    chorus_tensor tensor = floats(big, BIG);
    snprintf(names[0], sizeof names[0], "one.%s", collective);
    chorus_status submitted = CHORUS_ERR_INVALID_ARGUMENT;
    if (strcmp(collective, "allreduce") == 0)
        submitted = chorus_allreduce_async(names[0], &tensor, NULL, CHORUS_SUM, &handles[0]);
    else if (strcmp(collective, "broadcast") == 0)
        submitted = chorus_broadcast_async(names[0], &tensor, 1 % test_size, &handles[0]);
    else
        submitted = chorus_allgather_async(names[0], &tensor, &handles[0]);
    EXPECT_STATUS(submitted, CHORUS_OK);
    const char *messages[1 + SMALL] = {NULL};
    if (submitted != CHORUS_OK) {
        handles[0] = NULL;
        messages[0] = strdup(chorus_last_error());
    }
    /* Once the failure has reached this rank, submits fail at once, with the same message. */
    for (int i = 0; i < SMALL; i++) {
        snprintf(names[1 + i], sizeof names[1 + i], "one.small.%d", i);
        chorus_tensor piece = floats(small[i], COUNT);
        chorus_status status = chorus_allreduce_async(names[1 + i], &piece, NULL, CHORUS_SUM,
                                                      &handles[1 + i]);
        EXPECT(status == CHORUS_OK || status == CHORUS_ERR_MPI, "submit %s: %s", names[1 + i],
               chorus_status_name(status));
        if (status != CHORUS_OK) {
            handles[1 + i] = NULL;
            messages[1 + i] = strdup(chorus_last_error());
        }
    }
    char victim_failed[64];
    snprintf(victim_failed, sizeof victim_failed, "rank %d failed", victim);
    for (int i = 0; i < 1 + SMALL; i++) {
        if (handles[i] != NULL) {
            EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_ERR_MPI);
            messages[i] = strdup(chorus_handle_error(handles[i]));
            chorus_handle_free(handles[i]);
        }
        const char *message = messages[i];
        EXPECT(strstr(message, names[i]) != NULL && strstr(message, "injected fault") != NULL &&
                   (test_rank == victim || strstr(message, victim_failed) != NULL),
               "handle %s: %s", names[i], message);
        free((void *)message);
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    executor_inject_fault(0);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    test_init_chorus();
    test_step = "before the fault";
    expect_good_allreduce("good.first");
    /* Nothing is in flight anywhere now; every rank arms the same batch: the one after next. */
    MPI_Barrier(MPI_COMM_WORLD);
    executor_inject_fault(2);
    expect_good_allreduce("good.second");

    test_step = "pending handles";
    float data[PENDING][COUNT] = {{0}};
    chorus_handle *handles[PENDING];
    for (int i = 0; i < PENDING; i++) {
        char name[64];
        snprintf(name, sizeof name, "pending.%d", i);
        chorus_tensor tensor = floats(data[i], COUNT);
        chorus_status submitted =
            chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM, &handles[i]);
        /* The background thread may run the first tensors' batch, the armed one, before the
         * later ones are submitted: those then fail at once, with the same cause. */
        if (i > 0 && submitted == CHORUS_ERR_MPI) {
            EXPECT(handles[i] == NULL && strstr(chorus_last_error(), "injected fault") != NULL,
                   "submit %d after the fault: %s", i, chorus_last_error());
            continue;
        }
        EXPECT_STATUS(submitted, CHORUS_OK);
    }
    for (int i = 0; i < PENDING; i++) {
        char name[64];
        snprintf(name, sizeof name, "\"pending.%d\"", i);
        if (handles[i] == NULL)
            continue;
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_ERR_MPI);
        const char *message = chorus_handle_error(handles[i]);
        EXPECT(strstr(message, name) != NULL && strstr(message, "injected fault") != NULL,
               "handle %d: %s", i, message);
        chorus_handle_free(handles[i]);
    }

    test_step = "submit after the fault";
    float value = 1;
    chorus_tensor tensor = floats(&value, 1);
    chorus_handle *late = (chorus_handle *)1;
    EXPECT_STATUS(chorus_allreduce_async("late", &tensor, NULL, CHORUS_SUM, &late),
                  CHORUS_ERR_MPI);
    EXPECT(late == NULL, "no handle after a failed submit");
    EXPECT(strstr(chorus_last_error(), "\"late\"") != NULL &&
               strstr(chorus_last_error(), "injected fault") != NULL,
           "message: %s", chorus_last_error());

    test_step = "shutdown after the fault";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    executor_inject_fault(0);
    expect_backlog_fails();

    test_step = "one rank fails an allreduce (shared segment)";
    expect_one_rank_fails(test_size - 1, "allreduce", false);
    test_step = "rank 0 fails a broadcast";
    expect_one_rank_fails(0, "broadcast", false);
    test_step = "one rank fails an allgather, the first batch after init";
    expect_one_rank_fails(test_size / 2, "allgather", true);
    test_step = "one rank fails an allreduce (MPI ring)";
    setenv("CHORUS_ALLREDUCE_ALGO", "ring", 1);
    expect_one_rank_fails(test_size - 1, "allreduce", false);
    unsetenv("CHORUS_ALLREDUCE_ALGO");
    return test_finish("fatal");
}
