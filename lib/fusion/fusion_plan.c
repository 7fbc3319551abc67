/*
 * fusion_plan.c — see fusion_plan.h. Example, threshold 1 KiB, responses
 *   0: a f32 400 B, 1: b i32 100 B, 2: c f32 400 B, 3: d f32 400 B, 4: e broadcast
 * gives batches {a, c} (800 B; d would pass 1 KiB), {b}, {d}, {e}, executed in the order of
 * their first members: {a, c}, {b}, {d}, {e}. A second broadcast from e's root would join e.
 */
#include "fusion_plan.h"

#include <stdlib.h>
#include <string.h>

/* Allreduces fuse in host memory or in the GPU's fusion buffer; broadcasts and allgathers
 * through the host fusion buffer, or on a GPU as one NCCL group. */
static bool fusible(const struct wire_response *response)
{
    return response->type == RESPONSE_EXECUTE;
}

/* Host tensors fuse with host tensors, GPU tensors with GPU tensors; every rank puts its GPU
 * tensors on its own one device, so the kind of memory is what must match. */
static bool same_memory(const struct wire_response *a, const struct wire_response *b)
{
    return (a->request.device == DEVICE_HOST) == (b->request.device == DEVICE_HOST);
}

/* Whether two fusible responses can share a batch: allreduces and reducescatters with the same
 * reduction, broadcasts from the same root, allgathers (of any dtypes and shapes). */
static bool same_batch(const struct wire_response *a, const struct wire_response *b)
{
    if (a->request.collective != b->request.collective || !same_memory(a, b))
        return false;
    switch ((chorus_collective)a->request.collective) {
    case CHORUS_ALLREDUCE:
        /* Adasum combines whole tensors: each runs alone. */
        return a->request.op != CHORUS_ADASUM && a->request.dtype == b->request.dtype &&
               a->request.op == b->request.op &&
               a->request.prescale == b->request.prescale &&
               a->request.postscale == b->request.postscale &&
               a->request.compression == b->request.compression &&
               a->contributors == b->contributors;
    case CHORUS_BROADCAST:
        return a->request.root == b->request.root;
    case CHORUS_ALLGATHER:
        return true;
    case CHORUS_REDUCESCATTER:
        return a->request.dtype == b->request.dtype &&
               a->request.op == b->request.op && a->request.prescale == b->request.prescale &&
               a->request.postscale == b->request.postscale &&
               a->contributors == b->contributors;
    case CHORUS_ALLTOALL:
        return false; /* each runs alone: its rows' destinations are its own */
    }
    return false;
}

bool fusion_plan_build(const struct wire_response *responses, size_t count, size_t threshold,
                       size_t tensor_limit, struct fusion_plan *plan)
{
    size_t largest_fused = tensor_limit < threshold ? tensor_limit : threshold;
    memset(plan, 0, sizeof *plan);
    if (count <= 1) {
        plan->batches = &plan->lone_batch;
        plan->order = &plan->lone_order;
        plan->batch_count = count;
        if (count == 1)
            plan->lone_batch = (struct fusion_batch){
                .first = 0, .count = 1, .bytes = request_batch_member_bytes(&responses[0])};
        return true;
    }
    /* One allocation for the plan's arrays and the working ones (it runs for every batch): the
     * batches first, for their alignment. */
    size_t slots = count ? count : 1;
    struct fusion_batch *batches_memory = calloc(1, slots * (sizeof *plan->batches +
                                                             3 * sizeof(size_t)));
    if (batches_memory == NULL)
        return false;
    plan->batches = batches_memory;
    plan->order = (size_t *)(batches_memory + slots);
    size_t *batch_of = plan->order + slots;
    size_t *leader = batch_of + slots; /* first response of a batch */
    size_t batches = 0;
    for (size_t i = 0; i < count; i++) {
        size_t bytes = request_batch_member_bytes(&responses[i]);
        size_t chosen = batches;
        if (fusible(&responses[i]) && bytes <= largest_fused) {
            size_t oldest = batches > FUSION_LOOKAHEAD ? batches - FUSION_LOOKAHEAD : 0;
            for (size_t b = oldest; b < batches && chosen == batches; b++) {
                const struct wire_response *first = &responses[leader[b]];
                if (fusible(first) && same_batch(first, &responses[i]) &&
                    plan->batches[b].bytes + bytes <= threshold &&
                    request_batch_member_bytes(first) <= largest_fused)
                    chosen = b;
            }
        }
        if (chosen == batches) {
            leader[batches] = i;
            plan->batches[batches].bytes = 0;
            batches++;
        }
        batch_of[i] = chosen;
        plan->batches[chosen].bytes += bytes;
        plan->batches[chosen].count++;
    }
    size_t position = 0;
    for (size_t b = 0; b < batches; b++) {
        plan->batches[b].first = position;
        position += plan->batches[b].count;
        plan->batches[b].count = 0;
    }
    for (size_t i = 0; i < count; i++) {
        struct fusion_batch *batch = &plan->batches[batch_of[i]];
        plan->order[batch->first + batch->count++] = i;
    }
    plan->batch_count = batches;
    return true;
}

void fusion_plan_free(struct fusion_plan *plan)
{
    if (plan->batches != &plan->lone_batch)
        free(plan->batches); /* the order is in the same allocation */
    memset(plan, 0, sizeof *plan);
}
