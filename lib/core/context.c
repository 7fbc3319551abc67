/*
 * context.c — making and freeing a chorus instance's context (context.h): its lock and
 * condition variables, tables and counters. chorus_init makes one per instance; the
 * coordinator's unit test makes one per simulated rank.
 */
#include "context.h"

#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct chorus_context *context_create(MPI_Comm user_comm)
{
    struct chorus_context *context = calloc(1, sizeof *context);
    if (context == NULL)
        return NULL;
    context->user_comm = user_comm;
    context->control_comm = MPI_COMM_NULL;
    context->data_comm = MPI_COMM_NULL;
    context->transfer_comm = MPI_COMM_NULL;
    pthread_mutex_init(&context->lock, NULL);
    pthread_mutex_init(&context->coordinator_turn, NULL);
    /* Timed waits count on the monotonic clock, which no change of the date moves. */
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&context->wakeup, &attributes);
    pthread_cond_init(&context->timeline_switched, &attributes);
    pthread_condattr_destroy(&attributes);
    pthread_cond_init(&context->started, NULL);
    name_table_init(&context->in_flight);
    atomic_init(&context->stopped, CHORUS_OK);
    atomic_init(&context->barriers, 0);
    atomic_init(&context->timeline_work, false);
    atomic_init(&context->join_requested, false);
    atomic_init(&context->job_lane, NULL);
    atomic_init(&context->job_lane_users, 0);
    atomic_init(&context->user_failure, CHORUS_OK);
    atomic_init(&context->driven_at, 0.0);
    context->last_joined_rank = -1;
    return context;
}

void context_report_failure(struct chorus_context *context, chorus_status status,
                            const char *message)
{
    pthread_mutex_lock(&context->lock);
    if (atomic_load(&context->user_failure) == CHORUS_OK) {
        snprintf(context->user_failure_message, sizeof context->user_failure_message, "%s",
                 message);
        atomic_store(&context->user_failure, status);
    }
    pthread_cond_signal(&context->wakeup);
    pthread_mutex_unlock(&context->lock);
}

void context_free(struct chorus_context *context)
{
    if (context == NULL)
        return;
    name_table_destroy(&context->in_flight);
    process_set_table_destroy(&context->process_sets);
    free(context->host_names);
    while (context->marks_head != NULL) {
        struct timeline_mark *next = context->marks_head->next;
        timeline_mark_free(context->marks_head);
        context->marks_head = next;
    }
    pthread_mutex_destroy(&context->lock);
    pthread_mutex_destroy(&context->coordinator_turn);
    pthread_cond_destroy(&context->wakeup);
    pthread_cond_destroy(&context->started);
    pthread_cond_destroy(&context->timeline_switched);
    free(context);
}
