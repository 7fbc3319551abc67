/*
 * node_segment.h — memory shared by the ranks of one host, for the hierarchical allreduce:
 * two staging areas per rank (used in turn, so that one chunk is staged while the previous one
 * is read), and a progress counter per rank on its own cache line, through which the ranks of
 * the host wait for each other without MPI.
 *
 * Between processes the memory comes from MPI_Win_allocate_shared (node_segment_mpi.c); in unit
 * tests the "ranks" are threads and it is ordinary memory (node_segments_create_local).
 */
#ifndef CHORUS_NODE_SEGMENT_H
#define CHORUS_NODE_SEGMENT_H

#include "algorithms.h"

#include <stdatomic.h>

#define NODE_MAX_LOCAL_RANKS 256

struct node_segment {
    int local_rank;
    int local_size;
    size_t chunk_bytes;                               /* bytes of each staging area */
    unsigned char *staging[NODE_MAX_LOCAL_RANKS][2];  /* local rank r's two staging areas */
    _Atomic uint64_t *progress[NODE_MAX_LOCAL_RANKS]; /* local rank r's barrier counter */
    uint64_t sequence;                              /* this rank's last barrier */
    unsigned next_area;       /* the staging area the next algorithm starts in */
    bool yield_while_waiting;                       /* more ranks than cores on this host */
    struct transport *cross;  /* the ranks of the same local rank on the other hosts, or NULL */
    struct scratch cross_scratch;
    void *owner;              /* what to free: the MPI window, or the local allocation */
};

/* The algorithms use the two staging areas in turn, chunk after chunk and across calls: a
 * peer may still read the area of one call's last chunk while this rank stages the next call's
 * first chunk. An algorithm that needs `chunks` turns takes them in a row; returns the first. */
static inline size_t node_segment_take_turns(struct node_segment *segment, size_t chunks)
{
    size_t first = segment->next_area;
    segment->next_area = (unsigned)((first + chunks) % 2);
    return first;
}

/* Local rank `rank`'s staging area for turn `turn`. */
static inline unsigned char *node_staging(const struct node_segment *segment, int rank,
                                          size_t turn)
{
    return segment->staging[rank][turn % 2];
}

/* Bytes of chunk `index` when `total` bytes are cut into chunks of `chunk_bytes` (0 past the
 * end). */
static inline size_t node_chunk_length(size_t total, size_t chunk_bytes, size_t index)
{
    size_t offset = index * chunk_bytes;
    if (offset >= total)
        return 0;
    return total - offset < chunk_bytes ? total - offset : chunk_bytes;
}

/* Waits until every local rank has reached the same barrier. */
void node_segment_barrier(struct node_segment *segment);

/* For tests: `local_size` segments over one piece of ordinary memory, one per thread.
 * Free with node_segments_destroy_local. */
struct node_segment *node_segments_create_local(int local_size, size_t chunk_bytes);
void node_segments_destroy_local(struct node_segment *segments);

/* Over MPI: collective over `node_comm` (the ranks of this host, an MPI_Comm passed by
 * pointer); `cross_comm` groups the ranks of the same local rank across hosts. */
chorus_status node_segment_create_mpi(struct node_segment *segment, const void *node_comm,
                                      const void *cross_comm, size_t chunk_bytes,
                                      bool yield_while_waiting, char *error, size_t error_size);
void node_segment_destroy_mpi(struct node_segment *segment);

#endif
