/*
 * reducescatter_ring.c — ring reducescatter of blocks of any size. In step s (0 .. p-2) rank r
 * sends its partial sum of block (r - s - 1) mod p to its right neighbour, receives the partial
 * sum of block (r - s - 2) mod p from its left one and adds its own input's part of that block.
 * After p-1 steps the block received last is (r - p) mod p = r, complete: rank r's result.
 *
 * Cost: p - 1 steps; each rank sends and receives (p-1)/p of the tensor, which is optimal. The
 * input is only read: partial sums live in two scratch blocks that swap roles every step, and
 * the last addition (with the scale factor in the same pass) writes the output.
 *
 * Example, p = 3, blocks A B C, rank r holds A_r B_r C_r:
 *   step 0: rank 0 sends C0 to 1, rank 1 sends A1 to 2, rank 2 sends B2 to 0;
 *           rank 0 holds B2+B0, rank 1 C0+C1, rank 2 A1+A2.
 *   step 1: rank 0 sends B2+B0 to 1, rank 1 sends C0+C1 to 2, rank 2 sends A1+A2 to 0;
 *           rank 0 ends with A, rank 1 with B, rank 2 with C.
 */
#include "algorithms.h"
#include "reduce.h"

#include <string.h>

chorus_status reducescatter_ring(const struct reducescatter_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t element = chorus_dtype_size(args->dtype);
    const char *send = args->send;
    if (p == 1) {
        if (args->block_counts[0] > 0)
            memcpy(args->recv, send, args->block_counts[0] * element);
        if (args->factor != 1.0)
            reduce_scale_buffer(args->recv, args->block_counts[0], args->dtype, args->factor);
        return CHORUS_OK;
    }
    size_t largest = 0;
    for (int b = 0; b < p; b++)
        largest = args->block_counts[b] > largest ? args->block_counts[b] : largest;
    char *scratch = scratch_reserve(args->scratch, 2 * largest * element + 1);
    if (scratch == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    char *outgoing = scratch, *incoming = scratch + largest * element;
    int right = (r + 1) % p, left = (r - 1 + p) % p;
    for (int step = 0; step < p - 1; step++) {
        int send_block = ((r - step - 1) % p + p) % p;
        int recv_block = ((r - step - 2) % p + p) % p;
        /* Step 0 sends this rank's own input; later steps the sum received before. */
        const char *sending = step == 0 ? send + args->offsets[send_block] * element : outgoing;
        chorus_status status = transport_sendrecv(
            transport, sending, args->block_counts[send_block] * element, right, incoming,
            args->block_counts[recv_block] * element, left, TAG_REDUCESCATTER);
        if (status != CHORUS_OK)
            return status;
        const char *own = send + args->offsets[recv_block] * element;
        size_t count = args->block_counts[recv_block];
        if (step == p - 2) {
            reduce_pair_scaled(args->recv, incoming, own, count, args->dtype, args->op,
                               args->factor);
        } else {
            reduce_pair(outgoing, incoming, own, count, args->dtype, args->op);
        }
    }
    return CHORUS_OK;
}
