/*
 * alltoall_pairwise.c — pairwise-exchange alltoall of blocks of any size (alltoallv). Rank r
 * copies its own block, then in step k (1 .. p-1) sends its block for rank (r + k) mod p and
 * receives the block of rank (r - k) mod p, straight into its place in the output.
 *
 * Cost: p - 1 steps; every block moves once, and each step pairs every rank with one sender and
 * one receiver, so no rank is flooded. Blocks may be empty.
 *
 * Example, p = 3: step 1: 0 -> 1, 1 -> 2, 2 -> 0; step 2: 0 -> 2, 1 -> 0, 2 -> 1.
 */
#include "algorithms.h"

#include <string.h>

chorus_status alltoall_pairwise(const struct alltoall_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    const char *send = args->send;
    char *recv = args->recv;
    if (args->send_bytes[r] > 0)
        memcpy(recv + args->recv_offsets[r], send + args->send_offsets[r], args->send_bytes[r]);
    for (int step = 1; step < p; step++) {
        int to = (r + step) % p, from = (r - step + p) % p;
        chorus_status status = transport_sendrecv(
            transport, send + args->send_offsets[to], args->send_bytes[to], to,
            recv + args->recv_offsets[from], args->recv_bytes[from], from, TAG_ALLTOALL);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}
