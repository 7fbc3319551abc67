/*
 * mpi_survivors.c — chorus formed again over the ranks that survive a crashed one, inside the
 * same processes (the first step of in-process elastic recovery, issue #52). Run by
 * test/check_survivors.sh under Open MPI's `mpirun --enable-recovery`, which keeps the
 * survivors running (and then exits 0 whatever they say: the script reads their verdict).
 *
 * Every rank trains a few steps (allreduces checked against the reference); then the victim's
 * process ends (`last`: the last rank; `first`: rank 0, the coordinator). Every survivor's next
 * operation must fail within CHORUS_TIMEOUT_SECONDS (on one host within moments: the ranks
 * watch each other's processes), its message naming the victim (with `told`, the failure
 * another thread reports with chorus_peer_lost, as an elastic driver that saw its process end
 * does); then chorus_reform over the survivors (a list without this
 * rank is refused first). Over the new world, renumbered, steps of allreduces (small ones,
 * and one through the host's shared segment) and a broadcast must be right. The survivors
 * print the times (detection, and from detection to the first good step) and end with _exit:
 * MPI_Finalize may wait for the dead rank.
 */
#include "../common/reference.h"
#include "mpi_test.h"

enum { SMALL = 13, LARGE = 1 << 17, STEPS = 5 };

static const char *const parameters = "CHORUS_TIMEOUT_SECONDS=3";
static const char *const told_how = "the test ended its process";

/* What an elastic driver does when it sees a rank's process end: tells the others. At once: on
 * one host the ranks' own watch on each other's processes (node_segment_ended) sees the end
 * within 10 ms, and the test means the told failure to be the one met. */
static void *tell_peer_lost(void *victim)
{
    EXPECT_STATUS(chorus_peer_lost(*(int *)victim, told_how), CHORUS_OK);
    return NULL;
}

/* One step of the world that `chorus_rank()` and `chorus_size()` describe: a small and a large
 * allreduce and a broadcast, each checked. `seed` makes every step's data its own. */
static void step(uint64_t seed)
{
    static float small[SMALL], large[LARGE], shared[SMALL];
    int rank = chorus_rank(), size = chorus_size();
    reference_fill(small, SMALL, CHORUS_FLOAT32, CHORUS_SUM, seed, rank);
    reference_fill(large, LARGE, CHORUS_FLOAT32, CHORUS_SUM, seed + 1, rank);
    reference_fill_bytes(shared, sizeof shared, seed + 2, rank);
    chorus_tensor small_tensor = floats(small, SMALL), large_tensor = floats(large, LARGE);
    chorus_tensor shared_tensor = floats(shared, SMALL);
    EXPECT_STATUS(chorus_allreduce("step.small", &small_tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT_STATUS(chorus_allreduce("step.large", &large_tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT_STATUS(chorus_broadcast("step.shared", &shared_tensor, size - 1), CHORUS_OK);
    char why[256] = "";
    long wrong = reference_check_allreduce(small, SMALL, CHORUS_FLOAT32, CHORUS_SUM, size, NULL,
                                           seed, 1, 1, why, sizeof why);
    EXPECT(wrong < 0, "step.small (%d ranks): element %ld wrong %s", size, wrong, why);
    wrong = reference_check_allreduce(large, LARGE, CHORUS_FLOAT32, CHORUS_SUM, size, NULL,
                                      seed + 1, 1, 1, why, sizeof why);
    EXPECT(wrong < 0, "step.large (%d ranks): element %ld wrong %s", size, wrong, why);
    wrong = reference_check_bytes(shared, sizeof shared, seed + 2, size - 1);
    EXPECT(wrong < 0, "step.shared (%d ranks): byte %ld wrong", size, wrong);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    int victim = argc > 1 && strcmp(argv[1], "first") == 0 ? 0 : test_size - 1;
    bool told = argc > 2 && strcmp(argv[2], "told") == 0;
    chorus_init_options options = CHORUS_INIT_OPTIONS_INIT;
    options.parameters = parameters;
    test_step = "training before the failure";
    if (chorus_init(&options) != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_init: %s\n", test_rank, chorus_last_error());
        _exit(1);
    }
    for (int s = 0; s < STEPS; s++)
        step((uint64_t)s * 10);
    if (test_size < 2)
        return test_finish("survivors");
    /* Every rank through its steps before the victim ends: a rank told of the loss at once
     * (below) must not fail another's last step. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank == victim) {
        fprintf(stderr, "rank %d: ends its process\n", test_rank);
        _exit(9);
    }

    test_step = "the failure met";
    EXPECT_STATUS(chorus_peer_lost(test_rank, told_how), CHORUS_ERR_INVALID_ARGUMENT);
    pthread_t teller;
    if (told)
        EXPECT(pthread_create(&teller, NULL, tell_peer_lost, &victim) == 0, "pthread_create");
    double started = test_seconds();
    chorus_status status = CHORUS_OK;
    float value[SMALL] = {0};
    chorus_tensor tensor = floats(value, SMALL);
    for (int s = 0; status == CHORUS_OK && test_seconds() - started < 30; s++)
        status = chorus_allreduce("step.small", &tensor, NULL, CHORUS_SUM);
    double detected = test_seconds();
    EXPECT_STATUS(status, CHORUS_ERR_TIMEOUT);
    char named[32];
    snprintf(named, sizeof named, "rank %d (host", victim);
    EXPECT(strstr(chorus_last_error(), named) != NULL, "the message does not name rank %d: %s",
           victim, chorus_last_error());
    EXPECT(!told || strstr(chorus_last_error(), told_how) != NULL,
           "the failure is not the one chorus_peer_lost reported: %s", chorus_last_error());
    if (told)
        pthread_join(teller, NULL);
    test_step = "chorus over the survivors";
    /* The survivors in their new order: as they were when the last rank died, reversed when
     * rank 0 died (so that the list, not the old numbering, is seen to decide). */
    int kept[8], count = 0, expected = -1;
    for (int r = 0; r < test_size; r++)
        if (r != victim)
            kept[count++] = victim == 0 ? test_size - r : r;
    for (int i = 0; i < count; i++)
        if (kept[i] == test_rank)
            expected = i;
    int outsider = victim;
    EXPECT_STATUS(chorus_reform(&outsider, 1, &options), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "only the ranks that go on") != NULL, "message: %s",
           chorus_last_error());
    EXPECT_STATUS(chorus_reform(kept, count, &options), CHORUS_OK);
    EXPECT(chorus_size() == test_size - 1, "chorus_size %d over %d survivors", chorus_size(),
           test_size - 1);
    EXPECT(chorus_rank() == expected, "rank %d became %d, not %d", test_rank, chorus_rank(),
           expected);
    double first_step = 0;
    for (int s = 0; s < STEPS; s++) {
        step((uint64_t)(100 + s * 10));
        if (s == 0)
            first_step = test_seconds();
    }
    test_step = "the verdict";
    long totals[2] = {0, 0}, mine[2] = {atomic_load(&test_checks), atomic_load(&test_failures)};
    MPI_Group world, survivors;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_excl(world, 1, &victim, &survivors);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_create_group(MPI_COMM_WORLD, survivors, 53, &comm);
    MPI_Allreduce(mine, totals, 2, MPI_LONG, MPI_SUM, comm);
    if (chorus_rank() == 0)
        printf("survivors np=%d, rank %d ended%s: %ld passed, %ld failed; the failure met %.2f s "
               "after it, the first step over %d survivors %.3f s after that\n",
               test_size, victim, told ? " (others told)" : "", totals[0] - totals[1], totals[1], detected - started,
               test_size - 1, first_step - detected);
    fflush(stdout);
    chorus_shutdown();
    _exit(totals[1] == 0 ? 0 : 1);
}
