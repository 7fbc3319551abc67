/*
 * pending.c — see pending.h: taking the user threads' submissions, queueing their descriptions
 * for rank 0, completing their handles, and failing every one of them when chorus must stop.
 */
#include "pending.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pending_init(struct pending *pending, struct chorus_context *context, int rank)
{
    memset(pending, 0, sizeof *pending);
    pending->context = context;
    pending->rank = rank;
    name_table_init(&pending->table);
}

void pending_destroy(struct pending *pending)
{
    pending_clear_unsent(pending);
    free(pending->unsent);
    pending->unsent = NULL;
    pending->unsent_capacity = 0;
    name_table_destroy(&pending->table);
}

/* ----- completing handles ----------------------------------------------------------------- */

void pending_finish(void *owner, struct request *request, chorus_status status,
                    const char *message)
{
    struct pending *pending = owner;
    struct chorus_context *context = pending->context;
    if (!request->ordered) { /* only negotiated names are kept in flight (submit.c) */
        pthread_mutex_lock(&context->lock);
        name_table_remove(&context->in_flight, request_name_set(&request->desc),
                          request->desc.name);
        pthread_mutex_unlock(&context->lock);
    }
    if (status == CHORUS_OK)
        handle_member_done(request->handle, CHORUS_OK, NULL);
    else
        handle_member_done(request->handle, status, "%s", message ? message : "");
    request_free(request);
}

struct request *pending_take(void *owner, const struct wire_request *agreed)
{
    struct pending *pending = owner;
    return name_table_remove(&pending->table, request_name_set(agreed), agreed->name);
}

void pending_join_done(void *owner, int last_rank)
{
    struct pending *pending = owner;
    struct chorus_context *context = pending->context;
    pthread_mutex_lock(&context->lock);
    context->last_joined_rank = last_rank;
    struct chorus_handle *handle = context->join_handle;
    context->join_handle = NULL;
    context->join_requested = false;
    pthread_mutex_unlock(&context->lock);
    pending->join_sent = false;
    if (handle != NULL)
        handle_member_done(handle, CHORUS_OK, NULL);
}

void pending_refuse_submissions(void *owner, chorus_status status, const char *reason)
{
    struct pending *pending = owner;
    struct chorus_context *context = pending->context;
    pthread_mutex_lock(&context->lock);
    if (atomic_load(&context->stopped) == CHORUS_OK) { /* the first reason stays */
        snprintf(context->stopped_message, sizeof context->stopped_message, "%s", reason);
        atomic_store(&context->stopped, status);
    }
    pthread_mutex_unlock(&context->lock);
}

static void fail_one(struct pending *pending, struct request *request, chorus_status status,
                     const char *reason)
{
    char *message =
        text_format("%s \"%s\": %s", request_operation_name(request), request->desc.name, reason);
    pending_finish(pending, request, status, message ? message : reason);
    free(message);
}

void pending_fail_all(struct pending *pending, chorus_status status, const char *reason)
{
    struct chorus_context *context = pending->context;
    pending_refuse_submissions(pending, status, reason);
    pthread_mutex_lock(&context->lock);
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    struct chorus_handle *join_handle = context->join_handle;
    context->join_handle = NULL;
    pthread_mutex_unlock(&context->lock);

    /* Those still queued, then the ordered ones taken, then the negotiated ones by name. */
    struct request *unfiled = queued;
    if (pending->ordered_tail != NULL) {
        pending->ordered_tail->next = unfiled;
        unfiled = pending->ordered_head;
    }
    pending->ordered_head = pending->ordered_tail = NULL;
    while (unfiled != NULL) {
        struct request *next = unfiled->next;
        fail_one(pending, unfiled, status, reason);
        unfiled = next;
    }
    for (size_t b = 0; b < pending->table.bucket_count; b++) {
        struct name_entry *entry = pending->table.buckets[b];
        while (entry != NULL) {
            struct name_entry *next = entry->next;
            fail_one(pending, entry->value, status, reason);
            entry = next;
        }
    }
    name_table_destroy(&pending->table);
    name_table_init(&pending->table);
    if (join_handle != NULL)
        handle_member_done(join_handle, status, "join: %s", reason);
}

/* ----- taking submissions ----------------------------------------------------------------- */

bool pending_queue_unsent(struct pending *pending, const struct response_cache *cache,
                          const struct wire_request *request)
{
    if (pending->unsent_count == pending->unsent_capacity) {
        size_t capacity = pending->unsent_capacity ? pending->unsent_capacity * 2 : 64;
        struct wire_request *grown = realloc(pending->unsent, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        pending->unsent = grown;
        pending->unsent_capacity = capacity;
    }
    struct wire_request *entry = &pending->unsent[pending->unsent_count];
    if (!wire_request_copy(entry, request))
        return false;
    pending->unsent_count++;
    /* A description the cache holds travels as its slot number. */
    long slot = pending->rank == 0 ? -1 : response_cache_find(cache, request);
    if (slot >= 0) {
        entry->cached = true;
        entry->cache_slot = (uint32_t)slot;
    }
    return true;
}

struct request *pending_take_submissions(struct pending *pending, uint32_t *raised)
{
    struct chorus_context *context = pending->context;
    pthread_mutex_lock(&context->lock);
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    bool shutdown = context->shutdown_requested && !pending->shutdown_sent;
    bool join = context->join_requested && !pending->join_sent;
    pthread_mutex_unlock(&context->lock);
    *raised = 0;
    if (shutdown) {
        *raised |= WIRE_FLAG_SHUTDOWN;
        pending->shutdown_sent = true;
    }
    if (join) {
        *raised |= WIRE_FLAG_JOIN;
        pending->join_sent = true;
    }
    pending->unsent_flags |= *raised;
    struct request *taken = NULL, **tail = &taken;
    while (queued != NULL) {
        struct request *next = queued->next;
        queued->next = NULL;
        if (queued->ordered) {
            if (pending->ordered_tail != NULL)
                pending->ordered_tail->next = queued;
            else
                pending->ordered_head = queued;
            pending->ordered_tail = queued;
        } else if (name_table_insert(&pending->table, request_name_set(&queued->desc),
                                     queued->desc.name, queued)) {
            *tail = queued;
            tail = &queued->next;
        } else {
            pending_finish(pending, queued, CHORUS_ERR_OUT_OF_MEMORY,
                           "out of memory in the background thread");
        }
        queued = next;
    }
    return taken;
}

struct request *pending_next_ordered(struct pending *pending)
{
    struct request *request = pending->ordered_head;
    if (request == NULL)
        return NULL;
    pending->ordered_head = request->next;
    if (pending->ordered_head == NULL)
        pending->ordered_tail = NULL;
    request->next = NULL;
    return request;
}

void pending_keep_ordered(struct pending *pending, struct request *request)
{
    request->next = pending->ordered_head;
    pending->ordered_head = request;
    if (pending->ordered_tail == NULL)
        pending->ordered_tail = request;
}

void pending_clear_unsent(struct pending *pending)
{
    for (size_t i = 0; i < pending->unsent_count; i++)
        wire_request_free(&pending->unsent[i]);
    pending->unsent_count = 0;
    pending->unsent_flags = 0;
}
