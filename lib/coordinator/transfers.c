/*
 * transfers.c — see transfers.h. A tensor goes as one MPI message, so that a receive from any
 * source takes all of it from one sender: as bytes up to 2 GiB, beyond that as elements of a
 * contiguous type of the dtype's size (MPI counts are int). A receive is matched by
 * MPI_Improbe before it receives (MPI_Imrecv): its size is checked first, so a message of
 * another size is drained aside and never truncated. Truncation is an error MPICH reports
 * through MPI_COMM_WORLD's handler, whatever the communicator's: it would abort the job.
 */
#include "transfers.h"

#include "../core/log.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct transfer {
    struct request *request;
    MPI_Datatype type; /* MPI_BYTE, or a committed contiguous type of one element */
    int count;         /* of `type` */
    size_t bytes;
    MPI_Comm comm;
    int peer;      /* in comm, or MPI_ANY_SOURCE */
    bool matched;  /* a receive: its message found and being received (sends: always) */
    bool finished; /* completed, to be dropped from the list */
    int sender;    /* a receive's sender, a job rank, once matched */
};

void transfers_init(struct transfers *transfers, struct runner *runner, struct pending *pending)
{
    *transfers = (struct transfers){.runner = runner, .pending = pending};
}

void transfers_release(struct transfers *transfers)
{
    transfers_fail_all(transfers, CHORUS_ERR_SHUTDOWN,
                       "chorus shut down before the transfer completed");
    free(transfers->active);
    free(transfers->requests);
    *transfers = (struct transfers){0};
}

bool transfers_in_flight(const struct transfers *transfers)
{
    return transfers->count > 0;
}

/* The job rank of `rank` of process set `process_set` (itself in the job's); -1 if unknown. */
static int job_rank_of(struct chorus_context *context, int process_set, int rank)
{
    if (process_set == 0)
        return rank;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, process_set);
    int job_rank = set != NULL && rank >= 0 && rank < set->size ? set->ranks[rank] : -1;
    pthread_mutex_unlock(&context->lock);
    return job_rank;
}

/* The rank of job rank `rank` in process set `process_set` (itself in the job's); -1 if none. */
static int set_rank_of(struct chorus_context *context, int process_set, int rank)
{
    if (process_set == 0)
        return rank;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, process_set);
    int set_rank = set != NULL ? process_set_rank_of(set, rank) : -1;
    pthread_mutex_unlock(&context->lock);
    return set_rank;
}

static const char *peer_text(const struct transfer_args *args, char *text, size_t size)
{
    if (args->peer == CHORUS_ANY_SOURCE)
        snprintf(text, size, "any rank");
    else
        snprintf(text, size, "rank %d", args->peer);
    return text;
}

static void finish(struct transfers *transfers, struct request *request, chorus_status status,
                   const char *format, ...) CHORUS_PRINTF(4, 5);

/* Completes `request`; the message (when failing) names the transfer, its peer and tag. */
static void finish(struct transfers *transfers, struct request *request, chorus_status status,
                   const char *format, ...)
{
    if (status == CHORUS_OK) {
        pending_finish(transfers->pending, request, CHORUS_OK, NULL);
        return;
    }
    char reason[512];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(reason, sizeof reason, format, arguments);
    va_end(arguments);
    const struct transfer_args *args = &request->transfer;
    char peer[32];
    char *message =
        text_format("%s of %zu bytes %s %s (tag %d, process set %d) on rank %d: %s",
                    transfer_direction_name(args->direction),
                    request->count * chorus_dtype_size((chorus_dtype)request->desc.dtype),
                    args->direction == TRANSFER_SEND ? "to" : "from",
                    peer_text(args, peer, sizeof peer), args->tag, request->desc.process_set,
                    transfers->runner->executor.rank, reason);
    pending_finish(transfers->pending, request, status, message != NULL ? message : reason);
    free(message);
}

/* Completes `request` with CHORUS_ERR_MPI: "`what` failed: " and MPI's text of `code`. */
static void finish_mpi_failure(struct transfers *transfers, struct request *request,
                               const char *what, int code)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    MPI_Error_string(code, text, &length);
    finish(transfers, request, CHORUS_ERR_MPI, "%s failed: %s", what, text);
}

static bool grow(struct transfers *transfers)
{
    if (transfers->count < transfers->capacity)
        return true;
    size_t capacity = transfers->capacity > 0 ? transfers->capacity * 2 : 16;
    struct transfer *active = realloc(transfers->active, capacity * sizeof *active);
    if (active != NULL)
        transfers->active = active;
    MPI_Request *requests = realloc(transfers->requests, capacity * sizeof *requests);
    if (requests != NULL)
        transfers->requests = requests;
    if (active == NULL || requests == NULL)
        return false;
    transfers->capacity = capacity;
    return true;
}

/* The MPI type and count that carry `bytes` of elements of `element` bytes in one message;
 * false where even elements are too many for an int. */
static bool message_shape(size_t bytes, size_t element, MPI_Datatype *type, int *count)
{
    *type = MPI_BYTE;
    if (bytes <= INT_MAX) {
        *count = (int)bytes;
        return true;
    }
    if (bytes / element > INT_MAX ||
        MPI_Type_contiguous((int)element, MPI_BYTE, type) != MPI_SUCCESS ||
        MPI_Type_commit(type) != MPI_SUCCESS)
        return false;
    *count = (int)(bytes / element);
    return true;
}

static void free_type(MPI_Datatype *type)
{
    if (*type != MPI_BYTE)
        MPI_Type_free(type);
}

void transfers_post(struct transfers *transfers, struct request *request)
{
    struct chorus_context *context = transfers->runner->context;
    int process_set = request->desc.process_set;
    MPI_Comm comm = runner_transfer_comm(transfers->runner, process_set);
    const struct transfer_args *args = &request->transfer;
    bool send = args->direction == TRANSFER_SEND;
    bool any = args->peer == CHORUS_ANY_SOURCE;
    int peer = any ? MPI_ANY_SOURCE : set_rank_of(context, process_set, args->peer);
    if (comm == MPI_COMM_NULL || (!any && peer < 0)) {
        finish(transfers, request, CHORUS_ERR_INVALID_ARGUMENT,
               "this rank or the peer is not a member of the process set (removed?)");
        return;
    }
    size_t element = chorus_dtype_size((chorus_dtype)request->desc.dtype);
    struct transfer transfer = {.request = request, .bytes = request->count * element};
    if (!message_shape(transfer.bytes, element, &transfer.type, &transfer.count)) {
        finish(transfers, request, CHORUS_ERR_INVALID_ARGUMENT,
               "more than %d elements do not fit one MPI message", INT_MAX);
        return;
    }
    if (!grow(transfers)) {
        free_type(&transfer.type);
        finish(transfers, request, CHORUS_ERR_OUT_OF_MEMORY, "out of memory");
        return;
    }
    transfer.comm = comm;
    transfer.peer = peer;
    transfer.matched = send;
    transfer.sender = -1;
    MPI_Request mpi = MPI_REQUEST_NULL;
    if (send) {
        int code = MPI_Isend(request->input, transfer.count, transfer.type, peer, args->tag, comm,
                             &mpi);
        if (code != MPI_SUCCESS) {
            free_type(&transfer.type);
            finish_mpi_failure(transfers, request, "MPI_Isend", code);
            return;
        }
    }
    transfers->active[transfers->count] = transfer;
    transfers->requests[transfers->count] = mpi;
    transfers->count++;
}

/* Receives a matched message of the wrong size into a buffer of its own and drops it; false
 * where it cannot (no memory, too large to describe), leaving the message unreceived. */
static bool drain(MPI_Message *message, MPI_Count bytes, size_t element)
{
    MPI_Datatype type = MPI_BYTE;
    int count = 0;
    if (bytes < 0 ||
        !message_shape((size_t)bytes, (size_t)bytes % element == 0 ? element : 1, &type, &count))
        return false;
    void *scratch = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (scratch == NULL) {
        free_type(&type);
        return false;
    }
    MPI_Mrecv(scratch, count, type, message, MPI_STATUS_IGNORE);
    free(scratch);
    free_type(&type);
    return true;
}

/* Looks for the message of each receive not yet matched, in the order they were posted (as
 * MPI matches posted receives): one of the right size is received into the tensor, one of
 * another size drained and its receive failed. True when any was matched. */
static bool match_receives(struct transfers *transfers)
{
    struct chorus_context *context = transfers->runner->context;
    bool any = false;
    for (size_t i = 0; i < transfers->count; i++) {
        struct transfer *transfer = &transfers->active[i];
        if (transfer->matched || transfer->finished)
            continue;
        struct request *request = transfer->request;
        int found = 0;
        MPI_Message message = MPI_MESSAGE_NULL;
        MPI_Status status;
        if (MPI_Improbe(transfer->peer, request->transfer.tag, transfer->comm, &found, &message,
                        &status) != MPI_SUCCESS ||
            !found)
            continue;
        any = true;
        transfer->sender = job_rank_of(context, request->desc.process_set, status.MPI_SOURCE);
        int count = MPI_UNDEFINED;
        MPI_Get_count(&status, transfer->type, &count);
        if (count == transfer->count) {
            int code = MPI_Imrecv(request->output, transfer->count, transfer->type, &message,
                                  &transfers->requests[i]);
            if (code == MPI_SUCCESS) {
                transfer->matched = true;
                continue;
            }
            finish_mpi_failure(transfers, request, "MPI_Imrecv", code);
        } else {
            MPI_Count bytes = 0;
            MPI_Get_elements_x(&status, MPI_BYTE, &bytes);
            size_t element = chorus_dtype_size((chorus_dtype)request->desc.dtype);
            bool drained = drain(&message, bytes, element);
            finish(transfers, request, CHORUS_ERR_MISMATCH,
                   "rank %d sent %lld bytes where the receive takes %zu%s", transfer->sender,
                   (long long)bytes, transfer->bytes,
                   drained ? "" : " (the message could not be received aside: out of memory)");
        }
        free_type(&transfer->type);
        transfer->finished = true;
    }
    return any;
}

/* Completes a transfer MPI finished, after MPI's `status` of it. */
static void complete(struct transfers *transfers, struct transfer *transfer,
                     const MPI_Status *status, int code)
{
    struct request *request = transfer->request;
    int error = code == MPI_ERR_IN_STATUS ? status->MPI_ERROR : code;
    if (error != MPI_SUCCESS) {
        finish_mpi_failure(transfers, request, "MPI", error);
    } else {
        if (request->transfer.direction == TRANSFER_RECEIVE)
            request->handle->source = transfer->sender;
        finish(transfers, request, CHORUS_OK, NULL);
    }
    free_type(&transfer->type);
    transfer->finished = true;
}

/* Drops the finished transfers, keeping the rest in the order posted. */
static void compact(struct transfers *transfers)
{
    size_t kept = 0;
    for (size_t i = 0; i < transfers->count; i++) {
        if (transfers->active[i].finished)
            continue;
        transfers->active[kept] = transfers->active[i];
        transfers->requests[kept] = transfers->requests[i];
        kept++;
    }
    transfers->count = kept;
}

bool transfers_progress(struct transfers *transfers)
{
    if (transfers->count == 0)
        return false;
    bool matched = match_receives(transfers);
    int *indices = malloc(transfers->count * sizeof *indices);
    MPI_Status *statuses = malloc(transfers->count * sizeof *statuses);
    int done = 0;
    int code =
        indices != NULL && statuses != NULL
            ? MPI_Testsome((int)transfers->count, transfers->requests, &done, indices, statuses)
            : MPI_ERR_NO_MEM;
    if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
        free(indices);
        free(statuses);
        compact(transfers);
        /* Out of memory here, or MPI broken: the transfers cannot be completed one by one. */
        transfers_fail_all(
            transfers, code == MPI_ERR_NO_MEM ? CHORUS_ERR_OUT_OF_MEMORY : CHORUS_ERR_MPI,
            code == MPI_ERR_NO_MEM ? "out of memory testing transfers" : "MPI_Testsome failed");
        return true;
    }
    /* MPI_UNDEFINED: every request null (receives not yet matched, or just failed). */
    if (done == MPI_UNDEFINED)
        done = 0;
    for (int i = 0; i < done; i++)
        complete(transfers, &transfers->active[indices[i]], &statuses[i], code);
    compact(transfers);
    free(indices);
    free(statuses);
    return matched || done > 0;
}

void transfers_fail_all(struct transfers *transfers, chorus_status status, const char *reason)
{
    for (size_t i = 0; i < transfers->count; i++) {
        struct transfer *transfer = &transfers->active[i];
        MPI_Request *mpi = &transfers->requests[i];
        if (transfer->request->transfer.direction == TRANSFER_RECEIVE) {
            /* One not matched has nothing posted; one matched has its message on the way,
             * which lands before its tensor is given back. */
            if (*mpi != MPI_REQUEST_NULL)
                MPI_Wait(mpi, MPI_STATUS_IGNORE);
        } else if (*mpi != MPI_REQUEST_NULL) {
            MPI_Request_free(mpi);
        }
        free_type(&transfer->type);
        finish(transfers, transfer->request, status, "%s", reason);
    }
    if (transfers->count > 0)
        LOG(LOG_DEBUG, "transfers", "%zu transfers in flight failed: %s", transfers->count, reason);
    transfers->count = 0;
}
