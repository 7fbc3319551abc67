/*
 * runner.c — see runner.h. Every rank runs the same responses in the same order; a rank skips
 * the collectives of sets it is not a member of, so the members of a set run its collectives
 * in one order among themselves, and a set's members never wait for ranks outside it.
 */
#include "runner.h"

#include "../core/log.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct set_executor *find_set_executor(const struct runner *runner, int id)
{
    for (size_t i = 0; i < runner->set_executor_count; i++)
        if (runner->set_executors[i]->id == id)
            return runner->set_executors[i];
    return NULL;
}

/* Opens the lane of `executor`, the job's or set `id`'s over `comm` (member m is job rank
 * ranks[m]; NULL: m), where it has one rank or its ranks all share this host (one segment, no
 * other hosts): over MPI (collective over the set), or over local slots for one rank. Without
 * one its ordered operations run on the background thread, as across hosts. */
static struct lane *open_lane(struct runner *runner, struct executor *executor, int id,
                              const int *ranks, MPI_Comm comm)
{
    struct chorus_context *context = runner->context;
    const struct chorus_params *params = &context->params.values;
    if (executor->nranks == 1)
        return lane_create(context, id, 1, ranks, NULL, params->small_limit,
                           params->timeout_seconds);
    if (!executor->node_ready || executor->node.cross != NULL)
        return NULL;
    char why[256] = "";
    struct lane *lane = lane_open_mpi(context, id, ranks, &comm, &executor->node_comm,
                                      executor->settings, context->mpi_thread_multiple, why,
                                      sizeof why);
    if (lane == NULL)
        LOG(LOG_WARNING, "lane", "process set %d: %s; its ordered operations run on the "
            "background thread", id, why);
    return lane;
}

void runner_open_job_lane(struct runner *runner)
{
    runner->lane = open_lane(runner, &runner->executor, 0, NULL, runner->context->data_comm);
    atomic_store(&runner->context->job_lane, runner->lane);
}

/* Withdraws set `id`'s lane from the user threads, who enter it through the set's entry. */
static void withdraw_set_lane(struct runner *runner, int id)
{
    struct chorus_context *context = runner->context;
    pthread_mutex_lock(&context->lock);
    process_set_table_set_lane(&context->process_sets, id, NULL);
    pthread_mutex_unlock(&context->lock);
}

static void set_executor_free(struct set_executor *set, bool aborted)
{
    lane_destroy(set->lane, aborted);
    executor_release(&set->executor);
    /* After a fatal error, transfers given up on may still refer to the communicators. (A
     * user's transfer still in flight keeps its communicator alive in MPI until it ends.) */
    if (!aborted) {
        MPI_Comm_free(&set->comm);
        if (set->transfer_comm != MPI_COMM_NULL)
            MPI_Comm_free(&set->transfer_comm);
    }
    free(set);
}

/* Every rank: makes the set rank 0 agreed to add (its id in the response), with a
 * communicator of its members. Collective over the data communicator. */
static chorus_status add_set(struct runner *runner, const struct wire_request *agreed,
                             char *error, size_t error_size)
{
    struct chorus_context *context = runner->context;
    const int *members = agreed->members;
    int size = (int)agreed->member_count;
    bool member = false;
    for (int i = 0; i < size; i++)
        member |= members[i] == runner->executor.rank;
    if (context->links != NULL) {
        snprintf(error, error_size,
                 "adding process set %d: process sets need MPI, and this world has none",
                 agreed->process_set);
        return CHORUS_ERR_NOT_SUPPORTED;
    }
    MPI_Comm comm = MPI_COMM_NULL;
    if (MPI_Comm_split(context->data_comm, member ? 0 : MPI_UNDEFINED, runner->executor.rank,
                       &comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "adding process set %d: MPI_Comm_split failed",
                 agreed->process_set);
        return CHORUS_ERR_MPI;
    }
    if (member) {
        struct set_executor *set = calloc(1, sizeof *set);
        struct set_executor **grown =
            realloc(runner->set_executors,
                    (runner->set_executor_count + 1) * sizeof *runner->set_executors);
        if (grown != NULL)
            runner->set_executors = grown;
        if (set == NULL || grown == NULL) {
            free(set);
            MPI_Comm_free(&comm);
            snprintf(error, error_size, "adding process set %d: out of memory",
                     agreed->process_set);
            return CHORUS_ERR_OUT_OF_MEMORY;
        }
        set->id = agreed->process_set;
        set->comm = comm;
        set->transfer_comm = MPI_COMM_NULL;
        if (MPI_Comm_dup(comm, &set->transfer_comm) != MPI_SUCCESS) {
            MPI_Comm_free(&comm);
            free(set);
            snprintf(error, error_size, "adding process set %d: MPI_Comm_dup failed",
                     agreed->process_set);
            return CHORUS_ERR_MPI;
        }
        int rank = 0;
        MPI_Comm_rank(comm, &rank);
        executor_init_for_set(&set->executor, &runner->executor, &set->comm, rank, size);
        runner->set_executors[runner->set_executor_count++] = set;
        /* Without the segment the set's collectives still run, over MPI. */
        char why[256] = "";
        if (executor_prepare_set(&set->executor, why, sizeof why) != CHORUS_OK)
            LOG(LOG_WARNING, "process sets", "set %d: %s; its collectives run over MPI alone",
                set->id, why);
    }
    struct set_executor *made = member ? find_set_executor(runner, agreed->process_set) : NULL;
    if (made != NULL)
        made->lane = open_lane(runner, &made->executor, made->id, members, made->comm);
    struct lane *lane = made != NULL ? made->lane : NULL;
    pthread_mutex_lock(&context->lock);
    bool recorded = process_set_table_add(&context->process_sets, agreed->process_set, members,
                                          size);
    if (recorded)
        process_set_table_set_lane(&context->process_sets, agreed->process_set, lane);
    pthread_mutex_unlock(&context->lock);
    if (!recorded) {
        snprintf(error, error_size, "adding process set %d: out of memory", agreed->process_set);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    LOG(LOG_DEBUG, "process sets", "added set %d of %d ranks%s", agreed->process_set, size,
        member ? ", this rank a member" : "");
    return CHORUS_OK;
}

static void remove_set(struct runner *runner, int id)
{
    struct chorus_context *context = runner->context;
    for (size_t i = 0; i < runner->set_executor_count; i++) {
        if (runner->set_executors[i]->id != id)
            continue;
        withdraw_set_lane(runner, id);
        set_executor_free(runner->set_executors[i], false);
        /* Kept in the order of their ids, alike on every member: freeing a set's host segment
         * is collective over its members (runner_release). */
        memmove(&runner->set_executors[i], &runner->set_executors[i + 1],
                (runner->set_executor_count - i - 1) * sizeof *runner->set_executors);
        runner->set_executor_count--;
        break;
    }
    pthread_mutex_lock(&context->lock);
    process_set_table_remove(&context->process_sets, id);
    pthread_mutex_unlock(&context->lock);
    LOG(LOG_DEBUG, "process sets", "removed set %d", id);
}

/* An add or a remove every rank submitted: made here, then the submitter's call returns (with
 * the new set's id). */
static chorus_status change_sets(struct runner *runner,
                                 const struct wire_response *response, char *error,
                                 size_t error_size)
{
    const struct wire_request *agreed = &response->request;
    chorus_status status = CHORUS_OK;
    if (agreed->member_count > 0)
        status = add_set(runner, agreed, error, error_size);
    else
        remove_set(runner, agreed->process_set);
    struct request *request = pending_take(runner->pending, agreed);
    if (request == NULL) {
        snprintf(error, error_size, "rank %d was told to make process set change \"%s\", which it "
                 "never submitted", runner->executor.rank, agreed->name);
        return CHORUS_ERR_PROTOCOL;
    }
    if (status == CHORUS_OK && request->output != NULL)
        *(int *)request->output = agreed->process_set;
    pending_finish(runner->pending, request, status, status == CHORUS_OK ? NULL : error);
    return status;
}

/* Where a response runs: -1 for a change of the sets, 0 for the job's executor, else the
 * process set whose collective it is. */
static int route_of(const struct wire_response *response)
{
    if (response->type != RESPONSE_EXECUTE)
        return 0; /* errors, joins and cached responses concern the job */
    if (response->request.collective == COLLECTIVE_PROCESS_SET)
        return -1;
    return response->request.process_set;
}

/* Runs consecutive responses of set `id` on its executor: broadcast roots become ranks of the
 * set. */
static chorus_status run_on_set(struct runner *runner, int id,
                                const struct wire_response *responses, size_t count,
                                struct request *const *taken, char *error, size_t error_size)
{
    struct set_executor *set = find_set_executor(runner, id);
    if (set == NULL)
        return CHORUS_OK; /* not a member */
    struct wire_response *translated = malloc(count * sizeof *translated);
    if (translated == NULL) {
        snprintf(error, error_size, "out of memory running process set %d", id);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    const struct process_set *members = NULL;
    pthread_mutex_lock(&runner->context->lock);
    members = process_set_find(&runner->context->process_sets, id);
    for (size_t i = 0; i < count; i++) {
        translated[i] = responses[i]; /* shallow: the strings stay the caller's */
        if (responses[i].request.collective == CHORUS_BROADCAST && members != NULL)
            translated[i].request.root = process_set_rank_of(members, responses[i].request.root);
    }
    pthread_mutex_unlock(&runner->context->lock);
    struct executor *executor = &set->executor;
    executor->joined = runner->executor.joined;
    executor->timeline = runner->executor.timeline;
    chorus_status status = executor_run(executor, translated, count, taken, error, error_size);
    free(translated);
    return status;
}

chorus_status runner_run(struct runner *runner, const struct wire_response *responses,
                         size_t count, struct request *const *taken, char *error,
                         size_t error_size)
{
    /* Without sets, everything is the job's: one run, fused as before. */
    chorus_status status = CHORUS_OK;
    size_t start = 0;
    while (status == CHORUS_OK && start < count) {
        int route = route_of(&responses[start]);
        size_t end = start + 1;
        while (route >= 0 && end < count && route_of(&responses[end]) == route)
            end++;
        if (route < 0)
            status = change_sets(runner, &responses[start], error, error_size);
        else if (route == 0)
            status = executor_run(&runner->executor, &responses[start], end - start,
                                  taken != NULL ? &taken[start] : NULL, error, error_size);
        else
            status = run_on_set(runner, route, &responses[start], end - start,
                                taken != NULL ? &taken[start] : NULL, error, error_size);
        start = end;
    }
    return status;
}

struct executor *runner_executor_of(struct runner *runner, int process_set)
{
    if (process_set == 0)
        return &runner->executor;
    struct set_executor *set = find_set_executor(runner, process_set);
    return set != NULL ? &set->executor : NULL;
}

MPI_Comm runner_transfer_comm(struct runner *runner, int process_set)
{
    if (process_set == 0)
        return runner->context->transfer_comm;
    struct set_executor *set = find_set_executor(runner, process_set);
    return set != NULL ? set->transfer_comm : MPI_COMM_NULL;
}

void runner_abort(struct runner *runner, chorus_status status, const char *reason)
{
    executor_abort(&runner->executor, status, reason);
    for (size_t i = 0; i < runner->set_executor_count; i++)
        executor_abort(&runner->set_executors[i]->executor, status, reason);
}

void runner_release(struct runner *runner)
{
    /* The lanes first: no user thread may be inside when their executors free them. */
    struct chorus_context *context = runner->context; /* NULL: start-up failed before it */
    if (context != NULL) {
        atomic_store(&context->job_lane, NULL);
        while (atomic_load(&context->job_lane_users) != 0)
            sched_yield();
    }
    for (size_t i = 0; i < runner->set_executor_count; i++)
        withdraw_set_lane(runner, runner->set_executors[i]->id);
    for (size_t i = 0; i < runner->set_executor_count; i++)
        set_executor_free(runner->set_executors[i], runner->executor.aborted);
    free(runner->set_executors);
    runner->set_executors = NULL;
    runner->set_executor_count = 0;
    lane_destroy(runner->lane, runner->executor.aborted);
    runner->lane = NULL;
    executor_release(&runner->executor);
}
