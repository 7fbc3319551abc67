/*
 * reducescatter_recursive_halving.c — reducescatter of blocks of any size by recursive halving,
 * the first half of Rabenseifner's allreduce: in round k (distance p/2, p/4, ..., 1) each rank
 * splits the ranks whose blocks it still carries in two, sends its partner the partial sums of
 * the half the partner keeps and adds the partner's partial sums of the half it keeps. After
 * log2(p) rounds each rank carries its own block, complete.
 *
 * Halves are cut between blocks, not in the middle of the elements, so that every rank ends
 * with exactly its block however uneven the blocks are. A number of ranks that is not a power of
 * two is folded first as in fold.h: rank 2i sends its whole input to rank 2i+1, which carries
 * both their blocks through the rounds and sends rank 2i its block at the end.
 *
 * Cost: log2(p) steps (the ring takes p - 1); each rank sends about (p-1)/p of the tensor, like
 * the ring, when the blocks are even. For small and medium tensors across hosts, where each step
 * costs a network latency.
 *
 * Example, p = 4, blocks A B C D: round 0 pairs 0-2 and 1-3; ranks 0 and 1 keep A B (rank 0
 * sends C D to rank 2), ranks 2 and 3 keep C D. Round 1 pairs 0-1 and 2-3; rank 0 keeps A,
 * rank 1 B, rank 2 C, rank 3 D.
 */
#include "algorithms.h"
#include "fold.h"
#include "reduce.h"

#include <string.h>

/* The first block that participant `virtual_rank` carries (p: past the last): a folded pair
 * carries two, in rank order. */
static int first_block(const struct fold *fold, int virtual_rank, int p)
{
    if (virtual_rank >= fold->power_of_two)
        return p;
    return virtual_rank < fold->remainder ? 2 * virtual_rank : virtual_rank + fold->remainder;
}

/* Where participant `virtual_rank`'s blocks start, in elements. */
static size_t first_element(const struct reducescatter_args *args, const struct fold *fold,
                            int virtual_rank, size_t total)
{
    int block = first_block(fold, virtual_rank, args->transport->nranks);
    return block == args->transport->nranks ? total : args->offsets[block];
}

chorus_status reducescatter_recursive_halving(const struct reducescatter_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    if (p == 1)
        return reducescatter_ring(args); /* nothing to exchange: the ring's copy */
    size_t element = chorus_dtype_size(args->dtype);
    size_t total = args->offsets[p - 1] + args->block_counts[p - 1];
    char *work = scratch_reserve(args->scratch, 2 * total * element + 1);
    if (work == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    char *incoming = work + total * element;
    struct fold fold;
    fold_plan(r, p, &fold);
    struct transport_request requests[2];
    chorus_status status = CHORUS_OK;
    if (fold.virtual_rank < 0) { /* folded: hand over the input, get the block back */
        status = transport_isend(transport, args->send, total * element, r + 1, TAG_FOLD,
                                 &requests[0]);
        if (status != CHORUS_OK)
            return status;
        status = transport_irecv(transport, args->recv, args->block_counts[r] * element, r + 1,
                                 TAG_UNFOLD, &requests[1]);
        if (status != CHORUS_OK) {
            transport_cancel(transport, 1, requests);
            return status;
        }
        return transport_waitall(transport, 2, requests);
    }
    /* The partial sums this rank carries: its input until the first addition. */
    const char *current = args->send;
    if (r < 2 * fold.remainder) {
        status = transport_irecv(transport, incoming, total * element, r - 1, TAG_FOLD,
                                 &requests[0]);
        if (status == CHORUS_OK)
            status = transport_waitall(transport, 1, requests);
        if (status != CHORUS_OK)
            return status;
        reduce_pair(work, args->send, incoming, total, args->dtype, args->op);
        current = work;
    }
    int low = 0, high = fold.power_of_two, v = fold.virtual_rank;
    for (int mask = fold.power_of_two / 2; mask >= 1; mask >>= 1) {
        int middle = low + (high - low) / 2;
        bool keeps_upper = (v & mask) != 0;
        int keep_low = keeps_upper ? middle : low, keep_high = keeps_upper ? high : middle;
        int give_low = keeps_upper ? low : middle, give_high = keeps_upper ? middle : high;
        size_t keep_start = first_element(args, &fold, keep_low, total);
        size_t keep_count = first_element(args, &fold, keep_high, total) - keep_start;
        size_t give_start = first_element(args, &fold, give_low, total);
        size_t give_count = first_element(args, &fold, give_high, total) - give_start;
        status = transport_sendrecv(transport, current + give_start * element,
                                    give_count * element, fold_real_rank(&fold, v ^ mask),
                                    incoming, keep_count * element,
                                    fold_real_rank(&fold, v ^ mask), TAG_REDUCESCATTER);
        if (status != CHORUS_OK)
            return status;
        char *kept = work + keep_start * element;
        if (current == work)
            reduce_into(kept, incoming, keep_count, args->dtype, args->op);
        else
            reduce_pair(kept, current + keep_start * element, incoming, keep_count, args->dtype,
                        args->op);
        current = work;
        low = keep_low;
        high = keep_high;
    }
    /* This rank's block, and the folded partner's before it. */
    size_t own = args->offsets[r], own_count = args->block_counts[r];
    size_t carried_start = first_element(args, &fold, v, total);
    size_t carried_count = own + own_count - carried_start;
    if (args->factor != 1.0)
        reduce_scale_buffer(work + carried_start * element, carried_count, args->dtype, args->factor);
    if (r < 2 * fold.remainder) {
        status = transport_isend(transport, work + args->offsets[r - 1] * element,
                                 args->block_counts[r - 1] * element, r - 1, TAG_UNFOLD,
                                 &requests[0]);
        if (status == CHORUS_OK)
            status = transport_waitall(transport, 1, requests);
    }
    if (own_count > 0)
        memcpy(args->recv, work + own * element, own_count * element);
    return status;
}
