/*
 * instance.h — what the files of lib/api share: the current chorus instance (api.c), the
 * queue of requests for its background thread (submit.c), and REJECT.
 */
#ifndef CHORUS_INSTANCE_H
#define CHORUS_INSTANCE_H

#include "../core/common.h"

/* Fails a call: the status, with its message in chorus_last_error(). */
#define REJECT(status, ...) status_set_last_error(status, __VA_ARGS__)

struct chorus_context;
struct request;
struct chorus_handle;

/* chorus_init on a world without MPI (lib/coordinator/world_links.h; it must outlive the
 * instance): its links in place of MPI's communicators. */
struct world_links;
chorus_status api_init_on_links(struct world_links *links, const chorus_init_options *options);

/* The current instance, held for reading until api_instance_release(); NULL (and nothing held) when
 * chorus is not initialized. */
struct chorus_context *api_instance_acquire(void);
void api_instance_release(void);

/* CHORUS_ERR_NOT_INITIALIZED, with a message naming `call`. */
chorus_status api_not_initialized(const char *call);

/* Queues `count` requests for the background thread as one unit, unless chorus has stopped or
 * one of their names is in flight on this rank (then the status, with its message); `wake`:
 * and wakes the thread (a caller about to take its turn does not). */
chorus_status api_enqueue_requests(struct chorus_context *context, struct request **requests,
                                   size_t count, bool wake);
/* Undoes a submission that failed before it was queued: frees `request` and completes and
 * frees its `handle` (either may be NULL) with `status`. */
void api_discard_submission(struct request *request, struct chorus_handle *handle,
                            chorus_status status);
/* chorus_submit for a caller that waits for the operation at once (the blocking forms): the
 * background thread is not woken for it, as the waiting thread turns the loop itself. */
chorus_status api_submit_to_wait(const chorus_op_args *args, struct chorus_handle **handle);

/* Queues one request that runs in call order (an ordered operation, a transfer), and runs it on
 * this thread if the background thread is idle, else wakes that thread for it. */
chorus_status api_enqueue_ordered(struct chorus_context *context, struct request *request);

#endif
