/*
 * hierarchical_cross_host.c — the cross-host step of the allreduces through the host's segment
 * (hierarchical_cross_host.h).
 */
#include "hierarchical_cross_host.h"

#include "reduce.h"

#include <stdio.h>
#include <string.h>

chorus_status hierarchical_slice_across_hosts(struct node_segment *node,
                                              const struct allreduce_args *args, void *slice,
                                              size_t bytes, double postscale)
{
    size_t width = chorus_dtype_size(args->dtype);
    /* A rank of this host stopped after a fatal error (see node_segment_poison): what was just
     * reduced is garbage, which must not reach the other hosts, where nothing would tell it from
     * a result. */
    if (node_segment_poisoned(node) >= 0) {
        snprintf(args->transport->error, sizeof args->transport->error,
                 "a rank of this host failed");
        return CHORUS_ERR_INTERNAL;
    }
    struct allreduce_args cross = {
        .transport = node->cross,
        .scratch = &node->cross_scratch,
        .buffer = slice,
        .count = bytes / width,
        .dtype = args->dtype,
        .op = args->op,
    };
    /* Across hosts the slice goes where the selection table sends a call of its size between
     * ranks that share no host: one per host. */
    struct selection_query query = {.bytes = bytes,
                                    .nranks = node->cross->nranks,
                                    .local_ranks = 1,
                                    .forced = -1,
                                    .tuned = args->tuned};
    int ran = -1;
    chorus_status status =
        selection_run(CHORUS_ALLREDUCE, &query, (union collective_args){.allreduce = &cross}, &ran);
    if (status != CHORUS_OK) {
        memcpy(args->transport->error, node->cross->error, sizeof node->cross->error);
        return status;
    }
    reduce_scale_buffer(slice, bytes / width, args->dtype, postscale);
    return CHORUS_OK;
}
