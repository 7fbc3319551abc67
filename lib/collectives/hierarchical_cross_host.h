/*
 * hierarchical_cross_host.h — the step across hosts of the allreduces through the host's
 * segment (allreduce_hierarchical.c stages, allreduce_shared_heap.c reads the peers' buffers in
 * place): each rank's slice of a chunk, reduced on its host, is allreduced with the ranks of the
 * same local rank on the other hosts, by the algorithm the selection table picks for its size
 * between ranks that share no host. Both algorithms cut the buffer alike
 * (hierarchical_chunks.h) and make these calls alike, so that each host may take either.
 */
#ifndef CHORUS_HIERARCHICAL_CROSS_HOST_H
#define CHORUS_HIERARCHICAL_CROSS_HOST_H

#include "algorithms.h"

/* `slice` (`bytes`, reduced on this host) allreduced across hosts, then times `postscale`.
 * Fails, without sending, where a rank of this host stopped (its reduction is garbage). */
chorus_status hierarchical_slice_across_hosts(struct node_segment *node,
                                              const struct allreduce_args *args, void *slice,
                                              size_t bytes, double postscale);

#endif
