/*
 * host_parts.h — memory shared by the ranks of one host where no MPI window provides it (a world
 * without MPI, lib/coordinator/world_links.h): each rank's part is a memory file of its own
 * (memfd), zeroed by that rank so that its pages lie near it, and the other ranks of the host map
 * it through /proc/<pid>/fd/<fd>, as they map each other's shared heaps (node_heap.c). No file
 * name is ever made, so a process that dies leaves nothing behind in /dev/shm.
 *
 * What travels between the ranks (each part's process and file, whether every rank mapped every
 * part) is the caller's to carry: a host_exchange, which the executor runs over the world's
 * transport.
 */
#ifndef CHORUS_HOST_PARTS_H
#define CHORUS_HOST_PARTS_H

#include "../core/common.h"

#include <stdint.h>

/* The ranks of one host as a segment's maker sees them, and how they exchange a few words. */
struct host_exchange {
    int local_rank;
    int local_size;
    /* Every local rank's `bytes` at `mine` land in `all` (local_size * bytes), in local rank
     * order. False when the exchange failed (then on every rank of the world). */
    bool (*allgather)(void *context, const void *mine, size_t bytes, void *all);
    /* Each of `count` words becomes its minimum over every rank that takes part (alike on all
     * of them). False when the exchange failed. */
    bool (*minimum)(void *context, uint64_t *words, size_t count);
    void *context;
};

/* The most ranks of one host (as node_segment.h's NODE_MAX_LOCAL_RANKS). */
#define HOST_MAX_RANKS 256

struct host_parts {
    int count;    /* local ranks */
    size_t bytes; /* of each part */
    unsigned char *part[HOST_MAX_RANKS]; /* local rank r's part, mapped in this process */
};

/* Makes this rank's part of `bytes` (zeroed) and maps every other local rank's (at most
 * HOST_MAX_RANKS); collective over `exchange`. True on every rank, or false on every rank with
 * why in `error` (this rank's own failure, or that a rank of the host could not make or map a
 * part). */
bool host_parts_create(struct host_parts *parts, const struct host_exchange *exchange,
                       size_t bytes, char *error, size_t error_size);
/* Unmaps every part. */
void host_parts_destroy(struct host_parts *parts);

#endif
