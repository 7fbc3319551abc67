/*
 * autotune_search.h — which online settings CHORUS_AUTOTUNE tries next, given the scores of
 * the trials so far (bytes reduced per second over a trial's steps). Free of MPI and clocks,
 * so unit tests feed it made-up scores.
 *
 * The search is a coordinate search over a few values per setting, then a confirmation:
 *   1. a baseline trial of the starting settings;
 *   2. for each setting not fixed by the user, every other candidate value, the rest held at
 *      the best so far; a value replaces the best only when it scores AUTOTUNE_MARGIN higher;
 *   3. when the best differs from the starting settings, the two alternate for
 *      AUTOTUNE_CONFIRM_ROUNDS pairs of trials, and the best is kept only when it wins every
 *      pair and its total beats the starting settings' by AUTOTUNE_MARGIN: on a noisy host a
 *      setting no better than the start survives this one time in eight at most, and one lucky
 *      trial never moves training onto slower settings.
 * At most 1 + S x (AUTOTUNE_CANDIDATES - 1) + 2 x AUTOTUNE_CONFIRM_ROUNDS trials for S
 * settings. Why not Horovod's Bayesian optimisation: with three settings and a handful of values
 * each, the grid is small enough to walk, and a walk is the same on every run, which a user
 * reading the log can follow. Which settings there are, and their candidates, is the parameter
 * table's (params_table.c: the rows with autotune candidates); the search sees only numbers.
 */
#ifndef CHORUS_AUTOTUNE_SEARCH_H
#define CHORUS_AUTOTUNE_SEARCH_H

#include <stdbool.h>

#define AUTOTUNE_SETTINGS_MAX 8
#define AUTOTUNE_CANDIDATES 4
#define AUTOTUNE_MARGIN 0.02
#define AUTOTUNE_CONFIRM_ROUNDS 3

enum autotune_phase { SEARCH_BASELINE, SEARCH_COORDINATE, SEARCH_CONFIRM, SEARCH_SETTLED };

struct autotune_search {
    enum autotune_phase phase;
    int count;           /* settings searched */
    unsigned fixed_mask; /* bit s: setting s keeps its starting value */
    double candidates[AUTOTUNE_SETTINGS_MAX][AUTOTUNE_CANDIDATES]; /* each smallest first */
    double start[AUTOTUNE_SETTINGS_MAX];
    double best[AUTOTUNE_SETTINGS_MAX];
    double trial[AUTOTUNE_SETTINGS_MAX]; /* what runs now */
    double best_score;
    int setting;   /* SEARCH_COORDINATE: the setting being varied */
    int candidate; /* its candidate value being tried */
    double setting_best_value, setting_best_score;
    int confirm_trial; /* SEARCH_CONFIRM: even trials run `start`, odd ones `best` */
    double start_total, best_total;
    double start_last; /* the score of the trial of `start` just before */
    int best_wins;     /* pairs in which `best` scored higher */
};

const char *autotune_phase_name(enum autotune_phase phase);

/* Starts a search over `count` settings (at most AUTOTUNE_SETTINGS_MAX) at `start` (the first
 * trial runs it), trying `candidates[s]` for setting s; settings in `fixed_mask` are never
 * varied. */
void autotune_search_start(struct autotune_search *search, int count, const double *start,
                           const double (*candidates)[AUTOTUNE_CANDIDATES], unsigned fixed_mask);

/* Records the score of the trial that ran (search->trial) and moves to the next one. Returns
 * false once settled: search->trial then holds the settings chosen for the rest of the run. */
bool autotune_search_record(struct autotune_search *search, double score);

#endif
