/*
 * autotune.c — see autotune.h.
 */
#include "autotune.h"

#include "../core/log.h"
#include "../core/name_table.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define AUTOTUNE_MAGIC 0x4e555441u /* "ATUN" */

/* Rank 0 -> every rank at the end of a trial: what runs from the next list on. */
struct autotune_message {
    uint32_t magic;
    uint32_t trial;   /* the trial that ended */
    uint32_t settled; /* 1: `settings` stay for the rest of the run */
    uint32_t unused;
    double settings[AUTOTUNE_SETTING_COUNT];
};

unsigned autotune_fixed_settings(const struct param_set *set)
{
    static const char *const names[AUTOTUNE_SETTING_COUNT] = {
        [AUTOTUNE_FUSION_TENSOR_LIMIT] = "CHORUS_FUSION_TENSOR_LIMIT",
        [AUTOTUNE_FUSION_THRESHOLD] = "CHORUS_FUSION_THRESHOLD",
        [AUTOTUNE_CYCLE_TIME] = "CHORUS_CYCLE_TIME_MS",
    };
    unsigned mask = 0;
    for (int s = 0; s < AUTOTUNE_SETTING_COUNT; s++) {
        int index = param_index(names[s]);
        /* A tuning file's value is a measured default: autotune starts from it. */
        if (index >= 0 && set->sources[index] != PARAM_SOURCE_DEFAULT &&
            set->sources[index] != PARAM_SOURCE_TUNING_FILE)
            mask |= 1u << s;
    }
    /* Fusion turned off by the user: no tensor limit changes anything. */
    if ((mask & (1u << AUTOTUNE_FUSION_THRESHOLD)) && set->values.fusion_threshold == 0)
        mask |= 1u << AUTOTUNE_FUSION_TENSOR_LIMIT;
    return mask;
}

static void describe(const double *settings, char *text, size_t text_size)
{
    snprintf(text, text_size,
             "fusion of tensors up to %.0f bytes into buffers of up to %.0f bytes, cycle time "
             "%g ms",
             settings[AUTOTUNE_FUSION_TENSOR_LIMIT], settings[AUTOTUNE_FUSION_THRESHOLD],
             settings[AUTOTUNE_CYCLE_TIME]);
}

static void apply(struct autotune *autotune, const double *settings)
{
    size_t limit = (size_t)settings[AUTOTUNE_FUSION_TENSOR_LIMIT];
    size_t threshold = (size_t)settings[AUTOTUNE_FUSION_THRESHOLD];
    autotune->params->fusion_tensor_limit = limit;
    autotune->params->fusion_threshold = threshold;
    autotune->params->cycle_time_ms = settings[AUTOTUNE_CYCLE_TIME];
    struct runner *runner = autotune->runner;
    runner->executor.fusion_tensor_limit = limit;
    runner->executor.fusion_threshold = threshold;
    for (size_t i = 0; i < runner->set_executor_count; i++) {
        runner->set_executors[i]->executor.fusion_tensor_limit = limit;
        runner->set_executors[i]->executor.fusion_threshold = threshold;
    }
}

void autotune_init(struct autotune *autotune, struct chorus_params *params, unsigned fixed_mask,
                   int rank, int size, struct coord_channel *channel, const int *other_ranks,
                   struct runner *runner)
{
    *autotune = (struct autotune){.on = params->autotune,
                                  .rank = rank,
                                  .size = size,
                                  .channel = channel,
                                  .other_ranks = other_ranks,
                                  .runner = runner,
                                  .params = params,
                                  .warmup_steps = AUTOTUNE_FIRST_WARMUP_STEPS,
                                  .trial = 1};
    name_table_init(&autotune->names_seen);
    if (!autotune->on)
        return;
    autotune->steps_per_trial =
        params->autotune_steps_per_trial > 0 ? (unsigned)params->autotune_steps_per_trial : 1;
    autotune->start[AUTOTUNE_FUSION_TENSOR_LIMIT] = (double)params->fusion_tensor_limit;
    autotune->start[AUTOTUNE_FUSION_THRESHOLD] = (double)params->fusion_threshold;
    autotune->start[AUTOTUNE_CYCLE_TIME] = params->cycle_time_ms;
    if (rank != 0)
        return;
    autotune_search_start(&autotune->search, autotune->start, fixed_mask);
    for (int s = 0; s < AUTOTUNE_SETTING_COUNT; s++)
        if (fixed_mask & (1u << s))
            LOG(LOG_INFO, "autotune", "%s stays as the user set it",
                autotune_setting_name((enum autotune_setting)s));
    if (params->autotune_log[0] != '\0') {
        autotune->log = fopen(params->autotune_log, "w");
        if (autotune->log == NULL)
            LOG(LOG_WARNING, "autotune", "cannot write CHORUS_AUTOTUNE_LOG=%s; tuning without it",
                params->autotune_log);
        else
            fprintf(autotune->log, "trial,phase,%s,%s,%s,steps,seconds,bytes,"
                                   "score_bytes_per_second,step_ms\n",
                    autotune_setting_name(AUTOTUNE_FUSION_TENSOR_LIMIT),
                    autotune_setting_name(AUTOTUNE_FUSION_THRESHOLD),
                    autotune_setting_name(AUTOTUNE_CYCLE_TIME));
    }
}

void autotune_release(struct autotune *autotune)
{
    if (autotune->log != NULL)
        fclose(autotune->log);
    free(autotune->anchor);
    name_table_destroy(&autotune->names_seen);
    *autotune = (struct autotune){0};
}

static void finish(struct autotune *autotune)
{
    autotune->on = false;
    name_table_destroy(&autotune->names_seen);
    name_table_init(&autotune->names_seen);
    if (autotune->log != NULL) {
        fclose(autotune->log);
        autotune->log = NULL;
    }
}

/* Rank 0: scores the trial that ended, logs it and picks the next settings into `message`. */
static void decide(struct autotune *autotune, double seconds, struct autotune_message *message)
{
    struct autotune_search *search = &autotune->search;
    double score = seconds > 0 ? autotune->window_bytes / seconds : 0;
    if (autotune->log != NULL)
        fprintf(autotune->log, "%u,%s,%.0f,%.0f,%g,%u,%.6f,%.0f,%.0f,%.3f\n", autotune->trial,
                autotune_phase_name(search->phase), search->trial[AUTOTUNE_FUSION_TENSOR_LIMIT],
                search->trial[AUTOTUNE_FUSION_THRESHOLD], search->trial[AUTOTUNE_CYCLE_TIME],
                autotune->steps_per_trial, seconds, autotune->window_bytes, score,
                seconds * 1e3 / autotune->steps_per_trial);
    bool more = autotune_search_record(search, score);
    *message = (struct autotune_message){.magic = AUTOTUNE_MAGIC,
                                         .trial = autotune->trial,
                                         .settled = more ? 0 : 1};
    memcpy(message->settings, search->trial, sizeof message->settings);
    if (!more && autotune->log != NULL) {
        fprintf(autotune->log, ",settled,%.0f,%.0f,%g,,,,,\n",
                search->trial[AUTOTUNE_FUSION_TENSOR_LIMIT],
                search->trial[AUTOTUNE_FUSION_THRESHOLD], search->trial[AUTOTUNE_CYCLE_TIME]);
        fflush(autotune->log);
    }
}

/* The other ranks: waits for rank 0's message on the trial that ended here, within the bound
 * on waits, and while a peer has not failed. */
static bool receive_decision(struct autotune *autotune, struct autotune_message *message,
                             struct coord_report *report)
{
    double began = monotonic_seconds();
    double bound = autotune->params->timeout_seconds;
    for (;;) {
        uint8_t *bytes = NULL;
        size_t length = 0;
        int sender = -1;
        chorus_status status = autotune->channel->receive(autotune->channel->state, 0,
                                                          CHANNEL_AUTOTUNE, &bytes, &length,
                                                          &sender);
        if (status != CHORUS_OK)
            return report_fail(report, status, "autotune: receiving rank 0's settings failed");
        if (bytes != NULL) {
            bool whole = length == sizeof *message;
            if (whole)
                memcpy(message, bytes, sizeof *message);
            free(bytes);
            if (!whole || message->magic != AUTOTUNE_MAGIC || message->trial != autotune->trial)
                return report_fail(report, CHORUS_ERR_PROTOCOL,
                                   "autotune: rank 0's settings are not for trial %u, which "
                                   "ended here",
                                   autotune->trial);
            return true;
        }
        char failure[1024];
        chorus_status peer =
            executor_peer_failure(&autotune->runner->executor, failure, sizeof failure);
        if (peer != CHORUS_OK)
            return report_fail(report, peer, "%s", failure);
        if (bound > 0 && monotonic_seconds() - began > bound)
            return report_fail(report, CHORUS_ERR_TIMEOUT,
                               "autotune: rank 0 sent no settings for %g s after trial %u "
                               "(CHORUS_TIMEOUT_SECONDS)",
                               bound, autotune->trial);
        if (autotune->while_waiting != NULL)
            autotune->while_waiting(autotune->waiting_owner);
        sched_yield();
    }
}

static void end_trial(struct autotune *autotune, double seconds, struct coord_report *report)
{
    struct autotune_message message;
    if (autotune->rank == 0) {
        decide(autotune, seconds, &message);
        uint8_t *bytes = malloc(sizeof message);
        if (bytes == NULL) {
            report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "autotune: out of memory");
            return;
        }
        memcpy(bytes, &message, sizeof message);
        if (autotune->size > 1 &&
            autotune->channel->post(autotune->channel->state, bytes, sizeof message,
                                    autotune->other_ranks, autotune->size - 1,
                                    CHANNEL_AUTOTUNE) != CHORUS_OK) {
            report_fail(report, CHORUS_ERR_MPI, "autotune: sending the next settings failed");
            return;
        }
        if (autotune->size == 1)
            free(bytes);
    } else if (!receive_decision(autotune, &message, report)) {
        return;
    }
    apply(autotune, message.settings);
    char text[256];
    describe(message.settings, text, sizeof text);
    if (message.settled) {
        LOG(LOG_INFO, "autotune", "settled after %u trials on %s", autotune->trial, text);
        finish(autotune);
        return;
    }
    LOG(LOG_DEBUG, "autotune", "trial %u: %s", autotune->trial + 1, text);
    autotune->trial++;
    autotune->anchors_seen = 0;
    autotune->warmup_steps = AUTOTUNE_WARMUP_STEPS;
    autotune->window_open = false;
}

/* Before steps are known: the first name that runs twice becomes the anchor (tensors that ran
 * once, a broadcast of the parameters before training, say, never mark a step). False when out
 * of memory. */
static bool find_anchor(struct autotune *autotune, const char *name)
{
    if (name_table_find(&autotune->names_seen, name) == NULL)
        return name_table_insert(&autotune->names_seen, name, autotune);
    if ((autotune->anchor = strdup(name)) == NULL)
        return false;
    name_table_destroy(&autotune->names_seen);
    name_table_init(&autotune->names_seen);
    return true;
}

void autotune_batch_done(struct autotune *autotune, const struct wire_response *responses,
                         size_t count, struct coord_report *report)
{
    if (!autotune->on)
        return;
    for (size_t i = 0; i < count; i++) {
        const struct wire_response *response = &responses[i];
        if (response->type != RESPONSE_EXECUTE && response->type != RESPONSE_CACHED)
            continue;
        if (response->request.collective == COLLECTIVE_PROCESS_SET)
            continue;
        const char *name = response->request.name != NULL ? response->request.name : "";
        autotune->window_bytes += (double)response_bytes(response);
        if (autotune->anchor == NULL && !find_anchor(autotune, name)) {
            report_fail(report, CHORUS_ERR_OUT_OF_MEMORY, "autotune: out of memory");
            return;
        }
        if (autotune->anchor != NULL && strcmp(name, autotune->anchor) == 0) {
            autotune->anchors_seen++;
            autotune->responses_since_anchor = 0;
        } else {
            autotune->responses_since_anchor++;
        }
    }
    if (autotune->responses_since_anchor > AUTOTUNE_GIVE_UP_RESPONSES) {
        if (autotune->rank == 0)
            LOG(LOG_WARNING, "autotune",
                "no training steps to measure: %s in %d responses; keeping the starting "
                "settings",
                autotune->anchor != NULL ? "the first tensor to repeat has not run again"
                                         : "no tensor name ran twice",
                AUTOTUNE_GIVE_UP_RESPONSES);
        apply(autotune, autotune->start);
        finish(autotune);
        return;
    }
    double now = monotonic_seconds();
    if (!autotune->window_open) {
        if (autotune->anchors_seen >= autotune->warmup_steps) {
            autotune->window_open = true;
            autotune->window_start = now;
            autotune->window_bytes = 0;
        }
        return;
    }
    if (autotune->anchors_seen >= autotune->warmup_steps + autotune->steps_per_trial)
        end_trial(autotune, now - autotune->window_start, report);
}
