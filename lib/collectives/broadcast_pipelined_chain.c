/*
 * broadcast_pipelined_chain.c — pipelined chain broadcast. Ranks form a chain starting at the
 * root (virtual rank v = (r - root) mod p, v sends to v + 1). The buffer is cut into segments;
 * each rank forwards a segment as soon as it has received it, so all links carry data at once.
 *
 * Cost: p - 1 + segments - 1 steps of one segment; every link carries the buffer once, so for
 * large messages the time approaches bytes / link bandwidth regardless of p.
 *
 * Example, p = 3, root 1, segments S0 S1: 1 -> 2: S0; then 1 -> 2: S1 while 2 -> 0: S0; then
 * 2 -> 0: S1.
 */
#include "algorithms.h"

#include <stdlib.h>

#define CHAIN_SEGMENT_BYTES ((size_t)256 << 10)

chorus_status broadcast_pipelined_chain(const struct broadcast_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks;
    if (p == 1 || args->bytes == 0)
        return CHORUS_OK;
    int virtual_rank = (transport->rank - args->root + p) % p;
    int previous = (transport->rank - 1 + p) % p;
    int next = (transport->rank + 1) % p;
    bool receives = virtual_rank != 0;
    bool sends = virtual_rank != p - 1;
    size_t segments = (args->bytes + CHAIN_SEGMENT_BYTES - 1) / CHAIN_SEGMENT_BYTES;
    struct transport_request *requests = calloc(2 * segments, sizeof *requests);
    if (requests == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    struct transport_request *receive_requests = requests;
    struct transport_request *send_requests = requests + segments;
    char *buffer = args->buffer;
    chorus_status status = CHORUS_OK;
    size_t sent = 0, posted = 0, received = 0;
    for (size_t j = 0; receives && j < segments; j++) {
        size_t offset = j * CHAIN_SEGMENT_BYTES;
        size_t length = args->bytes - offset < CHAIN_SEGMENT_BYTES ? args->bytes - offset
                                                                   : CHAIN_SEGMENT_BYTES;
        status = transport_irecv(transport, buffer + offset, length, previous, TAG_BROADCAST,
                                 &receive_requests[j]);
        if (status != CHORUS_OK)
            goto out;
        posted++;
    }
    for (size_t j = 0; j < segments; j++) {
        size_t offset = j * CHAIN_SEGMENT_BYTES;
        size_t length = args->bytes - offset < CHAIN_SEGMENT_BYTES ? args->bytes - offset
                                                                   : CHAIN_SEGMENT_BYTES;
        if (receives) {
            status = transport_waitall(transport, 1, &receive_requests[j]);
            received = j + 1; /* waited for, or given up by the failed wait */
            if (status != CHORUS_OK)
                goto out;
        }
        if (sends) {
            status = transport_isend(transport, buffer + offset, length, next, TAG_BROADCAST,
                                     &send_requests[j]);
            if (status != CHORUS_OK)
                goto out;
            sent++;
        }
    }
out:;
    /* Segments still to come after a failure are not waited for: cancel their receives, which
     * would otherwise land in the buffer after the broadcast returned. */
    if (received < posted)
        transport_cancel(transport, posted - received, &receive_requests[received]);
    chorus_status waited = transport_waitall(transport, sent, send_requests);
    free(requests);
    return status != CHORUS_OK ? status : waited;
}
