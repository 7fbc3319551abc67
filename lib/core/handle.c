/*
 * handle.c — handles: completion, waiting, freeing. A waiter polls the atomic status briefly
 * (a small allreduce completes in microseconds), then sleeps on the condition variable.
 * A handle freed while in progress is marked abandoned and freed by the background thread when
 * it completes, so exactly one side frees it.
 */
#include "handle.h"

#include "log.h"
#include "request.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A handle of one member that this thread freed, kept for its next submit: a training loop
 * submits, waits and frees one handle at a time, and its allocation, lock and condition
 * variable are then made once per thread rather than once per operation (an 8-byte ordered
 * allreduce costs about 0.2 us in all on one rank, of which these were a fifth). A key, set
 * once per thread, frees it when the thread ends. */
static _Thread_local struct chorus_handle *spare;
static _Thread_local bool spare_watched;
static pthread_key_t spare_key;
static pthread_once_t spare_key_once = PTHREAD_ONCE_INIT;

static void handle_free_memory(struct chorus_handle *handle)
{
    pthread_mutex_destroy(&handle->lock);
    pthread_cond_destroy(&handle->completed);
    free(handle);
}

/* At the end of a thread that kept a spare (the key's value only marks it). */
static void spare_release(void *marker)
{
    (void)marker;
    if (spare != NULL)
        handle_free_memory(spare);
    spare = NULL;
}

static void spare_key_create(void)
{
    pthread_key_create(&spare_key, spare_release);
}

/* Keeps `handle` (done with, its outputs released) as this thread's spare; false when the
 * thread already has one. */
static bool spare_keep(struct chorus_handle *handle)
{
    if (spare != NULL)
        return false;
    if (!spare_watched) {
        pthread_once(&spare_key_once, spare_key_create);
        pthread_setspecific(spare_key, &spare_watched);
        spare_watched = true;
    }
    spare = handle;
    return true;
}

static struct chorus_handle *spare_take(void)
{
    struct chorus_handle *handle = spare;
    spare = NULL;
    return handle;
}

/* A new in-progress handle waiting for `members` requests, its kind for the caller to set. */
static struct chorus_handle *handle_new(size_t members)
{
    struct chorus_handle *handle = members <= 1 ? spare_take() : NULL;
    if (handle != NULL) { /* its lock and condition variable stay as they are */
        handle->abandoned = false;
        handle->message = NULL;
        handle->single = (struct handle_output){0};
        handle->received_splits = NULL;
        handle->received_count = 0;
    } else {
        handle = calloc(1, sizeof *handle);
        if (handle == NULL)
            return NULL;
        pthread_mutex_init(&handle->lock, NULL);
        pthread_cond_init(&handle->completed, NULL);
    }
    handle->magic = HANDLE_MAGIC;
    atomic_init(&handle->status, CHORUS_IN_PROGRESS);
    handle->members_pending = members;
    handle->first_error = CHORUS_OK;
    handle->source = -1;
    handle->in_flight_count = NULL;
    handle->output_count = members > 0 ? members : 1;
    handle->outputs = handle->output_count == 1
                          ? &handle->single
                          : calloc(handle->output_count, sizeof *handle->outputs);
    if (handle->outputs == NULL) {
        handle_free_memory(handle);
        return NULL;
    }
    return handle;
}

struct chorus_handle *handle_create(int collective, size_t members)
{
    struct chorus_handle *handle = handle_new(members);
    if (handle != NULL) {
        handle->kind = REQUEST_COLLECTIVE;
        handle->collective = collective;
    }
    return handle;
}

struct chorus_handle *handle_create_transfer(enum transfer_direction direction)
{
    struct chorus_handle *handle = handle_new(1);
    if (handle != NULL) {
        handle->kind = REQUEST_TRANSFER;
        handle->collective = -1; /* none */
        handle->direction = direction;
    }
    return handle;
}

static const char *handle_operation_name(const struct chorus_handle *handle)
{
    return request_kind_name(handle->kind, handle->collective, handle->direction);
}

/* "a" or "an", as the handle's operation's name needs. */
static const char *handle_article(const struct chorus_handle *handle)
{
    return strchr("aeiou", handle_operation_name(handle)[0]) != NULL ? "an" : "a";
}

/* Whether the handle is one of collective `collective`. */
static bool handle_is_collective(const struct chorus_handle *handle, int collective)
{
    return handle->kind == REQUEST_COLLECTIVE && handle->collective == collective;
}

static void handle_destroy(struct chorus_handle *handle)
{
    for (size_t m = 0; m < handle->output_count; m++) {
        struct handle_output *output = &handle->outputs[m];
        if (output->owned && output->tensor.data != NULL)
            output->release(output->tensor.data, output->capacity);
    }
    bool single = handle->outputs == &handle->single;
    if (!single)
        free(handle->outputs);
    free(handle->message);
    free(handle->received_splits);
    /* volatile: a plain store just before free() is dropped by the compiler as dead. */
    *(volatile uint32_t *)&handle->magic = 0;
    if (!single || !spare_keep(handle))
        handle_free_memory(handle);
}

void handle_set_output(struct chorus_handle *handle, size_t member, const chorus_tensor *output,
                       output_release release, size_t capacity)
{
    if (member >= handle->output_count)
        return;
    handle->outputs[member] = (struct handle_output){*output, release != NULL, capacity, release};
}

void handle_set_received_splits(struct chorus_handle *handle, int64_t *splits, size_t count)
{
    free(handle->received_splits);
    handle->received_splits = splits;
    handle->received_count = count;
}

void handle_member_done(struct chorus_handle *handle, chorus_status status, const char *format,
                        ...)
{
    if (status != CHORUS_OK && handle->first_error == CHORUS_OK) {
        handle->first_error = status;
        if (format != NULL) {
            va_list args;
            va_start(args, format);
            handle->message = text_format_va(format, args);
            va_end(args);
        }
    }
    if (--handle->members_pending > 0)
        return;
    /* Counted down once the status is out, so that a thread that sees the count drop finds the
     * handle complete. */
    _Atomic long *in_flight_count = handle->in_flight_count;
    pthread_mutex_lock(&handle->lock);
    atomic_store_explicit(&handle->status, handle->first_error, memory_order_release);
    if (handle->abandoned) {
        pthread_mutex_unlock(&handle->lock);
        handle_destroy(handle);
    } else {
        pthread_cond_broadcast(&handle->completed);
        pthread_mutex_unlock(&handle->lock);
    }
    if (in_flight_count != NULL)
        atomic_fetch_sub_explicit(in_flight_count, 1, memory_order_release);
}

void handle_finish_unpublished(struct chorus_handle *handle, chorus_status status,
                               char *message)
{
    handle->members_pending = 0;
    handle->first_error = status;
    if (status != CHORUS_OK && message == NULL)
        message = text_format("%s", chorus_status_name(status));
    if (status != CHORUS_OK)
        handle->message = message;
    else
        free(message);
    atomic_store_explicit(&handle->status, status, memory_order_release);
}

chorus_status chorus_test(const chorus_handle *handle)
{
    if (handle == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_test: handle is NULL");
    return atomic_load_explicit(&handle->status, memory_order_acquire);
}

/* How long a waiter polls before it sleeps: it spins briefly, then yields the core between polls
 * for up to WAIT_YIELD_SECONDS. Yielding lets the background thread of the same rank run when the
 * cores are shared, and a woken sleeper costs a futex wake plus a trip through the scheduler.
 * Measured with chorus-bench on the 2-core development VM, np=2, 4 interleaved rounds
 * (2026-11-22, medians): an 8-byte allreduce took 13 us when waiters slept after 20 polls, 7 us
 * yielding for up to 50 us; a 1 MiB allgather 74 against 54 us. Yielding for up to 200 us was
 * no faster there but made a step of 100 fused tiny broadcasts slower (260-380 against 125-190
 * us; 144-188 us with 50), because waiting user threads then compete with both ranks'
 * background threads for the two cores. */
#define WAIT_SPINS 20
#define WAIT_YIELD_SECONDS 50e-6

chorus_status handle_wait(chorus_handle *handle)
{
    for (int spin = 0; spin < WAIT_SPINS; spin++) {
        int status = atomic_load_explicit(&handle->status, memory_order_acquire);
        if (status != CHORUS_IN_PROGRESS)
            return status;
    }
    double give_up = clock_seconds() + WAIT_YIELD_SECONDS;
    do {
        int status = atomic_load_explicit(&handle->status, memory_order_acquire);
        if (status != CHORUS_IN_PROGRESS)
            return status;
        sched_yield();
    } while (clock_seconds() < give_up);
    pthread_mutex_lock(&handle->lock);
    while (atomic_load_explicit(&handle->status, memory_order_acquire) == CHORUS_IN_PROGRESS)
        pthread_cond_wait(&handle->completed, &handle->lock);
    pthread_mutex_unlock(&handle->lock);
    return atomic_load_explicit(&handle->status, memory_order_acquire);
}

const char *chorus_handle_error(const chorus_handle *handle)
{
    if (handle == NULL)
        return "handle is NULL";
    if (atomic_load_explicit(&handle->status, memory_order_acquire) == CHORUS_IN_PROGRESS)
        return "";
    return handle->message ? handle->message : "";
}

chorus_status chorus_handle_output_at(const chorus_handle *handle, size_t member,
                                      chorus_tensor *output)
{
    if (handle == NULL || output == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_output: handle and output must not be NULL");
    chorus_status status = atomic_load_explicit(&handle->status, memory_order_acquire);
    if (status != CHORUS_OK)
        return status;
    if (!handle_is_collective(handle, CHORUS_ALLGATHER) &&
        !handle_is_collective(handle, CHORUS_REDUCESCATTER) &&
        !handle_is_collective(handle, CHORUS_ALLTOALL))
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_output: the handle is %s %s, not an allgather, a "
                              "reducescatter or an alltoall",
                              handle_article(handle), handle_operation_name(handle));
    if (member >= handle->output_count)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_output: member %zu of a handle of %zu", member,
                              handle->output_count);
    *output = handle->outputs[member].tensor;
    return CHORUS_OK;
}

chorus_status chorus_handle_output(const chorus_handle *handle, chorus_tensor *output)
{
    return chorus_handle_output_at(handle, 0, output);
}

chorus_status chorus_handle_take_output_at(chorus_handle *handle, size_t member,
                                           chorus_tensor *output)
{
    chorus_status status = chorus_handle_output_at(handle, member, output);
    if (status == CHORUS_OK)
        handle->outputs[member].owned = false;
    return status;
}

chorus_status chorus_handle_take_output(chorus_handle *handle, chorus_tensor *output)
{
    return chorus_handle_take_output_at(handle, 0, output);
}

int chorus_handle_source(const chorus_handle *handle)
{
    if (handle == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_handle_source: handle is NULL");
    chorus_status status = atomic_load_explicit(&handle->status, memory_order_acquire);
    if (status != CHORUS_OK)
        return status;
    if (handle->kind != REQUEST_TRANSFER || handle->direction != TRANSFER_RECEIVE)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_handle_source: the handle is %s %s, not a receive",
                                     handle_article(handle), handle_operation_name(handle));
    return handle->source;
}

chorus_status chorus_handle_received_splits(const chorus_handle *handle, int64_t *splits,
                                            size_t capacity)
{
    if (handle == NULL || splits == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_received_splits: handle and splits must not be NULL");
    chorus_status status = atomic_load_explicit(&handle->status, memory_order_acquire);
    if (status != CHORUS_OK)
        return status;
    if (!handle_is_collective(handle, CHORUS_ALLTOALL))
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_received_splits: the handle is %s %s, not an alltoall",
                              handle_article(handle), handle_operation_name(handle));
    if (capacity < handle->received_count)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_handle_received_splits: room for %zu entries; there are %zu "
                              "ranks",
                              capacity, handle->received_count);
    memcpy(splits, handle->received_splits, handle->received_count * sizeof *splits);
    return CHORUS_OK;
}

void chorus_handle_free(chorus_handle *handle)
{
    if (handle == NULL)
        return;
    if (handle->magic != HANDLE_MAGIC) {
        LOG(LOG_ERROR, "handle", "chorus_handle_free: %p is not a live handle (freed twice?)",
            (void *)handle);
        return;
    }
    pthread_mutex_lock(&handle->lock);
    if (handle->abandoned) {
        pthread_mutex_unlock(&handle->lock);
        LOG(LOG_ERROR, "handle", "chorus_handle_free: %p was already freed", (void *)handle);
        return;
    }
    if (atomic_load_explicit(&handle->status, memory_order_acquire) == CHORUS_IN_PROGRESS) {
        handle->abandoned = true;
        pthread_mutex_unlock(&handle->lock);
        return;
    }
    pthread_mutex_unlock(&handle->lock);
    handle_destroy(handle);
}
