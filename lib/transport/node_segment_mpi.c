/*
 * node_segment_mpi.c — the host's shared segment from MPI_Win_allocate_shared: each local rank
 * allocates its progress counter (one cache line) and its staging areas, so each part lies in
 * memory local to the rank that writes it. MPI_Win_shared_query gives every rank the
 * addresses of the others' parts.
 */
#include "node_segment.h"
#include "../core/retained.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mpi_owner {
    MPI_Win window;
    struct transport cross;
};

/* The host's ranks exchange over `node_comm` (node_segment_probe_peers). */
static bool node_allgather(void *context, const void *mine, size_t bytes, void *all)
{
    return MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                         *(MPI_Comm *)context) == MPI_SUCCESS;
}

static bool node_minimum(void *context, uint64_t *words, size_t count)
{
    return MPI_Allreduce(MPI_IN_PLACE, words, (int)count, MPI_UINT64_T, MPI_MIN,
                         *(MPI_Comm *)context) == MPI_SUCCESS;
}

chorus_status node_segment_create_mpi(struct node_segment *segment, const void *node_comm_pointer,
                                      const void *cross_comm_pointer, size_t chunk_bytes,
                                      unsigned staging_areas, bool streaming,
                                      bool yield_while_waiting, char *error,
                                      size_t error_size)
{
    MPI_Comm node_comm, cross_comm;
    memcpy(&node_comm, node_comm_pointer, sizeof node_comm);
    memcpy(&cross_comm, cross_comm_pointer, sizeof cross_comm);
    memset(segment, 0, sizeof *segment);
    MPI_Comm_rank(node_comm, &segment->local_rank);
    MPI_Comm_size(node_comm, &segment->local_size);
    if (segment->local_size > NODE_MAX_LOCAL_RANKS) {
        snprintf(error, error_size, "%d ranks on one host; the shared segment supports %d",
                 segment->local_size, NODE_MAX_LOCAL_RANKS);
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    struct mpi_owner *owner = calloc(1, sizeof *owner);
    if (owner == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    segment->chunk_bytes = chunk_bytes;
    segment->yield_while_waiting = yield_while_waiting;
    segment->stuck_rank = -1;
    for (int r = 0; r < segment->local_size; r++)
        segment->heap_files[r] = -1;
    unsigned areas = node_staging_areas(staging_areas);
    node_segment_set_staging(segment, areas, streaming);
    size_t mine = node_segment_part_bytes(areas, chunk_bytes);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    unsigned char *base = NULL;
    int code = MPI_Win_allocate_shared((MPI_Aint)mine, 1, info, node_comm, &base, &owner->window);
    MPI_Info_free(&info);
    if (code != MPI_SUCCESS) {
        free(owner);
        snprintf(error, error_size, "MPI_Win_allocate_shared of %zu bytes failed", mine);
        return CHORUS_ERR_MPI;
    }
    /* Touching the part places it near this rank, and keeps page faults out of the first calls
     * (which would also make them look slow when they are measured). */
    memset(base, 0, mine);
    for (int r = 0; r < segment->local_size; r++) {
        MPI_Aint size = 0;
        int unit = 0;
        unsigned char *peer = NULL;
        MPI_Win_shared_query(owner->window, r, &size, &unit, &peer);
        node_segment_map_part(segment, r, peer);
    }
    int cross_size = 1;
    MPI_Comm_size(cross_comm, &cross_size);
    if (cross_size > 1) {
        transport_mpi_init(&owner->cross, &cross_comm);
        segment->cross = &owner->cross;
    }
    segment->owner = owner;
    struct host_exchange exchange = {.local_rank = segment->local_rank,
                                     .local_size = segment->local_size,
                                     .allgather = node_allgather,
                                     .minimum = node_minimum,
                                     .context = &node_comm};
    node_segment_probe_peers(segment, &exchange);
    /* Everyone's counters are zero before anyone waits on them. */
    MPI_Barrier(node_comm);
    return CHORUS_OK;
}

void node_segment_retain_mpi(struct node_segment *segment)
{
    retained_keep(segment->owner);
    retained_keep(segment->cross_scratch.memory);
    segment->owner = NULL;
    segment->cross_scratch = (struct scratch){0};
}

void node_segment_destroy_mpi(struct node_segment *segment)
{
    struct mpi_owner *owner = segment->owner;
    if (owner == NULL)
        return;
    scratch_release(&segment->cross_scratch);
    node_heap_close_peers(segment);
    MPI_Win_free(&owner->window);
    free(owner);
    segment->owner = NULL;
}
