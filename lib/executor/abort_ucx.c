/*
 * abort_ucx.c — the abort notices (abort.h) over a UCX fabric, for worlds without MPI: a notice
 * is a whole message with the abort tag to every other rank, taken by a probe for that tag.
 */
#include "abort.h"

#include "../core/retained.h"
#include "../transport/transport_ucx.h"

#include <stdlib.h>
#include <string.h>

bool abort_ucx_poll(void *fabric, struct abort_notice *notice)
{
    uint8_t *bytes = NULL;
    size_t length = 0;
    int sender = -1;
    char error[256];
    /* A lost rank is the transport's to report, with its own message: no notice then. */
    if (ucx_message_take(fabric, -1, TAG_ABORT, &bytes, &length, &sender, error, sizeof error) !=
            CHORUS_OK ||
        bytes == NULL)
        return false;
    bool whole = length == sizeof *notice;
    if (whole) {
        memcpy(notice, bytes, sizeof *notice);
        notice->reason[sizeof notice->reason - 1] = '\0';
    }
    free(bytes);
    return whole;
}

void abort_ucx_notify(void *fabric, const struct abort_notice *notice)
{
    int nranks = 1;
    int rank = ucx_fabric_rank(fabric, &nranks);
    /* Nobody waits for these sends (a peer may have stopped already), and UCX may read the
     * notice until each is delivered: it is retained. */
    struct abort_notice *copy = malloc(sizeof *copy);
    if (copy == NULL || nranks == 1) {
        free(copy);
        return;
    }
    *copy = *notice;
    retained_keep(copy);
    char error[256];
    for (int peer = 0; peer < nranks; peer++) {
        void *pending = NULL;
        if (peer != rank &&
            ucx_message_send(fabric, peer, TAG_ABORT, copy, sizeof *copy, &pending, error,
                             sizeof error) == CHORUS_OK)
            ucx_message_abandon(fabric, pending);
    }
}
