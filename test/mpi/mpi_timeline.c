/*
 * mpi_timeline.c — produces a timeline (run with CHORUS_TIMELINE set): small allreduces that
 * fuse, a large one alone, a broadcast and an allgather. With the argument "abort" every rank
 * stops with _exit() right after, without chorus_shutdown or MPI_Finalize, to check that the
 * trace is valid JSON also when the program ends early. test/check_timeline.py reads it.
 */
#include "mpi_test.h"

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    test_init_chorus();
    enum { SMALL = 8 };
    float small[SMALL][16];
    chorus_handle *handles[SMALL];
    for (int i = 0; i < SMALL; i++) {
        char name[32];
        snprintf(name, sizeof name, "small.%d", i);
        chorus_tensor tensor = {.data = small[i], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {16}};
        EXPECT_STATUS(chorus_allreduce_async(name, &tensor, NULL, CHORUS_AVERAGE, &handles[i]),
                      CHORUS_OK);
    }
    for (int i = 0; i < SMALL; i++) {
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_OK);
        chorus_handle_free(handles[i]);
    }
    static float large[1 << 20];
    chorus_tensor tensor = {.data = large, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1 << 20}};
    EXPECT_STATUS(chorus_allreduce("large", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT_STATUS(chorus_broadcast("weights", &tensor, 0), CHORUS_OK);
    chorus_tensor rows = {.data = large, .dtype = CHORUS_FLOAT32, .ndims = 2, .shape = {2, 8}};
    chorus_tensor gathered;
    EXPECT_STATUS(chorus_allgather("rows", &rows, &gathered), CHORUS_OK);
    free(gathered.data);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        _exit(0);
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_timeline");
}
