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
    unsigned next_area;       /* the staging area the next hierarchical allreduce starts in */
    bool yield_while_waiting;                       /* more ranks than cores on this host */
    struct transport *cross;  /* the ranks of the same local rank on the other hosts, or NULL */
    struct scratch cross_scratch;
    void *owner;              /* what to free: the MPI window, or the local allocation */
};

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
