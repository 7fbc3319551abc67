/*
 * background.h — the background thread of a rank: the loop over the coordinator's parts and
 * the state that only the loop changes. The parts, each with its own header, and who calls
 * whom (never the other way):
 *
 *   background.c (the loop, its state, start-up and fatal errors)
 *     -> ordered.h (CHORUS_OP_ORDERED operations: run in call order after a check)
 *     -> transfers.h (the user's sends and receives: posted in call order, polled)
 *     -> rounds.h (ready rounds)  -> star.h (the star protocol: messages, rank 0's answers)
 *     -> runner.h (running agreed responses: the job's and the process sets' executors)
 *     -> pending.h (this rank's requests and handles)
 *   over channel.h (the messages between ranks) and report.h (what parts tell the loop).
 *
 * Private to lib/coordinator and its unit test, which runs the loop with ranks as threads.
 */
#ifndef CHORUS_BACKGROUND_H
#define CHORUS_BACKGROUND_H

#include "../tuning/autotune.h"
#include "coordinator.h"
#include "ordered.h"
#include "rounds.h"
#include "transfers.h"

#include "../negotiation/agreement.h"
#include "../tuning/tuning_file.h"

struct background {
    struct chorus_context *context;
    int rank;
    int size;
    enum coord_state state;     /* changed by coord_enter alone */
    struct coord_report report; /* what the parts reported during this step of the loop */
    struct channel channel;
    struct pending pending;
    struct runner runner;
    struct star star;
    struct rounds rounds;
    struct ordered ordered;
    struct transfers transfers;
    struct tuning_table tuning; /* CHORUS_TUNING_FILE's rows, in use by the selection */
    struct executor_settings settings; /* what every executor of the instance runs with */
    struct autotune autotune;
    double active_at;      /* under the turn: when the loop last did something */
    double turn_at;        /* under the turn: when the latest turn began */
    double peers_checked_at; /* under the turn: when a turn last looked for failure notices */
    bool driven_by_caller; /* under the turn: a user thread turns the loop (coord_drive) */
};

/* Prepares the parts of `background`, whose context, rank, size and channel are set, and whose
 * executor's transport is ready (over MPI, or threads in tests). CHORUS_OK, or why not in
 * `error`. */
chorus_status coord_setup(struct background *background, char *error, size_t error_size);
/* At init, over `agreement` (the channel's steps): whether any rank's parameters failed to
 * parse, and why (CHORUS_ERR_BAD_PARAMETER, naming the first such rank on the others); then
 * every rank takes rank 0's values of the parameters that shape the wire and says in its log,
 * once for each, which of its own it gives up (params_adopt_rank0). startup.c. */
chorus_status coord_agree_on_parameters(struct chorus_context *context,
                                        const struct agreement *agreement, char *error,
                                        size_t error_size);
/* Rank 0: records from now on into `timeline` (NULL: none), negotiation spans included
 * (background.c). */
void coord_adopt_timeline(struct background *background, struct timeline *timeline);
/* Runs the loop until this rank has finished or failed. */
void coord_loop(struct background *background);
/* Frees the parts (not the channel's communicator). */
void coord_teardown(struct background *background);

#endif
