/*
 * abort.c — the notice a rank sends to all others when it stops after a fatal error, and the
 * receive every rank keeps posted for it (see abort.h).
 */
#include "abort.h"

#include "../core/retained.h"

#include <stdio.h>
#include <stdlib.h>

bool abort_watch_start(struct abort_watch *watch, MPI_Comm comm)
{
    watch->started = true;
    watch->comm = comm;
    watch->received = false;
    watch->request = MPI_REQUEST_NULL;
    return MPI_Irecv(&watch->notice, (int)sizeof watch->notice, MPI_BYTE, MPI_ANY_SOURCE, TAG_ABORT,
                     comm, &watch->request) == MPI_SUCCESS;
}

bool abort_watch_poll(struct abort_watch *watch)
{
    if (!watch->received && watch->poll_hook != NULL &&
        watch->poll_hook(watch->hook_context, &watch->notice))
        watch->received = true;
    if (watch->received || !watch->started || watch->request == MPI_REQUEST_NULL)
        return watch->received;
    int done = 0;
    if (MPI_Test(&watch->request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        watch->received = true;
        watch->notice.reason[sizeof watch->notice.reason - 1] = '\0';
    }
    return watch->received;
}

void abort_watch_stop(struct abort_watch *watch)
{
    if (!watch->started || watch->request == MPI_REQUEST_NULL)
        return;
    MPI_Cancel(&watch->request);
    MPI_Wait(&watch->request, MPI_STATUS_IGNORE);
}

void abort_notify(struct abort_watch *watch, int rank, chorus_status status, const char *reason)
{
    if (watch->notify_hook != NULL) {
        struct abort_notice notice = {.status = status, .rank = rank};
        snprintf(notice.reason, sizeof notice.reason, "%s", reason);
        watch->notify_hook(watch->hook_context, &notice);
        return;
    }
    if (!watch->started)
        return;
    MPI_Comm comm = watch->comm;
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size == 1)
        return;
    /* Nobody waits for these sends (a peer may have stopped already), and MPI may read the
     * notice until each is delivered: it is retained until MPI is finalized. */
    struct abort_notice *notice = calloc(1, sizeof *notice);
    if (notice == NULL)
        return;
    retained_keep(notice);
    notice->status = status;
    notice->rank = rank;
    snprintf(notice->reason, sizeof notice->reason, "%s", reason);
    for (int peer = 0; peer < size; peer++) {
        MPI_Request request = MPI_REQUEST_NULL;
        if (peer != rank && MPI_Isend(notice, (int)sizeof *notice, MPI_BYTE, peer, TAG_ABORT, comm,
                                      &request) == MPI_SUCCESS)
            MPI_Request_free(&request);
    }
}
