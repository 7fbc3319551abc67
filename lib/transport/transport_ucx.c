/*
 * transport_ucx.c — the transport over UCX's tag matching (UCP), for worlds that lose ranks and
 * go on: no launcher's daemons hold it together, so a lost host is only lost peers, and UCX
 * carries RDMA where a cluster has it. Every connection is made with UCX's peer error handling:
 * when a peer's process ends, the connection to it fails within tens of milliseconds, and from
 * then on every wait on the fabric fails with CHORUS_ERR_TIMEOUT naming that rank, also waits on
 * ranks that are alive, since they may be waiting for the lost one and will never send.
 *
 * Waiting progresses the worker, spins briefly for latency, then yields the processor between
 * polls: training jobs often run more ranks than cores, and a spinning waiter would steal the
 * core its peer needs (as transport_mpi.c).
 */
#include "transport_ucx.h"

#include "ucx_library.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* UCX's functions: set by every context's creation (to the same table; atomic, since ranks
 * that are threads create theirs at once), before anything else here can run. */
static const struct ucx_library *_Atomic ucp;

struct ucx_context {
    ucp_context_h context;
};

/* A connection, and what its error callback needs to say whose it was. */
struct ucx_peer {
    struct ucx_fabric *fabric;
    ucp_ep_h endpoint;
    int rank;
};

struct ucx_fabric {
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_bytes;
    uint16_t epoch;
    int rank, nranks;
    struct ucx_peer *peers;
    /* Set by the first failed connection. UCX calls the error callback from
     * ucp_worker_progress, on the thread that waits, so no lock is needed. */
    int lost_rank;
    ucs_status_t lost_status;
    /* Held by the whole-message calls: a rank's abort notices are polled from whichever thread
     * waits, beside the background thread's channel on the same fabric. */
    pthread_mutex_t message_lock;
    /* Memory UCX may still read or write (abandoned messages): freed after the worker. */
    void **kept;
    size_t kept_count, kept_capacity;
};

/* Polls without progress before a waiter starts yielding the processor between polls. */
#define SPIN_POLLS 64

/* How long an abandoned operation's matched receives may still take to finish (see abandon). */
#define ABANDON_DRAIN_SECONDS 1.0

/* How long an abort notice may take to leave (see ucx_message_notify). */
#define NOTIFY_DRAIN_SECONDS 1.0

/* How long the rest of a whole message that began to arrive may take (its sender may die). */
#define MESSAGE_REST_SECONDS 10.0

/* A message's UCX tag: | epoch: 16 bits | source rank: 16 bits | chorus tag: 32 bits |.
 * Receives match all 64 bits, so a message of another epoch never matches, and messages of one
 * source and tag match in the order they were sent (UCX's tag matching keeps a sender's order,
 * as MPI's does). */
static ucp_tag_t message_tag(uint16_t epoch, int source, int tag)
{
    return (uint64_t)epoch << 48 | (uint64_t)(uint16_t)source << 32 | (uint32_t)tag;
}

chorus_status ucx_context_create(struct ucx_context **context, char *error, size_t error_size)
{
    *context = NULL;
    if ((ucp = ucx_library_load(error, error_size)) == NULL)
        return CHORUS_ERR_NOT_SUPPORTED;
    *context = calloc(1, sizeof **context);
    if (*context == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    ucp_config_t *config = NULL;
    ucs_status_t status = ucp->config_read(NULL, NULL, &config);
    /* Copies, never zero-copy sends: UCX 1.13's tcp transport fails an assertion and aborts the
     * process (uct_iface.h: comp->count > 0) when a peer dies during a zero-copy send, in 1 of 6
     * runs of test_transport_ucx at 2 ranks; 0 of 11 with copies. */
    if (status == UCS_OK)
        status = ucp->config_modify(config, "ZCOPY_THRESH", "inf");
    if (status == UCS_OK) {
        /* Workers of one context may run on different threads (unit tests run ranks as threads). */
        ucp_params_t params = {
            .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
            .features = UCP_FEATURE_TAG,
            .mt_workers_shared = 1};
        status = ucp->init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config,
                                   &(*context)->context);
        ucp->config_release(config);
    }
    if (status != UCS_OK) {
        snprintf(error, error_size, "UCX could not start: %s", ucp->status_string(status));
        free(*context);
        *context = NULL;
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    return CHORUS_OK;
}

void ucx_context_destroy(struct ucx_context *context)
{
    if (context == NULL)
        return;
    ucp->cleanup(context->context);
    free(context);
}

chorus_status ucx_fabric_create(struct ucx_context *context, uint16_t epoch,
                                struct ucx_fabric **fabric, char *error, size_t error_size)
{
    *fabric = calloc(1, sizeof **fabric);
    if (*fabric == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    (*fabric)->epoch = epoch;
    (*fabric)->lost_rank = -1;
    pthread_mutex_init(&(*fabric)->message_lock, NULL);
    ucp_worker_params_t params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t status = ucp->worker_create(context->context, &params, &(*fabric)->worker);
    if (status == UCS_OK) {
        status = ucp->worker_get_address((*fabric)->worker, &(*fabric)->address,
                                        &(*fabric)->address_bytes);
        if (status != UCS_OK)
            ucp->worker_destroy((*fabric)->worker);
    }
    if (status != UCS_OK) {
        snprintf(error, error_size, "UCX could not make a worker: %s", ucp->status_string(status));
        free(*fabric);
        *fabric = NULL;
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    return CHORUS_OK;
}

const void *ucx_fabric_address(const struct ucx_fabric *fabric, size_t *bytes)
{
    *bytes = fabric->address_bytes;
    return fabric->address;
}

/* Records `rank` as the fabric's lost rank, with the UCX status that said so, unless one was
 * lost before: the first loss is the one every later failure names. */
static void record_loss(struct ucx_fabric *fabric, int rank, ucs_status_t status)
{
    if (fabric->lost_rank < 0) {
        fabric->lost_rank = rank;
        fabric->lost_status = status;
    }
}

/* The world's first loss, as every failure on the fabric words it: "rank N lost: ...". */
static chorus_status message_lost(struct ucx_fabric *fabric, char *error, size_t error_size)
{
    snprintf(error, error_size, "rank %d lost: its connection failed (UCX: %s)",
             fabric->lost_rank, ucp->status_string(fabric->lost_status));
    return CHORUS_ERR_TIMEOUT;
}
static void endpoint_failed(void *argument, ucp_ep_h endpoint, ucs_status_t status)
{
    (void)endpoint;
    struct ucx_peer *peer = argument;
    record_loss(peer->fabric, peer->rank, status);
}

chorus_status ucx_fabric_connect(struct ucx_fabric *fabric, int rank, int nranks,
                                 const void *const *addresses, char *error, size_t error_size)
{
    /* The tag has 16 bits for the source rank. */
    if (nranks < 1 || nranks > 65536 || rank < 0 || rank >= nranks || fabric->peers != NULL) {
        snprintf(error, error_size, "UCX fabric: rank %d of %d ranks cannot be connected", rank,
                 nranks);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    fabric->peers = calloc((size_t)nranks, sizeof *fabric->peers);
    if (fabric->peers == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    fabric->rank = rank;
    fabric->nranks = nranks;
    for (int r = 0; r < nranks; r++) {
        fabric->peers[r] = (struct ucx_peer){.fabric = fabric, .rank = r};
        ucp_ep_params_t params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = addresses[r],
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = endpoint_failed, .arg = &fabric->peers[r]}};
        ucs_status_t status = ucp->ep_create(fabric->worker, &params, &fabric->peers[r].endpoint);
        if (status != UCS_OK) {
            record_loss(fabric, r, status);
            snprintf(error, error_size, "rank %d lost: rank %d cannot reach it (UCX: %s)", r, rank,
                     ucp->status_string(status));
            return CHORUS_ERR_TIMEOUT;
        }
    }
    return CHORUS_OK;
}

int ucx_fabric_lost_rank(const struct ucx_fabric *fabric)
{
    return fabric->lost_rank;
}

int ucx_fabric_rank(const struct ucx_fabric *fabric, int *nranks)
{
    *nranks = fabric->nranks;
    return fabric->rank;
}

/* Waits for a request UCX returned, progressing the worker. */
static void finish_request(ucp_worker_h worker, ucs_status_ptr_t request)
{
    if (request == NULL || UCS_PTR_IS_ERR(request))
        return;
    while (ucp->request_check_status(request) == UCS_INPROGRESS)
        ucp->worker_progress(worker);
    ucp->request_free(request);
}

void ucx_fabric_destroy(struct ucx_fabric *fabric)
{
    if (fabric == NULL)
        return;
    /* Forced: a graceful close would wait for lost peers. The ranks still waiting on their own
     * fabric of this epoch see this rank lost. */
    ucp_request_param_t close = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
    for (int r = 0; fabric->peers != NULL && r < fabric->nranks; r++)
        if (fabric->peers[r].endpoint != NULL)
            finish_request(fabric->worker, ucp->ep_close_nbx(fabric->peers[r].endpoint, &close));
    ucp->worker_release_address(fabric->worker, fabric->address);
    ucp->worker_destroy(fabric->worker);
    for (size_t i = 0; i < fabric->kept_count; i++)
        free(fabric->kept[i]);
    free(fabric->kept);
    pthread_mutex_destroy(&fabric->message_lock);
    free(fabric->peers);
    free(fabric);
}

void ucx_fabric_describe(struct ucx_fabric *fabric, int peer, FILE *out)
{
    if (fabric->peers != NULL && peer >= 0 && peer < fabric->nranks)
        ucp->ep_print_info(fabric->peers[peer].endpoint, out);
}

/* A request's slots: the UCX request (NULL once finished), the peer with the direction and
 * whether a receive takes a shorter message, the tag, and a receive's expected length. */
enum { SLOT_UCX, SLOT_PEER, SLOT_TAG, SLOT_BYTES };
enum { RECEIVE = 1, SHORTER_TAKEN = 2, PEER_SHIFT = 4 };

static void request_set(struct transport_request *request, void *ucx, int peer, unsigned kind,
                        int tag, size_t bytes)
{
    request->slots[SLOT_UCX] = ucx;
    request->slots[SLOT_PEER] = (void *)((intptr_t)peer * PEER_SHIFT + kind);
    request->slots[SLOT_TAG] = (void *)(intptr_t)tag;
    request->slots[SLOT_BYTES] = (void *)(uintptr_t)bytes;
}

static int request_peer(const struct transport_request *request)
{
    return (int)((intptr_t)request->slots[SLOT_PEER] / PEER_SHIFT);
}

static bool request_is_receive(const struct transport_request *request)
{
    return ((intptr_t)request->slots[SLOT_PEER] & RECEIVE) != 0;
}

static bool request_takes_shorter(const struct transport_request *request)
{
    return ((intptr_t)request->slots[SLOT_PEER] & SHORTER_TAKEN) != 0;
}

/* Whether a UCX status means the connection to the peer failed. */
static bool connection_failed(ucs_status_t status)
{
    return status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_CONNECTION_RESET ||
           status == UCS_ERR_UNREACHABLE || status == UCS_ERR_REJECTED ||
           status == UCS_ERR_IO_ERROR || status == UCS_ERR_CANCELED;
}

/* The message of a wait that ended because the world lost a rank. */
static chorus_status lost_rank_failure(struct transport *transport, bool receive, int peer)
{
    struct ucx_fabric *fabric = transport->context;
    char *error = transport->error;
    message_lost(fabric, error, sizeof transport->error);
    size_t used = strlen(error);
    snprintf(error + used, sizeof transport->error - used, " while rank %d waited to %s rank %d",
             fabric->rank, receive ? "receive from" : "send to", peer);
    return CHORUS_ERR_TIMEOUT;
}

/* What a finished request's UCX status and received length mean. */
static chorus_status request_outcome(struct transport *transport,
                                     const struct transport_request *request, ucs_status_t status,
                                     size_t received)
{
    struct ucx_fabric *fabric = transport->context;
    bool receive = request_is_receive(request);
    int peer = request_peer(request), tag = (int)(intptr_t)request->slots[SLOT_TAG];
    size_t expected = (size_t)(uintptr_t)request->slots[SLOT_BYTES];
    if (status == UCS_OK &&
        (!receive || received == expected ||
         (request_takes_shorter(request) && received < expected)))
        return CHORUS_OK;
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) {
        snprintf(transport->error, sizeof transport->error,
                 "rank %d expected %zu bytes from rank %d (tag %d) but got %s", fabric->rank,
                 expected, peer, tag, status == UCS_OK ? "fewer" : "more");
        return CHORUS_ERR_INTERNAL;
    }
    if (connection_failed(status))
        record_loss(fabric, peer, status);
    if (fabric->lost_rank >= 0)
        return lost_rank_failure(transport, receive, peer);
    snprintf(transport->error, sizeof transport->error, "UCX: %s with rank %d failed: %s",
             receive ? "receive" : "send", peer, ucp->status_string(status));
    return CHORUS_ERR_INTERNAL;
}

/* Readies `request` for a transfer with `peer`; an error where it cannot be posted. */
static chorus_status start_request(struct transport *transport, struct transport_request *request,
                                   int peer, unsigned kind, int tag, size_t bytes)
{
    struct ucx_fabric *fabric = transport->context;
    bool receive = (kind & RECEIVE) != 0;
    request_set(request, NULL, peer, kind, tag, bytes);
    if (peer < 0 || peer >= fabric->nranks) {
        snprintf(transport->error, sizeof transport->error, "%s invalid rank %d",
                 receive ? "receive from" : "send to", peer);
        return CHORUS_ERR_INTERNAL;
    }
    if (fabric->lost_rank >= 0)
        return lost_rank_failure(transport, receive, peer);
    return CHORUS_OK;
}

static chorus_status ucx_isend(struct transport *transport, const void *buffer, size_t bytes,
                               int peer, int tag, struct transport_request *request)
{
    struct ucx_fabric *fabric = transport->context;
    chorus_status status = start_request(transport, request, peer, 0, tag, bytes);
    if (status != CHORUS_OK)
        return status;
    ucp_request_param_t param = {0};
    ucs_status_ptr_t posted =
        ucp->tag_send_nbx(fabric->peers[peer].endpoint, buffer, bytes,
                         message_tag(fabric->epoch, fabric->rank, tag), &param);
    if (UCS_PTR_IS_ERR(posted))
        return request_outcome(transport, request, UCS_PTR_STATUS(posted), 0);
    request->slots[SLOT_UCX] = posted;
    return CHORUS_OK;
}

static chorus_status post_receive(struct transport *transport, void *buffer, size_t bytes,
                                  int peer, int tag, unsigned kind,
                                  struct transport_request *request)
{
    struct ucx_fabric *fabric = transport->context;
    chorus_status status = start_request(transport, request, peer, kind, tag, bytes);
    if (status != CHORUS_OK)
        return status;
    /* Always a request, even for a message already here: its length is checked in the wait
     * (UCX 1.13's recv_info gave wrong lengths for messages matched at once). */
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
    ucs_status_ptr_t posted =
        ucp->tag_recv_nbx(fabric->worker, buffer, bytes, message_tag(fabric->epoch, peer, tag),
                         UINT64_MAX, &param);
    if (UCS_PTR_IS_ERR(posted))
        return request_outcome(transport, request, UCS_PTR_STATUS(posted), 0);
    request->slots[SLOT_UCX] = posted;
    return CHORUS_OK;
}

static chorus_status ucx_irecv(struct transport *transport, void *buffer, size_t bytes, int peer,
                               int tag, struct transport_request *request)
{
    return post_receive(transport, buffer, bytes, peer, tag, RECEIVE, request);
}

static chorus_status ucx_irecv_up_to(struct transport *transport, void *buffer, size_t bytes,
                                     int peer, int tag, struct transport_request *request)
{
    return post_receive(transport, buffer, bytes, peer, tag, RECEIVE | SHORTER_TAKEN, request);
}

/* The request's UCX status (UCS_INPROGRESS while it runs); a finished one is freed, and a
 * receive's length written to `received`. */
static ucs_status_t request_test(struct transport_request *request, size_t *received)
{
    void *ucx = request->slots[SLOT_UCX];
    ucs_status_t status = UCS_OK;
    *received = (size_t)(uintptr_t)request->slots[SLOT_BYTES];
    if (ucx == NULL)
        return UCS_OK;
    if (request_is_receive(request)) {
        ucp_tag_recv_info_t info = {0};
        status = ucp->tag_recv_request_test(ucx, &info);
        *received = info.length;
    } else {
        status = ucp->request_check_status(ucx);
    }
    if (status != UCS_INPROGRESS) {
        ucp->request_free(ucx);
        request->slots[SLOT_UCX] = NULL;
    }
    return status;
}

/* Gives up requests (a lost rank, an interrupted wait, an algorithm that stops): receives not
 * yet matched are cancelled, and those matched get a moment to finish, so that nothing lands in
 * their buffers afterwards (RDMA may write them without this worker's progress). Sends are
 * released at once: UCX reads their buffers only while this worker is progressed, and a world
 * that gave up an operation is destroyed, not used again; waiting for them would wait the whole
 * moment for receives their peers have given up. UCX frees what is still going when it ends, or
 * when the fabric is destroyed. */
static void abandon(struct ucx_fabric *fabric, struct transport_request *requests, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (requests[i].slots[SLOT_UCX] != NULL && request_is_receive(&requests[i]))
            ucp->request_cancel(fabric->worker, requests[i].slots[SLOT_UCX]);
    double give_up = clock_seconds() + ABANDON_DRAIN_SECONDS;
    for (size_t i = 0; i < count; i++) {
        size_t received;
        while (requests[i].slots[SLOT_UCX] != NULL && request_is_receive(&requests[i]) &&
               request_test(&requests[i], &received) == UCS_INPROGRESS &&
               clock_seconds() < give_up)
            if (ucp->worker_progress(fabric->worker) == 0)
                sched_yield();
        if (requests[i].slots[SLOT_UCX] != NULL)
            ucp->request_free(requests[i].slots[SLOT_UCX]);
        requests[i].slots[SLOT_UCX] = NULL;
    }
}

/* Waits for one request; on failure it is left to the caller to abandon. */
static chorus_status wait_one(struct transport *transport, struct transport_request *request)
{
    struct ucx_fabric *fabric = transport->context;
    unsigned idle_polls = 0;
    for (;;) {
        size_t received = 0;
        ucs_status_t status = request_test(request, &received);
        if (status != UCS_INPROGRESS)
            return request_outcome(transport, request, status, received);
        /* A lost rank ends every wait: a live peer may be waiting for it and never send. */
        if (fabric->lost_rank >= 0)
            return lost_rank_failure(transport, request_is_receive(request),
                                     request_peer(request));
        if (ucp->worker_progress(fabric->worker) != 0) {
            idle_polls = 0;
            continue;
        }
        /* Spin briefly for latency, then give the core away between polls. */
        if (++idle_polls <= SPIN_POLLS)
            continue;
        sched_yield();
        chorus_status interrupted = transport_ask_interrupted(
            transport, request_is_receive(request), request_peer(request));
        if (interrupted != CHORUS_OK)
            return interrupted;
    }
}

static chorus_status ucx_waitall(struct transport *transport, size_t count,
                                 struct transport_request *requests)
{
    for (size_t i = 0; i < count; i++) {
        chorus_status status = wait_one(transport, &requests[i]);
        if (status != CHORUS_OK) {
            abandon(transport->context, requests + i, count - i);
            return status;
        }
    }
    return CHORUS_OK;
}

static void ucx_cancel(struct transport *transport, size_t count,
                       struct transport_request *requests)
{
    abandon(transport->context, requests, count);
}

static const struct transport_ops ucx_ops = {
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .irecv_up_to = ucx_irecv_up_to,
    .waitall = ucx_waitall,
    .cancel = ucx_cancel,
};

void transport_ucx_init(struct transport *transport, struct ucx_fabric *fabric)
{
    memset(transport, 0, sizeof *transport);
    transport->ops = &ucx_ops;
    transport->rank = fabric->rank;
    transport->nranks = fabric->nranks;
    transport->context = fabric;
}

/* ----- whole messages, for the negotiation channel ----------------------------------------- */

/* The bit that keeps messages apart from the transport's (whose tags are below 2^31). */
#define MESSAGE_TAG_BIT 0x80000000u
/* Matches every bit but the source's. */
#define ANY_SOURCE_MASK (~((uint64_t)0xffff << 32))

/* The outcome of a message operation that failed with `status`, with `peer`. */
static chorus_status message_failed(struct ucx_fabric *fabric, int peer, ucs_status_t status,
                                    char *error, size_t error_size)
{
    if (connection_failed(status) && peer >= 0)
        record_loss(fabric, peer, status);
    if (fabric->lost_rank >= 0)
        return message_lost(fabric, error, error_size);
    snprintf(error, error_size, "UCX: a negotiation message with rank %d failed: %s", peer,
             ucp->status_string(status));
    return CHORUS_ERR_INTERNAL;
}

/* Keeps `memory` until the fabric is destroyed (message_lock held). If the list cannot grow,
 * the memory is leaked rather than freed under UCX. */
static void keep_locked(struct ucx_fabric *fabric, void *memory)
{
    if (memory == NULL)
        return;
    if (fabric->kept_count == fabric->kept_capacity) {
        size_t capacity = fabric->kept_capacity ? 2 * fabric->kept_capacity : 8;
        void **grown = realloc(fabric->kept, capacity * sizeof *grown);
        if (grown == NULL)
            return;
        fabric->kept = grown;
        fabric->kept_capacity = capacity;
    }
    fabric->kept[fabric->kept_count++] = memory;
}

void ucx_message_keep(struct ucx_fabric *fabric, void *memory)
{
    pthread_mutex_lock(&fabric->message_lock);
    keep_locked(fabric, memory);
    pthread_mutex_unlock(&fabric->message_lock);
}

/* `despite_loss`: also after the fabric lost a rank (to every other rank), as an abort notice
 * must go out. */
static chorus_status send_message(struct ucx_fabric *fabric, int peer, int tag, const void *bytes,
                                  size_t length, bool despite_loss, void **pending, char *error,
                                  size_t error_size)
{
    *pending = NULL;
    if (peer < 0 || peer >= fabric->nranks || tag < 0) {
        snprintf(error, error_size, "UCX: no rank %d to send a message to", peer);
        return CHORUS_ERR_INTERNAL;
    }
    if (fabric->lost_rank >= 0 && (!despite_loss || peer == fabric->lost_rank))
        return message_lost(fabric, error, error_size);
    ucp_request_param_t param = {0};
    ucs_status_ptr_t posted = ucp->tag_send_nbx(
        fabric->peers[peer].endpoint, bytes, length,
        message_tag(fabric->epoch, fabric->rank, (int)((uint32_t)tag | MESSAGE_TAG_BIT)), &param);
    if (UCS_PTR_IS_ERR(posted))
        return message_failed(fabric, peer, UCS_PTR_STATUS(posted), error, error_size);
    *pending = posted;
    return CHORUS_OK;
}

chorus_status ucx_message_send(struct ucx_fabric *fabric, int peer, int tag, const void *bytes,
                               size_t length, void **pending, char *error, size_t error_size)
{
    pthread_mutex_lock(&fabric->message_lock);
    chorus_status status =
        send_message(fabric, peer, tag, bytes, length, false, pending, error, error_size);
    pthread_mutex_unlock(&fabric->message_lock);
    return status;
}

void ucx_message_notify(struct ucx_fabric *fabric, int tag, void *bytes, size_t length)
{
    char error[256];
    pthread_mutex_lock(&fabric->message_lock);
    keep_locked(fabric, bytes);
    void **pending = calloc((size_t)fabric->nranks, sizeof *pending);
    for (int peer = 0; peer < fabric->nranks; peer++) {
        void *sending = NULL;
        if (peer != fabric->rank &&
            send_message(fabric, peer, tag, bytes, length, true, &sending, error,
                         sizeof error) == CHORUS_OK &&
            sending != NULL) {
            if (pending != NULL)
                pending[peer] = sending;
            else
                ucp->request_free(sending); /* UCX finishes it unwatched */
        }
    }
    /* The sender stops progressing this worker once it has told: a notice left queued (a
     * connection never used before, on a host whose ranks met only through their shared slots)
     * would never leave. So it is pushed out here, for a moment at most: a lost peer's send
     * ends with an error. */
    double give_up = clock_seconds() + NOTIFY_DRAIN_SECONDS;
    for (int peer = 0; pending != NULL && peer < fabric->nranks; peer++) {
        while (pending[peer] != NULL &&
               ucp->request_check_status(pending[peer]) == UCS_INPROGRESS &&
               clock_seconds() < give_up)
            if (ucp->worker_progress(fabric->worker) == 0)
                sched_yield();
        if (pending[peer] != NULL)
            ucp->request_free(pending[peer]);
    }
    free(pending);
    pthread_mutex_unlock(&fabric->message_lock);
}

bool ucx_message_sent(struct ucx_fabric *fabric, void *pending)
{
    if (pending == NULL)
        return true;
    pthread_mutex_lock(&fabric->message_lock);
    ucp->worker_progress(fabric->worker);
    bool done = ucp->request_check_status(pending) != UCS_INPROGRESS;
    if (done)
        ucp->request_free(pending); /* a failed send: the peer's loss is seen by the receives */
    pthread_mutex_unlock(&fabric->message_lock);
    return done;
}

void ucx_message_abandon(struct ucx_fabric *fabric, void *pending)
{
    if (pending == NULL)
        return;
    pthread_mutex_lock(&fabric->message_lock);
    ucp->request_free(pending);
    pthread_mutex_unlock(&fabric->message_lock);
}

static chorus_status take_message(struct ucx_fabric *fabric, int source, int tag, uint8_t **bytes,
                                  size_t *length, int *sender, char *error, size_t error_size)
{
    *bytes = NULL;
    ucp->worker_progress(fabric->worker);
    if (fabric->lost_rank >= 0)
        return message_lost(fabric, error, error_size);
    ucp_tag_recv_info_t info = {0};
    ucp_tag_t wanted = message_tag(fabric->epoch, source < 0 ? 0 : source,
                                   (int)((uint32_t)tag | MESSAGE_TAG_BIT));
    ucp_tag_message_h message = ucp->tag_probe_nb(
        fabric->worker, wanted, source < 0 ? ANY_SOURCE_MASK : UINT64_MAX, 1, &info);
    if (message == NULL)
        return CHORUS_OK;
    int from = (int)(uint16_t)(info.sender_tag >> 32);
    /* Taken even when there is no memory for it (into a byte, truncated), so that UCX lets go
     * of its descriptor; the caller then fails. */
    static uint8_t discard;
    uint8_t *received = malloc(info.length > 0 ? info.length : 1);
    ucp_request_param_t param = {0};
    ucs_status_ptr_t request =
        ucp->tag_msg_recv_nbx(fabric->worker, received != NULL ? received : &discard,
                             received != NULL ? info.length : 0, message, &param);
    ucs_status_t status = UCS_PTR_STATUS(request);
    if (!UCS_PTR_IS_ERR(request) && request != NULL) {
        /* The message matched: its rest (a large one comes in pieces) follows at once, unless
         * its sender is lost meanwhile. Then the receive is cancelled, and a buffer UCX still
         * holds is kept until the fabric goes. */
        double give_up = clock_seconds() + MESSAGE_REST_SECONDS;
        while ((status = ucp->request_check_status(request)) == UCS_INPROGRESS &&
               fabric->lost_rank < 0 && clock_seconds() < give_up)
            ucp->worker_progress(fabric->worker);
        if (status == UCS_INPROGRESS) {
            ucp->request_cancel(fabric->worker, request);
            double drained = clock_seconds() + ABANDON_DRAIN_SECONDS;
            while ((status = ucp->request_check_status(request)) == UCS_INPROGRESS &&
                   clock_seconds() < drained)
                ucp->worker_progress(fabric->worker);
            if (status == UCS_INPROGRESS) {
                keep_locked(fabric, received);
                received = NULL;
            }
            status = UCS_ERR_CANCELED;
        }
        ucp->request_free(request);
    }
    if (received == NULL && status == UCS_OK) {
        snprintf(error, error_size, "out of memory for a negotiation message of %zu bytes",
                 info.length);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    if (status != UCS_OK) {
        free(received);
        return message_failed(fabric, from, status, error, error_size);
    }
    *bytes = received;
    *length = info.length;
    *sender = from;
    return CHORUS_OK;
}

chorus_status ucx_message_take(struct ucx_fabric *fabric, int source, int tag, uint8_t **bytes,
                               size_t *length, int *sender, char *error, size_t error_size)
{
    pthread_mutex_lock(&fabric->message_lock);
    chorus_status status =
        take_message(fabric, source, tag, bytes, length, sender, error, error_size);
    pthread_mutex_unlock(&fabric->message_lock);
    return status;
}
