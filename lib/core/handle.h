/*
 * handle.h — the completion object a submit call returns. The background thread writes the
 * message, then publishes the final status with a release store; readers load it with acquire,
 * so a reader that sees the status also sees the message and the output.
 */
#ifndef CHORUS_HANDLE_H
#define CHORUS_HANDLE_H

#include "common.h"
#include "request.h"

#include <pthread.h>
#include <stdatomic.h>

/* Gives back an output the handle owned: `capacity` bytes at `data`. */
typedef void (*output_release)(void *data, size_t capacity);

/* A live handle's first word; cleared when it is freed, so that a second chorus_handle_free (or
 * a pointer that is no handle) is refused with a message instead of corrupting the heap. */
#define HANDLE_MAGIC 0x444e4843u /* "CHND" */

/* What a collective left on the handle for one member. */
struct handle_output {
    chorus_tensor tensor;   /* allgather: the gathered tensor; reducescatter: this rank's block */
    bool owned;             /* tensor.data belongs to the handle */
    size_t capacity;        /* host output: its allocation, for the output pool */
    output_release release; /* frees an owned tensor.data */
};

struct chorus_handle {
    uint32_t magic;
    _Atomic int status; /* CHORUS_IN_PROGRESS until complete */
    pthread_mutex_t lock;
    pthread_cond_t completed;
    bool abandoned;          /* freed by the user before completion */
    size_t members_pending;  /* requests that still have to finish (a group's members) */
    chorus_status first_error;
    char *message;
    enum request_kind kind;
    int collective;          /* a collective's: chorus_collective, or an internal one (request.h) */
    enum transfer_direction direction; /* a transfer's */
    int source;              /* a receive's: the job rank whose message it took */
    /* Allgather, reducescatter, alltoall: one output per member of the group (one when alone;
     * `outputs` is then `single`). */
    struct handle_output *outputs;
    size_t output_count;
    struct handle_output single;
    int64_t *received_splits;      /* alltoall: rows received from each rank */
    size_t received_count;
    /* Where set, a count of operations in flight that completion decrements (the job's
     * collectives, whose count chorus_barrier tells the other ranks: lib/api/submit.c). */
    _Atomic long *in_flight_count;
};

/* A new in-progress handle of collective `collective` waiting for `members` requests. */
struct chorus_handle *handle_create(int collective, size_t members);
/* A new in-progress handle of one transfer. */
struct chorus_handle *handle_create_transfer(enum transfer_direction direction);

/* Records the outcome of one member request; the handle completes when the last member has
 * reported, with the first error reported (message formatted from `format`, NULL for none).
 * Frees the handle if the user already freed it. Background thread only. */
void handle_member_done(struct chorus_handle *handle, chorus_status status, const char *format,
                        ...) CHORUS_PRINTF(3, 4);

/* Completes a handle of one member that no other thread has seen yet (its submit call has not
 * returned it), without its lock: with `status`, and `message` (malloc'd, taken over; may be
 * NULL). */
void handle_finish_unpublished(struct chorus_handle *handle, chorus_status status,
                               char *message);

/* Waits for the handle to complete (spinning briefly, then yielding, then sleeping on its
 * condition variable) and returns its status. chorus_wait's last part (lib/api/wait.c). */
chorus_status handle_wait(struct chorus_handle *handle);

/* Sets member `member`'s output before it reports done. The handle owns it when `release` is
 * not NULL, and gives it back with release(data, capacity) when it is freed. */
void handle_set_output(struct chorus_handle *handle, size_t member, const chorus_tensor *output,
                       output_release release, size_t capacity);

/* Hands an alltoall's received splits (`count` entries, malloc'd) to the handle. */
void handle_set_received_splits(struct chorus_handle *handle, int64_t *splits, size_t count);

#endif
