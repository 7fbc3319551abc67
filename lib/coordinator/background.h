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
#include "negotiation.h"
#include "response_cache.h"

enum { TAG_REQUESTS = 1, TAG_RESPONSES = 2 }; /* and abort.h's TAG_ABORT */

struct outgoing {
    uint8_t *bytes;
    MPI_Request *requests;
    int count;
    struct outgoing *next;
};

struct background {
    struct chorus_context *context;
    int rank;
    int size;
    struct name_table pending; /* name -> struct request, submitted and not completed */
    struct negotiator negotiator;
    struct response_cache cache;
    struct executor executor;
    struct outgoing *outgoing;

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
void join_done(void *owner);
/* A fatal error is about to complete handles: later submits fail from now on. */
void executor_fatal_error(void *owner, chorus_status status, const char *message);
/* Moves the user threads' submissions into this thread's tables. Returns true if any. */
bool take_submissions(struct background *background);
/* Completes every handle of this rank with `status` and makes later submits fail with it. */
void fail_everything(struct background *background, chorus_status status, const char *reason);
/* Logs a fatal error, fails everything and ends the thread's loop. */
void fatal(struct background *background, chorus_status status, const char *what);
void clear_unsent(struct background *background);

/* exchange.c */
/* Frees the buffers of sends that completed. With `wait`, blocks until all have; after a fatal
 * error only for a while, then it gives the rest up (see exchange.c). */
void progress_outgoing(struct background *background, bool wait);
/* Sends (or, on rank 0, records) what was submitted since the last time. */
bool flush_requests(struct background *background);
/* Rank 0: takes in every waiting REQUESTS message, answers what is ready, runs it. */
bool coordinate(struct background *background);
/* Other ranks: runs the responses rank 0 sent, in order. */
bool follow(struct background *background);
/* The timeline's negotiation span (a negotiator `resolved` callback). */
void timeline_negotiated(void *context, const char *name, const double *arrivals, int nranks);
void stall_warning_log(void *context, const char *message);

#endif
