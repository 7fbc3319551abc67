/*
 * mpi_test.h — a small harness for tests run under mpirun: checks that count failures per rank,
 * a watchdog that turns a hang into a failure naming the rank and the step, and a verdict
 * agreed by all ranks.
 */
#ifndef CHORUS_MPI_TEST_H
#define CHORUS_MPI_TEST_H

#include <chorus.h>
#include <measure.h>
#include <mpi.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

static int test_rank, test_size;
static _Atomic long test_checks, test_failures;
static const char *volatile test_step = "start";

#define EXPECT(condition, ...)                                                                   \
    do {                                                                                         \
        test_checks++;                                                                           \
        if (!(condition)) {                                                                      \
            test_failures++;                                                                     \
            fprintf(stderr, "rank %d: %s:%d: FAILED (%s) in %s: ", test_rank, __FILE__,          \
                    __LINE__, #condition, test_step);                                            \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
        }                                                                                        \
    } while (0)

/* Evaluates `got` once: it is often a call. */
#define EXPECT_STATUS(got, expected)                                                             \
    do {                                                                                         \
        chorus_status got_status = (got);                                                        \
        EXPECT(got_status == (expected), "got %s, expected %s (%s)",                             \
               chorus_status_name(got_status), chorus_status_name(expected),                     \
               chorus_last_error());                                                             \
    } while (0)

/* Submits `args`, expects the operation to complete with CHORUS_OK, frees its handle. */
static inline void expect_completes(const chorus_op_args *args)
{
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit(args, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    chorus_handle_free(handle);
}

/* A one-dimensional float32 tensor over `data`. */
static inline chorus_tensor floats(float *data, int64_t count)
{
    return (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {count}};
}

/* Monotonic seconds: one clock for every process of the host. */
static inline double test_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static void test_watchdog(int signal_number)
{
    (void)signal_number;
    char text[256];
    int length = snprintf(text, sizeof text, "rank %d: TIMEOUT in step \"%s\"\n", test_rank,
                          test_step);
    if (write(STDERR_FILENO, text, (size_t)length) < 0)
        _exit(125);
    _exit(124);
}

/* Starts MPI with MPI_THREAD_MULTIPLE (the test thread uses MPI beside chorus's thread). */
static void test_start(int *argc, char ***argv, unsigned timeout_seconds)
{
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &test_size);
    signal(SIGALRM, test_watchdog);
    alarm(timeout_seconds);
}

static inline void test_init_chorus(void)
{
    /* TEST_WORLD=ucx: on a world over UCX whose addresses MPI hands round, as the elastic
     * driver does, instead of on MPI; TEST_WORLD_HOSTS=n spreads the ranks over n made-up hosts
     * (rank % n). The test's own checks and verdict still go over MPI. */
    const char *world = getenv("TEST_WORLD"), *hosts = getenv("TEST_WORLD_HOSTS");
    chorus_status status = world != NULL && strcmp(world, "ucx") == 0
                               ? measure_init_world(hosts != NULL ? atoi(hosts) : 0)
                               : chorus_init(NULL);
    if (status != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_init: %s\n", test_rank, chorus_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Agrees on the verdict, prints it from rank 0 and finalizes MPI. Returns the exit code. */
static inline int test_finish(const char *name)
{
    long totals[2] = {0, 0}, mine[2] = {atomic_load(&test_checks), atomic_load(&test_failures)};
    MPI_Allreduce(mine, totals, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (test_rank == 0)
        printf("%s np=%d: %ld passed, %ld failed\n", name, test_size, totals[0] - totals[1],
               totals[1]);
    MPI_Finalize();
    return totals[1] == 0 ? 0 : 1;
}

/* true when `text` is identical on every rank. */
static inline int test_same_on_all_ranks(const char *text)
{
    char mine[1024] = {0};
    strncpy(mine, text, sizeof mine - 1);
    char *all = malloc(sizeof mine * (size_t)test_size);
    MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 0; r < test_size; r++)
        same &= memcmp(all + (size_t)r * sizeof mine, mine, sizeof mine) == 0;
    free(all);
    return same;
}

#endif
