/*
 * star.h — negotiation by the star protocol (see background.c for how it runs): every rank
 * sends what it has ready to rank 0; rank 0's negotiator answers with responses that every rank
 * runs in the order rank 0 sent them; the response cache shortens both; heartbeats and the
 * liveness watch notice a peer that went silent; a shutdown ends with every rank's BYE.
 * Ready rounds (rounds.h) use its messages for what the rounds cannot carry.
 *
 * The parts below it: the runner (running responses), this rank's pending requests. It reports
 * fatal errors, shutdowns and the end of its messages to the loop (report.h).
 */
#ifndef CHORUS_STAR_H
#define CHORUS_STAR_H

#include "../negotiation/channel.h"
#include "../negotiation/liveness.h"
#include "../negotiation/negotiation.h"
#include "pending.h"
#include "report.h"
#include "../negotiation/response_cache.h"
#include "runner.h"

struct star {
    struct chorus_context *context;
    int rank;
    int size;
    const struct chorus_params *params;
    struct channel *channel;
    struct pending *pending;
    struct runner *runner;
    struct response_cache cache;  /* the same on every rank (response_cache.h) */
    struct negotiator negotiator; /* rank 0 */
    struct liveness liveness;     /* heartbeats and silent peers */
    int *other_ranks;             /* rank 0: ranks 1 .. size-1, where responses go */
    bool rounds_mode;             /* ready rounds carry cached tensors: no heartbeats from 0 */
    bool shutdown_decided;        /* rank 0: some rank asked to shut down */
    int shutdown_origin;
    int byes;                     /* rank 0: ranks that said their last message */
    double last_cycle;            /* when requests or responses last went out */
    double last_stall_check;
    double last_request_probe; /* rank 0, by rounds: when it last looked for requests */
    size_t messages_sent;         /* negotiation's messages (not the rounds'), for the log */
    size_t messages_received;
    struct autotune *autotune;    /* CHORUS_AUTOTUNE: told of every list run (autotune.h) */
};

/* False when out of memory. */
bool star_init(struct star *star, struct chorus_context *context, int rank, int size,
               struct channel *channel, struct pending *pending, struct runner *runner);
void star_release(struct star *star);

/* Sends (or, on rank 0, takes in) what this rank queued since the last time. */
bool star_flush(struct star *star, struct coord_report *report);
/* Rank 0: takes in every waiting REQUESTS message; unless rounds decide the order, answers
 * what is ready, sends it and runs it. While `stopping`, only counts BYEs. `now`: the loop's
 * turn's reading of the clock (here and below). */
bool star_coordinate(struct star *star, bool stopping, double now, struct coord_report *report);
/* The other ranks: runs the responses rank 0 sent, in order. */
bool star_follow(struct star *star, struct coord_report *report);
/* Sends a heartbeat when this rank has been quiet, and reports a watched peer silent beyond
 * CHORUS_TIMEOUT_SECONDS as a fatal error. */
bool star_keep_alive(struct star *star, bool stopping, double now, struct coord_report *report);
/* The executor's `waiting` callback (its owner is the star): while a batch waits on other
 * ranks, heartbeats go on and outgoing messages keep moving. */
void star_while_waiting(void *star);
/* Completes sends (see channel.h). */
void star_progress(struct star *star, bool wait, bool failed);

/* For rounds.c. */
/* Receives one message of `tag` from `source` if one is waiting (*received then true). */
bool star_receive(struct star *star, int source, int tag, struct wire_message *message,
                  int *sender, bool *received, struct coord_report *report);
/* Replaces slot-only responses by the cached descriptions, recording full ones. */
bool star_resolve_cached(struct star *star, struct wire_message *message,
                         struct coord_report *report);
/* Sends responses to every other rank (cached descriptions as their slots). */
bool star_send_responses(struct star *star, const struct wire_response *responses, size_t count,
                         struct coord_report *report);
/* Rank 0, shutting down: appends the error response that tells every rank who shut down (its
 * text also in `reason`). Returns the list, grown, and its new count. */
struct wire_response *star_append_shutdown_notice(struct star *star,
                                                  struct wire_response *responses,
                                                  size_t *count, char *reason,
                                                  size_t reason_size);
/* Runs agreed responses (a failure is fatal). */
void star_execute(struct star *star, const struct wire_response *responses, size_t count,
                  struct coord_report *report);
/* Other ranks, after a RESPONSES message with SHUTDOWN: reports the shutdown with the reason it
 * carries, says BYE to rank 0 and reports the end of its messages. */
void star_say_bye(struct star *star, const struct wire_message *message,
                  struct coord_report *report);

/* The timeline's negotiation span (a negotiator `resolved` callback; its context the
 * timeline). */
void star_timeline_negotiated(void *timeline, int set, const char *name, const double *arrivals,
                              int nranks);

#endif
