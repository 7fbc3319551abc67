/*
 * fusion_plan.h — which agreed responses travel together in one fusion buffer. The plan is a
 * pure function of the response list and the fusion threshold, so every rank computes the same
 * plan from the same responses and no extra agreement is needed.
 */
#ifndef CHORUS_FUSION_PLAN_H
#define CHORUS_FUSION_PLAN_H

#include "../core/request.h"

/* How many partly filled batches a tensor may look back to, so that a tensor of another dtype
 * between two float32 tensors does not split their fusion. */
#define FUSION_LOOKAHEAD 4

struct fusion_batch {
    size_t first; /* index into fusion_plan.order */
    size_t count;
    size_t bytes;
};

struct fusion_plan {
    size_t *order; /* response indices, batch after batch */
    struct fusion_batch *batches;
    size_t batch_count;
    /* A plan of one response (as often as not) lies here, not in an allocation: the plan must
     * then stay where it was built. */
    struct fusion_batch lone_batch;
    size_t lone_order;
};

/* Groups `responses` into batches in the order every rank executes them, while a batch's bytes
 * stay within `threshold`, in the same kind of memory (host or GPU): allreduces with the same
 * dtype, op, scale factors, compression and contributors; broadcasts from the same root;
 * allgathers. Everything else, and a tensor larger than
 * `tensor_limit` (copying it in and out of the fusion buffer costs more than the latency fusion
 * saves), is a batch of its own. A threshold of 0 turns fusion off. Returns false when out of memory.
 * `plan` must not move until fusion_plan_free. */
bool fusion_plan_build(const struct wire_response *responses, size_t count, size_t threshold,
                       size_t tensor_limit, struct fusion_plan *plan);
void fusion_plan_free(struct fusion_plan *plan);

#endif
