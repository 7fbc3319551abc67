/*
 * allreduce_hierarchical.c — hierarchical allreduce through a shared-memory segment per host.
 *
 * The buffer is processed in chunks; chunk k is split into one slice per local rank, and local
 * rank r owns slice r: it alone reduces it, so every rank ends with bitwise identical results.
 * Each rank has staging areas in the segment and uses them in turn (two by default, shown here
 * as k % 2):
 *   stage(k):   copy the slices of chunk k that the *other* ranks own into staging[k % 2]
 *               (the own slice is read straight from the buffer, never staged);
 *   reduce(k):  reduce the own slice from the own buffer and every peer's staging, in rank
 *               order, into the own slice of the own staging area; with several hosts,
 *               allreduce it with the ranks of the same local rank there; copy it into the
 *               buffer;
 *   copyout(k): copy every other slice from its owner's staging area into the buffer.
 * Order:  stage(0) | barrier | for each k: reduce(k), stage(k+1) | barrier | copyout(k)
 * One barrier per chunk suffices: stage(k+1) writes the area that reduce(k-1) read before the
 * previous barrier, but not the own slice that peers may still copy out of (copyout(k-1));
 * reduce(k) overwrites the slices that copyout(k-2) read before the previous barrier.
 *
 * Per chunk of S bytes on a host of L ranks each rank copies (L-1)/L S in, reads S to reduce,
 * and copies (L-1)/L S + S/L out: with chunks small enough for the caches, the buffer is read
 * once and written once from memory. A ring through MPI sends and receives 2(L-1)/L S per rank
 * and reduces in the receive buffer. Across hosts each rank moves only its slice, so inter-host
 * traffic is divided by L. Needs the same number of ranks on every host (the cross-host step
 * pairs equal local ranks).
 *
 * The buffer may be a list of pieces (the tensors of a fused allreduce, see pieces.h): staging
 * gathers from them and the results are scattered straight into them, so a fused allreduce
 * needs no fusion buffer and no copies besides the algorithm's own.
 *
 * Where the ranks' cores sit under different last-level caches, the staging areas are written
 * with streaming stores instead (see node_segment.h): the reduction then lands in the rank's own memory and
 * is copied into the staging area from there (the barrier orders those stores before it).
 *
 * Example, one host, L = 2, a chunk of 8 elements: rank 0 stages elements 4-7 and rank 1
 * elements 0-3; after the barrier rank 0 writes buffer0[0-3] + staging1[0-3] into staging0[0-3]
 * and rank 1 writes staging0[4-7] + buffer1[4-7] into staging1[4-7]; after the next barrier
 * rank 0 copies staging1[4-7] out and rank 1 staging0[0-3].
 */
#include "algorithms.h"
#include "../transport/transport.h"
#include "hierarchical_chunks.h"
#include "hierarchical_cross_host.h"
#include "pieces.h"
#include "reduce.h"

#include <stdio.h>
#include <string.h>

/* The caller's buffer: its pieces, or one piece over args->buffer. */
struct buffer {
    const struct allreduce_piece *pieces;
    size_t count;
};

static void stage(const struct node_segment *node, const struct buffer *buffer,
                  const struct chunk *chunk, size_t width)
{
    unsigned char *area = node_staging(node, node->local_rank, chunk->turn);
    for (int owner = 0; owner < node->local_size; owner++) {
        size_t offset = slice_offset(chunk, node->local_size, owner, width);
        size_t bytes = slice_bytes(chunk, node->local_size, owner, width);
        if (owner != node->local_rank && bytes != 0)
            pieces_gather_with(buffer->pieces, buffer->count, chunk->start + offset,
                               area + offset, bytes, node_stage_copier(node));
    }
}

/* result = the reduction, in rank order, of the own input and the peers' staged copies of
 * `bytes` bytes at `offset` of the chunk, times `factor`, one piece of the own input at a time.
 * The last combination applies the factor, saving a pass over the slice. */
static void reduce_slice(const struct node_segment *node, const struct allreduce_args *args,
                         const struct buffer *buffer, const struct chunk *chunk, size_t offset,
                         size_t bytes, size_t width, double factor, unsigned char *result)
{
    int me = node->local_rank, local_size = node->local_size;
    for (size_t done = 0; done < bytes;) {
        struct piece_run run =
            pieces_run_at(buffer->pieces, buffer->count, chunk->start + offset + done, bytes - done);
        const unsigned char *operands[NODE_MAX_LOCAL_RANKS] = {NULL};
        for (int r = 0; r < local_size; r++)
            operands[r] = r == me ? run.input : node_staging(node, r, chunk->turn) + offset + done;
        reduce_ranks_scaled(result + done, operands, local_size, run.bytes / width, args->dtype,
                            args->op, factor);
        done += run.bytes;
    }
}

static chorus_status reduce_own_slice(struct node_segment *node, const struct allreduce_args *args,
                                      const struct buffer *buffer, const struct chunk *chunk,
                                      size_t width)
{
    int me = node->local_rank;
    size_t offset = slice_offset(chunk, node->local_size, me, width);
    size_t bytes = slice_bytes(chunk, node->local_size, me, width);
    unsigned char *staged = node_staging(node, me, chunk->turn) + offset;
    unsigned char *result = node->streaming ? node->own_result : staged;
    double postscale = args->postscale != NULL ? *args->postscale : 1.0;
    /* On one host the reduction applies the postscale; across hosts it must wait for the sum
     * over every host. */
    reduce_slice(node, args, buffer, chunk, offset, bytes, width,
                 node->cross == NULL ? postscale : 1.0, result);
    if (node->cross != NULL) {
        chorus_status status = hierarchical_slice_across_hosts(node, args, result, bytes, postscale);
        if (status != CHORUS_OK)
            return status;
    }
    if (node->streaming)
        node_stage_copy(node, staged, result, bytes);
    if (bytes != 0)
        pieces_scatter(buffer->pieces, buffer->count, chunk->start + offset, result, bytes);
    return CHORUS_OK;
}

static void copy_out(const struct node_segment *node, const struct buffer *buffer,
                     const struct chunk *chunk, size_t width)
{
    for (int owner = 0; owner < node->local_size; owner++) {
        size_t offset = slice_offset(chunk, node->local_size, owner, width);
        size_t bytes = slice_bytes(chunk, node->local_size, owner, width);
        if (owner != node->local_rank && bytes != 0)
            pieces_scatter(buffer->pieces, buffer->count, chunk->start + offset,
                           node_staging(node, owner, chunk->turn) + offset, bytes);
    }
}

chorus_status allreduce_hierarchical(const struct allreduce_args *args)
{
    struct node_segment *node = args->node;
    if (node == NULL) /* no shared segment on this host */
        return CHORUS_ERR_NOT_SUPPORTED;
    size_t width = chorus_dtype_size(args->dtype);
    size_t chunks = chunk_count(args->count, width, node->chunk_bytes);
    if (chunks == 0)
        return CHORUS_OK;
    struct allreduce_piece whole = {args->buffer, args->buffer, 0, args->count * width};
    struct buffer buffer = {args->pieces ? args->pieces : &whole,
                            args->pieces ? args->piece_count : 1};
    size_t turn = node_segment_take_turns(node, chunks, node->staging_areas);
    struct chunk current = chunk_at(args->count, chunks, 0, turn, width);
    stage(node, &buffer, &current, width);
    node_segment_barrier(node);
    for (size_t k = 0; k < chunks; k++) {
        chorus_status status = reduce_own_slice(node, args, &buffer, &current, width);
        if (status != CHORUS_OK)
            return status;
        struct chunk next = {0};
        if (k + 1 < chunks) {
            next = chunk_at(args->count, chunks, k + 1, turn + k + 1, width);
            stage(node, &buffer, &next, width);
        }
        node_segment_barrier(node);
        copy_out(node, &buffer, &current, width);
        current = next;
    }
    return CHORUS_OK;
}
