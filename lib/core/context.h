/*
 * context.h — the state of one chorus instance, shared by the user threads (which validate,
 * enqueue and wait) and the background thread (which negotiates and moves data). Fields under
 * "shared" are guarded by `lock`; the rest is set before the background thread starts or
 * belongs to it alone.
 */
#ifndef CHORUS_CONTEXT_H
#define CHORUS_CONTEXT_H

#include "handle.h"
#include "request.h"
#include "name_table.h"
#include "params.h"
#include "process_set.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

struct background;
struct lane;
struct timeline;
struct timeline_mark;

enum { CHORUS_HOST_NAME_SIZE = 64 };

struct chorus_context {
    struct param_set params;
    chorus_topology topology;
    bool local_ranks_share_cache; /* every rank of this host runs under one last-level cache */
    /* This host's ranks outnumber the processing units all of them together may run on: they
     * take turns on cores. */
    bool local_ranks_share_cores;
    char (*host_names)[CHORUS_HOST_NAME_SIZE]; /* of every rank, for messages about a peer */
    int rank;
    int size;
    bool mpi_initialized_by_chorus;
    bool mpi_thread_multiple; /* user threads may call MPI beside the background thread */
    /* A world without MPI (lib/coordinator/world_links.h; not owned), or NULL: the
     * communicators below are then MPI_COMM_NULL. */
    struct world_links *links;
    MPI_Comm user_comm;    /* the communicator given to init (not owned) */
    MPI_Comm control_comm; /* negotiation messages (owned by the background thread) */
    MPI_Comm data_comm;    /* collectives (owned by the background thread) */
    MPI_Comm transfer_comm; /* the user's point-to-point transfers (background thread's) */
    int tag_upper_bound;   /* of transfers: MPI's MPI_TAG_UB, set before init returns */
    pthread_t thread;
    chorus_status params_status;  /* parsing the parameters on this rank */
    char params_message[1024];

    /* The coordinator's turn: whoever holds it acts as the background thread (background.c).
     * The thread holds it except while idle; a user thread that submitted ordered operations
     * takes it when it is free and runs them itself (coord_step_as_caller). */
    pthread_mutex_t coordinator_turn;
    struct background *coordinator; /* under coordinator_turn: the running loop's, or NULL */
    /* When a user thread that waits for its operation last turned the loop itself, or ran its
     * ordered operations itself (0: none does): the background thread steps aside meanwhile
     * (background.c: coord_drive, coord_step_as_caller). */
    _Atomic double driven_at;

    /* shared */
    pthread_mutex_t lock;
    pthread_cond_t wakeup;       /* the background thread sleeps on it when idle */
    pthread_cond_t started;      /* init waits on it for the thread's start-up */
    struct request *queue_head;  /* submitted, not yet seen by the background thread */
    struct request *queue_tail;
    struct name_table in_flight; /* names submitted on this rank and not completed */
    bool shutdown_requested;
    _Atomic bool join_requested; /* also read without the lock, by a lane (lib/lane) */
    struct chorus_handle *join_handle;
    int last_joined_rank; /* of the latest join that completed; -1 before */
    /* chorus_start_timeline / chorus_stop_timeline on rank 0: the timeline to switch to (NULL
     * to stop), waiting for the background thread, which signals timeline_switched. */
    bool timeline_switch_pending;
    struct timeline *timeline_switch;
    pthread_cond_t timeline_switched;
    /* chorus_timeline_mark on rank 0: the user's spans, written (or, with no timeline, dropped)
     * by the background thread at its next look at the queue. */
    /* Set (under `lock`) when a mark or a switch is queued, so that rank 0's loop takes the lock
     * for the timeline only when there is something to take. */
    _Atomic bool timeline_work;
    struct timeline_mark *marks_head;
    struct timeline_mark *marks_tail;
    bool startup_finished;
    chorus_status startup_status;
    char startup_message[1024];
    char stopped_message[1024]; /* why submits fail once `stopped` is set */

    /* The process sets (process_set.h): the background thread changes them, submits read. */
    struct process_set_table process_sets;

    _Atomic int stopped; /* CHORUS_OK while running; then the status later submits get */

    /* The job's lane (lib/lane), where every rank shares one host: ordered operations on the
     * submitting thread. The background thread publishes it at start-up and withdraws it at
     * its end; job_lane_users counts the threads that may hold it (each adds itself before it
     * loads the pointer), so that it is freed only after they left. */
    _Atomic(struct lane *) job_lane;
    _Atomic int job_lane_users;
    /* A fatal error that a user thread met (a lane's timeout): the background thread stops the
     * instance with it at its next turn. The status is set after the message (under `lock`). */
    _Atomic int user_failure;
    char user_failure_message[1024];
    _Atomic unsigned long barriers; /* chorus_barrier calls so far: each barrier's name */
    _Atomic unsigned long set_changes; /* process set adds and removes so far: their names */
};

/* A new context for an instance on `user_comm` (not owned), its lock, condition variables
 * (timed waits on the monotonic clock) and tables ready; NULL when out of memory. */
struct chorus_context *context_create(MPI_Comm user_comm);
/* Frees a context made by context_create (NULL: nothing), after its thread has ended. */
void context_free(struct chorus_context *context);

/* Records a fatal error a user thread met, for the background thread (the first one counts),
 * and wakes it. */
void context_report_failure(struct chorus_context *context, chorus_status status,
                            const char *message);

/* The host `rank` runs on, as MPI names it ("?" before topology_discover). */
const char *context_host_name(const struct chorus_context *context, int rank);

/* Finds topology with MPI and hwloc (topology.c). Background thread, during start-up. */
chorus_status topology_discover(struct chorus_context *context, char *error, size_t error_size);

/* Words of the processing units a rank's binding allows, as the host's ranks combine them
 * (hwloc_bitmap_to_ulongs): 4,096 PUs. */
#define TOPOLOGY_BINDING_WORDS 64

/* What a rank tells every other about where it runs, in a world without MPI (one UCX). */
struct topology_record {
    char host[CHORUS_HOST_NAME_SIZE]; /* ranks with the same name share a host */
    int32_t cache_domain;             /* topology_cache_domain of its binding, or -1 */
    uint32_t pus;                     /* the processing units its binding allows */
    unsigned long binding[TOPOLOGY_BINDING_WORDS]; /* which ones; all zero when unknown */
};

/* This rank's record, on the host named `host` (NULL: gethostname's), its binding found with
 * hwloc; context->topology's cores, processing units and NUMA nodes are set from it. */
void topology_own_record(struct chorus_context *context, const char *host,
                         struct topology_record *mine);
/* The topology from every rank's record (records[r] is rank r's), as topology_discover finds
 * it with MPI: hosts numbered in the order of their first rank, local ranks in rank order, and
 * what the ranks of this rank's host share; the host names kept for messages. CHORUS_OK, or
 * CHORUS_ERR_OUT_OF_MEMORY with the reason in `error`. */
chorus_status topology_from_records(struct chorus_context *context,
                                    const struct topology_record *records, char *error,
                                    size_t error_size);

#endif
