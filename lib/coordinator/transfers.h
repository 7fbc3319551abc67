/*
 * transfers.h — the user's point-to-point transfers (chorus_send_async, chorus_recv_async). The
 * loop posts each as a non-blocking MPI send or receive, in the order this rank submitted it
 * among its ordered operations, on the communicator its process set keeps for transfers
 * (runner_transfer_comm), so that no message of the user's meets a collective's. Each turn of
 * the loop tests the transfers in flight and completes those MPI completed: a receive's size is
 * checked against its tensor, and its sender recorded as a job rank on the handle. Below the
 * loop, beside ordered.h.
 */
#ifndef CHORUS_TRANSFERS_H
#define CHORUS_TRANSFERS_H

#include "pending.h"
#include "runner.h"

#include <mpi.h>

struct transfer;

struct transfers {
    struct runner *runner;
    struct pending *pending;
    struct transfer *active; /* posted, in the order posted */
    MPI_Request *requests;   /* active[i]'s MPI request, for MPI_Testsome (null for a receive
                                not yet matched) */
    size_t count;
    size_t capacity;
};

void transfers_init(struct transfers *transfers, struct runner *runner, struct pending *pending);
/* Completes what is still in flight with CHORUS_ERR_SHUTDOWN, then frees. */
void transfers_release(struct transfers *transfers);

/* Posts `request` (a REQUEST_TRANSFER taken off the ordered queue); one that cannot be posted
 * (its set gone, MPI refusing it) completes at once with the reason. */
void transfers_post(struct transfers *transfers, struct request *request);

/* Completes the transfers MPI has finished; true when any did. */
bool transfers_progress(struct transfers *transfers);

/* Whether any transfer is in flight (the loop then polls more often). */
bool transfers_in_flight(const struct transfers *transfers);

/* Completes every transfer in flight with `status` and `reason` (shutdown, a fatal error): a
 * receive not yet matched is dropped, one matched waits for its message; a send is left to MPI,
 * which may still read its tensor until the peer takes or drops it. */
void transfers_fail_all(struct transfers *transfers, chorus_status status, const char *reason);

#endif
