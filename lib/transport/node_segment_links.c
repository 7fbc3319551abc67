/*
 * node_segment_links.c — the host's shared segment in a world without MPI: each local rank's
 * part (progress counter, mailbox, staging areas) is a memory file of its own (host_parts.h),
 * and the ranks of the same local rank on the other hosts are a group of the world's transport
 * (transport_subset.c), as MPI's cross communicator is for node_segment_mpi.c.
 */
#include "host_parts.h"
#include "node_segment.h"
#include "../core/retained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static_assert(HOST_MAX_RANKS == NODE_MAX_LOCAL_RANKS, "one bound on the ranks of a host");

/* The group number of the cross-host ranks on the world's transport (transport_subset.c). */
enum { CROSS_GROUP = 1 };

struct links_owner {
    struct host_parts parts;
    struct transport cross;
    bool cross_made;
};

chorus_status node_segment_create_links(struct node_segment *segment,
                                        const struct host_exchange *exchange,
                                        struct transport *world, const int *cross_members,
                                        int hosts, size_t chunk_bytes, unsigned staging_areas,
                                        bool streaming, bool yield_while_waiting, char *error,
                                        size_t error_size)
{
    memset(segment, 0, sizeof *segment);
    segment->local_rank = exchange->local_rank;
    segment->local_size = exchange->local_size;
    if (segment->local_size > NODE_MAX_LOCAL_RANKS) {
        snprintf(error, error_size, "%d ranks on one host; the shared segment supports %d",
                 segment->local_size, NODE_MAX_LOCAL_RANKS);
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    segment->chunk_bytes = chunk_bytes;
    segment->yield_while_waiting = yield_while_waiting;
    segment->stuck_rank = -1;
    segment->over_links = true;
    for (int r = 0; r < segment->local_size; r++)
        segment->heap_files[r] = -1;
    unsigned areas = node_staging_areas(staging_areas);
    node_segment_set_staging(segment, areas, streaming);
    /* Every rank takes part in the exchanges; one that could not allocate its owner says so
     * through them. */
    struct links_owner *owner = calloc(1, sizeof *owner);
    struct host_parts ignored;
    struct host_parts *parts = owner != NULL ? &owner->parts : &ignored;
    size_t part_bytes = node_segment_part_bytes(areas, chunk_bytes);
    if (!host_parts_create(parts, exchange, owner != NULL ? part_bytes : 0, error,
                           error_size) ||
        owner == NULL) {
        if (owner == NULL) {
            host_parts_destroy(parts);
            snprintf(error, error_size, "out of memory");
        }
        free(owner);
        return owner == NULL ? CHORUS_ERR_OUT_OF_MEMORY : CHORUS_ERR_NOT_SUPPORTED;
    }
    for (int r = 0; r < segment->local_size; r++)
        node_segment_map_part(segment, r, parts->part[r]);
    if (hosts > 1) {
        transport_subset_init(&owner->cross, world, cross_members, hosts, CROSS_GROUP);
        owner->cross_made = true;
        segment->cross = &owner->cross;
    }
    segment->owner = owner;
    node_segment_probe_peers(segment, exchange);
    return CHORUS_OK;
}

void node_segment_retain_links(struct node_segment *segment)
{
    retained_keep(segment->owner);
    retained_keep(segment->cross_scratch.memory);
    segment->owner = NULL;
    segment->cross_scratch = (struct scratch){0};
}

void node_segment_destroy_links(struct node_segment *segment)
{
    struct links_owner *owner = segment->owner;
    if (owner == NULL)
        return;
    scratch_release(&segment->cross_scratch);
    node_heap_close_peers(segment);
    if (owner->cross_made)
        transport_subset_release(&owner->cross);
    host_parts_destroy(&owner->parts);
    free(owner);
    segment->owner = NULL;
}

void node_segment_release(struct node_segment *segment, bool in_use)
{
    if (segment->over_links && in_use)
        node_segment_retain_links(segment);
    else if (segment->over_links)
        node_segment_destroy_links(segment);
    else if (in_use)
        node_segment_retain_mpi(segment);
    else
        node_segment_destroy_mpi(segment);
}
