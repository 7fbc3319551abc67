/*
 * mpi_reform.c — chorus_reform while the user's threads submit: every rank runs THREADS threads
 * that each allreduce OPS named tensors (every result checked against the reference), and the
 * main thread forms chorus again over every rank, in reversed order, while they run. An
 * operation the reform interrupts fails on every rank alike (CHORUS_ERR_SHUTDOWN, or
 * CHORUS_ERR_NOT_INITIALIZED between the two instances) and its thread submits it again; so
 * every thread ends with all OPS right, in the old world or the new. Then the new world's ranks
 * must be the reversed ones, and refusals leave chorus running: a list without this rank, a
 * rank twice, a rank out of range. Run under ThreadSanitizer too (suite tsan): the reform's
 * switch of instance against submits and waits on other threads.
 *
 * On a world over UCX (TEST_WORLD=ucx), which has no reform, the main thread does what an
 * elastic job's survivors do instead: chorus_shutdown, then the next world with the ranks
 * reversed (measure_join_world), while the threads submit.
 */
#include "../common/reference.h"
#include "mpi_test.h"

enum { THREADS = 3, OPS = 40, COUNT = 7 };

static atomic_int retried;

struct worker {
    int index;
    long wrong;
};

/* An input that depends on the process's place in MPI_COMM_WORLD, not on chorus's numbering,
 * so that the sum is the same in the old world and the new. */
static uint64_t seed_of(int thread, int op)
{
    return (uint64_t)(thread * 1000 + op + 1);
}

static void *submit_all(void *argument)
{
    struct worker *worker = argument;
    for (int op = 0; op < OPS; op++) {
        float data[COUNT];
        char name[64];
        snprintf(name, sizeof name, "thread%d.op%d", worker->index, op);
        for (;;) {
            reference_fill(data, COUNT, CHORUS_FLOAT32, CHORUS_SUM, seed_of(worker->index, op),
                           test_rank);
            chorus_tensor tensor = floats(data, COUNT);
            chorus_status status = chorus_allreduce(name, &tensor, NULL, CHORUS_SUM);
            if (status == CHORUS_OK)
                break;
            EXPECT(status == CHORUS_ERR_SHUTDOWN || status == CHORUS_ERR_NOT_INITIALIZED,
                   "%s during the reform: %s (%s)", name, chorus_status_name(status),
                   chorus_last_error());
            if (status != CHORUS_ERR_SHUTDOWN && status != CHORUS_ERR_NOT_INITIALIZED)
                return NULL;
            atomic_fetch_add(&retried, 1);
            usleep(200);
        }
        char why[256] = "";
        long wrong = reference_check_allreduce(data, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size,
                                               NULL, seed_of(worker->index, op), 1, 1, why,
                                               sizeof why);
        EXPECT(wrong < 0, "%s: element %ld wrong %s", name, wrong, why);
    }
    return NULL;
}

/* Reforms chorus refuses, leaving it running: a rank listed twice, one out of range, none, a
 * list without this rank. */
static void check_refused_reforms(void)
{
    test_step = "refused reforms";
    int twice[2] = {test_rank, test_rank}, outside = test_size;
    EXPECT_STATUS(chorus_reform(twice, 2, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), test_size > 1 ? "listed twice" : "of a world of 1") !=
               NULL,
           "message: %s", chorus_last_error());
    EXPECT_STATUS(chorus_reform(&outside, 1, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_reform(NULL, 0, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    if (test_size > 1) {
        int other = (chorus_rank() + 1) % test_size;
        EXPECT_STATUS(chorus_reform(&other, 1, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    }
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    test_init_chorus();
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (struct worker){.index = t};
        EXPECT(pthread_create(&threads[t], NULL, submit_all, &workers[t]) == 0,
               "pthread_create");
    }
    usleep(2000);
    test_step = "the reform while threads submit";
    const char *world = getenv("TEST_WORLD"), *hosts = getenv("TEST_WORLD_HOSTS");
    bool on_world = world != NULL && strcmp(world, "ucx") == 0;
    int reversed[64];
    for (int r = 0; r < test_size; r++)
        reversed[r] = test_size - 1 - r;
    if (on_world) {
        EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
        EXPECT_STATUS(measure_join_world(2, hosts != NULL ? atoi(hosts) : 0,
                                         test_size - 1 - test_rank),
                      CHORUS_OK);
    } else {
        EXPECT_STATUS(chorus_reform(reversed, test_size, NULL), CHORUS_OK);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    EXPECT(chorus_rank() == test_size - 1 - test_rank && chorus_size() == test_size,
           "rank %d of %d after the reform, expected %d of %d", chorus_rank(), chorus_size(),
           test_size - 1 - test_rank, test_size);
    if (!on_world) /* a world has no reform: chorus_reform is refused there for that */
        check_refused_reforms();
    float after[COUNT];
    reference_fill(after, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 99, test_rank);
    chorus_tensor tensor = floats(after, COUNT);
    EXPECT_STATUS(chorus_allreduce("after.refusals", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    char why[256] = "";
    EXPECT(reference_check_allreduce(after, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL,
                                     99, 1, 1, why, sizeof why) < 0,
           "after the refusals: %s", why);
    if (test_rank == 0)
        printf("mpi_reform np=%d: %d operations submitted again after the reform\n", test_size,
               atomic_load(&retried));
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_reform");
}
