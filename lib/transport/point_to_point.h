/*
 * point_to_point.h — the point-to-point interface that every collective algorithm is written
 * against: nonblocking send and receive of bytes between ranks, and waiting for them. Three
 * implementations exist: over chorus's MPI communicator (transport_mpi.c), over threads of one
 * process (transport_threads.c), which lets unit tests run every algorithm for 1-5 ranks
 * without mpirun, and over UCX (transport_ucx.h), whose worlds outlive a lost rank (not yet
 * used by chorus_init). A fourth reaches a group of another's ranks (transport_subset.c).
 */
#ifndef CHORUS_POINT_TO_POINT_H
#define CHORUS_POINT_TO_POINT_H

#include "../core/common.h"

/* One outstanding send or receive. The implementation keeps what it needs in `slots`. */
struct transport_request {
    void *slots[4];
};

struct transport;

struct transport_ops {
    chorus_status (*isend)(struct transport *transport, const void *buffer, size_t bytes,
                           int peer, int tag, struct transport_request *request);
    chorus_status (*irecv)(struct transport *transport, void *buffer, size_t bytes, int peer,
                           int tag, struct transport_request *request);
    /* irecv, where the message may be shorter than `bytes` (below 2 GiB): for a member's block
     * whose length only its sender knows. */
    chorus_status (*irecv_up_to)(struct transport *transport, void *buffer, size_t bytes,
                                 int peer, int tag, struct transport_request *request);
    /* Completes every request in `requests`. */
    chorus_status (*waitall)(struct transport *transport, size_t count,
                             struct transport_request *requests);
    /* Gives up requests that will not be waited for (an algorithm that stops after a failure):
     * receives not yet matched are cancelled, the others get a moment to finish, and nothing
     * lands in their buffers afterwards. */
    void (*cancel)(struct transport *transport, size_t count, struct transport_request *requests);
};

struct transport {
    const struct transport_ops *ops;
    int rank;
    int nranks;
    void *context;
    char error[512]; /* the reason of the last failure */
    /* Asked now and then during a long wait (NULL: never). Anything but CHORUS_OK ends the wait
     * with that status and the reason written to `error`: another rank stopped after a fatal
     * error and will never send what is waited for. */
    chorus_status (*interrupted)(void *context, char *error, size_t error_size);
    void *interrupt_context;
};

static inline chorus_status transport_isend(struct transport *transport, const void *buffer,
                                            size_t bytes, int peer, int tag,
                                            struct transport_request *request)
{
    return transport->ops->isend(transport, buffer, bytes, peer, tag, request);
}

static inline chorus_status transport_irecv(struct transport *transport, void *buffer,
                                            size_t bytes, int peer, int tag,
                                            struct transport_request *request)
{
    return transport->ops->irecv(transport, buffer, bytes, peer, tag, request);
}

static inline chorus_status transport_irecv_up_to(struct transport *transport, void *buffer,
                                                  size_t bytes, int peer, int tag,
                                                  struct transport_request *request)
{
    return transport->ops->irecv_up_to(transport, buffer, bytes, peer, tag, request);
}

static inline chorus_status transport_waitall(struct transport *transport, size_t count,
                                              struct transport_request *requests)
{
    return transport->ops->waitall(transport, count, requests);
}

static inline void transport_cancel(struct transport *transport, size_t count,
                                    struct transport_request *requests)
{
    transport->ops->cancel(transport, count, requests);
}

/* For the transports' wait loops: asks the `interrupted` hook (CHORUS_OK where there is none),
 * and on a stop adds to `error` whom this rank was waiting for. */
chorus_status transport_ask_interrupted(struct transport *transport, bool receive, int peer);

/* Sends `send_bytes` to `destination` while receiving `recv_bytes` from `source`. */
chorus_status transport_sendrecv(struct transport *transport, const void *send_buffer,
                                 size_t send_bytes, int destination, void *recv_buffer,
                                 size_t recv_bytes, int source, int tag);

/* The MPI transport over `comm` (an MPI_Comm passed as a pointer to keep MPI types out of
 * this header's users). */
void transport_mpi_init(struct transport *transport, const void *mpi_comm);
/* Whether `transport` is the MPI transport; if so, its communicator is written to `mpi_comm`
 * (an MPI_Comm *). For what MPI does better than point to point (a tiny allgather). */
bool transport_mpi_comm(const struct transport *transport, void *mpi_comm);

/* The MPI library's name and version on one line ("Open MPI v4.1.4", "MPICH Version: 4.0.2"):
 * MPI_Get_library_version's first line, tabs as spaces. Callable before MPI_Init. */
void transport_mpi_library(char *line, size_t size);

/* The thread transport: `nranks` endpoints in one process, one per thread. */
struct thread_fabric;
struct thread_fabric *thread_fabric_create(int nranks);
void thread_fabric_destroy(struct thread_fabric *fabric);
void transport_threads_init(struct transport *transport, struct thread_fabric *fabric, int rank);

/* A group of `parent`'s ranks (transport_subset.c): its rank r is the parent's rank
 * members[r] (count of them, this rank among them), its tags 0 .. 65535, carried on the parent
 * as group << 16 | tag, so that groups numbered differently (1 .. 32767) and the parent's own
 * messages never match. Over MPI only where group << 16 | 65535 <= MPI_TAG_UB (else MPI_Isend
 * fails). Arguments it cannot take (no such rank, this rank not a member, a group out of range)
 * are written to `error`, leave `rank` -1 and make every call fail with
 * CHORUS_ERR_INVALID_ARGUMENT. The parent must outlive the subset and be used by no other
 * thread while the subset is. */
void transport_subset_init(struct transport *subset, struct transport *parent,
                           const int *members, int count, int group);
/* Frees what transport_subset_init allocated; the parent is left as it is. */
void transport_subset_release(struct transport *subset);

#endif
