/*
 * runner.h — runs what every rank agreed, in order: a process set's collectives on the set's
 * executor (skipped where this rank is not a member), changes of the sets as they come, the
 * rest on the job's executor. It owns those executors. Below it: the executor and this rank's
 * pending requests.
 */
#ifndef CHORUS_RUNNER_H
#define CHORUS_RUNNER_H

#include "../executor/executor.h"
#include "../lane/lane.h"
#include "pending.h"

/* A process set this rank is a member of, with the communicator its collectives run on. */
struct set_executor {
    int id;
    MPI_Comm comm;
    MPI_Comm transfer_comm; /* the members' point-to-point transfers (transfers.h) */
    struct executor executor;
    struct lane *lane;      /* its lane where its ranks share this host (lib/lane), or NULL */
};

struct runner {
    struct chorus_context *context;
    struct pending *pending;
    struct executor executor;            /* the job's */
    struct lane *lane;                   /* the job's lane (lib/lane), or NULL */
    struct set_executor **set_executors; /* the process sets this rank is a member of, by id */
    size_t set_executor_count;
};

/* Runs agreed responses in order, this rank's requests taken by name, or given in `taken`
 * (executor_run). Returns CHORUS_OK or a fatal error, with its text in `error`. */
chorus_status runner_run(struct runner *runner, const struct wire_response *responses,
                         size_t count, struct request *const *taken, char *error,
                         size_t error_size);

/* Opens the job's lane where every rank shares this host (or there is one rank), and publishes
 * it to the user threads (context->job_lane). At start-up, after the executor's preparation. */
void runner_open_job_lane(struct runner *runner);

/* The executor of process set `process_set` (0: the job's), or NULL where this rank is not a
 * member. */
struct executor *runner_executor_of(struct runner *runner, int process_set);

/* The communicator of process set `process_set`'s point-to-point transfers (0: the job's), or
 * MPI_COMM_NULL where this rank is not a member. */
MPI_Comm runner_transfer_comm(struct runner *runner, int process_set);

/* This rank stops after a fatal error: the job's executor tells the other ranks, and every
 * host segment (the sets' too) is poisoned, so that local peers stop waiting for it. */
void runner_abort(struct runner *runner, chorus_status status, const char *reason);

/* Frees the executors and communicators (at the thread's end); the sets' in the order of
 * their ids, alike on every member, as freeing a set's host segment is collective. */
void runner_release(struct runner *runner);

#endif
