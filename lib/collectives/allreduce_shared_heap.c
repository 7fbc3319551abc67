/*
 * allreduce_shared_heap.c — the allreduce of a tensor that lies in the shared heap
 * (chorus_mem_alloc) on every rank of the host. Each rank maps the others' heaps
 * (node_heap.c), reduces its slice of the tensor straight from every rank's buffer, and writes
 * the result straight into every rank's buffer. Per rank, each byte of the tensor is read once
 * and written once, as in a copy; the staged path copies the peers' slices into the segment,
 * reads them there and copies the results out again, about twice a copy's traffic
 * (docs/benchmarks.md, "where a training step's time goes").
 *
 * The buffer is cut into chunks and slices as the staged path cuts it (hierarchical_chunks.h).
 * The rank's slice of each chunk is reduced a piece at a time into an area that stays in the
 * cache (the segment's own result area), in rank order, so that every rank's result has the
 * same bits whichever rank reduced it, with the postscale applied by the last combination; the
 * piece is then copied to every rank's buffer, starting with the next rank's, so that the
 * writers spread over the buffers. Across hosts the slice is one piece, allreduced with the
 * ranks of the same local rank on the other hosts between the two, in the same calls as the
 * staged path makes (hierarchical_cross_host.h): each host decides alone whether its tensors
 * lie in the heap. Two barriers frame the call: after the first every rank's input is there and
 * its offset published; after the last every result is written, and a rank may touch its buffer
 * again.
 *
 * The selection table runs it for tensors that every rank's request said lie in the heap (rank
 * 0 combines the ranks' words: request.h's in_shared_heap), so tensors elsewhere cost nothing.
 * It declines a fused batch (a list of pieces), a host without the segment or without the
 * peers' heaps mapped, all on every rank alike; and, after the first barrier, a tensor that does
 * not lie in the heap on every rank of the host after all (forced by CHORUS_ALLREDUCE_ALGO, or a
 * peer's heap that could not be mapped), alike on the host's ranks. The algorithm table then
 * runs the staged hierarchical allreduce there (declines_per_host), whose calls across hosts are
 * the same.
 *
 * Cost per rank, for a tensor of S bytes on a host of L ranks: S/L read from every rank (S in
 * all) and written to every rank (S in all), two barriers; across H hosts, the slice's allreduce
 * among them. Example, L = 2, 8 elements in one chunk: rank 0 reduces elements 0-3 of both
 * buffers into its result area and copies them into buffer 1, then buffer 0; rank 1 does 4-7.
 *
 * Measured with a two-process prototype (the development VM, 2026-11-26, 25 MiB of float32 at
 * np=2, one core each): 2.5-2.8 ms with 64 KiB pieces and ordinary stores, 3.4-3.6 ms with
 * streaming stores (which miss the lines the peer's buffer already had in the cache), against
 * 3.9-5.3 ms for a concurrent memcpy of the same 25 MiB on each rank.
 */
#include "../transport/shared_heap.h"
#include "algorithms.h"
#include "hierarchical_chunks.h"
#include "hierarchical_cross_host.h"
#include "reduce.h"

#include <stdio.h>
#include <string.h>

/* Reduced per piece: small enough that the piece and its operands' lines stay in the cache
 * while it is copied to every rank. */
#define PIECE_BYTES ((size_t)64 << 10)

/* After the first barrier: whether every local rank's buffer lies in its heap. */
static bool every_buffer_in_heap(const struct node_segment *node)
{
    for (int r = 0; r < node->local_size; r++)
        if (node->mailbox[r][NODE_MAILBOX_ADDRESS] == SHARED_HEAP_NOWHERE)
            return false;
    return true;
}

/* Reduces this rank's slice of `chunk` (at `offset`, `bytes`) from every rank's buffer and
 * writes the result into every rank's buffer, in pieces that stay in the cache (one piece, the
 * whole slice, across hosts, where it is allreduced with the other hosts between). */
static chorus_status reduce_slice_in_place(struct node_segment *node,
                                           const struct allreduce_args *args,
                                           unsigned char *const *buffers, size_t offset,
                                           size_t bytes, double factor)
{
    int p = node->local_size, me = node->local_rank;
    size_t width = chorus_dtype_size(args->dtype);
    size_t piece_bytes = node->cross == NULL && PIECE_BYTES < node->chunk_bytes
                             ? PIECE_BYTES
                             : node->chunk_bytes;
    piece_bytes -= piece_bytes % width;
    for (size_t done = 0; done < bytes; done += piece_bytes) {
        size_t length = (bytes - done < piece_bytes ? bytes - done : piece_bytes) / width;
        unsigned char *operands[NODE_MAX_LOCAL_RANKS];
        for (int r = 0; r < p; r++)
            operands[r] = buffers[r] + offset + done;
        reduce_ranks_scaled(node->own_result, (const unsigned char *const *)operands, p, length,
                            args->dtype, args->op, node->cross == NULL ? factor : 1.0);
        if (node->cross != NULL) {
            chorus_status status = hierarchical_slice_across_hosts(
                node, args, node->own_result, length * width, factor);
            if (status != CHORUS_OK)
                return status;
        }
        for (int step = 1; step <= p; step++)
            memcpy(operands[(me + step) % p], node->own_result, length * width);
    }
    return CHORUS_OK;
}

chorus_status allreduce_shared_heap(const struct allreduce_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL || !node->shared_heap || args->pieces != NULL)
        return CHORUS_ERR_NOT_SUPPORTED;
    int p = node->local_size, me = node->local_rank;
    size_t width = chorus_dtype_size(args->dtype);
    if (args->count == 0)
        return CHORUS_OK;
    node->mailbox[me][NODE_MAILBOX_ADDRESS] = shared_heap_offset(args->buffer, args->count * width);
    node_segment_barrier(node);
    if (!every_buffer_in_heap(node))
        return CHORUS_ERR_NOT_SUPPORTED;
    double factor = args->postscale != NULL ? *args->postscale : 1.0;
    unsigned char *buffers[NODE_MAX_LOCAL_RANKS];
    bool mapped = true;
    for (int r = 0; r < p && mapped; r++) {
        buffers[r] = node_heap_at(node, r, node->mailbox[r][NODE_MAILBOX_ADDRESS],
                                  args->count * width);
        mapped = buffers[r] != NULL;
    }
    /* Cut as the staged path cuts (hierarchical_chunks.h): across hosts the other hosts may
     * have taken it, and the slices they allreduce with this rank must be the same. */
    size_t chunks = chunk_count(args->count, width, node->chunk_bytes);
    chorus_status status = CHORUS_OK;
    for (size_t k = 0; mapped && status == CHORUS_OK && k < chunks; k++) {
        struct chunk chunk = chunk_at(args->count, chunks, k, 0, width);
        status = reduce_slice_in_place(node, args, buffers,
                                       chunk.start + slice_offset(&chunk, p, me, width),
                                       slice_bytes(&chunk, p, me, width), factor);
    }
    /* After a failed cross-host step too, this host's ranks meet at the last barrier, so
     * that none waits for this one; the other hosts' ranks failed that call alike. */
    int failed = node_segment_first_failed(node, mapped && status == CHORUS_OK);
    if (status != CHORUS_OK)
        return status;
    if (failed < 0)
        return CHORUS_OK;
    snprintf(args->transport->error, sizeof args->transport->error,
             "local rank %d could not finish its slice (mapping a peer's shared heap, or its "
             "cross-host step, failed there)",
             failed);
    return CHORUS_ERR_INTERNAL;
}
