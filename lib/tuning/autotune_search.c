/*
 * autotune_search.c — see autotune_search.h.
 */
#include "autotune_search.h"

#include <string.h>

const char *autotune_phase_name(enum autotune_phase phase)
{
    switch (phase) {
    case SEARCH_BASELINE:
        return "baseline";
    case SEARCH_COORDINATE:
        return "search";
    case SEARCH_CONFIRM:
        return "confirm";
    case SEARCH_SETTLED:
        return "settled";
    }
    return "unknown";
}

static bool same_settings(const double *a, const double *b)
{
    return memcmp(a, b, AUTOTUNE_SETTINGS_MAX * sizeof *a) == 0;
}

/* Moves to the next candidate worth a trial: of the current setting, else of the next setting
 * not fixed. Returns false when every setting has been varied. */
static bool next_candidate(struct autotune_search *search)
{
    for (;;) {
        search->candidate++;
        if (search->candidate >= AUTOTUNE_CANDIDATES) {
            if (search->setting >= 0 && search->setting_best_score >
                                            search->best_score * (1 + AUTOTUNE_MARGIN)) {
                search->best[search->setting] = search->setting_best_value;
                search->best_score = search->setting_best_score;
            }
            do
                search->setting++;
            while (search->setting < search->count &&
                   (search->fixed_mask & (1u << search->setting)));
            if (search->setting >= search->count)
                return false;
            search->candidate = -1;
            search->setting_best_value = search->best[search->setting];
            search->setting_best_score = search->best_score;
            continue;
        }
        if (search->candidates[search->setting][search->candidate] !=
            search->best[search->setting])
            return true;
    }
}

static void settle_on(struct autotune_search *search, const double *settings)
{
    memcpy(search->trial, settings, sizeof search->trial);
    search->phase = SEARCH_SETTLED;
}

void autotune_search_start(struct autotune_search *search, int count, const double *start,
                           const double (*candidates)[AUTOTUNE_CANDIDATES], unsigned fixed_mask)
{
    memset(search, 0, sizeof *search);
    search->phase = SEARCH_BASELINE;
    search->count = count < AUTOTUNE_SETTINGS_MAX ? count : AUTOTUNE_SETTINGS_MAX;
    search->fixed_mask = fixed_mask;
    memcpy(search->candidates, candidates, (size_t)search->count * sizeof *candidates);
    memcpy(search->start, start, (size_t)search->count * sizeof *start);
    memcpy(search->best, search->start, sizeof search->best);
    memcpy(search->trial, search->start, sizeof search->trial);
}

bool autotune_search_record(struct autotune_search *search, double score)
{
    switch (search->phase) {
    case SEARCH_BASELINE:
        search->best_score = score;
        search->setting = -1;
        search->candidate = AUTOTUNE_CANDIDATES - 1;
        search->phase = SEARCH_COORDINATE;
        break;
    case SEARCH_COORDINATE:
        if (score > search->setting_best_score) {
            search->setting_best_score = score;
            search->setting_best_value = search->candidates[search->setting][search->candidate];
        }
        break;
    case SEARCH_CONFIRM:
        if (search->confirm_trial % 2 == 0) {
            search->start_total += score;
            search->start_last = score;
        } else {
            search->best_total += score;
            search->best_wins += score > search->start_last;
        }
        search->confirm_trial++;
        if (search->confirm_trial < 2 * AUTOTUNE_CONFIRM_ROUNDS) {
            memcpy(search->trial, search->confirm_trial % 2 == 0 ? search->start : search->best,
                   sizeof search->trial);
            return true;
        }
        settle_on(search, search->best_wins == AUTOTUNE_CONFIRM_ROUNDS &&
                                  search->best_total > search->start_total * (1 + AUTOTUNE_MARGIN)
                              ? search->best
                              : search->start);
        return false;
    case SEARCH_SETTLED:
        return false;
    }
    if (next_candidate(search)) {
        memcpy(search->trial, search->best, sizeof search->trial);
        search->trial[search->setting] = search->candidates[search->setting][search->candidate];
        return true;
    }
    if (same_settings(search->best, search->start)) {
        settle_on(search, search->start);
        return false;
    }
    search->phase = SEARCH_CONFIRM;
    search->confirm_trial = 0;
    memcpy(search->trial, search->start, sizeof search->trial);
    return true;
}
