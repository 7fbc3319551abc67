/*
 * allreduce_rabenseifner.c — Rabenseifner's allreduce: a reduce-scatter by recursive halving
 * followed by an allgather by recursive doubling. A number of ranks that is not a power of two
 * is folded first (fold.h).
 *
 * Reduce-scatter: in round k (distance p/2, p/4, ..., 1) each participant splits the range it
 * is responsible for in two, sends the half its partner keeps and reduces the half it keeps with
 * the partner's copy. After log2(p) rounds each participant owns 1/p of the buffer, reduced.
 * The allgather replays the rounds backwards, exchanging owned ranges until everyone has all.
 *
 * Cost: 2 log2(p) steps; each rank sends 2(p-1)/p of the buffer, like the ring, with
 * logarithmic instead of linear latency; good for medium messages.
 *
 * Example, p = 4, buffer [0, 8): round 0 pairs 0-2 and 1-3; ranks 0 and 1 keep [0,4), ranks 2
 * and 3 keep [4,8). Round 1 pairs 0-1 and 2-3; rank 0 keeps [0,2), rank 1 [2,4), rank 2 [4,6),
 * rank 3 [6,8). The allgather exchanges those quarters with partner 1 apart, then the halves
 * with partner 2 apart.
 */
#include "algorithms.h"
#include "fold.h"
#include "reduce.h"

struct halving_level {
    size_t low, high; /* the range both partners shared before this round */
    size_t middle;
    int partner;
    bool keeps_upper;
};

chorus_status allreduce_rabenseifner(const struct allreduce_args *args)
{
    if (args->pieces != NULL) /* only the hierarchical algorithm reads a list of pieces */
        return CHORUS_ERR_NOT_SUPPORTED;
    struct transport *transport = args->transport;
    if (transport->nranks == 1 || args->count == 0) {
        if (args->postscale != NULL)
            reduce_scale_buffer(args->buffer, args->count, args->dtype, *args->postscale);
        return CHORUS_OK;
    }
    size_t element_size = chorus_dtype_size(args->dtype);
    char *buffer = args->buffer;
    void *scratch = NULL;
    struct fold fold;
    chorus_status status = fold_begin(args, &fold, &scratch);
    if (status != CHORUS_OK)
        return status;
    char *incoming = scratch;
    if (fold.virtual_rank >= 0) {
        struct halving_level levels[32];
        size_t level_count = 0;
        size_t low = 0, high = args->count;
        for (int mask = fold.power_of_two / 2; mask >= 1; mask >>= 1) {
            struct halving_level *level = &levels[level_count++];
            level->low = low;
            level->high = high;
            level->middle = low + (high - low) / 2;
            level->partner = fold_real_rank(&fold, fold.virtual_rank ^ mask);
            level->keeps_upper = (fold.virtual_rank & mask) != 0;
            size_t keep_low = level->keeps_upper ? level->middle : low;
            size_t keep_high = level->keeps_upper ? high : level->middle;
            size_t give_low = level->keeps_upper ? low : level->middle;
            size_t give_high = level->keeps_upper ? level->middle : high;
            status = transport_sendrecv(transport, buffer + give_low * element_size,
                                        (give_high - give_low) * element_size, level->partner,
                                        incoming, (keep_high - keep_low) * element_size,
                                        level->partner, TAG_EXCHANGE);
            if (status != CHORUS_OK)
                return status;
            reduce_into(buffer + keep_low * element_size, incoming, keep_high - keep_low,
                        args->dtype, args->op);
            low = keep_low;
            high = keep_high;
        }
        if (args->postscale != NULL) /* the range this rank owns is final */
            reduce_scale_buffer(buffer + low * element_size, high - low, args->dtype, *args->postscale);
        while (level_count > 0) {
            struct halving_level *level = &levels[--level_count];
            size_t other_low = level->keeps_upper ? level->low : level->middle;
            size_t other_high = level->keeps_upper ? level->middle : level->high;
            status = transport_sendrecv(transport, buffer + low * element_size,
                                        (high - low) * element_size, level->partner,
                                        buffer + other_low * element_size,
                                        (other_high - other_low) * element_size, level->partner,
                                        TAG_EXCHANGE);
            if (status != CHORUS_OK)
                return status;
            low = level->low;
            high = level->high;
        }
    }
    return fold_out(args, &fold);
}
