/*
 * channel_mpi.c — the negotiation channel (channel.h) on the control communicator: each
 * message one MPI_Isend per destination, kept until it completes; receives by MPI_Improbe and
 * MPI_Mrecv, so that a message of any length is taken whole; rounds by MPI_Iallreduce.
 */
#include "../negotiation/channel.h"

#include "../core/retained.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>

struct outgoing {
    uint8_t *bytes;
    MPI_Request *requests;
    int count;
    struct outgoing *next;
};

struct channel_mpi {
    MPI_Comm comm;
    struct outgoing *outgoing;
    MPI_Request round;
    bool round_posted;
};

/* After a fatal error, how long the last sends may take before they are given up: a peer that
 * stopped too never receives them, and a large message (above the transport's eager limit)
 * then never completes. Measured by mpi_fatal's large-backlog case: without a bound, shutdown
 * hung in 2 of 4 runs at np=3. */
#define FAILED_DRAIN_SECONDS 1.0

static chorus_status post(void *state, uint8_t *bytes, size_t length, const int *destinations,
                          int destination_count, int tag)
{
    struct channel_mpi *channel = state;
    struct outgoing *outgoing = calloc(1, sizeof *outgoing);
    MPI_Request *requests = calloc((size_t)destination_count + 1, sizeof *requests);
    if (outgoing == NULL || requests == NULL || length > INT_MAX) {
        free(outgoing);
        free(requests);
        free(bytes);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    *outgoing = (struct outgoing){.bytes = bytes, .requests = requests, .next = channel->outgoing};
    channel->outgoing = outgoing;
    for (int i = 0; i < destination_count; i++) {
        if (MPI_Isend(bytes, (int)length, MPI_BYTE, destinations[i], tag, channel->comm,
                      &requests[i]) != MPI_SUCCESS)
            return CHORUS_ERR_MPI;
        outgoing->count = i + 1;
    }
    return CHORUS_OK;
}

/* Gives up the sends still outgoing: MPI frees each request when it completes, if ever. Their
 * buffers are retained until MPI is finalized, as MPI may still read them. */
static void abandon_outgoing(struct channel_mpi *channel)
{
    while (channel->outgoing != NULL) {
        struct outgoing *outgoing = channel->outgoing;
        channel->outgoing = outgoing->next;
        for (int i = 0; i < outgoing->count; i++)
            if (outgoing->requests[i] != MPI_REQUEST_NULL)
                MPI_Request_free(&outgoing->requests[i]);
        retained_keep(outgoing->bytes);
        free(outgoing->requests);
        free(outgoing);
    }
}

static void progress(void *state, bool wait, bool failed)
{
    struct channel_mpi *channel = state;
    /* A round's allreduce may need this rank's MPI calls to reach the others (MPICH moves it
     * only inside them). Once done, the request is MPI_REQUEST_NULL, which round_test then
     * finds done at once. */
    if (channel->round_posted && channel->round != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&channel->round, &done, MPI_STATUS_IGNORE);
    }
    /* After a fatal error peers may never receive what is still outgoing. */
    if (wait && failed) {
        double give_up = clock_seconds() + FAILED_DRAIN_SECONDS;
        while (channel->outgoing != NULL && clock_seconds() < give_up) {
            progress(state, false, false);
            sched_yield();
        }
        abandon_outgoing(channel);
        return;
    }
    struct outgoing **link = &channel->outgoing;
    while (*link != NULL) {
        struct outgoing *outgoing = *link;
        int done = 0;
        if (wait)
            done = MPI_Waitall(outgoing->count, outgoing->requests, MPI_STATUSES_IGNORE) ==
                   MPI_SUCCESS;
        else if (MPI_Testall(outgoing->count, outgoing->requests, &done,
                             MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            done = 1; /* a failed send is reported where the peer notices; free the buffer */
        if (!done) {
            link = &outgoing->next;
            continue;
        }
        *link = outgoing->next;
        free(outgoing->bytes);
        free(outgoing->requests);
        free(outgoing);
    }
}

static chorus_status receive(void *state, int source, int tag, uint8_t **bytes, size_t *length,
                             int *sender)
{
    struct channel_mpi *channel = state;
    *bytes = NULL;
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    if (MPI_Improbe(source < 0 ? MPI_ANY_SOURCE : source, tag, channel->comm, &flag, &message,
                    &status) != MPI_SUCCESS)
        return CHORUS_ERR_MPI;
    if (!flag)
        return CHORUS_OK;
    int count = 0;
    if (MPI_Get_count(&status, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED)
        return CHORUS_ERR_MPI; /* a fatal error: the matched message is left to MPI */
    uint8_t *received = malloc(count > 0 ? (size_t)count : 1);
    if (received == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    if (MPI_Mrecv(received, count, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        free(received);
        return CHORUS_ERR_MPI;
    }
    *bytes = received;
    *length = (size_t)count;
    *sender = status.MPI_SOURCE;
    return CHORUS_OK;
}

static chorus_status round_post(void *state, const uint64_t *mine, uint64_t *result, size_t words)
{
    struct channel_mpi *channel = state;
    if (MPI_Iallreduce(mine, result, (int)words, MPI_UINT64_T, MPI_BAND, channel->comm,
                       &channel->round) != MPI_SUCCESS)
        return CHORUS_ERR_MPI;
    channel->round_posted = true;
    return CHORUS_OK;
}

static chorus_status round_test(void *state, bool *done)
{
    struct channel_mpi *channel = state;
    int flag = 0;
    if (MPI_Test(&channel->round, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return CHORUS_ERR_MPI;
    *done = flag != 0;
    if (flag)
        channel->round_posted = false;
    return CHORUS_OK;
}

static void release(void *state, bool failed)
{
    struct channel_mpi *channel = state;
    if (failed)
        abandon_outgoing(channel);
    else
        progress(channel, true, false);
    free(channel);
}

bool channel_mpi_init(struct channel *channel, const void *comm)
{
    struct channel_mpi *state = calloc(1, sizeof *state);
    if (state == NULL)
        return false;
    state->comm = *(const MPI_Comm *)comm;
    state->round = MPI_REQUEST_NULL;
    *channel = (struct channel){.state = state,
                                      .post = post,
                                      .progress = progress,
                                      .receive = receive,
                                      .round_post = round_post,
                                      .round_test = round_test,
                                      .release = release};
    return true;
}
