/*
 * test_autotune.c — CHORUS_AUTOTUNE's search (autotune_search.h) fed made-up scores: it finds
 * the best value of each setting, holds what the user fixed, keeps the starting settings when
 * nothing beats them by the margin, and lets the confirmation undo one lucky trial or a best that
 * loses one of its pairs.
 */
#include "../../lib/coordinator/autotune_search.h"

#include "../common/check_runner.h"

#include <check.h>
#include <math.h>
#include <string.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

static const double defaults[AUTOTUNE_SETTING_COUNT] = {64 * KIB, 128 * MIB, 0};

/* A host where a 256 KiB tensor limit is 10% faster and a 1 ms cycle 5% faster; the threshold
 * does not matter. */
static double host_score(const double *settings)
{
    double score = 100;
    if (settings[AUTOTUNE_FUSION_TENSOR_LIMIT] == 256 * KIB)
        score *= 1.10;
    if (settings[AUTOTUNE_CYCLE_TIME] == 1)
        score *= 1.05;
    return score;
}

/* Runs the search to the end with `score`; returns the trials it took. */
static int run(struct autotune_search *search, unsigned fixed,
               double (*score)(const double *settings, int trial))
{
    autotune_search_start(search, defaults, fixed);
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
    ck_assert(search.trial[AUTOTUNE_FUSION_TENSOR_LIMIT] == 256 * KIB);
    ck_assert(search.trial[AUTOTUNE_FUSION_THRESHOLD] == 128 * MIB);
    ck_assert(search.trial[AUTOTUNE_CYCLE_TIME] == 1);
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
    return settings[AUTOTUNE_CYCLE_TIME] == 5 ? 101 : 100;
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
    if (settings[AUTOTUNE_FUSION_TENSOR_LIMIT] != defaults[AUTOTUNE_FUSION_TENSOR_LIMIT])
        fixed_seen_bad = settings[AUTOTUNE_FUSION_TENSOR_LIMIT];
    return host_score(settings);
}

START_TEST(fixed_settings_are_never_varied)
{
    struct autotune_search search;
    fixed_seen_bad = 0;
    int trials = run(&search, 1u << AUTOTUNE_FUSION_TENSOR_LIMIT, watch_fixed);
    ck_assert(fixed_seen_bad == 0);
    ck_assert(search.trial[AUTOTUNE_FUSION_TENSOR_LIMIT] == 64 * KIB);
    ck_assert(search.trial[AUTOTUNE_CYCLE_TIME] == 1);
    ck_assert_int_eq(trials, 1 + 2 * 3 + 2 * AUTOTUNE_CONFIRM_ROUNDS);
    /* Everything fixed: the baseline alone. */
    trials = run(&search, (1u << AUTOTUNE_SETTING_COUNT) - 1, watch_fixed);
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

START_TEST(candidates_include_the_defaults_and_are_ascending)
{
    for (int s = 0; s < AUTOTUNE_SETTING_COUNT; s++) {
        const double *values = autotune_candidates((enum autotune_setting)s);
        bool has_default = false;
        for (int c = 0; c < AUTOTUNE_CANDIDATES; c++) {
            has_default |= values[c] == defaults[s];
            if (c > 0)
                ck_assert(values[c] > values[c - 1]);
        }
        ck_assert_msg(has_default, "%s", autotune_setting_name((enum autotune_setting)s));
    }
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
    tcase_add_test(tc, candidates_include_the_defaults_and_are_ascending);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
