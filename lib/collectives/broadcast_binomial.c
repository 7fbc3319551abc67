/*
 * broadcast_binomial.c — binomial-tree broadcast. Ranks are renumbered relative to the root
 * (virtual rank v = (r - root) mod p). A rank receives the whole buffer from the virtual rank
 * that differs in its lowest set bit, then sends to v + 2^j for every j below that bit.
 *
 * Cost: ceil(log2 p) steps, each moving the whole buffer; the choice for small messages.
 *
 * Example, p = 4, root 0: step 0: 0 -> 2; step 1: 0 -> 1 and 2 -> 3.
 */
#include "algorithms.h"

chorus_status broadcast_binomial(const struct broadcast_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks;
    if (p == 1 || args->bytes == 0)
        return CHORUS_OK;
    int virtual_rank = (transport->rank - args->root + p) % p;
    int mask = 1;
    chorus_status status = CHORUS_OK;
    while (mask < p) {
        if (virtual_rank & mask) {
            int parent = (virtual_rank - mask + args->root) % p;
            struct transport_request request;
            status = transport_irecv(transport, args->buffer, args->bytes, parent, TAG_BROADCAST,
                                     &request);
            if (status == CHORUS_OK)
                status = transport_waitall(transport, 1, &request);
            if (status != CHORUS_OK)
                return status;
            break;
        }
        mask <<= 1;
    }
    struct transport_request requests[32];
    size_t pending = 0;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (virtual_rank + mask < p) {
            int child = (virtual_rank + mask + args->root) % p;
            status = transport_isend(transport, args->buffer, args->bytes, child, TAG_BROADCAST,
                                     &requests[pending]);
            if (status != CHORUS_OK)
                break;
            pending++;
        }
    }
    chorus_status waited = transport_waitall(transport, pending, requests);
    return status != CHORUS_OK ? status : waited;
}
