/*
 * executor.h — runs agreed responses on this rank: the seam between the coordinator and the
 * data path. Responses are fused per the fusion plan, then each batch runs on the backend of its
 * memory (backend.h): the algorithm the selection table picks (host memory) or NCCL (GPU
 * memory). It needs no MPI of its own beyond its transport, except for the host's segment and
 * the abort notices, so unit tests run it over the thread transport.
 */
#ifndef CHORUS_EXECUTOR_H
#define CHORUS_EXECUTOR_H

#include "../collectives/collectives.h"
#include "../transport/transport.h"
#include "../core/context.h"
#include "../core/timeline.h"
#include "../fusion/fusion.h"
#include "../gpu/gpu.h"
#include "../transport/small_segment.h"
#include "abort.h"

/* What the job's executor and its process sets' executors run with, held once by the
 * instance: its parameters (the running ones among them, PARAM_RUNTIME, read at each use:
 * autotune changes them between batches), what start-up derived from them and the topology,
 * and the tuning file's selection rows. */
struct executor_settings {
    const struct chorus_params *params;
    int forced_algorithm[CHORUS_COLLECTIVE_COUNT]; /* -1: the selection table */
    bool staging_streaming; /* staging areas written with streaming stores (node_segment.h) */
    bool oversubscribed;    /* more ranks than cores on this host */
    struct selection_rows tuned;
};

/* The settings from `params` alone: no algorithm forced unless the parameters force one,
 * cached stores, not oversubscribed, no tuned rows (unit tests; start-up refines them). */
void executor_settings_init(struct executor_settings *settings,
                            const struct chorus_params *params);

struct executor {
    int rank;
    int nranks;
    struct transport transport; /* over the data communicator */
    MPI_Comm data_comm;
    struct scratch scratch;  /* algorithm scratch */
    struct scratch fusion;   /* the fusion buffer: two halves, see packed_pipeline.h */
    struct copier copier;    /* packs and unpacks while a collective runs, when running */
    struct scratch stand_in; /* data of a joined rank that has no tensor of that name */
    struct scratch pieces;   /* the piece list of a fused batch reduced in place */
    struct scratch staging;  /* host copies of GPU tensors compressed in host memory */
    const struct executor_settings *settings; /* the instance's; a set's executor shares it */
    double batch_started;   /* when the running batch started, for the timeout */
    double own_timeout;     /* the running ordered operation's timeout_seconds; 0: none given */
    double next_process_look; /* when a wait next asks whether the local ranks still run */
    /* Every rank's host name, for messages (the job's executor; NULL for a process set's). */
    const char (*host_names)[CHORUS_HOST_NAME_SIZE];
    struct gpu_context *gpu;
    int local_ranks;     /* ranks per host when equal on every host, else 1 */
    bool node_ready;     /* the segment below exists */
    struct node_segment node;
    /* Every rank on this host: small-message slots (small_segment.h) for the small-slots
     * algorithms (this executor's own; a lane has others). */
    bool small_ready;
    struct small_segment small;
    /* A lone allreduce of `staged_bytes` whose every contribution the negotiation round that
     * decided it carried (rounds.c): those slots (the host's, or copies across hosts), which
     * executor_run_host_allreduce reduces from without an algorithm. Set by the coordinator
     * around the run of that one response; the first host allreduce takes it (NULL again). */
    const struct small_segment *staged;
    size_t staged_bytes;
    MPI_Comm node_comm, cross_comm;
    /* A world without MPI (lib/coordinator/world_links.h) whose ranks share hosts: the group of
     * the host's ranks its segments were made over (world_segments.c), which stays for the
     * negotiation's slots; NULL over MPI (node_comm and cross_comm then hold the host). */
    struct executor_world_group *world_group;
    bool joined;                /* this rank has joined: it has no tensors for new names */
    struct timeline *timeline;  /* rank 0 with CHORUS_TIMELINE, else NULL */
    const char *last_algorithm; /* that ran the last collective, for the timeline */
    struct abort_watch abort;   /* for another rank's notice that it stopped */
    /* A process set's executor: its aborts and the notices it heeds go through the job's. */
    struct executor *parent;
    /* A lane's executor (lib/lane), run by a user thread beside the background thread: it
     * learns of other ranks' failures from `peer_failure` (its instance stopped) rather than
     * from their notices, and after a fatal error of its own only poisons its segment: the
     * instance stops through `fatal_error`, and the background thread tells the others. */
    bool detached;
    chorus_status (*peer_failure)(void *owner, char *error, size_t error_size);
    bool aborted;               /* this rank stopped after a fatal error (executor_abort) */

    /* Supplied by the owner: find-and-remove the local request of an agreed description's name
     * in its set (NULL if none), and complete one. */
    void *owner;
    struct request *(*take_request)(void *owner, const struct wire_request *agreed);
    void (*finish)(void *owner, struct request *request, chorus_status status, const char *message);
    void (*join_done)(void *owner, int last_rank);
    /* A fatal error is about to complete handles: later submits must already fail. */
    void (*fatal_error)(void *owner, chorus_status status, const char *message);
    /* Called now and then while a wait of a batch waits on other ranks (may be NULL): the owner
     * keeps its heartbeats going, so that the others do not take this rank for dead. */
    void (*waiting)(void *owner);
    /* Called after every executor_run that ran something (may be NULL): the owner hands the
     * core to the user threads its completions woke. */
    void (*ran)(void *owner);
};

/* Collective over the data communicator, once at start-up: creates the host's shared segment
 * where ranks share hosts, rather than at the first collective that uses it, so that no rank
 * can be left inside that creation by a rank that failed before reaching it. */
chorus_status executor_prepare(struct executor *executor, char *error, size_t error_size);
/* The same in a world without MPI (world_segments.c), collective over the executor's transport
 * (the world's), the hosts told by its host_names (ranks of one name share a host). The
 * segments are memory files (host_parts.h). */
chorus_status executor_prepare_on_links(struct executor *executor, char *error,
                                        size_t error_size);
/* Over links after executor_prepare_on_links, the host's ranks as the negotiation's slots are
 * made over them; NULL over MPI, or where ranks do not share hosts. */
const struct host_exchange *executor_host_exchange(const struct executor *executor);
/* The executor's rank of local rank `local` of its host's segment (-1 if unknown), and in a
 * world without MPI the world rank of the host's member `local` (world_segments.c). */
int executor_rank_of_local(const struct executor *executor, int local);
/* The failure of local rank `local` whose process ended, naming its rank and host where known. */
void executor_local_rank_ended(const struct executor *executor, int local, char *error,
                               size_t error_size);
int executor_world_member(const struct executor *executor, int local);
/* A segment just made (or not: `made`): the executor's hooks into its waits. */
void executor_adopt_node(struct executor *executor, bool made);
/* Frees what executor_prepare_on_links kept (executor_release calls it). */
void executor_release_world_group(struct executor *executor);

/* Runs `count` responses in the fusion plan's order. This rank's request of each response is
 * taken by its name (take_request), or, where `taken` is not NULL, is taken[i]: an ordered
 * operation's, which its caller already holds (ordered operations are kept by their handle;
 * their names only label them). Returns CHORUS_OK, or a fatal error (MPI, NCCL, memory) whose
 * text is in `error`: the data path can no longer be trusted. */
chorus_status executor_run(struct executor *executor, const struct wire_response *responses,
                           size_t count, struct request *const *taken, char *error,
                           size_t error_size);

/* Bounds the waits of what runs next by `seconds` (an ordered operation's timeout_seconds), or,
 * with 0, by CHORUS_TIMEOUT_SECONDS again. */
void executor_bound_waits(struct executor *executor, double seconds);

/* An allgather of one record of `bytes` per rank into `all` (in rank order), bounded like a
 * batch by the timeout and other ranks' notices: the check that precedes an ordered
 * operation. Returns CHORUS_OK or a fatal error whose text is in `error`; the caller decides
 * what a failure means (the ranks are then out of step: executor_abort). */
chorus_status executor_exchange_records(struct executor *executor, const void *mine, size_t bytes,
                                        void *all, char *error, size_t error_size);

/* Up to this many members, the blocks of the check may differ in length
 * (executor_exchange_varying_records). */
#define EXECUTOR_VARYING_RECORDS_UP_TO 8

/* Whether the executor's members are few enough for executor_exchange_varying_records. */
bool executor_records_may_vary(const struct executor *executor);

/* executor_exchange_records, where this member's block is `bytes` long and the others' may be
 * of any length up to `capacity` (the check may carry an operation's data, whose size only its
 * sender knows for sure): the blocks lie `capacity` bytes apart in `all`. */
chorus_status executor_exchange_varying_records(struct executor *executor, const void *mine,
                                                size_t bytes, size_t capacity, void *all,
                                                char *error, size_t error_size);

void executor_release(struct executor *executor);

/* Makes `executor` run the collectives of a process set over `comm` (an MPI_Comm passed by
 * pointer, which must stay put), this rank being `rank` of `nranks` there, with `parent`'s
 * settings (the same ones, not a copy), callbacks and abort notices. executor_prepare_set() then creates the set's host
 * segment where the set has the same number of ranks on every host (collective over `comm`);
 * without it the set's collectives run over MPI alone. */
void executor_init_for_set(struct executor *executor, struct executor *parent, const void *comm,
                           int rank, int nranks);
chorus_status executor_prepare_set(struct executor *executor, char *error, size_t error_size);

/* Makes `executor` a detached one (see `detached`) over `comm` (an MPI_Comm passed by pointer,
 * which must stay put), this rank being `rank` of `nranks`, with `settings`; its owner sets its
 * callbacks. executor_prepare_set() then creates its host segment. */
void executor_init_detached(struct executor *executor, const struct executor_settings *settings,
                            const void *comm, int rank, int nranks);

/* Fatal errors on one rank only. executor_watch_aborts() posts the receive for other ranks'
 * notices on `control_comm` (abort.h) and makes the transport's waits poll it; false if MPI
 * refused. executor_abort() is called once this rank stops after a fatal error (`status`,
 * `reason`): unless it stops because of another rank's notice, it sends its own to every rank,
 * and it poisons its counter in the host's segment, so that no rank waits for it any more. It
 * is idempotent. executor_peer_failure() returns CHORUS_OK, or, once another rank's notice has
 * arrived, that rank's status with "stopped because rank R failed: <reason>" in `error`. */
bool executor_watch_aborts(struct executor *executor, MPI_Comm control_comm);
/* Unit tests without MPI: the notices travel through `poll` and `notify` (abort.h's hooks). */
void executor_watch_aborts_through(struct executor *executor,
                                   bool (*poll)(void *context, struct abort_notice *notice),
                                   void (*notify)(void *context,
                                                  const struct abort_notice *notice),
                                   void *context);
void executor_abort(struct executor *executor, chorus_status status, const char *reason);
chorus_status executor_peer_failure(struct executor *executor, char *error, size_t error_size);

#ifdef CHORUS_FAULT_INJECTION
/* Only in the test build of the library (chorus_core_faulty, for tests of the fatal-error
 * path): the `nth` batch this process runs from now on (1: the next one) fails as a failed MPI
 * call would; every rank that arms the same `nth` at the same point fails the same batch, as
 * they all run the same batches in the same order. 0 disarms it. Any thread, before or while
 * chorus runs. */
void executor_inject_fault(long nth);
#endif

#endif
