/*
 * world.c — chorus started on a world over UCX (chorus_init_world) inside an MPI job, MPI
 * handing the ranks' addresses round as chorus's elastic driver does: so that a benchmark or a
 * test run under mpirun measures or checks the path an elastic job takes, beside MPI.
 */
#include "measure.h"

#include <mpi.h>
#include <stdlib.h>

static chorus_world *opened;

/* As the process ends: the world, once chorus is shut down (a rank that closed it while chorus
 * ran would look lost to the others). */
static void close_world(void)
{
    if (opened != NULL && !chorus_is_initialized())
        chorus_world_close(opened);
    opened = NULL;
}

chorus_status measure_init_world(int hosts)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    chorus_world *world = NULL;
    chorus_status status = chorus_world_open(1, &world);
    if (status != CHORUS_OK)
        return status;
    opened = world;
    atexit(close_world);
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
    MPI_Allgather(&mine, 1, MPI_INT, lengths, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) {
        offsets[r] = total;
        total += lengths[r];
    }
    if ((table = malloc((size_t)total)) == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Allgatherv(address, mine, MPI_BYTE, table, lengths, offsets, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        addresses[r] = table + offsets[r];
    char host[32];
    snprintf(host, sizeof host, "host-%d", hosts > 0 ? rank % hosts : 0);
    status = chorus_init_world(world, rank, size, hosts > 0 ? host : NULL, addresses, NULL);
    free(table);
    free(addresses);
    free(offsets);
    free(lengths);
    return status;
}
