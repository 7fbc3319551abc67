/*
 * allreduce_topk.c — allreduce of float32 sums sparsified to each rank's k values of largest
 * magnitude (the TOPK compression):
 *
 *   1. Every rank adds its residual to its values (error feedback, where the caller keeps one),
 *      picks the k of largest magnitude (topk.h: ties to the lower index, nan the largest) as
 *      (uint32 index, float32 value) pairs in ascending index order, and keeps the rest as its
 *      new residual.
 *   2. A ring allgather of the pairs: every rank receives every other rank's k pairs.
 *   3. Every rank zeroes its buffer and, index by index in ascending order, adds the values
 *      sent for that index in double in rank order (a merge of the p sorted lists through a
 *      heap), multiplies by the postscale and rounds once to float32: every rank computes the
 *      same operations on the same bytes, so that all end with the same bits.
 *
 * Error: the result is the exact sum of the values the ranks sent (rounded once to float32);
 * everything else is in the ranks' residuals, or lost where the caller keeps none.
 *
 * Cost: p - 1 steps; each rank sends (p - 1) * k * 8 bytes, where the ring allreduce sends
 * 2 (p - 1)/p * count * 4. Where that is no less (p * k >= count, with p > 1: the ranks' values
 * could cover the whole tensor), the pairs would cost more than the tensor: the rank instead
 * zeroes its values but the k it picked and runs the ordinary ring allreduce on that sparsified
 * tensor (float32 sums in the ring's order), which picks and keeps the same values. Scratch:
 * the p * k gathered pairs, and a heap of p entries.
 *
 * Example, p = 3, count = 10, k = 2 (ratio 0.2; 3 * 2 < 10, so sparse): rank 0 picks
 * {(1, 5), (7, -4)}, rank 1 {(1, 2), (3, 9)}, rank 2 {(7, 4), (8, -6)}; after the allgather each
 * rank writes index 1: 5 + 2 = 7, index 3: 9, index 7: -4 + 4 = 0, index 8: -6, and 0 elsewhere.
 */
#include "algorithms.h"

#include "../compression/topk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool allreduce_topk_is_sparse(size_t count, size_t k, int nranks)
{
    return nranks == 1 || (size_t)nranks * k < count;
}

/* The next pair of one rank's list to merge. */
struct topk_head {
    uint32_t index;
    int rank;
    size_t at;
};

static bool topk_head_before(const struct topk_head *a, const struct topk_head *b)
{
    return a->index != b->index ? a->index < b->index : a->rank < b->rank;
}

static void topk_sift_down(struct topk_head *heap, size_t size, size_t at)
{
    for (;;) {
        size_t first = at, left = 2 * at + 1, right = left + 1;
        if (left < size && topk_head_before(&heap[left], &heap[first]))
            first = left;
        if (right < size && topk_head_before(&heap[right], &heap[first]))
            first = right;
        if (first == at)
            return;
        struct topk_head swap = heap[at];
        heap[at] = heap[first];
        heap[first] = swap;
        at = first;
    }
}

/* Step 3: `values` (count) becomes the sums of the p lists of k pairs in `gathered`, rank r's at
 * r * k, times `factor`. CHORUS_ERR_INTERNAL for an index outside the tensor. */
static chorus_status topk_merge(float *values, size_t count, const struct topk_pair *gathered,
                                size_t k, int p, double factor, struct topk_head *heap, char *error,
                                size_t error_size)
{
    memset(values, 0, count * sizeof *values);
    size_t size = 0;
    for (int rank = 0; rank < p; rank++)
        heap[size++] = (struct topk_head){.index = gathered[(size_t)rank * k].index, .rank = rank};
    for (size_t at = size / 2; at-- > 0;)
        topk_sift_down(heap, size, at);
    uint64_t current = UINT64_MAX; /* no index yet */
    double sum = 0.0;
    while (size > 0) {
        struct topk_head *top = &heap[0];
        const struct topk_pair *pair = &gathered[(size_t)top->rank * k + top->at];
        if (pair->index >= count) {
            snprintf(error, error_size, "top-k pair of rank %d names index %u of %zu", top->rank,
                     pair->index, count);
            return CHORUS_ERR_INTERNAL;
        }
        if (pair->index != current) {
            if (current != UINT64_MAX)
                values[current] = (float)(sum * factor);
            current = pair->index;
            sum = 0.0;
        }
        sum += pair->value;
        if (++top->at == k)
            heap[0] = heap[--size];
        else
            top->index = gathered[(size_t)top->rank * k + top->at].index;
        topk_sift_down(heap, size, 0);
    }
    if (current != UINT64_MAX)
        values[current] = (float)(sum * factor);
    return CHORUS_OK;
}

chorus_status allreduce_topk(const struct allreduce_args *args)
{
    if (args->pieces != NULL || args->topk == NULL || args->dtype != CHORUS_FLOAT32)
        return CHORUS_ERR_NOT_SUPPORTED;
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t count = args->count, k = args->topk->k;
    float *values = args->buffer;
    if (count == 0)
        return CHORUS_OK;
    chorus_status status = CHORUS_OK;
    size_t *block_bytes = calloc((size_t)p, sizeof *block_bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    struct topk_head *heap = calloc((size_t)p, sizeof *heap);
    struct topk_pair *gathered = scratch_reserve(args->scratch, (size_t)p * k * sizeof *gathered);
    if (block_bytes == NULL || offsets == NULL || heap == NULL || gathered == NULL ||
        !topk_compress(gathered + (size_t)r * k, values, args->error_feedback, count, k)) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if (!allreduce_topk_is_sparse(count, k, p)) {
        const struct topk_pair *mine = gathered + (size_t)r * k;
        memset(values, 0, count * sizeof *values);
        for (size_t i = 0; i < k; i++)
            values[mine[i].index] = mine[i].value;
        struct allreduce_args dense = *args;
        dense.topk = NULL;
        status = allreduce_ring(&dense);
        goto out;
    }
    for (int rank = 0; rank < p; rank++) {
        block_bytes[rank] = k * sizeof *gathered;
        offsets[rank] = (size_t)rank * k * sizeof *gathered;
    }
    struct allgather_args gather = {.transport = transport,
                                    .scratch = args->scratch,
                                    .send = gathered + (size_t)r * k,
                                    .recv = gathered,
                                    .block_bytes = block_bytes,
                                    .offsets = offsets};
    status = allgather_ring(&gather);
    if (status != CHORUS_OK)
        goto out;
    status =
        topk_merge(values, count, gathered, k, p, args->postscale != NULL ? *args->postscale : 1.0,
                   heap, transport->error, sizeof transport->error);
out:
    free(block_bytes);
    free(offsets);
    free(heap);
    return status;
}
