/*
 * ucx_allreduce.c — the allreduce over the UCX transport against the same algorithm over
 * chorus's MPI transport, on the ranks of one mpirun: MPI hands the UCX fabrics' addresses
 * round (as the elastic driver will) and is the baseline. Rows in nccl-tests' columns, per
 * transport; rank 0 also prints the UCX lanes to rank 1 (which transports UCX chose).
 *   mpirun -np N ucx-allreduce-bench [ring|rabenseifner|recursive_doubling]
 */
#include "../lib/collectives/algorithms.h"
#include "../lib/transport/transport_ucx.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds of one allreduce of `count` floats, the mean of `iterations` after a
 * warm-up; a failure ends the program. */
static double time_allreduce(struct transport *transport, int algorithm, float *buffer,
                             size_t count, int iterations)
{
    size_t table_size = 0;
    const struct algorithm *table = algorithm_table(CHORUS_ALLREDUCE, &table_size);
    struct scratch scratch = {0};
    struct allreduce_args args = {.transport = transport, .scratch = &scratch, .buffer = buffer,
                                  .count = count, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM};
    double start = 0;
    for (int i = -2; i < iterations; i++) {
        if (i == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            start = MPI_Wtime();
        }
        if (table[algorithm].run.allreduce(&args) != CHORUS_OK) {
            fprintf(stderr, "allreduce failed: %s\n", transport->error);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double seconds = (MPI_Wtime() - start) / iterations, slowest = 0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    scratch_release(&scratch);
    return slowest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, nranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int algorithm = algorithm_find(CHORUS_ALLREDUCE, argc > 1 ? argv[1] : "ring");
    char error[512] = "";
    struct ucx_context *context = NULL;
    struct ucx_fabric *fabric = NULL;
    if (algorithm < 0 || ucx_context_create(&context, error, sizeof error) != CHORUS_OK ||
        ucx_fabric_create(context, 1, &fabric, error, sizeof error) != CHORUS_OK) {
        fprintf(stderr, "ucx-allreduce-bench: %s\n", algorithm < 0 ? "unknown algorithm" : error);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t bytes = 0;
    const void *mine = ucx_fabric_address(fabric, &bytes);
    int length = (int)bytes, longest = 0;
    MPI_Allreduce(&length, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char *own = calloc(1, (size_t)longest), *all = calloc((size_t)nranks, (size_t)longest);
    const void **addresses = calloc((size_t)nranks, sizeof *addresses);
    memcpy(own, mine, bytes);
    MPI_Allgather(own, longest, MPI_BYTE, all, longest, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < nranks; r++)
        addresses[r] = all + (size_t)r * (size_t)longest;
    if (ucx_fabric_connect(fabric, rank, nranks, addresses, error, sizeof error) != CHORUS_OK) {
        fprintf(stderr, "ucx-allreduce-bench: %s\n", error);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct transport transports[2];
    MPI_Comm comm = MPI_COMM_WORLD;
    transport_mpi_init(&transports[0], &comm);
    transport_ucx_init(&transports[1], fabric);
    const char *names[] = {"mpi", "ucx"};
    const size_t sizes[] = {4 << 10, 1 << 20, 16 << 20};
    float *buffer = calloc(sizes[2] / sizeof(float), sizeof(float));
    if (rank == 0)
        printf("# allreduce %s, %d ranks, float32 sum\n"
               "# %9s %12s %9s %10s %9s %9s\n",
               algorithm_name(CHORUS_ALLREDUCE, algorithm), nranks, "transport", "size(B)",
               "count", "time(us)", "algbw", "busbw");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 2; t++) {
            size_t count = sizes[s] / sizeof(float);
            int iterations = sizes[s] >= (16 << 20) ? 10 : sizes[s] >= (1 << 20) ? 40 : 400;
            double seconds = time_allreduce(&transports[t], algorithm, buffer, count, iterations);
            double algbw = (double)sizes[s] / seconds / 1e9;
            if (rank == 0)
                printf("  %9s %12zu %9zu %10.1f %9.3f %9.3f\n", names[t], sizes[s], count,
                       seconds * 1e6, algbw, algbw * 2 * (nranks - 1) / nranks);
        }
    if (rank == 0 && nranks > 1)
        ucx_fabric_describe(fabric, 1, stdout);
    MPI_Barrier(MPI_COMM_WORLD); /* no rank closes its fabric while another still uses it */
    ucx_fabric_destroy(fabric);
    ucx_context_destroy(context);
    free(buffer);
    free(addresses);
    free(own);
    free(all);
    MPI_Finalize();
    return 0;
}
