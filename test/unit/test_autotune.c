/*
 * test_autotune.c — CHORUS_AUTOTUNE's search (autotune_search.h) fed made-up scores: it finds
 * the best value of each setting, holds what the user fixed, keeps the starting settings when
 * nothing beats them by the margin, and lets the confirmation undo one lucky trial or a best that
 * loses one of its pairs; and the parameter table's autotune rows are ones it can search.
 */
#include "../../lib/tuning/autotune.h"

#include "../common/check_runner.h"

#include <check.h>
#include <math.h>
#include <string.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

/* The settings searched, in the parameter table's order, and their candidates (those of the
 * table when this test was written: the search sees only numbers). */
enum { TENSOR_LIMIT, THRESHOLD, CYCLE_TIME, SETTINGS };
static const double defaults[SETTINGS] = {64 * KIB, 128 * MIB, 0};
static const double candidates[SETTINGS][AUTOTUNE_CANDIDATES] = {
    [TENSOR_LIMIT] = {16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB},
    [THRESHOLD] = {4 * MIB, 16 * MIB, 64 * MIB, 128 * MIB},
    [CYCLE_TIME] = {0, 1, 2.5, 5},
};

/* A host where a 256 KiB tensor limit is 10% faster and a 1 ms cycle 5% faster; the threshold
 * does not matter. */
static double host_score(const double *settings)
{
    double score = 100;
    if (settings[TENSOR_LIMIT] == 256 * KIB)
        score *= 1.10;
    if (settings[CYCLE_TIME] == 1)
        score *= 1.05;
    return score;
}

/* Runs the search to the end with `score`; returns the trials it took. */
static int run(struct autotune_search *search, unsigned fixed,
               double (*score)(const double *settings, int trial))
{
    autotune_search_start(search, SETTINGS, defaults, candidates, fixed);
    int trials = 0;
    bool more = true;
    while (more && trials < 100) {
        trials++;
        more = autotune_search_record(search, score(search->trial, trials));
    }
    return trials;
}

static double steady(const double *settings, int trial)
{
    (void)trial;
    return host_score(settings);
}

START_TEST(finds_the_best_value_of_each_setting)
{
    struct autotune_search search;
    int trials = run(&search, 0, steady);
    ck_assert_int_eq(search.phase, SEARCH_SETTLED);
    ck_assert(search.trial[TENSOR_LIMIT] == 256 * KIB);
    ck_assert(search.trial[THRESHOLD] == 128 * MIB);
    ck_assert(search.trial[CYCLE_TIME] == 1);
    /* The baseline, 3 other values of each setting, then 3 rounds of two in the confirmation. */
    ck_assert_int_eq(trials, 1 + 3 * 3 + 2 * AUTOTUNE_CONFIRM_ROUNDS);
}
END_TEST

static double flat(const double *settings, int trial)
{
    (void)settings;
    (void)trial;
    return 100;
}

START_TEST(keeps_the_start_when_nothing_is_better)
{
    struct autotune_search search;
    int trials = run(&search, 0, flat);
    ck_assert_int_eq(search.phase, SEARCH_SETTLED);
    ck_assert_mem_eq(search.trial, defaults, sizeof defaults);
    ck_assert_int_eq(trials, 1 + 3 * 3); /* no confirmation: the best is the start */
}
END_TEST

/* Within the margin: 1% better is not better. */
static double slightly(const double *settings, int trial)
{
    (void)trial;
    return settings[CYCLE_TIME] == 5 ? 101 : 100;
}

START_TEST(a_gain_within_the_margin_changes_nothing)
{
    struct autotune_search search;
    run(&search, 0, slightly);
    ck_assert_mem_eq(search.trial, defaults, sizeof defaults);
}
END_TEST

static double fixed_seen_bad = 0;

static double watch_fixed(const double *settings, int trial)
{
    (void)trial;
    if (settings[TENSOR_LIMIT] != defaults[TENSOR_LIMIT])
        fixed_seen_bad = settings[TENSOR_LIMIT];
    return host_score(settings);
}

START_TEST(fixed_settings_are_never_varied)
{
    struct autotune_search search;
    fixed_seen_bad = 0;
    int trials = run(&search, 1u << TENSOR_LIMIT, watch_fixed);
    ck_assert(fixed_seen_bad == 0);
    ck_assert(search.trial[TENSOR_LIMIT] == 64 * KIB);
    ck_assert(search.trial[CYCLE_TIME] == 1);
    ck_assert_int_eq(trials, 1 + 2 * 3 + 2 * AUTOTUNE_CONFIRM_ROUNDS);
    /* Everything fixed: the baseline alone. */
    trials = run(&search, (1u << SETTINGS) - 1, watch_fixed);
    ck_assert_int_eq(trials, 1);
    ck_assert_mem_eq(search.trial, defaults, sizeof defaults);
}
END_TEST

/* A noisy host: trial 4 (a 1 MiB limit) happened to land in a fast moment; the settings are
 * no better when tried again. */
static double lucky_once(const double *settings, int trial)
{
    (void)settings;
    return trial == 4 ? 150 : 100;
}

START_TEST(the_confirmation_undoes_a_lucky_trial)
{
    struct autotune_search search;
    int trials = run(&search, 0, lucky_once);
    ck_assert_int_eq(trials, 1 + 3 * 3 + 2 * AUTOTUNE_CONFIRM_ROUNDS);
    ck_assert_mem_eq(search.trial, defaults, sizeof defaults);
}
END_TEST

/* The best so far (a 256 KiB limit, 10% better in the search) loses the second pair of the
 * confirmation: a noisy host, where it is not reliably better. */
static double wavering(const double *settings, int trial)
{
    if (trial == 13)
        return 120; /* the start, second pair */
    return host_score(settings);
}

START_TEST(the_best_must_win_every_pair_of_the_confirmation)
{
    struct autotune_search search;
    int trials = run(&search, 0, wavering);
    ck_assert_int_eq(trials, 1 + 3 * 3 + 2 * AUTOTUNE_CONFIRM_ROUNDS);
    ck_assert_mem_eq(search.trial, defaults, sizeof defaults);
}
END_TEST

/* The parameter table's rows with autotune candidates: running settings (PARAM_RUNTIME, so that
 * the executors read them where autotune writes them), numbers, candidates ascending and
 * including the default, and at most as many as the search holds. */
START_TEST(the_tables_autotune_rows_are_searchable)
{
    size_t settings[AUTOTUNE_SETTINGS_MAX + 1];
    int count = autotune_settings(settings, AUTOTUNE_SETTINGS_MAX + 1);
    ck_assert_int_eq(count, SETTINGS);
    for (int s = 0; s < count; s++) {
        const struct param_definition *row = &param_table[settings[s]];
        ck_assert_msg(row->flags & PARAM_RUNTIME, "%s", row->name);
        ck_assert_msg(row->type == PARAM_BYTES || row->type == PARAM_SECONDS, "%s", row->name);
        struct param_set set;
        char error[256];
        ck_assert_int_eq(params_load(&set, NULL, NULL, error, sizeof error), CHORUS_OK);
        double standard = params_number(&set.values, settings[s]);
        bool has_default = false;
        for (int c = 0; c < AUTOTUNE_CANDIDATES; c++) {
            has_default |= row->autotune_candidates[c] == standard;
            if (c > 0)
                ck_assert(row->autotune_candidates[c] > row->autotune_candidates[c - 1]);
        }
        ck_assert_msg(has_default, "%s", row->name);
        /* the search's order is the table's, which this test's candidates repeat */
        ck_assert_mem_eq(row->autotune_candidates, candidates[s], sizeof candidates[s]);
        ck_assert(standard == defaults[s]);
    }
    char column[64];
    autotune_column_name(settings[THRESHOLD], column, sizeof column);
    ck_assert_str_eq(column, "fusion_threshold_bytes");
    autotune_column_name(settings[CYCLE_TIME], column, sizeof column);
    ck_assert_str_eq(column, "cycle_time_ms");
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("autotune");
    TCase *tc = tcase_create("search");
    tcase_add_test(tc, finds_the_best_value_of_each_setting);
    tcase_add_test(tc, keeps_the_start_when_nothing_is_better);
    tcase_add_test(tc, a_gain_within_the_margin_changes_nothing);
    tcase_add_test(tc, fixed_settings_are_never_varied);
    tcase_add_test(tc, the_confirmation_undoes_a_lucky_trial);
    tcase_add_test(tc, the_best_must_win_every_pair_of_the_confirmation);
    tcase_add_test(tc, the_tables_autotune_rows_are_searchable);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
