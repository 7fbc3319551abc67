/*
 * transport_threads.c — a transport between threads of one process, for unit tests. Each rank
 * is a thread with a mailbox. A send copies the bytes into the receiver's mailbox and completes
 * at once; a receive completes in waitall, when a message with its source and tag has arrived.
 * Messages of one source and tag match in the order they were sent, as in MPI.
 */
#include "point_to_point.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct thread_message {
    int source;
    int tag;
    size_t bytes;
    struct thread_message *next;
    unsigned char data[];
};

struct mailbox {
    pthread_mutex_t lock;
    pthread_cond_t arrived;
    struct thread_message *head;
    struct thread_message *tail;
};

struct thread_fabric {
    int nranks;
    struct mailbox mailboxes[];
};

struct pending_receive {
    void *buffer;
    size_t bytes;
    int peer;
    int tag;
    bool up_to; /* a shorter message is taken too */
};

struct thread_fabric *thread_fabric_create(int nranks)
{
    struct thread_fabric *fabric =
        calloc(1, sizeof *fabric + (size_t)nranks * sizeof(struct mailbox));
    if (fabric == NULL)
        return NULL;
    fabric->nranks = nranks;
    for (int i = 0; i < nranks; i++) {
        pthread_mutex_init(&fabric->mailboxes[i].lock, NULL);
        pthread_cond_init(&fabric->mailboxes[i].arrived, NULL);
    }
    return fabric;
}

void thread_fabric_destroy(struct thread_fabric *fabric)
{
    if (fabric == NULL)
        return;
    for (int i = 0; i < fabric->nranks; i++) {
        struct thread_message *message = fabric->mailboxes[i].head;
        while (message != NULL) {
            struct thread_message *next = message->next;
            free(message);
            message = next;
        }
        pthread_mutex_destroy(&fabric->mailboxes[i].lock);
        pthread_cond_destroy(&fabric->mailboxes[i].arrived);
    }
    free(fabric);
}

static chorus_status threads_isend(struct transport *transport, const void *buffer, size_t bytes,
                                   int peer, int tag, struct transport_request *request)
{
    struct thread_fabric *fabric = transport->context;
    if (peer < 0 || peer >= fabric->nranks) {
        snprintf(transport->error, sizeof transport->error, "send to invalid rank %d", peer);
        return CHORUS_ERR_INTERNAL;
    }
    struct thread_message *message = malloc(sizeof *message + bytes);
    if (message == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    message->source = transport->rank;
    message->tag = tag;
    message->bytes = bytes;
    message->next = NULL;
    if (bytes != 0)
        memcpy(message->data, buffer, bytes);
    struct mailbox *mailbox = &fabric->mailboxes[peer];
    pthread_mutex_lock(&mailbox->lock);
    if (mailbox->tail != NULL)
        mailbox->tail->next = message;
    else
        mailbox->head = message;
    mailbox->tail = message;
    pthread_cond_broadcast(&mailbox->arrived);
    pthread_mutex_unlock(&mailbox->lock);
    memset(request, 0, sizeof *request);
    return CHORUS_OK;
}

static chorus_status post_receive(void *buffer, size_t bytes, int peer, int tag, bool up_to,
                                  struct transport_request *request)
{
    struct pending_receive *receive = malloc(sizeof *receive);
    if (receive == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    *receive = (struct pending_receive){buffer, bytes, peer, tag, up_to};
    memset(request, 0, sizeof *request);
    request->slots[0] = receive;
    return CHORUS_OK;
}

static chorus_status threads_irecv(struct transport *transport, void *buffer, size_t bytes,
                                   int peer, int tag, struct transport_request *request)
{
    (void)transport;
    return post_receive(buffer, bytes, peer, tag, false, request);
}

static chorus_status threads_irecv_up_to(struct transport *transport, void *buffer, size_t bytes,
                                         int peer, int tag, struct transport_request *request)
{
    (void)transport;
    return post_receive(buffer, bytes, peer, tag, true, request);
}

/* Waits for the receive's message, or until the transport's `interrupted` hook says to stop
 * (then *interrupted is set). */
static chorus_status complete_receive(struct transport *transport,
                                      struct pending_receive *receive, bool *interrupted)
{
    struct thread_fabric *fabric = transport->context;
    struct mailbox *mailbox = &fabric->mailboxes[transport->rank];
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&mailbox->lock);
    for (;;) {
        struct thread_message *previous = NULL;
        struct thread_message *message = mailbox->head;
        while (message != NULL &&
               (message->source != receive->peer || message->tag != receive->tag)) {
            previous = message;
            message = message->next;
        }
        if (message != NULL) {
            if (previous != NULL)
                previous->next = message->next;
            else
                mailbox->head = message->next;
            if (mailbox->tail == message)
                mailbox->tail = previous;
            if (message->bytes != receive->bytes &&
                !(receive->up_to && message->bytes < receive->bytes)) {
                snprintf(transport->error, sizeof transport->error,
                         "rank %d expected %zu bytes from rank %d (tag %d) but got %zu",
                         transport->rank, receive->bytes, receive->peer, receive->tag,
                         message->bytes);
                status = CHORUS_ERR_INTERNAL;
            } else if (message->bytes != 0) {
                memcpy(receive->buffer, message->data, message->bytes);
            }
            free(message);
            break;
        }
        if (transport->interrupted == NULL) {
            pthread_cond_wait(&mailbox->arrived, &mailbox->lock);
            continue;
        }
        /* The mailbox's condition variable runs on the default (realtime) clock. */
        struct timespec deadline = clock_deadline(CLOCK_REALTIME, 1e-3);
        pthread_cond_timedwait(&mailbox->arrived, &mailbox->lock, &deadline);
        pthread_mutex_unlock(&mailbox->lock);
        status = transport->interrupted(transport->interrupt_context, transport->error,
                                        sizeof transport->error);
        pthread_mutex_lock(&mailbox->lock);
        if (status != CHORUS_OK) {
            *interrupted = true;
            break;
        }
    }
    pthread_mutex_unlock(&mailbox->lock);
    return status;
}

static chorus_status threads_waitall(struct transport *transport, size_t count,
                                     struct transport_request *requests)
{
    chorus_status status = CHORUS_OK;
    bool interrupted = false;
    for (size_t i = 0; i < count; i++) {
        struct pending_receive *receive = requests[i].slots[0];
        if (receive == NULL)
            continue;
        /* After an interruption the other receives are given up, like MPI's. */
        chorus_status one =
            interrupted ? CHORUS_OK : complete_receive(transport, receive, &interrupted);
        if (status == CHORUS_OK)
            status = one;
        free(receive);
        requests[i].slots[0] = NULL;
    }
    return status;
}

/* A send has already landed in its mailbox; a receive not yet matched is simply dropped. */
static void threads_cancel(struct transport *transport, size_t count,
                           struct transport_request *requests)
{
    (void)transport;
    for (size_t i = 0; i < count; i++) {
        free(requests[i].slots[0]);
        requests[i].slots[0] = NULL;
    }
}

static const struct transport_ops thread_ops = {
    .isend = threads_isend,
    .irecv = threads_irecv,
    .irecv_up_to = threads_irecv_up_to,
    .waitall = threads_waitall,
    .cancel = threads_cancel,
};

void transport_threads_init(struct transport *transport, struct thread_fabric *fabric, int rank)
{
    memset(transport, 0, sizeof *transport);
    transport->ops = &thread_ops;
    transport->rank = rank;
    transport->nranks = fabric->nranks;
    transport->context = fabric;
}
