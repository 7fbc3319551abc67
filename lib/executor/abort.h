/*
 * abort.h — how a rank that stops after a fatal error tells the others, so that they stop too
 * instead of waiting forever inside a collective for data it will never send. The rank that
 * failed sends a notice (its status and reason) to every other rank; every rank keeps a receive
 * for one posted, which the background thread polls between negotiation rounds and the
 * transport's waits poll while a collective runs. Ranks of one host waiting on each other
 * through the shared segment learn it from the segment (node_segment_poison). Private to
 * lib/coordinator.
 */
#ifndef CHORUS_ABORT_H
#define CHORUS_ABORT_H

#include "../core/common.h"

#include <mpi.h>

/* The notice's tag on the control communicator, beside background.h's negotiation tags. */
enum { TAG_ABORT = 3 };

struct abort_notice {
    int32_t status;
    int32_t rank; /* who stopped, or ABORT_RANK_TRANSPORT */
    char reason[504];
};
/* A notice no rank sent: the transport's own news of a lost rank (abort_ucx_poll), its reason
 * the transport's message. */
#define ABORT_RANK_TRANSPORT (-1)

struct abort_watch {
    bool started;
    MPI_Comm comm;
    MPI_Request request; /* the posted receive; MPI_REQUEST_NULL once a notice came or stopped */
    bool received;
    struct abort_notice notice; /* valid once received */
    /* Unit tests without MPI: notices travel through these instead (NULL: over MPI). */
    bool (*poll_hook)(void *context, struct abort_notice *notice);
    void (*notify_hook)(void *context, const struct abort_notice *notice);
    void *hook_context;
};

/* Posts the receive for a notice on `comm`. Returns false if MPI refused. */
bool abort_watch_start(struct abort_watch *watch, MPI_Comm comm);
/* Whether another rank's notice has arrived (then `notice` holds it). Cheap: one MPI_Test. */
bool abort_watch_poll(struct abort_watch *watch);
/* Withdraws the receive, if no notice came. */
void abort_watch_stop(struct abort_watch *watch);

/* Sends this rank's notice (this rank being `rank`) to every other rank of the watch's
 * communicator, without waiting for delivery. Nothing when the watch never started. */
void abort_notify(struct abort_watch *watch, int rank, chorus_status status, const char *reason);

/* The notices over a UCX fabric (abort_ucx.c, part of the UCX library: transport_ucx.h): the
 * hooks above, whose context is the fabric (struct ucx_fabric *). Callable from any thread. */
bool abort_ucx_poll(void *fabric, struct abort_notice *notice);
void abort_ucx_notify(void *fabric, const struct abort_notice *notice);

#endif
