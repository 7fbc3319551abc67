/*
 * world.c — chorus started on a world over UCX (chorus_init_world) inside an MPI job, MPI
 * handing the ranks' addresses round as chorus's elastic driver does: so that a benchmark or a
 * test run under mpirun measures or checks the path an elastic job takes, beside MPI.
 */
#include "measure.h"

#include <mpi.h>
#include <stdlib.h>

enum { MAX_WORLDS = 8 };
static chorus_world *opened[MAX_WORLDS];
static int opened_count;

/* As the process ends: the worlds, once chorus is shut down (a rank that closed one while
 * chorus ran would look lost to the others). */
static void close_worlds(void)
{
    for (int w = 0; w < opened_count && !chorus_is_initialized(); w++)
        chorus_world_close(opened[w]);
    opened_count = 0;
}

chorus_status measure_init_world(int hosts)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return measure_join_world(1, hosts, rank);
}

chorus_status measure_join_world(int number, int hosts, int as_rank)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (opened_count == MAX_WORLDS)
        return CHORUS_ERR_INVALID_ARGUMENT;
    chorus_world *world = NULL;
    chorus_status status = chorus_world_open(number, &world);
    if (status != CHORUS_OK)
        return status;
    if (opened_count == 0)
        atexit(close_worlds);
    opened[opened_count++] = world;
    const void *address = NULL;
    size_t bytes = 0;
    chorus_world_address(world, &address, &bytes);
    int mine = (int)bytes, total = 0;
    int *lengths = calloc((size_t)size, sizeof *lengths);
    int *offsets = calloc((size_t)size, sizeof *offsets);
    const void **addresses = calloc((size_t)size, sizeof *addresses);
    char *table = NULL;
    if (lengths == NULL || offsets == NULL || addresses == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    /* Ordered by the rank each process takes: MPI_COMM_WORLD split by it. */
    MPI_Comm ordered;
    MPI_Comm_split(MPI_COMM_WORLD, 0, as_rank, &ordered);
    MPI_Allgather(&mine, 1, MPI_INT, lengths, 1, MPI_INT, ordered);
    for (int r = 0; r < size; r++) {
        offsets[r] = total;
        total += lengths[r];
    }
    if ((table = malloc((size_t)total)) == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Allgatherv(address, mine, MPI_BYTE, table, lengths, offsets, MPI_BYTE, ordered);
    MPI_Comm_free(&ordered);
    for (int r = 0; r < size; r++)
        addresses[r] = table + offsets[r];
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char host[32];
    snprintf(host, sizeof host, "host-%d", hosts > 0 ? rank % hosts : 0);
    status = chorus_init_world(world, as_rank, size, hosts > 0 ? host : NULL, addresses, NULL);
    free(table);
    free(addresses);
    free(offsets);
    free(lengths);
    return status;
}
