/*
 * allreduce_hierarchical.c — hierarchical allreduce through a shared-memory segment per host.
 *
 * The buffer is processed in chunks that fit the segment (chunk_bytes per rank). For each chunk:
 *   1. every local rank copies its chunk into its staging area;            barrier
 *   2. local rank r reduces slice r of the chunk: it reads that slice of every rank's staging
 *      area directly and writes the sum into the shared result area; with several hosts it
 *      then allreduces its slice with the ranks of the same local rank on the other hosts;
 *                                                                          barrier
 *   3. every local rank copies the whole reduced chunk into its buffer.
 * The next chunk's barrier keeps the result area from being overwritten while it is read.
 *
 * Cost per chunk of S bytes on a host of L ranks: each rank copies S in, reads S (its slice of
 * all L staging areas) and copies S out, all in cache when chunks are small; two barriers of
 * shared-memory flags instead of MPI messages. Memory traffic is one read of the input and one
 * write of the output, against 2(L-1)/L of the buffer sent and received by a ring through MPI.
 * Across hosts each rank moves only its 1/L slice, so inter-host traffic is divided by L.
 * Each element is reduced by exactly one rank, so every rank gets bitwise identical results.
 * Needs the same number of ranks on every host (the cross-host step pairs equal local ranks).
 *
 * Example, one host, L = 4, a chunk of 8 elements: ranks stage their 8 elements; rank 0 sums
 * elements 0-1 of the four staging areas into result[0-1], rank 1 elements 2-3, rank 2 4-5,
 * rank 3 6-7; after the barrier each rank copies result[0-7] out.
 */
#include "algorithms.h"
#include "node_segment.h"
#include "reduce.h"

#include <string.h>

chorus_status allreduce_hierarchical(const struct allreduce_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL) /* declined by selection; callers only pass it with a segment */
        return allreduce_ring(args);
    size_t element_size = chorus_dtype_size(args->dtype);
    size_t chunk_elements = node->chunk_bytes / element_size;
    unsigned char *buffer = args->buffer;
    int me = node->local_rank, local_size = node->local_size;
    for (size_t done = 0; done < args->count; done += chunk_elements) {
        size_t elements = args->count - done < chunk_elements ? args->count - done
                                                              : chunk_elements;
        unsigned char *chunk = buffer + done * element_size;
        memcpy(node->staging[me], chunk, elements * element_size);
        node_segment_barrier(node);
        size_t slice_start = part_start(elements, (size_t)local_size, (size_t)me);
        size_t slice_length = part_length(elements, (size_t)local_size, (size_t)me);
        size_t offset = slice_start * element_size;
        if (slice_length != 0 && local_size == 1) {
            memcpy(node->result + offset, node->staging[0] + offset, slice_length * element_size);
        } else if (slice_length != 0) {
            reduce_pair(node->result + offset, node->staging[0] + offset,
                        node->staging[1] + offset, slice_length, args->dtype, args->op);
            for (int r = 2; r < local_size; r++)
                reduce_into(node->result + offset, node->staging[r] + offset, slice_length,
                            args->dtype, args->op);
        }
        if (node->cross != NULL) {
            struct allreduce_args cross = {
                .transport = node->cross,
                .scratch = &node->cross_scratch,
                .buffer = node->result + offset,
                .count = slice_length,
                .dtype = args->dtype,
                .op = args->op,
            };
            chorus_status status = slice_length * element_size <= ((size_t)64 << 10)
                                       ? allreduce_recursive_doubling(&cross)
                                       : allreduce_ring(&cross);
            if (status != CHORUS_OK) {
                memcpy(args->transport->error, node->cross->error, sizeof node->cross->error);
                return status;
            }
        }
        if (args->postscale != NULL)
            scale_buffer(node->result + offset, slice_length, args->dtype, *args->postscale);
        node_segment_barrier(node);
        memcpy(chunk, node->result, elements * element_size);
    }
    return CHORUS_OK;
}
