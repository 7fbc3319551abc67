/*
 * mpi_shutdown.c — shutdown with work pending: every rank has handles that can never complete
 * (tensors the other ranks never submit). Rank 0 shuts down first; the others notice while
 * waiting, every pending handle completes with CHORUS_ERR_SHUTDOWN, later submits fail fast,
 * and each rank's own chorus_shutdown, called later and at different times, returns.
 */
#include "mpi_test.h"

#include <time.h>

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    test_init_chorus();
    enum { PENDING = 3 };
    float data[PENDING][4] = {{0}};
    chorus_handle *handles[PENDING];
    for (int i = 0; i < PENDING; i++) {
        char name[64];
        snprintf(name, sizeof name, "lonely.rank%d.%d", test_rank, i);
        chorus_tensor tensor = {.data = data[i], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {4}};
        EXPECT_STATUS(chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM, &handles[i]),
                      CHORUS_OK);
    }
    /* Make sure every rank's requests reached the coordinator before anyone shuts down. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank == 0) {
        test_step = "rank 0 shutdown";
        EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    } else {
        test_step = "waiting for handles";
        for (int i = 0; i < PENDING; i++)
            chorus_wait(handles[i]);
    }
    for (int i = 0; i < PENDING && test_size == 1; i++) {
        /* Alone, a rank's tensors are ready at once: nothing is left pending. */
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_OK);
        chorus_handle_free(handles[i]);
    }
    for (int i = 0; i < PENDING && test_size > 1; i++) {
        EXPECT_STATUS(chorus_test(handles[i]), CHORUS_ERR_SHUTDOWN);
        EXPECT(strstr(chorus_handle_error(handles[i]), "shut down") != NULL &&
                   strstr(chorus_handle_error(handles[i]), "lonely.rank") != NULL,
               "message: %s", chorus_handle_error(handles[i]));
        EXPECT(strstr(chorus_handle_error(handles[i]), "rank 0 called chorus_shutdown") != NULL,
               "message names who shut down: %s", chorus_handle_error(handles[i]));
        chorus_handle_free(handles[i]);
    }
    if (test_rank != 0) {
        test_step = "submit after remote shutdown";
        float value = 1;
        chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {1}};
        chorus_handle *late = NULL;
        EXPECT_STATUS(chorus_allreduce_async("late", &tensor, NULL, CHORUS_SUM, &late),
                      CHORUS_ERR_SHUTDOWN);
        EXPECT(late == NULL, "no handle after a failed submit");
        struct timespec pause = {0, 20000000L * test_rank};
        nanosleep(&pause, NULL);
        test_step = "own shutdown";
        EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_ERR_NOT_INITIALIZED);
    return test_finish("mpi_shutdown");
}
