/*
 * mpi_stall.c — the stall inspector: the last rank never submits "late.tensor". With
 * CHORUS_STALL_WARNING_SECONDS=1 rank 0 logs a warning naming the tensor and the missing rank;
 * with CHORUS_STALL_SHUTDOWN_SECONDS=3 the other ranks' handles fail with CHORUS_ERR_STALLED.
 * Rank 0's stderr goes to a file so the test can read the warning.
 *
 * Then the last rank runs one allreduce more ("extra") while the others go on to "next": both
 * are given up, the last rank's own "next" fails at once (it owes what the others gave up), and
 * the allreduce after that adds every rank's value: the ranks are in step again.
 */
#include "mpi_test.h"

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    if (test_size < 2) {
        printf("mpi_stall: needs 2 or more ranks; skipped\n");
        MPI_Finalize();
        return 77;
    }
    char log_path[256];
    snprintf(log_path, sizeof log_path, "/tmp/chorus-stall-%d-%d.log", (int)getpid(), test_rank);
    int saved_stderr = dup(STDERR_FILENO);
    if (test_rank == 0 && freopen(log_path, "w", stderr) == NULL)
        return 1;
    setvbuf(stderr, NULL, _IONBF, 0);
    setenv("CHORUS_STALL_WARNING_SECONDS", "1", 1);
    setenv("CHORUS_STALL_SHUTDOWN_SECONDS", "3", 1);
    test_init_chorus();
    int missing = test_size - 1;
    if (test_rank != missing) {
        float value = 1;
        chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {1}};
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_allreduce_async("late.tensor", &tensor, NULL, CHORUS_SUM, &handle),
                      CHORUS_OK);
        test_step = "waiting for the stall verdict";
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_STALLED);
        char expected[64];
        snprintf(expected, sizeof expected, "but not by rank %d", missing);
        EXPECT(strstr(chorus_handle_error(handle), expected) != NULL &&
                   strstr(chorus_handle_error(handle), "late.tensor") != NULL,
               "message: %s", chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    test_step = "one rank one collective ahead";
    float value = (float)(test_rank + 1);
    chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1}};
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_allreduce_async(test_rank == missing ? "extra" : "next", &tensor, NULL,
                                         CHORUS_SUM, &handle),
                  CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_STALLED);
    chorus_handle_free(handle);
    if (test_rank == missing) {
        test_step = "the late rank's \"next\"";
        EXPECT_STATUS(chorus_allreduce_async("next", &tensor, NULL, CHORUS_SUM, &handle),
                      CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_STALLED);
        EXPECT(strstr(chorus_handle_error(handle), "later and fails too") != NULL,
               "message: %s", chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
    test_step = "in step again";
    value = (float)(test_rank + 1);
    EXPECT_STATUS(chorus_allreduce("after", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT(value == (float)(test_size * (test_size + 1) / 2), "after: %g, expected %d", value,
           test_size * (test_size + 1) / 2);

    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    if (test_rank == 0) {
        fflush(stderr);
        dup2(saved_stderr, STDERR_FILENO);
        FILE *log = fopen(log_path, "r");
        char text[8192] = {0};
        size_t length = log ? fread(text, 1, sizeof text - 1, log) : 0;
        text[length] = '\0';
        if (log)
            fclose(log);
        remove(log_path);
        char expected[128];
        snprintf(expected, sizeof expected, "allreduce \"late.tensor\": submitted");
        EXPECT(strstr(text, " WARNING stall: ") != NULL && strstr(text, "chorus[rank 0 host ") != NULL &&
                   strstr(text, expected) != NULL,
               "no stall warning in rank 0's log: %s", text);
        snprintf(expected, sizeof expected, "but not by rank %d", missing);
        EXPECT(strstr(text, expected) != NULL, "the warning does not name rank %d: %s", missing,
               text);
    }
    return test_finish("mpi_stall");
}
