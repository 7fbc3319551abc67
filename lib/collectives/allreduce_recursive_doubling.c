/*
 * allreduce_recursive_doubling.c — recursive doubling: in round k every participant exchanges
 * its whole buffer with the participant whose index differs in bit k, and both reduce. After
 * log2(p) rounds everyone holds the full reduction. A number of ranks that is not a power of two
 * is folded first (fold.h).
 *
 * Cost: ceil(log2 p) (+2 when folded) steps, each moving the whole buffer: latency-optimal, so
 * it is the choice for small messages; for large ones it sends log2(p) times the data.
 * Every rank reduces the same pairs of partial results, and the operators are commutative, so
 * every rank ends with bitwise identical results.
 *
 * Example, p = 4: round 0 pairs 0-1 and 2-3 (each holds the sum of its pair), round 1 pairs 0-2
 * and 1-3 (each holds the sum of all four).
 */
#include "algorithms.h"
#include "fold.h"
#include "reduce.h"

chorus_status allreduce_recursive_doubling(const struct allreduce_args *args)
{
    if (args->pieces != NULL) /* only the hierarchical algorithm reads a list of pieces */
        return CHORUS_ERR_NOT_SUPPORTED;
    struct transport *transport = args->transport;
    if (transport->nranks == 1 || args->count == 0) {
        if (args->postscale != NULL)
            reduce_scale_buffer(args->buffer, args->count, args->dtype, *args->postscale);
        return CHORUS_OK;
    }
    size_t bytes = args->count * chorus_dtype_size(args->dtype);
    void *incoming = NULL;
    struct fold fold;
    chorus_status status = fold_begin(args, &fold, &incoming);
    if (status != CHORUS_OK)
        return status;
    if (fold.virtual_rank >= 0) {
        for (int mask = 1; mask < fold.power_of_two; mask <<= 1) {
            int partner = fold_real_rank(&fold, fold.virtual_rank ^ mask);
            status = transport_sendrecv(transport, args->buffer, bytes, partner, incoming, bytes,
                                        partner, TAG_EXCHANGE);
            if (status != CHORUS_OK)
                return status;
            reduce_into(args->buffer, incoming, args->count, args->dtype, args->op);
        }
        /* Every participant holds the same full result and scales it the same way. */
        if (args->postscale != NULL)
            reduce_scale_buffer(args->buffer, args->count, args->dtype, *args->postscale);
    }
    return fold_out(args, &fold);
}
