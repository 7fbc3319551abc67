/*
 * small_segment_links.c — the small-message slots of a host's ranks in a world without MPI:
 * each rank's part is a memory file of its own (host_parts.h), so that its slots lie in memory
 * near the rank that writes them.
 */
#include "host_parts.h"
#include "small_segment.h"
#include "../core/retained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

chorus_status small_segment_create_links(struct small_segment *segment,
                                         const struct host_exchange *exchange, size_t capacity,
                                         bool oversubscribed, char *error, size_t error_size)
{
    memset(segment, 0, sizeof *segment);
    segment->local_rank = exchange->local_rank;
    segment->local_size = exchange->local_size;
    segment->capacity = capacity;
    segment->oversubscribed = oversubscribed;
    segment->late_rank = -1;
    segment->over_links = true;
    if (segment->local_size > NODE_MAX_LOCAL_RANKS) {
        snprintf(error, error_size, "%d ranks on one host; the small-message slots support %d",
                 segment->local_size, NODE_MAX_LOCAL_RANKS);
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    /* Every rank takes part in the exchanges; one that could not allocate says so through
     * them. */
    struct host_parts ignored;
    struct host_parts *parts = malloc(sizeof *parts);
    size_t part_bytes = parts != NULL ? small_segment_part_bytes(capacity) : 0;
    if (!host_parts_create(parts != NULL ? parts : &ignored, exchange, part_bytes, error,
                           error_size) ||
        parts == NULL) {
        if (parts == NULL) {
            host_parts_destroy(&ignored);
            snprintf(error, error_size, "out of memory for the small-message slots");
        }
        free(parts);
        return parts == NULL ? CHORUS_ERR_OUT_OF_MEMORY : CHORUS_ERR_NOT_SUPPORTED;
    }
    for (int r = 0; r < segment->local_size; r++)
        small_segment_map_part(segment, r, parts->part[r]);
    segment->owner = parts;
    return CHORUS_OK;
}

void small_segment_retain_links(struct small_segment *segment)
{
    retained_keep(segment->owner);
    segment->owner = NULL;
}

void small_segment_destroy_links(struct small_segment *segment)
{
    struct host_parts *parts = segment->owner;
    if (parts == NULL)
        return;
    host_parts_destroy(parts);
    free(parts);
    segment->owner = NULL;
}

void small_segment_release(struct small_segment *segment, bool in_use)
{
    if (segment->over_links && in_use)
        small_segment_retain_links(segment);
    else if (segment->over_links)
        small_segment_destroy_links(segment);
    else if (in_use)
        small_segment_retain_mpi(segment);
    else
        small_segment_destroy_mpi(segment);
}
