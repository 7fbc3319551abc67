/*
 * pending.h — this rank's requests, from the user threads' submissions until their handles
 * complete: the negotiated ones by name (the name is what rank 0's responses name), the ordered
 * ones in call order by their handle (their names only label them: several of one name may be
 * in flight), the descriptions not yet sent to rank 0, and the completion of handles (one by
 * one, or all at once when chorus stops). The bottom of the coordinator: every other part uses
 * it, it uses none of them.
 */
#ifndef CHORUS_PENDING_H
#define CHORUS_PENDING_H

#include "../core/context.h"
#include "../negotiation/response_cache.h"

struct pending {
    struct chorus_context *context;
    int rank;
    struct name_table table;     /* name -> negotiated struct request, not completed */
    struct request *ordered_head; /* ordered requests taken, not yet run, in call order */
    struct request *ordered_tail;
    struct wire_request *unsent; /* descriptions not yet sent to rank 0 */
    size_t unsent_count;
    size_t unsent_capacity;
    uint32_t unsent_flags;       /* wire_flags to send with them */
    bool shutdown_sent;          /* this rank's chorus_shutdown is on its way to rank 0 */
    bool join_sent;              /* this rank's chorus_join is on its way, until it completes */
};

void pending_init(struct pending *pending, struct chorus_context *context, int rank);
void pending_destroy(struct pending *pending);

/* Moves the user threads' submissions in: the negotiated ones into the table, returned chained
 * by `next` for the caller to route (a ready-round bit, or pending_queue_unsent); the ordered
 * ones to the end of the ordered queue (pending_next_ordered). `raised` gets the wire flags of a
 * new shutdown or join (also added to unsent_flags). Returns NULL when no negotiated one came;
 * a request whose name could not be filed is completed with an error here. */
struct request *pending_take_submissions(struct pending *pending, uint32_t *raised);

/* The next ordered request to run, taken off the queue (NULL: none): the caller completes it
 * (pending_finish, or through the executor), or gives it back to the front of the queue with
 * pending_keep_ordered when the loop must stop first, so that pending_fail_all completes it. */
struct request *pending_next_ordered(struct pending *pending);
void pending_keep_ordered(struct pending *pending, struct request *request);

/* Queues a description for rank 0 (as its cache slot where `cache` holds it; rank 0 sends
 * in full). False when out of memory. */
bool pending_queue_unsent(struct pending *pending, const struct response_cache *cache,
                          const struct wire_request *request);
void pending_clear_unsent(struct pending *pending);

/* The executor's callbacks (its `owner` is the struct pending): complete one request; find
 * and remove the negotiated request of a name (NULL if none); every rank has joined; a fatal
 * error is about to complete handles, so later submits must already fail. */
void pending_finish(void *pending, struct request *request, chorus_status status,
                    const char *message);
struct request *pending_take(void *pending, const struct wire_request *agreed);
void pending_join_done(void *pending, int last_rank);
void pending_refuse_submissions(void *pending, chorus_status status, const char *reason);

/* Completes every handle of this rank (pending, queued, the join's) with `status` and makes
 * later submits fail with it. */
void pending_fail_all(struct pending *pending, chorus_status status, const char *reason);

#endif
