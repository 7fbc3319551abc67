/*
 * requests.c — the background thread's side of the requests: taking the user threads'
 * submissions into its tables, completing their handles, and failing every one of them when
 * chorus must stop. Both the thread's loop (background.c) and the messages (exchange.c) use it;
 * it uses neither.
 */
#include "background.h"

#include "../core/log.h"
#include "../core/timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ----- completing handles ----------------------------------------------------------------- */

void finish_request(void *owner, struct request *request, chorus_status status,
                    const char *message)
{
    struct background *background = owner;
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    name_table_remove(&context->in_flight, request->desc.name);
    pthread_mutex_unlock(&context->lock);
    if (status == CHORUS_OK)
        handle_member_done(request->handle, CHORUS_OK, NULL);
    else
        handle_member_done(request->handle, status, "%s", message ? message : "");
    request_free(request);
}

struct request *take_request(void *owner, const char *name)
{
    struct background *background = owner;
    return name_table_remove(&background->pending, name);
}

void join_done(void *owner, int last_rank)
{
    struct background *background = owner;
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    context->last_joined_rank = last_rank;
    struct chorus_handle *handle = context->join_handle;
    context->join_handle = NULL;
    context->join_requested = false;
    pthread_mutex_unlock(&context->lock);
    background->join_sent = false;
    if (handle != NULL)
        handle_member_done(handle, CHORUS_OK, NULL);
}

/* From now on submits fail with `status` and `reason` (the first reason stays). */
static void refuse_submissions(struct chorus_context *context, chorus_status status,
                               const char *reason)
{
    pthread_mutex_lock(&context->lock);
    if (atomic_load(&context->stopped) == CHORUS_OK) {
        snprintf(context->stopped_message, sizeof context->stopped_message, "%s", reason);
        atomic_store(&context->stopped, status);
    }
    pthread_mutex_unlock(&context->lock);
}

void executor_fatal_error(void *owner, chorus_status status, const char *message)
{
    struct background *background = owner;
    refuse_submissions(background->context, status, message);
}

void fail_everything(struct background *background, chorus_status status,
                     const char *reason)
{
    struct chorus_context *context = background->context;
    refuse_submissions(context, status, reason);
    pthread_mutex_lock(&context->lock);
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    struct chorus_handle *join_handle = context->join_handle;
    context->join_handle = NULL;
    pthread_mutex_unlock(&context->lock);

    while (queued != NULL) {
        struct request *next = queued->next;
        name_table_insert(&background->pending, queued->desc.name, queued);
        queued = next;
    }
    for (size_t b = 0; b < background->pending.bucket_count; b++) {
        struct name_entry *entry = background->pending.buckets[b];
        while (entry != NULL) {
            struct name_entry *next = entry->next;
            struct request *request = entry->value;
            char *message =
                format_string("%s \"%s\": %s", request_collective_name(&request->desc),
                              request->desc.name, reason);
            finish_request(background, request, status, message ? message : reason);
            free(message);
            entry = next;
        }
    }
    name_table_destroy(&background->pending);
    name_table_init(&background->pending);
    if (join_handle != NULL)
        handle_member_done(join_handle, status, "join: %s", reason);
}

#define ABORT_GRACE_NANOSECONDS (200 * 1000 * 1000)

void fatal(struct background *background, chorus_status status, const char *what)
{
    LOG(LOG_ERROR, "background", "%s", what);
    executor_abort(&background->executor, status, what);
    process_sets_abort(background, status, what);
    fail_everything(background, status, what);
    background->finished = true;
    if (background->context->params.values.abort_on_failure) {
        LOG(LOG_ERROR, "background", "ending the job with MPI_Abort (CHORUS_ABORT_ON_FAILURE)");
        /* A moment for the application's threads, woken with the error, to report it. */
        nanosleep(&(struct timespec){.tv_nsec = ABORT_GRACE_NANOSECONDS}, NULL);
        MPI_Abort(background->context->user_comm, 1);
    }
}

/* ----- taking submissions ----------------------------------------------------------------- */

bool queue_unsent(struct background *background, const struct wire_request *request)
{
    if (background->unsent_count == background->unsent_capacity) {
        size_t capacity = background->unsent_capacity ? background->unsent_capacity * 2 : 64;
        struct wire_request *grown = realloc(background->unsent, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        background->unsent = grown;
        background->unsent_capacity = capacity;
    }
    struct wire_request *entry = &background->unsent[background->unsent_count];
    if (!wire_request_copy(entry, request))
        return false;
    background->unsent_count++;
    /* A description the cache holds travels as its slot number. */
    long slot = background->rank == 0 ? -1 : response_cache_find(&background->cache, request);
    if (slot >= 0) {
        entry->cached = true;
        entry->cache_slot = (uint32_t)slot;
    }
    return true;
}

/* Moves the user threads' submissions into this thread's tables. Returns true if any. */
bool take_submissions(struct background *background)
{
    struct chorus_context *context = background->context;
    pthread_mutex_lock(&context->lock);
    struct request *queued = context->queue_head;
    context->queue_head = context->queue_tail = NULL;
    bool shutdown = context->shutdown_requested && !background->shutdown_sent;
    bool join = context->join_requested && !background->join_sent;
    /* Marks made before a switch belong to the timeline being switched from. */
    struct timeline *marked = background->executor.timeline;
    struct timeline_mark *marks = context->marks_head;
    context->marks_head = context->marks_tail = NULL;
    bool switched = context->timeline_switch_pending;
    if (switched) {
        adopt_timeline(background, context->timeline_switch);
        context->timeline_switch_pending = false;
        pthread_cond_broadcast(&context->timeline_switched);
    }
    pthread_mutex_unlock(&context->lock);
    while (marks != NULL) {
        struct timeline_mark *next = marks->next;
        timeline_span(marked, marks->row, marks->label, marks->start, marks->end,
                      "\"source\": \"chorus_timeline_mark\"");
        timeline_mark_free(marks);
        marks = next;
    }
    if (switched)
        timeline_close(marked);
    bool any = queued != NULL || shutdown || join;
    while (queued != NULL) {
        struct request *next = queued->next;
        queued->next = NULL;
        if (!name_table_insert(&background->pending, queued->desc.name, queued) ||
            (!rounds_take(background, &queued->desc) && !queue_unsent(background, &queued->desc))) {
            finish_request(background, queued, CHORUS_ERR_OUT_OF_MEMORY,
                           "out of memory in the background thread");
        }
        queued = next;
    }
    if (shutdown) {
        background->unsent_flags |= WIRE_FLAG_SHUTDOWN;
        background->shutdown_sent = true;
    }
    if (join) {
        background->unsent_flags |= WIRE_FLAG_JOIN;
        background->join_sent = true;
        background->executor.joined = true;
        background->rounds.joined = background->rounds_mode;
    }
    return any;
}

void clear_unsent(struct background *background)
{
    for (size_t i = 0; i < background->unsent_count; i++)
        wire_request_free(&background->unsent[i]);
    background->unsent_count = 0;
    background->unsent_flags = 0;
}

