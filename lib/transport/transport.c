/*
 * transport.c — helpers shared by every transport, written against its interface.
 */
#include "point_to_point.h"

#include <stdio.h>
#include <string.h>

chorus_status transport_ask_interrupted(struct transport *transport, bool receive, int peer)
{
    if (transport->interrupted == NULL)
        return CHORUS_OK;
    chorus_status status = transport->interrupted(transport->interrupt_context, transport->error,
                                                  sizeof transport->error);
    if (status != CHORUS_OK) {
        size_t length = strlen(transport->error);
        snprintf(transport->error + length, sizeof transport->error - length,
                 " (this rank was waiting to %s rank %d)", receive ? "receive from" : "send to",
                 peer);
    }
    return status;
}

chorus_status transport_sendrecv(struct transport *transport, const void *send_buffer,
                                 size_t send_bytes, int destination, void *recv_buffer,
                                 size_t recv_bytes, int source, int tag)
{
    struct transport_request requests[2];
    chorus_status status =
        transport_irecv(transport, recv_buffer, recv_bytes, source, tag, &requests[0]);
    if (status != CHORUS_OK)
        return status;
    status = transport_isend(transport, send_buffer, send_bytes, destination, tag, &requests[1]);
    if (status != CHORUS_OK) {
        transport_cancel(transport, 1, requests); /* nothing lands in recv_buffer afterwards */
        return status;
    }
    return transport_waitall(transport, 2, requests);
}
