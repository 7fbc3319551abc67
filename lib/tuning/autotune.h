/*
 * autotune.h — CHORUS_AUTOTUNE: during the first steps of training, trying the running
 * settings whose rows in the parameter table have autotune candidates (fusion's tensor limit,
 * its threshold and the cycle time), and settling on the settings under which a step's tensors
 * go through fastest (autotune_search.h says what is tried in which order). Autotune changes
 * them in the instance's one copy of the parameters, which every executor reads.
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
#include "../executor/executor.h"
#include "../negotiation/channel.h"
#include "autotune_search.h"

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
    struct channel *channel;
    struct executor *executor;    /* the job's: its notices of other ranks' failures */
    struct chorus_params *params; /* the running settings live here, written by this thread */
    int setting_count;
    size_t settings[AUTOTUNE_SETTINGS_MAX]; /* their rows in param_table */
    unsigned steps_per_trial;
    double start[AUTOTUNE_SETTINGS_MAX];
    /* Counting steps: the same on every rank. */
    struct name_table names_seen; /* until the anchor is found */
    char *anchor;
    int anchor_set; /* the anchor's process set: a name is its set's */
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

/* Sets up from `set` (CHORUS_AUTOTUNE and its companions; their values are rank 0's), whose
 * values autotune then changes. On rank 0 the settings `set` says the user set stay as they
 * are. `other_ranks` (ranks 1 .. size-1, the star's list) must outlive the autotune. Rank 0
 * opens CHORUS_AUTOTUNE_LOG; a log that cannot be opened is a warning. */
void autotune_init(struct autotune *autotune, struct param_set *set, int rank, int size,
                   struct channel *channel, const int *other_ranks, struct executor *executor);
void autotune_release(struct autotune *autotune);

/* After every rank ran `responses` (count of them) without error: counts steps and bytes, and
 * at the end of a trial moves every rank to the next settings. CHORUS_OK, or a failure (rank 0
 * silent beyond CHORUS_TIMEOUT_SECONDS, a peer's failure, no memory) with its text in `error`. */
chorus_status autotune_batch_done(struct autotune *autotune,
                                  const struct wire_response *responses, size_t count,
                                  char *error, size_t error_size);

/* The settings autotune searches (rows with autotune candidates), at most `capacity`, in
 * table order; returns how many. */
int autotune_settings(size_t *settings, int capacity);
/* The name of autotune's log column for a parameter: "fusion_threshold_bytes". */
void autotune_column_name(size_t parameter, char *text, size_t size);

#endif
