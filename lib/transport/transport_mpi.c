/*
 * transport_mpi.c — the transport over chorus's MPI communicator. Waiting polls with
 * MPI_Testall and yields the processor between polls, because training jobs often run more
 * ranks than cores and a spinning waiter would steal the core its peer needs.
 */
#include "point_to_point.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

static_assert(sizeof(MPI_Request) <= sizeof(void *), "an MPI_Request must fit a slot");
static_assert(sizeof(MPI_Comm) <= sizeof(void *), "an MPI_Comm must fit a pointer");

/* MPI counts are int: a larger message goes as whole blocks of this many bytes plus a tail. */
#define MPI_BLOCK_BYTES ((size_t)1 << 20)

static MPI_Comm transport_comm(const struct transport *transport)
{
    MPI_Comm comm;
    memcpy(&comm, &transport->context, sizeof comm);
    return comm;
}

static void request_set(struct transport_request *request, size_t index, MPI_Request value)
{
    memcpy(&request->slots[index], &value, sizeof value);
}

static MPI_Request request_get(const struct transport_request *request, size_t index)
{
    MPI_Request value;
    memcpy(&value, &request->slots[index], sizeof value);
    return value;
}

static chorus_status mpi_failure(struct transport *transport, int code, const char *what,
                                 int peer)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    MPI_Error_string(code, text, &length);
    snprintf(transport->error, sizeof transport->error, "%s with rank %d failed: %s", what, peer,
             text);
    return CHORUS_ERR_MPI;
}

typedef int (*mpi_point_to_point)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);

static int isend_adapter(void *buffer, int count, MPI_Datatype type, int peer, int tag,
                         MPI_Comm comm, MPI_Request *request)
{
    return MPI_Isend(buffer, count, type, peer, tag, comm, request);
}

static int irecv_adapter(void *buffer, int count, MPI_Datatype type, int peer, int tag,
                         MPI_Comm comm, MPI_Request *request)
{
    return MPI_Irecv(buffer, count, type, peer, tag, comm, request);
}

/* slots[2] of a receive's request points here. */
static char receive_mark;

/* Posts a send or receive of any size as at most two MPI requests. */
static chorus_status post(struct transport *transport, mpi_point_to_point start, void *buffer,
                          size_t bytes, int peer, int tag, struct transport_request *request,
                          const char *what)
{
    MPI_Comm comm = transport_comm(transport);
    request_set(request, 0, MPI_REQUEST_NULL);
    request_set(request, 1, MPI_REQUEST_NULL);
    request->slots[2] = start == irecv_adapter ? &receive_mark : NULL;
    request->slots[3] = (void *)(intptr_t)peer; /* to say whom a stuck wait waited for */
    MPI_Request mpi_request = MPI_REQUEST_NULL;
    size_t blocks = bytes / MPI_BLOCK_BYTES;
    size_t tail = bytes % MPI_BLOCK_BYTES;
    int code = MPI_SUCCESS;
    if (bytes <= (size_t)INT32_MAX) {
        code = start(buffer, (int)bytes, MPI_BYTE, peer, tag, comm, &mpi_request);
        if (code != MPI_SUCCESS)
            return mpi_failure(transport, code, what, peer);
        request_set(request, 0, mpi_request);
        return CHORUS_OK;
    }
    MPI_Datatype block;
    MPI_Type_contiguous((int)MPI_BLOCK_BYTES, MPI_BYTE, &block);
    MPI_Type_commit(&block);
    code = start(buffer, (int)blocks, block, peer, tag, comm, &mpi_request);
    MPI_Type_free(&block);
    if (code != MPI_SUCCESS)
        return mpi_failure(transport, code, what, peer);
    request_set(request, 0, mpi_request);
    if (tail != 0) {
        code = start((char *)buffer + blocks * MPI_BLOCK_BYTES, (int)tail, MPI_BYTE, peer, tag,
                     comm, &mpi_request);
        if (code != MPI_SUCCESS)
            return mpi_failure(transport, code, what, peer);
        request_set(request, 1, mpi_request);
    }
    return CHORUS_OK;
}

static chorus_status mpi_isend(struct transport *transport, const void *buffer, size_t bytes,
                               int peer, int tag, struct transport_request *request)
{
    return post(transport, isend_adapter, (void *)buffer, bytes, peer, tag, request, "send");
}

static chorus_status mpi_irecv(struct transport *transport, void *buffer, size_t bytes, int peer,
                               int tag, struct transport_request *request)
{
    return post(transport, irecv_adapter, buffer, bytes, peer, tag, request, "receive");
}

/* How long an interrupted wait still lets its transfers finish. A receive already matched
 * cannot be cancelled and one already copying must not land in a buffer its owner has freed;
 * a send a peer is already reading must not lose its buffer. Transfers between ranks that are
 * both still running finish within this; the rest never start (their communicator is never
 * freed after a fatal error, so nothing matches them later). */
#define INTERRUPTED_DRAIN_SECONDS 1.0

/* An interrupted wait gives up the transfers still outstanding: receives not yet matched are
 * cancelled, the others get a moment to finish, and whatever is left is freed. */
static void abandon(struct transport_request *requests, size_t count)
{
    for (size_t i = 0; i < count; i++)
        for (size_t slot = 0; slot < 2; slot++) {
            MPI_Request request = request_get(&requests[i], slot);
            if (request != MPI_REQUEST_NULL && requests[i].slots[2] == &receive_mark)
                MPI_Cancel(&request);
        }
    double give_up = MPI_Wtime() + INTERRUPTED_DRAIN_SECONDS;
    for (size_t i = 0; i < count; i++)
        for (size_t slot = 0; slot < 2; slot++) {
            MPI_Request request = request_get(&requests[i], slot);
            int done = 0;
            while (request != MPI_REQUEST_NULL && !done && MPI_Wtime() < give_up) {
                if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                    break;
                sched_yield();
            }
            if (request != MPI_REQUEST_NULL && !done)
                MPI_Request_free(&request);
            request_set(&requests[i], slot, MPI_REQUEST_NULL);
        }
}

static chorus_status mpi_waitall(struct transport *transport, size_t count,
                                 struct transport_request *requests)
{
    for (size_t i = 0; i < count; i++) {
        for (size_t slot = 0; slot < 2; slot++) {
            MPI_Request request = request_get(&requests[i], slot);
            unsigned polls = 0;
            while (request != MPI_REQUEST_NULL) {
                int done = 0;
                int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
                if (code != MPI_SUCCESS)
                    return mpi_failure(transport, code, "waiting for a transfer", -1);
                if (done)
                    break;
                /* Spin briefly for latency, then give the core away between polls. */
                if (++polls <= 64)
                    continue;
                sched_yield();
                chorus_status interrupted = transport_ask_interrupted(
                    transport, requests[i].slots[2] == &receive_mark,
                    (int)(intptr_t)requests[i].slots[3]);
                if (interrupted != CHORUS_OK) {
                    request_set(&requests[i], slot, request);
                    abandon(requests + i, count - i);
                    return interrupted;
                }
            }
            request_set(&requests[i], slot, MPI_REQUEST_NULL);
        }
    }
    return CHORUS_OK;
}

static void mpi_cancel(struct transport *transport, size_t count,
                       struct transport_request *requests)
{
    (void)transport;
    abandon(requests, count);
}

static const struct transport_ops mpi_ops = {
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .irecv_up_to = mpi_irecv, /* MPI takes a shorter message as it is */
    .waitall = mpi_waitall,
    .cancel = mpi_cancel,
};

void transport_mpi_init(struct transport *transport, const void *mpi_comm)
{
    MPI_Comm comm;
    memcpy(&comm, mpi_comm, sizeof comm);
    memset(transport, 0, sizeof *transport);
    transport->ops = &mpi_ops;
    MPI_Comm_rank(comm, &transport->rank);
    MPI_Comm_size(comm, &transport->nranks);
    memcpy(&transport->context, &comm, sizeof comm);
}

void transport_mpi_library(char *line, size_t size)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int length = 0;
    MPI_Get_library_version(version, &length);
    version[strcspn(version, "\n,")] = '\0';
    for (char *c = version; *c != '\0'; c++)
        if (*c == '\t')
            *c = ' ';
    snprintf(line, size, "%s", version);
}

bool transport_mpi_comm(const struct transport *transport, void *mpi_comm)
{
    if (transport->ops != &mpi_ops)
        return false;
    memcpy(mpi_comm, &transport->context, sizeof(MPI_Comm));
    return true;
}
