/*
 * small_segment_mpi.c — the small-message slots of a host's ranks from MPI_Win_allocate_shared:
 * each rank allocates its own part, so that its slots lie in memory near the rank that writes
 * them.
 */
#include "small_segment.h"
#include "../core/retained.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mpi_owner {
    MPI_Win window;
};

chorus_status small_segment_create_mpi(struct small_segment *segment, const void *node_comm_pointer,
                                       size_t capacity, bool oversubscribed, char *error,
                                       size_t error_size)
{
    MPI_Comm node_comm;
    memcpy(&node_comm, node_comm_pointer, sizeof node_comm);
    memset(segment, 0, sizeof *segment);
    MPI_Comm_rank(node_comm, &segment->local_rank);
    MPI_Comm_size(node_comm, &segment->local_size);
    segment->capacity = capacity;
    segment->oversubscribed = oversubscribed;
    segment->late_rank = -1;
    if (segment->local_size > NODE_MAX_LOCAL_RANKS) {
        snprintf(error, error_size, "%d ranks on one host; the small-message slots support %d",
                 segment->local_size, NODE_MAX_LOCAL_RANKS);
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    struct mpi_owner *owner = calloc(1, sizeof *owner);
    size_t mine = small_segment_part_bytes(capacity);
    unsigned char *base = NULL;
    int made = 0;
    if (owner != NULL) {
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        made = MPI_Win_allocate_shared((MPI_Aint)mine, SMALL_LINE_BYTES, info, node_comm, &base,
                                       &owner->window) == MPI_SUCCESS;
        MPI_Info_free(&info);
    }
    if (made) {
        memset(base, 0, mine); /* near this rank, and no page faults in the first calls */
        for (int r = 0; r < segment->local_size; r++) {
            MPI_Aint size = 0;
            int unit = 0;
            unsigned char *peer = NULL;
            MPI_Win_shared_query(owner->window, r, &size, &unit, &peer);
            small_segment_map_part(segment, r, peer);
        }
    }
    /* Every rank must use the slots, or none: one left without them would take another path.
     * The reduction also keeps anyone from waiting on slots not yet zeroed. */
    int everywhere = made;
    if (MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, node_comm) != MPI_SUCCESS)
        everywhere = 0;
    if (!everywhere) {
        if (made)
            MPI_Win_free(&owner->window);
        free(owner);
        snprintf(error, error_size, "MPI_Win_allocate_shared of %zu bytes for the small-message "
                 "slots failed on a rank of this host", mine);
        return CHORUS_ERR_MPI;
    }
    segment->owner = owner;
    return CHORUS_OK;
}

void small_segment_retain_mpi(struct small_segment *segment)
{
    retained_keep(segment->owner);
    segment->owner = NULL;
}

void small_segment_destroy_mpi(struct small_segment *segment)
{
    struct mpi_owner *owner = segment->owner;
    if (owner == NULL)
        return;
    MPI_Win_free(&owner->window);
    free(owner);
    segment->owner = NULL;
}
