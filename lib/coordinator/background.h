/*
 * background.h — the background thread's state, shared by background.c (the thread and its
 * start-up), exchange.c (the negotiation messages between the ranks and rank 0, and running what
 * rank 0 decides) and requests.c (taking submissions, completing handles). background.c uses
 * the other two, exchange.c uses requests.c. Private to lib/coordinator.
 */
#ifndef CHORUS_BACKGROUND_H
#define CHORUS_BACKGROUND_H

#include "../core/context.h"
#include "coordinator.h"
#include "../executor/executor.h"
#include "liveness.h"
#include "negotiation.h"
#include "ready_rounds.h"
#include "response_cache.h"

enum { TAG_REQUESTS = 1, TAG_RESPONSES = 2 }; /* and abort.h's TAG_ABORT */

struct outgoing {
    uint8_t *bytes;
    MPI_Request *requests;
    int count;
    struct outgoing *next;
};

/* A process set this rank is a member of, with the communicator its collectives run on. */
struct set_executor {
    int id;
    MPI_Comm comm;
    struct executor executor;
};

struct background {
    struct chorus_context *context;
    int rank;
    int size;
    struct name_table pending; /* name -> struct request, submitted and not completed */
    struct negotiator negotiator;
    struct response_cache cache;
    struct executor executor;
    struct set_executor **set_executors; /* the process sets this rank is a member of */
    size_t set_executor_count;
    struct outgoing *outgoing;
    struct liveness liveness; /* star protocol: heartbeats and silent peers */
    int *other_ranks;         /* rank 0: ranks 1 .. size-1, where responses go */

    struct wire_request *unsent; /* requests not yet sent to rank 0 */
    size_t unsent_count;
    size_t unsent_capacity;
    uint32_t unsent_flags;
    bool shutdown_sent;
    bool join_sent;

    bool shutdown_decided; /* rank 0: some rank asked to shut down */
    int shutdown_origin;
    bool stopping;         /* handles failed; waiting for BYEs (rank 0) */
    int byes;
    bool finished;

    /* CHORUS_NEGOTIATION=rounds (rounds.c) */
    bool rounds_mode;
    struct ready_rounds rounds;
    uint64_t *round_mine;
    uint64_t *round_result;
    MPI_Request round_request;
    bool round_posted;
    double round_posted_at;
    double demote_after;
    struct wire_response *round_responses; /* rank 0: sent before the posted round */
    size_t round_response_count;
    char round_shutdown[128];              /* rank 0: why, when they end in a shutdown */

    /* Negotiation's messages (not the rounds' own, which MPI's allreduce sends), for the log. */
    size_t messages_sent;
    size_t messages_received;
    size_t rounds_posted;

    double last_cycle;
    double last_stall_check;
    char error[2048];
};

/* requests.c */
/* Completes one request of this rank (an executor callback, as are the next three). */
void finish_request(void *owner, struct request *request, chorus_status status,
                    const char *message);
/* Finds and removes this rank's request of `name`; NULL if none. */
struct request *take_request(void *owner, const char *name);
/* Every rank has joined: completes the join handle. */
void join_done(void *owner, int last_rank);
/* A fatal error is about to complete handles: later submits fail from now on. */
void executor_fatal_error(void *owner, chorus_status status, const char *message);
/* Rank 0: records from now on into `timeline` (NULL: none), negotiation spans included. */
void adopt_timeline(struct background *background, struct timeline *timeline);
/* Moves the user threads' submissions into this thread's tables. Returns true if any. */
bool take_submissions(struct background *background);
/* Completes every handle of this rank with `status` and makes later submits fail with it. */
void fail_everything(struct background *background, chorus_status status, const char *reason);
/* Logs a fatal error, fails everything and ends the thread's loop. */
void fatal(struct background *background, chorus_status status, const char *what);
void clear_unsent(struct background *background);
/* Queues a request for rank 0 (as its cache slot where the cache holds it). */
bool queue_unsent(struct background *background, const struct wire_request *request);

/* exchange.c */
/* Frees the buffers of sends that completed. With `wait`, blocks until all have; after a fatal
 * error only for a while, then it gives the rest up (see exchange.c). */
void progress_outgoing(struct background *background, bool wait);
/* Sends (or, on rank 0, records) what was submitted since the last time. */
bool flush_requests(struct background *background);
/* Rank 0: takes in every waiting REQUESTS message, answers what is ready, runs it. */
bool coordinate(struct background *background);
/* Other ranks, after running a RESPONSES message with SHUTDOWN: fail what is left with the reason
 * it carries, say BYE to rank 0 and stop. */
void stop_following(struct background *background, const struct wire_message *message);
/* Other ranks: runs the responses rank 0 sent, in order. */
bool follow(struct background *background);
/* The timeline's negotiation span (a negotiator `resolved` callback). */
void timeline_negotiated(void *context, const char *name, const double *arrivals, int nranks);
void stall_warning_log(void *context, const char *message);
/* Helpers that rounds.c shares. */
bool send_message(struct background *background, const struct wire_message *message,
                  const int *destinations, int destination_count, int tag);
/* Receives one message with `tag` from `source` if one is waiting. */
bool receive_message(struct background *background, int source, int tag,
                     struct wire_message *message, int *sender);
/* Star protocol: sends a heartbeat when this rank has been quiet, and fails the job when a
 * watched peer has been silent beyond CHORUS_TIMEOUT_SECONDS (liveness.h). */
bool keep_alive(struct background *background);
/* The executor's `waiting` callback: heartbeats go on while a batch waits on other ranks. */
void heartbeat_while_waiting(void *owner);
/* Runs agreed responses; a failure is fatal. */
void execute(struct background *background, const struct wire_response *responses, size_t count);
/* Fails everything left with CHORUS_ERR_SHUTDOWN once every rank has to stop. */
void stop(struct background *background, const char *reason);
/* Rank 0 takes in every REQUESTS message waiting. */
bool take_in_requests(struct background *background);
/* Once a second: warns of, or fails, tensors some ranks submitted and others not. */
void check_stalls(struct background *background, double now);
/* Appends the error response that tells every rank who shut down (text also in `reason`). */
struct wire_response *append_shutdown_notice(struct background *background,
                                             struct wire_response *responses, size_t *count,
                                             char *reason, size_t reason_size);
/* Sends responses to every other rank, cached descriptions as their slots. */
void send_responses(struct background *background, const struct wire_response *responses,
                    size_t count);
/* Replaces slot-only responses by the cached descriptions, recording full ones. */
bool resolve_cached_responses(struct background *background, struct wire_message *message);

/* process_sets.c */
/* Runs agreed responses in order: a process set's collectives on the set's executor (skipped
 * where this rank is not a member), changes of the sets as they come, the rest on the job's
 * executor. Returns CHORUS_OK or a fatal error, with its text in `error`. */
chorus_status run_responses(struct background *background, const struct wire_response *responses,
                            size_t count, char *error, size_t error_size);
/* Frees the executors and communicators of the sets (at the thread's end), in the order of
 * their ids. */
void process_sets_release(struct background *background);
/* This rank stops after a fatal error: the sets' host segments are poisoned too, so that their
 * local peers stop waiting for it. */
void process_sets_abort(struct background *background, chorus_status status, const char *reason);

/* rounds.c */
/* Decides the protocol (CHORUS_NEGOTIATION) and prepares the rounds; false when out of memory. */
bool rounds_start(struct background *background);
void rounds_release(struct background *background);
/* Rounds mode: keeps a new submission as its slot's bit when it can. True if it did. */
bool rounds_take(struct background *background, const struct wire_request *request);
/* Rounds mode: completes the posted round (running what it decided) or posts the next. */
bool rounds_progress(struct background *background);

#endif
