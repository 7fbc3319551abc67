/*
 * allreduce_ring.c — ring allreduce: a reduce-scatter followed by an allgather around the ring
 * 0 -> 1 -> ... -> p-1 -> 0.
 *
 * The buffer is cut into p chunks. In reduce-scatter step s (0 .. p-2) rank r sends chunk
 * (r - s) mod p to its right neighbour and adds the chunk (r - s - 1) mod p coming from its left
 * neighbour into its own copy; after p-1 steps rank r holds chunk (r + 1) mod p fully reduced.
 * The allgather then passes the reduced chunks around the ring in p-1 more steps.
 *
 * Cost: 2(p-1) steps; each rank sends and receives 2(p-1)/p of the buffer, which is optimal.
 * Each chunk is cut into segments: a segment is forwarded as soon as it is reduced, so that
 * reducing one segment overlaps receiving the next and the ring runs as a pipeline.
 * Works for any p, any count (chunks may be empty when count < p).
 *
 * Example, p = 3, chunks A B C, rank r starts with A_r B_r C_r:
 *   step 0: rank 0 sends A0 to 1, rank 1 sends B1 to 2, rank 2 sends C2 to 0;
 *           rank 0 holds C0+C2, rank 1 A1+A0, rank 2 B2+B1.
 *   step 1: rank 0 sends C0+C2 to 1, ...; rank 1 ends with C complete, rank 2 with A, rank 0
 *           with B.
 *   allgather: two more steps pass A, B and C to everyone.
 */
#include "algorithms.h"
#include "reduce.h"

#include <stdlib.h>

/* Segment size: small enough that a segment stays in L2 while it is received and reduced,
 * large enough that per-message overhead is amortized. */
#define RING_SEGMENT_BYTES ((size_t)256 << 10)

struct ring_layout {
    size_t count;
    int nranks;
    size_t element_size;
    size_t segment_elements;
};

static size_t chunk_start(const struct ring_layout *layout, int chunk)
{
    return part_start(layout->count, (size_t)layout->nranks, (size_t)chunk);
}

static size_t chunk_length(const struct ring_layout *layout, int chunk)
{
    return part_length(layout->count, (size_t)layout->nranks, (size_t)chunk);
}

static size_t segment_count(const struct ring_layout *layout, int chunk)
{
    size_t length = chunk_length(layout, chunk);
    return (length + layout->segment_elements - 1) / layout->segment_elements;
}

static size_t segment_length(const struct ring_layout *layout, int chunk, size_t segment)
{
    size_t length = chunk_length(layout, chunk);
    size_t start = segment * layout->segment_elements;
    size_t remaining = length - start;
    return remaining < layout->segment_elements ? remaining : layout->segment_elements;
}

/* Byte offset of a segment inside the whole buffer. */
static size_t segment_offset(const struct ring_layout *layout, int chunk, size_t segment)
{
    return (chunk_start(layout, chunk) + segment * layout->segment_elements) *
           layout->element_size;
}

static chorus_status send_segments(struct transport *transport, const struct ring_layout *layout,
                                   char *buffer, int chunk, int peer, int tag,
                                   struct transport_request *requests)
{
    size_t segments = segment_count(layout, chunk);
    for (size_t j = 0; j < segments; j++) {
        chorus_status status = transport_isend(
            transport, buffer + segment_offset(layout, chunk, j),
            segment_length(layout, chunk, j) * layout->element_size, peer, tag, &requests[j]);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}

/* The end of a step: waits for the previous step's sends, then the sends posted during this
 * step become the ones to wait for next. */
static chorus_status finish_step(struct transport *transport, struct transport_request **sends,
                                 struct transport_request **next_sends, size_t *sends_pending,
                                 size_t posted)
{
    chorus_status status = transport_waitall(transport, *sends_pending, *sends);
    struct transport_request *swap = *sends;
    *sends = *next_sends;
    *next_sends = swap;
    *sends_pending = posted;
    return status;
}

chorus_status allreduce_ring(const struct allreduce_args *args)
{
    if (args->pieces != NULL) /* only the hierarchical algorithm reads a list of pieces */
        return CHORUS_ERR_NOT_SUPPORTED;
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    if (p == 1 || args->count == 0) {
        if (args->postscale != NULL)
            reduce_scale_buffer(args->buffer, args->count, args->dtype, *args->postscale);
        return CHORUS_OK;
    }
    struct ring_layout layout = {
        .count = args->count,
        .nranks = p,
        .element_size = chorus_dtype_size(args->dtype),
    };
    layout.segment_elements = RING_SEGMENT_BYTES / layout.element_size;
    size_t max_segments = segment_count(&layout, 0);
    char *buffer = args->buffer;
    char *incoming = scratch_reserve(args->scratch, chunk_length(&layout, 0) *
                                                        layout.element_size);
    struct transport_request *requests = calloc(3 * max_segments + 3, sizeof *requests);
    chorus_status status = CHORUS_OK;
    if (incoming == NULL || requests == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    struct transport_request *receives = requests;
    struct transport_request *sends = requests + max_segments + 1;
    struct transport_request *next_sends = requests + 2 * (max_segments + 1);
    int right = (r + 1) % p, left = (r - 1 + p) % p;
    size_t sends_pending = segment_count(&layout, r);
    status = send_segments(transport, &layout, buffer, r, right, TAG_RING_REDUCE_SCATTER, sends);
    if (status != CHORUS_OK)
        goto out;

    /* Reduce-scatter, forwarding each reduced segment at once. The last step's result is this
     * rank's finished chunk, which starts the allgather. */
    for (int step = 0; step < p - 1; step++) {
        int chunk = (r - step - 1 + 2 * p) % p;
        size_t segments = segment_count(&layout, chunk);
        for (size_t j = 0; j < segments; j++) {
            status = transport_irecv(
                transport, incoming + j * layout.segment_elements * layout.element_size,
                segment_length(&layout, chunk, j) * layout.element_size, left,
                TAG_RING_REDUCE_SCATTER, &receives[j]);
            if (status != CHORUS_OK)
                goto out;
        }
        int forward_tag = step < p - 2 ? TAG_RING_REDUCE_SCATTER : TAG_RING_ALLGATHER;
        for (size_t j = 0; j < segments; j++) {
            status = transport_waitall(transport, 1, &receives[j]);
            if (status != CHORUS_OK)
                goto out;
            char *target = buffer + segment_offset(&layout, chunk, j);
            size_t length = segment_length(&layout, chunk, j);
            reduce_into(target, incoming + j * layout.segment_elements * layout.element_size,
                        length, args->dtype, args->op);
            if (step == p - 2 && args->postscale != NULL) /* this rank's finished chunk */
                reduce_scale_buffer(target, length, args->dtype, *args->postscale);
            status = transport_isend(transport, target, length * layout.element_size, right,
                                     forward_tag, &next_sends[j]);
            if (status != CHORUS_OK)
                goto out;
        }
        status = finish_step(transport, &sends, &next_sends, &sends_pending, segments);
        if (status != CHORUS_OK)
            goto out;
    }

    /* Allgather: receive each finished chunk straight into place and pass it on. */
    for (int step = 0; step < p - 1; step++) {
        int chunk = (r - step + p) % p;
        size_t segments = segment_count(&layout, chunk);
        for (size_t j = 0; j < segments; j++) {
            status = transport_irecv(transport, buffer + segment_offset(&layout, chunk, j),
                                     segment_length(&layout, chunk, j) * layout.element_size,
                                     left, TAG_RING_ALLGATHER, &receives[j]);
            if (status != CHORUS_OK)
                goto out;
        }
        bool forward = step < p - 2;
        for (size_t j = 0; j < segments; j++) {
            status = transport_waitall(transport, 1, &receives[j]);
            if (status != CHORUS_OK)
                goto out;
            if (forward) {
                status = transport_isend(transport, buffer + segment_offset(&layout, chunk, j),
                                         segment_length(&layout, chunk, j) * layout.element_size,
                                         right, TAG_RING_ALLGATHER, &next_sends[j]);
                if (status != CHORUS_OK)
                    goto out;
            }
        }
        status = finish_step(transport, &sends, &next_sends, &sends_pending,
                             forward ? segments : 0);
        if (status != CHORUS_OK)
            goto out;
    }
out:
    free(requests);
    return status;
}
