/*
 * api.c — the public entry points: init and shutdown, the timeline, topology queries, submit,
 * barrier and join (the checks of a submit are in validate.c, the shorthands in shorthands.c).
 * User threads only validate, enqueue and wait here; all communication happens on the
 * background thread (lib/coordinator/background.c).
 *
 * The current instance is guarded by a read-write lock: submits and queries hold it for
 * reading for the few microseconds they need the context, shutdown takes it for writing before
 * freeing the context, so no call ever sees a freed context.
 */
#include "shorthands.h"
#include "validate.h"

#include "../core/context.h"
#include "../core/log.h"
#include "../core/output_pool.h"
#include "../core/retained.h"
#include "../core/timeline.h"
#include "../coordinator/coordinator.h"

#include "../gpu/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static pthread_rwlock_t instance_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct chorus_context *instance;

static struct chorus_context *acquire(void)
{
    pthread_rwlock_rdlock(&instance_lock);
    if (instance == NULL) {
        pthread_rwlock_unlock(&instance_lock);
        return NULL;
    }
    return instance;
}

static void release(void)
{
    pthread_rwlock_unlock(&instance_lock);
}

static chorus_status not_initialized(const char *call)
{
    return set_last_error(CHORUS_ERR_NOT_INITIALIZED,
                          "%s: chorus is not initialized (call chorus_init first, and not after "
                          "chorus_shutdown)",
                          call);
}

static void context_free(struct chorus_context *context)
{
    name_table_destroy(&context->in_flight);
    process_set_table_destroy(&context->process_sets);
    free(context->host_names);
    while (context->marks_head != NULL) {
        struct timeline_mark *next = context->marks_head->next;
        timeline_mark_free(context->marks_head);
        context->marks_head = next;
    }
    pthread_mutex_destroy(&context->lock);
    pthread_cond_destroy(&context->wakeup);
    pthread_cond_destroy(&context->started);
    pthread_cond_destroy(&context->timeline_switched);
    free(context);
}

static chorus_status start_instance(MPI_Comm comm, const chorus_init_options *options,
                                    bool mpi_initialized_by_chorus)
{
    if (options != NULL && options->struct_size < sizeof(size_t))
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_init: options.struct_size is %zu; set it with "
                              "CHORUS_INIT_OPTIONS_INIT",
                              options->struct_size);
    const char *overrides = NULL;
    if (options != NULL && options->struct_size >= offsetof(chorus_init_options, parameters) +
                                                       sizeof options->parameters)
        overrides = options->parameters;
    struct chorus_context *context = calloc(1, sizeof *context);
    if (context == NULL)
        return set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "chorus_init: out of memory");
    context->user_comm = comm;
    context->control_comm = MPI_COMM_NULL;
    context->data_comm = MPI_COMM_NULL;
    context->mpi_initialized_by_chorus = mpi_initialized_by_chorus;
    pthread_mutex_init(&context->lock, NULL);
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
    context->last_joined_rank = -1;

    /* A malformed parameter is not reported here yet: the background thread first tells every
     * rank, so that all ranks fail init together instead of some waiting for the others. */
    context->params_status =
        params_load(&context->params, environ, overrides, context->params_message,
                    sizeof context->params_message);
    if (context->params_status == CHORUS_OK)
        log_set_level((enum log_level)context->params.values.log_level);

    if (pthread_create(&context->thread, NULL, background_main, context) != 0) {
        context_free(context);
        return set_last_error(CHORUS_ERR_INTERNAL,
                              "chorus_init: cannot start the background thread");
    }
    pthread_mutex_lock(&context->lock);
    while (!context->startup_finished)
        pthread_cond_wait(&context->started, &context->lock);
    chorus_status status = context->startup_status;
    pthread_mutex_unlock(&context->lock);
    if (status != CHORUS_OK) {
        pthread_join(context->thread, NULL);
        set_last_error(status, "chorus_init: %s", context->startup_message);
        context_free(context);
        return status;
    }
    if (context->params.unknown_variables[0] != '\0')
        LOG(LOG_WARNING, "params", "ignoring unknown variables: %s",
            context->params.unknown_variables);
    instance = context;
    LOG(LOG_INFO, "init",
        "rank %d of %d, local %d of %d, host %d of %d, %zu cores, %zu NUMA nodes",
        context->topology.rank, context->topology.size, context->topology.local_rank,
        context->topology.local_size, context->topology.cross_rank, context->topology.cross_size,
        context->topology.cores, context->topology.numa_nodes);
    clear_last_error();
    return CHORUS_OK;
}

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE:
        return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
        return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
        return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
        return "MPI_THREAD_MULTIPLE";
    }
    return "unknown";
}

static chorus_status init_on(MPI_Comm comm, const chorus_init_options *options, bool world)
{
    pthread_rwlock_wrlock(&instance_lock);
    chorus_status status = CHORUS_OK;
    if (instance != NULL) {
        status = set_last_error(CHORUS_ERR_ALREADY_INITIALIZED,
                                "chorus_init: chorus is already initialized");
        goto out;
    }
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
        status = set_last_error(CHORUS_ERR_MPI,
                                "chorus_init: MPI has already been finalized; MPI cannot be "
                                "initialized twice in one process");
        goto out;
    }
    bool ours = false;
    if (!initialized) {
        if (!world) {
            status = set_last_error(CHORUS_ERR_MPI,
                                    "chorus_init_comm: MPI is not initialized; initialize it "
                                    "with MPI_Init_thread(MPI_THREAD_MULTIPLE) first");
            goto out;
        }
        int provided = MPI_THREAD_SINGLE;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            status = set_last_error(CHORUS_ERR_MPI, "chorus_init: MPI_Init_thread failed");
            goto out;
        }
        ours = true;
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            status = set_last_error(
                CHORUS_ERR_MPI,
                "chorus_init: this MPI provides only %s; chorus's background thread needs at "
                "least MPI_THREAD_SERIALIZED",
                thread_level_name(provided));
            goto out;
        }
    } else {
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            status = set_last_error(
                CHORUS_ERR_MPI,
                "chorus_init: MPI was initialized with %s, but chorus calls MPI from its "
                "background thread while the application may call it too; initialize MPI with "
                "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)",
                thread_level_name(provided));
            goto out;
        }
    }
    status = start_instance(comm, options, ours);
    if (status != CHORUS_OK && ours)
        MPI_Finalize();
out:
    pthread_rwlock_unlock(&instance_lock);
    return status;
}

bool chorus_gpu_built(void)
{
    return gpu_compiled();
}

chorus_status chorus_init(const chorus_init_options *options)
{
    return init_on(MPI_COMM_WORLD, options, true);
}

chorus_status chorus_init_comm(MPI_Comm comm, const chorus_init_options *options)
{
    if (comm == MPI_COMM_NULL)
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_init_comm: communicator is MPI_COMM_NULL");
    return init_on(comm, options, false);
}

chorus_status chorus_shutdown(void)
{
    pthread_rwlock_wrlock(&instance_lock);
    struct chorus_context *context = instance;
    if (context == NULL) {
        pthread_rwlock_unlock(&instance_lock);
        return not_initialized("chorus_shutdown");
    }
    instance = NULL;
    pthread_rwlock_unlock(&instance_lock);
    pthread_mutex_lock(&context->lock);
    context->shutdown_requested = true;
    pthread_cond_broadcast(&context->wakeup);
    pthread_mutex_unlock(&context->lock);
    pthread_join(context->thread, NULL);
    bool finalize = context->mpi_initialized_by_chorus;
    context_free(context);
    output_pool_drain();
    if (finalize) {
        MPI_Finalize();
        retained_free_all();
    }
    clear_last_error();
    return CHORUS_OK;
}

bool chorus_is_initialized(void)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return false;
    release();
    return true;
}

/* Hands `timeline` (NULL: none) to the background thread and waits until it records into it. */
static chorus_status switch_timeline(struct chorus_context *context, struct timeline *timeline,
                                     const char *call)
{
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    if (context->timeline_switch_pending) {
        pthread_mutex_unlock(&context->lock);
        timeline_close(timeline);
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "%s: another thread is starting or stopping the timeline", call);
    }
    context->timeline_switch = timeline;
    context->timeline_switch_pending = true;
    pthread_cond_signal(&context->wakeup);
    while (context->timeline_switch_pending &&
           (status = (chorus_status)atomic_load(&context->stopped)) == CHORUS_OK) {
        struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, 0.1);
        pthread_cond_timedwait(&context->timeline_switched, &context->lock, &deadline);
    }
    bool taken_back = context->timeline_switch_pending;
    context->timeline_switch_pending = false;
    pthread_mutex_unlock(&context->lock);
    if (!taken_back)
        return CHORUS_OK;
    timeline_close(timeline);
    return set_last_error(status, "%s: %s", call, context->stopped_message);
}

chorus_status chorus_start_timeline(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_start_timeline: the path is NULL or empty");
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_start_timeline");
    chorus_status status = CHORUS_OK;
    if (context->rank == 0) {
        char error[4200] = "";
        struct timeline *timeline = timeline_open(path, error, sizeof error);
        status = timeline == NULL
                     ? set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_start_timeline: %s",
                                      error)
                     : switch_timeline(context, timeline, "chorus_start_timeline");
    }
    release();
    return status;
}

chorus_status chorus_stop_timeline(void)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_stop_timeline");
    chorus_status status =
        context->rank == 0 ? switch_timeline(context, NULL, "chorus_stop_timeline") : CHORUS_OK;
    release();
    return status;
}

chorus_status chorus_timeline_mark(const char *row, const char *label, double start_seconds,
                                  double end_seconds)
{
    if (row == NULL || row[0] == '\0' || label == NULL || label[0] == '\0')
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_timeline_mark: the row and the label must be non-empty");
    if (!isfinite(start_seconds) || !isfinite(end_seconds) || end_seconds < start_seconds)
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_timeline_mark(\"%s\", \"%s\"): the span from %.6f s to "
                              "%.6f s does not end after it starts",
                              row, label, start_seconds, end_seconds);
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_timeline_mark");
    chorus_status status = CHORUS_OK;
    if (context->rank == 0) {
        struct timeline_mark *mark = timeline_mark_new(row, label, start_seconds, end_seconds);
        if (mark == NULL) {
            status =
                set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "chorus_timeline_mark: out of memory");
        } else {
            pthread_mutex_lock(&context->lock);
            if (context->marks_tail != NULL)
                context->marks_tail->next = mark;
            else
                context->marks_head = mark;
            context->marks_tail = mark;
            pthread_mutex_unlock(&context->lock);
        }
    }
    release();
    return status;
}

chorus_status chorus_get_topology(chorus_topology *topology)
{
    if (topology == NULL || topology->struct_size < sizeof(size_t))
        return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_get_topology: pass a chorus_topology set with "
                              "CHORUS_TOPOLOGY_INIT");
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_get_topology");
    size_t size = topology->struct_size < sizeof *topology ? topology->struct_size
                                                           : sizeof *topology;
    chorus_topology copy = context->topology;
    release();
    memcpy((char *)topology + sizeof(size_t), (char *)&copy + sizeof(size_t),
           size - sizeof(size_t));
    return CHORUS_OK;
}

static int topology_field(const char *call, size_t offset)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized(call);
    int value = *(const int *)((const char *)&context->topology + offset);
    release();
    return value;
}

int chorus_rank(void)
{
    return topology_field("chorus_rank", offsetof(chorus_topology, rank));
}

int chorus_size(void)
{
    return topology_field("chorus_size", offsetof(chorus_topology, size));
}

int chorus_local_rank(void)
{
    return topology_field("chorus_local_rank", offsetof(chorus_topology, local_rank));
}

int chorus_local_size(void)
{
    return topology_field("chorus_local_size", offsetof(chorus_topology, local_size));
}

int chorus_cross_rank(void)
{
    return topology_field("chorus_cross_rank", offsetof(chorus_topology, cross_rank));
}

int chorus_cross_size(void)
{
    return topology_field("chorus_cross_size", offsetof(chorus_topology, cross_size));
}

/* ----- submitting ------------------------------------------------------------------------- */

#define REJECT(status, ...) set_last_error(status, __VA_ARGS__)

static struct request *request_create(const chorus_op_args *args, const char *group,
                                      uint32_t group_size, struct chorus_handle *handle,
                                      int default_compression)
{
    struct request *request = calloc(1, sizeof *request);
    if (request == NULL)
        return NULL;
    const chorus_tensor *tensor = &args->input;
    /* A set's names are its own: the same name may be in flight in another set. */
    int process_set = op_process_set(args);
    request->desc.name = process_set == 0 ? strdup(args->name)
                                          : format_string("%s [process set %d]", args->name,
                                                          process_set);
    request->desc.group = strdup(group);
    if (request->desc.name == NULL || request->desc.group == NULL) {
        request_free(request);
        return NULL;
    }
    request->desc.collective = (uint8_t)args->collective;
    request->desc.dtype = (uint8_t)tensor->dtype;
    bool reduces =
        args->collective == CHORUS_ALLREDUCE || args->collective == CHORUS_REDUCESCATTER;
    request->desc.op = reduces ? (uint8_t)args->op : 0;
    request->desc.ndims = (uint8_t)tensor->ndims;
    memcpy(request->desc.shape, tensor->shape, tensor->ndims * sizeof tensor->shape[0]);
    request->desc.root = args->collective == CHORUS_BROADCAST ? args->root : 0;
    request->desc.device = tensor->memory == CHORUS_MEMORY_CUDA ? tensor->device : DEVICE_HOST;
    bool allreduce = args->collective == CHORUS_ALLREDUCE;
    request->desc.prescale = reduces ? args->prescale_factor : 1.0;
    request->desc.postscale = reduces ? args->postscale_factor : 1.0;
    request->desc.group_size = group_size;
    request->desc.process_set = process_set;
    /* Only float32 allreduces are compressed; resolving it here makes every rank send the same. */
    int compression = args->compression == CHORUS_COMPRESSION_DEFAULT ? default_compression
                                                                       : (int)args->compression;
    /* CHORUS_COMPRESSION applies to host tensors; GPU tensors travel as they are. */
    request->desc.compression =
        allreduce && tensor->dtype == CHORUS_FLOAT32 && tensor->memory == CHORUS_MEMORY_HOST &&
                args->op != CHORUS_ADASUM
            ? (uint8_t)compression
            : CHORUS_COMPRESSION_NONE;
    request->input = tensor->data;
    bool handle_output = args->collective == CHORUS_ALLGATHER ||
                         args->collective == CHORUS_REDUCESCATTER ||
                         args->collective == CHORUS_ALLTOALL;
    request->output = args->output != NULL && !handle_output ? args->output : tensor->data;
    request->count = chorus_tensor_count(tensor);
    request->handle = handle;
    request->submitted_at = monotonic_seconds();
    return request;
}

/* An alltoall's rows per rank: the caller's splits, or the rows split evenly. */
static bool copy_splits(struct request *request, const chorus_op_args *args, int nranks)
{
    request->splits = calloc((size_t)nranks, sizeof *request->splits);
    if (request->splits == NULL)
        return false;
    for (int r = 0; r < nranks; r++)
        request->splits[r] =
            args->splits != NULL ? args->splits[r] : args->input.shape[0] / nranks;
    return true;
}

/* Queues `count` requests for the background thread, unless chorus has stopped or one of their
 * names is in flight on this rank. */
static chorus_status enqueue(struct chorus_context *context, struct request **requests,
                             size_t count)
{
    chorus_status status = CHORUS_OK;
    const struct wire_request *first = &requests[0]->desc;
    pthread_mutex_lock(&context->lock);
    chorus_status stopped = atomic_load(&context->stopped);
    if (stopped != CHORUS_OK)
        status = REJECT(stopped, "%s \"%s\": %s", request_collective_name(first), first->name,
                        context->stopped_message);
    for (size_t i = 0; status == CHORUS_OK && i < count; i++) {
        if (name_table_find(&context->in_flight, requests[i]->desc.name) != NULL)
            status = REJECT(CHORUS_ERR_DUPLICATE_NAME,
                            "%s \"%s\": a tensor of this name is already in flight on rank %d; "
                            "wait for it before submitting the name again",
                            request_collective_name(&requests[i]->desc), requests[i]->desc.name,
                            context->rank);
    }
    for (size_t i = 0; status == CHORUS_OK && i < count; i++) {
        if (!name_table_insert(&context->in_flight, requests[i]->desc.name, requests[i])) {
            for (size_t j = 0; j < i; j++)
                name_table_remove(&context->in_flight, requests[j]->desc.name);
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        }
    }
    if (status == CHORUS_OK) {
        for (size_t i = 0; i < count; i++) {
            if (context->queue_tail != NULL)
                context->queue_tail->next = requests[i];
            else
                context->queue_head = requests[i];
            context->queue_tail = requests[i];
        }
        pthread_cond_signal(&context->wakeup);
    }
    pthread_mutex_unlock(&context->lock);
    return status;
}

/* Bytes that " [process set N]" may add to a name. */
#define PROCESS_SET_NAME_SUFFIX 32

/* The process set a call names: it must exist and hold this rank. Sets *nranks to its size
 * and makes a broadcast's root (a rank of the job) a rank of the set, for validate_op. */
static chorus_status check_process_set(struct chorus_context *context, chorus_op_args *args,
                                       int *nranks)
{
    int id = op_process_set(args);
    *nranks = context->size;
    if (id == 0)
        return CHORUS_OK;
    const char *kind = chorus_collective_name(args->collective);
    const char *name = args->name != NULL ? args->name : "";
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, id);
    char *described = set != NULL ? process_set_describe(set) : NULL;
    if (set == NULL)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "%s \"%s\": process set %d does not exist (never added, or removed)",
                        kind, name, id);
    else if (strlen(name) + PROCESS_SET_NAME_SUFFIX > CHORUS_MAX_NAME_LENGTH)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "%s \"%.40s...\": a name in a process set may have at most %d bytes",
                        kind, name, CHORUS_MAX_NAME_LENGTH - PROCESS_SET_NAME_SUFFIX);
    else if (process_set_rank_of(set, context->rank) < 0)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": rank %d is not a member of %s",
                        kind, name, context->rank, described ? described : "the process set");
    else if (args->collective == CHORUS_BROADCAST &&
             process_set_rank_of(set, args->root) < 0)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "broadcast \"%s\": root %d is not a member of %s", name, args->root,
                        described ? described : "the process set");
    else if (args->collective == CHORUS_BROADCAST)
        args->root = process_set_rank_of(set, args->root);
    if (set != NULL)
        *nranks = set->size;
    pthread_mutex_unlock(&context->lock);
    free(described);
    return status;
}

/* Enqueues `count` operations as one unit (a group when count > 1). */
static chorus_status submit(const chorus_op_args *args, size_t count, chorus_handle **handle_out)
{
    if (handle_out == NULL || args == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit: args and handle must not be "
                                                   "NULL");
    *handle_out = NULL;
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_submit");
    chorus_status status = CHORUS_OK;
    struct chorus_handle *handle = NULL;
    struct request **requests = calloc(count, sizeof *requests);
    if (requests == NULL) {
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        goto out;
    }
    int nranks = context->size; /* of the set the call names */
    for (size_t i = 0; i < count; i++) {
        if (op_process_set(&args[i]) != op_process_set(&args[0])) {
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "grouped allreduce: member %zu (\"%s\") names process set %d, "
                            "member 0 (\"%s\") process set %d",
                            i, args[i].name, op_process_set(&args[i]), args[0].name,
                            op_process_set(&args[0]));
            goto out;
        }
        chorus_op_args checked = args[i];
        status = check_process_set(context, &checked, &nranks);
        if (status == CHORUS_OK)
            status = validate_op(&checked, nranks);
        if (status != CHORUS_OK)
            goto out;
        if (count > 1 && args[i].collective != CHORUS_ALLREDUCE) {
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "grouped allreduce: member %zu (\"%s\") is a %s", i, args[i].name,
                            chorus_collective_name(args[i].collective));
            goto out;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(args[i].name, args[j].name) == 0) {
                status = REJECT(CHORUS_ERR_DUPLICATE_NAME,
                                "grouped allreduce: the name \"%s\" appears twice in the group",
                                args[i].name);
                goto out;
            }
        }
    }
    handle = handle_create(args[0].collective, count);
    if (handle == NULL) {
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        requests[i] = request_create(&args[i], count > 1 ? args[0].name : "", (uint32_t)count,
                                     handle, context->params.values.compression);
        if (requests[i] != NULL && args[i].collective == CHORUS_ALLTOALL &&
            !copy_splits(requests[i], &args[i], nranks)) {
            request_free(requests[i]);
            requests[i] = NULL;
        }
        if (requests[i] == NULL) {
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
            goto out;
        }
    }
    status = enqueue(context, requests, count);
out:
    release();
    if (status != CHORUS_OK) {
        for (size_t i = 0; requests != NULL && i < count; i++)
            request_free(requests[i]);
        if (handle != NULL) {
            handle->members_pending = 1;
            handle_member_done(handle, status, NULL);
            chorus_handle_free(handle);
        }
    } else {
        *handle_out = handle;
    }
    free(requests);
    return status;
}

chorus_status chorus_submit(const chorus_op_args *args, chorus_handle **handle)
{
    return submit(args, 1, handle);
}

chorus_status chorus_submit_group(const chorus_op_args *args, size_t count,
                                  chorus_handle **handle)
{
    if (count == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "grouped allreduce: the group is empty");
    if (count > UINT32_MAX)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "grouped allreduce: too many tensors");
    return submit(args, count, handle);
}

int chorus_last_joined_rank(void)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_last_joined_rank");
    pthread_mutex_lock(&context->lock);
    int rank = context->last_joined_rank;
    pthread_mutex_unlock(&context->lock);
    release();
    return rank;
}

chorus_status chorus_barrier(void)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_barrier");
    char name[48];
    snprintf(name, sizeof name, "chorus.barrier.%lu", atomic_fetch_add(&context->barriers, 1));
    release();
    int32_t nothing = 0;
    chorus_tensor tensor = {.data = &nothing, .dtype = CHORUS_INT32, .ndims = 1, .shape = {1}};
    return chorus_allreduce(name, &tensor, NULL, CHORUS_SUM);
}

/* An add (`ranks`) or a remove (`remove_id`, with no ranks): negotiated like a tensor, so that
 * every rank changes its sets at the same point of the order of collectives. */
static chorus_status change_process_sets(const char *call, const int *ranks, int count,
                                         int remove_id, int *added_id)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized(call);
    char why[256];
    chorus_status status = CHORUS_OK;
    if (ranks != NULL && !process_set_check_ranks(ranks, count, context->size, why, sizeof why))
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: %s", call, why);
    if (ranks == NULL) {
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
            request->submitted_at = monotonic_seconds();
        }
        if (handle == NULL || request == NULL || request->desc.name == NULL ||
            request->desc.group == NULL || (ranks != NULL && request->desc.members == NULL))
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
        else
            status = enqueue(context, &request, 1);
    }
    release();
    if (status != CHORUS_OK) {
        request_free(request);
        if (handle != NULL) {
            handle_member_done(handle, status, NULL);
            chorus_handle_free(handle);
        }
        return status;
    }
    status = handle_wait_and_free(handle, NULL, NULL);
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
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_process_set_ranks");
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
    release();
    return status;
}

chorus_status chorus_join(void)
{
    struct chorus_context *context = acquire();
    if (context == NULL)
        return not_initialized("chorus_join");
    struct chorus_handle *handle = handle_create(CHORUS_ALLREDUCE, 1);
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    chorus_status stopped = atomic_load(&context->stopped);
    if (handle == NULL)
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_join: out of memory");
    else if (stopped != CHORUS_OK)
        status = REJECT(stopped, "chorus_join: %s", context->stopped_message);
    else if (context->join_requested)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "chorus_join: this rank is already joining (from another thread)");
    if (status == CHORUS_OK) {
        context->join_requested = true;
        context->join_handle = handle;
        pthread_cond_signal(&context->wakeup);
    }
    pthread_mutex_unlock(&context->lock);
    release();
    if (status != CHORUS_OK) {
        if (handle != NULL) {
            handle_member_done(handle, status, NULL);
            chorus_handle_free(handle);
        }
        return status;
    }
    return handle_wait_and_free(handle, NULL, NULL);
}
