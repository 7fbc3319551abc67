/*
 * api.c — the public entry points of a chorus instance: init and shutdown, the timeline,
 * topology queries and join. Submits are in submit.c (their checks in validate.c, the
 * shorthands in shorthands.c), process sets in process_sets.c.
 * User threads only validate, enqueue and wait here; all communication happens on the
 * background thread (lib/coordinator/background.c).
 *
 * The current instance is guarded by a read-write lock: submits and queries hold it for
 * reading for the few microseconds they need the context, shutdown takes it for writing before
 * freeing the context, so no call ever sees a freed context.
 */
#include "instance.h"
#include "shorthands.h"

#include "../coordinator/coordinator.h"
#include "../core/context.h"
#include "../core/log.h"
#include "../core/output_pool.h"
#include "../core/retained.h"
#include "../core/timeline.h"

#include "../gpu/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* The tag of chorus_reform's MPI_Comm_create_group. */
enum { REFORM_TAG = 5252 };

static pthread_rwlock_t instance_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct chorus_context *instance;

struct chorus_context *api_instance_acquire(void)
{
    pthread_rwlock_rdlock(&instance_lock);
    if (instance == NULL) {
        pthread_rwlock_unlock(&instance_lock);
        return NULL;
    }
    return instance;
}

void api_instance_release(void)
{
    pthread_rwlock_unlock(&instance_lock);
}

chorus_status api_not_initialized(const char *call)
{
    return status_set_last_error(CHORUS_ERR_NOT_INITIALIZED,
                          "%s: chorus is not initialized (call chorus_init first, and not after "
                          "chorus_shutdown)",
                          call);
}

static chorus_status start_instance(MPI_Comm comm, const chorus_init_options *options,
                                    bool mpi_initialized_by_chorus, struct world_links *links)
{
    if (options != NULL && options->struct_size < sizeof(size_t))
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_init: options.struct_size is %zu; set it with "
                              "CHORUS_INIT_OPTIONS_INIT",
                              options->struct_size);
    const char *overrides = NULL;
    if (options != NULL && options->struct_size >= offsetof(chorus_init_options, parameters) +
                                                       sizeof options->parameters)
        overrides = options->parameters;
    struct chorus_context *context = context_create(comm);
    if (context == NULL)
        return status_set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "chorus_init: out of memory");
    context->mpi_initialized_by_chorus = mpi_initialized_by_chorus;
    context->links = links;
    int provided = MPI_THREAD_SINGLE;
    if (links == NULL) /* MPI may not even be initialized in a world without it */
        MPI_Query_thread(&provided);
    context->mpi_thread_multiple = provided >= MPI_THREAD_MULTIPLE;

    /* A malformed parameter is not reported here yet: the background thread first tells every
     * rank, so that all ranks fail init together instead of some waiting for the others. */
    context->params_status = params_load(&context->params, environ, overrides,
                                         context->params_message, sizeof context->params_message);
    if (context->params_status == CHORUS_OK)
        log_set_level((enum log_level)context->params.values.log_level);

    if (pthread_create(&context->thread, NULL, coord_thread_main, context) != 0) {
        context_free(context);
        return status_set_last_error(CHORUS_ERR_INTERNAL,
                              "chorus_init: cannot start the background thread");
    }
    pthread_mutex_lock(&context->lock);
    while (!context->startup_finished)
        pthread_cond_wait(&context->started, &context->lock);
    chorus_status status = context->startup_status;
    pthread_mutex_unlock(&context->lock);
    if (status != CHORUS_OK) {
        pthread_join(context->thread, NULL);
        status_set_last_error(status, "chorus_init: %s", context->startup_message);
        context_free(context);
        return status;
    }
    if (context->params.unknown_variables[0] != '\0')
        LOG(LOG_WARNING, "params", "ignoring unknown variables: %s",
            context->params.unknown_variables);
    instance = context;
    LOG(LOG_INFO, "init", "rank %d of %d, local %d of %d, host %d of %d, %zu cores, %zu NUMA nodes",
        context->topology.rank, context->topology.size, context->topology.local_rank,
        context->topology.local_size, context->topology.cross_rank, context->topology.cross_size,
        context->topology.cores, context->topology.numa_nodes);
    status_clear_last_error();
    return CHORUS_OK;
}

/* The communicator chorus_reform or chorus_grow made for the world chorus runs on now (a
 * process that chorus_grow started: the world merged with its parents; MPI_COMM_NULL when it
 * runs on the one given to init): chorus owns it, unlike the one init was given. */
static MPI_Comm reformed_comm = MPI_COMM_NULL;

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
        status = status_set_last_error(CHORUS_ERR_ALREADY_INITIALIZED,
                                "chorus_init: chorus is already initialized");
        goto out;
    }
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
        status = status_set_last_error(CHORUS_ERR_MPI,
                                "chorus_init: MPI has already been finalized; MPI cannot be "
                                "initialized twice in one process");
        goto out;
    }
    bool ours = false;
    if (!initialized) {
        if (!world) {
            status = status_set_last_error(CHORUS_ERR_MPI,
                                    "chorus_init_comm: MPI is not initialized; initialize it "
                                    "with MPI_Init_thread(MPI_THREAD_MULTIPLE) first");
            goto out;
        }
        int provided = MPI_THREAD_SINGLE;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            status = status_set_last_error(CHORUS_ERR_MPI, "chorus_init: MPI_Init_thread failed");
            goto out;
        }
        ours = true;
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            status = status_set_last_error(
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
            status = status_set_last_error(
                CHORUS_ERR_MPI,
                "chorus_init: MPI was initialized with %s, but chorus calls MPI from its "
                "background thread while the application may call it too; initialize MPI with "
                "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)",
                thread_level_name(provided));
            goto out;
        }
    }
    /* A process that chorus_grow started joins its parents' world: the merge is the other half
     * of the one chorus_grow makes, and the merged world stays chorus's (reformed_comm). */
    MPI_Comm parent = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    if (world)
        MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        if (MPI_Intercomm_merge(parent, 1, &merged) != MPI_SUCCESS) {
            status = status_set_last_error(CHORUS_ERR_MPI,
                                           "chorus_init: this process was started by "
                                           "MPI_Comm_spawn, and MPI_Intercomm_merge with its "
                                           "parents failed");
            goto out;
        }
        comm = merged;
    }
    status = start_instance(comm, options, ours, NULL);
    if (status == CHORUS_OK && merged != MPI_COMM_NULL)
        reformed_comm = merged;
    else if (merged != MPI_COMM_NULL)
        MPI_Comm_free(&merged);
    if (status != CHORUS_OK && ours && parent == MPI_COMM_NULL)
        MPI_Finalize();
out:
    pthread_rwlock_unlock(&instance_lock);
    return status;
}

bool chorus_gpu_built(void)
{
    return gpu_compiled();
}

int chorus_nccl_version(void)
{
    return gpu_nccl_version();
}

chorus_status chorus_init(const chorus_init_options *options)
{
    return init_on(MPI_COMM_WORLD, options, true);
}

chorus_status api_init_on_links(struct world_links *links, const chorus_init_options *options)
{
    pthread_rwlock_wrlock(&instance_lock);
    chorus_status status =
        instance != NULL ? status_set_last_error(CHORUS_ERR_ALREADY_INITIALIZED,
                                                 "chorus_init: chorus is already initialized")
                         : start_instance(MPI_COMM_NULL, options, false, links);
    pthread_rwlock_unlock(&instance_lock);
    return status;
}

chorus_status chorus_init_comm(MPI_Comm comm, const chorus_init_options *options)
{
    if (comm == MPI_COMM_NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_init_comm: communicator is MPI_COMM_NULL");
    return init_on(comm, options, false);
}


/* Takes the running instance away from other threads, stops its background thread (completing
 * every pending handle with an error) and returns it, not yet freed; NULL when none runs. */
static struct chorus_context *stop_instance(void)
{
    pthread_rwlock_wrlock(&instance_lock);
    struct chorus_context *context = instance;
    instance = NULL;
    pthread_rwlock_unlock(&instance_lock);
    if (context == NULL)
        return NULL;
    pthread_mutex_lock(&context->lock);
    context->shutdown_requested = true;
    pthread_cond_broadcast(&context->wakeup);
    pthread_mutex_unlock(&context->lock);
    pthread_join(context->thread, NULL);
    return context;
}

static void free_reformed_comm(void)
{
    if (reformed_comm != MPI_COMM_NULL)
        MPI_Comm_free(&reformed_comm);
}

chorus_status chorus_shutdown(void)
{
    struct chorus_context *context = stop_instance();
    if (context == NULL)
        return api_not_initialized("chorus_shutdown");
    /* After a reform some ranks of MPI's world are dead: MPI_Finalize would wait for them. */
    bool finalize = context->mpi_initialized_by_chorus && reformed_comm == MPI_COMM_NULL;
    context_free(context);
    output_pool_drain();
    free_reformed_comm();
    if (finalize) {
        MPI_Finalize();
        retained_free_all();
    }
    status_clear_last_error();
    return CHORUS_OK;
}

/* Starts chorus on `next`, the communicator chorus_reform or chorus_grow made (owned from now
 * on, in place of the one before). */
static chorus_status start_on_new_world(MPI_Comm next, const chorus_init_options *options,
                                        bool mpi_initialized_by_chorus)
{
    free_reformed_comm();
    pthread_rwlock_wrlock(&instance_lock);
    chorus_status status = start_instance(next, options, mpi_initialized_by_chorus, NULL);
    pthread_rwlock_unlock(&instance_lock);
    if (status != CHORUS_OK) {
        MPI_Comm_free(&next);
        return status;
    }
    reformed_comm = next;
    return CHORUS_OK;
}

/* A world without MPI (one over UCX) forms its next epoch through its maker, not by `call`. */
static chorus_status world_without_mpi(const char *call)
{
    return status_set_last_error(CHORUS_ERR_NOT_SUPPORTED,
                                 "%s: chorus runs on a world without MPI (over UCX); its next "
                                 "world is formed by starting chorus on that world's links",
                                 call);
}

/* Checks a reform's list of ranks against the world of `context`: in range, each once, and this
 * rank among them (a rank left out must not take part). */
static chorus_status check_reform_ranks(const struct chorus_context *context, const int *ranks,
                                        int count)
{
    if (ranks == NULL || count < 1 || count > context->size)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_reform: %d ranks of a world of %d", count,
                                     context->size);
    bool mine = false;
    for (int i = 0; i < count; i++) {
        if (ranks[i] < 0 || ranks[i] >= context->size)
            return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                         "chorus_reform: rank %d is not in the world of %d ranks",
                                         ranks[i], context->size);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                             "chorus_reform: rank %d is listed twice", ranks[i]);
        mine |= ranks[i] == context->rank;
    }
    if (!mine)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_reform: rank %d is not in the list it was given; "
                                     "only the ranks that go on call chorus_reform",
                                     context->rank);
    return CHORUS_OK;
}

chorus_status chorus_reform(const int *ranks, int count, const chorus_init_options *options)
{
    struct chorus_context *running = api_instance_acquire();
    if (running == NULL)
        return api_not_initialized("chorus_reform");
    chorus_status status =
        running->links != NULL ? world_without_mpi("chorus_reform")
                               : check_reform_ranks(running, ranks, count);
    api_instance_release();
    if (status != CHORUS_OK)
        return status;
    struct chorus_context *context = stop_instance();
    if (context == NULL)
        return api_not_initialized("chorus_reform");
    /* Only the listed ranks take part in MPI_Comm_create_group, so a dead rank cannot hold the
     * new communicator up, as it would MPI_Comm_split's. */
    MPI_Group world = MPI_GROUP_NULL, kept = MPI_GROUP_NULL;
    MPI_Comm next = MPI_COMM_NULL;
    int made = MPI_Comm_group(context->user_comm, &world);
    if (made == MPI_SUCCESS)
        made = MPI_Group_incl(world, count, ranks, &kept);
    if (made == MPI_SUCCESS)
        made = MPI_Comm_create_group(context->user_comm, kept, REFORM_TAG, &next);
    if (kept != MPI_GROUP_NULL)
        MPI_Group_free(&kept);
    if (world != MPI_GROUP_NULL)
        MPI_Group_free(&world);
    bool ours = context->mpi_initialized_by_chorus;
    context_free(context);
    output_pool_drain();
    free_reformed_comm();
    if (made != MPI_SUCCESS || next == MPI_COMM_NULL)
        return status_set_last_error(CHORUS_ERR_MPI,
                                     "chorus_reform: MPI_Comm_create_group over %d ranks failed; "
                                     "chorus is shut down",
                                     count);
    return start_on_new_world(next, options, ours);
}

/* Checks chorus_grow's options before anything stops. */
static chorus_status check_grow_options(const chorus_grow_options *grow)
{
    if (grow == NULL || grow->struct_size < offsetof(chorus_grow_options, hosts) +
                                                sizeof grow->hosts)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_grow: options missing or too old (struct_size %zu); "
                                     "set them with CHORUS_GROW_OPTIONS_INIT",
                                     grow != NULL ? grow->struct_size : (size_t)0);
    if (grow->command == NULL || grow->command[0] == '\0')
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_grow: no command to start the new ranks with");
    if (grow->count < 1)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "chorus_grow: %d new ranks; at least 1", grow->count);
    return CHORUS_OK;
}

/* Starts grow->count processes of grow->command from every rank of `world` (MPI_Comm_spawn
 * from rank 0) and merges them in after those ranks. Returns the merged communicator, or
 * MPI_COMM_NULL with `why` filled. (Spawning from rank 0 alone and joining the others through
 * MPI_Intercomm_create would let rank 0 tell them of a failed spawn, but Open MPI 4.1 then
 * sees no new rank as on the same host, and MPI_Comm_split_type hangs in chorus's start.) */
static MPI_Comm spawn_and_merge(MPI_Comm world, const chorus_grow_options *grow, char *why,
                                size_t why_size)
{
    MPI_Comm spawning = MPI_COMM_NULL, children = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    MPI_Info info = MPI_INFO_NULL;
    int *codes = calloc((size_t)grow->count, sizeof *codes);
    /* A communicator of our own that returns errors: the application's may abort on them. */
    int made = codes != NULL ? MPI_Comm_dup(world, &spawning) : MPI_ERR_NO_MEM;
    if (made == MPI_SUCCESS)
        made = MPI_Comm_set_errhandler(spawning, MPI_ERRORS_RETURN);
    if (made == MPI_SUCCESS)
        made = MPI_Info_create(&info);
    if (made == MPI_SUCCESS && grow->hosts != NULL)
        made = MPI_Info_set(info, "host", grow->hosts);
    /* Open MPI leaves the new communicator undefined when the spawn fails: keep it only then. */
    MPI_Comm spawned = MPI_COMM_NULL;
    if (made == MPI_SUCCESS)
        made = MPI_Comm_spawn(grow->command, grow->argv, grow->count, info, 0, spawning,
                              &spawned, codes);
    if (made == MPI_SUCCESS) {
        children = spawned;
        made = MPI_Intercomm_merge(children, 0, &merged);
    }
    if (made != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING] = "";
        int length = 0;
        MPI_Error_string(made, text, &length);
        snprintf(why, why_size, "%s (first new rank's code %d)", text,
                 codes != NULL ? codes[0] : 0);
    }
    if (children != MPI_COMM_NULL)
        MPI_Comm_free(&children);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info);
    if (spawning != MPI_COMM_NULL)
        MPI_Comm_free(&spawning);
    free(codes);
    return made == MPI_SUCCESS ? merged : MPI_COMM_NULL;
}

chorus_status chorus_grow(const chorus_grow_options *grow, const chorus_init_options *options)
{
    chorus_status status = check_grow_options(grow);
    struct chorus_context *running = status == CHORUS_OK ? api_instance_acquire() : NULL;
    if (running != NULL) {
        if (running->links != NULL)
            status = world_without_mpi("chorus_grow");
        api_instance_release();
    }
    if (status != CHORUS_OK)
        return status;
    struct chorus_context *context = stop_instance();
    if (context == NULL)
        return api_not_initialized("chorus_grow");
    MPI_Comm world = context->user_comm;
    int size = context->size;
    bool ours = context->mpi_initialized_by_chorus;
    context_free(context);
    output_pool_drain();
    char why[MPI_MAX_ERROR_STRING + 64] = "";
    MPI_Comm next = spawn_and_merge(world, grow, why, sizeof why);
    if (next != MPI_COMM_NULL)
        return start_on_new_world(next, options, ours);
    /* Nothing joined: chorus goes on over the world it had. */
    pthread_rwlock_wrlock(&instance_lock);
    status = start_instance(world, options, ours, NULL);
    pthread_rwlock_unlock(&instance_lock);
    if (status != CHORUS_OK)
        return status;
    return status_set_last_error(CHORUS_ERR_MPI,
                                 "chorus_grow: starting %d ranks of \"%s\" on %s failed: %s; "
                                 "chorus goes on over its %d ranks",
                                 grow->count, grow->command,
                                 grow->hosts != NULL ? grow->hosts : "hosts MPI chose", why, size);
}

chorus_status chorus_peer_lost(int rank, const char *how)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_peer_lost");
    chorus_status status = CHORUS_OK;
    if (rank < 0 || rank >= context->size || rank == context->rank) {
        status = status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                       "chorus_peer_lost: %d is not another rank of this world "
                                       "of %d",
                                       rank, context->size);
    } else {
        char message[512];
        snprintf(message, sizeof message, "rank %d (host %s) is gone: %s", rank,
                 context_host_name(context, rank), how != NULL ? how : "its process ended");
        context_report_failure(context, CHORUS_ERR_TIMEOUT, message);
    }
    api_instance_release();
    return status;
}

bool chorus_is_initialized(void)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return false;
    api_instance_release();
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
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "%s: another thread is starting or stopping the timeline", call);
    }
    context->timeline_switch = timeline;
    context->timeline_switch_pending = true;
    atomic_store(&context->timeline_work, true);
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
    return status_set_last_error(status, "%s: %s", call, context->stopped_message);
}

chorus_status chorus_start_timeline(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_start_timeline: the path is NULL or empty");
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_start_timeline");
    chorus_status status = CHORUS_OK;
    if (context->rank == 0) {
        char error[4200] = "";
        struct timeline *timeline = timeline_open(path, error, sizeof error);
        status = timeline == NULL ? status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                                                   "chorus_start_timeline: %s", error)
                                  : switch_timeline(context, timeline, "chorus_start_timeline");
    }
    api_instance_release();
    return status;
}

chorus_status chorus_stop_timeline(void)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_stop_timeline");
    chorus_status status =
        context->rank == 0 ? switch_timeline(context, NULL, "chorus_stop_timeline") : CHORUS_OK;
    api_instance_release();
    return status;
}

chorus_status chorus_timeline_mark(const char *row, const char *label, double start_seconds,
                                   double end_seconds)
{
    if (row == NULL || row[0] == '\0' || label == NULL || label[0] == '\0')
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_timeline_mark: the row and the label must be non-empty");
    if (!isfinite(start_seconds) || !isfinite(end_seconds) || end_seconds < start_seconds)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_timeline_mark(\"%s\", \"%s\"): the span from %.6f s to "
                              "%.6f s does not end after it starts",
                              row, label, start_seconds, end_seconds);
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_timeline_mark");
    chorus_status status = CHORUS_OK;
    if (context->rank == 0) {
        struct timeline_mark *mark = timeline_mark_new(row, label, start_seconds, end_seconds);
        if (mark == NULL) {
            status =
                status_set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "chorus_timeline_mark: out of memory");
        } else {
            pthread_mutex_lock(&context->lock);
            if (context->marks_tail != NULL)
                context->marks_tail->next = mark;
            else
                context->marks_head = mark;
            context->marks_tail = mark;
            atomic_store(&context->timeline_work, true);
            pthread_mutex_unlock(&context->lock);
        }
    }
    api_instance_release();
    return status;
}

chorus_status chorus_get_topology(chorus_topology *topology)
{
    if (topology == NULL || topology->struct_size < sizeof(size_t))
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "chorus_get_topology: pass a chorus_topology set with "
                              "CHORUS_TOPOLOGY_INIT");
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_get_topology");
    size_t size =
        topology->struct_size < sizeof *topology ? topology->struct_size : sizeof *topology;
    chorus_topology copy = context->topology;
    api_instance_release();
    memcpy((char *)topology + sizeof(size_t), (char *)&copy + sizeof(size_t),
           size - sizeof(size_t));
    return CHORUS_OK;
}

static int topology_field(const char *call, size_t offset)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized(call);
    int value = *(const int *)((const char *)&context->topology + offset);
    api_instance_release();
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

int chorus_last_joined_rank(void)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_last_joined_rank");
    pthread_mutex_lock(&context->lock);
    int rank = context->last_joined_rank;
    pthread_mutex_unlock(&context->lock);
    api_instance_release();
    return rank;
}

chorus_status chorus_join(void)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_join");
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
    api_instance_release();
    if (status != CHORUS_OK) {
        if (handle != NULL) {
            handle_member_done(handle, status, NULL);
            chorus_handle_free(handle);
        }
        return status;
    }
    return api_handle_wait_and_free(handle, NULL, NULL);
}
