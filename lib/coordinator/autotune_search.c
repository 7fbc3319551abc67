/*
 * autotune_search.c — see autotune_search.h.
 *
 * The candidate values: fusion's tensor limit decides which tensors are copied into a fusion
 * buffer (small ones: one collective for many) and which are reduced in place (large ones: no
 * copies), so its best value moves with the memory bandwidth and the link's latency; the
 * threshold matters once limits are large enough for the fused bytes of a cycle to exceed it;
 * a cycle time above 0 waits to gather more tensors per cycle, worth it where a cycle's fixed
 * cost (a cross-host round trip) is large against a step's compute.
 */
#include "autotune_search.h"

#include <string.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

static const double candidates[AUTOTUNE_SETTING_COUNT][AUTOTUNE_CANDIDATES] = {
    [AUTOTUNE_FUSION_TENSOR_LIMIT] = {16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB},
    [AUTOTUNE_FUSION_THRESHOLD] = {4 * MIB, 16 * MIB, 64 * MIB, 128 * MIB},
    [AUTOTUNE_CYCLE_TIME] = {0, 1, 2.5, 5},
};

const double *autotune_candidates(enum autotune_setting setting)
{
    return candidates[setting];
}

const char *autotune_setting_name(enum autotune_setting setting)
{
    switch (setting) {
    case AUTOTUNE_FUSION_TENSOR_LIMIT:
        return "fusion_tensor_limit_bytes";
    case AUTOTUNE_FUSION_THRESHOLD:
        return "fusion_threshold_bytes";
    case AUTOTUNE_CYCLE_TIME:
        return "cycle_time_ms";
    case AUTOTUNE_SETTING_COUNT:
        break;
    }
    return "unknown";
}

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
    return memcmp(a, b, AUTOTUNE_SETTING_COUNT * sizeof *a) == 0;
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
            while (search->setting < AUTOTUNE_SETTING_COUNT &&
                   (search->fixed_mask & (1u << search->setting)));
            if (search->setting >= AUTOTUNE_SETTING_COUNT)
                return false;
            search->candidate = -1;
            search->setting_best_value = search->best[search->setting];
            search->setting_best_score = search->best_score;
            continue;
        }
        if (candidates[search->setting][search->candidate] != search->best[search->setting])
            return true;
    }
}

static void settle_on(struct autotune_search *search, const double *settings)
{
    memcpy(search->trial, settings, sizeof search->trial);
    search->phase = SEARCH_SETTLED;
}

void autotune_search_start(struct autotune_search *search,
                           const double start[AUTOTUNE_SETTING_COUNT], unsigned fixed_mask)
{
    memset(search, 0, sizeof *search);
    search->phase = SEARCH_BASELINE;
    search->fixed_mask = fixed_mask;
    memcpy(search->start, start, sizeof search->start);
    memcpy(search->best, start, sizeof search->best);
    memcpy(search->trial, start, sizeof search->trial);
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
            search->setting_best_value = candidates[search->setting][search->candidate];
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
        search->trial[search->setting] = candidates[search->setting][search->candidate];
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
