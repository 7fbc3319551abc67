/*
 * abort_ucx.c — the abort notices (abort.h) over a UCX fabric, for worlds without MPI: a notice
 * is a whole message with the abort tag to every other rank, taken by a probe for that tag.
 */
#include "abort.h"

#include "../transport/transport_ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool abort_ucx_poll(void *fabric, struct abort_notice *notice)
{
    uint8_t *bytes = NULL;
    size_t length = 0;
    int sender = -1;
    char error[256];
    /* A lost rank fails the take with the transport's own message, which is the news then: a
     * rank that waits on the others through the host's memory alone (negotiation rounds through
     * the slots) makes no call on the fabric that would fail, and would wait out the timeout
     * for a loss its fabric already knows. */
    chorus_status taken =
        ucx_message_take(fabric, -1, TAG_ABORT, &bytes, &length, &sender, error, sizeof error);
    if (taken != CHORUS_OK && ucx_fabric_lost_rank(fabric) >= 0) {
        *notice = (struct abort_notice){.status = taken, .rank = ABORT_RANK_TRANSPORT};
        snprintf(notice->reason, sizeof notice->reason, "%s", error);
        return true;
    }
    if (taken != CHORUS_OK || bytes == NULL)
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
    /* Also after a loss: the ranks that wait on this one, not on the lost one, must hear it. */
    struct abort_notice *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return;
    *copy = *notice;
    ucx_message_notify(fabric, TAG_ABORT, copy, sizeof *copy);
}
