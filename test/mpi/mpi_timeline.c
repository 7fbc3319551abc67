/*
 * mpi_timeline.c — produces a timeline (run with CHORUS_TIMELINE set): a group of small
 * allreduces, which fuse, a large one alone, a broadcast and an allgather. With the argument "abort" every rank
 * stops with _exit() right after, without chorus_shutdown or MPI_Finalize, to check that the
 * trace is valid JSON also when the program ends early. test/check_timeline.py reads it.
 */
#include "mpi_test.h"

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 60);
    test_init_chorus();
    /* A group is released in one response list, so its members are fused on every run. */
    enum { SMALL = 8 };
    float small[SMALL][16];
    char names[SMALL][32];
    chorus_op_args group[SMALL];
    for (int i = 0; i < SMALL; i++) {
        snprintf(names[i], sizeof names[i], "small.%d", i);
        group[i] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        group[i].name = names[i];
        group[i].op = CHORUS_AVERAGE;
        group[i].input = (chorus_tensor){.data = small[i], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                         .shape = {16}};
    }
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit_group(group, SMALL, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    chorus_handle_free(handle);
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
