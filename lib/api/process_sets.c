/*
 * process_sets.c — chorus_process_set_add, _remove and _ranks. Adds and removes are requests of
 * their own (COLLECTIVE_PROCESS_SET), negotiated like tensors; the background thread changes
 * the sets (lib/coordinator/process_sets.c) and completes the call's handle.
 */
#include "instance.h"
#include "shorthands.h"

#include "../core/context.h"
#include "../core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An add (`ranks`) or a remove (`remove_id`, with no ranks): negotiated like a tensor, so that
 * every rank changes its sets at the same point of the order of collectives. */
static chorus_status change_process_sets(const char *call, const int *ranks, int count,
                                         int remove_id, int *added_id)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized(call);
    char why[256];
    chorus_status status = CHORUS_OK;
    /* Refused here, before every rank would run the change and fail on it (runner.c). */
    if (context->links != NULL)
        status = REJECT(CHORUS_ERR_NOT_SUPPORTED,
                        "%s: process sets need MPI, and chorus runs on a world without it (over "
                        "UCX)",
                        call);
    else if (ranks != NULL &&
             !process_set_check_ranks(ranks, count, context->size, why, sizeof why))
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: %s", call, why);
    if (status == CHORUS_OK && ranks == NULL) {
        pthread_mutex_lock(&context->lock);
        bool exists = process_set_find(&context->process_sets, remove_id) != NULL;
        pthread_mutex_unlock(&context->lock);
        if (remove_id == 0)
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "%s: process set 0 is every rank; it cannot be removed", call);
        else if (!exists)
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "%s: process set %d does not exist (never added, or removed)", call,
                            remove_id);
    }
    struct chorus_handle *handle = NULL;
    struct request *request = NULL;
    int result = 0;
    if (status == CHORUS_OK) {
        handle = handle_create(CHORUS_ALLREDUCE, 1);
        request = calloc(1, sizeof *request);
        char name[64];
        snprintf(name, sizeof name, "chorus.process_set.change.%lu",
                 atomic_fetch_add(&context->set_changes, 1));
        if (request != NULL) {
            request->desc.name = strdup(name);
            request->desc.group = strdup("");
            request->desc.group_size = 1;
            request->desc.collective = COLLECTIVE_PROCESS_SET;
            request->desc.device = DEVICE_HOST;
            request->desc.process_set = ranks != NULL ? 0 : remove_id;
            request->desc.member_count = ranks != NULL ? (uint32_t)count : 0;
            request->desc.members =
                ranks != NULL ? malloc((size_t)count * sizeof *request->desc.members) : NULL;
            if (request->desc.members != NULL)
                memcpy(request->desc.members, ranks, (size_t)count * sizeof *ranks);
            request->output = &result; /* the new set's id; this call waits for it */
            request->handle = handle;
            request->submitted_at = clock_seconds();
        }
        if (handle == NULL || request == NULL || request->desc.name == NULL ||
            request->desc.group == NULL || (ranks != NULL && request->desc.members == NULL))
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
        else
            status = api_enqueue_requests(context, &request, 1, true);
    }
    api_instance_release();
    if (status != CHORUS_OK) {
        api_discard_submission(request, handle, status);
        return status;
    }
    status = api_handle_wait_and_free(handle, NULL, NULL);
    if (status == CHORUS_OK && added_id != NULL)
        *added_id = result;
    return status;
}

chorus_status chorus_process_set_add(const int *ranks, int count, int *process_set)
{
    if (process_set == NULL || ranks == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "chorus_process_set_add: ranks and process_set must not be NULL");
    *process_set = -1;
    return change_process_sets("chorus_process_set_add", ranks, count, 0, process_set);
}

chorus_status chorus_process_set_remove(int process_set)
{
    return change_process_sets("chorus_process_set_remove", NULL, 0, process_set, NULL);
}

chorus_status chorus_process_set_ranks(int process_set, int *ranks, int capacity, int *count)
{
    if (count == NULL || (ranks == NULL && capacity > 0) || capacity < 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "chorus_process_set_ranks: count must not be NULL, and ranks must hold "
                      "capacity entries");
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_process_set_ranks");
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, process_set);
    if (process_set == 0) {
        *count = context->size;
        for (int r = 0; r < capacity && r < context->size; r++)
            ranks[r] = r;
    } else if (set == NULL) {
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "chorus_process_set_ranks: process set %d does not exist (never added, "
                        "or removed)",
                        process_set);
    } else {
        *count = set->size;
        for (int m = 0; m < capacity && m < set->size; m++)
            ranks[m] = set->ranks[m];
    }
    pthread_mutex_unlock(&context->lock);
    api_instance_release();
    return status;
}
