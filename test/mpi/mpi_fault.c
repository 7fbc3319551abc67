/*
 * mpi_fault.c — one rank (the victim) fails for real, from outside chorus, in the middle of a
 * phase of work; test/check_faults.sh runs it under mpirun for every phase and signal and
 * judges how the job ends.
 *
 *   mpi_fault PHASE SIGNAL VICTIM
 *     PHASE: allreduce_small, allreduce_large, broadcast, allgather, fused (64 small
 *            allreduces in one batch), negotiation (the others wait for a tensor the victim
 *            never submits), init (the victim fails before chorus_init)
 *     SIGNAL: KILL, SEGV (a real invalid write), STOP, or CUT: nobody fails, the network
 *             between emulated hosts is cut from outside (test/check_multihost.sh) once rank 0
 *             prints "fault-ready", and every rank must notice
 *
 * The survivors run the phase until an operation fails, checking every result that succeeds.
 * On a failure each prints one line, "fault-noticed rank R: STATUS after T s: MESSAGE", and
 * checks that the message names the victim. Then:
 *   - STOP: the lowest survivor wakes the victim (SIGCONT), which finds the others' notices and
 *     fails too; every rank shuts down and the verdict is agreed as in the other MPI tests.
 *   - KILL and SEGV: the victim is gone, so nothing collective can follow; each survivor exits
 *     at once with its own verdict (0 or 1). Under a launcher that ends the job when a process
 *     dies (mpirun's default) the survivors may be killed before they notice; under one that
 *     does not (mpirun --mca orte_enable_recovery 1) chorus alone must notice.
 * CHORUS_TIMEOUT_SECONDS comes from the environment (the script sets 2).
 */
#include "mpi_test.h"

#include <pthread.h>
#include <time.h>

enum { SMALL_COUNT = 256, LARGE_COUNT = 4 << 20, FUSED_TENSORS = 64, RUN_SECONDS = 60 };

enum { NETWORK_CUT = -1 }; /* the "signal" CUT: nobody fails, the network does */

static const char *phase;
static int victim_signal;
static int victim;
static char handle_failure[1024]; /* why fused_once failed */

static void sleep_seconds(double seconds)
{
    struct timespec pause = {.tv_sec = (time_t)seconds,
                             .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&pause, NULL);
}

static void fail_now(void)
{
    if (victim_signal == SIGSEGV) {
        signal(SIGSEGV, SIG_DFL);
        int *volatile invalid = (int *)(uintptr_t)8;
        *invalid = 1; /* a real invalid write, as a bug would make */
    }
    kill(getpid(), victim_signal);
}

/* The victim fails from a thread of its own while its main thread is inside the phase. */
static void *fail_soon(void *argument)
{
    (void)argument;
    sleep_seconds(0.5);
    fail_now();
    return NULL;
}

static float value_of(int rank, size_t i)
{
    return (float)((rank + 1) * 3 + (int)(i % 7));
}

static void fill(float *data, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++)
        data[i] = value_of(rank, i);
}

/* The sum over ranks of value_of, exact in float32 at these sizes. */
static float sum_of(size_t i)
{
    float sum = 0;
    for (int r = 0; r < test_size; r++)
        sum += value_of(r, i);
    return sum;
}

static void check_sums(const float *data, size_t count, const char *what)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += data[i] != sum_of(i);
    EXPECT(wrong == 0, "%s: %zu of %zu elements wrong", what, wrong, count);
}

static chorus_status allreduce_once(float *data, size_t count, int step)
{
    char name[48];
    snprintf(name, sizeof name, "fault.allreduce.%d", step % 4);
    fill(data, count, test_rank);
    chorus_tensor tensor = floats(data, (int64_t)count);
    chorus_status status = chorus_allreduce(name, &tensor, NULL, CHORUS_SUM);
    if (status == CHORUS_OK)
        check_sums(data, count, name);
    return status;
}

static chorus_status broadcast_once(float *data, size_t count, int step)
{
    int root = (victim + 1) % test_size;
    fill(data, count, test_rank);
    chorus_tensor tensor = floats(data, (int64_t)count);
    chorus_status status =
        chorus_broadcast(step % 2 ? "fault.bcast.a" : "fault.bcast.b", &tensor, root);
    if (status == CHORUS_OK) {
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++)
            wrong += data[i] != value_of(root, i);
        EXPECT(wrong == 0, "broadcast: %zu of %zu elements wrong", wrong, count);
    }
    return status;
}

static chorus_status allgather_once(float *data, size_t count, int step)
{
    fill(data, count, test_rank);
    chorus_tensor tensor = floats(data, (int64_t)count), gathered;
    chorus_status status =
        chorus_allgather(step % 2 ? "fault.gather.a" : "fault.gather.b", &tensor, &gathered);
    if (status == CHORUS_OK) {
        const float *all = gathered.data;
        size_t wrong = 0;
        for (int r = 0; r < test_size; r++)
            for (size_t i = 0; i < count; i++)
                wrong += all[(size_t)r * count + i] != value_of(r, i);
        EXPECT(wrong == 0, "allgather: %zu elements wrong", wrong);
        free(gathered.data);
    }
    return status;
}

static chorus_status fused_once(float *data, int step)
{
    chorus_handle *handles[FUSED_TENSORS];
    chorus_status status = CHORUS_OK;
    int submitted = 0;
    for (int t = 0; t < FUSED_TENSORS && status == CHORUS_OK; t++, submitted++) {
        char name[48];
        snprintf(name, sizeof name, "fault.fused.%d.%d", step % 2, t);
        float *slice = data + (size_t)t * SMALL_COUNT;
        fill(slice, SMALL_COUNT, test_rank);
        chorus_tensor tensor = floats(slice, SMALL_COUNT);
        status = chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM, &handles[t]);
    }
    if (status != CHORUS_OK) {
        submitted--;
        snprintf(handle_failure, sizeof handle_failure, "%s", chorus_last_error());
    }
    for (int t = 0; t < submitted; t++) {
        chorus_status done = chorus_wait(handles[t]);
        if (done == CHORUS_OK)
            check_sums(data + (size_t)t * SMALL_COUNT, SMALL_COUNT, "fused allreduce");
        else if (status == CHORUS_OK) {
            status = done;
            snprintf(handle_failure, sizeof handle_failure, "%s", chorus_handle_error(handles[t]));
        }
        chorus_handle_free(handles[t]);
    }
    return status;
}

/* The victim never submits the others' tensor (it waits on one of its own instead), so theirs
 * waits in negotiation until chorus notices. */
static chorus_status negotiation_once(float *data)
{
    if (test_rank != victim || victim_signal == NETWORK_CUT)
        return allreduce_once(data, SMALL_COUNT, 0);
    chorus_tensor tensor = floats(data, SMALL_COUNT);
    return chorus_allreduce("fault.victim.only", &tensor, NULL, CHORUS_SUM);
}

static chorus_status run_once(float *data, int step)
{
    if (strcmp(phase, "allreduce_small") == 0)
        return allreduce_once(data, SMALL_COUNT, step);
    if (strcmp(phase, "allreduce_large") == 0)
        return allreduce_once(data, LARGE_COUNT, step);
    if (strcmp(phase, "broadcast") == 0)
        return broadcast_once(data, LARGE_COUNT, step);
    if (strcmp(phase, "allgather") == 0)
        return allgather_once(data, LARGE_COUNT / 4, step);
    if (strcmp(phase, "fused") == 0)
        return fused_once(data, step);
    return negotiation_once(data);
}

static int parse_signal(const char *name)
{
    return strcmp(name, "KILL") == 0   ? SIGKILL
           : strcmp(name, "SEGV") == 0 ? SIGSEGV
           : strcmp(name, "STOP") == 0 ? SIGSTOP
           : strcmp(name, "CUT") == 0  ? NETWORK_CUT
                                       : 0;
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    if (argc != 4 || parse_signal(argv[2]) == 0) {
        fprintf(stderr, "usage: mpi_fault PHASE KILL|SEGV|STOP VICTIM\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    phase = argv[1];
    victim_signal = parse_signal(argv[2]);
    victim = atoi(argv[3]) % test_size;
    int pid = (int)getpid(), *pids = calloc((size_t)test_size, sizeof *pids);
    MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
    bool cut = victim_signal == NETWORK_CUT;
    bool is_victim = test_rank == victim && !cut;
    if (strcmp(phase, "init") == 0 && is_victim) {
        sleep_seconds(0.3); /* the others are inside chorus_init by then */
        fail_now();
    }
    test_init_chorus();
    float *data = calloc(LARGE_COUNT > FUSED_TENSORS * SMALL_COUNT ? LARGE_COUNT
                                                                   : FUSED_TENSORS * SMALL_COUNT,
                         sizeof *data);
    pthread_t failer;
    if (is_victim)
        pthread_create(&failer, NULL, fail_soon, NULL);
    test_step = phase;
    chorus_status status = CHORUS_OK;
    double started = test_seconds(), op_started = started, failed_after = 0;
    for (int step = 0; status == CHORUS_OK && test_seconds() - started < RUN_SECONDS; step++) {
        op_started = test_seconds();
        status = run_once(data, step);
        failed_after = test_seconds() - op_started;
        if (cut && test_rank == 0 && step == 20) {
            printf("fault-ready\n");
            fflush(stdout);
        }
    }
    char message[1024];
    snprintf(message, sizeof message, "%s",
             strcmp(phase, "fused") == 0 ? handle_failure : chorus_last_error());
    if (!is_victim) {
        printf("fault-noticed rank %d: %s after %.2f s: %s\n", test_rank,
               chorus_status_name(status), failed_after, message);
        fflush(stdout);
        EXPECT(status != CHORUS_OK, "no operation failed in %d s", RUN_SECONDS);
        char named[32];
        snprintf(named, sizeof named, cut ? "rank " : "rank %d", victim);
        EXPECT(strstr(message, named) != NULL || strstr(message, "local rank") != NULL ||
                   strstr(message, "not taking part") != NULL,
               "the message does not name the failed rank %d: %s", victim, message);
        if (victim_signal == SIGSTOP || cut)
            EXPECT(status == CHORUS_ERR_TIMEOUT, "a %s gave %s, not CHORUS_ERR_TIMEOUT",
                   cut ? "cut network" : "frozen rank", chorus_status_name(status));
    }
    if (victim_signal != SIGSTOP && !cut) {
        /* The victim is gone: nothing collective can follow. */
        fflush(NULL);
        _exit(test_failures == 0 ? 0 : 1);
    }
    int lowest_survivor = victim == 0 ? 1 : 0;
    if (test_rank == lowest_survivor && !cut)
        kill(pids[victim], SIGCONT);
    test_step = "shutdown";
    chorus_shutdown();
    if (is_victim)
        pthread_join(failer, NULL);
    /* `data` is not freed: after a fatal error a transfer that a wait gave up on may still be
     * read by MPI (a large send from the tensor itself), until MPI_Finalize. */
    free(pids);
    return test_finish("mpi_fault");
}
