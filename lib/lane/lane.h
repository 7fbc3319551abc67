/*
 * lane.h — ordered operations (CHORUS_OP_ORDERED) on the thread that submits them, beside the
 * background thread, for a process set whose ranks all share one host: the lane of that set.
 *
 * Every ordered operation of such a set passes through its lane, in call order. The members
 * publish what they submitted at the position (a signature, the count and a digest of every
 * field their collective compares, negotiated_fields.h) in one cache line of the host's
 * small-message slots (small_segment.h), with the payload beside it: a small allreduce,
 * broadcast, allgather or reducescatter then runs in that same phase, with no hand-off to the
 * background thread, no message through MPI and no allocation (an allgather's or
 * reducescatter's output comes from the output pool). Members that disagree find it out in
 * that phase, all of them alike; they then exchange their full records in a second phase, so
 * that every member fails with the same message as the background thread's ordered check
 * gives. An operation the lane does not run (too large for the slots, on a GPU, compressed,
 * Adasum, an alltoall) has still been checked there: it goes to the background thread with what
 * the members agreed, which then runs it without a check of its own.
 *
 * Larger operations of host memory run on an executor of the lane's own, by the same thread,
 * over a communicator and a host segment of their own: no ordered operation of such a set
 * touches the background thread, which runs the negotiated ones, so the two kinds may be in
 * flight at once (a DDP model and a Horovod-style optimizer) in any order on each rank. GPU
 * operations still go to the background thread.
 *
 * Why this is safe beside the background thread: a lane's state (its slots, its position, its
 * executor) is touched only by the thread that holds the lane's turn, a mutex of its own, and
 * the background thread never takes it; the background thread only creates a lane before it
 * is published (init, a set's add, under the context's lock) and closes it after it is
 * withdrawn, once no thread is inside (`users`). The slots are shared with the other ranks'
 * lanes only, through the phase protocol (small_segment.h); the executor's MPI calls use the
 * lane's own communicator (MPI_THREAD_MULTIPLE). The ThreadSanitizer suite runs the ordered
 * tests over it (tsan_ordered_np3).
 *
 * A member that does not arrive within the operation's timeout (CHORUS_TIMEOUT_SECONDS) is a
 * fatal error, as for the background thread's check: the lane reports it to the instance
 * (context_report_failure), whose background thread then stops the job. A lane also gives up
 * at once when its instance stops (a fatal error elsewhere, a shutdown) or it is closed.
 */
#ifndef CHORUS_LANE_H
#define CHORUS_LANE_H

#include "../core/context.h"
#include "../executor/executor.h"
#include "../transport/small_segment.h"

#include <pthread.h>
#include <stdatomic.h>

struct lane {
    pthread_mutex_t turn;       /* held by the thread running an operation: call order */
    struct small_segment segment;
    struct small_segment *local; /* a set of one rank, or a test: its slots in ordinary memory */
    bool segment_mpi;            /* `segment` is a window of its own (lane_open_mpi) */
    /* Operations of host memory the slots do not take, run by the lane's thread on an executor
     * of the lane's own (a detached one, over a duplicate of the set's communicator, with a
     * host segment of its own), never on the background thread's: ordered operations then go
     * on beside negotiated ones, which the background thread runs, in whatever order the two
     * meet on each rank. NULL: they go to the background thread. */
    struct executor *executor;
    MPI_Comm executor_comm;
    struct executor_settings settings; /* the instance's, as they were at the start */
    struct chorus_params params;
    struct lane_result *running;       /* under turn: what the executor's run tells */
    uint64_t position;          /* under turn: the set's ordered operations so far */
    struct process_set members; /* the set: its id, and member m is job rank members.ranks[m] */
    int job_size;
    size_t limit;               /* largest payload a rank moves through its slot */
    double timeout_seconds;     /* CHORUS_TIMEOUT_SECONDS (0: never) */
    /* Under turn: the last description digested, and its digest (a loop submits the same
     * operations again and again). */
    struct wire_request digested;
    uint64_t digest;
    bool digest_known;
    struct chorus_context *context;
    _Atomic int users;          /* threads inside (lane_enter .. lane_leave) */
    _Atomic bool closed;        /* no new operation may start */
};

/* A new lane for process set `process_set` of `members` ranks (member m is job rank
 * job_ranks[m]; NULL: m itself), over `segment` (tests: whose owner frees it after the lane),
 * or, with `segment` NULL, over slots of its own (one member). `limit`: the largest payload per
 * rank (CHORUS_SMALL_LIMIT). No executor: operations the slots do not take go to the background
 * thread. NULL when out of memory. */
struct lane *lane_create(struct chorus_context *context, int process_set, int members,
                         const int *job_ranks, const struct small_segment *segment, size_t limit,
                         double timeout_seconds);

/* The lane of a process set whose ranks all share this host, over MPI: collective over `comm`
 * (the set's, ranks in set order: member m is job rank job_ranks[m]; NULL: m) and `node_comm`
 * (the same ranks, in the same order), both MPI_Comms passed by pointer. Its slots are a window
 * of their own, and with `own_executor` (MPI_THREAD_MULTIPLE: the lane's thread calls MPI
 * beside the background thread) it has an executor of its own, with `settings` as they are
 * now. Every member gets a lane or none (NULL, with why in `error`). Background thread. */
struct lane *lane_open_mpi(struct chorus_context *context, int process_set, const int *job_ranks,
                           const void *comm, const void *node_comm,
                           const struct executor_settings *settings, bool own_executor,
                           char *error, size_t error_size);

/* Closes the lane, waits until no thread is inside, and frees it (NULL: nothing). A lane from
 * lane_open_mpi is freed collectively, on every member alike, unless the instance `failed`
 * (its window and communicator are then kept until MPI is finalized). */
void lane_destroy(struct lane *lane, bool failed);
/* Closes it and waits until no thread is inside, without freeing it (the job's lane, which the
 * context frees). */
void lane_close(struct lane *lane);

/* The slots' capacity for a limit: at least what a full record takes. */
size_t lane_slot_capacity(size_t limit);

/* Enters the lane (false, having entered nothing, when it is closed); lane_leave leaves it.
 * The lane must stay allocated meanwhile: the caller found it under its owner's rules. */
bool lane_enter(struct lane *lane);
void lane_leave(struct lane *lane);

/* One ordered operation: its description (its name only labels it, borrowed; its bytes
 * zeroed where no field is, so that descriptions compare as bytes), buffers and bound. */
struct lane_operation {
    const struct wire_request *desc;
    const void *input;      /* a barrier's: NULL, or a byte of flags */
    void *output;           /* allreduce, broadcast: where the result goes; a barrier's: NULL,
                               or a byte for the OR of every member's flags */
    size_t count;           /* elements of the input */
    float *error_feedback;  /* a lossy allreduce's residual (struct request's), or NULL */
    double timeout_seconds; /* the operation's own bound; 0: the lane's */
    const int64_t *splits;  /* an alltoall's rows per member */
    struct chorus_handle *handle; /* where the lane's executor leaves an output */
};

enum lane_outcome {
    LANE_RAN,       /* it ran (or failed) in the lane: the result says how; an output of the
                       lane's executor is on the operation's handle already */
    LANE_ELSEWHERE, /* the members agree; the background thread runs it with `agreed` */
};

struct lane_result {
    chorus_status status;
    char *message;            /* malloc'd, on failure */
    chorus_tensor output;     /* allgather, reducescatter: the output, from the output pool */
    size_t output_capacity;
    struct ordered_agreement *agreed; /* LANE_ELSEWHERE: malloc'd, for the request */
};

/* Runs `operation` at the lane's next position (after lane_enter). */
enum lane_outcome lane_run(struct lane *lane, const struct lane_operation *operation,
                           struct lane_result *result);

#endif
