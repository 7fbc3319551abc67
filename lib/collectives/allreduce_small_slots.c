/*
 * allreduce_small_slots.c — allreduce of a few bytes to a few KiB among the ranks of one host
 * through their small-message slots (small_segment.h), for the executor: one phase, in which
 * every rank publishes its contribution beside its flag and reduces all of them itself, in rank
 * order (small_allreduce.c). Where the hierarchical algorithm stages slices and waits at two
 * barriers, this waits at one, and a contribution of up to 32 bytes moves with its flag.
 *
 * Cost: one phase; each rank reads every other rank's buffer and combines p contributions, so
 * it is for the sizes where a phase's latency, not bandwidth, sets the time. Example at 3 ranks:
 * every rank computes ((x_0 + x_1) + x_2) * postscale, the same bits on all three.
 *
 * Constraints: every rank on one host with the slots (it declines otherwise, alike on every
 * rank), a buffer (not a list of pieces) of at most the slots' capacity. A rank that does not
 * arrive is waited for as the transport waits (its interrupt check: the timeout, another rank's
 * notice); the phases are then out of step, which the caller treats as fatal.
 */
#include "algorithms.h"
#include "small_collectives.h"

#include <stdio.h>

/* The transport's interrupt check, as the slots' wait asks it. */
struct small_wait {
    struct transport *transport;
    chorus_status status;
};

static bool interrupted(void *context)
{
    struct small_wait *wait = context;
    struct transport *transport = wait->transport;
    if (transport->interrupted == NULL)
        return false;
    wait->status = transport->interrupted(transport->interrupt_context, transport->error,
                                          sizeof transport->error);
    return wait->status != CHORUS_OK;
}

chorus_status allreduce_small_slots(const struct allreduce_args *args)
{
    struct small_segment *slots = args->small;
    size_t bytes = args->count * chorus_dtype_size(args->dtype);
    if (slots == NULL || args->pieces != NULL || bytes > slots->capacity ||
        slots->local_size != args->transport->nranks)
        return CHORUS_ERR_NOT_SUPPORTED;
    double factor = args->postscale != NULL ? *args->postscale : 1.0;
    small_allreduce_stage(slots, args->buffer, args->count, args->dtype, 1.0);
    small_publish(slots);
    struct small_wait wait = {.transport = args->transport, .status = CHORUS_OK};
    if (small_wait_all(slots, 0, interrupted, &wait) != SMALL_WAIT_DONE)
        return wait.status != CHORUS_OK ? wait.status : CHORUS_ERR_INTERNAL;
    small_allreduce_take(slots, args->buffer, args->count, args->dtype, args->op, factor);
    return CHORUS_OK;
}
