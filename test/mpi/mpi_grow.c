/*
 * mpi_grow.c — chorus_grow: the ranks of an np-rank job add 1 or 2 ranks (2 where np is odd),
 * started by MPI_Comm_spawn from this same program with --grown, which join in chorus_init.
 * In the grown world the old ranks must keep their ranks and the new ones follow them, and
 * allreduces of odd counts (0, 1, 3, a prime, more than a fusion's worth of small tensors) and
 * broadcasts from an old and from a new rank must equal the reference of the grown world. Bad
 * options must be refused with nothing changed. Where the grown world is made, the new ranks
 * are in MPI's allocation already (mpirun on this host), as chorus's elastic driver arranges.
 */
#include "../common/reference.h"
#include "mpi_test.h"

static const size_t counts[] = {0, 1, 3, 37, 1031};

/* Allreduces and broadcasts on the world chorus runs on now, checked against the reference. */
static void check_collectives(const char *world)
{
    int rank = chorus_rank(), size = chorus_size();
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t count = counts[c];
        uint64_t seed = 7000 + (uint64_t)size * 100 + c;
        double *data = calloc(count + 1, sizeof *data);
        reference_fill(data, count, CHORUS_FLOAT64, CHORUS_SUM, seed, rank);
        char name[64];
        snprintf(name, sizeof name, "%s.sum.%zu", world, count);
        chorus_tensor tensor = {.data = data, .dtype = CHORUS_FLOAT64, .ndims = 1,
                                .shape = {(int64_t)count}};
        EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_SUM), CHORUS_OK);
        char why[256] = "";
        EXPECT(reference_check_allreduce(data, count, CHORUS_FLOAT64, CHORUS_SUM, size, NULL,
                                         seed, 1, 1, why, sizeof why) < 0,
               "%s: %s", name, why);
        free(data);
        for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
            unsigned char bytes[1031 + 1];
            reference_fill_bytes(bytes, count, seed, rank);
            snprintf(name, sizeof name, "%s.broadcast.%zu.from%d", world, count, root);
            chorus_tensor sent = {.data = bytes, .dtype = CHORUS_UINT8, .ndims = 1,
                                  .shape = {(int64_t)count}};
            EXPECT_STATUS(chorus_broadcast(name, &sent, root), CHORUS_OK);
            EXPECT(reference_check_bytes(bytes, count, seed, root) < 0, "%s: wrong bytes", name);
        }
    }
}

/* The refusals: each must leave chorus running over the same ranks. */
static void check_refusals(void)
{
    test_step = "refused grows";
    int size = chorus_size();
    EXPECT_STATUS(chorus_grow(NULL, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    chorus_grow_options none = CHORUS_GROW_OPTIONS_INIT;
    none.count = 1;
    EXPECT_STATUS(chorus_grow(&none, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "no command") != NULL, "message: %s", chorus_last_error());
    chorus_grow_options zero = CHORUS_GROW_OPTIONS_INIT;
    zero.command = "true";
    EXPECT_STATUS(chorus_grow(&zero, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "0 new ranks") != NULL, "message: %s",
           chorus_last_error());
    EXPECT(chorus_size() == size, "size %d after the refusals, was %d", chorus_size(), size);
}

/* The verdict over the grown world (MPI_COMM_WORLD is only the old or only the new ranks). */
static int finish(void)
{
    double totals[2] = {(double)atomic_load(&test_checks), (double)atomic_load(&test_failures)};
    chorus_tensor tensor = {.data = totals, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {2}};
    chorus_status status = chorus_allreduce("verdict", &tensor, NULL, CHORUS_SUM);
    if (status != CHORUS_OK)
        totals[1] += 1;
    if (chorus_rank() == 0)
        printf("mpi_grow np=%d grown to %d: %.0f passed, %.0f failed\n", test_size, chorus_size(),
               totals[0] - totals[1], totals[1]);
    chorus_shutdown();
    MPI_Finalize();
    return totals[1] == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    bool grown = argc > 1 && strcmp(argv[1], "--grown") == 0;
    test_init_chorus();
    if (grown) {
        /* A new rank: it joined after every old one. */
        test_step = "joining";
        int old = chorus_size() - test_size;
        EXPECT(old >= 1 && chorus_rank() == old + test_rank,
               "new rank %d of MPI's %d is chorus's rank %d of %d", test_rank, test_size,
               chorus_rank(), chorus_size());
        check_collectives("grown");
        return finish();
    }
    test_step = "before growing";
    EXPECT(chorus_size() == test_size && chorus_rank() == test_rank, "rank %d of %d",
           chorus_rank(), chorus_size());
    check_collectives("first");
    check_refusals();

    test_step = "growing";
    char *grown_argv[] = {"--grown", NULL};
    chorus_grow_options grow = CHORUS_GROW_OPTIONS_INIT;
    grow.command = argv[0];
    grow.argv = grown_argv;
    grow.count = test_size % 2 == 1 ? 2 : 1;
    double started = test_seconds();
    EXPECT_STATUS(chorus_grow(&grow, NULL), CHORUS_OK);
    double took = test_seconds() - started;
    EXPECT(chorus_size() == test_size + grow.count && chorus_rank() == test_rank,
           "rank %d of %d after growing by %d, expected %d of %d", chorus_rank(), chorus_size(),
           grow.count, test_rank, test_size + grow.count);
    if (test_rank == 0)
        printf("mpi_grow np=%d: %d ranks added in %.3f s\n", test_size, grow.count, took);
    check_collectives("grown");
    return finish();
}
