/*
 * autotune.h — CHORUS_AUTOTUNE: during the first steps of training, trying fusion's tensor
 * limit, its threshold and the cycle time, and settling on the settings under which a step's
 * tensors go through fastest (autotune_search.h says what is tried in which order).
 *
 * Steps are counted on every rank in the same way from the responses every rank runs in one
 * order: the first tensor name to run twice is the anchor, and a step ends each time it runs.
 * So every rank knows, without a message, that a trial ended after the same list of responses.
 * Rank 0 alone measures (bytes of the trial's responses over the seconds its steps took:
 * Horovod's score), walks the search and writes the log; at the end of each trial it sends the
 * next settings to every rank, which waits for them (one small message) and applies them before
 * it runs the next list. Every rank therefore changes settings between the same two lists,
 * which keeps fusion plans identical everywhere. The torch.distributed backend's operations
 * (CHORUS_OP_ORDERED) are not negotiated and not fused: autotune neither sees nor changes them.
 *
 * A job whose tensor names never repeat (no training loop, or names made up per step) has no
 * steps: after AUTOTUNE_GIVE_UP_RESPONSES responses without the anchor (or without a name that
 * ran twice), every rank returns to the starting settings and autotune ends with a warning.
 */
#ifndef CHORUS_AUTOTUNE_H
#define CHORUS_AUTOTUNE_H

#include "../core/name_table.h"
#include "autotune_search.h"
#include "channel.h"
#include "report.h"
#include "runner.h"

#include <stdio.h>

/* Steps skipped before the first trial (first sight of every tensor, allocations) and before
 * each later one (the step during which settings changed). */
#define AUTOTUNE_FIRST_WARMUP_STEPS 3
#define AUTOTUNE_WARMUP_STEPS 1
#define AUTOTUNE_GIVE_UP_RESPONSES 20000

struct autotune {
    bool on;
    int rank;
    int size;
    struct coord_channel *channel;
    struct runner *runner;
    struct chorus_params *params; /* the online settings live here, written by this thread */
    unsigned steps_per_trial;
    double start[AUTOTUNE_SETTING_COUNT];
    /* Counting steps: the same on every rank. */
    struct name_table names_seen; /* until the anchor is found */
    char *anchor;
    unsigned anchors_seen;   /* in this trial */
    unsigned warmup_steps;   /* of this trial */
    size_t responses_since_anchor;
    bool window_open;
    double window_start;
    double window_bytes;
    unsigned trial; /* counted from 1 */
    /* Rank 0. */
    struct autotune_search search;
    FILE *log;
    const int *other_ranks; /* ranks 1 .. size-1, where rank 0's settings go (the star's) */
    /* Called while a rank waits for rank 0's settings (heartbeats). */
    void (*while_waiting)(void *owner);
    void *waiting_owner;
};

/* Sets up from `params` (CHORUS_AUTOTUNE and its companions; their values are rank 0's).
 * `fixed_mask` (rank 0's): settings the user set, which stay as they are. `other_ranks` (ranks
 * 1 .. size-1, the star's list) must outlive the autotune. Rank 0 opens CHORUS_AUTOTUNE_LOG; a
 * log that cannot be opened is a warning. */
void autotune_init(struct autotune *autotune, struct chorus_params *params, unsigned fixed_mask,
                   int rank, int size, struct coord_channel *channel, const int *other_ranks,
                   struct runner *runner);
void autotune_release(struct autotune *autotune);

/* After every rank ran `responses` (count of them) without error: counts steps and bytes, and
 * at the end of a trial moves every rank to the next settings. A failure (rank 0 silent beyond
 * CHORUS_TIMEOUT_SECONDS, a peer's failure, no memory) goes to `report`. */
void autotune_batch_done(struct autotune *autotune, const struct wire_response *responses,
                         size_t count, struct coord_report *report);

/* The tuned settings that `set` (rank 0's) says the user set (bit per enum autotune_setting). */
unsigned autotune_fixed_settings(const struct param_set *set);

#endif
