/*
 * allgather_ring.c — ring allgather of blocks of any size (allgatherv). In step s (0 .. p-2)
 * rank r sends block (r - s) mod p to its right neighbour and receives block (r - s - 1) mod p
 * from its left neighbour, straight into its place in the output.
 *
 * Cost: p - 1 steps; each rank receives every other rank's block once, which is optimal.
 * Blocks may be empty (a rank with 0 rows).
 *
 * Example, p = 3: step 0: 0 -> 1: B0, 1 -> 2: B1, 2 -> 0: B2; step 1: 0 -> 1: B2, 1 -> 2: B0,
 * 2 -> 0: B1.
 */
#include "algorithms.h"

#include <string.h>

chorus_status allgather_ring(const struct allgather_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    char *recv = args->recv;
    if (args->block_bytes[r] != 0 && args->send != recv + args->offsets[r])
        memmove(recv + args->offsets[r], args->send, args->block_bytes[r]);
    int right = (r + 1) % p, left = (r - 1 + p) % p;
    for (int step = 0; step < p - 1; step++) {
        int send_block = (r - step + p) % p;
        int recv_block = (r - step - 1 + p) % p;
        chorus_status status = transport_sendrecv(
            transport, recv + args->offsets[send_block], args->block_bytes[send_block], right,
            recv + args->offsets[recv_block], args->block_bytes[recv_block], left,
            TAG_ALLGATHER);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}
